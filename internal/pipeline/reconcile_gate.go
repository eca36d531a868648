package pipeline

import (
	"context"
	"time"
)

// reconcileBackstop is the longest a runner goes without a complete
// reconcile when the catalog stamp stays the same: what a reconcile acts
// on that no stamp or notification shows (a capture removal that failed
// for another reason than a lock) is retried at least this often.
const reconcileBackstop = 10 * time.Second

// reconcileIfChanged is the tick's reconcile: it reads the catalog stamp
// (one statement that reads no plan) and reconciles only when the stamp
// moved since the last complete reconcile, or work of reconcile's own is
// left (a worker that ended, trigger capture to retire, removals waiting
// for a lock), or reconcileBackstop passed. Definitions, pauses, resumes
// and releases also notify the runner, which reconciles at once; the
// stamp catches a change that did not, without an idle instance reading
// every transform's row every tick (issue 25's idle cost).
func (r *runner) reconcileIfChanged(ctx context.Context) error {
	stamp, err := r.t.cat.Stamp(ctx, r.t.pool)
	if err != nil {
		return err
	}
	if stamp == r.reconciled.stamp && !r.reconciled.at.IsZero() && time.Since(r.reconciled.at) < reconcileBackstop && !r.reconcileOwes() {
		return nil
	}
	return r.reconcileFrom(ctx, stamp)
}

// reconcileOwes reports whether the last reconcile left work of its own
// that the catalog stamp does not show.
func (r *runner) reconcileOwes() bool {
	if r.retire != nil {
		return true
	}
	for _, ws := range r.removalWaits {
		if len(ws) > 0 {
			return true
		}
	}
	for _, w := range r.workerList() {
		if w.exited() {
			return true
		}
	}
	return false
}
