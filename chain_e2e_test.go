package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// End-to-end tests of chains: transforms that read other transforms'
// targets, three levels deep, against a real server, with every base table
// written (dimension moves and emptied groups included), through SIGKILLs of
// the runner, and the definitions a chain refuses. The chain reaches level
// 3 along three paths:
//
//	chain_orders (row, join) → chain_cust_totals (agg by region, customer_id) → chain_region_totals (agg by region)
//	                                                                           → chain_cust_current (row join with customers)
//	chain_orders (row, join) → chain_big (row)                                 → chain_big_by_region (agg by region)
//	chain_cust (agg, join)   → chain_region (agg by region)                    → chain_regions_total (agg without GROUP BY)

// chainSchemaSQL: orders and customers, with the join and region columns
// NOT NULL (so aggregates grouped by them get a primary key) and indexed
// (the re-derive through a join reaches the other table by them).
const chainSchemaSQL = `
CREATE TABLE customers (id int PRIMARY KEY, region text NOT NULL);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2), status text);
CREATE INDEX ON orders (customer_id);
CREATE INDEX ON customers (region);
`

// Key domains of the random writes. Customer 99 is alone in region 'solo'
// and its orders have ids above chainOrderIDs: random writes never touch
// them, so the test empties that region's groups on cue.
const (
	chainOrderIDs    = 300
	chainCustomerIDs = 30
)

var chainRegions = []string{"north", "south", "east", "west"}

// chainSeedSQL fills the tables: customers 1..30 in four regions, orders
// over customers 1..31 (31 dangles), some with NULL amount or status or the
// excluded status 'x', and the solo customer with five orders.
const chainSeedSQL = `
INSERT INTO customers SELECT g, (ARRAY['north', 'south', 'east', 'west'])[g % 4 + 1] FROM generate_series(1, 30) g;
INSERT INTO customers VALUES (99, 'solo');
INSERT INTO orders SELECT g, g % 31 + 1, CASE WHEN g % 13 = 0 THEN NULL ELSE (g * 37 % 10000) / 100.0 END,
	(ARRAY['new', 'paid', 'x', NULL])[g % 4 + 1] FROM generate_series(1, 250) g;
INSERT INTO orders SELECT 1000 + g, 99, 20 * g, 'paid' FROM generate_series(1, 5) g;
`

// chainDef is a transform, its level, the query its target must equal (the
// test's own text, over the upstream targets) and, from level 2 on, the
// same result written directly over the base tables.
type chainDef struct {
	name  string
	level int
	query string
	base  string
}

const chainBaseRows = `orders o JOIN customers c ON c.id = o.customer_id WHERE o.status <> 'x'`

const chainBaseCust = `SELECT c.region, o.customer_id, count(*) AS n, sum(o.amount) AS total FROM ` + chainBaseRows + ` GROUP BY c.region, o.customer_id`

const chainBaseRegion = `SELECT region, count(*) AS customers, sum(total) AS total, max(n) AS most FROM (` + chainBaseCust + `) s GROUP BY region`

