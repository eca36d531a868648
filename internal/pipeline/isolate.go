package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// unit is one key of one source table: the smallest thing a batch can be
// split into and the thing a data error is charged to (ADR 0013).
type unit struct {
	table uint32
	keyID []byte // checkpoint.EncodeKey(key)
	key   []string
	// sources are the plan sources the key re-derives as (a self-join
	// reads one table as several).
	sources []int
}

// heldID names a held key in the worker's set of them.
func heldID(table uint32, keyID []byte) string {
	return string(binary.BigEndian.AppendUint32(nil, table)) + string(keyID)
}

// keyBatch places units in a Batch's per-source key lists.
func (w *worker) keyBatch(units []unit) [][][]string {
	keys := make([][][]string, len(w.plan.Sources))
	for _, u := range units {
		for _, i := range u.sources {
			keys[i] = append(keys[i], u.key)
		}
	}
	return keys
}

// isolation is one batch being applied with its failing keys held.
type isolation struct {
	w    *worker
	a    *engine.Applier
	xids []uint32
	// applied counts keys whose re-derive committed; held the keys held.
	applied int
	held    []catalog.HeldKey
	// causes are the held keys' errors without their per-row detail.
	causes  []string
	budget  int // keys it may still hold before the fuse trips
	written int64
}

// errFuse ends an isolation whose transform holds as many keys as the
// fuse allows.
var errFuse = errors.New("key fuse tripped")

// applyUnits applies units in one transaction (recording lsn and running
// extra in it) and, when that fails on one key's data, applies the rest
// with the failing keys held (ADR 0013). It returns the rows written.
func (w *worker) applyUnits(ctx context.Context, a *engine.Applier, units []unit, xids []uint32, lsn uint64,
	extra func(context.Context, pgx.Tx) error) (int64, error) {
	n, err := w.applyOnce(ctx, a, units, xids, lsn, extra)
	if err == nil || fault.Classify(err) != fault.Data || len(units) == 0 {
		return n, err
	}
	iso := &isolation{w: w, a: a, xids: xids}
	budget, berr := w.fuseBudget(ctx)
	if berr != nil {
		return 0, berr
	}
	iso.budget = budget
	w.log().Warn("a batch fails on row data; isolating the failing keys", "keys", len(units), "err", err)
	if plant.Active(plant.HoldWholeBatch) {
		err = iso.holdAll(ctx, units, err)
	} else {
		err = iso.bisect(ctx, units, err)
	}
	if err != nil && !errors.Is(err, errFuse) {
		return 0, err
	}
	if errors.Is(err, errFuse) || iso.budget <= 0 {
		return 0, w.trip(ctx, iso)
	}
	// Everything is applied or held: record the batch's position (and
	// its build cursor) on its own.
	if _, err := w.applyOnce(ctx, a, nil, nil, lsn, extra); err != nil {
		return 0, err
	}
	return iso.written, nil
}

// applyOnce is one apply transaction; keys it re-derives that the
// transform held are released in it.
func (w *worker) applyOnce(ctx context.Context, a *engine.Applier, units []unit, xids []uint32, lsn uint64,
	extra func(context.Context, pgx.Tx) error) (int64, error) {
	var unheld []string
	byTable := map[uint32][][]byte{}
	for _, u := range units {
		if id := heldID(u.table, u.keyID); w.held[id] {
			unheld = append(unheld, id)
			byTable[u.table] = append(byTable[u.table], u.keyID)
		}
	}
	b := engine.Batch{Keys: w.keyBatch(units), Xids: xids, AppliedLSN: lsn, Extra: extra}
	if len(byTable) > 0 {
		b.Extra = func(ctx context.Context, tx pgx.Tx) error {
			for table, ids := range byTable {
				if _, err := w.r.t.cat.Unhold(ctx, tx, w.id, table, ids); err != nil {
					return err
				}
			}
			if extra != nil {
				return extra(ctx, tx)
			}
			return nil
		}
	}
	var stale [][][]string
	b.Stale = func(keys [][][]string) { stale = keys }
	n, err := a.Apply(ctx, b)
	if err == nil && stale != nil {
		err = w.markRecheck(stale)
	}
	if err == nil && len(unheld) > 0 {
		for _, id := range unheld {
			delete(w.held, id)
		}
		w.log().Info("held keys applied and released", "keys", len(unheld))
	}
	return n, err
}

// bisect applies units, which failed together with err: halves that apply
// commit, halves that fail split again, a key failing alone is held.
func (iso *isolation) bisect(ctx context.Context, units []unit, err error) error {
	if len(units) == 1 {
		return iso.single(ctx, units[0], err)
	}
	half := len(units) / 2
	for _, part := range [][]unit{units[:half], units[half:]} {
		n, err := iso.w.applyOnce(ctx, iso.a, part, iso.xids, 0, nil)
		if err == nil {
			iso.applied += len(part)
			iso.written += n
			continue
		}
		if fault.Classify(err) != fault.Data {
			return err
		}
		if err := iso.bisect(ctx, part, err); err != nil {
			return err
		}
	}
	return nil
}

// keyRetries are the pauses before each further try of a key that failed
// alone: a few tries, then it is held.
var keyRetries = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}

