package trellis_test

import (
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Functions in FROM, constant relations and the ALL set operations (ADR
// 0034): each definition is compared with its query as written after the
// build and after every write phase — arrays that grow, shrink, reorder,
// hold duplicates and NULLs or become NULL or empty, key-changing
// updates, deletes, a TRUNCATE, and rows that appear and vanish on both
// sides of INTERSECT ALL and EXCEPT ALL.

const srfSchemaSQL = `
CREATE TABLE sp (id int PRIMARY KEY, author int, tags text[], doc jsonb, csv text, lo int, hi int);
CREATE TABLE sq (id int PRIMARY KEY, author int, tags text[]);
CREATE TABLE st (tag text PRIMARY KEY, label text);
INSERT INTO sp SELECT g, g % 4,
  CASE WHEN g % 7 = 0 THEN NULL WHEN g % 5 = 0 THEN '{}' ELSE ARRAY['t' || g % 3, 't' || g % 4, 't' || g % 3] END,
  jsonb_build_object('items', jsonb_build_array(jsonb_build_object('a', g, 'b', 'x' || g % 2), jsonb_build_object('a', g + 1, 'b', NULL)), 'k' || g % 3, g),
  CASE WHEN g % 6 = 0 THEN NULL ELSE 'a,b,' || g % 3 END, g % 3, g % 3 + g % 4
FROM generate_series(1, 40) g;
INSERT INTO sq SELECT g, g % 3, ARRAY['t' || g % 2, 't' || g % 5] FROM generate_series(1, 25) g;
INSERT INTO st VALUES ('t0', 'zero'), ('t1', 'one'), ('t2', 'two');`

// srfDefs: every form of a function in FROM and of a constant relation,
// and INTERSECT ALL / EXCEPT ALL.
var srfDefs = []levelDef{
	{"f_unnest", `SELECT p.id, t.tag FROM sp p, unnest(p.tags) AS t(tag)`},
	{"f_unnest_bare", `SELECT id, tag FROM sp, unnest(tags) tag`},
	{"f_ordinality", `SELECT p.id, t.tag, t.n FROM sp p CROSS JOIN LATERAL unnest(p.tags) WITH ORDINALITY AS t(tag, n)`},
	{"f_left_lateral", `SELECT p.id, t.tag FROM sp p LEFT JOIN LATERAL unnest(p.tags) AS t(tag) ON true`},
	{"f_jsonb_elements", `SELECT p.id, it.item->>'a' AS a FROM sp p CROSS JOIN LATERAL jsonb_array_elements(p.doc->'items') AS it(item)`},
	{"f_jsonb_each", `SELECT p.id, e.key, e.value FROM sp p, jsonb_each(p.doc) e WHERE e.key <> 'items'`},
	{"f_recordset", `SELECT p.id, x.a, x.b FROM sp p, jsonb_to_recordset(p.doc->'items') AS x(a int, b text)`},
	{"f_split", `SELECT p.id, s.part FROM sp p, regexp_split_to_table(p.csv, ',') AS s(part)`},
	{"f_series_cols", `SELECT p.id, g.n FROM sp p, generate_series(p.lo, p.hi) AS g(n)`},
	{"f_unnest_two", `SELECT p.id, u.a, u.b FROM sp p, unnest(p.tags, ARRAY[p.lo, p.hi]) AS u(a, b)`},
	{"f_rows_from", `SELECT p.id, r.tag, r.n FROM sp p, ROWS FROM (unnest(p.tags), generate_series(1, p.hi)) WITH ORDINALITY AS r(tag, n, o)`},
	{"f_join_table", `SELECT p.id, t.tag, s.label FROM sp p, unnest(p.tags) AS t(tag) JOIN st s ON s.tag = t.tag`},
	{"f_left_join_table", `SELECT p.id, t.tag, s.label FROM sp p, unnest(p.tags) AS t(tag) LEFT JOIN st s ON s.tag = t.tag`},
	{"f_agg", `SELECT tag, count(*) AS n FROM sp, unnest(tags) tag GROUP BY tag`},
	{"f_agg_join", `SELECT s.label, count(*) AS n, sum(p.id) AS ids FROM sp p, unnest(p.tags) AS t(tag) JOIN st s ON s.tag = t.tag GROUP BY s.label`},
	{"f_distinct", `SELECT DISTINCT t.tag FROM sp p, unnest(p.tags) t(tag)`},
	{"f_sublink", `SELECT p.id, t.tag FROM sp p, unnest(p.tags) t(tag) WHERE t.tag IN (SELECT s.tag FROM st s WHERE s.label <> 'zero')`},
	{"f_derived", `SELECT d.tag, d.id FROM (SELECT p.id, t.tag FROM sp p, unnest(p.tags) t(tag) WHERE p.id > 3) d WHERE d.tag <> 't0'`},
	{"f_cte_level", `WITH c AS (SELECT t.tag, count(*) AS n FROM sp p, unnest(p.tags) t(tag) GROUP BY t.tag) SELECT c.tag, c.n, s.label FROM c LEFT JOIN st s ON s.tag = c.tag`},
	{"f_chain", `SELECT u.tag, u.n FROM (SELECT f.tag, count(*) AS n FROM f_unnest f GROUP BY f.tag) u`},
	{"f_nullable_side", `SELECT s.tag, d.id FROM st s LEFT JOIN (SELECT p.id, u.x FROM sp p, unnest(p.tags) u(x)) d ON d.x = s.tag`},
	{"f_anti_join", `SELECT s.tag, s.label FROM st s LEFT JOIN (sp p CROSS JOIN unnest(p.tags) u(x)) ON u.x = s.tag WHERE p.id IS NULL`},
	{"c_lateral_values", `SELECT p.id, v.side, v.x FROM sp p, LATERAL (VALUES ('lo', p.lo), ('hi', p.hi), ('lo', p.lo)) v(side, x)`},
	{"c_values", `SELECT p.id, v.name FROM sp p JOIN (VALUES (1, 'one'), (2, 'two'), (2, 'deux')) v(id, name) ON v.id = p.author`},
	{"c_values_left", `SELECT p.id, v.name FROM sp p LEFT JOIN (VALUES (0, 'zero'), (3, NULL)) v(id, name) ON v.id = p.author`},
	{"c_series", `SELECT p.id, g.n FROM sp p CROSS JOIN generate_series(1, 3) g(n) WHERE p.id < 20`},
	{"c_cte_values", `WITH v(tag, w) AS (VALUES ('t1', 10), ('t2', 20)) SELECT t.tag, sum(v.w) AS w FROM sp p, unnest(p.tags) t(tag) JOIN v ON v.tag = t.tag GROUP BY t.tag`},
	{"s_intersect_all", `SELECT author, t FROM sp, unnest(tags) t INTERSECT ALL SELECT author, t FROM sq, unnest(tags) t`},
	{"s_except_all", `SELECT author, t FROM sp, unnest(tags) t EXCEPT ALL SELECT author, t FROM sq, unnest(tags) t`},
	{"s_except_all_nulls", `SELECT lo, csv FROM sp EXCEPT ALL SELECT author % 3, NULL FROM sq`},
	{"s_nested_all", `SELECT author FROM sp EXCEPT ALL (SELECT author FROM sq INTERSECT ALL SELECT lo FROM sp WHERE id < 30)`},
	{"s_all_in_cte", `WITH x AS (SELECT author AS a FROM sp INTERSECT ALL SELECT author FROM sq) SELECT x.a, count(*) AS n FROM x GROUP BY x.a`},
}

// srfWrites grow, shrink, reorder and empty arrays, change keys and
// documents, delete, truncate and refill.
var srfWrites = []string{
	`UPDATE sp SET tags = tags || ARRAY['t1', 't9'] WHERE id % 3 = 0; UPDATE sp SET tags = tags[2:2] WHERE id % 4 = 1`,
	`UPDATE sp SET tags = ARRAY(SELECT unnest(tags) ORDER BY 1 DESC) WHERE id % 2 = 0; UPDATE sp SET tags = NULL WHERE id = 2; UPDATE sp SET tags = '{}' WHERE id = 3`,
	`UPDATE sp SET id = id + 100 WHERE id % 5 = 1; UPDATE sp SET author = author + 1, lo = hi, hi = lo WHERE id % 3 = 1`,
	`UPDATE sp SET doc = jsonb_set(doc, '{items}', '[{"a": 7, "b": "y"}]') WHERE id % 2 = 1; UPDATE sp SET csv = csv || ',z,z' WHERE id % 4 = 0`,
	`DELETE FROM sp WHERE id % 6 = 2; INSERT INTO sp VALUES (500, 1, ARRAY['t1', 't1', NULL], '{"items": []}', ',', 2, 1), (501, 2, ARRAY['t2'], '{}', 'q', 0, 0)`,
	`DELETE FROM sq WHERE id % 4 = 0; UPDATE sq SET tags = ARRAY['t1', 't1', 't1'] WHERE id % 3 = 0; UPDATE st SET label = 'uno' WHERE tag = 't1'`,
	`TRUNCATE sq; DELETE FROM st WHERE tag = 't2'`,
	`INSERT INTO sq SELECT g, g % 4, ARRAY['t' || g % 3, 't1'] FROM generate_series(1, 12) g; INSERT INTO st VALUES ('t2', 'two again'), ('t9', 'nine')`,
}

// TestFunctionsInFrom builds every shape over existing rows and keeps it
// exact through the writes, in both capture modes.
func TestFunctionsInFrom(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		keepShapes(t, mode, srfSchemaSQL, srfDefs, srfWrites)
	})
}

