package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-repl/trellis-repl/checkpoint"
)

// Keys re-derived again (ADR 0043): an owner's apply reports the rows
// whose subquery answers its dependency levels did not store yet in the
// apply's snapshot. Their keys go back to the transform's dirty set before
// the batch's Done (a key written again since Take stays), so a crash
// before they are re-derived repeats the batch instead of losing them.

// recheckFirst and recheckMost bound the pause before the next batch
// while only rechecked keys wait: a level is usually a batch behind, and
// one that cannot converge (its keys held) is asked twice a second.
const (
	recheckFirst = 2 * time.Millisecond
	recheckMost  = 500 * time.Millisecond
)

// markRecheck durably marks keys (per plan source) dirty again.
func (w *worker) markRecheck(keys [][][]string) error {
	var dirty []checkpoint.DirtyKey
	distinct := map[string]bool{}
	for i, ks := range keys {
		if i >= len(w.plan.Sources) {
			break
		}
		for _, k := range ks {
			d := checkpoint.DirtyKey{Transform: w.id, Table: w.plan.Sources[i].OID, Key: checkpoint.EncodeKey(k)}
			dirty = append(dirty, d)
			distinct[heldID(d.Table, d.Key)] = true
		}
	}
	if err := w.r.store.MarkDirty(w.id, dirty); err != nil {
		return fmt.Errorf("mark %d keys to re-derive again: %w", len(dirty), err)
	}
	w.recheck += len(distinct)
	return nil
}

// pauseForRecheck waits before the next batch when the last one marked
// keys to re-derive again and nothing else waits, longer each time in a
// row, so that the dependency level gets the time to catch up. Keys of
// other rows are never held up by a level that stays behind: while any
// waits there is no pause (the store's Take goes round the key space, so
// the marked keys come back once per round, beside work that is due
// anyway), and a change arriving during a pause ends it.
func (w *worker) pauseForRecheck(ctx context.Context) error {
	if w.recheck == 0 {
		w.recheckWait = 0
		return nil
	}
	n := w.recheck
	w.recheck = 0
	pending, err := w.r.store.Pending(w.id)
	if err != nil {
		return err
	}
	if pending > int64(n) {
		// Other keys wait: they go first, and the marked ones come back
		// with them once per round.
		return nil
	}
	switch {
	case w.recheckWait == 0:
		w.recheckWait = recheckFirst
	case w.recheckWait < recheckMost:
		w.recheckWait = min(2*w.recheckWait, recheckMost)
	}
	w.r.t.log.Debug("a dependency level is behind; re-deriving its rows again", "transform", w.name, "keys", n, "after", w.recheckWait)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.wake:
		// A change arrived (perhaps the level's own write): it goes now.
		return nil
	case <-time.After(w.recheckWait):
		return nil
	}
}
