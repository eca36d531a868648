package trellis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Subqueries in expressions (ADR 0030): each definition is compared with
// its query as written (PostgreSQL evaluates the subqueries: the oracle)
// after the build and after writes on both sides of every subquery —
// the last matching row deleted (a NOT EXISTS flips), a NULL arriving
// among NOT IN's values, a scalar's value moving and staying, rows moving
// between correlation groups.

const sublinkSchemaSQL = `
CREATE TABLE c (id int PRIMARY KEY, region text, tier int);
CREATE TABLE o (id int PRIMARY KEY, cust int, amt int, status text);
CREATE TABLE l (id int PRIMARY KEY, oid int, qty int, sku int);
INSERT INTO c SELECT g, (ARRAY['x', 'y', NULL])[g % 3 + 1], CASE WHEN g % 4 = 0 THEN NULL ELSE g % 3 END FROM generate_series(1, 20) g;
INSERT INTO o SELECT g, g % 25, g % 17, (ARRAY['paid', 'new'])[g % 2 + 1] FROM generate_series(1, 60) g;
INSERT INTO l SELECT g, g % 70, g % 5, g % 4 FROM generate_series(1, 120) g;`

// sublinkDefs are the shapes: EXISTS and NOT EXISTS, IN and NOT IN (NULLs
// among the values), = ANY, <> ALL, > ANY, scalar subqueries correlated and
// not, aggregate or not, in the select list, WHERE and ON, combined with
// OR, nested two levels, correlated by an equality and by a comparison,
// three-valued IN read as a value, ARRAY (…), an aggregate owner, and WITH.
var sublinkDefs = []levelDef{
	{"sq_exists", `SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.cust = c.id AND o.status = 'paid')`},
	{"sq_not_exists", `SELECT c.id, c.region FROM c WHERE NOT EXISTS (SELECT 1 FROM o WHERE o.cust = c.id AND o.amt > 5)`},
	{"sq_in", `SELECT o.id FROM o WHERE o.cust IN (SELECT id FROM c WHERE tier > 0)`},
	{"sq_not_in", `SELECT o.id FROM o WHERE o.cust NOT IN (SELECT c.tier FROM c WHERE c.region = 'x')`},
	{"sq_any", `SELECT o.id FROM o WHERE o.amt = ANY (SELECT l.qty FROM l WHERE l.oid = o.id)`},
	{"sq_all", `SELECT o.id FROM o WHERE o.cust <> ALL (SELECT c.tier FROM c WHERE c.region = 'y')`},
	{"sq_gt_any", `SELECT o.id FROM o WHERE o.amt > ANY (SELECT l.qty * 3 FROM l WHERE l.sku = 1)`},
	{"sq_scalar_count", `SELECT c.id, (SELECT count(*) FROM o WHERE o.cust = c.id) AS n FROM c`},
	{"sq_scalar_where", `SELECT o.id FROM o WHERE o.amt > (SELECT avg(o2.amt) FROM o o2 WHERE o2.cust = o.cust)`},
	{"sq_scalar_total", `SELECT o.id, o.amt FROM o WHERE o.amt > (SELECT avg(amt) FROM o)`},
	{"sq_scalar_row", `SELECT o.id, (SELECT c.region FROM c WHERE c.id = o.cust) AS region FROM o`},
	{"sq_exists_cmp", `SELECT o.id FROM o WHERE EXISTS (SELECT 1 FROM l WHERE l.oid = o.id AND l.qty > o.amt)`},
	{"sq_or", `SELECT c.id FROM c WHERE c.tier = 1 OR EXISTS (SELECT 1 FROM o WHERE o.cust = c.id AND o.status = 'new')`},
	{"sq_nested", `SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.cust = c.id AND NOT EXISTS (SELECT 1 FROM l WHERE l.oid = o.id))`},
	{"sq_in_value", `SELECT o.id, o.cust IN (SELECT c.tier FROM c) AS hit FROM o`},
	{"sq_array", `SELECT c.id, ARRAY(SELECT o.id FROM o WHERE o.cust = c.id ORDER BY o.id) AS ids FROM c`},
	{"sq_on", `SELECT o.id, c.region FROM o LEFT JOIN c ON c.id = o.cust AND EXISTS (SELECT 1 FROM l WHERE l.oid = o.id)`},
	{"sq_join", `SELECT o.id, c.region FROM o JOIN c ON c.id = o.cust WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.oid = o.id AND l.sku = c.tier)`},
	{"sq_agg_owner", `SELECT o.status, count(*) AS n, sum(o.amt) AS total FROM o WHERE EXISTS (SELECT 1 FROM l WHERE l.oid = o.id AND l.qty > 2) GROUP BY o.status`},
	// Read over groups (aggsplit.go): HAVING against a total, against a
	// correlated count, EXISTS over an aggregate, a scalar per group in
	// the select list, and the TPC-H Q11 shape.
	{"sq_having_total", `SELECT o.cust, count(*) AS n, sum(o.amt) AS s FROM o GROUP BY o.cust HAVING sum(o.amt) > (SELECT avg(l.qty) * 10 FROM l)`},
	{"sq_having_correlated", `SELECT o.cust, count(*) AS n FROM o GROUP BY o.cust HAVING count(*) >= (SELECT count(*) FROM l WHERE l.sku = o.cust % 4) / 10`},
	{"sq_having_exists_agg", `SELECT o.status, max(o.amt) AS hi FROM o GROUP BY o.status HAVING EXISTS (SELECT 1 FROM l WHERE l.qty = max(o.amt) % 5)`},
	{"sq_select_per_group", `SELECT o.cust, sum(o.amt) AS s, (SELECT c.region FROM c WHERE c.id = o.cust) AS region FROM o GROUP BY o.cust`},
	{"sq_q11_shape", `SELECT l.sku, sum(l.qty * l.oid) AS value FROM l JOIN o ON o.id = l.oid GROUP BY l.sku
		HAVING sum(l.qty * l.oid) > (SELECT sum(l2.qty * l2.oid) * 0.2 FROM l l2 JOIN o o2 ON o2.id = l2.oid) ORDER BY value DESC`},
	{"sq_with", `WITH big AS (SELECT cust, sum(amt) AS s FROM o GROUP BY cust) SELECT c.id FROM c WHERE c.id IN (SELECT big.cust FROM big WHERE big.s > 20)`},
}

