package trellis

// What the runner reports to the observer from the catalog and the store
// (the worker reports its own events): transform states, whoever changed
// them (a PAUSE from another process, a system pause), backlogs and held
// keys. Called from reconcile and the heartbeat, which share a goroutine.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
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

// buildEstimate is a build's source rows per phase, from the planner's
// estimates, and the keys this session has built of the current phase.
type buildEstimate struct {
	rows  []int64
	phase int
	done  int64
}

// remaining is the estimate of rows still to read from phase on, after
// done of phase (never below 0).
func (b *buildEstimate) remaining(phase int, done int64) int64 {
	if phase != b.phase {
		b.phase, b.done = phase, 0
	}
	b.done += done
	var n int64
	for i := phase; i < len(b.rows); i++ {
		n += b.rows[i]
	}
	return max(n-b.done, 0)
}

// estimateBuild estimates the rows each build phase of a reads up to last:
// the planner's row estimate of the source the phase walks (which counts
// a table never analyzed from its size).
func (w *worker) estimateBuild(ctx context.Context, a *engine.Applier, last int) (*buildEstimate, error) {
	est := &buildEstimate{rows: make([]int64, last)}
	bySource := map[int]int64{}
	for i := 0; i < last && i < len(a.Stmts.Enum); i++ {
		src := a.Stmts.Enum[i].Source
		n, ok := bySource[src]
		if !ok {
			var err error
			if n, err = planRows(ctx, w.r.t.pool, w.plan.Sources[src].Schema, w.plan.Sources[src].Name); err != nil {
				return nil, err
			}
			bySource[src] = n
		}
		est.rows[i] = n
	}
	return est, nil
}

// planRows is the planner's estimate of a table's rows.
func planRows(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, name string) (int64, error) {
	var out []byte
	if err := q.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT 1 FROM "+pgx.Identifier{schema, name}.Sanitize()).Scan(&out); err != nil {
		return 0, fmt.Errorf("estimate the rows of %s.%s: %w", schema, name, err)
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plan); err != nil || len(plan) == 0 {
		return 0, fmt.Errorf("estimate the rows of %s.%s: unreadable plan %q", schema, name, out)
	}
	return int64(plan[0].Plan.Rows), nil
}
