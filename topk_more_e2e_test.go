package trellis_test

import (
	"fmt"
	"sync"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Top-K subqueries in expressions, LATERAL aggregates without GROUP BY and
// DISTINCT ON with LIMIT (ADR 0038): each definition is compared with its
// query as written after the build and after writes that change values
// inside the top rows, delete them (the next row moves in), tie them, give
// them NULL orders, move rows between correlation groups, delete a
// group's last row and truncate the table.

const topkSchemaSQL = `
CREATE TABLE items (id int PRIMARY KEY, name text, asof int, price int);
CREATE TABLE prices (id int PRIMARY KEY, item_id int, valid_from int, price int);
CREATE INDEX ON prices (item_id, valid_from DESC, id);
INSERT INTO items SELECT i, 'i' || i, i % 7 + 3, (i % 5) * 10 FROM generate_series(1, 30) i;
INSERT INTO prices SELECT p, CASE WHEN p % 31 = 0 THEN NULL ELSE p % 25 END, p % 11, (p % 9) * 10 FROM generate_series(1, 150) p;
CREATE FUNCTION tk_add(int, int) RETURNS int AS 'SELECT $1 + coalesce($2, 0)' LANGUAGE sql IMMUTABLE;
CREATE AGGREGATE tk_total(int) (sfunc = tk_add, stype = int, initcond = '100');`

// topkDefs: the latest value per row in the select list and in WHERE,
// EXISTS past an OFFSET, NOT EXISTS with LIMIT, an order whose ties hold
// equal values, NULLs ordered last, an as-of correlation (no order per
// group), the top three as an array, IN over the top two, an uncorrelated
// top-K, and one read by an aggregate owner.
var topkDefs = []levelDef{
	{"tk_latest", `SELECT i.id, (SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC, p.id LIMIT 1) AS price FROM items i`},
	{"tk_latest_where", `SELECT i.id, i.name FROM items i WHERE i.price = (SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC, p.id LIMIT 1)`},
	{"tk_exists_offset", `SELECT i.id FROM items i WHERE EXISTS (SELECT 1 FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from, p.id LIMIT 1 OFFSET 4)`},
	{"tk_not_exists", `SELECT i.id FROM items i WHERE NOT EXISTS (SELECT 1 FROM prices p WHERE p.item_id = i.id AND p.price > 50 ORDER BY p.id LIMIT 1)`},
	{"tk_ties", `SELECT i.id, (SELECT p.valid_from FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC LIMIT 1) AS last_from FROM items i`},
	{"tk_nulls_last", `SELECT i.id, (SELECT p.id FROM prices p WHERE p.item_id = i.id ORDER BY p.price DESC NULLS LAST, p.id LIMIT 1) AS top_id FROM items i`},
	{"tk_asof", `SELECT i.id, (SELECT p.price FROM prices p WHERE p.item_id = i.id AND p.valid_from <= i.asof ORDER BY p.valid_from DESC, p.id LIMIT 1) AS price FROM items i`},
	{"tk_array_top3", `SELECT i.id, ARRAY(SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY p.price DESC NULLS LAST, p.id LIMIT 3) AS top3 FROM items i`},
	{"tk_in_top2", `SELECT i.id FROM items i WHERE i.price IN (SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC, p.id LIMIT 2)`},
	{"tk_uncorrelated", `SELECT i.id, i.price FROM items i WHERE i.price >= (SELECT p.price FROM prices p WHERE p.price IS NOT NULL ORDER BY p.price DESC LIMIT 1 OFFSET 5)`},
	{"tk_agg_owner", `SELECT i.asof, count(*) AS n FROM items i WHERE (SELECT p.valid_from FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC LIMIT 1) > 5 GROUP BY i.asof`},
	// LATERAL subqueries that aggregate without GROUP BY: one row per
	// outer row, whatever each aggregate gives over no rows (count 0, sum,
	// array_agg and bool_and NULL, count(*) + 1 one, a user aggregate its
	// initial condition), under LEFT, CROSS, comma and inner joins with
	// conditions, read by an aggregate owner.
	{"tl_counts", `SELECT i.id, x.n, x.s FROM items i LEFT JOIN LATERAL (SELECT count(*) AS n, sum(p.price) AS s FROM prices p WHERE p.item_id = i.id) x ON true`},
	{"tl_cross", `SELECT i.id, x.n, x.a, x.b FROM items i CROSS JOIN LATERAL (SELECT count(p.price) AS n, array_agg(p.id ORDER BY p.id) AS a, bool_and(p.price > 20) AS b FROM prices p WHERE p.item_id = i.id) x`},
	{"tl_on_cond", `SELECT i.id, x.n, x.hi FROM items i LEFT JOIN LATERAL (SELECT count(*) + 1 AS n, max(p.price) AS hi FROM prices p WHERE p.item_id = i.id AND p.valid_from <= i.asof) x ON x.n > 3`},
	{"tl_inner_cond", `SELECT i.id, x.n FROM items i JOIN LATERAL (SELECT count(*) AS n FROM prices p WHERE p.item_id = i.id) x ON x.n > 5`},
	{"tl_agg_owner", `SELECT i.asof, sum(x.n) AS total, count(*) AS k FROM items i, LATERAL (SELECT count(*) AS n FROM prices p WHERE p.item_id = i.id) x GROUP BY i.asof`},
	{"tl_user_agg", `SELECT i.id, x.t FROM items i LEFT JOIN LATERAL (SELECT tk_total(p.price) AS t FROM prices p WHERE p.item_id = i.id) x ON true`},
	// DISTINCT ON with LIMIT and OFFSET (a NULL group among the distinct
	// rows, NULLS orders, WITH TIES), in a LATERAL subquery, and top-K
	// over a derived table that is DISTINCT ON.
	{"td_limit", `SELECT DISTINCT ON (p.item_id) p.item_id, p.id, p.price FROM prices p ORDER BY p.item_id, p.valid_from DESC, p.id LIMIT 5 OFFSET 2`},
	{"td_desc_nulls", `SELECT DISTINCT ON (p.valid_from) p.valid_from, p.price FROM prices p ORDER BY p.valid_from DESC NULLS LAST, p.price, p.id LIMIT 3`},
	{"td_ties", `SELECT DISTINCT ON (p.item_id) p.item_id, p.price FROM prices p ORDER BY p.item_id NULLS FIRST, p.price DESC, p.id FETCH FIRST 3 ROWS WITH TIES`},
	{"td_over_don", `SELECT d.item_id, d.price FROM (SELECT DISTINCT ON (p.item_id) p.item_id, p.price, p.id FROM prices p ORDER BY p.item_id, p.valid_from DESC, p.id) d ORDER BY d.price DESC NULLS LAST, d.item_id LIMIT 4`},
	// Top-K levels hold the rows within the limit (ADR 0038 §5): a global
	// top-K refilled when its rows are deleted, WITH TIES over NULL orders,
	// and a filter on row_number() per group.
	{"tr_top3", `SELECT p.id, p.price FROM prices p ORDER BY p.price DESC NULLS LAST, p.id LIMIT 3`},
	{"tr_ties", `SELECT p.id, p.valid_from FROM prices p ORDER BY p.valid_from DESC NULLS FIRST FETCH FIRST 2 ROWS WITH TIES`},
	{"tr_per_item", `SELECT w.item_id, w.id FROM (SELECT p.item_id, p.id, row_number() OVER (PARTITION BY p.item_id ORDER BY p.price DESC NULLS LAST, p.id) AS rn FROM prices p) w WHERE w.rn <= 2`},
	{"td_lateral", `SELECT i.id, x.f, x.v FROM items i LEFT JOIN LATERAL (SELECT DISTINCT ON (p.valid_from) p.valid_from AS f, p.price AS v FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC, p.price, p.id LIMIT 2) x ON true`},
}

// topkWrites change, delete, tie and move the top rows.
var topkWrites = []string{
	`UPDATE prices SET price = price + 5 WHERE id % 4 = 0`,
	`DELETE FROM prices WHERE id IN (SELECT DISTINCT ON (item_id) id FROM prices ORDER BY item_id, valid_from DESC, id)`,
	`INSERT INTO prices VALUES (1000, 3, 11, 999), (1001, 3, 11, 998), (1002, 4, NULL, 5), (1003, NULL, 12, 7), (1004, 6, 12, NULL)`,
	`UPDATE prices SET item_id = item_id + 1 WHERE id % 7 = 0; DELETE FROM prices WHERE id IN (SELECT id FROM prices ORDER BY price DESC NULLS LAST, id LIMIT 2)`,
	`DELETE FROM prices WHERE item_id = 5`,
	`UPDATE items SET asof = asof + 3, price = 20 WHERE id % 3 = 0; UPDATE prices SET price = NULL WHERE id % 10 = 1`,
	`TRUNCATE prices`,
	`INSERT INTO prices SELECT p, p % 20, p % 6, (p % 4) * 10 FROM generate_series(1, 90) p`,
}

// TestTopKMore builds every shape over existing data and keeps it exact
// through the writes, in both capture modes.
func TestTopKMore(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := keepShapes(t, mode, topkSchemaSQL, topkDefs, topkWrites)
		// The global top 3's window level holds its 3 rows, not the table.
		var level string
		if err := e.conn.QueryRow(t.Context(), `SELECT format('%I.%I', l.schema_name, l.name) FROM trellis.transforms l
			JOIN trellis.transforms o ON o.id = l.owner WHERE o.name = 'tr_top3' AND l.plan ? 'window'`).Scan(&level); err != nil {
			t.Fatal(err)
		}
		if n := e.queryInt(`SELECT count(*) FROM ` + level); n > 3 {
			t.Errorf("the window level of tr_top3 holds %d rows, want at most 3", n)
		}
	})
}