// sublinkWrites move rows on both sides of every subquery.
var sublinkWrites = []string{
	`DELETE FROM o WHERE cust = 3`,
	`UPDATE o SET status = 'paid' WHERE cust = 4; UPDATE o SET amt = amt + 7 WHERE id % 5 = 0`,
	`UPDATE c SET tier = NULL WHERE id = 1; UPDATE c SET region = 'x' WHERE id = 2`,
	`DELETE FROM l WHERE oid BETWEEN 10 AND 20; INSERT INTO l VALUES (500, 3, 9, 1), (501, 61, 0, 2)`,
	`UPDATE o SET cust = cust + 1 WHERE id % 7 = 0`,
	`UPDATE c SET tier = 2 WHERE tier IS NULL; INSERT INTO o VALUES (100, 21, 16, 'paid')`,
	`UPDATE o SET amt = amt WHERE id < 10; UPDATE l SET qty = qty + 1 WHERE id % 3 = 0`,
	`DELETE FROM c WHERE id > 15; DELETE FROM l WHERE sku = 1`,
}

// TestSublinks builds every shape over existing data and keeps it exact
// through the writes, in both capture modes.
func TestSublinks(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		keepShapes(t, mode, sublinkSchemaSQL, sublinkDefs, sublinkWrites)
	})
}

// TestSublinkRefusals: subqueries the engine cannot keep are refused with
// a sentence naming the subquery and the fix, and change nothing.
func TestSublinkRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(sublinkSchemaSQL)
	refuseEach(t, e, []refusal{
		{`SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.cust = c.id AND EXISTS (SELECT 1 FROM l WHERE l.sku = c.tier))`, "refers to the query two levels out"},
		{`SELECT o.cust, count(*) AS n FROM o GROUP BY o.cust HAVING count(*) > (SELECT avg(qty) FROM l WHERE l.sku = o.amt)`, `subquery uses ungrouped column "o.amt" from outer query`},
		{`SELECT o.cust, count(*) AS n FROM o GROUP BY o.cust, (SELECT max(qty) FROM l)`, "a subquery in GROUP BY"},
		{`SELECT c.id, (SELECT max(o.amt) FROM o WHERE o.cust = c.id GROUP BY o.status ORDER BY 1 LIMIT 1) AS m FROM c`, "groups its rows"},
		{`SELECT c.id FROM c WHERE c.id IN (SELECT o.cust FROM o WHERE o.amt > random())`, "random() is not immutable"},
		{`SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM o WHERE o.cust = c.id UNION SELECT 1 FROM l WHERE l.oid = c.id)`, "set operations in a correlated subquery arrive in a later version"},
	})
}

// TestScalarMoves: only the subquery's side changes, moving a scalar's
// value: an uncorrelated average that outer rows compare with, and a
// correlated maximum read in the select list. Every outer row whose
// predicate flips or whose value moves is re-derived although the outer
// table is never written (the stale_scalar planted bug fails it).
func TestScalarMoves(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		defs := []levelDef{
			{"sm_above_avg", `SELECT o.id, o.amt FROM o WHERE o.amt > (SELECT avg(l.qty) * 3 FROM l)`},
			{"sm_max_per_row", `SELECT o.id, (SELECT max(l.qty) FROM l WHERE l.oid = o.id) AS m FROM o`},
			{"sm_count_having", `SELECT o.status, count(*) AS n FROM o GROUP BY o.status HAVING count(*) > (SELECT count(*) FROM l WHERE l.qty = 4) / 2`},
		}
		keepShapes(t, mode, sublinkSchemaSQL, defs, []string{
			`UPDATE l SET qty = qty + 2`,
			`UPDATE l SET qty = 0 WHERE id % 2 = 0`,
			`INSERT INTO l SELECT g, g % 70, 4, 0 FROM generate_series(200, 290) g`,
			`DELETE FROM l WHERE qty = 4`,
		})
	})
}