// TestFunctionsInFromRefusals: what stays refused names the part and a
// rewrite that works, and changes nothing.
func TestFunctionsInFromRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(srfSchemaSQL)
	refuseEach(t, e, []refusal{
		{`SELECT g.n FROM generate_series(1, 3) g(n)`, "reads no table"},
		{`SELECT v.a FROM (VALUES (1), (2)) v(a)`, "reads no table"},
		{`SELECT v.a, p.id FROM (VALUES (1), (2)) v(a) LEFT JOIN sp p ON p.author = v.a`, "the preserved side of a LEFT JOIN holds no table"},
		{`SELECT v.a, p.id FROM sp p FULL JOIN (VALUES (1), (2)) v(a) ON p.author = v.a`, "the preserved side of a FULL JOIN holds no table"},
		{`SELECT p.id, g.d FROM sp p, generate_series(timestamptz '2024-01-01', timestamptz '2024-01-03', interval '1 day') g(d)`, "only immutable functions may make rows in FROM"},
		{`SELECT p.id, g.x FROM sp p, generate_series(1, (random() * 3)::int) g(x)`, "random() is not immutable"},
		{`SELECT p.id, u.x FROM sp p, unnest(ARRAY(SELECT s.tag FROM st s)) u(x)`, "reads a subquery"},
		{`SELECT p.id, unnest(p.tags) AS tag FROM sp p`, "move it to FROM"},
		{`SELECT p.id, t.tag::date AS d FROM sp p, unnest(p.tags) t(tag)`, "select list item 2 (t.tag::date) calls date_in(cstring) (stable)"},
		{`SELECT p.id, x.d FROM sp p, jsonb_to_recordset(p.doc->'items') AS x(d date)`, "jsonb_to_recordset(jsonb) (stable)"},
	})
}
