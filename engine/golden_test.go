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
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := define(t, ctx, conn, cat, tc.def)
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
			cs := p.CheckSpec()
			section(fmt.Sprintf("self-check query (columns %v, identity %v)", cs.Columns, cs.Identity), cs.Query)
			section("self-check: keys of groups", p.GroupKeysSQL())
			path := filepath.Join("testdata", "golden", tc.name+".sql")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("generated SQL differs from %s (run with -update and review the diff):\n%s", path, got)
			}
		})
	}
}
