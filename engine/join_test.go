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
)

// catalogDB is a fresh database with the instance catalog: its DSN, a
// connection closed with the test, and the catalog.
func catalogDB(t *testing.T, ctx context.Context) (string, *pgx.Conn, catalog.Catalog) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	cat := catalog.New("trellis")
	if err := cat.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	return dsn, conn, cat
}

// built defines a transform, builds it by walking every build phase as
// the worker does, checks it equals its query, and returns its applier
// (closed with the test).
func built(t *testing.T, ctx context.Context, dsn string, conn *pgx.Conn, cat catalog.Catalog, def string) *Applier {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	id, p := define(t, ctx, conn, cat, def)
	a, err := NewApplier(ctx, cfg, cat, id, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	if _, err := a.Apply(ctx, Batch{Keys: allKeys(t, ctx, a)}); err != nil {
		t.Fatalf("build %s: %v", p.Target.Name, err)
	}
	mustEqual(t, ctx, conn, p, "after the build")
	return a
}

// joinDefs are the join shapes TestJoinsConverge keeps exact: every join
// kind, comma joins, USING, self-joins, nested outer joins, a filter on
// the preserved side, and aggregates over joins.
var joinDefs = []string{
	`CREATE TRANSFORM j_inner AS SELECT f.id AS fid, f.v, d.name FROM fact f JOIN dim d ON d.id = f.d1`,
	`CREATE TRANSFORM j_comma AS SELECT f.v, d.name, e.w FROM fact f, dim d, dim2 e WHERE d.id = f.d1 AND e.a = f.d2 AND e.b = f.s AND f.v > 3`,
	`CREATE TRANSFORM j_left AS SELECT f.id, d.name, d.r + f.v AS rv FROM fact f LEFT JOIN dim d ON d.id = f.d1`,
	`CREATE TRANSFORM j_right AS SELECT d.id, d.name, f.v FROM fact f RIGHT JOIN dim d ON d.id = f.d1 AND f.v > 0`,
	`CREATE TRANSFORM j_full AS SELECT f.id AS fid, d.id AS did, coalesce(f.v, -1) AS v FROM fact f FULL JOIN dim d ON d.id = f.d1`,
	`CREATE TRANSFORM j_cross AS SELECT d.name, e.w FROM dim d CROSS JOIN dim2 e WHERE e.w > 50`,
	`CREATE TRANSFORM j_self AS SELECT a.id, b.id AS bid, b.v FROM fact a JOIN fact b ON b.id = a.v`,
	`CREATE TRANSFORM j_using AS SELECT fact.v, dim.name FROM fact JOIN dim USING (id)`,
	`CREATE TRANSFORM j_nested AS SELECT f.id, d.name, e.w FROM fact f LEFT JOIN dim d ON d.id = f.d1 LEFT JOIN dim2 e ON e.a = d.r AND e.b = f.s`,
	`CREATE TRANSFORM j_left_where AS SELECT f.id, d.name FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE f.v > 2`,
	`CREATE TRANSFORM j_agg AS SELECT d.name, count(*) AS n, sum(f.v) AS s, min(f.v) AS lo, max(e.w) AS hi
	   FROM fact f JOIN dim d ON d.id = f.d1 LEFT JOIN dim2 e ON e.a = f.d2 AND e.b = f.s GROUP BY d.name`,
	`CREATE TRANSFORM j_agg_one AS SELECT count(*) AS n, sum(d.r) AS rs FROM fact f LEFT JOIN dim d ON d.id = f.d1`,
	`CREATE TRANSFORM j_derived AS SELECT s.name, s.vv, e.w FROM (SELECT d.name, f.v * 2 AS vv, f.d2, f.s FROM fact f, dim d
	   WHERE d.id = f.d1 AND f.v > 1) AS s JOIN dim2 e ON e.a = s.d2 AND e.b = s.s ORDER BY 1`,
	`CREATE TRANSFORM j_derived_agg AS SELECT nm, yr, sum(vol) AS revenue FROM (SELECT d.name AS nm, d.r AS yr, f.v * 3 AS vol
	   FROM fact f, dim d WHERE d.id = f.d1) AS x GROUP BY nm, yr ORDER BY nm`,
	`CREATE TRANSFORM j_having AS SELECT d.name, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name HAVING count(*) > 3`,
	`CREATE TRANSFORM j_composed AS SELECT f.d2, 100.00 * sum(CASE WHEN f.s = 'x' THEN f.v ELSE 0 END) / nullif(sum(f.v), 0) AS share,
	   count(*) + 1 AS n1, f.d2 * max(f.v) AS dm FROM fact f GROUP BY f.d2`,
	`CREATE TRANSFORM j_aggs AS SELECT f.d2, bool_and(f.v > 3) AS ba, bool_or(f.v > 5) AS bo, every(f.v > 0) AS ev, bit_and(f.v) AS ban,
	   bit_or(f.v) AS bor, string_agg(f.s, ',' ORDER BY f.s, f.id) AS sa, array_agg(f.id ORDER BY f.id) AS aa, jsonb_agg(f.v ORDER BY f.id) AS ja,
	   count(DISTINCT f.v) AS cd, sum(f.v) FILTER (WHERE f.s = 'x') AS sx, count(*) FILTER (WHERE f.v > 4) AS c4 FROM fact f GROUP BY f.d2`,
	`CREATE TRANSFORM j_jobj AS SELECT d.r, jsonb_object_agg(f.id, f.v) AS o, avg(f.v::float8) AS fa FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.r`,
	`CREATE TRANSFORM j_distinct AS SELECT DISTINCT d.name, f.d2 FROM fact f JOIN dim d ON d.id = f.d1`,
	`CREATE TRANSFORM j_having_one AS SELECT count(*) AS n, sum(v) AS s FROM fact HAVING count(*) > 50`,
	`CREATE TRANSFORM j_promo AS SELECT 100.00 * sum(CASE WHEN d.name LIKE 'n1%' THEN f.v ELSE 0 END) / nullif(sum(f.v), 0) AS promo
	   FROM fact f, dim d WHERE d.id = f.d1`,
	`CREATE TRANSFORM j_star AS SELECT * FROM dim2`,
	`CREATE TRANSFORM j_tstar AS SELECT f.*, d.name FROM fact f JOIN dim d ON d.id = f.d1`,
	`CREATE TRANSFORM j_star_using AS SELECT * FROM fact JOIN dim USING (id)`,
	`CREATE TRANSFORM j_group_expr AS SELECT d.name || '!' AS bang, count(*) AS n FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name`,
	`CREATE TRANSFORM j_hidden_group AS SELECT count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name, f.d2`,
	`CREATE TRANSFORM j_hidden_group_having AS SELECT sum(f.v) AS s FROM fact f GROUP BY f.d2 HAVING count(*) > 5`,
	`CREATE TRANSFORM j_anti AS SELECT f.id, f.v FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.id IS NULL`,
	`CREATE TRANSFORM j_left_filter AS SELECT f.id, d.name FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.name IS DISTINCT FROM 'n1'`,
	`CREATE TRANSFORM j_left_then_inner AS SELECT f.id, d.r, e.w FROM fact f LEFT JOIN dim d ON d.id = f.d1 JOIN dim2 e ON e.a = coalesce(d.r, 0) AND e.b = f.s`,
	`CREATE TRANSFORM j_right_filter AS SELECT d.id, f.v FROM fact f RIGHT JOIN dim d ON d.id = f.d1 WHERE f.v IS NULL OR f.v > 4`,
	`CREATE TRANSFORM j_full_filter AS SELECT f.id AS fid, d.id AS did FROM fact f FULL JOIN dim d ON d.id = f.d1 WHERE f.v IS NULL OR d.r > 1`,
	`CREATE TRANSFORM j_anti_agg AS SELECT f.d2, count(*) AS n FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.id IS NULL GROUP BY f.d2`,
	`CREATE TRANSFORM j_nested_filter AS SELECT f.id, d.name, e.w FROM fact f LEFT JOIN dim d ON d.id = f.d1 LEFT JOIN dim2 e ON e.a = d.r AND e.b = f.s WHERE e.w IS NULL`,
	`CREATE TRANSFORM j_agg_full AS SELECT d.r, count(f.id) AS n, avg(f.v) AS av FROM fact f FULL JOIN dim d ON d.id = f.d1 GROUP BY d.r`,
	// ADR 0031: statistics, ordered-set and user-defined aggregates
	// (recomputed), grouping sets (a ledger row per set).
	`CREATE TRANSFORM j_stats AS SELECT f.d2, corr(f.v, d.r ORDER BY f.id) AS c, regr_slope(f.v, d.r ORDER BY f.id) AS rs,
	   variance(f.v) AS va, stddev_pop(d.r) AS sp, regr_count(f.v, d.r) AS rc, my_sum(f.v) AS ms,
	   percentile_cont(0.5) WITHIN GROUP (ORDER BY f.v) AS med, mode() WITHIN GROUP (ORDER BY d.name) AS mo
	   FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY f.d2`,
	`CREATE TRANSFORM j_rollup AS SELECT d.name, f.d2, count(*) AS n, sum(f.v) AS s, min(f.v) AS lo, stddev(f.v) AS sd,
	   GROUPING(d.name, f.d2) AS gg FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY ROLLUP (d.name, f.d2)`,
	`CREATE TRANSFORM j_cube_having AS SELECT d.r, f.s, count(*) AS n, max(f.v) AS hi, percentile_disc(0.5) WITHIN GROUP (ORDER BY f.v) AS md
	   FROM fact f LEFT JOIN dim d ON d.id = f.d1 GROUP BY CUBE (d.r, f.s) HAVING count(*) > 2`,
	`CREATE TRANSFORM j_sets_one AS SELECT f.s, count(*) AS n, avg(f.v) AS a, coalesce(f.s, 'all') AS label
	   FROM fact f GROUP BY GROUPING SETS ((f.s), ())`,
}

// TestJoinsConverge writes randomly to every table of each join, the
// dimensions included (deletes, join-column and key updates), re-derives
// exactly the touched keys, and compares each target with its query.
func TestJoinsConverge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `
		CREATE TABLE fact (id int PRIMARY KEY, d1 int, d2 int, s text, v int);
		CREATE TABLE dim (id int PRIMARY KEY, name text, r int);
		CREATE TABLE dim2 (a int, b text, w int, PRIMARY KEY (a, b));
		CREATE INDEX ON fact (d1); CREATE INDEX ON fact (d2, s); CREATE INDEX ON fact (v);
		CREATE AGGREGATE my_sum(int) (stype = int8, sfunc = int4_sum);
		INSERT INTO dim SELECT g, 'n' || (g % 4), g % 5 FROM generate_series(1, 12) g;
		INSERT INTO dim2 SELECT g, b, g * 7 % 100 FROM generate_series(0, 5) g, unnest(ARRAY['x', 'y']) b;
		INSERT INTO fact SELECT g, nullif(g % 14, 13), g % 7, (ARRAY['x', 'y', NULL])[1 + g % 3], g % 9 FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}
	var appliers []*Applier
	for _, def := range joinDefs {
		appliers = append(appliers, built(t, ctx, dsn, conn, cat, def))
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	seed := rng.Int63()
	rng = rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	null := func(v string) string {
		if rng.Intn(6) == 0 {
			return "NULL"
		}
		return v
	}
	for round := 0; round < 25; round++ {
		touched := map[string]map[string][]string{"fact": {}, "dim": {}, "dim2": {}}
		touch := func(table string, key ...string) { touched[table][strings.Join(key, "|")] = key }
		var stmts []string
		for i := 0; i < 1+rng.Intn(6); i++ {
			id := rng.Intn(70) + 1
			touch("fact", fmt.Sprint(id))
			switch rng.Intn(5) {
			case 0, 1:
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO fact VALUES (%d, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET d1 = EXCLUDED.d1, d2 = EXCLUDED.d2, s = EXCLUDED.s, v = EXCLUDED.v`,
					id, null(fmt.Sprint(rng.Intn(15))), null(fmt.Sprint(rng.Intn(7))), null([]string{"'x'", "'y'"}[rng.Intn(2)]), null(fmt.Sprint(rng.Intn(70)))))
			case 2:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM fact WHERE id = %d`, id))
			case 3:
				stmts = append(stmts, fmt.Sprintf(`UPDATE fact SET d1 = %s WHERE id = %d`, null(fmt.Sprint(rng.Intn(15))), id))
			case 4:
				nid := rng.Intn(70) + 1
				touch("fact", fmt.Sprint(nid))
				stmts = append(stmts, fmt.Sprintf(`UPDATE fact SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM fact WHERE id = %d)`, nid, id, nid))
			}
		}
		for i := 0; i < rng.Intn(3); i++ {
			id := rng.Intn(15)
			touch("dim", fmt.Sprint(id))
			switch rng.Intn(4) {
			case 0:
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO dim VALUES (%d, %s, %s) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, r = EXCLUDED.r`,
					id, null(fmt.Sprintf("'n%d'", rng.Intn(5))), null(fmt.Sprint(rng.Intn(6)))))
			case 1:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM dim WHERE id = %d`, id))
			case 2:
				stmts = append(stmts, fmt.Sprintf(`UPDATE dim SET r = %s WHERE id = %d`, null(fmt.Sprint(rng.Intn(6))), id))
			case 3:
				nid := rng.Intn(15)
				touch("dim", fmt.Sprint(nid))
				stmts = append(stmts, fmt.Sprintf(`UPDATE dim SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM dim WHERE id = %d)`, nid, id, nid))
			}
		}
		for i := 0; i < rng.Intn(3); i++ {
			a, b := rng.Intn(7), []string{"x", "y"}[rng.Intn(2)]
			touch("dim2", fmt.Sprint(a), b)
			switch rng.Intn(3) {
			case 0:
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO dim2 VALUES (%d, '%s', %s) ON CONFLICT (a, b) DO UPDATE SET w = EXCLUDED.w`, a, b, null(fmt.Sprint(rng.Intn(100)))))
			case 1:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM dim2 WHERE a = %d AND b = '%s'`, a, b))
			case 2:
				na := rng.Intn(7)
				touch("dim2", fmt.Sprint(na), b)
				stmts = append(stmts, fmt.Sprintf(`UPDATE dim2 SET a = %d WHERE a = %d AND b = '%s' AND NOT EXISTS (SELECT 1 FROM dim2 WHERE a = %d AND b = '%s')`, na, a, b, na, b))
			}
		}
		if len(stmts) > 0 {
			if _, err := conn.Exec(ctx, strings.Join(stmts, ";")); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range appliers {
			keys := make([][][]string, len(a.Plan.Sources))
			for i, src := range a.Plan.Sources {
				for _, k := range touched[src.Name] {
					keys[i] = append(keys[i], k)
				}
			}
			if _, err := a.Apply(ctx, Batch{Keys: keys}); err != nil {
				t.Fatalf("round %d apply %s: %v", round, a.Plan.Target.Name, err)
			}
			mustEqual(t, ctx, conn, a.Plan, fmt.Sprintf("round %d (seed %d)", round, seed))
		}
	}
	// A rebuild walk (sources, then stored lineage) changes nothing.
	for _, a := range appliers {
		if _, err := a.Apply(ctx, Batch{Keys: allKeys(t, ctx, a)}); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, ctx, conn, a.Plan, "after a rebuild walk")
	}
}

// TestFilteredOuterJoinsMirrored: a condition after an outer join that
// reads its NULL-extended side makes the plan keep the join's matches in
// a mirror (TestJoinsConverge keeps such joins exact); one on the
// preserved side needs none.
func TestFilteredOuterJoinsMirrored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE fact (id int PRIMARY KEY, d1 int, v int);
		CREATE TABLE dim (id int PRIMARY KEY, name text, r int); CREATE TABLE other (k int PRIMARY KEY, q int)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sql    string
		mirror bool
	}{
		{`CREATE TRANSFORM m1 AS SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.id IS NULL`, true},
		{`CREATE TRANSFORM m2 AS SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE name = 'a'`, true},
		{`CREATE TRANSFORM m3 AS SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 JOIN other o ON o.q = d.r`, true},
		{`CREATE TRANSFORM m4 AS SELECT f.id FROM dim d RIGHT JOIN fact f ON d.id = f.d1 WHERE d.r > 1`, true},
		{`CREATE TRANSFORM m5 AS SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE f.v > 1`, false},
	} {
		_, p := define(t, ctx, conn, cat, tc.sql)
		if got := p.Outer[0].Mirror != nil; got != tc.mirror {
			t.Errorf("%s: mirror %v, want %v", tc.sql, got, tc.mirror)
		}
	}
}

// TestIndexGaps: a join whose re-derive must find a table's rows by a
// column no index leads with is accepted and reported, with the index to
// create; WITHOUT SOURCE INDEX records the opt-out; the index closes it.
func TestIndexGaps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE fact (id int PRIMARY KEY, d1 int, v int);
		CREATE TABLE dim (id int PRIMARY KEY, name text);
		CREATE TABLE dim3 (code int, z text, PRIMARY KEY (z, code))`); err != nil {
		t.Fatal(err)
	}
	_, p := define(t, ctx, conn, cat, `CREATE TRANSFORM g1 AS SELECT f.id, d.name, e.z FROM fact f JOIN dim d ON d.id = f.d1, dim3 e WHERE e.code = f.v`)
	gaps, err := IndexGaps(ctx, conn, p)
	if err != nil {
		t.Fatal(err)
	}
	// WHERE's equalities come first, then the joins'.
	want := []IndexGap{
		{Table: "\"public\".\"fact\"", Columns: []string{"v"}, Role: RoleJoinFrom, Fix: `CREATE INDEX ON "public"."fact" ("v")`},
		{Table: "\"public\".\"dim3\"", Columns: []string{"code"}, Role: RoleJoinJoined, Fix: `CREATE INDEX ON "public"."dim3" ("code")`},
		{Table: "\"public\".\"fact\"", Columns: []string{"d1"}, Role: RoleJoinFrom, Fix: `CREATE INDEX ON "public"."fact" ("d1")`},
	}
	if fmt.Sprint(gaps) != fmt.Sprint(want) {
		t.Fatalf("gaps:\n got %+v\nwant %+v", gaps, want)
	}
	_, p2 := define(t, ctx, conn, cat, `CREATE TRANSFORM g2 WITHOUT SOURCE INDEX AS SELECT f.id, d.name FROM fact f JOIN dim d ON d.id = f.d1`)
	if gaps, err = IndexGaps(ctx, conn, p2); err != nil || len(gaps) != 1 || !gaps[0].OptedOut {
		t.Fatalf("WITHOUT SOURCE INDEX: %+v, %v", gaps, err)
	}
	if _, err := conn.Exec(ctx, `CREATE INDEX ON fact (d1, v)`); err != nil {
		t.Fatal(err)
	}
	if gaps, err = IndexGaps(ctx, conn, p); err != nil || len(gaps) != 2 || gaps[0].Columns[0] != "v" || gaps[1].Columns[0] != "code" {
		t.Fatalf("after CREATE INDEX ON fact (d1, v): %+v, %v", gaps, err)
	}
}