// TestTopKMoreRefusals: what stays refused says which part, and the
// rewrite that works, and changes nothing.
func TestTopKMoreRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(topkSchemaSQL)
	refuseEach(t, e, []refusal{
		{`SELECT i.id, (SELECT p.price FROM prices p WHERE p.item_id = i.id LIMIT 1) AS price FROM items i`, "without ORDER BY, so which rows it returns depends on row order"},
		{`SELECT i.id, (SELECT max(p.price) FROM prices p WHERE p.item_id = i.id ORDER BY 1 OFFSET 1) AS price FROM items i`, "aggregates to one row, which its OFFSET or LIMIT 0 drops"},
		{`SELECT i.id FROM items i WHERE i.price IN (SELECT DISTINCT p.price FROM prices p ORDER BY p.price LIMIT 3)`, "write the distinct values as GROUP BY"},
		{`SELECT i.id, x.n FROM items i LEFT JOIN LATERAL (SELECT count(*) AS n FROM prices p WHERE p.item_id = i.id HAVING count(*) > 1) x ON true`, "move the condition to the join's ON"},
		{`SELECT i.id, x.n FROM items i LEFT JOIN LATERAL (SELECT count(*) AS n FROM prices p WHERE p.item_id = i.id OFFSET 1) x ON true`, "its OFFSET or LIMIT drops its one row"},
		{`SELECT i.id, x.n FROM prices q LEFT JOIN (items i CROSS JOIN LATERAL (SELECT count(*) AS n FROM prices p WHERE p.item_id = i.id) x) ON i.id = q.item_id`, "on the NULL-extended side of an outer join"},
		{`SELECT x.n, count(*) AS k FROM items i, LATERAL (SELECT count(*) AS n FROM prices p WHERE p.item_id = i.id) x GROUP BY x.n`, "group its target in a second transform"},
	})
}

