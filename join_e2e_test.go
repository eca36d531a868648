package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// End-to-end tests of join transforms (ADR 0010): the whole pipeline — slot,
// intake routes per source table, workers, cover-walk builds — against a
// real server, with every source table written, dimensions included.

// joinSchemaSQL is a small star: orders → customers → regions, and
// order_lines with a composite key. The join columns are indexed (a
// re-derive through a join reaches the other tables by them).
const joinSchemaSQL = `
CREATE TABLE regions (id int PRIMARY KEY, name text);
CREATE TABLE customers (id int PRIMARY KEY, region_id int, name text);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount numeric(12,2), status text);
CREATE TABLE order_lines (order_id bigint, line_no int, sku text, qty int, PRIMARY KEY (order_id, line_no));
CREATE INDEX ON customers (region_id);
CREATE INDEX ON orders (customer_id);
`

// Key domains of the random writes (the seed data fills part of them, so
// inserts, deletes and key moves collide with existing rows).
const (
	joinOrderIDs    = 500
	joinCustomerIDs = 50
	joinRegionIDs   = 10
	joinLineNos     = 3
)

// joinSeedSQL fills the tables: region names repeat (two regions share a
// group of the per-name aggregate), some customers have a dangling or NULL
// region, some orders a dangling or NULL customer or a NULL amount, and
// region 9 has no customer.
func joinSeedSQL(orders int) string {
	return fmt.Sprintf(`
INSERT INTO regions SELECT g, (ARRAY['north', 'south', 'east', 'west', 'north'])[g %% 5 + 1] FROM generate_series(1, 6) g;
INSERT INTO regions VALUES (9, 'far');
INSERT INTO customers SELECT g, nullif(g %% 8, 7), 'c' || g FROM generate_series(1, 40) g;
INSERT INTO orders SELECT g, nullif(g %% 45, 44), CASE WHEN g %% 17 = 0 THEN NULL ELSE (g * 37 %% 10000) / 100.0 END,
	(ARRAY['new', 'paid', 'cancelled', NULL])[g %% 4 + 1] FROM generate_series(1, %d) g;
INSERT INTO order_lines SELECT o, l, 'sku' || ((o + l) %% 7), (o * l) %% 5
	FROM generate_series(1, %d) o, generate_series(1, 2) l WHERE (o + l) %% 3 <> 0;`, orders, orders)
}

// joinDef is a transform and the query its target must equal. The query is
// the test's own text, not the engine's deparse of it, so the comparison
// does not trust the engine's rewriting.
type joinDef struct{ name, query string }

var joinLiveDefs = []joinDef{
	{"j_order_region", `SELECT o.id, o.amount, o.status, c.name AS customer, r.name AS region
		FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id`},
	{"j_line_totals", `SELECT o.id AS order_id, l.line_no, l.sku, l.qty * o.amount AS line_total
		FROM orders o, order_lines l WHERE l.order_id = o.id AND o.status <> 'cancelled'`},
	{"j_customer_orders", `SELECT c.id AS customer_id, c.name, o.id AS order_id, o.amount
		FROM customers c LEFT JOIN orders o ON o.customer_id = c.id`},
	{"j_customer_region", `SELECT c.id AS customer_id, c.name AS customer, r.id AS region_id, r.name AS region
		FROM customers c FULL JOIN regions r ON r.id = c.region_id`},
	{"j_neighbours", `SELECT c.id, c.name, p.id AS peer_id, p.name AS peer
		FROM customers c JOIN customers p ON p.region_id = c.region_id AND p.id <> c.id`},
	{"j_revenue_by_region", `SELECT r.name AS region, count(*) AS n, sum(o.amount) AS revenue, avg(o.amount) AS avg_amount,
		min(o.amount) AS smallest, max(o.amount) AS largest
		FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id GROUP BY r.name`},
	{"j_customer_totals", `SELECT count(*) AS n, count(o.id) AS orders, sum(o.amount) AS revenue, max(o.amount) AS largest
		FROM customers c LEFT JOIN orders o ON o.customer_id = c.id`},
}

func joinScript(defs []joinDef) string {
	var b strings.Builder
	for _, d := range defs {
		fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
	}
	return b.String()
}

// joinCheck compares join targets with their queries after convergence.
// A transform is reported at its first divergence only (a wrong row tends
// to stay wrong, and later phases would repeat it); the others go on being
// checked, so one run shows every transform that breaks and where.
type joinCheck struct {
	e      *env
	defs   []joinDef
	broken map[string]string // transform → the phase it first differed in
}