var chainDefs = []chainDef{
	// Level 1: over the base tables.
	{name: "chain_orders", level: 1,
		query: `SELECT o.id, o.customer_id, c.region, o.amount FROM ` + chainBaseRows},
	{name: "chain_cust", level: 1, query: chainBaseCust},
	// Level 2.
	{name: "chain_cust_totals", level: 2,
		query: `SELECT region, customer_id, count(*) AS n, sum(amount) AS total FROM chain_orders GROUP BY region, customer_id`,
		base:  chainBaseCust},
	{name: "chain_big", level: 2,
		query: `SELECT id, region, amount FROM chain_orders WHERE amount >= 50`,
		base:  `SELECT o.id, c.region, o.amount FROM ` + chainBaseRows + ` AND o.amount >= 50`},
	{name: "chain_region", level: 2,
		query: `SELECT region, count(*) AS customers, sum(total) AS total, max(n) AS most FROM chain_cust GROUP BY region`,
		base:  chainBaseRegion},
	// Level 3.
	{name: "chain_big_by_region", level: 3,
		query: `SELECT region, count(*) AS n, sum(amount) AS total, max(amount) AS top FROM chain_big GROUP BY region`,
		base: `SELECT c.region, count(*) AS n, sum(o.amount) AS total, max(o.amount) AS top FROM ` + chainBaseRows +
			` AND o.amount >= 50 GROUP BY c.region`},
	{name: "chain_region_totals", level: 3,
		query: `SELECT region, count(*) AS customers, sum(total) AS total, max(n) AS most FROM chain_cust_totals GROUP BY region`,
		base:  chainBaseRegion},
	{name: "chain_cust_current", level: 3,
		query: `SELECT t.region, t.customer_id, t.n, t.total, cu.region AS current_region FROM chain_cust_totals t JOIN customers cu ON cu.id = t.customer_id`,
		base: `SELECT t.region, t.customer_id, t.n, t.total, cu.region AS current_region FROM (` + chainBaseCust +
			`) t JOIN customers cu ON cu.id = t.customer_id`},
	{name: "chain_regions_total", level: 3,
		query: `SELECT count(*) AS regions, sum(customers) AS customers, sum(total) AS total, max(most) AS most FROM chain_region`,
		base:  `SELECT count(*) AS regions, sum(customers) AS customers, sum(total) AS total, max(most) AS most FROM (` + chainBaseRegion + `) r`},
}

// chainScript defines defs in one script (a level reads targets created
// earlier in the same transaction).
func chainScript(defs []chainDef) string {
	var b strings.Builder
	for _, d := range defs {
		fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
	}
	return b.String()
}

// chainConverge waits until every level has applied everything written so
// far, then compares every target with its query over its upstream targets
// and (level 2 and up) with the equivalent query over the base tables, each
// a two-way EXCEPT ALL in one snapshot, and runs the engine's CompareNow.
func chainConverge(e *env, defs []chainDef, when string) {
	e.t.Helper()
	e.awaitWithin(when, convergeTimeout)
	chainCompare(e, defs, when, true)
}

