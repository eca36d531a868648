package engine

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of TestGeneratedSQL")

// TestGeneratedSQL pins the statements generated for one plan of each
// shape as text (testdata/golden/<name>.sql; go test -run
// TestGeneratedSQL -update rewrites them): a change to SQL generation shows
// in review as a diff of the SQL it produces.
func TestGeneratedSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `
		CREATE TABLE fact (id int PRIMARY KEY, d1 int, d2 int, s text, v int);
		CREATE TABLE dim (id int PRIMARY KEY, name text NOT NULL, r int);
		CREATE TABLE dim2 (a int, b text, w int, PRIMARY KEY (a, b));
		CREATE TABLE src (a int, b text, v numeric, PRIMARY KEY (a, b))`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, def string }{
		{"row_single", `CREATE TRANSFORM row_single AS SELECT a, b, v * 2 AS v2 FROM src WHERE v > 0`},
		{"agg_single", `CREATE TRANSFORM agg_single AS SELECT b, count(*) AS n, sum(v) AS s, min(v) AS lo FROM src GROUP BY b`},
		{"row_join", `CREATE TRANSFORM row_join AS SELECT f.id, d.name, e.w FROM fact f JOIN dim d ON d.id = f.d1 LEFT JOIN dim2 e ON e.a = f.d2 AND e.b = f.s`},
		{"agg_join", `CREATE TRANSFORM agg_join AS SELECT d.name, count(*) AS n, sum(f.v) AS s FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name`},
		{"anti_join", `CREATE TRANSFORM anti_join AS SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.id IS NULL`},
		{"agg_total_extreme", `CREATE TRANSFORM agg_total_extreme AS SELECT max(v) AS hi, count(*) + 1 AS q FROM src`},
		{"agg_intkey", `CREATE TRANSFORM agg_intkey AS SELECT d1, count(*) AS n, sum(v) AS s FROM fact GROUP BY d1`},
		{"row_intkey", `CREATE TRANSFORM row_intkey AS SELECT id, v + 1 AS v1 FROM fact WHERE v > 0`},
		{"having", `CREATE TRANSFORM having_pct AS SELECT d.name, 100.0 * sum(f.v) / nullif(count(*), 0) AS pct FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name HAVING count(*) > 2`},
		{"having_nullable", `CREATE TRANSFORM having_nullable AS SELECT d1, sum(v) * 2 AS s2 FROM fact GROUP BY d1 HAVING count(*) > 1`},
		{"row_function", `CREATE TRANSFORM row_function AS SELECT f.id, t.part FROM fact f LEFT JOIN LATERAL regexp_split_to_table(f.s, ',') AS t(part) ON true`},
		{"agg_function", `CREATE TRANSFORM agg_function AS SELECT t.part, v.name, count(*) AS n FROM fact f, regexp_split_to_table(f.s, ',') AS t(part) JOIN (VALUES ('a', 'A'), ('b', 'B')) v(part, name) ON v.part = t.part GROUP BY t.part, v.name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := define(t, ctx, conn, cat, tc.def)
			checkGolden(t, tc.name, "-- the target\n"+targetDDL(t, ctx, conn, p.Target)+"\n\n"+generatedSQL(p))
		})
	}
}

// targetDDL describes a target as the catalog has it: its columns in
// order (with GENERATED ALWAYS AS IDENTITY, ADR 0019) and its constraints.
func targetDDL(t *testing.T, ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, target Rel) string {
	t.Helper()
	var ddl string
	if err := db.QueryRow(ctx, `SELECT string_agg(format('%s %s%s', attname, format_type(atttypid, atttypmod),
			CASE WHEN attidentity = 'a' THEN ' GENERATED ALWAYS AS IDENTITY' ELSE '' END), E'\n' ORDER BY attnum)
		|| E'\n' || coalesce((SELECT string_agg(pg_get_constraintdef(oid), E'\n' ORDER BY conname) FROM pg_constraint WHERE conrelid = $1::regclass), '(no constraint)')
		FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, target.Ident()).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	return ddl
}

