package catalog

import (
	"context"
	"fmt"
	"time"
)

// HeldKey is one key the apply path gave up on for one transform (ADR
// 0013): its source table, the key as text values in key order, its
// encoding in the checkpoint store (KeyID), and the error that held it.
type HeldKey struct {
	TransformID int64
	Transform   string // the transform's name (read only)
	TableOID    uint32
	SourceTable string // qualified, quoted
	KeyID       []byte
	Key         []string
	Error       string
	SQLState    string
	Attempts    int
	PoisonedAt  time.Time
}

const heldCols = `h.transform_id, t.name, h.table_oid, h.source_table, h.key_id, h.key, h.error,
	coalesce(h.sqlstate, ''), h.attempts, h.poisoned_at`

// Hold records k as held (again: attempts add up, poisoned_at is the
// latest time it failed, a release pending on it is withdrawn).
func (c Catalog) Hold(ctx context.Context, q Querier, k HeldKey) error {
	var state *string
	if k.SQLState != "" {
		state = &k.SQLState
	}
	_, err := q.Exec(ctx, `INSERT INTO `+c.T("held_keys")+` AS h (transform_id, table_oid, source_table, key_id, key, error, sqlstate, attempts, poisoned_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (transform_id, table_oid, key_id) DO UPDATE SET error = excluded.error, sqlstate = excluded.sqlstate,
			attempts = h.attempts + excluded.attempts, poisoned_at = excluded.poisoned_at, released = false`,
		k.TransformID, k.TableOID, k.SourceTable, k.KeyID, k.Key, k.Error, state, k.Attempts, k.PoisonedAt)
	if err != nil {
		return fmt.Errorf("hold key %v of %s: %w", k.Key, k.SourceTable, err)
	}
	return nil
}