// chainCompare compares every target (see chainConverge); with fatal false
// it only reports whether all are equal.
func chainCompare(e *env, defs []chainDef, when string, fatal bool) bool {
	e.t.Helper()
	ctx := context.Background()
	all, err := e.tr.Definitions(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	byName := map[string]trellis.Definition{}
	for _, d := range all {
		byName[d.Name] = d
	}
	ok := true
	for _, d := range defs {
		def, found := byName[d.name]
		if !found {
			e.t.Fatalf("%s: transform %s is not defined", when, d.name)
		}
		checks := []struct{ what, query string }{{"its query", d.query}}
		if d.base != "" {
			checks = append(checks, struct{ what, query string }{"the equivalent query over the base tables", d.base})
		}
		for _, c := range checks {
			diff, err := selfcheck.Compare(ctx, e.conn, pgx.Identifier{def.Schema, d.name}, def.Columns, c.query)
			if err != nil {
				e.t.Fatalf("%s: compare %s: %v", when, d.name, err)
			}
			if !diff.Equal() {
				ok = false
				if fatal {
					e.t.Errorf("%s: level %d transform %s differs from %s (columns %v)\n  query: %s\n  missing from the target (%d): %v\n  extra in the target (%d): %v",
						when, d.level, d.name, c.what, def.Columns, c.query, diff.Missing, diff.MissingSample, diff.Extra, diff.ExtraSample)
				}
			}
		}
		if !fatal {
			continue
		}
		r, err := e.tr.CompareNow(ctx, d.name)
		if err != nil {
			e.t.Fatalf("%s: CompareNow %s: %v", when, d.name, err)
		}
		if !r.Equal() {
			e.t.Errorf("%s: %s differs from the engine's own query %s: missing %d %v extra %d %v",
				when, d.name, def.Query, r.Missing, r.MissingSample, r.Extra, r.ExtraSample)
		}
	}
	if fatal && e.t.Failed() {
		e.t.FailNow()
	}
	return ok
}

// chainBehind names the targets of level 2 and up (those that read only
// other targets) that differ from their query over their upstream targets:
// after a kill, a level the runner had not caught up with its upstream.
func chainBehind(e *env, defs []chainDef) []string {
	e.t.Helper()
	var out []string
	for _, d := range defs {
		if d.level < 2 || strings.Contains(d.query, "customers cu") {
			continue // level 1, or reads a base table the burst still writes
		}
		d.base = "" // the base tables move on under the burst
		if !chainCompare(e, []chainDef{d}, "", false) {
			out = append(out, d.name)
		}
	}
	return out
}

// chainStmt is one random write: to orders (upserts, deletes, customer
// moves, multi-row updates, primary-key moves) or to customers (region
// moves, upserts, deletes, primary-key moves, which leave orders dangling).
func chainStmt(rng *rand.Rand) string {
	null := func(s string) string {
		if rng.Intn(10) == 0 {
			return "NULL"
		}
		return s
	}
	status := func() string { return null([]string{"'new'", "'paid'", "'x'"}[rng.Intn(3)]) }
	region := func() string { return "'" + chainRegions[rng.Intn(len(chainRegions))] + "'" }
	cust := func() int { return 1 + rng.Intn(chainCustomerIDs+1) } // 31 dangles
	if rng.Intn(3) > 0 {
		id := 1 + rng.Intn(chainOrderIDs)
		switch rng.Intn(6) {
		case 0, 1:
			return fmt.Sprintf(`INSERT INTO orders VALUES (%d, %d, %s, %s) ON CONFLICT (id) DO UPDATE
				SET customer_id = EXCLUDED.customer_id, amount = EXCLUDED.amount, status = EXCLUDED.status`,
				id, cust(), null(fmt.Sprintf("%d.%02d", rng.Intn(120), rng.Intn(100))), status())
		case 2:
			return fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
		case 3:
			return fmt.Sprintf(`UPDATE orders SET customer_id = %d WHERE id = %d`, cust(), id)
		case 4:
			return fmt.Sprintf(`UPDATE orders SET amount = amount + %d, status = %s WHERE customer_id = %d`, 1+rng.Intn(30), status(), cust())
		default:
			nid := 1 + rng.Intn(chainOrderIDs)
			return fmt.Sprintf(`UPDATE orders SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM orders WHERE id = %d)`, nid, id, nid)
		}
	}
	id := 1 + rng.Intn(chainCustomerIDs)
	switch rng.Intn(6) {
	case 0, 1, 2: // moved to another region
		return fmt.Sprintf(`UPDATE customers SET region = %s WHERE id = %d`, region(), id)
	case 3:
		return fmt.Sprintf(`INSERT INTO customers VALUES (%d, %s) ON CONFLICT (id) DO UPDATE SET region = EXCLUDED.region`, id, region())
	case 4:
		return fmt.Sprintf(`DELETE FROM customers WHERE id = %d`, id)
	default:
		nid := 1 + rng.Intn(chainCustomerIDs)
		return fmt.Sprintf(`UPDATE customers SET id = %d WHERE id = %d AND NOT EXISTS (SELECT 1 FROM customers WHERE id = %d)`, nid, id, nid)
	}
}

// chainBurst writes from writers connections, in transactions of 1..3
// random statements, until d has passed; it returns the commits.
func chainBurst(dsn string, seed int64, writers int, d time.Duration) (int64, error) {
	return burstOf(dsn, seed, writers, d, chainStmt)
}

// burstOf is chainBurst with the random statements of stmt.
func burstOf(dsn string, seed int64, writers int, d time.Duration, stmt func(*rand.Rand) string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var commits int64
	var errs []error
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			n, err := chainWriter(ctx, dsn, rand.New(rand.NewSource(seed+int64(w))), start, d, stmt)
			mu.Lock()
			defer mu.Unlock()
			commits += n
			if err != nil {
				errs = append(errs, err)
			}
		}(w)
	}
	wg.Wait()
	return commits, errors.Join(errs...)
}

