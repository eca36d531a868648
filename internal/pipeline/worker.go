package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/plant"
	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// worker maintains one transform: it builds it, then re-derives the keys
// the store marks dirty. It is the transform's only writer.
type worker struct {
	r    *runner
	id   int64
	name string
	// resume is the transform a RESUME must name to restart this one: its
	// own name, or its owner's for an inner level (ADR 0018).
	resume string
	plan   *engine.Plan
	// planRaw is the stored plan plan was decoded from: a stored plan that
	// differs (ALTER TRANSFORM, ADR 0041) starts a session on the new one.
	planRaw []byte
	// prev is an applier of the plan before the last change, kept only
	// with the planted bug ColumnBuildSkipsNewChanges.
	prev *engine.Applier
	// keyedThrough is the last key of a range-build chunk whose copy
	// failed: the build goes key by key up to it (ADR 0020).
	keyedThrough *int64

	wake chan struct{}
	// changed asks the worker to read its catalog row again: a PAUSE and
	// RESUME the runner saw only together leave the worker running while
	// the catalog asks for a rebuild.
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}

	// persisted is the applied position recorded in PostgreSQL; reached
	// is one the worker reached without writing, which the runner records
	// for every idle worker at once (runner.recordIdleProgress).
	persisted atomic.Uint64
	reached   atomic.Uint64
	applied   uint64
	// parkMu guards parked, which says the worker waits in live with
	// nothing to do: the runner's advancer may then move applied (and
	// only then: the worker takes parkMu to leave its wait). ADR 0044.
	parkMu sync.Mutex
	parked bool
	// lastTake is when the worker last took a batch of changes, and
	// lastKeys how many keys it had: the coalescing window counts from it.
	lastTake time.Time
	lastKeys int
	failures int
	// buildAttempts counts build steps failed in a row; drainFailure is the
	// failing drain being reported (nil when the last batch applied).
	buildAttempts int
	drainFailure  *catalog.DrainFailure
	// fullBuild is set when a fresh aggregate build's final reconcile
	// failed on data: the build starts over with every step, so that the
	// key responsible is held (ADR 0022). In memory: a restart tries the
	// ledger-only build again.
	fullBuild bool
	// groupIndexed: the ledger's deferred group index is known to exist (ADR 0025).
	groupIndexed bool
	// held are the keys the transform holds in quarantine (heldID), so a
	// batch that applies one releases it in the same transaction.
	held map[string]bool
	// corrections is set when partition corrections may be queued for
	// the transform (ADR 0015).
	corrections atomic.Bool
	// failing logs the worker's failures once per episode; its end also
	// resets the backoff.
	failing *retry.Episode
	// lag is the transform's latency queue (latency.go; nil when nothing
	// observes the run).
	lag *lagQueue
	// requests are work the worker runs between live batches (a
	// self-check's repair, selfcheck_run.go).
	requests chan workerRequest
	// recheck counts the keys the last batches marked to re-derive again
	// because a dependency level was behind (recheck.go, ADR 0043);
	// recheckWait is the pause before the next batch while they keep
	// coming back.
	recheck     int
	recheckWait time.Duration
	// onSession: the worker's applier is attached to a session of the
	// runner's applier pool (turn).
	onSession bool
}

// buildAttemptLimit is how many build steps in a row may fail before the
// transform is paused (a RESUME after the fix builds it through).
const buildAttemptLimit = 5

// buildError is a build step that failed.
type buildError struct{ err error }

func (e *buildError) Error() string { return "build: " + e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

// drainError is a batch of changes that failed to apply.
type drainError struct {
	err    error
	keys   int
	tables []string
}

func (e *drainError) Error() string { return "apply changes: " + e.err.Error() }
func (e *drainError) Unwrap() error { return e.err }

func newWorker(r *runner, tr *catalog.Transform, p *engine.Plan) *worker {
	w := &worker{r: r, id: tr.ID, name: tr.Name, plan: p, planRaw: tr.Plan, wake: make(chan struct{}, 1), changed: make(chan struct{}, 1), done: make(chan struct{}),
		failing: retry.NewEpisode(r.t.log.With("transform", tr.Name), "transform worker failed; retrying", "transform worker recovered")}
	w.requests = make(chan workerRequest)
	w.persisted.Store(tr.AppliedLSN)
	w.applied = tr.AppliedLSN
	// A drain failure recorded by the worker of an earlier run (torn down
	// by a lost connection, or killed) is this one's to clear.
	w.drainFailure = tr.DrainFailure
	return w
}

func (w *worker) notify() { signal(w.wake) }

// advanced wakes the waits for convergence in this process and reports
// the latency of the transactions the applied position now passes.
func (w *worker) advanced() {
	w.r.t.progressed.fire()
	if w.lag == nil {
		return
	}
	name, obs := w.name, w.r.obs
	w.lag.passed(w.applied, time.Now().UnixNano(), func(d time.Duration) { obs.LatencyObserved(name, d) })
}

// catalogChanged tells the worker its catalog row may have changed.
func (w *worker) catalogChanged() { signal(w.changed) }

// signal sends on a one-slot channel without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (w *worker) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
}

