package trellis

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pipeline"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// PoisonEntry is one source row a transform's apply path gave up on (ADR
// 0013): the transform it is held for (every other transform reading the
// row keeps applying it), the qualified source table, the key as text
// values in key order (and rendered as one string), the error that held
// it with its SQLSTATE, how many tries failed, and when it last failed.
type PoisonEntry struct {
	Transform   string    `json:"transform"`
	SourceTable string    `json:"src_table"`
	Key         []string  `json:"key"`
	KeyText     string    `json:"key_text"`
	Error       string    `json:"last_error"`
	SQLState    string    `json:"sqlstate,omitempty"`
	Attempts    int       `json:"attempts"`
	PoisonedAt  time.Time `json:"poisoned_at"`
}

// HeldPage is one page of a transform's held keys, ordered by (source
// table, key). NextCursor continues after the last entry; a page shorter
// than asked is the last one, and an empty page gives back the cursor it
// was asked with ("" only for an empty first page).
type HeldPage struct {
	Keys       []PoisonEntry `json:"keys"`
	NextCursor string        `json:"next_cursor"`
}

// QuarantineEntry is one transform's quarantine state: its state word
// (quarantined once it held QuarantineAfter keys), since when it is in it,
// and how many keys it holds.
type QuarantineEntry struct {
	Transform string    `json:"transform"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	HeldKeys  int64     `json:"held_keys"`
}

func poisonEntry(k catalog.HeldKey) PoisonEntry {
	return PoisonEntry{Transform: k.Transform, SourceTable: k.SourceTable, Key: k.Key, KeyText: pipeline.KeyText(k.Key),
		Error: k.Error, SQLState: k.SQLState, Attempts: k.Attempts, PoisonedAt: k.PoisonedAt}
}

// PoisonedSince lists the keys held for any transform that were last
// poisoned at or after since (the zero time: all of them), oldest first.
func (t *Trellis) PoisonedSince(ctx context.Context, since time.Time) ([]PoisonEntry, error) {
	out := []PoisonEntry{}
	err := t.bounded(ctx, "PoisonedSince", func(ctx context.Context, tx pgx.Tx) error {
		ks, err := t.cat.HeldSince(ctx, tx, since)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read held keys: %v", err)
		}
		for _, k := range ks {
			out = append(out, poisonEntry(k))
		}
		return nil
	})
	return out, err
}

// heldCursor is the position a HeldPage continues from.
type heldCursor struct {
	Table string `json:"t"`
	Key   []byte `json:"k"`
}

// HeldKeysPage pages through the keys transform holds: up to limit
// (default 100) after cursor ("" for the first page).
func (t *Trellis) HeldKeysPage(ctx context.Context, transform string, limit int, cursor string) (HeldPage, error) {
	var page HeldPage
	err := t.bounded(ctx, "HeldKeysPage", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		page, err = t.heldKeysPage(ctx, tx, transform, limit, cursor)
		return err
	})
	return page, err
}

// heldKeysPage is HeldKeysPage in the call's transaction.
func (t *Trellis) heldKeysPage(ctx context.Context, tx pgx.Tx, transform string, limit int, cursor string) (HeldPage, error) {
	tr, err := t.findTransform(ctx, tx, transform)
	if err != nil {
		return HeldPage{}, err
	}
	if limit <= 0 {
		limit = 100
	}
	var after heldCursor
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err == nil {
			err = json.Unmarshal(raw, &after)
		}
		if err != nil {
			return HeldPage{}, terr.New(terr.Validation, "cursor %q is not one HeldKeysPage gave; pass the next_cursor of the previous page, or none for the first", cursor)
		}
	}
	ks, err := t.cat.HeldPage(ctx, tx, tr.ID, after.Table, after.Key, limit)
	if err != nil {
		return HeldPage{}, terr.Wrap(terr.Unavailable, err, "read held keys: %v", err)
	}
	page := HeldPage{Keys: []PoisonEntry{}, NextCursor: cursor}
	for _, k := range ks {
		page.Keys = append(page.Keys, poisonEntry(k))
	}
	if len(ks) > 0 {
		last := ks[len(ks)-1]
		raw, _ := json.Marshal(heldCursor{Table: last.SourceTable, Key: last.KeyID})
		page.NextCursor = base64.RawURLEncoding.EncodeToString(raw)
	}
	return page, nil
}

// ReleaseKey releases one key transform holds for source table (bare or
// schema-qualified): it is re-derived from the current row, and held again
// if it still fails. key is the key's values as text, in key order.
func (t *Trellis) ReleaseKey(ctx context.Context, transform, table string, key []string) error {
	if err := t.writable("ReleaseKey"); err != nil {
		return err
	}
	return t.bounded(ctx, "ReleaseKey", func(ctx context.Context, tx pgx.Tx) error {
		tr, err := t.findTransform(ctx, tx, transform)
		if err != nil {
			return err
		}
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			return terr.Wrap(terr.Internal, err, "%v", err)
		}
		src, ok := sourceNamed(p, table)
		if !ok {
			return terr.New(terr.NotFound, "transform %q reads no table %q; give one of its sources: %s", tr.Name, table, tr.SourceTable)
		}
		if len(key) != len(src.Key) {
			return terr.New(terr.Validation, "a key of %s has %d columns, %d given; give one value per key column", src.Ident(), len(src.Key), len(key))
		}
		n, err := t.cat.Release(ctx, tx, tr.ID, src.OID, checkpoint.EncodeKey(key))
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		if n == 0 {
			return terr.New(terr.NotFound, "transform %q holds no key %s of %s; `trellis-repl held %s` lists the keys it holds", tr.Name, pipeline.KeyText(key), src.Ident(), tr.Name)
		}
		return t.notifyRunner(ctx, tx)
	})
}

// ReleaseAll releases every key transform holds and returns how many.
func (t *Trellis) ReleaseAll(ctx context.Context, transform string) (int64, error) {
	if err := t.writable("ReleaseAll"); err != nil {
		return 0, err
	}
	var n int64
	err := t.bounded(ctx, "ReleaseAll", func(ctx context.Context, tx pgx.Tx) error {
		tr, err := t.findTransform(ctx, tx, transform)
		if err != nil {
			return err
		}
		if n, err = t.cat.Release(ctx, tx, tr.ID, 0, nil); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		return t.notifyRunner(ctx, tx)
	})
	return n, err
}

// Quarantined lists every quarantined transform.
func (t *Trellis) Quarantined(ctx context.Context) ([]QuarantineEntry, error) {
	out := []QuarantineEntry{}
	err := t.bounded(ctx, "Quarantined", func(ctx context.Context, tx pgx.Tx) error {
		ts, err := t.cat.List(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		held, err := t.cat.HeldCounts(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read held keys: %v", err)
		}
		for _, tr := range ts {
			if tr.State == catalog.StateQuarantined {
				out = append(out, QuarantineEntry{Transform: tr.Name, State: tr.State, Since: tr.StateChangedAt, HeldKeys: held[tr.ID].Count})
			}
		}
		return nil
	})
	return out, err
}

// QuarantineStatus reports one transform's quarantine state (its state
// word whatever it is, and the keys it holds).
func (t *Trellis) QuarantineStatus(ctx context.Context, transform string) (QuarantineEntry, error) {
	var e QuarantineEntry
	err := t.bounded(ctx, "QuarantineStatus", func(ctx context.Context, tx pgx.Tx) error {
		tr, err := t.findTransform(ctx, tx, transform)
		if err != nil {
			return err
		}
		held, err := t.cat.HeldCounts(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read held keys: %v", err)
		}
		e = QuarantineEntry{Transform: tr.Name, State: tr.State, Since: tr.StateChangedAt, HeldKeys: held[tr.ID].Count}
		return nil
	})
	return e, err
}

// findTransform finds a transform by name (or schema.name).
func (t *Trellis) findTransform(ctx context.Context, q catalog.Querier, name string) (*catalog.Transform, error) {
	ts, err := t.cat.List(ctx, q)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	for _, tr := range ts {
		if tr.Name == name || tr.Schema+"."+tr.Name == name {
			return tr, nil
		}
	}
	return nil, terr.New(terr.NotFound, "transform %q does not exist; `trellis-repl status` lists the transforms", name)
}

// sourceNamed finds the source table of p named table: bare, qualified,
// or quoted as Ident prints it.
func sourceNamed(p *engine.Plan, table string) (engine.Source, bool) {
	for _, s := range p.Tables() {
		if table == s.Name || table == s.Schema+"."+s.Name || table == s.Ident() {
			return s, true
		}
	}
	return engine.Source{}, false
}

// notifyRunner wakes the runner to read the catalog again.
func (t *Trellis) notifyRunner(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, t.cat.NotifyChannel()); err != nil {
		return terr.Wrap(terr.Unavailable, err, "notify the runner: %v", err)
	}
	return nil
}