func chainWriter(ctx context.Context, dsn string, rng *rand.Rand, start time.Time, d time.Duration, stmt func(*rand.Rand) string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var commits int64
	for time.Since(start) < d {
		stmts := make([]string, 1+rng.Intn(3))
		for i := range stmts {
			stmts[i] = stmt(rng)
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", s, err)
				}
			}
			return nil
		})
		switch {
		case err == nil:
			commits++
		case conflictCode(err):
		default:
			return commits, err
		}
	}
	return commits, nil
}

// chainBurstAsync runs chainBurst in the background; wait returns its error.
func chainBurstAsync(dsn string, seed int64, d time.Duration) (wait func() error) {
	return burstAsyncOf(dsn, seed, d, chainStmt)
}

// burstAsyncOf is chainBurstAsync with the random statements of stmt.
func burstAsyncOf(dsn string, seed int64, d time.Duration, stmt func(*rand.Rand) string) (wait func() error) {
	errc := make(chan error, 1)
	go func() {
		_, err := burstOf(dsn, seed, 2, d, stmt)
		errc <- err
	}()
	return func() error { return <-errc }
}

// TestChainThreeLevels builds the chain over existing data, then keeps
// every level exact through concurrent writes to both base tables and
// through scripted changes: a busy customer moved to another region, every
// order of a customer deleted (its groups empty at level 1 and 2), every
// order of the only customer of a region deleted (the region's groups
// empty at levels 2 and 3), a dimension-only move, a deleted customer, a
// customer's primary key changed, TRUNCATE and a bulk update.
func TestChainThreeLevels(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testChainThreeLevels)
}