func (w *worker) stop() { w.cancel() }

// exited reports whether the worker's goroutine has ended by itself (it
// paused its transform).
func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}
func (w *worker) wait() { <-w.done }

func (w *worker) log() interface {
	Info(string, ...any)
	Warn(string, ...any)
	Error(string, ...any)
} {
	return w.r.t.log.With("transform", w.name)
}

// run keeps (re)connecting until the worker is stopped.
func (w *worker) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		a := engine.NewDetachedApplier(w.r.t.cat, w.id, w.plan, w.r.version, w.r.t.log)
		err := w.session(ctx, a)
		a.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSwapped) {
			backoff = 100 * time.Millisecond
			continue // a new session on the promoted plan
		}
		if !errors.Is(err, errHalted) {
			w.r.obs.Error(kindOf(err))
		}
		if !w.failing.Down() {
			backoff = 100 * time.Millisecond // the last episode ended
		}
		if errors.Is(err, errHalted) || w.fatal(ctx, err) || w.report(ctx, err, backoff) {
			return
		}
		if de := (*drainError)(nil); errors.As(err, &de) {
			w.failing.Note() // report logged it, once per drain failure
		} else {
			w.failing.Fail(err, backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 10*time.Second {
			backoff *= 2
		}
	}
}

// fatal pauses the transform on failures retrying cannot cure and
// reports whether it did: an error every key reproduces (a dropped object,
// a revoked privilege) on its second occurrence in a row — the first may
// race a concurrent DROP or swap — and row-data errors no key can be
// charged with (from a step that is not a batch of keys) on their third
// (ADR 0013).
func (w *worker) fatal(ctx context.Context, err error) bool {
	limit := 0
	switch fault.Classify(err) {
	case fault.Halt:
		limit = 2
	case fault.Data:
		limit = 3
	default:
		w.failures = 0
		return false
	}
	w.failures++
	if w.failures < limit {
		return false
	}
	// A failure every key reproduces is often DDL on what the transform
	// reads: say which change and which columns.
	if paused, derr := w.r.pauseOnDrift(ctx, w.id, w.name, w.plan); derr == nil && paused {
		return true
	}
	return w.halt(ctx, haltSentence(w.resume, err)) == errHalted
}

// haltSentence names the cause of an error every key reproduces and the
// fix.
func haltSentence(name string, err error) string {
	code := fault.SQLState(err)
	fix := "fix the cause"
	switch code {
	case "42501":
		fix = "grant the runner's role the privilege PostgreSQL names"
	case "42P01", "42703", "42883", "3F000":
		fix = "restore the object the definition reads (or DROP TRANSFORM and CREATE it again for the new schema)"
	}
	return fmt.Sprintf("re-deriving fails for every key: %s (SQLSTATE %s); %s, then RESUME TRANSFORM %s", fault.Message(err), code, fix, name)
}

// errHalted ends a session whose transform the worker paused.
var errHalted = errors.New("transform paused")

// halt pauses the transform with a halt failure and returns errHalted
// (or why it could not pause).
func (w *worker) halt(ctx context.Context, why string) error {
	f := &catalog.Failure{Kind: catalog.FailureHalt, DetectedAt: time.Now().UTC(), Error: why}
	if err := w.r.t.cat.Pause(ctx, w.r.t.pool, w.id, "system", f); err != nil {
		w.log().Warn("pause the transform", "reason", why, "err", err)
		return err
	}
	w.log().Error("transform paused", "reason", why)
	return errHalted
}