// Unhold deletes the held rows of keys that applied (keyIDs of table).
func (c Catalog) Unhold(ctx context.Context, q Querier, id int64, table uint32, keyIDs [][]byte) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM `+c.T("held_keys")+` WHERE transform_id = $1 AND table_oid = $2 AND key_id = ANY($3)`, id, table, keyIDs)
	if err != nil {
		return 0, fmt.Errorf("clear held keys of transform %d: %w", id, err)
	}
	return tag.RowsAffected(), nil
}

// HeldCount is how many keys a transform holds and when the one held
// longest was last poisoned.
type HeldCount struct {
	Count  int64
	Oldest time.Time
}

// HeldCounts counts the held (not released) keys of every transform.
func (c Catalog) HeldCounts(ctx context.Context, q Querier) (map[int64]HeldCount, error) {
	rows, err := q.Query(ctx, `SELECT transform_id, count(*), min(poisoned_at) FROM `+c.T("held_keys")+` WHERE NOT released GROUP BY transform_id`)
	if err != nil {
		return nil, fmt.Errorf("count held keys: %w", err)
	}
	defer rows.Close()
	out := map[int64]HeldCount{}
	for rows.Next() {
		var id int64
		var h HeldCount
		if err := rows.Scan(&id, &h.Count, &h.Oldest); err != nil {
			return nil, err
		}
		out[id] = h
	}
	return out, rows.Err()
}

func (c Catalog) scanHeld(ctx context.Context, q Querier, where string, args ...any) ([]HeldKey, error) {
	rows, err := q.Query(ctx, `SELECT `+heldCols+` FROM `+c.T("held_keys")+` h JOIN `+c.T("transforms")+
		` t ON t.id = h.transform_id WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read held keys: %w", err)
	}
	defer rows.Close()
	var out []HeldKey
	for rows.Next() {
		var k HeldKey
		if err := rows.Scan(&k.TransformID, &k.Transform, &k.TableOID, &k.SourceTable, &k.KeyID, &k.Key, &k.Error,
			&k.SQLState, &k.Attempts, &k.PoisonedAt); err != nil {
			return nil, fmt.Errorf("read held key: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// HeldSince lists the keys held (not released) for any transform, last
// poisoned at or after since, oldest first.
func (c Catalog) HeldSince(ctx context.Context, q Querier, since time.Time) ([]HeldKey, error) {
	return c.scanHeld(ctx, q, `NOT h.released AND h.poisoned_at >= $1 ORDER BY h.poisoned_at, h.transform_id, h.source_table, h.key_id`, since)
}

// HeldOf lists every key a transform holds, released or not.
func (c Catalog) HeldOf(ctx context.Context, q Querier, id int64) ([]HeldKey, error) {
	return c.scanHeld(ctx, q, `h.transform_id = $1 ORDER BY h.table_oid, h.key_id`, id)
}

// HeldPage lists up to limit keys a transform holds, ordered by (source
// table, key), after the position (afterTable, afterKey) — both zero for
// the first page.
func (c Catalog) HeldPage(ctx context.Context, q Querier, id int64, afterTable string, afterKey []byte, limit int) ([]HeldKey, error) {
	return c.scanHeld(ctx, q, `h.transform_id = $1 AND NOT h.released AND (h.source_table, h.key_id) > ($2, $3::bytea)
		ORDER BY h.source_table, h.key_id LIMIT $4`, id, afterTable, afterKey, limit)
}

// Release marks held keys released: one (table, keyID given) or all of the
// transform's (table 0). It returns how many it marked.
func (c Catalog) Release(ctx context.Context, q Querier, id int64, table uint32, keyID []byte) (int64, error) {
	sql := `UPDATE ` + c.T("held_keys") + ` SET released = true WHERE transform_id = $1 AND NOT released`
	args := []any{id}
	if table != 0 {
		sql += ` AND table_oid = $2 AND key_id = $3`
		args = append(args, table, keyID)
	}
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("release held keys of transform %d: %w", id, err)
	}
	return tag.RowsAffected(), nil
}

// Requeue records keys for the runner to re-derive at its next
// reconcile, as released rows (releaseKeys marks released keys dirty and
// forgets them): the hand-off of a process that re-derived keys with no
// runner attached and learnt they must be re-derived again (ADR 0043). A
// key held already is released: it just applied. Error says why.
func (c Catalog) Requeue(ctx context.Context, q Querier, ks []HeldKey) error {
	for _, k := range ks {
		_, err := q.Exec(ctx, `INSERT INTO `+c.T("held_keys")+` AS h (transform_id, table_oid, source_table, key_id, key, error, attempts, poisoned_at, released)
			VALUES ($1, $2, $3, $4, $5, $6, 0, $7, true)
			ON CONFLICT (transform_id, table_oid, key_id) DO UPDATE SET released = true`,
			k.TransformID, k.TableOID, k.SourceTable, k.KeyID, k.Key, k.Error, k.PoisonedAt)
		if err != nil {
			return fmt.Errorf("queue key %v of %s to re-derive: %w", k.Key, k.SourceTable, err)
		}
	}
	return nil
}

// Released lists up to limit released keys the runner has not marked
// dirty yet (the runner pages through them: a release of every key of a
// transform holding many is never read at once).
func (c Catalog) Released(ctx context.Context, q Querier, limit int) ([]HeldKey, error) {
	return c.scanHeld(ctx, q, `h.released ORDER BY h.transform_id, h.table_oid, h.key_id LIMIT $1`, limit)
}

// ForgetReleased deletes released keys once the runner marked them dirty.
func (c Catalog) ForgetReleased(ctx context.Context, q Querier, ks []HeldKey) error {
	if len(ks) == 0 {
		return nil
	}
	ids, tables, keys := make([]int64, len(ks)), make([]int64, len(ks)), make([][]byte, len(ks))
	for i, k := range ks {
		ids[i], tables[i], keys[i] = k.TransformID, int64(k.TableOID), k.KeyID
	}
	_, err := q.Exec(ctx, `DELETE FROM `+c.T("held_keys")+` h USING unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS r(transform_id, table_oid, key_id)
		WHERE h.transform_id = r.transform_id AND h.table_oid = r.table_oid AND h.key_id = r.key_id AND h.released`, ids, tables, keys)
	if err != nil {
		return fmt.Errorf("forget %d released keys: %w", len(ks), err)
	}
	return nil
}
