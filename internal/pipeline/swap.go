package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/define"
)

// Redefinition: CREATE OR REPLACE TRANSFORM of an existing transform
// records the new definition as a transform of its own that builds into a
// shadow table beside the old target (engine/redefine.go). When it is live
// its worker stops the old one and swaps the tables in one transaction;
// until then the old target keeps serving and keeps being maintained.

// errSwapped ends a worker's session after its redefinition took the old
// transform's place: the session starts again on the promoted plan.
var errSwapped = errors.New("redefinition swapped in")

// swap replaces the transform a live redefinition replaces: the old
// worker is stopped, then tables and catalog rows are swapped in one
// transaction (engine.Swap). w is the redefinition's worker.
func (r *runner) swap(ctx context.Context, w *worker, tr *catalog.Transform) error {
	old, err := r.t.cat.GetByID(ctx, r.t.pool, tr.Replaces)
	if err != nil {
		return err
	}
	if old == nil {
		return fmt.Errorf("transform %s replaces transform %d, which is gone", tr.Name, tr.Replaces)
	}
	all, err := r.t.cat.List(ctx, r.t.pool)
	if err != nil {
		return err
	}
	// The old transform's levels (ADR 0018) go with it: the new
	// definition reads levels of its own.
	levels := define.LevelsOf(all, old.ID)
	for _, o := range append([]*catalog.Transform{old}, levels...) {
		r.mu.Lock()
		ow := r.workers[o.ID]
		delete(r.workers, o.ID)
		r.mu.Unlock()
		if ow != nil {
			ow.stop()
			ow.wait()
			r.intake.removeRoute(o.ID)
		}
	}
	oldPlan, err := engine.Decode(old.Plan)
	if err != nil {
		return err
	}
	newPlan, err := engine.Decode(tr.Plan)
	if err != nil {
		return err
	}
	tx, err := r.t.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	notes, err := engine.Swap(ctx, tx, oldPlan, newPlan)
	if err != nil {
		return fmt.Errorf("swap %s into %s: %w", tr.Name, old.Name, err)
	}
	if err := define.DropLevelsInSwap(ctx, tx, r.t.cat, levels); err != nil {
		return err
	}
	raw, err := newPlan.Encode()
	if err != nil {
		return err
	}
	if err := r.t.cat.Promote(ctx, tx, tr.ID, old.ID, old.Name, raw, notes); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, r.t.cat.NotifyChannel()); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit the swap of %s: %w", old.Name, err)
	}
	for _, o := range append([]*catalog.Transform{old}, levels...) {
		if err := r.store.DropTransform(o.ID); err != nil {
			return err
		}
	}
	w.plan, w.name = newPlan, old.Name
	r.t.progressed.fire()
	w.log().Info("redefinition swapped in", "not_carried", notes)
	return errSwapped
}