func newJoinCheck(e *env, defs []joinDef) *joinCheck {
	return &joinCheck{e: e, defs: defs, broken: map[string]string{}}
}

// converge waits until every transform applied everything written so far,
// then compares each target with its query (a two-way EXCEPT ALL, in one
// snapshot) and, as a second opinion, runs the engine's own CompareNow (its
// deparsed query). A transform that does not converge at all stops the
// test.
func (c *joinCheck) converge(when string) {
	e := c.e
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	tok, err := e.tr.WatermarkToken(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.tr.AwaitConverged(ctx, tok); err != nil {
		e.t.Fatalf("%s: transforms did not converge: %v", when, err)
	}
	all, err := e.tr.Definitions(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	byName := map[string]trellis.Definition{}
	for _, d := range all {
		byName[d.Name] = d
	}
	for _, d := range c.defs {
		if _, ok := c.broken[d.name]; ok {
			continue
		}
		def, ok := byName[d.name]
		if !ok {
			e.t.Errorf("%s: transform %s is not defined", when, d.name)
			c.broken[d.name] = when
			continue
		}
		diff, err := selfcheck.Compare(ctx, e.conn, pgx.Identifier{def.Schema, d.name}, def.Columns, d.query)
		if err != nil {
			e.t.Fatalf("%s: compare %s: %v", when, d.name, err)
		}
		if !diff.Equal() {
			c.broken[d.name] = when
			e.t.Errorf("%s: transform %s differs from its query (target columns %v)\n  query: %s\n  missing from the target (%d): %v\n  extra in the target (%d): %v",
				when, d.name, def.Columns, d.query, diff.Missing, diff.MissingSample, diff.Extra, diff.ExtraSample)
			continue
		}
		r, err := e.tr.CompareNow(ctx, d.name)
		if err != nil {
			e.t.Fatalf("%s: CompareNow %s: %v", when, d.name, err)
		}
		if !r.Equal() {
			c.broken[d.name] = when
			e.t.Errorf("%s: transform %s equals the test's query but not the engine's own (%s): missing %d %v extra %d %v",
				when, d.name, def.Query, r.Missing, r.MissingSample, r.Extra, r.ExtraSample)
		}
	}
}

// joinMix weighs the tables a writer picks from.
type joinMix struct{ orders, lines, customers, regions int }

func (m joinMix) pick(rng *rand.Rand) string {
	n := rng.Intn(m.orders + m.lines + m.customers + m.regions)
	switch {
	case n < m.orders:
		return "orders"
	case n < m.orders+m.lines:
		return "order_lines"
	case n < m.orders+m.lines+m.customers:
		return "customers"
	}
	return "regions"
}

// joinStmt is one random write to table: inserts (upserts), deletes, updates
// of join columns and of other columns, primary-key updates, and — for a
// region — a delete and re-insert in one statement list.
func joinStmt(rng *rand.Rand, table string) string {
	null := func(s string) string {
		if rng.Intn(10) == 0 {
			return "NULL"
		}
		return s
	}
	name := func(prefix string, n int) string { return null(fmt.Sprintf("'%s%d'", prefix, rng.Intn(n))) }
	regionName := func() string {
		return null([]string{"'north'", "'south'", "'east'", "'west'", "'far'"}[rng.Intn(5)])
	}
	switch table {
	case "orders":
		id := 1 + rng.Intn(joinOrderIDs)
		switch rng.Intn(6) {
		case 0, 1:
			return fmt.Sprintf(`INSERT INTO orders VALUES (%d, %s, %s, %s) ON CONFLICT (id) DO UPDATE
				SET customer_id = EXCLUDED.customer_id, amount = EXCLUDED.amount, status = EXCLUDED.status`,
				id, null(fmt.Sprint(rng.Intn(joinCustomerIDs+1))), null(fmt.Sprintf("%d.%02d", rng.Intn(200), rng.Intn(100))),
				null([]string{"'new'", "'paid'", "'cancelled'"}[rng.Intn(3)]))
		case 2:
			return fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
		case 3:
			return fmt.Sprintf(`UPDATE orders SET customer_id = %s WHERE id = %d`, null(fmt.Sprint(rng.Intn(joinCustomerIDs+1))), id)
		case 4:
			return fmt.Sprintf(`UPDATE orders SET amount = amount + 1, status = %s WHERE customer_id = %d`,
				null([]string{"'new'", "'paid'", "'cancelled'"}[rng.Intn(3)]), rng.Intn(joinCustomerIDs))
		default:
			nid := 1 + rng.Intn(joinOrderIDs)
			return fmt.Sprintf(`UPDATE orders SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM orders WHERE id = %d)`, nid, id, nid)
		}
	case "order_lines":
		o, l := 1+rng.Intn(joinOrderIDs), 1+rng.Intn(joinLineNos)
		switch rng.Intn(5) {
		case 0, 1:
			return fmt.Sprintf(`INSERT INTO order_lines VALUES (%d, %d, %s, %s) ON CONFLICT (order_id, line_no) DO UPDATE
				SET sku = EXCLUDED.sku, qty = EXCLUDED.qty`, o, l, name("sku", 7), null(fmt.Sprint(rng.Intn(5))))
		case 2:
			return fmt.Sprintf(`DELETE FROM order_lines WHERE order_id = %d AND line_no = %d`, o, l)
		case 3:
			return fmt.Sprintf(`UPDATE order_lines SET qty = qty + 1 WHERE order_id = %d`, o)
		default: // the join column is part of the key
			no := 1 + rng.Intn(joinOrderIDs)
			return fmt.Sprintf(`UPDATE order_lines SET order_id = %d WHERE order_id = %d AND line_no = %d
				AND NOT EXISTS (SELECT 1 FROM order_lines WHERE order_id = %d AND line_no = %d)`, no, o, l, no, l)
		}
	case "customers":
		id := 1 + rng.Intn(joinCustomerIDs)
		switch rng.Intn(6) {
		case 0:
			return fmt.Sprintf(`INSERT INTO customers VALUES (%d, %s, %s) ON CONFLICT (id) DO UPDATE
				SET region_id = EXCLUDED.region_id, name = EXCLUDED.name`, id, null(fmt.Sprint(rng.Intn(joinRegionIDs))), name("c", 60))
		case 1:
			return fmt.Sprintf(`DELETE FROM customers WHERE id = %d`, id)
		case 2, 3: // moved to another region
			return fmt.Sprintf(`UPDATE customers SET region_id = %s WHERE id = %d`, null(fmt.Sprint(rng.Intn(joinRegionIDs))), id)
		case 4:
			return fmt.Sprintf(`UPDATE customers SET name = %s WHERE id = %d`, name("c", 60), id)
		default:
			nid := 1 + rng.Intn(joinCustomerIDs)
			return fmt.Sprintf(`UPDATE customers SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM customers WHERE id = %d)`, nid, id, nid)
		}
	default: // regions
		id := 1 + rng.Intn(joinRegionIDs-1)
		switch rng.Intn(5) {
		case 0:
			return fmt.Sprintf(`INSERT INTO regions VALUES (%d, %s) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name`, id, regionName())
		case 1: // every region is referenced by many orders
			return fmt.Sprintf(`DELETE FROM regions WHERE id = %d`, id)
		case 2:
			return fmt.Sprintf(`DELETE FROM regions WHERE id = %d; INSERT INTO regions VALUES (%d, %s) ON CONFLICT (id) DO NOTHING`, id, id, regionName())
		case 3:
			return fmt.Sprintf(`UPDATE regions SET name = %s WHERE id = %d`, regionName(), id)
		default:
			nid := 1 + rng.Intn(joinRegionIDs-1)
			return fmt.Sprintf(`UPDATE regions SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM regions WHERE id = %d)`, nid, id, nid)
		}
	}
}

// writeStats counts a burst's transactions.
type writeStats struct{ commits, conflicts atomic.Int64 }

// conflictCode reports whether err is what concurrent writers to the same
// rows legitimately get (a key taken between the guard and the write, a
// deadlock); such a transaction is rolled back and the writer goes on.
func conflictCode(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// joinBurst writes from writers goroutines, each on its own connection, in
// transactions of 1..3 random statements, until d has passed. When
// truncateAt > 0, writer 0 truncates customers once after that long (and
// inserts customers again at once, so joins have partners).
func joinBurst(t *testing.T, dsn string, seed int64, writers int, mix joinMix, d, truncateAt time.Duration) *writeStats {
	t.Helper()
	s, err := joinBurstErr(dsn, seed, writers, mix, d, truncateAt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// joinBurstErr is joinBurst for goroutines other than the test's.
func joinBurstErr(dsn string, seed int64, writers int, mix joinMix, d, truncateAt time.Duration) (*writeStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	stats := &writeStats{}
	start := time.Now()
	errc := make(chan error, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errc <- joinWriter(ctx, dsn, seed+int64(w), mix, start, d, w == 0 && truncateAt > 0, truncateAt, stats)
		}(w)
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return stats, errors.Join(errs...)
}

func joinWriter(ctx context.Context, dsn string, seed int64, mix joinMix, start time.Time, d time.Duration, truncate bool, truncateAt time.Duration, stats *writeStats) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewSource(seed))
	// txn runs stmts in one transaction and reports whether it committed.
	txn := func(stmts []string) (bool, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return false, err
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				if conflictCode(err) {
					stats.conflicts.Add(1)
					return false, nil
				}
				return false, fmt.Errorf("%s: %w", s, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			if conflictCode(err) {
				stats.conflicts.Add(1)
				return false, nil
			}
			return false, err
		}
		stats.commits.Add(1)
		return true, nil
	}
	for time.Since(start) < d {
		if truncate && time.Since(start) >= truncateAt {
			for {
				ok, err := txn([]string{`TRUNCATE customers`})
				if err != nil {
					return err
				}
				if ok {
					break
				}
			}
			if _, err := txn([]string{fmt.Sprintf(`INSERT INTO customers SELECT g, g %% %d, 'r' || g FROM generate_series(1, 40) g ON CONFLICT (id) DO NOTHING`, joinRegionIDs)}); err != nil {
				return err
			}
			truncate = false
			continue
		}
		stmts := make([]string, 1+rng.Intn(3))
		for i := range stmts {
			stmts[i] = joinStmt(rng, mix.pick(rng))
		}
		if _, err := txn(stmts); err != nil {
			return err
		}
	}
	return nil
}

// queryInt runs a query returning one integer.
func (e *env) queryInt(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestJoinTransformsLive builds join transforms over existing data, then
// keeps them exact through concurrent writes to every table and through
// the dimension changes that only lineage and outer-join expansion handle.
func TestJoinTransformsLive(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testJoinTransformsLive)
}

func testJoinTransformsLive(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	e.exec(joinSchemaSQL)
	e.exec(joinSeedSQL(400))
	e.apply(joinScript(joinLiveDefs))
	e.start()
	check := newJoinCheck(e, joinLiveDefs)
	check.converge("after the build over existing data")

	ctx := context.Background()
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != "live" {
			t.Errorf("after the build: %s is %s, want live (%+v)", s.Name, s.State, s)
		}
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	// The region with the most orders through its customers.
	busiestRegion := func() (int64, int64) {
		var id, n int64
		if err := e.conn.QueryRow(ctx, `SELECT r.id, count(*) FROM orders o JOIN customers c ON c.id = o.customer_id
			JOIN regions r ON r.id = c.region_id GROUP BY r.id ORDER BY count(*) DESC, r.id LIMIT 1`).Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		return id, n
	}
	var region, refs int64
	phases := []struct {
		name  string
		write func(t *testing.T)
	}{
		{"concurrent writes to every table (3 writers, a TRUNCATE customers midway)", func(t *testing.T) {
			s := joinBurst(t, e.dsn, seed, 3, joinMix{orders: 4, lines: 2, customers: 3, regions: 2}, 3*time.Second, 1500*time.Millisecond)
			t.Logf("burst: %d transactions committed, %d rolled back on conflicts", s.commits.Load(), s.conflicts.Load())
		}},
		{"a region referenced by many orders deleted", func(t *testing.T) {
			region, refs = busiestRegion()
			if refs < 10 {
				// A burst on a loaded machine commits less (and TRUNCATEs
				// customers midway): move the customers with most orders
				// into the region, itself a dimension change, so that the
				// delete below still hits a widely referenced row.
				e.exec(`UPDATE customers SET region_id = $1 WHERE id IN (SELECT customer_id FROM orders
					WHERE customer_id IN (SELECT id FROM customers) GROUP BY customer_id ORDER BY count(*) DESC, customer_id LIMIT 10)`, region)
				region, refs = busiestRegion()
			}
			t.Logf("region %d: %d orders", region, refs)
			e.exec(`DELETE FROM regions WHERE id = $1`, region)
		}},
		{"the region re-inserted under another name", func(t *testing.T) {
			e.exec(`INSERT INTO regions VALUES ($1, 'reborn')`, region)
		}},
		{"the region deleted and re-inserted in one transaction", func(t *testing.T) {
			e.exec(fmt.Sprintf(`BEGIN; DELETE FROM regions WHERE id = %d; INSERT INTO regions VALUES (%d, 'north'); COMMIT`, region, region))
		}},
		{"the customer with the most orders moved to another region", func(t *testing.T) {
			e.exec(`UPDATE customers SET region_id = CASE WHEN region_id = 2 THEN 3 ELSE 2 END
				WHERE id = (SELECT customer_id FROM orders WHERE customer_id IN (SELECT id FROM customers)
					GROUP BY customer_id ORDER BY count(*) DESC, customer_id LIMIT 1)`)
		}},
		{"a region's primary key changed (its customers now dangle)", func(t *testing.T) {
			e.exec(`UPDATE regions SET id = 100 WHERE id = $1`, region)
		}},
		{"the customers follow the region's new key", func(t *testing.T) {
			e.exec(`UPDATE customers SET region_id = 100 WHERE region_id = $1`, region)
		}},
		{"a customer's primary key changed with its orders, then more orders moved to it", func(t *testing.T) {
			old := e.queryInt(`SELECT coalesce((SELECT min(id) FROM customers WHERE region_id = 100), (SELECT min(id) FROM customers))`)
			e.exec(fmt.Sprintf(`BEGIN; UPDATE customers SET id = 1000 WHERE id = %d; UPDATE orders SET customer_id = 1000 WHERE customer_id = %d; COMMIT`, old, old))
			e.exec(`UPDATE orders SET customer_id = 1000 WHERE id IN (SELECT id FROM orders ORDER BY id LIMIT 20)`)
		}},
		{"concurrent writes again, dimensions only (2 writers)", func(t *testing.T) {
			s := joinBurst(t, e.dsn, seed+100, 2, joinMix{customers: 2, regions: 1}, 1500*time.Millisecond, 0)
			t.Logf("burst: %d transactions committed, %d rolled back on conflicts", s.commits.Load(), s.conflicts.Load())
		}},
	}
	for i, ph := range phases {
		ph.write(t)
		check.converge(fmt.Sprintf("phase %d (%s)", i+1, ph.name))
	}
	if refs < 10 {
		t.Errorf("the deleted region had only %d orders; the data no longer exercises a widely referenced dimension row", refs)
	}
}

// TestJoinSurvivesKill kills a `trellis-repl run` process with SIGKILL (as
// TestKillNineMidStream does) during the build and in the middle of write
// bursts to the dimension tables, restarts it on the same data directory,
// and checks exact convergence, in both confirm modes.
func TestJoinSurvivesKill(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	var subs []subtest // each mode on a database of its own
	for _, m := range killModes {
		subs = append(subs, subtest{m.name, func(t *testing.T) {
			confirm := m.confirm
			e := newEnv(t, trellis.Config{Confirm: confirm, Capture: m.capture})
			e.exec(joinSchemaSQL)
			// Enough rows that the first kill lands inside the build.
			e.exec(joinSeedSQL(20000))
			e.exec(`INSERT INTO customers SELECT g, g % 9, 'bulk' || g FROM generate_series(41, 400) g`)
			e.exec(`UPDATE orders SET customer_id = id % 400 WHERE id > 500`)
			e.apply(joinScript(joinLiveDefs))
			check := newJoinCheck(e, joinLiveDefs)
			dir := t.TempDir()
			args := []string{"run", "--dsn", e.dsn, "--data-dir", dir, "--confirm", confirm}
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewSource(seed))
			var runners []*runner
			start := func() *runner {
				r := startCLI(t, bin, args...)
				runners = append(runners, r)
				return r
			}
			// burst writes in the background; wait returns its error.
			burst := func(seed int64, mix joinMix, d time.Duration) (wait func() error) {
				errc := make(chan error, 1)
				go func() {
					_, err := joinBurstErr(e.dsn, seed, 2, mix, d, 0)
					errc <- err
				}()
				return func() error { return <-errc }
			}

			// Killed during the build, while the dimensions change.
			r := start()
			wait := burst(seed, joinMix{customers: 3, regions: 1}, 1200*time.Millisecond)
			time.Sleep(time.Duration(300+rng.Intn(500)) * time.Millisecond)
			r.kill()
			rows, err := e.conn.Query(context.Background(), `SELECT name || ':' || state FROM trellis.transforms ORDER BY name`)
			if err != nil {
				t.Fatal(err)
			}
			states, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("states when killed during the build: %v", states)
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			r = start()
			check.converge("after the restart that finishes the build")

			// A dimension burst; the runner dies in its middle and is
			// restarted after the burst (round 0) or while it still writes
			// (round 1).
			for round := 0; round < 2; round++ {
				wait := burst(seed+int64(10*(round+1)), joinMix{orders: 1, customers: 4, regions: 2}, time.Second)
				time.Sleep(time.Duration(150+rng.Intn(500)) * time.Millisecond)
				r.kill()
				if round == 1 {
					r = start()
				}
				if err := wait(); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					r = start()
				}
				check.converge(fmt.Sprintf("round %d: after SIGKILL in a dimension burst and a restart", round))
			}
			r.kill()
			for _, r := range runners {
				if strings.Contains(r.out.String(), "panic") {
					t.Fatalf("runner panicked:\n%s", r.out)
				}
			}
		}})
	}
	atOnce(t, subs...)
}

// publishedTables lists the public tables in the instance's publication.
func (e *env) publishedTables() []string {
	e.t.Helper()
	rows, err := e.conn.Query(context.Background(), `SELECT tablename::text FROM pg_publication_tables
		WHERE pubname = 'trellis_pub' AND schemaname = 'public' ORDER BY 1`)
	if err != nil {
		e.t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return names
}

// awaitPublished waits until the publication lists exactly want (sorted).
func (e *env) awaitPublished(when string, want []string) {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := e.publishedTables()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: publication lists %v, want %v", when, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestJoinStatusAndDrop: status shows join transforms waiting, then live,
// with every source table; DROP TRANSFORM of a join transform removes from
// the publication exactly the tables no remaining transform reads (a
// self-join's table counts once), drops target and ledger, and the others
// keep converging.
func TestJoinStatusAndDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, trellis.Config{})
	e.exec(joinSchemaSQL)
	e.exec(`CREATE TABLE promos (id int PRIMARY KEY, region_id int, pct int); CREATE INDEX ON promos (region_id)`)
	e.exec(joinSeedSQL(200))
	e.exec(`INSERT INTO promos SELECT g, g % 7, 5 * (g % 3) FROM generate_series(1, 12) g`)
	defs := []joinDef{
		{"j_keep", `SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id`},
		{"j_lines", `SELECT l.order_id, l.line_no, o.amount FROM order_lines l JOIN orders o ON o.id = l.order_id`},
		{"j_promo", `SELECT p.pct, count(*) AS n, sum(c.id) AS s FROM customers c JOIN promos p ON p.region_id = c.region_id GROUP BY p.pct`},
		{"j_region_pairs", `SELECT a.id, b.id AS other FROM regions a JOIN regions b ON b.name = a.name AND b.id <> a.id`},
		{"j_cust_region", `SELECT c.id, r.name FROM customers c LEFT JOIN regions r ON r.id = c.region_id`},
	}
	shapes := map[string]string{"j_keep": "row", "j_lines": "row", "j_promo": "aggregate", "j_region_pairs": "row", "j_cust_region": "row"}
	sources := map[string][]string{
		"j_keep": {"orders", "customers"}, "j_lines": {"order_lines", "orders"}, "j_promo": {"customers", "promos"},
		"j_region_pairs": {"regions"}, "j_cust_region": {"customers", "regions"},
	}
	e.apply(joinScript(defs))

	checkStatus := func(when, wantState string, names []string) {
		t.Helper()
		st, err := e.tr.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range st {
			got = append(got, s.Name)
			if s.State != wantState {
				t.Errorf("%s: %s is %s, want %s", when, s.Name, s.State, wantState)
			}
			if s.Shape != shapes[s.Name] {
				t.Errorf("%s: %s has shape %q, want %q", when, s.Name, s.Shape, shapes[s.Name])
			}
			// Every table once, a self-join's too.
			var wantSrc []string
			for _, src := range sources[s.Name] {
				wantSrc = append(wantSrc, pgx.Identifier{"public", src}.Sanitize())
			}
			gotSrc := strings.Split(s.Source, ", ")
			slices.Sort(wantSrc)
			slices.Sort(gotSrc)
			if !slices.Equal(gotSrc, wantSrc) {
				t.Errorf("%s: status of %s names sources %q, want %v", when, s.Name, s.Source, wantSrc)
			}
			if s.PausedBy != nil || s.CaptureFailure != nil || s.BackfillFailure != nil {
				t.Errorf("%s: %s reports a pause or failure: %+v", when, s.Name, s)
			}
			if wantState == "live" && (s.LagBytes == nil || s.AppliedLSN == "0/0" || s.SlotName == nil) {
				t.Errorf("%s: live %s lacks its position: applied %s lag %v slot %v", when, s.Name, s.AppliedLSN, s.LagBytes, s.SlotName)
			}
		}
		slices.Sort(got)
		want := slices.Clone(names)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: status lists %v, want %v", when, got, want)
		}
	}
	all := []string{"j_keep", "j_lines", "j_promo", "j_region_pairs", "j_cust_region"}
	checkStatus("before any runner", "waiting_to_backfill", all)

	e.start()
	check := newJoinCheck(e, defs)
	check.converge("built")
	checkStatus("built", "live", all)
	e.awaitPublished("built", []string{"customers", "order_lines", "orders", "promos", "regions"})
	e.exec(`UPDATE customers SET region_id = 3 WHERE id < 5; UPDATE promos SET pct = 50 WHERE id = 3; UPDATE regions SET name = 'south' WHERE id = 1`)
	check.converge("after writes")
	checkStatus("after writes", "live", all)

	promoID := e.queryInt(`SELECT id FROM trellis.transforms WHERE name = 'j_promo'`)
	promoLedger := fmt.Sprintf("trellis.ledger_%d", promoID)
	var hasLedger bool
	if err := e.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, promoLedger).Scan(&hasLedger); err != nil || !hasLedger {
		t.Fatalf("the aggregate join j_promo has no ledger %s (err %v)", promoLedger, err)
	}

	remaining := slices.Clone(defs)
	steps := []struct {
		name    string
		script  string
		dropped []string
		want    []string // published afterwards
	}{
		// One script, so that the reconcile that removes promos is the one
		// that also decided regions (still read by j_cust_region) stays.
		{"promos leaves; customers (j_keep) and regions (j_cust_region) stay",
			`DROP TRANSFORM j_promo; DROP TRANSFORM j_region_pairs`, []string{"j_promo", "j_region_pairs"},
			[]string{"customers", "order_lines", "orders", "regions"}},
		{"regions leaves; customers (j_keep) stays",
			`DROP TRANSFORM j_cust_region`, []string{"j_cust_region"},
			[]string{"customers", "order_lines", "orders"}},
		{"customers leaves; orders (j_lines) stays",
			`DROP TRANSFORM j_keep`, []string{"j_keep"},
			[]string{"order_lines", "orders"}},
	}
	// In a plain loop, not subtests: the env's helpers fail the test that
	// owns it.
	for _, s := range steps {
		e.apply(s.script)
		e.awaitPublished(s.name+" ("+s.script+")", s.want)
		for _, name := range s.dropped {
			var gone bool
			if err := e.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, "public."+name).Scan(&gone); err != nil || !gone {
				t.Errorf("%s left the target table %s (err %v)", s.script, name, err)
			}
			if _, err := e.tr.Status(ctx, name); trellis.CodeOf(err) != trellis.CodeNotFound {
				t.Errorf("status of dropped %s: %v, want not_found", name, err)
			}
			remaining = slices.DeleteFunc(remaining, func(d joinDef) bool { return d.name == name })
		}
		var names []string
		for _, d := range remaining {
			names = append(names, d.name)
		}
		// Writes to every table, those no transform reads any more too.
		e.exec(`INSERT INTO promos VALUES (100, 1, 7) ON CONFLICT DO NOTHING; UPDATE customers SET name = name || 'x' WHERE id % 5 = 0;
			DELETE FROM regions WHERE id = 2; INSERT INTO orders VALUES (9000 + (SELECT count(*) FROM orders), 3, 1.5, 'new');
			UPDATE order_lines SET qty = qty + 1 WHERE order_id % 10 = 0`)
		check.defs = remaining
		check.converge("after " + s.script)
		checkStatus("after "+s.script, "live", names)
	}
	var ledgerGone bool
	if err := e.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, promoLedger).Scan(&ledgerGone); err != nil || !ledgerGone {
		t.Errorf("DROP TRANSFORM j_promo left its ledger %s (err %v)", promoLedger, err)
	}
}
