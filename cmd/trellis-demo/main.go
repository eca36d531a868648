// Command trellis-demo shows trellis-repl end to end on a throwaway
// PostgreSQL: it creates sample tables, defines two transforms, runs the
// engine under a live write workload while printing its status, and then
// proves that each target table equals its defining query.
//
//	go run ./cmd/trellis-demo [-duration 20s] [-rate 2000] [-conns 4]
//
// It needs only the PostgreSQL server binaries (initdb, pg_ctl, postgres);
// everything it starts is stopped and removed when it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

// options are the demo's command-line settings.
type options struct {
	duration        time.Duration
	rate            float64
	conns           int
	statusEvery     time.Duration
	convergeTimeout time.Duration
}

// errTargetsDiffer marks a run whose only failure is a target that did not
// equal its query (the details are already printed).
var errTargetsDiffer = errors.New("a target table differs from its query (see above)")

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long the write workload runs")
	flag.Float64Var(&o.rate, "rate", 2000, "upper bound on rows written per second by the workload")
	flag.IntVar(&o.conns, "conns", 4, "concurrent workload connections")
	flag.DurationVar(&o.statusEvery, "status-every", 2*time.Second, "how often to print the status table")
	flag.DurationVar(&o.convergeTimeout, "converge-timeout", 60*time.Second, "how long to wait for the targets to catch up after the workload")
	flag.Parse()
	if flag.NArg() > 0 || o.duration <= 0 || o.rate <= 0 || o.conns <= 0 || o.statusEvery <= 0 || o.convergeTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "usage: trellis-demo [-duration 20s] [-rate 2000] [-conns 4] [-status-every 2s] [-converge-timeout 60s] (values must be positive)")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout, os.Stderr)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err == nil:
		fmt.Println("\nDemo finished: both targets equal their queries. Everything it started has been stopped and removed.")
	case interrupted:
		fmt.Fprintln(os.Stderr, "trellis-demo: interrupted; everything it started has been stopped and removed")
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "trellis-demo: FAILED: %s\n", oneLine(err))
		os.Exit(1)
	}
}

// oneLine renders err on one line (trellis errors already name their
// stable code, e.g. "timeout: …").
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// demoTransform is one transform the demo defines, with how to show a few
// of its rows.
type demoTransform struct {
	name    string
	sql     string
	orderBy string // for the sample rows
	about   string
}

var transforms = []demoTransform{
	{
		name: "big_orders",
		sql: `CREATE TRANSFORM big_orders AS
  SELECT id, customer_id, upper(status) AS status, amount
  FROM orders
  WHERE amount > 100;`,
		orderBy: "id DESC",
		about:   "a row transform: one target row per matching order",
	},
	{
		name: "revenue_by_customer",
		sql: `CREATE TRANSFORM revenue_by_customer AS
  SELECT customer_id, count(*) AS orders, sum(amount) AS revenue,
         avg(amount) AS avg_amount, max(created_at) AS last_order
  FROM orders
  WHERE status <> 'cancelled'
  GROUP BY customer_id;`,
		orderBy: "revenue DESC",
		about:   "an aggregate: one target row per customer",
	},
}

const (
	sampleCustomers = 200
	sampleOrders    = 5000
)

// schemaSQL creates the sample tables; customersSQL ($1 rows) and
// ordersSQL ($1 customers, $2 rows) fill them.
const schemaSQL = `
CREATE TABLE customers (
  id     int PRIMARY KEY,
  name   text NOT NULL,
  region text NOT NULL
);
CREATE TABLE orders (
  id          bigint PRIMARY KEY,
  customer_id int NOT NULL REFERENCES customers,
  status      text NOT NULL,
  amount      numeric(12,2) NOT NULL,
  created_at  timestamptz NOT NULL
);`

const customersSQL = `
INSERT INTO customers
  SELECT g, 'customer ' || g, (ARRAY['north','south','east','west'])[1 + g % 4]
  FROM generate_series(1, $1::int) g`