// batchCounter counts, per transform, the keys its batches of changes
// re-derived (AppliedBatch.Scope) and the build batches it applied.
type batchCounter struct {
	trellis.NopObserver
	mu     sync.Mutex
	scope  map[string]int64
	builds map[string]int
}

func (c *batchCounter) BatchApplied(transform string, b trellis.AppliedBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scope == nil {
		c.scope, c.builds = map[string]int64{}, map[string]int{}
	}
	if b.Build {
		c.builds[transform]++
	} else {
		c.scope[transform] += b.Scope
	}
}

// take returns the keys counted for transform since the last take.
func (c *batchCounter) take(transform string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.scope[transform]
	delete(c.scope, transform)
	return n
}

// built is the number of build batches transform applied.
func (c *batchCounter) built(transform string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.builds[transform]
}

// TestScalarMovesNarrowed: an uncorrelated scalar compared in WHERE (and
// HAVING, as a BETWEEN bound in an expression, over an outer join, an
// integer cast to numeric) moves;
// only the outer rows between its old and new value are re-derived (ADR
// 0038 §4), counted by the observer, and every target stays equal to its
// query, through moves to and from NULL.
func TestScalarMovesNarrowed(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		obs := &batchCounter{}
		e := newEnv(t, trellis.Config{Capture: mode, Observer: obs})
		e.exec(`CREATE TABLE nm_o (id int PRIMARY KEY, amt int, grp int);
			INSERT INTO nm_o SELECT i, (i * 37) % 2000, i % 50 FROM generate_series(1, 20000) i;
			CREATE INDEX ON nm_o (amt);
			CREATE TABLE nm_g (id int PRIMARY KEY, name text);
			INSERT INTO nm_g SELECT i, 'g' || i FROM generate_series(0, 49) i;
			CREATE TABLE nm_l (id int PRIMARY KEY, qty int);
			INSERT INTO nm_l SELECT i, i * 100 FROM generate_series(1, 10) i;`)
		defs := []levelDef{
			{"nm_above", `SELECT o.id, o.amt FROM nm_o o WHERE o.amt > (SELECT avg(l.qty) FROM nm_l l)`},
			{"nm_between", `SELECT o.id FROM nm_o o WHERE o.amt BETWEEN (SELECT min(l.qty) FROM nm_l l) AND (SELECT max(l.qty) FROM nm_l l) * 2 - 100`},
			{"nm_join", `SELECT o.id, g.name FROM nm_o o LEFT JOIN nm_g g ON g.id = o.grp WHERE o.amt < (SELECT max(l.qty) FROM nm_l l) / 4`},
			{"nm_cast", `SELECT o.id FROM nm_o o WHERE o.amt::numeric >= (SELECT avg(l.qty) FROM nm_l l) - 0.5`},
			{"nm_having", `SELECT o.grp, count(*) AS n FROM nm_o o GROUP BY o.grp HAVING sum(o.amt) > (SELECT sum(l.qty) * 3 FROM nm_l l)`},
		}
		var script string
		for _, d := range defs {
			script += fmt.Sprintf("CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
		}
		e.apply(script)
		e.start()
		levelConverge(e, defs, "after the build")
		avg := func() string {
			var v *string
			if err := e.conn.QueryRow(t.Context(), `SELECT avg(qty)::text FROM nm_l`).Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v == nil {
				return "NULL"
			}
			return *v
		}
		for i, w := range []struct {
			sql    string
			narrow bool // the average moves between two values
		}{
			{`UPDATE nm_l SET qty = qty + 10 WHERE id = 1`, true},
			{`UPDATE nm_l SET qty = qty * 2`, true},
			{`UPDATE nm_l SET qty = qty - 1 WHERE id > 5`, true},
			{`DELETE FROM nm_l`, false},
			{`INSERT INTO nm_l SELECT i, i * 90 FROM generate_series(1, 10) i`, false},
			{`UPDATE nm_l SET qty = 5 WHERE id = 10; UPDATE nm_o SET amt = 1999 WHERE id = 7; DELETE FROM nm_g WHERE id = 3`, true},
		} {
			before := avg()
			obs.take("nm_above")
			e.exec(w.sql)
			when := fmt.Sprintf("write %d (%s)", i+1, w.sql)
			levelConverge(e, defs, when)
			after := avg()
			scope := obs.take("nm_above")
			if !w.narrow {
				continue
			}
			inRange := e.queryInt(`SELECT count(*) FROM nm_o WHERE amt BETWEEN floor(least($1::numeric, $2::numeric)) AND ceil(greatest($1::numeric, $2::numeric))`, before, after)
			// The rows in range, and the one outer row the write changed.
			if scope > inRange+1 {
				t.Errorf("%s: the average moved from %s to %s and the batches re-derived %d keys; %d rows lie between", when, before, after, scope, inRange)
			}
			if scope == 0 && inRange > 0 {
				t.Errorf("%s: the average moved from %s to %s over %d rows and nothing was re-derived", when, before, after, inRange)
			}
		}
	})
}

