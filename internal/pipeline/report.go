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
		// Its series may have been removed with a namesake's: the next
		// heartbeat reports its backlog afresh.
		delete(r.backlogs, tr.ID)
		if tr.State != catalog.StateBackfilling && tr.State != catalog.StateWaiting {
			r.obs.BuildRowsRemaining(tr.Name, 0)
		}
		r.states[tr.ID] = reported{name: tr.Name, state: tr.State}
	}
}

// backlog is what the observer was last told of a transform's backlog.
type backlog struct {
	name           string
	waiting, held  int64
	lag            time.Duration
	waitingOK, set bool
}

// reportBacklog reports every transform's keys waiting (pending, as
// heartbeat read them), held keys and apply lag: the age of its oldest
// change not applied when a worker runs it (ws), 0 otherwise (a paused transform applies nothing; its state
// series says so). Each figure is reported when it differs from what the
// observer was last told (r.backlogs): an idle instance of a thousand
// transforms sets no gauge every heartbeat.
func (r *runner) reportBacklog(ctx context.Context, ws []*worker, pending map[int64]int64) {
	now := time.Now().UnixNano()
	running := make(map[int64]*worker, len(ws))
	for _, w := range ws {
		running[w.id] = w
	}
	held, err := r.t.cat.HeldCounts(ctx, r.t.pool)
	if err != nil {
		return
	}
	next := make(map[int64]backlog, len(r.states))
	for id, rep := range r.states {
		last := r.backlogs[id]
		fresh := !last.set || last.name != rep.name
		b := backlog{name: rep.name, set: true, held: held[id].Count}
		if n, ok := pending[id]; ok {
			b.waiting, b.waitingOK = n, true
			if fresh || !last.waitingOK || last.waiting != n {
				r.obs.KeysWaiting(rep.name, n)
			}
		} else {
			b.waiting, b.waitingOK = last.waiting, last.waitingOK
		}
		if fresh || last.held != b.held {
			r.obs.HeldKeys(rep.name, b.held)
		}
		if w := running[id]; w != nil && w.lag != nil {
			b.lag = w.lag.oldest(now)
		}
		if fresh || last.lag != b.lag {
			r.obs.ApplyLag(rep.name, b.lag)
		}
		next[id] = b
	}
	r.backlogs = next
}
