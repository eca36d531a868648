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
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// runEngine measures one transform shape over one workload in a fresh
// database: define on the empty table, start Run, wait until live, then per
// phase either (live) write as fast as the writer goes while Run is running
// and time first write to convergence, or (catch-up) stop Run, write, start
// Run and time start to convergence.
func runEngine(ctx context.Context, cfg *Config, dbs Databases, wl Workload, sh Shape, mode, capture string) (results []Result, err error) {
	dsn, drop, err := dbs.NewDatabase(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: new database: %w", err)
	}
	defer func() {
		if derr := drop(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = fmt.Errorf("bench: drop database: %w", derr)
		}
	}()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	data := wl.data(sh.Groups)
	for _, q := range data.setupSQL() {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("bench: create the source tables: %w", err)
		}
	}

	dir, err := os.MkdirTemp("", "trellis-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: data dir: %w", err)
	}
	defer os.RemoveAll(dir)
	// Slot names are cluster-wide and derive from the instance schema, so
	// cases whose databases coexist (pgtest drops them only at the test's
	// end) need distinct schemas.
	schema := fmt.Sprintf("trellis_bench_%s_%d_%s", sh.Name, wl.PerCommit, mode)
	if capture != trellis.CaptureLogical {
		schema += "_" + capture
	}
	reg := prometheus.NewRegistry()
	tc := trellis.Config{DSN: dsn, Schema: schema, DataDir: dir, Confirm: trellis.ConfirmLocal,
		Capture: capture, ProgressInterval: cfg.ProgressInterval, BatchSize: cfg.BatchSize, Logger: cfg.Logger,
		Metrics: trellis.NewMetrics(reg)}
	cfg.Tuning.apply(&tc)
	tr, err := trellis.Open(ctx, tc)
	if err != nil {
		return nil, fmt.Errorf("bench: open: %w", err)
	}
	defer tr.Close()
	name := "bench_" + sh.Name
	if _, err := tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM %s AS %s", pgx.Identifier{name}.Sanitize(), sh.Query)); err != nil {
		return nil, fmt.Errorf("bench: define %s: %w", name, err)
	}
	if sh.Join {
		// The scenario indexes every join column; a gap would make the
		// figures about a missing index.
		st, err := tr.Status(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("bench: status of %s: %w", name, err)
		}
		if len(st) == 1 && len(st[0].SourceIndexGaps) > 0 {
			return nil, fmt.Errorf("bench: %s has source index gaps: %+v", name, st[0].SourceIndexGaps)
		}
	}

	run := &running{tr: tr}
	defer func() {
		if rerr := run.stop(); rerr != nil && err == nil {
			err = fmt.Errorf("bench: %s: %w", name, rerr)
		}
	}()
	if err := run.converge(ctx, cfg); err != nil {
		return nil, fmt.Errorf("bench: %s build: %w", name, err)
	}

	w := &writer{conn: conn, data: data}
	for _, p := range wl.phases() {
		if p.name == PhaseDimChange {
			// A latency measured change by change while Run is running:
			// live cases only.
			if mode != ModeLive {
				continue
			}
			r, err := runDimChange(ctx, cfg, dimChangeCase{conn: conn, run: run, reg: reg, schema: schema, name: name,
				sh: sh, sizes: *wl.Join})
			if r.Phase != "" {
				results = append(results, r)
			}
			if err != nil {
				return results, err
			}
			continue
		}
		hand := p.name == PhaseRederive && sh.hand != handNone
		if hand {
			// The hand-written baseline's copies must reflect the source
			// before the update. Building them writes WAL the engine reads
			// past, so wait for that before the phase's clock starts.
			if err := buildHand(ctx, conn, sh.hand); err != nil {
				return results, err
			}
			if err := vacuumEngine(ctx, conn, schema, name); err != nil {
				return results, err
			}
			if err := run.converge(ctx, cfg); err != nil {
				return results, fmt.Errorf("bench: %s after building the hand-written copies: %w", name, err)
			}
		}
		before := readApplyStats(reg, name)
		var wrote time.Duration
		var start time.Time
		switch mode {
		case ModeLive:
			start = time.Now()
			if wrote, err = w.write(ctx, p); err != nil {
				return results, errors.Join(err, run.cause())
			}
		case ModeCatchUp:
			if err := settleSlot(ctx, conn); err != nil {
				return results, fmt.Errorf("bench: %s: %w", name, err)
			}
			if err := run.stop(); err != nil {
				return results, fmt.Errorf("bench: %s: %w", name, err)
			}
			if wrote, err = w.write(ctx, p); err != nil {
				return results, err
			}
			start = time.Now()
		default:
			return results, fmt.Errorf("bench: unknown mode %q", mode)
		}
		cerr := run.converge(ctx, cfg)
		r := newResult(data.name(), sh.Name, mode, p.name, p.perCommit, p.rows, wrote, time.Since(start))
		r.Capture = capture
		after := readApplyStats(reg, name)
		r.ApplySeconds = after.seconds - before.seconds
		r.Applies = int64(after.count - before.count)
		r.SlotTransactions = int64(after.slotTxns - before.slotTxns)
		st, serr := tr.Status(ctx, name)
		if serr == nil && len(st) == 1 {
			r.KeysApplied = st[0].KeysApplied
		}
		if cerr != nil {
			if ctx.Err() != nil || run.cause() != nil || trellis.CodeOf(cerr) != trellis.CodeTimeout {
				return results, fmt.Errorf("bench: %s %s: %w", name, p.name, cerr)
			}
			// A phase that does not converge in time is a result, not a
			// harness failure: record it and go on with the next case.
			r.RowsPerSecond = 0
			r.Verified = fmt.Sprintf("TIMEOUT: not converged after %s", cfg.PhaseTimeout)
			if serr == nil && len(st) == 1 {
				r.Verified += fmt.Sprintf(" (%d keys applied, %d waiting)", st[0].KeysApplied, st[0].KeysWaiting)
			}
			progress(cfg, r)
			fmt.Fprintf(cfg.Progress, "%-4s %-14s %-7s %-9s %s; skipping the case's remaining phases\n", r.Data, r.caseName(), mode, p.name, r.Verified)
			return append(results, r), nil
		}
		progress(cfg, r)
		if cfg.Verify {
			if r.Verified, err = verify(ctx, cfg, conn, name, sh); err != nil {
				return append(results, r), err
			}
			fmt.Fprintf(cfg.Progress, "%-4s %-14s %-7s %-9s self-check: %s\n", r.Data, r.caseName(), mode, p.name, r.Verified)
		}
		if hand {
			// Stop Run so that neither it nor its walsender decoding the
			// baseline's WAL competes with the hand-written SQL for the
			// machine. (The re-derive phase is the last; a later phase's
			// converge would start Run again.)
			if err := run.stop(); err != nil {
				return append(results, r), fmt.Errorf("bench: %s: %w", name, err)
			}
			hr, err := measureHand(ctx, conn, sh.hand, sh, rederivedIDs(p.rows), cfg.Verify)
			if err != nil {
				return append(results, r), err
			}
			r.HandSeconds, r.HandKeysSeconds, r.HandVerified = hr.rederive.Seconds(), hr.keys.Seconds(), hr.verified
			if r.ApplySeconds > 0 {
				r.HandRatio = r.HandSeconds / r.ApplySeconds
			}
			progressHand(cfg, r)
		}
		results = append(results, r)
	}
	return results, nil
}