// report records a failing build step as backfill_failure (pausing the
// transform after buildAttemptLimit in a row, and reporting whether it did)
// and a failing batch of changes as drain_failure; both are retried.
func (w *worker) report(ctx context.Context, err error, backoff time.Duration) bool {
	cat, pool := w.r.t.cat, w.r.t.pool
	var be *buildError
	var de *drainError
	switch {
	case errors.As(err, &be):
		if fault.Disconnected(be.err) {
			return false // a server restart is no failing build
		}
		w.buildAttempts++
		next := time.Now().Add(backoff).UTC()
		f := &catalog.BackfillFailure{Attempts: w.buildAttempts, LastError: be.err.Error(), NextAttempt: &next}
		if w.buildAttempts >= buildAttemptLimit {
			f.NextAttempt = nil
			if err := cat.SetBackfillFailure(ctx, pool, w.id, f); err != nil {
				w.r.t.log.Debug("record backfill failure", "transform", w.name, "err", err) // retried: the episode reports it
			}
			return w.halt(ctx, fmt.Sprintf("building keeps failing (%d attempts): %s; fix the cause, then RESUME TRANSFORM %s", w.buildAttempts, be.err, w.resume)) == errHalted
		}
		if err := cat.SetBackfillFailure(ctx, pool, w.id, f); err != nil {
			w.r.t.log.Debug("record backfill failure", "transform", w.name, "err", err)
		}
	case errors.As(err, &de):
		now := time.Now().UTC()
		if w.drainFailure == nil {
			w.drainFailure = &catalog.DrainFailure{Since: now}
			w.log().Warn("applying changes fails; retrying with backoff", "err", de.err)
		}
		f := w.drainFailure
		f.Keys, f.Tables, f.Error, f.LastSeen = de.keys, de.tables, de.err.Error(), now
		f.Attempts++
		f.SQLState = fault.SQLState(de.err)
		if err := cat.SetDrainFailure(ctx, pool, w.id, f); err != nil {
			w.r.t.log.Debug("record drain failure", "transform", w.name, "err", err) // the failure itself warned once
		}
	}
	return false
}

// succeeded clears the failure reports a successful step ends.
func (w *worker) succeeded(ctx context.Context, build bool) error {
	if build && w.buildAttempts > 0 {
		w.buildAttempts = 0
		if err := w.r.t.cat.SetBackfillFailure(ctx, w.r.t.pool, w.id, nil); err != nil {
			return err
		}
	}
	if !build && w.drainFailure != nil {
		w.log().Info("applying changes recovered", "attempts", w.drainFailure.Attempts)
		w.drainFailure = nil
		if err := w.r.t.cat.SetDrainFailure(ctx, w.r.t.pool, w.id, nil); err != nil {
			return err
		}
	}
	return nil
}

func (w *worker) session(ctx context.Context, a *engine.Applier) error {
	if err := w.loadHeld(ctx); err != nil {
		return err
	}
	w.corrections.Store(true)
	for ctx.Err() == nil {
		tr, err := w.r.t.cat.GetByID(ctx, w.r.t.pool, w.id)
		if err != nil {
			return err
		}
		if tr == nil || catalog.Frozen(tr.State) {
			<-ctx.Done()
			return nil
		}
		if !bytes.Equal(tr.Plan, w.planRaw) {
			// The definition was edited (ALTER TRANSFORM): every change
			// from now on goes through the new plan, on a new session.
			p, err := engine.Decode(tr.Plan)
			if err != nil {
				return err
			}
			if plant.Active(plant.ColumnBuildSkipsNewChanges) && tr.BuildKind == catalog.BuildColumns && w.prev == nil {
				w.prev = engine.NewDetachedApplier(w.r.t.cat, w.id, w.plan, w.r.version, w.r.t.log)
			}
			w.plan, w.planRaw = p, tr.Plan
			return errSwapped
		}
		switch tr.State {
		case catalog.StateWaiting:
			if err := w.r.installCapture(ctx, w.id, w.plan); err != nil {
				var pe *capture.PrivilegeError
				if errors.As(err, &pe) {
					// A missing privilege is no data error and no retry
					// cures it: pause once, naming the grant.
					return w.halt(ctx, pe.Error()+"; then RESUME TRANSFORM "+w.resume)
				}
				return err
			}
			if err := w.startBuild(ctx, a, tr.Rebuild); err != nil {
				return err
			}
			if _, err := w.r.t.cat.SetState(ctx, w.r.t.pool, w.id, catalog.StateWaiting, catalog.StateBackfilling); err != nil {
				return err
			}
			signal(w.r.reconcileNow) // reports the state
			w.log().Info("building transform")
		case catalog.StateBackfilling:
			// One build step (and a batch of the changes meanwhile) per
			// turn on a session, counted in the builds' share.
			a.LedgerOnly = w.ledgerOnly(tr)
			var done bool
			if w.prev != nil {
				// The planted bug: changes through the previous plan.
				if _, err := w.drain(ctx, w.prev, false); err != nil {
					return err
				}
			}
			if err := w.turn(ctx, a, true, func() error {
				if err := w.groupIndex(ctx, a); err != nil {
					return err
				}
				if w.prev == nil {
					if _, err := w.drain(ctx, a, false); err != nil {
						return err
					}
				}
				var err error
				if done, err = w.buildStep(ctx, a, tr); err != nil {
					return &buildError{err}
				}
				if !done {
					return nil
				}
				a.LedgerOnly = false
				if err := w.groupIndex(ctx, a); err != nil {
					return err
				}
				return a.AnalyzeStored(ctx)
			}); err != nil {
				return err
			}
			if err := w.succeeded(ctx, true); err != nil {
				return err
			}
			if done {
				if w.prev != nil {
					w.prev.Close(ctx)
					w.prev = nil
				}
				if _, err := w.r.t.cat.SetState(ctx, w.r.t.pool, w.id, catalog.StateBackfilling, catalog.StateLive); err != nil {
					return err
				}
				w.r.obs.BuildRowsRemaining(w.name, 0)
				w.r.t.progressed.fire()
				signal(w.r.reconcileNow) // reports the state
				w.log().Info("transform is live")
			}
		case catalog.StateLive:
			a.LedgerOnly = false
			if !w.groupIndexed {
				if err := w.turn(ctx, a, false, func() error { return w.groupIndex(ctx, a) }); err != nil {
					return err
				}
			}
			if tr.Replaces != 0 {
				// A redefinition takes the old transform's place once live.
				if err := w.r.swap(ctx, w, tr); err != nil {
					return err
				}
			}
			if err := w.live(ctx, a); err != nil {
				return err
			}
		default:
			return fmt.Errorf("transform %s is in unknown state %q", w.name, tr.State)
		}
		w.failures = 0
		w.failing.Recover()
	}
	return nil
}

