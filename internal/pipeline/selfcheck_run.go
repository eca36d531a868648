package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// repair re-derives the source keys of res's divergent rows (for an
// aggregate, the keys of its divergent groups, then recomputes its target
// from the ledger), by the transform's worker when a runner runs the
// check, else here, then compares those rows again.
func (c *checkRun) repair(ctx context.Context, res *selfcheck.Result) *SelfCheckRepair {
	rp := &SelfCheckRepair{Remaining: res.Total}
	units, err := c.repairUnits(ctx, res.Identities())
	if err != nil {
		rp.Note = "finding the keys to re-derive failed: " + fault.Message(err)
		return rp
	}
	rp.Keys = int64(len(units))
	reconcile := c.plan.Shape == engine.ShapeAggregate
	if c.r != nil {
		err = c.r.repairVia(ctx, c.tr, units, reconcile, c.opts.Timeout)
	} else {
		err = c.repairHere(ctx, units, reconcile)
	}
	if err != nil {
		rp.Note = fault.Message(err)
		return rp
	}
	rp.Reconciled = reconcile
	if c.r != nil && !c.opts.Strict {
		token, err := c.t.WatermarkToken(ctx)
		if err == nil {
			var out, why string
			if out, why, err = c.t.awaitOne(ctx, c.tr.ID, token, c.opts.Timeout); err == nil && out != "" {
				rp.Note = "comparing again: " + why
			}
		}
		if err != nil {
			rp.Note = "comparing again: " + fault.Message(err)
			return rp
		}
	}
	again, err := c.recheck(ctx, res)
	if err != nil {
		rp.Note = "comparing again failed: " + fault.Message(err)
		return rp
	}
	rp.Remaining = again.Total
	rp.Fixed = max(res.Total-again.Total, 0)
	if res.Truncated && rp.Note == "" {
		rp.Note = fmt.Sprintf("only the first %d divergences were repaired; run the self-check with --repair again", len(res.Divergences))
	}
	return rp
}

// repairUnits are the keys that re-derive the rows at identities: a row
// target's identity holds its sources' keys; an aggregate's groups are
// fed by the keys its ledger holds for them and the source rows that
// should feed them now.
func (c *checkRun) repairUnits(ctx context.Context, identities [][]*string) ([]unit, error) {
	seen := map[string]bool{}
	var out []unit
	add := func(src int, key []string) {
		oid := c.plan.Sources[src].OID
		id := checkpoint.EncodeKey(key)
		if h := heldID(oid, id); !seen[h] {
			seen[h] = true
			out = append(out, unit{table: oid, keyID: id, key: key, sources: c.plan.SourcesOf(oid)})
		}
	}
	if c.plan.Shape == engine.ShapeRow {
		for _, id := range identities {
			for _, ik := range c.spec.Keys {
				if k := c.keyOf(ik, id); k != nil {
					add(ik.Source, k)
				}
			}
		}
		return out, nil
	}
	sql := c.plan.GroupKeysSQL()
	if sql == "" || len(identities) == 0 {
		return nil, nil // one group: the ledger's aggregation repairs it
	}
	params := make([]any, len(c.spec.Identity))
	for j := range params {
		col := make([]pgtype.Text, len(identities))
		for r, id := range identities {
			if id[j] != nil {
				col[r] = pgtype.Text{String: *id[j], Valid: true}
			}
		}
		params[j] = col
	}
	err := c.snapshot(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, params...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var src int
			var key []string
			if err := rows.Scan(&src, &key); err != nil {
				return err
			}
			add(src, key)
		}
		return rows.Err()
	})
	return out, err
}