// verify compares the target with its query right after convergence. A
// difference is checked again after RecheckAfter, to tell a wrong
// convergence signal (the target catches up later) from lost changes.
func verify(ctx context.Context, cfg *Config, conn *pgx.Conn, name string, sh Shape) (string, error) {
	target := pgx.Identifier{"public", name}
	d, err := selfcheck.Compare(ctx, conn, target, sh.Columns, sh.Query)
	if err != nil {
		return "", fmt.Errorf("bench: %s self-check: %w", name, err)
	}
	if d.Equal() {
		return "ok", nil
	}
	msg := fmt.Sprintf("DIFFERS at convergence: %d missing %v, %d extra %v", d.Missing, d.MissingSample, d.Extra, d.ExtraSample)
	select {
	case <-ctx.Done():
		return msg, ctx.Err()
	case <-time.After(cfg.RecheckAfter):
	}
	d2, err := selfcheck.Compare(ctx, conn, target, sh.Columns, sh.Query)
	if err != nil {
		return msg, fmt.Errorf("bench: %s self-check: %w", name, err)
	}
	if d2.Equal() {
		return fmt.Sprintf("LATE: equal %s later; %s", cfg.RecheckAfter, msg), nil
	}
	return fmt.Sprintf("%s; still %d missing, %d extra %s later", msg, d2.Missing, d2.Extra, cfg.RecheckAfter), nil
}

// applyStats are the engine's own counters, read from its metrics.
type applyStats struct {
	seconds  float64 // time inside apply transactions
	count    uint64  // apply transactions
	slotTxns float64 // transactions received from the slot
}