// turn runs fn with the worker's applier attached to a session the
// runner's applier pool lends it (ADR 0028): a build step (build) or a
// batch. A turn inside a turn runs on the session the outer one holds.
func (w *worker) turn(ctx context.Context, a *engine.Applier, build bool, fn func() error) error {
	if w.onSession {
		return fn()
	}
	l, err := w.r.appliers.acquire(ctx, w.id, build)
	if err != nil {
		return err
	}
	if err := a.Attach(ctx, l.s); err != nil {
		l.release(true)
		return err
	}
	w.onSession = true
	err = fn()
	w.onSession = false
	a.Detach()
	l.release(brokenBy(l.s, err))
	return err
}

// live drains dirty keys until stopped (a PAUSE stops the worker through
// reconcile) or until its catalog row may have changed.
func (w *worker) live(ctx context.Context, a *engine.Applier) error {
	for ctx.Err() == nil {
		more, err := w.drain(ctx, a, true)
		if err != nil {
			return err
		}
		if err := w.correct(ctx, a); err != nil {
			return err
		}
		if w.applied > w.persisted.Load() {
			w.reached.Store(w.applied)
		}
		w.failing.Recover()
		if more {
			// Keys still wait: serve what else is asked, then go on.
			select {
			case <-ctx.Done():
			case <-w.changed:
				return nil
			case req := <-w.requests:
				req.done <- w.turn(ctx, a, false, func() error { return req.fn(ctx, a) })
			default:
			}
			continue
		}
		// Nothing waits: park, so the runner's advancer moves the applied
		// position with the stream without waking the worker (ADR 0044).
		// The timer is only a backstop: what gives a worker work wakes it.
		w.park(true)
		var req workerRequest
		asked := false
		select {
		case <-ctx.Done():
		case <-w.changed:
			w.park(false)
			return nil // the session reads the catalog row again
		case <-w.wake:
		case req = <-w.requests:
			asked = true
		case <-time.After(idleBackstop(w.r.t.cfg)):
		}
		w.park(false)
		if asked {
			req.done <- w.turn(ctx, a, false, func() error { return req.fn(ctx, a) })
		}
	}
	return nil
}

// idleBackstop is how long a parked worker waits before it looks at its
// dirty set without being asked: a backstop, since every change, request
// and correction wakes it and the advancer moves its position.
func idleBackstop(cfg Options) time.Duration { return 10 * cfg.ProgressInterval }

// park marks the worker as waiting with nothing to do (true), or as going
// back to work (false): leaving the wait takes parkMu, so a move of the
// position by advanceIdle is over before the worker reads it.
func (w *worker) park(parked bool) {
	w.parkMu.Lock()
	w.parked = parked
	w.parkMu.Unlock()
}