// generatedSQL renders every statement BuildStatements makes for p, by
// section.
func generatedSQL(p *Plan) string {
	s := BuildStatements(p, 150000)
	var b strings.Builder
	section := func(title string, stmts ...string) {
		for _, st := range stmts {
			if st != "" {
				b.WriteString("-- " + title + "\n" + st + ";\n\n")
			}
		}
	}
	section("setup", s.Setup...)
	section("load keys", s.LoadKeys, s.LoadBounds)
	section("load source keys", s.LoadSource...)
	for _, st := range s.Apply {
		switch {
		case st.KeyArgs:
			section("apply (keys $1, first and last key $2 $3)", st.SQL)
		case st.BoundArgs:
			section("apply (first and last key $1 $2)", st.SQL)
		default:
			section("apply", st.SQL)
		}
	}
	for _, e := range s.Enum {
		section("walk", e.First, e.After)
	}
	section("reconcile", s.Reconcile...)
	if rb := s.RangeBuild; rb != nil {
		section("range build: next ($1 lo, $2 limit)", rb.Next)
		section("range build: stored ($1 lo, $2 hi)", rb.Stored)
		section("range build: copy ($1 lo, $2 hi, $3 keys left out)", rb.Copy)
		section("range build: changes ($1 lo, $2 hi)", rb.Changes)
		section("range build, ledger only: stored ($1 lo, $2 hi)", rb.LedgerStored)
		section("range build, ledger only: copy ($1 lo, $2 hi, $3 keys left out)", rb.LedgerCopy)
	}
	cs := p.CheckSpec()
	section(fmt.Sprintf("self-check query (columns %v, identity %v)", cs.Columns, cs.Identity), cs.Query)
	section("self-check: keys of groups", p.GroupKeysSQL())
	return b.String()
}

// checkGolden compares got with testdata/golden/<name>.sql (-update
// rewrites it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".sql")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("generated SQL differs from %s (run with -update and review the diff):\n%s", path, got)
	}
}

// TestGeneratedLevelSQL pins what an inner level (ADR 0018) generates:
// the level grouped by a nullable column, whose target gets a surrogate
// key (its DDL as the catalog describes it), the owner's full query over
// the base tables, and its query and statements over the level's target.
func TestGeneratedLevelSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE fact (id int PRIMARY KEY, d1 int, v int)`); err != nil {
		t.Fatal(err)
	}
	sts, err := ParseStatements(`CREATE TRANSFORM level_owner AS SELECT n, count(*) AS k, sum(total) AS total FROM (SELECT d1, count(*) AS n, sum(v) AS total FROM fact GROUP BY d1) s GROUP BY n`)
	if err != nil {
		t.Fatal(err)
	}
	owner := sts[0]
	lvl := Statement{Kind: CreateTransform, Schema: cat.Schema, Name: "level_1_1", Query: owner.Query.Levels[0].Query}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	lp, err := PlanCreate(ctx, tx, cat.Schema, cat.Schema, &lvl)
	if err != nil {
		t.Fatal(err)
	}
	if lp.Surrogate != SurrogateCol {
		t.Fatalf("the level grouped by a nullable column has surrogate %q, want %q", lp.Surrogate, SurrogateCol)
	}
	if err := Install(ctx, tx, lp, 1); err != nil {
		t.Fatal(err)
	}
	ddl := targetDDL(t, ctx, tx, lp.Target)
	if err := owner.Query.BindLevel(0, lp.Target, lp.QuerySQL()); err != nil {
		t.Fatal(err)
	}
	op, err := PlanCreate(ctx, tx, cat.Schema, "public", &owner)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "level_owner", "-- the level's target\n"+ddl+"\n\n-- the owner's full query\n"+op.Full+";\n\n-- the owner's query (over the level)\n"+op.QuerySQL()+";\n\n"+generatedSQL(op))
}

// TestGeneratedRecursiveSQL pins what a recursive CTE's level generates
// (ADR 0035): its target (anchor and step lineage, the identity __d, the
// surrogate), the anchors a batch finds, the derivation restricted to
// them, the depth guard of UNION ALL and the writes by identity.
func TestGeneratedRecursiveSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE nodes (id int PRIMARY KEY, parent_id int, name text);
		CREATE TABLE edges (src int, dst int, PRIMARY KEY (src, dst))`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, def string }{
		{"recursive_union_all", `CREATE TRANSFORM tree AS WITH RECURSIVE d(root, id, depth) AS (SELECT id, id, 0 FROM nodes WHERE parent_id IS NULL
			UNION ALL SELECT d.root, n.id, d.depth + 1 FROM nodes n JOIN d ON n.parent_id = d.id) SELECT root, id, depth FROM d`},
		{"recursive_union", `CREATE TRANSFORM reach AS WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM edges
			UNION SELECT r.src, e.dst FROM r, edges e WHERE e.src = r.dst) SELECT src, dst FROM r`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sts, err := ParseStatements(tc.def)
			if err != nil {
				t.Fatal(err)
			}
			// The recursive level: the owner's own level for UNION ALL,
			// the level of its DISTINCT level for UNION.
			q := sts[0].Query.Levels[0].Query
			for q.Recursive == nil {
				q = q.Levels[0].Query
			}
			lvl := Statement{Kind: CreateTransform, Schema: cat.Schema, Name: "level_1_1", Query: q}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			p, err := PlanCreate(ctx, tx, cat.Schema, cat.Schema, &lvl)
			if err != nil {
				t.Fatal(err)
			}
			if err := Install(ctx, tx, p, 1); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.name, "-- the level's target\n"+targetDDL(t, ctx, tx, p.Target)+"\n\n"+generatedSQL(p))
		})
	}
}