func testChainThreeLevels(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	e.exec(chainSchemaSQL)
	e.exec(chainSeedSQL)
	e.apply(chainScript(chainDefs))
	e.start()
	chainConverge(e, chainDefs, "after the build over existing data")

	ctx := context.Background()
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != "live" {
			t.Errorf("after the build: %s is %s, want live", s.Name, s.State)
		}
	}
	// soloRows counts region solo's rows at levels 2 and 3: one in each of
	// five targets while its customer has orders over 50.
	const soloWant = 5
	soloRows := func() int64 {
		return e.queryInt(`SELECT (SELECT count(*) FROM chain_region WHERE region = 'solo')
			+ (SELECT count(*) FROM chain_big_by_region WHERE region = 'solo')
			+ (SELECT count(*) FROM chain_region_totals WHERE region = 'solo')
			+ (SELECT count(*) FROM chain_cust_current WHERE region = 'solo')
			+ (SELECT count(*) FROM chain_cust_totals WHERE region = 'solo')`)
	}
	if n := soloRows(); n != soloWant {
		t.Fatalf("region solo has %d rows across levels 2 and 3, want %d (the data no longer exercises it)", n, soloWant)
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	// Customer busy (the most orders) moves region; customer gone has every
	// order deleted.
	var busy, gone, goneGroups int64
	groupsOf := func(c int64) int64 {
		return e.queryInt(`SELECT (SELECT count(*) FROM chain_cust WHERE customer_id = $1)
			+ (SELECT count(*) FROM chain_cust_totals WHERE customer_id = $1)`, c)
	}
	solo := func(want int64) func(string) {
		return func(when string) {
			if n := soloRows(); n != want {
				t.Fatalf("%s: region solo has %d rows at levels 2 and 3, want %d", when, n, want)
			}
		}
	}
	phases := []struct {
		name  string
		write func(t *testing.T)
		check func(when string)
	}{
		{name: "concurrent writes to both tables (2 writers)", write: func(t *testing.T) {
			n, err := chainBurst(e.dsn, seed, 2, 1500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("burst: %d transactions", n)
		}},
		{name: "the busiest customer moved to another region; every order of another customer deleted (its groups empty)",
			write: func(t *testing.T) {
				busy = e.queryInt(`SELECT o.customer_id FROM orders o JOIN customers c ON c.id = o.customer_id
					WHERE c.id <> 99 GROUP BY o.customer_id ORDER BY count(*) DESC, o.customer_id LIMIT 1`)
				gone = e.queryInt(`SELECT customer_id FROM chain_cust WHERE customer_id NOT IN (99, $1) ORDER BY n DESC, customer_id LIMIT 1`, busy)
				goneGroups = groupsOf(gone)
				e.exec(`UPDATE customers SET region = CASE WHEN region = 'north' THEN 'south' ELSE 'north' END WHERE id = $1`, busy)
				e.exec(`DELETE FROM orders WHERE customer_id = $1`, gone)
			},
			check: func(when string) {
				if n := groupsOf(gone); goneGroups != 2 || n != 0 {
					t.Fatalf("%s: customer %d had %d groups at levels 1 and 2, now %d; want 2, then 0", when, gone, goneGroups, n)
				}
			}},
		{name: "every order of region solo's only customer deleted (the region empties at levels 2 and 3)",
			write: func(t *testing.T) { e.exec(`DELETE FROM orders WHERE customer_id = 99`) }, check: solo(0)},
		{name: "orders for the solo customer again; a customer deleted; another's primary key changed (its orders dangle)",
			write: func(t *testing.T) {
				e.exec(`INSERT INTO orders SELECT 1000 + g, 99, 30 * g, 'new' FROM generate_series(1, 4) g`)
				e.exec(`DELETE FROM customers WHERE id = (SELECT min(id) FROM customers WHERE id > 1)`)
				e.exec(`UPDATE customers SET id = 500 WHERE id = 1`)
			}, check: solo(soloWant)},
		{name: "the solo customer moved to north (a dimension change alone empties region solo); the dangling orders follow the new key",
			write: func(t *testing.T) {
				e.exec(`UPDATE customers SET region = 'north' WHERE id = 99`)
				e.exec(`UPDATE orders SET customer_id = 500 WHERE customer_id = 1`)
			}, check: solo(0)},
		{name: "TRUNCATE customers and re-insert them in one transaction; every order's amount changed; concurrent writes",
			write: func(t *testing.T) {
				e.exec(`BEGIN; TRUNCATE customers; INSERT INTO customers SELECT g, (ARRAY['north', 'south', 'east'])[g % 3 + 1]
					FROM generate_series(1, 30) g; INSERT INTO customers VALUES (99, 'solo'); COMMIT`)
				e.exec(`UPDATE orders SET amount = amount * 2 + 1`)
				if _, err := chainBurst(e.dsn, seed+100, 2, 700*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for i, ph := range phases {
		ph.write(t)
		when := fmt.Sprintf("phase %d (%s)", i+1, ph.name)
		chainConverge(e, chainDefs, when)
		if ph.check != nil {
			ph.check(when)
		}
	}
}

// TestChainSurvivesKill kills a `trellis-repl run` process with SIGKILL (as
// TestKillNineMidStream does) at random moments of write bursts, four times
// per confirm mode, the first maybe still in the build, and restarts it on
// the same data directory each time: after the burst (the next burst then
// runs, and is killed, while the new runner catches up) or while the burst
// still writes. Every level is checked exactly after every second kill.
// After each kill it logs which levels the dead runner left behind their
// upstream targets (a kill between one level's apply and the next one's).
func TestChainSurvivesKill(t *testing.T) {
	t.Parallel()
	chainKills(t, func(e *env) {
		e.exec(chainSchemaSQL)
		e.exec(chainSeedSQL)
		e.apply(chainScript(chainDefs))
	}, chainDefs, chainStmt, func(e *env) []string { return chainBehind(e, chainDefs) })
}

// chainKills is TestChainSurvivesKill's rounds for every kill mode, on a
// database setup prepares with the chain defs: write bursts of stmt, each
// SIGKILLed at a random moment, behind naming the levels a kill left
// behind their upstream targets.
func chainKills(t *testing.T, setup func(*env), defs []chainDef, stmt func(*rand.Rand) string, behind func(*env) []string) {
	bin := buildCLI(t)
	var subs []subtest // each mode on a database of its own
	for _, m := range killModes {
		subs = append(subs, subtest{m.name, func(t *testing.T) {
			confirm := m.confirm
			e := newEnv(t, trellis.Config{Confirm: confirm, Capture: m.capture})
			setup(e)
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
			r := start() // no wait for the build: the first kill may land in it
			const rounds = 4
			between := 0
			for round := 0; round < rounds; round++ {
				wait := burstAsyncOf(e.dsn, seed+int64(10*(round+1)), 700*time.Millisecond, stmt)
				time.Sleep(time.Duration(50+rng.Intn(600)) * time.Millisecond)
				r.kill()
				time.Sleep(100 * time.Millisecond) // the dead runner's last commit settles
				if b := behind(e); len(b) > 0 {
					between++
					t.Logf("round %d: killed with %v behind their upstream targets", round, b)
				}
				restartEarly := round%2 == 1
				if restartEarly {
					r = start()
				}
				if err := wait(); err != nil {
					t.Fatal(err)
				}
				if !restartEarly {
					r = start() // the next round's burst runs while it catches up
					continue
				}
				chainConverge(e, defs, fmt.Sprintf("round %d: after two SIGKILLs in bursts and restarts", round))
			}
			t.Logf("%d of %d kills left a level behind its upstream", between, rounds)
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

// chainSnapshot is what a definition script could change: the catalog rows
// (not progress), the tables of schema public and the publication.
func chainSnapshot(e *env) string {
	e.t.Helper()
	var s string
	if err := e.conn.QueryRow(context.Background(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(concat_ws(' ', id, name, state, paused_by, rebuild, md5(plan::text)), E'\n' ORDER BY id) FROM trellis.transforms),
		(SELECT string_agg(relname, ' ' ORDER BY relname) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'),
		(SELECT string_agg(tablename, ' ' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'trellis_pub'))`).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// chainLegacy makes transforms look as they did before ADR 0019: plans
// without the surrogate, targets without its column (and so without a
// key: their group key or identity is UNIQUE NULLS NOT DISTINCT, or, for
// an aggregate without GROUP BY, nothing). Run before the runner starts.
func chainLegacy(e *env, names ...string) {
	e.t.Helper()
	for _, n := range names {
		if got := e.queryText(`SELECT coalesce(plan->>'surrogate', '') FROM trellis.transforms WHERE name = $1`, n); got != "__id" {
			e.t.Fatalf("transform %s has surrogate %q, want __id (ADR 0019)", n, got)
		}
		e.exec(`UPDATE trellis.transforms SET plan = plan - 'surrogate' WHERE name = $1`, n)
		e.exec(`ALTER TABLE ` + pgx.Identifier{n}.Sanitize() + ` DROP COLUMN __id`)
	}
}

// TestChainRefusals: reading a target without a NOT NULL key — an
// aggregate without GROUP BY, one with a nullable group key, a row target
// of an outer join, each defined before such targets got a surrogate key
// (ADR 0019; chainLegacy) — is refused with code validation naming the
// upstream transform and the CREATE OR REPLACE that gives it a key, and the
// whole script is rolled back; DROP of a transform another reads is a
// conflict naming the reader that changes nothing; dropping the chain from
// its last level up works, each target leaving the publication once no
// transform reads it.
func TestChainRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, trellis.Config{})
	e.exec(chainSchemaSQL)
	e.exec(chainSeedSQL)
	e.apply(`CREATE TRANSFORM chain_total AS SELECT count(*) AS n, sum(amount) AS total FROM orders;
		CREATE TRANSFORM chain_by_status AS SELECT status, count(*) AS n FROM orders GROUP BY status;
		CREATE TRANSFORM chain_left AS SELECT c.id, c.region, o.id AS order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.id;
		CREATE TRANSFORM chain_rows AS SELECT o.id, o.customer_id, c.region, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id;
		CREATE TRANSFORM chain_rows_agg AS SELECT amount, count(*) AS n FROM chain_rows GROUP BY amount;`)
	chainLegacy(e, "chain_total", "chain_by_status", "chain_left", "chain_rows_agg")

	redefine := func(name, def string) string {
		return fmt.Sprintf("redefining it with the same query, CREATE OR REPLACE TRANSFORM %s AS %s, then create transform",
			pgx.Identifier{"public", name}.Sanitize(), def)
	}
	refusals := []struct {
		name, script, upstream, why, advice string
	}{
		{"an aggregate without GROUP BY",
			`CREATE TRANSFORM chain_x AS SELECT n, total FROM chain_total`, "chain_total", "an aggregate without GROUP BY",
			redefine("chain_total", "SELECT count(*) AS n, sum(amount) AS total FROM orders")},
		{"an aggregate without GROUP BY, schema-qualified, joined",
			`CREATE TRANSFORM chain_x AS SELECT o.id, t.n FROM orders o CROSS JOIN public.chain_total t`, "chain_total", "an aggregate without GROUP BY",
			redefine("chain_total", "SELECT count(*) AS n, sum(amount) AS total FROM orders")},
		{"a nullable group key of a base table",
			`CREATE TRANSFORM chain_x AS SELECT status, n FROM chain_by_status WHERE n > 1`, "chain_by_status", "GROUP BY column status may be NULL",
			redefine("chain_by_status", "SELECT status, count(*) AS n FROM orders GROUP BY status")},
		{"a group key that is a nullable column of a row target",
			`CREATE TRANSFORM chain_x AS SELECT amount, n FROM chain_rows_agg`, "chain_rows_agg", "GROUP BY column amount may be NULL",
			redefine("chain_rows_agg", "SELECT amount, count(*) AS n FROM chain_rows GROUP BY amount")},
		{"a LEFT JOIN row target",
			`CREATE TRANSFORM chain_x AS SELECT id, region, order_id FROM chain_left`, "chain_left", "outer join",
			redefine("chain_left", "SELECT c.id, c.region, o.id AS order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.id")},
		{"a LEFT JOIN row target aggregated",
			`CREATE TRANSFORM chain_x AS SELECT region, count(order_id) AS n FROM chain_left GROUP BY region`, "chain_left", "outer join",
			redefine("chain_left", "SELECT c.id, c.region, o.id AS order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.id")},
		{"in a script that redefines its upstream first",
			`CREATE OR REPLACE TRANSFORM chain_total AS SELECT count(*) AS n, sum(amount) AS total FROM orders; CREATE TRANSFORM chain_x AS SELECT n FROM chain_total`,
			"chain_total", "an aggregate without GROUP BY",
			`its redefinition (CREATE OR REPLACE TRANSFORM, building as "public"."__trellis_next_`},
	}
	before := chainSnapshot(e)
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			res, err := e.tr.Apply(ctx, c.script)
			if err == nil {
				t.Fatalf("%s: applied (%+v), want a refusal", c.script, res)
			}
			msg := err.Error()
			if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(msg, fmt.Sprintf("transform %q", c.upstream)) ||
				!strings.Contains(msg, c.why) || !strings.Contains(msg, c.advice) {
				t.Errorf("%s:\n got %v (code %s)\nwant validation naming transform %q, %q and %q", c.script, err, trellis.CodeOf(err), c.upstream, c.why, c.advice)
			}
			if after := chainSnapshot(e); after != before {
				t.Errorf("%s changed something:\nbefore:\n%s\nafter:\n%s", c.script, before, after)
			}
		})
	}
	e.apply(`DROP TRANSFORM chain_total; DROP TRANSFORM chain_by_status; DROP TRANSFORM chain_left;
		DROP TRANSFORM chain_rows_agg; DROP TRANSFORM chain_rows`)

	// A three-level chain to drop (level 1 is an aggregate keyed by NOT
	// NULL columns: an aggregate over a row target could not be read).
	e.apply(`CREATE TRANSFORM chain_l1 AS ` + chainBaseCust + `;
		CREATE TRANSFORM chain_l2 AS SELECT region, count(*) AS customers, sum(total) AS total, max(n) AS most FROM chain_l1 GROUP BY region;
		CREATE TRANSFORM chain_l3 AS SELECT r.region, cu.id AS customer_id, r.total FROM chain_l2 r JOIN customers cu ON cu.region = r.region;`)
	levels := []chainDef{
		{name: "chain_l1", level: 1, query: chainBaseCust},
		{name: "chain_l2", level: 2, query: `SELECT region, count(*) AS customers, sum(total) AS total, max(n) AS most FROM chain_l1 GROUP BY region`,
			base: chainBaseRegion},
		{name: "chain_l3", level: 3, query: `SELECT r.region, cu.id AS customer_id, r.total FROM chain_l2 r JOIN customers cu ON cu.region = r.region`,
			base: `SELECT r.region, cu.id AS customer_id, r.total FROM (` + chainBaseRegion + `) r JOIN customers cu ON cu.region = r.region`},
	}
	e.start()
	chainConverge(e, levels, "built")
	e.awaitPublished("built", []string{"chain_l1", "chain_l2", "customers", "orders"})

	drops := []struct{ script, upstream, reader string }{
		{`DROP TRANSFORM chain_l1`, "chain_l1", "chain_l2"},
		{`DROP TRANSFORM chain_l2`, "chain_l2", "chain_l3"},
		{`DROP TRANSFORM IF EXISTS chain_l1`, "chain_l1", "chain_l2"},
		// In a script that drops the readers only after it.
		{`DROP TRANSFORM chain_l1; DROP TRANSFORM chain_l2; DROP TRANSFORM chain_l3`, "chain_l1", "chain_l2"},
		{`DROP TRANSFORM chain_l3; DROP TRANSFORM chain_l1; DROP TRANSFORM chain_l2`, "chain_l1", "chain_l2"},
	}
	before = chainSnapshot(e)
	for _, d := range drops {
		res, err := e.tr.Apply(ctx, d.script)
		if err == nil {
			t.Fatalf("%s: applied (%+v), want a conflict", d.script, res)
		}
		msg := err.Error()
		if trellis.CodeOf(err) != trellis.CodeConflict || !strings.Contains(msg, fmt.Sprintf("transform %q is read by transform %q", d.upstream, d.reader)) {
			t.Errorf("%s:\n got %v (code %s)\nwant a conflict saying transform %q is read by %q", d.script, err, trellis.CodeOf(err), d.upstream, d.reader)
		}
		if after := chainSnapshot(e); after != before {
			t.Errorf("%s changed something:\nbefore:\n%s\nafter:\n%s", d.script, before, after)
		}
	}
	// The refused drops left a working chain.
	e.exec(`UPDATE customers SET region = 'solo' WHERE id = 3; DELETE FROM orders WHERE customer_id = 4; INSERT INTO orders VALUES (2000, 5, 10, 'new')`)
	chainConverge(e, levels, "after the refused drops")

	steps := []struct {
		script    string
		dropped   string
		remaining []chainDef
		published []string
	}{
		{`DROP TRANSFORM chain_l3`, "chain_l3", levels[:2], []string{"chain_l1", "customers", "orders"}},
		{`DROP TRANSFORM chain_l2`, "chain_l2", levels[:1], []string{"customers", "orders"}},
		{`DROP TRANSFORM chain_l1`, "chain_l1", nil, nil},
	}
	for _, s := range steps {
		e.apply(s.script)
		var gone bool
		if err := e.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, "public."+s.dropped).Scan(&gone); err != nil || !gone {
			t.Errorf("%s left the target table %s (err %v)", s.script, s.dropped, err)
		}
		if _, err := e.tr.Status(ctx, s.dropped); trellis.CodeOf(err) != trellis.CodeNotFound {
			t.Errorf("status of dropped %s: %v, want not_found", s.dropped, err)
		}
		e.awaitPublished("after "+s.script, s.published)
		e.exec(`UPDATE customers SET region = 'east' WHERE id % 7 = 0; DELETE FROM orders WHERE id % 17 = 0`)
		chainConverge(e, s.remaining, "after "+s.script)
	}
}
