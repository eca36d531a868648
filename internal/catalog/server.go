package catalog

// The server an instance ran on (ADR 0039): its identity as the runner
// recorded it at its last start (instance.server), a transform's disruption
// (transforms.disruption) kept until it is live again, and the rows a copy
// of the database into another cluster or database must rebind (sources
// by OID, held keys, recorded partition trees).

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Server identifies the PostgreSQL server and database an instance runs
// on: what travels with a database (its contents) is compared with it at
// every start.
type Server struct {
	// SystemID is pg_control_system().system_identifier: new for every
	// initdb, kept by a physical standby and a restore of a base backup.
	SystemID string `json:"system_identifier"`
	// Timeline is the timeline WAL is inserted on: a promotion (of a
	// standby, or at the end of a point-in-time recovery) starts a new one.
	Timeline uint32 `json:"timeline"`
	// DatabaseOID and Database are the database's OID and name.
	DatabaseOID uint32 `json:"database_oid"`
	Database    string `json:"database"`
	// Version is server_version_num.
	Version int `json:"server_version_num"`
	// InsertLSN is the WAL insert position when it was read, as X/Y text.
	InsertLSN string `json:"insert_lsn"`
	// RecordedAt is when it was recorded (zero when only read).
	RecordedAt time.Time `json:"recorded_at"`
}

// Insert is InsertLSN as a number (0 when unset or unreadable).
func (s Server) Insert() uint64 {
	v, err := ParseLSN(s.InsertLSN)
	if err != nil {
		return 0
	}
	return v
}

// Disruption is why a transform's target may disagree with its query:
// continuity was lost (a failover, a restore, a copy, a lost slot or
// store). It stays set through the pause and the rebuild that repairs it,
// and is cleared when the transform is live again.
type Disruption struct {
	Reason     string    `json:"reason"`
	DetectedAt time.Time `json:"detected_at"`
}

// RecordServer records the server the runner started on.
func (c Catalog) RecordServer(ctx context.Context, q Querier, s Server) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode the server identity: %w", err)
	}
	if _, err := q.Exec(ctx, `UPDATE `+c.T("instance")+` SET server = $1::jsonb WHERE id = 1`, b); err != nil {
		return fmt.Errorf("record the server identity: %w", err)
	}
	return nil
}

// decodeServer reads instance.server's JSON (nil when absent).
func decodeServer(raw []byte) (*Server, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	s := new(Server)
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("decode the instance's server identity: %w", err)
	}
	return s, nil
}

// SetDisruption records (or with nil clears) why a transform's target may
// disagree with its query.
func (c Catalog) SetDisruption(ctx context.Context, q Querier, id int64, d *Disruption) error {
	if d == nil {
		return c.setJSON(ctx, q, id, "disruption", nil)
	}
	return c.setJSON(ctx, q, id, "disruption", d)
}

// Repair asks for the rebuild a RESUME asks for (waiting_to_backfill with
// rebuild, failures cleared, the build's progress reset), recording the
// disruption it repairs. Unlike Resume it keeps the keys the transform
// holds: nothing was fixed about them, and the rebuild re-derives them
// (releasing each that applies).
func (c Catalog) Repair(ctx context.Context, q Querier, id int64, d Disruption) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode the disruption: %w", err)
	}
	_, err = q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET state = $2, paused_by = NULL, rebuild = true,
		build_phase = 0, build_cursor = NULL, capture_failure = NULL, backfill_failure = NULL,
		drain_failure = NULL, state_changed_at = now(), disruption = $3::jsonb,
		build_rows_done = 0, build_rows_total = NULL, build_started_at = NULL, build_finished_at = NULL WHERE id = $1`,
		id, StateWaiting, b)
	if err != nil {
		return fmt.Errorf("repair transform %d: %w", id, err)
	}
	return nil
}

// ResetAppliedPast resets to 0/0 every applied position past lsn (all of
// them when lsn is 0): positions a server's WAL never reached belong to
// another history (a future a restore discarded, another cluster's WAL),
// and a convergence token must not be judged against them.
func (c Catalog) ResetAppliedPast(ctx context.Context, q Querier, lsn uint64) (int64, error) {
	tag, err := q.Exec(ctx, `UPDATE `+c.T("progress")+` SET applied_lsn = '0/0' WHERE applied_lsn > $1::pg_lsn`, FormatLSN(lsn))
	if err != nil {
		return 0, fmt.Errorf("reset applied positions past %s: %w", FormatLSN(lsn), err)
	}
	return tag.RowsAffected(), nil
}

// Rebind records a transform's plan after its sources were found again by
// name in a copy of the database (new OIDs): the plan, its first source's
// OID, and its held keys' tables (moved[old] = new).
func (c Catalog) Rebind(ctx context.Context, q Querier, id int64, plan json.RawMessage, sourceOID uint32, moved map[uint32]uint32) error {
	if _, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET plan = $2, source_oid = $3 WHERE id = $1`, id, []byte(plan), sourceOID); err != nil {
		return fmt.Errorf("rebind transform %d: %w", id, err)
	}
	if len(moved) == 0 {
		return nil
	}
	// Two statements, not one UPDATE: a swap of two tables' OIDs would
	// meet its own rows in the primary key midway.
	olds := make([]uint32, 0, len(moved))
	for o := range moved {
		olds = append(olds, o)
	}
	rows, err := q.Query(ctx, `DELETE FROM `+c.T("held_keys")+` WHERE transform_id = $1 AND table_oid = ANY($2)
		RETURNING table_oid, source_table, key_id, key, error, sqlstate, attempts, poisoned_at, released`, id, olds)
	if err != nil {
		return fmt.Errorf("rebind the held keys of transform %d: %w", id, err)
	}
	type held struct {
		oid            uint32
		table, errText string
		keyID          []byte
		key            []string
		state          *string
		attempts       int
		poisoned       time.Time
		released       bool
	}
	var hs []held
	for rows.Next() {
		var h held
		if err := rows.Scan(&h.oid, &h.table, &h.keyID, &h.key, &h.errText, &h.state, &h.attempts, &h.poisoned, &h.released); err != nil {
			rows.Close()
			return fmt.Errorf("rebind the held keys of transform %d: %w", id, err)
		}
		hs = append(hs, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("rebind the held keys of transform %d: %w", id, err)
	}
	for _, h := range hs {
		if _, err := q.Exec(ctx, `INSERT INTO `+c.T("held_keys")+` (transform_id, table_oid, source_table, key_id, key, error, sqlstate, attempts, poisoned_at, released)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, id, moved[h.oid], h.table, h.keyID, h.key, h.errText, h.state, h.attempts, h.poisoned, h.released); err != nil {
			return fmt.Errorf("rebind the held keys of transform %d: %w", id, err)
		}
	}
	return nil
}

// ForgetPartitions deletes every recorded partition tree and queued
// correction: after a copy of the database their OIDs name other tables
// (or none). Trees are recorded again when capture is installed; the
// rebuild a copy needs covers what corrections would have.
func (c Catalog) ForgetPartitions(ctx context.Context, q Querier) error {
	for _, t := range []string{"corrections", "partition_nodes"} {
		if _, err := q.Exec(ctx, `DELETE FROM `+c.T(t)); err != nil {
			return fmt.Errorf("forget the partitions recorded in %s: %w", c.T(t), err)
		}
	}
	return nil
}

// scanDisruption decodes transforms.disruption (nil when absent).
func scanDisruption(raw []byte, name string) (*Disruption, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	d := new(Disruption)
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, fmt.Errorf("decode disruption of %s: %w", name, err)
	}
	return d, nil
}
