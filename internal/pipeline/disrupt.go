package pipeline

// What a lost continuity does to the transforms (docs/architecture.md
// §3.9, ADR 0039): every transform whose target may now disagree with its
// query is paused until RESUME (--on-disruption=pause, the default), or set
// to rebuild in place at once (--on-disruption=repair), once capture is in
// place again so nothing falls between. Either way the transform keeps the
// disruption's sentence until it is live again.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// The --on-disruption modes (Options.OnDisruption).
const (
	// DisruptPause pauses every affected transform until RESUME.
	DisruptPause = "pause"
	// DisruptRepair rebuilds every affected transform in place at once.
	DisruptRepair = "repair"
)

// disrupt marks every transform a disruption (why) may have left stale, at
// the start of a run (no worker runs yet): paused, or set to rebuild in
// place under --on-disruption=repair. Transforms still waiting for their
// build are left alone: they will install capture as it is now.
func (r *runner) disrupt(ctx context.Context, why string) error {
	r.obs.Error(ErrorCapture)
	if r.t.cfg.OnDisruption == DisruptRepair {
		return r.repairAll(ctx, why)
	}
	return r.pauseAll(ctx, why, true)
}

// disruptionFix is what the sentence of a transform paused by a disruption
// says to do.
func disruptionFix(name string) string {
	return "; changes may have been missed, so the target may be stale: RESUME TRANSFORM " + name +
		" (or RESUME TRANSFORM ALL) re-derives it in place, and a runner started with --on-disruption=repair does so by itself"
}

// pauseAll pauses every transform with a disruption; with skipWaiting,
// not those waiting for their build. Only safe while no worker runs: a
// running worker may be between installing its capture and building.
// One transaction: a reader (status, AwaitConverged) sees every transform
// paused or none, never some still live while the rest are paused (seen:
// AwaitConverged failed on the first paused transform, and status read
// right after showed the next one live).
func (r *runner) pauseAll(ctx context.Context, why string, skipWaiting bool) error {
	var paused []string
	err := pgx.BeginFunc(ctx, r.t.pool, func(tx pgx.Tx) error {
		ts, err := r.t.cat.List(ctx, tx)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		for _, tr := range ts {
			if catalog.Frozen(tr.State) || skipWaiting && tr.State == catalog.StateWaiting {
				continue
			}
			f := &catalog.Failure{Kind: catalog.FailureDisruption, DetectedAt: now, Error: why + disruptionFix(tr.Name)}
			if err := r.t.cat.Pause(ctx, tx, tr.ID, "system", f); err != nil {
				return err
			}
			if err := r.t.cat.SetDisruption(ctx, tx, tr.ID, &catalog.Disruption{Reason: why, DetectedAt: now}); err != nil {
				return err
			}
			paused = append(paused, tr.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, name := range paused {
		r.t.log.Error("transform paused: capture disruption", "transform", name, "reason", why)
	}
	return nil
}

// repairAll sets every transform a disruption (why) may have left stale to
// rebuild in place — the rebuild RESUME asks for: every source key, then
// every stored identity, re-derived while the old rows keep serving — and
// with it every transform a disruption paused before (why "" repairs only
// those, each for its own disruption). A transform whose sources no longer
// match its plan is paused with the reason instead. Only safe once capture
// is in place (a rebuild reads the sources after its capture's fence) and
// while no worker runs the transforms it changes.
func (r *runner) repairAll(ctx context.Context, why string) error {
	return pgx.BeginFunc(ctx, r.t.pool, func(tx pgx.Tx) error { return r.repairIn(ctx, tx, why) })
}

// repairIn is repairAll in the transaction tx.
func (r *runner) repairIn(ctx context.Context, tx pgx.Tx, why string) error {
	ts, err := r.t.cat.List(ctx, tx)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	for _, tr := range ts {
		reason := why
		paused := tr.State == catalog.StatePaused && tr.PausedBy == "system" && tr.CaptureFailure != nil && tr.CaptureFailure.Kind == catalog.FailureDisruption
		switch {
		case paused:
			if tr.Disruption != nil {
				reason = tr.Disruption.Reason
			} else if reason == "" {
				reason = tr.CaptureFailure.Error
			}
		case why == "" || catalog.Frozen(tr.State) || tr.State == catalog.StateWaiting:
			continue
		}
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			continue // a plan this version cannot read
		}
		if err := engine.Revalidate(ctx, tx, tr.Name, p); err != nil {
			if terr.CodeOf(err) != terr.NotFound && terr.CodeOf(err) != terr.Validation {
				return err
			}
			f := &catalog.Failure{Kind: catalog.FailureCapture, DetectedAt: now, Error: reason + "; it cannot be repaired: " + err.Error()}
			if err := r.t.cat.Pause(ctx, tx, tr.ID, "system", f); err != nil {
				return err
			}
			r.t.log.Error("transform paused: a disruption it cannot be repaired from", "transform", tr.Name, "reason", f.Error)
			continue
		}
		d := catalog.Disruption{Reason: reason, DetectedAt: now}
		if tr.Disruption != nil {
			d.DetectedAt = tr.Disruption.DetectedAt
		}
		if err := r.t.cat.Repair(ctx, tx, tr.ID, d); err != nil {
			return err
		}
		r.t.log.Warn("transform rebuilds in place after a disruption (--on-disruption=repair)", "transform", tr.Name, "reason", reason)
	}
	return nil
}

// repairWhenCaptured asks, under --on-disruption=repair, for the
// transforms a disruption while streaming paused to be repaired once
// capture streams again (captureHealth then wakes the reconcile
// goroutine, which calls repairPending).
func (r *runner) repairWhenCaptured() {
	if r.t.cfg.OnDisruption == DisruptRepair {
		r.repairAsked.Store(true)
	}
}

// repairPending repairs what a disruption while streaming paused, once
// capture streams again; called from the reconcile goroutine.
func (r *runner) repairPending(ctx context.Context) {
	if !r.repairAsked.Swap(false) {
		return
	}
	if err := r.repairAll(ctx, ""); err != nil && ctx.Err() == nil {
		r.t.log.Error("repair the transforms a disruption paused", "err", err)
		r.repairAsked.Store(true) // tried again at the next reconcile
	}
}