// TestSubqueryAheadOfItsLevel is ADR 0043's case, made deterministic by a
// lock: the owner re-derives a row while its dependency level is held
// back, reads a subquery answer the level never stores (the level's next
// re-derive sees the source back where it was and writes nothing), and
// must re-derive the row again once the level has caught up. Before ADR
// 0043 the owner kept the answer it read for good.
func TestSubqueryAheadOfItsLevel(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(`CREATE TABLE ah_o (id int PRIMARY KEY, grp text, v int);
			CREATE TABLE ah_s (k text PRIMARY KEY);
			INSERT INTO ah_o VALUES (1, 'b', 0), (2, 'c', 0);
			INSERT INTO ah_s VALUES ('b')`)
		e.apply(`CREATE TRANSFORM ahead AS SELECT o.grp, count(*) AS n FROM ah_o o WHERE NOT EXISTS (SELECT 1 FROM ah_s s WHERE s.k = o.grp) GROUP BY 1`)
		e.start()
		e.converge("built")
		e.exec(`DELETE FROM ah_s WHERE k = 'b'`)
		e.converge("b gone from the subquery's table")

		var ledger string
		if err := e.conn.QueryRow(context.Background(), `SELECT format('%I.%I', plan->'ledger'->>'schema', plan->'ledger'->>'name')
			FROM trellis.transforms WHERE owner IS NOT NULL`).Scan(&ledger); err != nil {
			t.Fatal(err)
		}
		// Hold the level back: its re-derive reads its ledger, which the
		// owner never reads.
		lock, err := pgx.Connect(context.Background(), e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close(context.Background())
		tx, err := lock.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(context.Background(), "LOCK TABLE "+ledger+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		e.exec(`INSERT INTO ah_s VALUES ('b')`)
		// The owner re-derives group b now: the subquery sees b again.
		e.exec(`UPDATE ah_o SET v = v + 1 WHERE id = 1`)
		deadline := time.Now().Add(waitTimeout)
		for {
			var n int
			if err := e.conn.QueryRow(context.Background(), `SELECT count(*) FROM ahead WHERE grp = 'b'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the owner never re-derived group b while its level was held back")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// b goes again before the level re-derives: it will see no b, as
		// it stores, and write nothing.
		e.exec(`DELETE FROM ah_s WHERE k = 'b'`)
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.converge("the level caught up")
		var n int
		if err := e.conn.QueryRow(context.Background(), `SELECT n FROM ahead WHERE grp = 'b'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("group b: n = %d, %v; want 1", n, err)
		}
	})
}

// TestSubqueryRepairWithoutRunner: a self-check repair run with no runner
// attached re-derives an owner whose dependency level is behind (ADR 0043).
// The rows the check flags are exact for the repair's snapshot but no
// level write may wake them, so they go to the runner to re-derive again
// (as released held keys, of the owner's own table only): here the
// subquery's row comes back before the runner starts, the level sees what
// it stores and writes nothing, and only that hand-off brings the owner
// back to its query.
func TestSubqueryRepairWithoutRunner(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
		defer cancel()
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(`CREATE TABLE rw_o (id int PRIMARY KEY, grp text);
			CREATE TABLE rw_s (k text PRIMARY KEY);
			INSERT INTO rw_o VALUES (1, 'b'), (2, 'c');
			INSERT INTO rw_s VALUES ('b')`)
		e.apply(`CREATE TRANSFORM rw AS SELECT o.grp, count(*) AS n FROM rw_o o WHERE NOT EXISTS (SELECT 1 FROM rw_s s WHERE s.k = o.grp) GROUP BY 1`)
		e.start()
		e.converge("built")
		e.stop()
		// No runner: the level keeps its row for b.
		e.exec(`DELETE FROM rw_s WHERE k = 'b'`)
		j, err := e.tr.SelfCheck(ctx, "rw", trellis.SelfCheckOptions{Wait: true, Repair: true})
		if err != nil || j.Report == nil {
			t.Fatalf("SelfCheck: %+v, %v", j, err)
		}
		if r := j.Report; r.ByRunner || r.Repair == nil || r.Repair.Fixed != 1 || r.Repair.Remaining != 0 {
			t.Fatalf("self-check repair with no runner: %+v (repair %+v); want run here, 1 fixed, none remaining", r, r.Repair)
		}
		var queued []string
		rows, err := e.conn.Query(ctx, `SELECT format('%s %s', table_oid::regclass, key) FROM trellis.held_keys h
			JOIN trellis.transforms t ON t.id = h.transform_id WHERE t.name = 'rw' AND h.released ORDER BY 1`)
		if err == nil {
			queued, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(queued) != "[rw_o {1}]" {
			t.Errorf("keys queued for the runner: %v; want [rw_o {1}], the owner's own row", queued)
		}
		// b comes back before the level re-derives: it sees the row it
		// stores and writes nothing.
		e.exec(`INSERT INTO rw_s VALUES ('b')`)
		e.start()
		e.converge("the runner re-derived what the repair queued")
	})
}
