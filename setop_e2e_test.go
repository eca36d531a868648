package trellis_test

import (
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Set operations (ADR 0032): each definition is compared with its query
// as written after the build and after writes that move rows into, out of
// and between branches, make duplicates and NULLs (set operations compare
// NULL as not distinct), and empty a branch.

const setopSchemaSQL = `
CREATE TABLE sa (id int PRIMARY KEY, k int, s text, n numeric);
CREATE TABLE sb (id int PRIMARY KEY, k int, s text, f float8);
CREATE TABLE sc (id int PRIMARY KEY, k int, t text);
INSERT INTO sa SELECT g, g % 6, (ARRAY['p', 'q', NULL])[g % 3 + 1], g / 4.0 FROM generate_series(1, 30) g;
INSERT INTO sb SELECT g, g % 8, (ARRAY['q', 'r'])[g % 2 + 1], g * 0.5 FROM generate_series(1, 25) g;
INSERT INTO sc SELECT g, g % 5, 'c' || g % 3 FROM generate_series(1, 15) g;`

// setopDefs: every operator with and without ALL where accepted, three
// branches, nested and parenthesised, mixed types (integer with numeric,
// numeric with float), constants in a branch, a branch that joins or
// aggregates, a set operation in FROM, in a CTE read twice, in IN (…),
// under an aggregate, and ORDER BY on the whole.
var setopDefs = []levelDef{
	{"so_union_all", `SELECT k, s FROM sa UNION ALL SELECT k, s FROM sb`},
	{"so_union", `SELECT k, s FROM sa UNION SELECT k, s FROM sb WHERE id > 5`},
	{"so_intersect", `SELECT k, s FROM sa INTERSECT SELECT k, s FROM sb`},
	{"so_except", `SELECT k FROM sa EXCEPT SELECT k FROM sb WHERE f > 3`},
	{"so_three", `SELECT k, n FROM sa WHERE k < 3 UNION ALL SELECT k, f::numeric FROM sb UNION ALL SELECT k, 0 FROM sc`},
	{"so_types", `SELECT n AS v FROM sa UNION ALL SELECT f FROM sb`},
	{"so_nested", `SELECT k FROM sa UNION (SELECT k FROM sb EXCEPT SELECT k + 1 FROM sc) ORDER BY 1`},
	{"so_except_chain", `SELECT k FROM sa EXCEPT SELECT k FROM sb WHERE k > 5 EXCEPT SELECT k FROM sc WHERE t = 'c1'`},
	{"so_join_branch", `SELECT sa.id, sc.t FROM sa JOIN sc ON sc.k = sa.k UNION ALL SELECT sb.id, 'b' FROM sb`},
	{"so_agg_branch", `SELECT k, count(*) AS n FROM sa GROUP BY k UNION SELECT k, count(*) FROM sb GROUP BY k`},
	{"so_in_from", `SELECT u.k, count(*) AS n, max(u.s) AS hi FROM (SELECT k, s FROM sa UNION ALL SELECT k, t FROM sc) u GROUP BY u.k`},
	{"so_cte_twice", `WITH ks AS (SELECT k FROM sa UNION SELECT k FROM sb) SELECT a.k, b.k AS next FROM ks a LEFT JOIN ks b ON b.k = a.k + 1`},
	{"so_in_subquery", `SELECT sc.id FROM sc WHERE sc.k IN (SELECT k FROM sa WHERE s = 'p' UNION SELECT k FROM sb WHERE s = 'r')`},
}

// setopWrites move rows on every side.
var setopWrites = []string{
	`UPDATE sa SET k = k + 10 WHERE id % 5 = 0; UPDATE sb SET s = NULL WHERE id = 3`,
	`DELETE FROM sb WHERE k = 2; INSERT INTO sa VALUES (100, 2, 'q', 7), (101, 2, 'q', 7)`,
	`UPDATE sc SET t = 'c1' WHERE id % 2 = 0; INSERT INTO sb VALUES (200, NULL, NULL, NULL)`,
	`INSERT INTO sa VALUES (102, NULL, NULL, NULL); DELETE FROM sa WHERE s = 'p' AND id < 10`,
	`DELETE FROM sc; UPDATE sb SET f = f + 4 WHERE id % 3 = 0`,
	`INSERT INTO sc SELECT g, g % 4, 'c1' FROM generate_series(1, 6) g; UPDATE sa SET s = 'r' WHERE id % 7 = 1`,
}

// TestSetOperations builds every shape over existing data and keeps it
// exact through the writes, in both capture modes.
func TestSetOperations(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		keepShapes(t, mode, setopSchemaSQL, setopDefs, setopWrites)
	})
}

// TestSetOperationRefusals: what a set operation cannot be kept as is
// refused with a sentence and the fix, and changes nothing.
func TestSetOperationRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(setopSchemaSQL)
	refuseEach(t, e, []refusal{
		{`SELECT k, s FROM sa UNION SELECT k FROM sb`, "each UNION query must have the same number of columns"},
		{`SELECT k FROM sa UNION SELECT k FROM sb LIMIT 3`, "LIMIT without ORDER BY keeps arbitrary rows"},
		{`SELECT s FROM sa UNION ALL SELECT f FROM sb`, "UNION types text and double precision cannot be matched"},
	})
}