// advanceIdle moves a parked worker's applied position to upTo, the
// store's RecordedLSN read before this call, when its dirty set is empty:
// what the worker's own empty Take would do (ADR 0044).
func (w *worker) advanceIdle(upTo uint64) error {
	w.parkMu.Lock()
	defer w.parkMu.Unlock()
	if !w.parked || upTo <= w.applied {
		return nil
	}
	empty, err := w.r.store.Empty(w.id)
	if err != nil || !empty {
		return err
	}
	w.applied = upTo
	if w.applied > w.persisted.Load() {
		w.reached.Store(w.applied)
	}
	w.advanced()
	return nil
}

// coalesce waits, before a live transform takes a batch, for the rest of
// the coalescing window the last batch opened, unless the backlog is
// already large: at one row per commit every batch costs a transaction, a
// visibility check and a progress write whatever its size, so a trickle is
// re-derived once per window (ADR 0016). A worker whose last batch had one
// key keeps up change by change and does not wait: a lone change, or
// changes made one after another each waiting for the last to show, are
// applied at once. A catalog change waits too: the window is short.
func (w *worker) coalesce(ctx context.Context) {
	n, err := w.r.store.Pending(w.id)
	if err != nil {
		return
	}
	wait := coalesceWait(w.r.t.cfg, time.Since(w.lastTake), w.lastKeys, n)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// coalesceWait is how long a live worker waits before its next batch:
// the rest of the window its last batch (lastKeys keys, since ago)
// opened, or nothing when the window is over, the last batch had one key,
// or the pending keys are none or enough: the coalescing backlog, or a
// full batch (waiting cannot make a batch larger than cfg.BatchSize).
func coalesceWait(cfg Options, since time.Duration, lastKeys int, pending int64) time.Duration {
	wait := cfg.CoalesceWindow - since
	if wait <= 0 || lastKeys < 2 || pending == 0 || pending >= int64(min(cfg.CoalesceKeys, cfg.BatchSize)) {
		return 0
	}
	return wait
}

// sessionWait is how long a worker may wait for an applier session
// before it takes its batch again, with what arrived meanwhile.
const sessionWait = 2 * time.Millisecond

// liveTurn is how long a live drain applies batches before it lets the
// worker serve its other work (repairs, partition corrections, catalog
// changes): under writers that never pause the dirty set is never empty.
const liveTurn = 500 * time.Millisecond

// drain applies dirty keys until the set is empty, or (more) until its
// turn is over: live, after liveTurn, with batches kept to the coalescing
// window; in a build, after one batch, taken at once, so that build chunks
// and changes alternate.
func (w *worker) drain(ctx context.Context, a *engine.Applier, live bool) (more bool, err error) {
	turn := time.Now()
	for ctx.Err() == nil {
		if live {
			w.coalesce(ctx)
		}
		b, err := w.r.store.Take(w.id, w.r.t.cfg.BatchSize)
		if err != nil {
			return false, err
		}
		if len(b.Keys) > 0 || len(b.Truncated) > 0 {
			w.lastTake, w.lastKeys = time.Now(), len(b.Keys)
		}
		if len(b.Keys) == 0 && len(b.Truncated) == 0 {
			if b.All && b.UpTo > w.applied {
				w.applied = b.UpTo
				w.advanced()
			}
			return false, nil
		}
		var xids []uint32
		var lsn uint64
		var n int64
		var start time.Time
		asked := time.Now()
		scoped := a.Scoped()
		err = w.turn(ctx, a, false, func() error {
			if time.Since(asked) > sessionWait {
				// Changes went on arriving while the worker waited for a
				// session: take them too (the wait makes the batch).
				var err error
				if b, err = w.r.store.Take(w.id, w.r.t.cfg.BatchSize); err != nil {
					return err
				}
				w.lastKeys = len(b.Keys)
			}
			start = time.Now()
			var err error
			if xids, err = w.xidsUpTo(b.MaxLSN()); err != nil {
				return err
			}
			units := make([]unit, 0, len(b.Keys))
			for _, e := range b.Keys {
				k, err := checkpoint.DecodeKey(e.Key)
				if err != nil {
					return fmt.Errorf("decode stored key: %w", err)
				}
				// A self-join reads the table as two sources: both re-derive.
				units = append(units, unit{table: e.Table, keyID: e.Key, key: k, sources: w.plan.SourcesOf(e.Table)})
			}
			lsn = 0
			if b.All {
				lsn = b.UpTo
			}
			if len(b.Truncated) > 0 {
				// A TRUNCATE changed every row: re-derive every stored
				// identity, from snapshots that see the TRUNCATE.
				if err := w.rederiveStored(ctx, a, xids); err != nil {
					return err
				}
			}
			n, err = w.applyUnits(ctx, a, units, xids, lsn, nil)
			return err
		})
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if errors.Is(err, errHalted) {
			return false, err
		}
		if err != nil {
			w.r.obs.ApplyFailed(w.name)
			return false, &drainError{err: err, keys: len(b.Keys) + len(b.Truncated), tables: w.tablesOf(b)}
		}
		if err := w.succeeded(ctx, false); err != nil {
			return false, err
		}
		// The apply's snapshot saw every xid up to the batch's newest LSN
		// (waitVisible), and visibility only grows: no later apply needs
		// to check them again (the pruner is only the backstop).
		if len(xids) > 0 {
			if err := w.r.store.ResolveXids(b.MaxLSN()); err != nil {
				return false, err
			}
		}
		w.r.obs.BatchApplied(w.name, AppliedBatch{Keys: len(b.Keys), Rows: n, Scope: a.Scoped() - scoped, Duration: time.Since(start)})
		if err := w.r.store.Done(w.id, b); err != nil {
			return false, err
		}
		if err := w.pauseForRecheck(ctx); err != nil {
			return false, err
		}
		if lsn > 0 {
			w.applied = lsn
			w.recorded(lsn)
			w.advanced()
		}
		if !live || time.Since(turn) >= liveTurn {
			// Draining until nothing waits would never end while writers
			// keep changing the sources, nor would a build waiting its
			// turn.
			return true, nil
		}
	}
	return false, ctx.Err()
}

// tablesOf names the source tables of a batch's keys and truncations.
func (w *worker) tablesOf(b checkpoint.Batch) []string {
	seen := map[uint32]bool{}
	for _, k := range b.Keys {
		seen[k.Table] = true
	}
	for _, t := range b.Truncated {
		seen[t.Table] = true
	}
	var out []string
	for _, src := range w.plan.Tables() {
		if seen[src.OID] {
			out = append(out, src.Ident())
		}
	}
	return out
}

// xidsUpTo lists slot transactions not yet known visible, up to lsn.
func (w *worker) xidsUpTo(lsn uint64) ([]uint32, error) {
	pend, err := w.r.store.PendingXids(lsn, 0)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, len(pend))
	for i, e := range pend {
		out[i] = e.Xid
	}
	return out, nil
}