// readApplyStats reads transform's apply histogram and the slot
// transaction counter; metrics not yet created read as zero.
func readApplyStats(reg *prometheus.Registry, transform string) applyStats {
	var st applyStats
	mfs, err := reg.Gather()
	if err != nil {
		return st
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "trellis_transform_apply_duration_seconds":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "transform" && l.GetValue() == transform {
						st.seconds = m.GetHistogram().GetSampleSum()
						st.count = m.GetHistogram().GetSampleCount()
					}
				}
			}
		case "trellis_capture_transactions_total":
			for _, m := range mf.GetMetric() {
				st.slotTxns = m.GetCounter().GetValue()
			}
		}
	}
	return st
}

// applyByTransform is each transform's apply histogram so far (time
// inside apply transactions and their count).
func applyByTransform(reg *prometheus.Registry) map[string]applyStats {
	out := map[string]applyStats{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "trellis_transform_apply_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "transform" {
					st := out[l.GetValue()]
					st.seconds += m.GetHistogram().GetSampleSum()
					st.count += m.GetHistogram().GetSampleCount()
					out[l.GetValue()] = st
				}
			}
		}
	}
	return out
}

// running is a Run in the background that can be stopped and restarted.
type running struct {
	tr     *trellis.Trellis
	cancel context.CancelFunc
	done   chan error
	// failed is closed, with err set, when Run stopped on its own.
	failed chan struct{}
	err    error
}

// start starts Run unless it is running.
func (r *running) start(ctx context.Context) {
	if r.cancel != nil {
		return
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel, r.done, r.failed = cancel, make(chan error, 1), make(chan struct{})
	go func() {
		err := r.tr.Run(rctx)
		if rctx.Err() == nil {
			r.err = fmt.Errorf("Run stopped early: %w", err)
			close(r.failed)
		}
		r.done <- err
	}()
}

// stop stops Run and returns its error, if it failed.
func (r *running) stop() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	err := <-r.done
	r.cancel = nil
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("Run: %w", err)
	}
	return nil
}

// cause is why Run stopped on its own, or nil.
func (r *running) cause() error {
	if r.failed == nil {
		return nil
	}
	select {
	case <-r.failed:
		return r.err
	default:
		return nil
	}
}

// converge makes sure Run is running and waits until the transform
// reflects every write committed so far. A Run that stops on its own ends
// the wait at once instead of at the timeout.
func (r *running) converge(ctx context.Context, cfg *Config) error {
	r.start(ctx)
	ctx, cancel := context.WithTimeout(ctx, cfg.PhaseTimeout)
	defer cancel()
	failed := r.failed
	go func() {
		select {
		case <-failed:
			cancel()
		case <-ctx.Done():
		}
	}()
	tok, err := r.tr.WatermarkToken(ctx)
	if err == nil {
		err = r.tr.AwaitConverged(ctx, tok)
	}
	if err != nil {
		return errors.Join(err, r.cause())
	}
	return nil
}

// settleSlot lets the engine's slot catch up with the WAL before a
// catch-up phase stops Run: a CHECKPOINT logs the running transactions, and
// once the slot confirms past it PostgreSQL can move the slot's restart_lsn
// there. Otherwise the restarted stream would re-decode every earlier phase
// from the slot's creation (restart_lsn only moves at such records, which
// PostgreSQL logs every 15 s or at checkpoints), while the pg_recvlogical
// baseline drains a slot created just before the phase. A long-running
// instance is in the settled state. Bounded to 10 s; not timed.
func settleSlot(ctx context.Context, conn *pgx.Conn) error {
	var target string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		return fmt.Errorf("settle slot: %w", err)
	}
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("settle slot: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var settled bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_and(restart_lsn >= $1::pg_lsn), true) FROM pg_replication_slots
			WHERE database = current_database() AND slot_type = 'logical'`, target).Scan(&settled)
		if err != nil {
			return fmt.Errorf("settle slot: %w", err)
		}
		if settled {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil // not settled: the phase measures the re-decode too
}

// vacuumEngine gives the engine's target and ledger the maintenance the
// hand-written copies get (they are freshly built and analyzed before the
// re-derive phase): VACUUM ANALYZE, as autovacuum would after the earlier
// phases' million updates. Untimed.
func vacuumEngine(ctx context.Context, conn *pgx.Conn, schema, target string) error {
	rels := []pgx.Identifier{{"public", target}}
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'ledger%'`, schema)
	if err != nil {
		return fmt.Errorf("bench: list ledgers: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("bench: list ledgers: %w", err)
	}
	for _, n := range names {
		rels = append(rels, pgx.Identifier{schema, n})
	}
	for _, r := range rels {
		if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+r.Sanitize()); err != nil {
			return fmt.Errorf("bench: vacuum %s: %w", r.Sanitize(), err)
		}
	}
	return nil
}
