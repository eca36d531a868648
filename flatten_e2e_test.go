package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Issue 28: wherever flattening moves an expression from a derived table
// into the outer query, a row the outer join NULL-extends must still show
// NULL in it, at any depth of nesting and through *, t.*, alias lists and
// every outer join kind. Each definition is compared with its query as
// written (PostgreSQL runs the derived tables itself: the oracle) after
// the build and after writes that create and remove NULL-extended rows.

const nullExtendedSchemaSQL = `
CREATE TABLE a (id int PRIMARY KEY, pid int, w int);
CREATE TABLE p (id int PRIMARY KEY, t text, w int);
INSERT INTO a SELECT g, CASE WHEN g % 4 = 0 THEN NULL ELSE g % 7 END, g % 3 FROM generate_series(1, 20) g;
INSERT INTO p SELECT g, (ARRAY['x', 'y', NULL])[g % 3 + 1], CASE WHEN g % 2 = 0 THEN g END FROM generate_series(1, 5) g;`

// nullExtendedDefs are the shapes of issue 28 and more: a computed,
// constant or aliased output reached through one or two pass-through
// wrappers (*, s.*, a plain column list, an alias list), on the
// NULL-extended side of LEFT, RIGHT and FULL joins; a WHERE and a
// DISTINCT one level down on that side; a LIMIT-free ORDER BY; and the
// same shapes on the preserved side, which are pulled up.
var nullExtendedDefs = []levelDef{
	{"nx_star", `SELECT a.id, p.flag FROM a LEFT JOIN (SELECT * FROM (SELECT id, coalesce(t = 'x', false) AS flag FROM p) s) p ON p.id = a.pid`},
	{"nx_const", `SELECT a.id, p.one FROM a LEFT JOIN (SELECT * FROM (SELECT id, 1 AS one FROM p) s) p ON p.id = a.pid`},
	{"nx_notnull", `SELECT a.id, q.has FROM a LEFT JOIN (SELECT s.* FROM (SELECT id, t IS NOT NULL AS has FROM p) s) q ON q.id = a.pid`},
	{"nx_case", `SELECT a.id, q.k FROM a LEFT JOIN (SELECT s.id, s.k FROM (SELECT id, CASE WHEN t = 'x' THEN 'ex' ELSE 'other' END AS k FROM p) s) q ON q.id = a.pid`},
	{"nx_plus", `SELECT a.id, q.c FROM a LEFT JOIN (SELECT * FROM (SELECT id, coalesce(w, 0) + 1 AS c FROM p) s) q ON q.id = a.pid`},
	{"nx_alias", `SELECT a.id, v.c FROM a LEFT JOIN (SELECT * FROM (SELECT id, coalesce(w, 0) FROM p) s) v(id, c) ON v.id = a.pid`},
	{"nx_two_deep", `SELECT a.id, q.flag FROM a LEFT JOIN (SELECT * FROM (SELECT * FROM (SELECT id, coalesce(t = 'y', false) AS flag FROM p) s1) s2) q ON q.id = a.pid`},
	{"nx_right", `SELECT a.id, q.one, q.id AS qid FROM (SELECT * FROM (SELECT id, 1 AS one FROM p) s) q RIGHT JOIN a ON q.id = a.pid`},
	{"nx_full", `SELECT a.id, q.flag, q.id AS qid FROM a FULL JOIN (SELECT * FROM (SELECT id, t IS NULL AS flag FROM p) s) q ON q.id = a.pid`},
	{"nx_full_both", `SELECT l.id, l.c, r.id AS rid, r.flag FROM (SELECT * FROM (SELECT id, pid, coalesce(w, -1) AS c FROM a) s) l
		FULL JOIN (SELECT * FROM (SELECT id, t = 'x' AS flag FROM p) s) r ON r.id = l.pid`},
	{"nx_where", `SELECT a.id, s.id AS sid FROM a LEFT JOIN (SELECT * FROM (SELECT id FROM p WHERE t = 'y') s0) s ON s.id = a.pid`},
	{"nx_distinct", `SELECT a.id, s.t FROM a LEFT JOIN (SELECT * FROM (SELECT DISTINCT t FROM p) d) s ON s.t = (CASE WHEN a.w = 0 THEN 'x' ELSE 'y' END)`},
	{"nx_ordered", `SELECT a.id, s.t FROM a LEFT JOIN (SELECT * FROM (SELECT id, t FROM p ORDER BY t) s0) s ON s.id = a.pid`},
	{"nx_preserved", `SELECT s.id, s.flag, a.id AS aid FROM (SELECT * FROM (SELECT id, coalesce(t = 'x', false) AS flag FROM p WHERE id > 1) s0) s LEFT JOIN a ON a.pid = s.id`},
}