// recorded notes that PostgreSQL holds lsn as the transform's applied
// position (never moving it back: a batch and the idle recorder race).
func (w *worker) recorded(lsn uint64) {
	for {
		p := w.persisted.Load()
		if lsn <= p || w.persisted.CompareAndSwap(p, lsn) {
			return
		}
	}
}

const buildChunk = 5000

// rangeChunkRows and rangeChunkGroups are how many source keys a
// range-build chunk of a row transform and of an aggregate spans (ADR
// 0020): no key travels through the runner, so chunks can be large, and an
// aggregate's chunk rewrites every group its rows fall in, so fewer, larger
// chunks rewrite each group fewer times (1M rows over 100k groups: 9.1 s
// with 200,000-key chunks against 13.3 s with 50,000).
const (
	rangeChunkRows   = 50_000
	rangeChunkGroups = 200_000
)

// buildStep re-derives the next chunk of the build and reports whether the
// build is complete. The first phases walk the cover sources in key order;
// a rebuild then walks the keys the target/ledger holds, so orphans are
// deleted (ADR 0010).
func (w *worker) buildStep(ctx context.Context, a *engine.Applier, tr *catalog.Transform) (bool, error) {
	phase, cursor := tr.BuildPhase, tr.BuildCursor
	columns := tr.BuildKind == catalog.BuildColumns
	if columns && w.plan.Shape != engine.ShapeRow {
		// An aggregate's edited outputs are a projection of the state it
		// keeps: projecting every group again rewrites them (ADR 0041).
		if err := a.Reconcile(ctx); err != nil {
			return false, err
		}
		return true, w.dropColumns(ctx, tr)
	}
	build, rebuild := a.Phases()
	last := build
	if tr.Rebuild && !columns {
		last = rebuild
	}
	if phase >= last {
		return true, w.dropColumns(ctx, tr)
	}
	if a.Stmts.RangeBuild != nil && phase == 0 && !tr.Rebuild && !columns && len(w.held) == 0 {
		if ok, err := w.rangeBuildStep(ctx, a, tr, cursor); ok || err != nil {
			return false, err
		}
	}
	src, keys, err := a.Enumerate(ctx, phase, cursor, buildChunk)
	if err != nil {
		return false, err
	}
	if len(keys) == 0 {
		if phase+1 < last {
			return false, w.r.t.cat.AdvanceBuild(ctx, w.r.t.pool, w.id, phase+1, nil, 0)
		}
		if tr.Rebuild || a.LedgerOnly {
			// The ledger is now exact; make the target its aggregation (a
			// rebuild: so that a target written by anyone else is repaired
			// too; a ledger-only build: the target's first write).
			if err := a.Reconcile(ctx); err != nil {
				if a.LedgerOnly && fault.Classify(err) == fault.Data {
					return false, w.buildAgain(ctx, a, err)
				}
				return false, err
			}
		}
		return true, w.dropColumns(ctx, tr)
	}
	end := keys[len(keys)-1]
	start := time.Now()
	scoped := a.Scoped()
	n, err := w.applyUnits(ctx, a, w.unitsOf(src, keys), nil, 0, func(ctx context.Context, tx pgx.Tx) error {
		return w.r.t.cat.AdvanceBuild(ctx, tx, w.id, phase, end, int64(len(keys)))
	})
	if err == nil {
		w.r.obs.BatchApplied(w.name, AppliedBatch{Keys: len(keys), Rows: n, Scope: a.Scoped() - scoped, Duration: time.Since(start), Build: true})
		// The estimate status shows (buildprogress.go), counted down.
		if b := tr.Build; b != nil && b.RowsTotal != nil {
			w.r.obs.BuildRowsRemaining(w.name, max(*b.RowsTotal-b.RowsDone-int64(len(keys)), 0))
		}
	}
	return false, err
}

