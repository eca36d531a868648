package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// parenDefs are definitions whose operands need parentheses that
// pg_query's deparser leaves out: (a OR b) IS NULL came out as
// a OR (b IS NULL), (a AND b) IS NOT DISTINCT FROM c as
// a AND (b IS NOT DISTINCT FROM c) — other queries, kept exactly — and
// (a OR b)::int, (NOT a)::text as text PostgreSQL rejects. Every form
// the engine writes back (the catalog's definition, the re-derive, a
// level, a subquery, an aggregate's filter) must read as written.
var parenDefs = []levelDef{
	{"par_where", `SELECT id, x FROM pt WHERE (a OR b) IS NULL`},
	{"par_items", `SELECT id, ((a AND b) IS NOT DISTINCT FROM c) AS f, (a OR b)::int AS n, (NOT a)::text AS t, (x AT TIME ZONE 'UTC')::text AS z FROM pt`},
	{"par_join", `SELECT p.id, q.id AS qid FROM pt p JOIN pq q ON (p.a OR q.b) IS NOT TRUE AND q.id = p.id % 3`},
	{"par_exists", `SELECT id FROM pt WHERE EXISTS (SELECT 1 FROM pq WHERE pq.id = pt.id % 3 AND (pq.b OR pt.c) IS NULL)`},
	{"par_agg", `SELECT (a OR b) IS NULL AS k, count(*) AS n, count(*) FILTER (WHERE (b AND c) IS NULL) AS m FROM pt GROUP BY 1`},
	{"par_level", `SELECT k, count(*) AS n FROM (SELECT id, ((a OR c) IS NULL)::int AS k FROM pt) s GROUP BY k`},
}

// TestDefinitionsReadAsWritten: each of parenDefs is kept equal to its
// query through inserts, updates and deletes that flip every operand, in
// both capture modes; the catalog's definition reads as written; ALTER
// TRANSFORM adds and changes columns of that kind (found by the
// generative ALTER stream: (c2 IS NOT NULL OR c1 = 'n2')::boolean was
// refused as text PostgreSQL rejects).
func TestDefinitionsReadAsWritten(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(`CREATE TABLE pt (id int PRIMARY KEY, a bool, b bool, c bool, x timestamp);
CREATE TABLE pq (id int PRIMARY KEY, b bool);
INSERT INTO pt SELECT g, CASE g % 3 WHEN 0 THEN true WHEN 1 THEN false END, CASE g % 5 WHEN 0 THEN NULL ELSE g % 2 = 0 END,
  CASE WHEN g % 7 > 2 THEN g % 4 = 1 END, timestamp '2026-01-01' + g * interval '1 hour' FROM generate_series(1, 60) g;
INSERT INTO pq VALUES (0, true), (1, NULL), (2, false)`)
		var b strings.Builder
		for _, d := range parenDefs {
			fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
		}
		e.apply(b.String())
		ctx := context.Background()
		ds, err := e.tr.Definitions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Name == "par_where" && !strings.Contains(d.SQL, "(a OR b) IS NULL") {
				t.Fatalf("par_where's definition reads %q", d.SQL)
			}
		}
		e.start()
		levelConverge(e, parenDefs, "after the build")
		for i, w := range []string{
			`UPDATE pt SET a = NOT a WHERE id % 4 = 0`,
			`UPDATE pt SET b = NULL, c = true WHERE id % 6 = 1`,
			`UPDATE pq SET b = NOT coalesce(b, false)`,
			`DELETE FROM pt WHERE id % 9 = 0`,
			`INSERT INTO pt SELECT g, NULL, g % 2 = 0, NULL, NULL FROM generate_series(61, 70) g`,
		} {
			e.exec(w)
			levelConverge(e, parenDefs, fmt.Sprintf("write %d (%s)", i+1, w))
		}

		e.apply(`ALTER TRANSFORM par_where ADD alt AS ((b IS NOT NULL OR c = true))::boolean, ADD alt2 AS (a AND c) IS NULL`)
		edited := append([]levelDef(nil), parenDefs...)
		edited[0].query = `SELECT id, x, ((b IS NOT NULL OR c = true))::boolean AS alt, (a AND c) IS NULL AS alt2 FROM pt WHERE (a OR b) IS NULL`
		e.exec(`UPDATE pt SET c = NOT c WHERE id % 5 = 0`)
		levelConverge(e, edited, "after ALTER TRANSFORM")
	})
}
