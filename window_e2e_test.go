package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Window functions, top-K and DISTINCT ON (ADR 0033): each definition is
// compared with its query as written after the build and after writes
// that move rows between partitions, change the order inside one, tie
// rows, make NULL partitions and order values, and empty a partition.

const windowSchemaSQL = `
CREATE TABLE wa (id int PRIMARY KEY, g int, x int, s text, f numeric);
CREATE TABLE wb (id int PRIMARY KEY, g int, name text);
INSERT INTO wa SELECT i, i % 5, (i * 7) % 11, (ARRAY['p', 'q', NULL])[i % 3 + 1], i / 3.0 FROM generate_series(1, 40) i;
INSERT INTO wb SELECT i, i, 'g' || i FROM generate_series(0, 5) i;`

// windowDefs: every window function kind, frames, a window without
// PARTITION BY, partitions by an expression and by two columns, windows
// with different partitions in one query, over a join, over grouped rows,
// a filter on a window's result, named windows, top-K globally and per
// group, DISTINCT ON.
var windowDefs = []levelDef{
	{"w_rank", `SELECT id, g, rank() OVER (PARTITION BY g ORDER BY x) AS r, dense_rank() OVER (PARTITION BY g ORDER BY x) AS dr,
		percent_rank() OVER (PARTITION BY g ORDER BY x) AS pr, cume_dist() OVER (PARTITION BY g ORDER BY x) AS cd FROM wa`},
	{"w_row_number", `SELECT id, row_number() OVER (PARTITION BY g ORDER BY x, id) AS rn, ntile(3) OVER (PARTITION BY g ORDER BY x, id) AS tile FROM wa`},
	{"w_lag_lead", `SELECT id, lag(x) OVER (PARTITION BY g ORDER BY id) AS prev, lead(x, 2, -1) OVER (PARTITION BY g ORDER BY id) AS next2,
		first_value(s) OVER (PARTITION BY g ORDER BY id) AS fv, last_value(x) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS lv,
		nth_value(x, 2) OVER (PARTITION BY g ORDER BY id) AS nv FROM wa`},
	{"w_running", `SELECT id, sum(x) OVER (PARTITION BY g ORDER BY x) AS run, count(*) OVER (PARTITION BY g) AS n,
		avg(f) OVER (PARTITION BY g) AS a, max(x) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS m3 FROM wa`},
	{"w_global", `SELECT id, rank() OVER (ORDER BY x DESC) AS r, sum(x) OVER () AS total FROM wa`},
	{"w_expr_partition", `SELECT id, count(*) OVER (PARTITION BY x % 3, s) AS n FROM wa WHERE g <> 4`},
	{"w_mixed_partitions", `SELECT id, rank() OVER (PARTITION BY g ORDER BY x) AS r, sum(x) OVER (PARTITION BY g, s) AS gs FROM wa`},
	{"w_join", `SELECT wa.id, wb.name, rank() OVER (PARTITION BY wb.name ORDER BY wa.x) AS r FROM wa LEFT JOIN wb ON wb.g = wa.g`},
	{"w_named", `SELECT id, sum(x) OVER w AS s, rank() OVER (w ORDER BY x) AS r FROM wa WINDOW w AS (PARTITION BY g)`},
	{"w_over_groups", `SELECT g, sum(x) AS total, rank() OVER (ORDER BY sum(x) DESC) AS r FROM wa GROUP BY g`},
	{"w_filtered", `SELECT id, g, x FROM (SELECT id, g, x, row_number() OVER (PARTITION BY g ORDER BY x DESC, id) AS rn FROM wa) t WHERE rn <= 2`},
	{"w_topk", `SELECT id, x FROM wa ORDER BY x DESC, id LIMIT 5`},
	{"w_topk_ties", `SELECT id, x FROM wa ORDER BY x FETCH FIRST 3 ROWS WITH TIES`},
	{"w_topk_offset", `SELECT id, s FROM wa WHERE s IS NOT NULL ORDER BY id DESC LIMIT 4 OFFSET 2`},
	{"w_topk_agg", `SELECT g, sum(x) AS total FROM wa GROUP BY g ORDER BY total DESC, g LIMIT 2`},
	{"w_distinct_on", `SELECT DISTINCT ON (g) g, id, x FROM wa ORDER BY g, x DESC, id`},
	{"w_distinct_window", `SELECT DISTINCT g, count(*) OVER (PARTITION BY g) AS n FROM wa`},
	{"w_rows_running", `SELECT id, x, sum(x) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run FROM wa WHERE x > 3`},
	{"w_cte_twice", `WITH r AS (SELECT id, g, rank() OVER (PARTITION BY g ORDER BY x) AS rk FROM wa) SELECT a.id, a.rk, b.id AS other FROM r a JOIN r b ON b.g = a.g AND b.rk = a.rk + 1`},
	{"w_topk_cte_join", `WITH top AS (SELECT id, g FROM wa ORDER BY f DESC NULLS LAST, id LIMIT 6) SELECT top.id, wb.name FROM top LEFT JOIN wb ON wb.g = top.g`},
	{"w_topk_star", `SELECT * FROM wa ORDER BY x DESC, id LIMIT 3`},
	{"w_topk_ordinals", `SELECT id, x FROM wa ORDER BY 2 DESC, 1 LIMIT 3`},
	{"w_topk_alias", `SELECT id, x AS val FROM wa ORDER BY val DESC, id LIMIT 3`},
	{"w_topk_union", `SELECT id FROM wa UNION ALL SELECT id FROM wb ORDER BY id DESC LIMIT 3`},
	{"w_topk_having", `SELECT g, count(*) AS n FROM wa GROUP BY g HAVING count(*) > 1 ORDER BY count(*) DESC, g LIMIT 2`},
	{"w_filter_clause", `SELECT id, count(*) FILTER (WHERE x > 3) OVER (PARTITION BY g) AS big FROM wa`},
	{"w_lag_join", `SELECT wa.id, wb.name, lag(wa.x) OVER (PARTITION BY wb.g ORDER BY wa.id, wb.id) AS prev FROM wa JOIN wb ON wb.g = wa.g`},
	{"w_with_exists", `SELECT id, rank() OVER (PARTITION BY g ORDER BY x) AS r FROM wa WHERE EXISTS (SELECT 1 FROM wb WHERE wb.g = wa.g)`},
	{"w_chain", `SELECT g, max(r) AS worst FROM w_rank GROUP BY g`},
	{"w_lateral_top", `SELECT wb.name, t.id, t.x FROM wb LEFT JOIN LATERAL (SELECT wa.id, wa.x FROM wa WHERE wa.g = wb.g ORDER BY wa.x DESC, wa.id LIMIT 2) t ON true`},
	{"w_lateral_latest", `SELECT wb.g, t.id FROM wb CROSS JOIN LATERAL (SELECT wa.id FROM wa WHERE wa.g = wb.g AND wa.s IS NOT NULL ORDER BY wa.id DESC LIMIT 1) t`},
	{"w_lateral_grouped", `SELECT wb.name, t.s, t.n FROM wb, LATERAL (SELECT wa.s, count(*) AS n FROM wa WHERE wa.g = wb.g GROUP BY wa.s) t`},
	{"w_lateral_distinct_on", `SELECT wb.id, t.s, t.x FROM wb JOIN LATERAL (SELECT DISTINCT ON (wa.s) wa.s, wa.x FROM wa WHERE wa.g = wb.g ORDER BY wa.s, wa.x, wa.id) t ON t.x > 2`},
}