// dropColumns drops, once a build is done, the target columns an ALTER
// TRANSFORM dropped (ADR 0041): only now does no batch of the old plan,
// which wrote them, run any more.
func (w *worker) dropColumns(ctx context.Context, tr *catalog.Transform) error {
	if len(tr.DropColumns) == 0 {
		return nil
	}
	tx, err := w.r.t.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, c := range tr.DropColumns {
		if _, err := tx.Exec(ctx, "ALTER TABLE "+w.plan.Target.Ident()+" DROP COLUMN IF EXISTS "+pgx.Identifier{c}.Sanitize()); err != nil {
			return fmt.Errorf("drop column %s of %s: %w", c, w.plan.Target.Ident(), err)
		}
	}
	if err := w.r.t.cat.ColumnsDropped(ctx, tx, w.id); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// ledgerOnly says whether the applier writes only the ledger in this step
// of tr's build (ADR 0022): a fresh build of a grouped aggregate, unless
// its reconcile failed on data once already.
func (w *worker) ledgerOnly(tr *catalog.Transform) bool {
	return !tr.Rebuild && tr.BuildKind == "" && !w.fullBuild && w.plan.Ledger != nil && len(w.plan.Groups) > 0
}

// groupIndex makes the ledger's deferred group index (ADR 0025) once the
// applier is to run steps that read it: in every step but a ledger-only
// build's. Once per worker: the statement is idempotent, but it locks the
// ledger.
func (w *worker) groupIndex(ctx context.Context, a *engine.Applier) error {
	if a.LedgerOnly || w.groupIndexed {
		return nil
	}
	if err := a.EnsureGroupIndex(ctx); err != nil {
		return err
	}
	w.groupIndexed = true
	return nil
}

// buildAgain starts a fresh aggregate build over with every step after
// its reconcile failed on data (cause): a value only the target refuses,
// which the incremental build holds by key.
func (w *worker) buildAgain(ctx context.Context, a *engine.Applier, cause error) error {
	w.log().Warn("the build's aggregation was refused; building again group by group to hold the key responsible", "err", cause)
	// The tables are emptied with the build's cursor reset, in one
	// transaction: a crash between would leave a finished build over an
	// empty ledger.
	err := a.ClearAggregate(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return w.r.t.cat.AdvanceBuild(ctx, tx, w.id, 0, nil, 0)
	})
	if err != nil {
		return err
	}
	w.fullBuild, a.LedgerOnly = true, false
	return w.startBuild(ctx, a, false)
}

