package engine

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// define plans and installs a transform in one transaction, as Apply does.
func define(t *testing.T, ctx context.Context, conn *pgx.Conn, cat catalog.Catalog, sql string) (int64, *Plan) {
	t.Helper()
	sts, err := ParseStatements(sql)
	if err != nil {
		t.Fatalf("parse %q: %v", sql, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	st := sts[0]
	p, err := PlanCreate(ctx, tx, cat.Schema, "public", &st)
	if err != nil {
		t.Fatalf("plan %q: %v", sql, err)
	}
	raw, _ := p.Encode()
	id, err := cat.Insert(ctx, tx, &catalog.Transform{Schema: "public", Name: st.Name, Definition: st.Query.SQL,
		Shape: p.Shape, Plan: raw, SourceTable: p.Sources[0].From, SourceOID: p.Sources[0].OID})
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(ctx, tx, p, id); err != nil {
		t.Fatalf("install %q: %v", sql, err)
	}
	raw, _ = p.Encode()
	if err := cat.SetPlan(ctx, tx, id, raw); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return id, p
}

// allKeys lists, per source, every key the build and rebuild phases walk.
func allKeys(t *testing.T, ctx context.Context, a *Applier) [][][]string {
	out := make([][][]string, len(a.Plan.Sources))
	_, phases := a.Phases()
	for phase := 0; phase < phases; phase++ {
		var cur []string
		for {
			src, ks, err := a.Enumerate(ctx, phase, cur, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(ks) == 0 {
				break
			}
			out[src] = append(out[src], ks...)
			cur = ks[len(ks)-1]
		}
	}
	return out
}

func mustEqual(t *testing.T, ctx context.Context, conn *pgx.Conn, p *Plan, when string) {
	t.Helper()
	d, err := selfcheck.Compare(ctx, conn, pgx.Identifier{p.Target.Schema, p.Target.Name}, p.Visible, p.QuerySQL())
	if err != nil {
		t.Fatalf("%s: compare: %v", when, err)
	}
	if !d.Equal() {
		t.Fatalf("%s: target %s differs from its query: missing %d %v, extra %d %v", when, p.Target.Name,
			d.Missing, d.MissingSample, d.Extra, d.ExtraSample)
	}
}

// TestApplyConverges drives the re-derive SQL directly: random writes, then
// re-derive exactly the touched keys, then compare target and query.
func TestApplyConverges(t *testing.T) {
	// 0: the statements for this server (MERGE on 15+); 140000: the ones
	// for servers before 15.
	for _, version := range []int{0, 140000} {
		t.Run(fmt.Sprint("version=", version), func(t *testing.T) { testApplyConverges(t, version) })
	}
}

func testApplyConverges(t *testing.T, version int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cat := catalog.New("trellis")
	if err := cat.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	// src has a two-column key; isrc and ssrc one integer column (the
	// IntKey path: keys sent as one array, sorted and de-duplicated).
	if _, err := conn.Exec(ctx, `CREATE TABLE src (a int, b text, g int, v numeric, f float8, j jsonb, PRIMARY KEY (a, b));
		CREATE TABLE isrc (id bigint PRIMARY KEY, g int, v numeric, k int NOT NULL);
		CREATE TABLE ssrc (id smallint PRIMARY KEY, g int, v numeric)`); err != nil {
		t.Fatal(err)
	}
	defs := []string{
		`CREATE TRANSFORM rows1 AS SELECT s.a, upper(b) AS ub, v * 2 AS v2, j FROM src s WHERE g IS DISTINCT FROM 3`,
		`CREATE TRANSFORM agg1 AS SELECT g, count(*) AS n, count(v) AS nv, sum(v) AS sv, avg(a) AS aa, min(b) AS mb, max(f) AS mf, sum(f) AS sf, avg(v) AS av FROM src WHERE a % 7 <> 0 GROUP BY g`,
		`CREATE TRANSFORM agg2 AS SELECT count(*) AS n, sum(a) AS sa, max(v) AS mv FROM src`,
		`CREATE TRANSFORM agg3 AS SELECT g % 3 AS m, b, sum(a) AS sa FROM src GROUP BY 1, b`,
		`CREATE TRANSFORM agg4 AS SELECT g, v > 2 AS big, min(v) AS lo, max(v) AS hi, min(b) AS mb, max(upper(b)) AS mu FROM src GROUP BY g, 2`,
		`CREATE TRANSFORM agg5 AS SELECT min(f) AS lo, max(b) AS hb, max(a) AS ha FROM src WHERE g IS NOT NULL`,
		`CREATE TRANSFORM agg6 AS SELECT g, min(v) AS lo, max(v) AS hi, count(*) AS n FROM src GROUP BY g`,
		`CREATE TRANSFORM agg7 AS SELECT b, min(v) AS lo, max(v) AS hi FROM src GROUP BY b`,
		`CREATE TRANSFORM irows AS SELECT id, g, v + 1 AS v1 FROM isrc WHERE g IS DISTINCT FROM 2`,
		`CREATE TRANSFORM iagg AS SELECT g, count(*) AS n, sum(v) AS sv, min(v) AS lo FROM isrc WHERE id % 5 <> 0 GROUP BY g`,
		`CREATE TRANSFORM srows AS SELECT id, v FROM ssrc WHERE g IS NOT NULL`,
		// Group keys that cannot be NULL: the target follows by MERGE.
		`CREATE TRANSFORM kagg AS SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS sv, avg(v) AS av, max(v) AS hi, min(g) AS lo FROM isrc GROUP BY k`,
		`CREATE TRANSFORM sagg AS SELECT g, max(v) AS hi FROM ssrc GROUP BY g`,
		// ADR 0031: grouping sets over the IntKey path, with the empty set
		// (upsert) and without it over NOT NULL keys (MERGE); statistics.
		`CREATE TRANSFORM iroll AS SELECT k, g, count(*) AS n, sum(v) AS sv, min(v) AS lo, var_samp(v) AS vs, GROUPING(k, g) AS gk FROM isrc GROUP BY ROLLUP (k, g)`,
		`CREATE TRANSFORM kset AS SELECT k, count(*) AS n, max(v) AS hi, GROUPING(k) AS gk FROM isrc GROUP BY k`,
		`CREATE TRANSFORM scube AS SELECT g, b, stddev(v) AS sd, var_pop(a) AS vp, corr(a, f ORDER BY a, b) AS c,
			percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS med, count(*) AS n FROM src GROUP BY CUBE (g, b)`,
		`CREATE TRANSFORM sstats AS SELECT regr_count(a, f) AS rc, stddev_pop(v) AS sp, covar_samp(a, f ORDER BY a, b) AS cs FROM src`,
	}
	cfg, _ := pgx.ParseConfig(dsn)
	var appliers []*Applier
	for _, d := range defs {
		id, p := define(t, ctx, conn, cat, d)
		a, err := NewApplier(ctx, cfg, cat, id, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if version != 0 {
			a.Stmts = BuildStatements(p, version)
			for _, q := range a.Stmts.Setup {
				if _, err := a.Conn().Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
		}
		defer a.Close(ctx)
		if intSource := p.Sources[0].Name != "src"; a.Stmts.IntKey != intSource {
			t.Fatalf("%s: IntKey = %v, want %v", p.Target.Name, a.Stmts.IntKey, intSource)
		}
		for _, st := range a.Stmts.Apply {
			merged := strings.HasPrefix(st.SQL, "MERGE")
			if want := version == 0 && (p.Target.Name == "kagg" || p.Target.Name == "agg7" || p.Target.Name == "kset"); st.Role == RoleTarget && merged != want {
				t.Fatalf("%s: target step by MERGE = %v, want %v", p.Target.Name, merged, want)
			}
		}
		appliers = append(appliers, a)
		mustEqual(t, ctx, conn, p, "empty "+p.Target.Name)
	}
	rng := rand.New(rand.NewSource(1))
	val := func() string {
		switch rng.Intn(6) {
		case 0:
			return "NULL"
		default:
			return fmt.Sprint(rng.Intn(5))
		}
	}
	// Integer keys far apart and of both signs, so that the bounds of a
	// batch span most of the key space and text order differs from number
	// order.
	ikey := func() int64 { return []int64{-1 << 40, -7, 0, 3, 12, 100, 1 << 40}[rng.Intn(7)] + int64(rng.Intn(4)) }
	for round := 0; round < 30; round++ {
		touched := map[string][]string{}
		itouched, stouched := map[string][]string{}, map[string][]string{}
		var stmts []string
		for i := 0; i < 1+rng.Intn(20); i++ {
			id, sid := ikey(), rng.Intn(60)-30
			itouched[fmt.Sprint(id)] = []string{fmt.Sprint(id)}
			stouched[fmt.Sprint(sid)] = []string{fmt.Sprint(sid)}
			switch rng.Intn(4) {
			case 0, 1:
				stmts = append(stmts,
					fmt.Sprintf(`INSERT INTO isrc VALUES (%d, %s, %s, %d) ON CONFLICT (id) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v, k = EXCLUDED.k`, id, val(), val(), rng.Intn(3)),
					fmt.Sprintf(`INSERT INTO ssrc VALUES (%d, %s, %s) ON CONFLICT (id) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v`, sid, val(), val()))
			case 2:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM isrc WHERE id = %d`, id), fmt.Sprintf(`DELETE FROM ssrc WHERE id = %d`, sid))
			case 3:
				nid, nsid := ikey(), rng.Intn(60)-30
				itouched[fmt.Sprint(nid)] = []string{fmt.Sprint(nid)}
				stouched[fmt.Sprint(nsid)] = []string{fmt.Sprint(nsid)}
				stmts = append(stmts,
					fmt.Sprintf(`UPDATE isrc SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM isrc WHERE id = %d)`, nid, id, nid),
					fmt.Sprintf(`UPDATE ssrc SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM ssrc WHERE id = %d)`, nsid, sid, nsid))
			}
		}
		for i := 0; i < 1+rng.Intn(40); i++ {
			a, b := rng.Intn(30), []string{"x", "y", "", "z"}[rng.Intn(4)]
			touched[fmt.Sprint(a, "|", b)] = []string{fmt.Sprint(a), b}
			switch rng.Intn(4) {
			case 0, 1:
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO src VALUES (%d, '%s', %s, %s, %s, '{"k": %d}') ON CONFLICT (a, b) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v, f = EXCLUDED.f`,
					a, b, val(), val(), val(), rng.Intn(3)))
			case 2:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM src WHERE a = %d AND b = '%s'`, a, b))
			case 3:
				na := rng.Intn(30)
				touched[fmt.Sprint(na, "|", b)] = []string{fmt.Sprint(na), b}
				stmts = append(stmts, fmt.Sprintf(`UPDATE src SET a = %d WHERE a = %d AND b = '%s' AND NOT EXISTS (SELECT 1 FROM src WHERE a = %d AND b = '%s')`, na, a, b, na, b))
			}
		}
		if _, err := conn.Exec(ctx, strings.Join(stmts, ";")); err != nil {
			t.Fatal(err)
		}
		// The integer keys twice: a batch may name a key more than once.
		list := func(m map[string][]string, times int) [][]string {
			var out [][]string
			for range times {
				for _, k := range m {
					out = append(out, k)
				}
			}
			return out
		}
		batches := map[string][][]string{"src": list(touched, 1), "isrc": list(itouched, 2), "ssrc": list(stouched, 2)}
		for _, a := range appliers {
			keys := batches[a.Plan.Sources[0].Name]
			if _, err := a.Apply(ctx, Batch{Keys: [][][]string{keys}}); err != nil {
				t.Fatalf("round %d apply %s: %v", round, a.Plan.Target.Name, err)
			}
			mustEqual(t, ctx, conn, a.Plan, fmt.Sprintf("round %d", round))
		}
	}
	// A group emptied by one batch is deleted (kagg: by its MERGE).
	var gone []string
	if err := conn.QueryRow(ctx, `WITH d AS (DELETE FROM isrc WHERE k = 0 RETURNING id) SELECT array_agg(id::text) FROM d`).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	if len(gone) == 0 {
		t.Fatal("no isrc row with k = 0 to delete: the test no longer empties a group")
	}
	for _, a := range appliers {
		if a.Plan.Sources[0].Name != "isrc" {
			continue
		}
		var keys [][]string
		for _, id := range gone {
			keys = append(keys, []string{id})
		}
		if _, err := a.Apply(ctx, Batch{Keys: [][][]string{keys}}); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, ctx, conn, a.Plan, "after emptying group k = 0")
	}
	// Reconcile repairs an aggregate target that someone else wrote.
	for _, a := range appliers {
		if a.Plan.Shape != ShapeAggregate {
			continue
		}
		if _, err := conn.Exec(ctx, "UPDATE "+a.Plan.Target.Ident()+" SET "+ident(a.Plan.Aggs[0].Name)+" = 12345"); err != nil {
			t.Fatal(err)
		}
		switch {
		case len(a.Plan.Groups) > 0 && a.Plan.groupsNotNull():
			// A group's key cannot be NULL there: a group someone deleted
			// must come back.
			if _, err := conn.Exec(ctx, "DELETE FROM "+a.Plan.Target.Ident()+" WHERE ctid = (SELECT min(ctid) FROM "+a.Plan.Target.Ident()+")"); err != nil {
				t.Fatal(err)
			}
		case len(a.Plan.Groups) > 0:
			if _, err := conn.Exec(ctx, "INSERT INTO "+a.Plan.Target.Ident()+" ("+ident(a.Plan.Groups[0].Name)+", "+ident(RowsCol)+") VALUES (NULL, 7) ON CONFLICT DO NOTHING"); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, ctx, conn, a.Plan, "after reconcile")
	}
	// Rebuild from scratch (all source and stored keys) is a no-op now.
	for _, a := range appliers {
		n, err := a.Apply(ctx, Batch{Keys: allKeys(t, ctx, a)})
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: full re-derive of a converged target wrote %d rows, want 0", a.Plan.Target.Name, n)
		}
	}
}

// TestEnumerateKeyOrder walks the source and the stored identities in
// small pages across digit boundaries: paging must follow the key's own
// order, not its text form.
func TestEnumerateKeyOrder(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cat := catalog.New("trellis")
	if err := cat.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE nums (a int, b int, v int, PRIMARY KEY (a, b));
		INSERT INTO nums SELECT g / 3, g % 3, g FROM generate_series(1, 1000) g`); err != nil {
		t.Fatal(err)
	}
	cfg, _ := pgx.ParseConfig(dsn)
	for _, def := range []string{
		`CREATE TRANSFORM n_rows AS SELECT a, b, v FROM nums`,
		`CREATE TRANSFORM n_agg AS SELECT b, count(*) AS n FROM nums GROUP BY b`,
	} {
		id, p := define(t, ctx, conn, cat, def)
		a, err := NewApplier(ctx, cfg, cat, id, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(ctx)
		keys := allKeys(t, ctx, a)
		if len(keys[0]) != 1000 {
			t.Fatalf("%s: source walk found %d keys, want 1000", p.Target.Name, len(keys[0]))
		}
		if _, err := a.Apply(ctx, Batch{Keys: keys}); err != nil {
			t.Fatal(err)
		}
		if got := len(allKeys(t, ctx, a)[0]); got != 2000 {
			t.Fatalf("%s: source + stored walk found %d keys, want 2000", p.Target.Name, got)
		}
		mustEqual(t, ctx, conn, p, "after walking every key")
	}
}