// repairHere re-derives units with an applier of this process. No runner
// is attached; it holds the runner lock meanwhile, so that none starts
// and writes the transform too (a runner starting waits as a standby).
func (c *checkRun) repairHere(ctx context.Context, units []unit, reconcile bool) error {
	t := c.t
	cfg := t.connConfig().Copy()
	cfg.RuntimeParams["application_name"] = processName("trellis-repl self-check repair")
	lock, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "connect: %v", err)
	}
	defer lock.Close(context.WithoutCancel(ctx))
	var got bool
	if err := lock.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, t.cat.LockKey()).Scan(&got); err != nil {
		return terr.Wrap(terr.Unavailable, err, "take the runner lock: %v", err)
	}
	if !got {
		return terr.New(terr.Conflict, "a runner attached while the self-check of %q ran, so this process did not repair it; run `trellis-repl self-check %s --repair` again, the runner repairs it", c.tr.Name, c.tr.Name)
	}
	defer lock.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, t.cat.LockKey()) //nolint:errcheck
	a, err := engine.NewApplier(ctx, t.connConfig(), t.cat, c.tr.ID, c.plan, t.log)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	defer a.Close(context.WithoutCancel(ctx))
	for start := 0; start < len(units); start += t.cfg.BatchSize {
		keys := make([][][]string, len(c.plan.Sources))
		for _, u := range units[start:min(start+t.cfg.BatchSize, len(units))] {
			for _, s := range u.sources {
				keys[s] = append(keys[s], u.key)
			}
		}
		// Rows whose dependency level is behind (ADR 0043) are exact now
		// but no level write may wake them: they go to the runner to
		// re-derive again, recorded with the apply.
		var again [][][]string
		b := engine.Batch{Keys: keys, Stale: func(k [][][]string) { again = k },
			Extra: func(ctx context.Context, tx pgx.Tx) error { return t.cat.Requeue(ctx, tx, c.requeued(again)) }}
		if _, err := a.Apply(ctx, b); err != nil {
			return terr.Wrap(terr.Unavailable, err, "re-derive the divergent keys of %q: %v", c.tr.Name, err)
		}
	}
	if reconcile {
		if err := a.Reconcile(ctx); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
	}
	return nil
}

// requeued are keys (per plan source) for the runner to re-derive again
// because a dependency level was behind; a self-join's two sources give
// the same row twice, which Requeue records once.
func (c *checkRun) requeued(keys [][][]string) []catalog.HeldKey {
	var out []catalog.HeldKey
	now := time.Now().UTC()
	for i, ks := range keys {
		src := c.plan.Sources[i]
		for _, k := range ks {
			out = append(out, catalog.HeldKey{TransformID: c.tr.ID, TableOID: src.OID, SourceTable: src.Ident(), KeyID: checkpoint.EncodeKey(k), Key: k,
				Error: "a dependency level was behind when a self-check repair re-derived this key; the runner re-derives it again (ADR 0043)", PoisonedAt: now})
		}
	}
	return out
}

// repairVia has the transform's worker re-derive units (isolating keys
// that fail, as any batch) and, for an aggregate, recompute its target
// from its ledger: the worker is the transform's only writer.
func (r *runner) repairVia(ctx context.Context, tr *catalog.Transform, units []unit, reconcile bool, accept time.Duration) error {
	r.mu.Lock()
	w := r.workers[tr.ID]
	r.mu.Unlock()
	if w == nil {
		return terr.New(terr.Conflict, "transform %q has no worker in the runner now; run the self-check with --repair again once `trellis-repl status` shows it live", tr.Name)
	}
	return w.do(ctx, accept, func(ctx context.Context, a *engine.Applier) error {
		size := r.t.cfg.BatchSize
		for start := 0; start < len(units); start += size {
			if _, err := w.applyUnits(ctx, a, units[start:min(start+size, len(units))], nil, 0, nil); err != nil {
				return fmt.Errorf("re-derive the divergent keys of %q: %w", tr.Name, err)
			}
		}
		if reconcile {
			return a.Reconcile(ctx)
		}
		return nil
	})
}

// workerRequest is work for a worker to run between batches with its
// applier (a self-check's repair): nothing else writes its transform.
type workerRequest struct {
	fn   func(ctx context.Context, a *engine.Applier) error
	done chan error
}