// single tries a key that failed alone a few more times, then holds it.
func (iso *isolation) single(ctx context.Context, u unit, err error) error {
	attempts := 1
	for _, d := range keyRetries {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		n, rerr := iso.w.applyOnce(ctx, iso.a, []unit{u}, iso.xids, 0, nil)
		attempts++
		if rerr == nil {
			iso.applied++
			iso.written += n
			return nil
		}
		if fault.Classify(rerr) != fault.Data {
			return rerr
		}
		err = rerr
	}
	return iso.hold(ctx, u, err, attempts)
}

// holdAll holds every unit (the planted hold_whole_batch bug).
func (iso *isolation) holdAll(ctx context.Context, units []unit, err error) error {
	for _, u := range units {
		if err := iso.hold(ctx, u, err, 1); err != nil {
			return err
		}
	}
	return nil
}

// hold records u as held for this transform; errFuse once the transform
// holds as many keys as the fuse allows.
func (iso *isolation) hold(ctx context.Context, u unit, err error, attempts int) error {
	w := iso.w
	k := catalog.HeldKey{TransformID: w.id, TableOID: u.table, SourceTable: w.tableName(u.table), KeyID: u.keyID, Key: u.key,
		Error: fault.Message(err), SQLState: fault.SQLState(err), Attempts: attempts, PoisonedAt: time.Now().UTC()}
	if herr := w.r.t.cat.Hold(ctx, w.r.t.pool, k); herr != nil {
		return herr
	}
	id := heldID(u.table, u.keyID)
	if !w.held[id] {
		w.held[id] = true
		iso.budget--
	}
	iso.held = append(iso.held, k)
	iso.causes = append(iso.causes, cause(err))
	w.r.obs.KeyHeld(w.name)
	w.log().Warn("key held: its re-derive keeps failing on row data", "table", k.SourceTable, "key", KeyText(k.Key),
		"attempts", attempts, "sqlstate", k.SQLState, "err", k.Error)
	if iso.budget <= 0 {
		return errFuse
	}
	return nil
}

// fuseBudget is how many more keys the transform may hold before it is
// quarantined (its held count read from the catalog, which any process
// may have changed by a release).
func (w *worker) fuseBudget(ctx context.Context) (int, error) {
	counts, err := w.r.t.cat.HeldCounts(ctx, w.r.t.pool)
	if err != nil {
		return 0, err
	}
	return w.r.t.cfg.QuarantineAfter - int(counts[w.id].Count), nil
}

// trip ends a batch whose held keys reached the fuse: the transform is
// quarantined — or, when keys it applied before fail now with the same
// error, paused as a halt, since every key reproduces it.
func (w *worker) trip(ctx context.Context, iso *isolation) error {
	if len(iso.held) > 0 && sameCause(iso.causes) {
		k := iso.held[0]
		every, err := w.everyKeyFails(ctx, iso.a, iso.causes[0])
		if err != nil {
			return err
		}
		if every {
			return w.halt(ctx, fmt.Sprintf("re-deriving fails for every key with the same error: %s (SQLSTATE %s); fix the definition (or the data every row shares), then RESUME TRANSFORM %s",
				k.Error, k.SQLState, w.resume))
		}
	}
	if err := w.r.t.cat.Quarantine(ctx, w.r.t.pool, w.id); err != nil {
		return err
	}
	w.log().Warn("whole-transform fuse tripped; quarantining", "poisoned_count", w.r.t.cfg.QuarantineAfter)
	return errHalted
}

// everyKeyFails re-derives a few keys the transform holds rows for and
// does not hold: if they fail with the error of the held key too, the
// error is not about the held rows. Re-deriving them again is harmless.
func (w *worker) everyKeyFails(ctx context.Context, a *engine.Applier, heldCause string) (bool, error) {
	build, rebuild := a.Phases()
	for phase := build; phase < rebuild; phase++ {
		src, keys, err := a.Enumerate(ctx, phase, nil, 50)
		if err != nil {
			return false, err
		}
		var probe []unit
		for _, u := range w.unitsOf(src, keys) {
			if !w.held[heldID(u.table, u.keyID)] && len(probe) < 3 {
				probe = append(probe, u)
			}
		}
		if len(probe) == 0 {
			continue
		}
		_, err = w.applyOnce(ctx, a, probe, nil, 0, nil)
		return err != nil && cause(err) == heldCause, nil
	}
	return false, nil
}

func sameCause(causes []string) bool {
	for _, c := range causes[1:] {
		if c != causes[0] {
			return false
		}
	}
	return true
}

// cause is an error's SQLSTATE and message without the detail that names
// the failing row.
func cause(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code + " " + pe.Message
	}
	return err.Error()
}

// KeyText renders a key for logs and the CLI: its one value, or its
// values in parentheses.
func KeyText(key []string) string {
	if len(key) == 1 {
		return key[0]
	}
	return "(" + strings.Join(key, ", ") + ")"
}

// tableName is the qualified name of a source table of the plan.
func (w *worker) tableName(oid uint32) string {
	for _, s := range w.plan.Tables() {
		if s.OID == oid {
			return s.Ident()
		}
	}
	return fmt.Sprint(oid)
}

// loadHeld reads the keys the transform holds into the worker's set.
func (w *worker) loadHeld(ctx context.Context) error {
	ks, err := w.r.t.cat.HeldOf(ctx, w.r.t.pool, w.id)
	if err != nil {
		return err
	}
	w.held = map[string]bool{}
	for _, k := range ks {
		w.held[heldID(k.TableOID, k.KeyID)] = true
	}
	return nil
}