// windowWrites change partitions, orders and ties.
var windowWrites = []string{
	`UPDATE wa SET x = x + 20 WHERE id % 6 = 0`,
	`UPDATE wa SET g = 4 WHERE id IN (1, 2, 3); DELETE FROM wa WHERE id IN (7, 8)`,
	`INSERT INTO wa VALUES (100, NULL, 5, NULL, NULL), (101, NULL, 5, 'p', 1), (102, 1, 100, 'q', 2)`,
	`UPDATE wa SET x = 3 WHERE g = 2; UPDATE wb SET name = 'renamed' WHERE g = 1`,
	`DELETE FROM wa WHERE g = 3; DELETE FROM wb WHERE g = 0`,
	`UPDATE wa SET s = 'q' WHERE s IS NULL; INSERT INTO wa SELECT i, i % 2, i % 4, 'p', i FROM generate_series(200, 210) i`,
	`DELETE FROM wa WHERE x > 50`,
}

// TestWindows builds every shape over existing data and keeps it exact
// through the writes, in both capture modes.
func TestWindows(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		keepShapes(t, mode, windowSchemaSQL, windowDefs, windowWrites)
	})
}

// TestWindowRefusals: a window whose value depends on the order of tied
// rows, and top-K without ORDER BY, are refused with the columns that
// would make them exact, and change nothing.
func TestWindowRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(windowSchemaSQL)
	ctx := context.Background()
	refuseEach(t, e, []refusal{
		{`SELECT id, row_number() OVER (PARTITION BY g ORDER BY x) AS rn FROM wa`, `(its ORDER BY is not total: it lacks "wa"."id")`},
		{`SELECT id, lag(x) OVER (ORDER BY x) AS p FROM wa`, `lacks "wa"."id"`},
		{`SELECT id, array_agg(x) OVER (PARTITION BY g) AS a FROM wa`, `lacks "wa"."id"`},
		{`SELECT wa.id, row_number() OVER (ORDER BY wa.id) AS rn FROM wa JOIN wb ON wb.g = wa.g`, `lacks "wb"."id"`},
		{`SELECT id FROM wa LIMIT 3`, "LIMIT without ORDER BY"},
		{`SELECT wb.g, t.n FROM wb, LATERAL (SELECT count(*) AS n FROM wa WHERE wa.g = wb.g HAVING count(*) > 2) t`, "filters its one row with HAVING; move the condition to the join's ON"},
		{`SELECT wb.g, t.id FROM wb, LATERAL (SELECT wa.id FROM wa WHERE wa.x > wb.g) t`, "not an equality between its own columns and the outer query's"},
		{`SELECT id FROM wa ORDER BY x FETCH FIRST 3 ROWS WITH TIES OFFSET 1`, "WITH TIES together with OFFSET"},
	})
	// A window over all rows says what every change costs; a partitioned
	// one says nothing.
	e.exec(`ANALYZE wa`)
	res, err := e.tr.Apply(ctx, `CREATE TRANSFORM w_note AS SELECT id, x FROM wa ORDER BY x DESC, id LIMIT 3;
		CREATE TRANSFORM w_quiet AS SELECT id, rank() OVER (PARTITION BY g ORDER BY x) AS r FROM wa`)
	if err != nil {
		t.Fatal(err)
	}
	if notes := fmt.Sprint(res[0].Notes); !strings.Contains(notes, "every change re-derives its first 3 rows") || !strings.Contains(notes, "without one about 40 source rows") {
		t.Errorf("top-K over all rows: notes %s, want the cost of its re-derive", notes)
	}
	if len(res[1].Notes) != 0 {
		t.Errorf("a partitioned window: notes %v, want none", res[1].Notes)
	}
}