// rangeBuildStep builds the next chunk of a fresh build's first phase by
// key range (ADR 0020) and reports whether it did. A row transform's rows
// that re-derives of changed keys wrote ahead of the build are re-derived
// by key in the same transaction, and its copy leaves them out; an
// aggregate's range changes compare with its ledger rows, those included.
// Anything else — no key left, a chunk that fails (a row the target
// refuses is held only by the keyed path, ADR 0013) — is left to the keyed
// path, which builds the chunk again from the same cursor, and the rest of
// that chunk.
func (w *worker) rangeBuildStep(ctx context.Context, a *engine.Applier, tr *catalog.Transform, cursor []string) (bool, error) {
	lo := int64(math.MinInt64)
	if len(cursor) == 1 {
		c, err := strconv.ParseInt(cursor[0], 10, 64)
		if err != nil || c == math.MaxInt64 {
			return false, nil
		}
		lo = c + 1
	}
	if w.keyedThrough != nil && lo <= *w.keyedThrough {
		return false, nil
	}
	start := time.Now()
	chunk := rangeChunkRows
	if a.Stmts.RangeBuild.Changes != "" {
		chunk = rangeChunkGroups
	}
	hi, keys, ok, err := a.RangeNext(ctx, lo, chunk)
	if err != nil || !ok {
		if err != nil {
			w.log().Info("range build chunk failed; building it key by key", "from", lo, "err", err)
		}
		return false, nil
	}
	var stored []int64
	copies := a.RangeCopies()
	if copies {
		if stored, err = a.RangeStored(ctx, lo, hi); err != nil {
			w.log().Info("range build chunk failed; building it key by key", "from", lo, "to", hi, "err", err)
			return false, nil
		}
	}
	again := make([][]string, len(stored))
	for i, k := range stored {
		again[i] = []string{strconv.FormatInt(k, 10)}
	}
	var copied int64
	written, err := a.Apply(ctx, engine.Batch{Keys: w.keyBatch(w.unitsOf(0, again)), Extra: func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if copies {
			copied, err = a.RangeCopy(ctx, tx, lo, hi, stored)
		} else {
			copied, err = a.RangeRederive(ctx, tx, lo, hi)
		}
		if err != nil {
			return err
		}
		return w.r.t.cat.AdvanceBuild(ctx, tx, w.id, 0, []string{strconv.FormatInt(hi, 10)}, keys)
	}})
	if err != nil {
		w.log().Info("range build chunk failed; building it key by key", "from", lo, "to", hi, "err", err)
		w.keyedThrough = &hi
		return false, nil
	}
	w.r.obs.BatchApplied(w.name, AppliedBatch{Keys: int(keys), Rows: written + copied, Duration: time.Since(start), Build: true})
	if b := tr.Build; b != nil && b.RowsTotal != nil {
		w.r.obs.BuildRowsRemaining(w.name, max(*b.RowsTotal-b.RowsDone-keys, 0))
	}
	return true, nil
}

// rederiveStored re-derives every identity the transform stores, and
// every key it holds in quarantine.
func (w *worker) rederiveStored(ctx context.Context, a *engine.Applier, xids []uint32) error {
	build, rebuild := a.Phases()
	for phase := build; phase < rebuild; phase++ {
		var cursor []string
		for {
			src, keys, err := a.Enumerate(ctx, phase, cursor, buildChunk)
			if err != nil {
				return err
			}
			if len(keys) == 0 {
				break
			}
			if _, err := w.applyUnits(ctx, a, w.unitsOf(src, keys), xids, 0, nil); err != nil {
				return err
			}
			cursor = keys[len(keys)-1]
		}
	}
	// A held key may have no stored row (the target refused its first
	// one): re-derive the held keys too, so a TRUNCATE releases them.
	held, err := w.r.t.cat.HeldOf(ctx, w.r.t.pool, w.id)
	if err != nil || len(held) == 0 {
		return err
	}
	units := make([]unit, 0, len(held))
	for _, k := range held {
		if srcs := w.plan.SourcesOf(k.TableOID); len(srcs) > 0 {
			units = append(units, unit{table: k.TableOID, keyID: k.KeyID, key: k.Key, sources: srcs})
		}
	}
	// A batch at most, as every apply (the fuse bounds the held keys, not
	// the batch).
	for len(units) > 0 {
		n := min(len(units), w.r.t.cfg.BatchSize)
		if _, err := w.applyUnits(ctx, a, units[:n], xids, 0, nil); err != nil {
			return err
		}
		units = units[n:]
	}
	return nil
}

// unitsOf are keys of plan source src as units of a batch.
func (w *worker) unitsOf(src int, keys [][]string) []unit {
	oid := w.plan.Sources[src].OID
	out := make([]unit, len(keys))
	for i, k := range keys {
		out[i] = unit{table: oid, keyID: checkpoint.EncodeKey(k), key: k, sources: []int{src}}
	}
	return out
}