// TestGlobalWindowBuildsOnce: a window over all rows (no PARTITION BY)
// re-derives every row in any batch, so its build is one batch, not one
// per chunk of 5,000 keys (ADR 0038 §6); its target equals its query
// after the build and after writes.
func TestGlobalWindowBuildsOnce(t *testing.T) {
	t.Parallel()
	obs := &batchCounter{}
	e := newEnv(t, trellis.Config{Observer: obs})
	e.exec(`CREATE TABLE gw (id int PRIMARY KEY, x int);
		INSERT INTO gw SELECT i, (i * 7) % 1000 FROM generate_series(1, 12000) i`)
	defs := []levelDef{{"gw_total", `SELECT id, x, sum(x) OVER () AS total, rank() OVER (ORDER BY x) AS r FROM gw`}}
	e.apply(fmt.Sprintf("CREATE TRANSFORM %s AS %s", defs[0].name, defs[0].query))
	e.start()
	levelConverge(e, defs, "after the build")
	if n := obs.built("gw_total"); n != 1 {
		t.Errorf("the build of a window over all 12,000 rows applied %d batches, want 1", n)
	}
	e.exec(`DELETE FROM gw WHERE id % 5 = 0; UPDATE gw SET x = x + 3 WHERE id % 7 = 0`)
	levelConverge(e, defs, "after the writes")
}
