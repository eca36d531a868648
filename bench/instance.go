package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Tuning is the part of trellis.Config that docs/tuning.md covers and the
// bench lets users vary: zero values are the library's defaults, negative
// durations mean none, as in trellis.Config.
type Tuning struct {
	CoalesceWindow    time.Duration
	CoalesceKeys      int
	StoreSyncInterval time.Duration
	// TriggerPollInterval is trellis.Config.TriggerPollInterval (0: the
	// default).
	TriggerPollInterval time.Duration
}

// apply copies the knobs into a trellis.Config.
func (t Tuning) apply(c *trellis.Config) {
	c.CoalesceWindow, c.CoalesceKeys, c.StoreSyncInterval = t.CoalesceWindow, t.CoalesceKeys, t.StoreSyncInterval
	c.TriggerPollInterval = t.TriggerPollInterval
}

// instance is a trellis-repl instance embedded in this process (Open,
// Apply, Run in a goroutine), maintaining some transforms of one database.
type instance struct {
	tr     *trellis.Trellis
	reg    *prometheus.Registry
	run    *running
	shapes []Shape
	done   []func() error
}

// openInstance opens an instance of schema on dsn with the given capture,
// defines shapes (each named by its Name, its target in public) and, when
// start is set, starts Run and waits until every transform is built and
// converged. schema must be unique on the server: the slot's name derives
// from it.
func openInstance(ctx context.Context, ec *Config, dsn, schema, capture string, shapes []Shape, start bool) (in *instance, err error) {
	in = &instance{shapes: shapes}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.close())
			in = nil
		}
	}()
	dir, err := os.MkdirTemp("", "trellis-bench-")
	if err != nil {
		return in, fmt.Errorf("bench: data dir: %w", err)
	}
	in.done = append(in.done, func() error { return os.RemoveAll(dir) })
	in.reg = prometheus.NewRegistry()
	tc := trellis.Config{DSN: dsn, Schema: schema, DataDir: dir, Confirm: trellis.ConfirmLocal,
		Capture: capture, ProgressInterval: ec.ProgressInterval, BatchSize: ec.BatchSize, Logger: ec.Logger,
		Metrics: trellis.NewMetrics(in.reg)}
	ec.Tuning.apply(&tc)
	in.tr, err = trellis.Open(ctx, tc)
	if err != nil {
		return in, fmt.Errorf("bench: open: %w", err)
	}
	in.done = append(in.done, func() error { in.tr.Close(); return nil })
	in.run = &running{tr: in.tr}
	in.done = append(in.done, func() error {
		if err := in.run.stop(); err != nil {
			return fmt.Errorf("bench: %s capture: %w", capture, err)
		}
		return nil
	})
	if err := in.define(ctx); err != nil {
		return in, err
	}
	if start {
		if err := in.run.converge(ctx, ec); err != nil {
			return in, fmt.Errorf("bench: build (%s capture): %w", capture, err)
		}
	}
	return in, nil
}

// define creates the instance's transforms.
func (in *instance) define(ctx context.Context) error {
	for _, sh := range in.shapes {
		if _, err := in.tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM %s AS %s", pgx.Identifier{sh.Name}.Sanitize(), sh.Query)); err != nil {
			return fmt.Errorf("bench: define %s: %w", sh.Name, err)
		}
	}
	return nil
}

// verifyAll compares every target with its query (see verify): any
// verdict but "ok" is an error.
func (in *instance) verifyAll(ctx context.Context, ec *Config, conn *pgx.Conn) (string, error) {
	for _, sh := range in.shapes {
		v, err := verify(ctx, ec, conn, sh.Name, sh)
		if err != nil {
			return v, err
		}
		if v != "ok" {
			return v, fmt.Errorf("bench: target %s differs from its query: %s", sh.Name, v)
		}
	}
	return "ok", nil
}

// keysApplied is the sum of the transforms' applied-key counters.
func (in *instance) keysApplied(ctx context.Context) (int64, error) {
	st, err := in.tr.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("bench: status: %w", err)
	}
	var n int64
	for _, s := range st {
		n += s.KeysApplied
	}
	return n, nil
}

// close stops Run and releases everything, newest first.
func (in *instance) close() error {
	var errs []error
	for i := len(in.done) - 1; i >= 0; i-- {
		errs = append(errs, in.done[i]())
	}
	in.done = nil
	return errors.Join(errs...)
}

// newDatabase is a fresh database from dbs and a connection to it; the
// returned cleanup closes the connection and drops the database.
func newDatabase(ctx context.Context, dbs Databases) (dsn string, conn *pgx.Conn, cleanup func() error, err error) {
	dsn, drop, err := dbs.NewDatabase(ctx)
	if err != nil {
		return "", nil, nil, fmt.Errorf("bench: new database: %w", err)
	}
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		return "", nil, nil, errors.Join(fmt.Errorf("bench: connect: %w", err), drop(context.WithoutCancel(ctx)))
	}
	cleanup = func() error {
		conn.Close(context.WithoutCancel(ctx))
		if err := drop(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("bench: drop database: %w", err)
		}
		return nil
	}
	return dsn, conn, cleanup, nil
}

// execAll runs statements in order through conn.
func execAll(ctx context.Context, conn *pgx.Conn, what string, stmts ...string) error {
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench: %s: %w", what, err)
		}
	}
	return nil
}