// TestStarExpanded: * and t.* are expanded at define time to the columns
// the tables have then, and the stored definition shows the expansion.
func TestStarExpanded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE a (id int PRIMARY KEY, x text, y int); CREATE TABLE b (id int PRIMARY KEY, z int)`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sql, want string }{
		{`SELECT * FROM a`, `SELECT a.id, a.x, a.y FROM a`},
		{`SELECT b.*, a.x FROM a JOIN b ON b.id = a.id`, `SELECT b.id, b.z, a.x FROM a JOIN b ON b.id = a.id`},
		{`SELECT * FROM a JOIN b USING (id) WHERE z > 1`, `SELECT a.id, a.x, a.y, b.z FROM a JOIN b USING (id) WHERE b.z > 1`},
	} {
		sts, err := ParseStatements("CREATE TRANSFORM s AS " + tc.sql)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := PlanCreate(ctx, tx, "trellis", "public", &sts[0])
		tx.Rollback(ctx) //nolint:errcheck
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		if got := sts[0].Query.SQL; got != tc.want {
			t.Errorf("%s: stored definition\n got %s\nwant %s", tc.sql, got, tc.want)
		}
		if len(p.Visible) < 2 {
			t.Errorf("%s: visible columns %v", tc.sql, p.Visible)
		}
	}
}

// TestOuterJoinPendingChanges: a batch may see, in its snapshot, changes
// whose keys arrive only in a later batch. A key the outer-join widening
// pulls into scope may be such a change: it must widen the scope in turn
// (a fixpoint), or the rows it joined are rewritten without their
// NULL-extended replacements and the later batch no longer finds them.
func TestOuterJoinPendingChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, conn, cat := catalogDB(t, ctx)
	for _, tc := range []struct {
		name, setup, def, change string
		batches                  []map[string][]string // table -> keys, in order
	}{
		{
			name:    "full join",
			setup:   `CREATE TABLE regions (id int PRIMARY KEY, name text); CREATE TABLE customers (id int PRIMARY KEY, region_id int); INSERT INTO regions VALUES (9, 'x'); INSERT INTO customers VALUES (11, 9), (20, 9)`,
			def:     `CREATE TRANSFORM f AS SELECT c.id AS cid, r.id AS rid FROM customers c FULL JOIN regions r ON r.id = c.region_id`,
			change:  `UPDATE customers SET region_id = NULL WHERE id = 20; DELETE FROM regions WHERE id = 9`,
			batches: []map[string][]string{{"customers": {"20"}}, {"regions": {"9"}}},
		},
		{
			name: "nested left joins",
			setup: `CREATE TABLE fact (id int PRIMARY KEY, d int); CREATE TABLE dim (id int PRIMARY KEY, r int); CREATE TABLE dim2 (a int PRIMARY KEY, w int);
				INSERT INTO dim2 VALUES (5, 50); INSERT INTO dim VALUES (1, 5), (2, 5); INSERT INTO fact VALUES (1, 1), (2, 2)`,
			def:     `CREATE TRANSFORM n AS SELECT f.id, d.id AS did, e.w FROM fact f LEFT JOIN dim d ON d.id = f.d LEFT JOIN dim2 e ON e.a = d.r`,
			change:  `UPDATE dim SET r = NULL WHERE id = 1; DELETE FROM dim WHERE id = 2; DELETE FROM dim2 WHERE a = 5`,
			batches: []map[string][]string{{"dim2": {"5"}}, {"dim": {"1", "2"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := conn.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public; `+tc.setup); err != nil {
				t.Fatal(err)
			}
			a := built(t, ctx, dsn, conn, cat, tc.def)
			p := a.Plan
			if _, err := conn.Exec(ctx, tc.change); err != nil {
				t.Fatal(err)
			}
			for _, b := range tc.batches {
				keys := make([][][]string, len(p.Sources))
				for i, src := range p.Sources {
					for _, k := range b[src.Name] {
						keys[i] = append(keys[i], []string{k})
					}
				}
				if _, err := a.Apply(ctx, Batch{Keys: keys}); err != nil {
					t.Fatal(err)
				}
			}
			mustEqual(t, ctx, conn, p, "after the batches")
		})
	}
}