const ordersSQL = `
INSERT INTO orders
  SELECT g, 1 + (g * 7919) % $1::int, (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4],
         round((random() * 250)::numeric, 2), now() - g * interval '1 minute'
  FROM generate_series(1, $2::int) g`

// run is the whole demo. Everything it starts is stopped before it
// returns, whatever happens.
func run(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	// A context that ends when the engine fails on its own, so that every
	// wait below stops at once and reports why.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	defer func() {
		if err != nil && ctx.Err() != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
		}
	}()
	cleanup := func(what string, f func(context.Context) error) {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cerr := f(cctx); cerr != nil {
			fmt.Fprintf(stderr, "trellis-demo: %s: %v\n", what, cerr)
			if err == nil {
				err = fmt.Errorf("%s: %w", what, cerr)
			}
		}
	}

	// 1. A throwaway server.
	fmt.Fprintln(stdout, "Starting a temporary PostgreSQL server…")
	srv, err := pgserver.Start(ctx, pgserver.Options{ReapOnExit: true})
	if err != nil {
		return fmt.Errorf("start a temporary PostgreSQL: %w", err)
	}
	defer cleanup("stop the temporary PostgreSQL", srv.Stop)
	dsn, err := srv.CreateDatabase(ctx, "demo")
	if err != nil {
		return fmt.Errorf("create database demo: %w", err)
	}
	fmt.Fprintf(stdout, "PostgreSQL is listening on 127.0.0.1:%d (temporary: deleted when the demo exits); try `psql %s` meanwhile.\n", srv.Port(), dsn)

	pool, err := pgxpool.New(ctx, dsn+"&pool_max_conns="+fmt.Sprint(o.conns+2))
	if err != nil {
		return fmt.Errorf("connect to the demo database: %w", err)
	}
	defer pool.Close()

	// 2. Sample data.
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("create the sample tables: %w", err)
	}
	if _, err := pool.Exec(ctx, customersSQL, sampleCustomers); err != nil {
		return fmt.Errorf("load customers: %w", err)
	}
	if _, err := pool.Exec(ctx, ordersSQL, sampleCustomers, sampleOrders); err != nil {
		return fmt.Errorf("load orders: %w", err)
	}
	fmt.Fprintf(stdout, "\nCreated tables customers (%d rows) and orders (%d rows).\n", sampleCustomers, sampleOrders)

	// 3. The transforms.
	dataDir, err := os.MkdirTemp("", "trellis-demo-")
	if err != nil {
		return fmt.Errorf("create a temporary data directory: %w", err)
	}
	defer cleanup("remove the engine's data directory", func(context.Context) error { return os.RemoveAll(dataDir) })
	tr, err := trellis.Open(ctx, trellis.Config{
		DSN:     dsn,
		DataDir: dataDir,
		Logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fmt.Errorf("open trellis: %w", err)
	}
	defer tr.Close()
	for _, t := range transforms {
		fmt.Fprintf(stdout, "\nDefining %s, %s:\n%s\n", t.name, t.about, indent(t.sql))
		res, err := tr.Apply(ctx, t.sql)
		if err != nil {
			return fmt.Errorf("apply %s: %w", t.name, err)
		}
		for _, r := range res {
			fmt.Fprintf(stdout, "  → %s %s: %s\n", r.Statement, r.Name, r.Action)
		}
	}

	// 4. The engine, in this process.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	runDone := make(chan error, 1)
	go func() {
		rerr := tr.Run(runCtx)
		if runCtx.Err() == nil {
			if rerr == nil {
				rerr = errors.New("returned without being asked to stop")
			}
			fail(fmt.Errorf("the trellis engine (Run) stopped: %w", rerr))
		}
		runDone <- rerr
	}()
	defer func() {
		stopRun()
		select {
		case rerr := <-runDone:
			if rerr != nil && runCtx.Err() != nil && !errors.Is(rerr, context.Canceled) && err == nil {
				err = fmt.Errorf("the trellis engine (Run) failed while stopping: %w", rerr)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(stderr, "trellis-demo: the engine did not stop within 30s")
			if err == nil {
				err = errors.New("the trellis engine (Run) did not stop within 30s of being cancelled")
			}
		}
	}()

	// The workload, alongside.
	fmt.Fprintf(stdout, "\nRunning the engine, and a workload for %s: %d connections inserting, updating "+
		"(status, amount, customer, primary key) and deleting orders in transactions of 1–200 rows, at most %.0f rows/s.\n\n",
		o.duration, o.conns, o.rate)
	wl := &workload{pool: pool, conns: o.conns, rate: o.rate, orders: sampleOrders, customers: sampleCustomers}
	wlCtx, stopWL := context.WithCancel(ctx)
	var wlErr error
	wlDone := make(chan struct{})
	go func() {
		defer close(wlDone)
		wlErr = wl.run(wlCtx, time.Now().Add(o.duration))
	}()
	defer func() {
		// On an early return, stop the workload before the pool closes.
		stopWL()
		<-wlDone
	}()

	// 5. Status as it goes.
	start := time.Now()
	tick := time.NewTicker(o.statusEvery)
	defer tick.Stop()
	lastRows, lastAt := int64(0), start
wait:
	for {
		select {
		case <-wlDone:
			break wait
		case now := <-tick.C:
			rows := wl.rows.Load()
			rate := float64(rows-lastRows) / now.Sub(lastAt).Seconds()
			lastRows, lastAt = rows, now
			fmt.Fprintf(stdout, "[%4.0fs] workload: %6.0f rows/s  (%d rows in %d transactions so far)\n",
				now.Sub(start).Seconds(), rate, rows, wl.txns.Load())
			if err := printStatus(ctx, stdout, tr); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if wlErr != nil {
		return fmt.Errorf("the workload failed: %w", wlErr)
	}
	elapsed := time.Since(start)
	fmt.Fprintf(stdout, "\nWorkload stopped: %d rows changed in %d transactions over %s (%.0f rows/s)",
		wl.rows.Load(), wl.txns.Load(), elapsed.Round(100*time.Millisecond), float64(wl.rows.Load())/elapsed.Seconds())
	if n := wl.rolledBack.Load(); n > 0 {
		fmt.Fprintf(stdout, "; %d transactions rolled back on conflicts", n)
	}
	fmt.Fprintln(stdout, ".")

	// 6. Catch up, then prove the targets exact.
	tok, err := tr.WatermarkToken(ctx)
	if err != nil {
		return fmt.Errorf("take a watermark: %w", err)
	}
	fmt.Fprintf(stdout, "Waiting for every target to apply all writes up to WAL position %s…\n", tok)
	awaitStart := time.Now()
	actx, cancel := context.WithTimeout(ctx, o.convergeTimeout)
	err = tr.AwaitConverged(actx, tok)
	cancel()
	if err != nil {
		_ = printStatus(ctx, stdout, tr)
		return fmt.Errorf("wait for convergence: %w", err)
	}
	fmt.Fprintf(stdout, "Caught up in %s.\n", time.Since(awaitStart).Round(time.Millisecond))
	if err := printStatus(ctx, stdout, tr); err != nil {
		return err
	}

	fmt.Fprintln(stdout, "\nComparing each target table with a fresh run of its query (two-way EXCEPT ALL, one snapshot):")
	defs, err := tr.Definitions(ctx)
	if err != nil {
		return err
	}
	byName := map[string]trellis.Definition{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	differ := false
	for _, t := range transforms {
		r, err := tr.CompareNow(ctx, t.name)
		if err != nil {
			return fmt.Errorf("compare %s with its query: %w", t.name, err)
		}
		if r.Equal() {
			fmt.Fprintf(stdout, "  %s: target equals its query (%d rows)\n", t.name, r.Rows)
		} else {
			differ = true
			fmt.Fprintf(stdout, "  %s: target DIFFERS from its query (%d rows): %d rows missing, %d rows extra\n", t.name, r.Rows, r.Missing, r.Extra)
			for _, row := range r.MissingSample {
				fmt.Fprintf(stdout, "      missing %s\n", row)
			}
			for _, row := range r.ExtraSample {
				fmt.Fprintf(stdout, "      extra   %s\n", row)
			}
		}
	}

	for _, t := range transforms {
		if err := printSample(ctx, stdout, pool, byName[t.name], t.orderBy); err != nil {
			return err
		}
	}
	if differ {
		return errTargetsDiffer
	}
	return nil
}

// printStatus prints one line per transform from Status.
func printStatus(ctx context.Context, w io.Writer, tr *trellis.Trellis) error {
	sts, err := tr.Status(ctx)
	if err != nil {
		return fmt.Errorf("read status: %w", err)
	}
	nameW, stateW := len("transform"), len("state")
	for _, s := range sts {
		nameW, stateW = max(nameW, len(s.Name)), max(stateW, len(stateOf(s)))
	}
	row := func(name, state, applied, held, lsn, lag string) {
		fmt.Fprintf(w, "  %-*s  %-*s  %12s  %12s  %12s  %10s\n", nameW, name, stateW, state, applied, held, lsn, lag)
	}
	row("transform", "state", "keys applied", "keys waiting", "applied LSN", "lag bytes")
	for _, s := range sts {
		held, lag := s.KeysWaiting, "-"
		if s.LagBytes != nil {
			lag = fmt.Sprint(*s.LagBytes)
		}
		row(s.Name, stateOf(s), fmt.Sprint(s.KeysApplied), fmt.Sprint(held), s.AppliedLSN, lag)
	}
	for _, s := range sts {
		if s.CaptureFailure != nil {
			fmt.Fprintf(w, "  ! %s: capture failure %s: %s\n", s.Name, s.CaptureFailure.Kind, s.CaptureFailure.Error)
		}
		if s.BackfillFailure != nil {
			fmt.Fprintf(w, "  ! %s: build failing (attempt %d): %s\n", s.Name, s.BackfillFailure.Attempts, s.BackfillFailure.LastError)
		}
	}
	return nil
}

// stateOf is a transform's state, with who paused it.
func stateOf(s trellis.TransformStatus) string {
	if s.PausedBy != nil {
		return s.State + " (by " + *s.PausedBy + ")"
	}
	return s.State
}

// printSample prints three rows of a target, its visible columns only.
func printSample(ctx context.Context, w io.Writer, pool *pgxpool.Pool, d trellis.Definition, orderBy string) error {
	target := d.Target
	cols := make([]string, len(d.Columns))
	for i, c := range d.Columns {
		cols[i] = pgx.Identifier{c}.Sanitize() + "::text"
	}
	rows, err := pool.Query(ctx, fmt.Sprintf("SELECT %s FROM %s ORDER BY %s LIMIT 3", strings.Join(cols, ", "), target, orderBy))
	if err != nil {
		return fmt.Errorf("read sample rows of %s: %w", target, err)
	}
	sample, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]*string, error) {
		vals := make([]*string, len(d.Columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		return vals, r.Scan(ptrs...)
	})
	if err != nil {
		return fmt.Errorf("read sample rows of %s: %w", target, err)
	}
	fmt.Fprintf(w, "\nSample of %s (ORDER BY %s):\n", target, orderBy)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\n", strings.Join(d.Columns, "\t"))
	for _, r := range sample {
		cells := make([]string, len(r))
		for i, v := range r {
			cells[i] = "NULL"
			if v != nil {
				cells[i] = *v
			}
		}
		fmt.Fprintf(tw, "  %s\n", strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// indent indents every line of s for display.
func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
