package pipeline

// What the runner reports to the observer from the catalog and the store
// (the worker reports its own events): transform states, whoever changed
// them (a PAUSE from another process, a system pause), backlogs and held
// keys. Called from reconcile and the heartbeat, which share a goroutine.

import (
	"context"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// reported is what the observer was last told of a transform.
type reported struct{ name, state string }

// reportStates reports each transform whose state (or name) changed since
// the last call, and the removal of those gone, from the catalog's list.
func (r *runner) reportStates(ts []*catalog.Transform) {
	current := make(map[int64]*catalog.Transform, len(ts))
	for _, tr := range ts {
		current[tr.ID] = tr
	}
	var removed map[string]bool
	for id, rep := range r.states {
		if tr := current[id]; tr == nil || tr.Name != rep.name {
			r.obs.TransformRemoved(rep.name)
			delete(r.states, id)
			if removed == nil {
				removed = map[string]bool{}
			}
			removed[rep.name] = true
		}
	}
	for _, tr := range ts {
		// A redefinition takes the name of the transform it replaced, whose
		// series were just removed: report it again.
		if prev, ok := r.states[tr.ID]; ok && prev.state == tr.State && !removed[tr.Name] {
			continue
		}
		r.obs.TransformState(tr.Name, tr.State)
		if tr.State != catalog.StateBackfilling && tr.State != catalog.StateWaiting {
			r.obs.BuildRowsRemaining(tr.Name, 0)
		}
		r.states[tr.ID] = reported{name: tr.Name, state: tr.State}
	}
}

// reportBacklog reports every transform's keys waiting, held keys and
// apply lag: the age of its oldest change not applied when a worker runs
// it (ws), 0 otherwise (a paused transform applies nothing; its state
// series says so).
func (r *runner) reportBacklog(ctx context.Context, ws []*worker) {
	now := time.Now().UnixNano()
	running := make(map[int64]*worker, len(ws))
	for _, w := range ws {
		running[w.id] = w
	}
	held, err := r.t.cat.HeldCounts(ctx, r.t.pool)
	if err != nil {
		return
	}
	for id, rep := range r.states {
		if n, err := r.store.Pending(id); err == nil {
			r.obs.KeysWaiting(rep.name, n)
		}
		r.obs.HeldKeys(rep.name, held[id].Count)
		var lag time.Duration
		if w := running[id]; w != nil && w.lag != nil {
			lag = w.lag.oldest(now)
		}
		r.obs.ApplyLag(rep.name, lag)
	}
}