// do runs fn on the worker, between its batches while it is live, and
// returns its error; the worker must take it within accept.
func (w *worker) do(ctx context.Context, accept time.Duration, fn func(ctx context.Context, a *engine.Applier) error) error {
	req := workerRequest{fn: fn, done: make(chan error, 1)}
	gone := terr.New(terr.Conflict, "transform %q stopped being live before its repair ran; run the self-check with --repair again", w.name)
	timer := time.NewTimer(accept)
	defer timer.Stop()
	select {
	case w.requests <- req:
	case <-w.done:
		return gone
	case <-timer.C:
		return terr.New(terr.Timeout, "the worker of transform %q did not take the repair within %s: it has had changes to apply all along; run the self-check with --repair again, or with a longer --timeout", w.name, accept)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-w.done:
		return gone
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startSelfChecks starts the runner's self-check goroutines: one runs
// queued jobs (woken by the catalog notification, and every few seconds
// in case one was missed), the other, with Config.SelfCheckEvery, audits
// every live transform on a sample.
func (r *runner) startSelfChecks(ctx context.Context, wg *sync.WaitGroup) {
	r.jobWake = make(chan struct{}, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.runJobs(ctx)
	}()
	if r.t.cfg.SelfCheckEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.audit(ctx)
		}()
	}
}

// jobPoll is how often the runner looks for queued self-check jobs
// without a notification; maxJobs is how many it runs at once (a long
// check of a large target does not hold up the others).
const (
	jobPoll = 5 * time.Second
	maxJobs = 4
)

func (r *runner) runJobs(ctx context.Context) {
	by := runnerAppName()
	slots := make(chan struct{}, maxJobs)
	var running sync.WaitGroup
	defer running.Wait()
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		pid := int(r.lockConn.PgConn().PID())
		j, err := r.t.cat.ClaimSelfCheck(ctx, r.t.pool, 0, by, pid)
		if err != nil && ctx.Err() == nil {
			r.t.log.Warn("claim a self-check job", "err", err)
		}
		if j == nil {
			<-slots
			select {
			case <-ctx.Done():
			case <-r.jobWake:
			case <-time.After(jobPoll):
			}
			continue
		}
		running.Add(1)
		go func() {
			defer running.Done()
			defer func() { <-slots }()
			r.t.log.Info("self-check started", "job", j.ID, "transform", j.Transform)
			if err := r.t.runClaimed(ctx, r.t.pool, j, r); err != nil && ctx.Err() == nil {
				r.t.log.Warn("record a self-check job", "job", j.ID, "err", err)
			}
			if got, err := r.t.cat.GetSelfCheck(context.WithoutCancel(ctx), r.t.pool, j.ID); err == nil && got != nil {
				r.t.log.Info("self-check finished", "job", j.ID, "transform", j.Transform, "state", got.State)
			}
		}()
	}
}

// audit compares a sample of every live transform every SelfCheckEvery
// and exposes what it found as metrics.
func (r *runner) audit(ctx context.Context) {
	every := r.t.cfg.SelfCheckEvery
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ts, err := r.t.cat.List(ctx, r.t.pool)
		if err != nil {
			continue
		}
		for _, tr := range ts {
			if tr.State != catalog.StateLive || tr.Replaces != 0 || ctx.Err() != nil {
				continue
			}
			rep, err := r.t.check(ctx, tr, SelfCheckOptions{Timeout: DefaultSelfCheckTimeout}, r, r.t.cfg.SelfCheckSample)
			if err != nil {
				if ctx.Err() == nil {
					r.t.log.Warn("periodic self-check failed", "transform", tr.Name, "err", err)
				}
				continue
			}
			r.obs.SelfCheckAudited(tr.Name, rep.Outcome, rep.Divergences)
			if rep.Outcome == OutcomeDiverged {
				r.t.log.Warn("periodic self-check: the target differs from its query", "transform", tr.Name,
					"divergences", rep.Divergences, "rows_compared", rep.RowsTarget, "fix", "trellis-repl self-check "+tr.Name+" --wait --repair")
			}
		}
	}
}
