package pipeline

import (
	"context"

	"github.com/trellis-repl/trellis-repl/checkpoint"
)

// releasePage is how many released keys the runner marks dirty at once.
const releasePage = 1000

// releaseKeys marks the keys released since the last reconcile dirty in
// the store, so their transforms re-derive them, then forgets them: a page
// at a time, so that releasing every key of a transform that holds many
// keeps one page in memory (ADR 0029).
func (r *runner) releaseKeys(ctx context.Context) error {
	total := 0
	for {
		ks, err := r.t.cat.Released(ctx, r.t.pool, releasePage)
		if err != nil || len(ks) == 0 {
			if total > 0 {
				r.t.log.Info("released keys marked for re-derive", "keys", total)
				for _, w := range r.workerList() {
					w.notify()
				}
			}
			return err
		}
		byTransform := map[int64][]checkpoint.DirtyKey{}
		for _, k := range ks {
			byTransform[k.TransformID] = append(byTransform[k.TransformID], checkpoint.DirtyKey{Transform: k.TransformID, Table: k.TableOID, Key: k.KeyID})
		}
		for id, keys := range byTransform {
			if err := r.store.MarkDirty(id, keys); err != nil {
				return err
			}
		}
		// A crash before the rows go marks them dirty again at the next
		// start: one more re-derive.
		if err := r.t.cat.ForgetReleased(ctx, r.t.pool, ks); err != nil {
			return err
		}
		total += len(ks)
	}
}