// nullExtendedWrites create and remove NULL-extended rows: a matched row
// of p deleted, rows inserted that match unmatched rows of a, rows of a
// moved between matches, p's values changed, and everything of p deleted
// and put back.
var nullExtendedWrites = []string{
	`DELETE FROM p WHERE id IN (1, 3)`,
	`INSERT INTO p VALUES (6, 'x', 6), (0, NULL, NULL)`,
	`UPDATE a SET pid = CASE WHEN pid IS NULL THEN 2 WHEN pid = 2 THEN NULL ELSE pid END`,
	`UPDATE p SET t = CASE WHEN t = 'x' THEN 'y' WHEN t = 'y' THEN NULL ELSE 'x' END, w = coalesce(w, 0) + 1`,
	`DELETE FROM p`,
	`INSERT INTO p SELECT g, (ARRAY['y', 'x', NULL])[g % 3 + 1], g FROM generate_series(1, 8) g`,
	`UPDATE p SET id = id + 10 WHERE id % 2 = 0`,
}

// TestNullExtendedDerivedOutputs builds every shape over existing data and
// keeps it exact through the writes, in both capture modes.
func TestNullExtendedDerivedOutputs(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(nullExtendedSchemaSQL)
		var b strings.Builder
		for _, d := range nullExtendedDefs {
			fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
		}
		e.apply(b.String())
		e.start()
		levelConverge(e, nullExtendedDefs, "after the build")
		for i, w := range nullExtendedWrites {
			e.exec(w)
			levelConverge(e, nullExtendedDefs, fmt.Sprintf("write %d (%s)", i+1, w))
		}
	})
}

// TestStarOverTarget: * and t.* over a transform's target expand to its
// visible columns, not its hidden lineage and surrogate columns (a chain
// read through * was refused: `output name "__s0_0" begins with "__"`);
// with a computed output of the target on the NULL-extended side through
// a pass-through derived table, the chain is exact.
func TestStarOverTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(nullExtendedSchemaSQL)
	defs := []levelDef{
		{"st_join", `SELECT a.id, a.w, p.t, coalesce(p.w, 0) AS pw FROM a LEFT JOIN p ON p.id = a.pid`},
		{"st_all", `SELECT * FROM st_join`},
		{"st_qualified", `SELECT j.*, j.pw * 2 AS twice FROM st_join j WHERE j.w > 0`},
		{"st_derived", `SELECT a.id, s.pw, s.t FROM a LEFT JOIN (SELECT * FROM st_join) s ON s.id = a.pid`},
		{"st_aliased", `SELECT v.* FROM st_join AS v(i, ww)`},
	}
	var b strings.Builder
	for _, d := range defs {
		fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
	}
	e.apply(b.String())
	// The oracle names the visible columns: * in PostgreSQL's hands would
	// select the hidden ones too.
	vis := "j.id, j.w, j.t, j.pw"
	defs = []levelDef{defs[0],
		{"st_all", `SELECT ` + vis + ` FROM st_join j`},
		{"st_qualified", `SELECT ` + vis + `, j.pw * 2 AS twice FROM st_join j WHERE j.w > 0`},
		{"st_derived", `SELECT a.id, s.pw, s.t FROM a LEFT JOIN (SELECT ` + vis + ` FROM st_join j) s ON s.id = a.pid`},
		{"st_aliased", `SELECT j.id AS i, j.w AS ww, j.t, j.pw FROM st_join j`},
	}
	ctx := context.Background()
	ds, err := e.tr.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"st_all":       "id,w,t,pw",
		"st_qualified": "id,w,t,pw,twice",
		"st_derived":   "id,pw,t",
		"st_aliased":   "i,ww,t,pw",
	}
	for _, d := range ds {
		if w, ok := want[d.Name]; ok && strings.Join(d.Columns, ",") != w {
			t.Errorf("%s has columns %v, want %s", d.Name, d.Columns, w)
		}
	}
	e.start()
	levelConverge(e, defs, "after the build")
	for i, w := range nullExtendedWrites[:4] {
		e.exec(w)
		levelConverge(e, defs, fmt.Sprintf("write %d (%s)", i+1, w))
	}
}

// TestUnreadSetReturningOutput: an output of a derived table that the
// outer query never reads disappears when the table is pulled up, but
// PostgreSQL still evaluates it; one that returns a set multiplies the
// rows, so it is refused (it was silently dropped), naming the output,
// and nothing is created.
func TestUnreadSetReturningOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(nullExtendedSchemaSQL)
	ctx := context.Background()
	for _, q := range []string{
		`SELECT a.id FROM a JOIN (SELECT id, generate_series(1, 2) AS g FROM p) s ON s.id = a.pid`,
		`SELECT a.id, s.id AS sid FROM a JOIN (SELECT w.id FROM (SELECT id, unnest(ARRAY[t, t]) AS u FROM p) w) s ON s.id = a.pid`,
	} {
		_, err := e.tr.Apply(ctx, "CREATE TRANSFORM srf AS "+q)
		if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(fmt.Sprint(err), "returns a set of rows per row") ||
			!strings.Contains(fmt.Sprint(err), "of the subquery") {
			t.Errorf("%s: %v, want a validation error naming the set-returning output", q, err)
		}
	}
	if n := e.queryInt(`SELECT count(*) FROM pg_class WHERE relname = 'srf'`); n != 0 {
		t.Errorf("a refused definition left its target behind")
	}
}
