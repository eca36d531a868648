// Package replication manages the logical-replication publication and slot
// and runs the streaming connection that feeds pgoutput messages to a
// decode.Decoder, sending standby status updates on its own timer
// (docs/architecture.md §2).
package replication

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Querier is what the management functions need from a normal (not
// replication) connection: *pgx.Conn, *pgxpool.Pool and pgx.Tx all fit.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// publishActions is what the publication must publish: every row change and
// TRUNCATE, or changes are silently missing from the stream.
const publishActions = "insert, update, delete, truncate"

// EnsurePublication creates the publication if it is missing (with no
// tables, publishing every action, partition changes reported under the
// root) and repairs the options of an existing one. It refuses a FOR ALL
// TABLES publication, which would publish Trellis's own tables. created
// reports whether this call created it; create the publication before the
// slot (pgoutput resolves publications with the slot's historic snapshot).
func EnsurePublication(ctx context.Context, q Querier, name string) (created bool, err error) {
	ident := pgx.Identifier{name}.Sanitize()
	var (
		exists, allTables, viaRoot, ins, upd, del, trunc bool
		version                                          int
	)
	err = q.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int, p.oid IS NOT NULL,
		       coalesce(p.puballtables, false), coalesce(p.pubviaroot, false),
		       coalesce(p.pubinsert, false), coalesce(p.pubupdate, false),
		       coalesce(p.pubdelete, false), coalesce(p.pubtruncate, false)
		FROM (SELECT 1) AS one
		LEFT JOIN pg_publication p ON p.pubname = $1`, name).
		Scan(&version, &exists, &allTables, &viaRoot, &ins, &upd, &del, &trunc)
	if err != nil {
		return false, fmt.Errorf("replication: look up publication %s: %w", ident, err)
	}
	if version < 130000 {
		return false, terr.New(terr.Unavailable, "PostgreSQL %d is too old for logical capture: version 13 or later is required", version/10000)
	}
	opts := fmt.Sprintf("publish = '%s', publish_via_partition_root = true", publishActions)
	if !exists {
		_, err = q.Exec(ctx, "CREATE PUBLICATION "+ident+" WITH ("+opts+")")
		if err == nil {
			return true, nil
		}
		if pgCode(err) != "42710" { // duplicate_object: created concurrently
			return false, fmt.Errorf("replication: create publication %s: %w", ident, err)
		}
		return EnsurePublication(ctx, q, name)
	}
	if allTables {
		return false, terr.New(terr.Conflict, "publication %s is FOR ALL TABLES, which would publish Trellis's own tables; drop it or configure another publication name", ident)
	}
	if !(viaRoot && ins && upd && del && trunc) {
		if _, err := q.Exec(ctx, "ALTER PUBLICATION "+ident+" SET ("+opts+")"); err != nil {
			return false, fmt.Errorf("replication: repair options of publication %s: %w", ident, err)
		}
	}
	return false, nil
}

// AddTables adds tables to the publication with ALTER PUBLICATION … ADD
// TABLE, skipping those already in it. Tables that do not exist are
// refused (nothing is added then). The caller must have checked that every
// table has a usable replica identity: adding one without makes the
// application's own UPDATEs and DELETEs fail.
func AddTables(ctx context.Context, q Querier, pub string, tables []pgx.Identifier) error {
	return alterMembership(ctx, q, pub, tables, true)
}

// DropTables removes tables from the publication with ALTER PUBLICATION …
// DROP TABLE, skipping those not in it and those that no longer exist.
func DropTables(ctx context.Context, q Querier, pub string, tables []pgx.Identifier) error {
	return alterMembership(ctx, q, pub, tables, false)
}

func alterMembership(ctx context.Context, q Querier, pub string, tables []pgx.Identifier, add bool) error {
	if len(tables) == 0 {
		return nil
	}
	ident := pgx.Identifier{pub}.Sanitize()
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Sanitize()
	}
	// A concurrent ADD/DROP of the same table makes the statement fail
	// (42710 already a member / 42704 not a member); recomputing the
	// difference and trying again settles it.
	for attempt := 0; ; attempt++ {
		rows, err := q.Query(ctx, `
			SELECT t.name, c.oid IS NOT NULL,
			       EXISTS (SELECT 1 FROM pg_publication_rel pr
			               JOIN pg_publication p ON p.oid = pr.prpubid
			               WHERE p.pubname = $1 AND pr.prrelid = c.oid),
			       EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)
			FROM unnest($2::text[]) WITH ORDINALITY AS t(name, i)
			LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
			ORDER BY t.i`, pub, names)
		if err != nil {
			return fmt.Errorf("replication: look up tables of publication %s: %w", ident, err)
		}
		var change []string
		var missing []string
		pubExists := true
		for rows.Next() {
			var name string
			var found, member bool
			if err := rows.Scan(&name, &found, &member, &pubExists); err != nil {
				rows.Close()
				return fmt.Errorf("replication: look up tables of publication %s: %w", ident, err)
			}
			switch {
			case !found:
				missing = append(missing, name)
			case member != add:
				// ONLY: an inheritance parent's children are not sources
				// (a transform reads FROM ONLY parent); published, their
				// writes would fail without a replica identity. A
				// partitioned table still publishes its partitions.
				change = append(change, "ONLY "+name)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("replication: look up tables of publication %s: %w", ident, err)
		}
		if !pubExists {
			return terr.New(terr.NotFound, "publication %s does not exist; create it first", ident)
		}
		if add && len(missing) > 0 {
			return terr.New(terr.NotFound, "cannot publish %s: no such table", strings.Join(missing, ", "))
		}
		if len(change) == 0 {
			return nil
		}
		verb := "DROP"
		if add {
			verb = "ADD"
		}
		_, err = q.Exec(ctx, "ALTER PUBLICATION "+ident+" "+verb+" TABLE "+strings.Join(change, ", "))
		if err == nil {
			return nil
		}
		if c := pgCode(err); attempt < 3 && (c == "42710" || c == "42704") {
			continue
		}
		return fmt.Errorf("replication: ALTER PUBLICATION %s %s TABLE %s: %w", ident, verb, strings.Join(change, ", "), err)
	}
}

// PublishedTables lists the tables that are members of the publication
// themselves (not partitions published through their root), sorted by
// schema and name.
func PublishedTables(ctx context.Context, q Querier, pub string) ([]pgx.Identifier, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
		return nil, fmt.Errorf("replication: look up publication %s: %w", pgx.Identifier{pub}.Sanitize(), err)
	}
	if !exists {
		return nil, terr.New(terr.NotFound, "publication %s does not exist", pgx.Identifier{pub}.Sanitize())
	}
	rows, err := q.Query(ctx, `
		SELECT n.nspname, c.relname
		FROM pg_publication_rel pr
		JOIN pg_publication p ON p.oid = pr.prpubid
		JOIN pg_class c ON c.oid = pr.prrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE p.pubname = $1
		ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, fmt.Errorf("replication: list tables of publication %s: %w", pgx.Identifier{pub}.Sanitize(), err)
	}
	var out []pgx.Identifier
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, pgx.Identifier{schema, name})
	}
	return out, rows.Err()
}

var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ValidateSlotName applies PostgreSQL's rule for replication slot names
// (lower-case letters, digits and underscores, at most 63 bytes), so a bad
// name is refused with a clear sentence before any command runs.
func ValidateSlotName(slot string) error {
	if !slotNameRE.MatchString(slot) {
		return terr.New(terr.Validation, "replication slot name %q is invalid: use 1 to 63 lower-case letters, digits and underscores", slot)
	}
	return nil
}

// EnsureSlot creates the permanent pgoutput slot if it is missing. When it
// creates it, consistentLSN is the slot's consistent point (changes
// committed after it will be streamed); for an existing slot it is the
// slot's confirmed_flush_lsn. An existing slot that is not a pgoutput slot
// of the current database is refused. Creation waits for transactions that
// are running at the time, so bound ctx; it cannot run inside a transaction
// that has written anything.
func EnsureSlot(ctx context.Context, q Querier, slot string) (created bool, consistentLSN pglogrepl.LSN, err error) {
	if err := ValidateSlotName(slot); err != nil {
		return false, 0, err
	}
	info, err := AwaitSlot(ctx, q, slot)
	if err != nil {
		return false, 0, err
	}
	if info.Exists {
		var thisDB string
		if err := q.QueryRow(ctx, `SELECT current_database()`).Scan(&thisDB); err != nil {
			return false, 0, fmt.Errorf("replication: current database: %w", err)
		}
		if info.SlotType != "logical" || info.Plugin != "pgoutput" || info.Database != thisDB {
			return false, 0, terr.New(terr.Conflict, "replication slot %q exists but is a %s slot for plugin %q in database %q, not a pgoutput slot of database %q; drop it or configure another slot name",
				slot, info.SlotType, info.Plugin, info.Database, thisDB)
		}
		return false, info.ConfirmedFlush, nil
	}
	var version int
	if err := q.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return false, 0, fmt.Errorf("replication: read the server version: %w", err)
	}
	create := `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`
	if version >= 170000 {
		// A failover slot (PostgreSQL 17+): a standby that synchronizes
		// slots (sync_replication_slots) keeps it, so a promoted standby
		// still has it (ADR 0039; docs/operations.md says what to set).
		create = `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`
	}
	var lsn string
	err = q.QueryRow(ctx, create, slot).Scan(&lsn)
	if err != nil {
		if pgCode(err) == "42710" { // created concurrently
			return EnsureSlot(ctx, q, slot)
		}
		return false, 0, fmt.Errorf("replication: create slot %q: %w", slot, err)
	}
	l, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return false, 0, fmt.Errorf("replication: create slot %q: %w", slot, err)
	}
	return true, l, nil
}

// slotCreatePoll is how often AwaitSlot looks again at a slot that another
// session is still creating.
const slotCreatePoll = 50 * time.Millisecond

// AwaitSlot is SlotInfo, except that while another session is still
// creating the logical slot it waits, bounded by ctx, until the creation
// ends. Such a slot is listed (active, held by the creating backend) but has
// no confirmed_flush_lsn until its snapshot is consistent, which waits for
// every transaction running on the server. A client killed during
// pg_create_logical_replication_slot leaves its backend to finish that
// creation: a consumer that went on with the half-made slot would read its
// start as 0, build from the source before the slot's consistent point
// exists, and lose every commit between that build and the point, since
// the slot never decodes them. A failed creation removes the slot, so the
// wait ends with Exists false.
func AwaitSlot(ctx context.Context, q Querier, slot string) (Slot, error) {
	for {
		s, err := SlotInfo(ctx, q, slot)
		if err != nil || !s.Exists || s.SlotType != "logical" || s.ConfirmedFlush != 0 {
			return s, err
		}
		select {
		case <-ctx.Done():
			return Slot{}, fmt.Errorf("replication: wait for slot %q, still being created by process %d: %w", slot, s.ActivePID, ctx.Err())
		case <-time.After(slotCreatePoll):
		}
	}
}

// Slot describes a replication slot as pg_replication_slots shows it.
type Slot struct {
	Exists    bool
	SlotType  string // "logical" or "physical"
	Plugin    string
	Database  string
	Active    bool
	ActivePID int // 0 when not active
	// ConfirmedFlush is where streaming resumes: commits ending after it
	// are still to be sent. 0 for a physical slot.
	ConfirmedFlush pglogrepl.LSN
	// RestartLSN is the oldest WAL the slot retains; 0 once it is lost.
	RestartLSN pglogrepl.LSN
	// WALStatus is reserved, extended, unreserved or lost; lost means the
	// slot was invalidated and capture lost continuity.
	WALStatus string
	// SafeWALSize is how many more bytes of WAL may be written before the
	// slot is in danger of losing WAL; -1 when max_slot_wal_keep_size is
	// unlimited.
	SafeWALSize int64
	// ConfirmLagBytes is the distance from the current WAL position to
	// ConfirmedFlush; RetainedWALBytes to RestartLSN (-1 when unknown).
	ConfirmLagBytes  int64
	RetainedWALBytes int64
}

// SlotInfo reads the slot's row of pg_replication_slots; Exists is false
// when there is none.
func SlotInfo(ctx context.Context, q Querier, slot string) (Slot, error) {
	var (
		s                               Slot
		pid, safe, confirmLag, retained *int64
		pluginS, dbS, status            *string
		confirmed, restart              *string
	)
	err := q.QueryRow(ctx, `
		SELECT slot_type, plugin, database, active, active_pid::bigint,
		       confirmed_flush_lsn::text, restart_lsn::text, wal_status, safe_wal_size,
		       CASE WHEN pg_is_in_recovery() THEN NULL
		            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint END,
		       CASE WHEN pg_is_in_recovery() THEN NULL
		            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint END
		FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&s.SlotType, &pluginS, &dbS, &s.Active, &pid, &confirmed, &restart, &status, &safe, &confirmLag, &retained)
	if errors.Is(err, pgx.ErrNoRows) {
		return Slot{}, nil
	}
	if err != nil {
		return Slot{}, fmt.Errorf("replication: look up slot %q: %w", slot, err)
	}
	s.Exists = true
	s.Plugin = deref(pluginS)
	s.Database = deref(dbS)
	s.WALStatus = deref(status)
	if pid != nil {
		s.ActivePID = int(*pid)
	}
	if s.ConfirmedFlush, err = parseLSN(confirmed); err != nil {
		return Slot{}, err
	}
	if s.RestartLSN, err = parseLSN(restart); err != nil {
		return Slot{}, err
	}
	s.SafeWALSize, s.ConfirmLagBytes, s.RetainedWALBytes = orMinus1(safe), orMinus1(confirmLag), orMinus1(retained)
	return s, nil
}

// slotReleaseWait bounds how long DropSlot waits for a walsender to let go
// of the slot.
const slotReleaseWait = 10 * time.Second

// DropSlot drops the slot if it exists, once no process holds it. The
// walsender of a stream that just ended (or of a consumer killed just
// before) holds the slot for a moment, and a drop then fails (55006): a
// caller re-creating a lost slot would find the old one still there. It
// gives up with that error after slotReleaseWait.
func DropSlot(ctx context.Context, q Querier, slot string) error {
	deadline := time.Now().Add(slotReleaseWait)
	for {
		_, err := q.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return nil
		}
		if pgCode(err) != "55006" || time.Now().After(deadline) {
			return fmt.Errorf("replication: drop slot %q: %w", slot, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication: drop slot %q: %w", slot, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func orMinus1(v *int64) int64 {
	if v == nil {
		return -1
	}
	return *v
}

func parseLSN(s *string) (pglogrepl.LSN, error) {
	if s == nil {
		return 0, nil
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		return 0, fmt.Errorf("replication: parse LSN %q: %w", *s, err)
	}
	return l, nil
}

// pgCode returns the SQLSTATE of the first PostgreSQL error in err's chain.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// fencePoll is how often Fence looks at the running transactions again.
const fencePoll = 20 * time.Millisecond

// Fence waits until every transaction that holds an xid now has ended.
// Called right after the commit that added a table to the publication, it
// makes a later read of the table see every change the slot will not
// deliver: a change is published only if it comes after that commit in the
// WAL, and any transaction that wrote the table before it had an xid by
// then. (Waiting only for xids up to the publishing transaction's own is
// not enough: a writer may take its xid after that one and still write
// before the commit.) It assigns itself a fresh xid as the horizon: xids
// are handed out in order, and a snapshot's xmax would not do (it is the
// latest completed xid plus one, below running ones it does not list).
func Fence(ctx context.Context, q Querier) error {
	var horizon string
	if err := q.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&horizon); err != nil {
		return fmt.Errorf("replication: fence: %w", err)
	}
	for {
		var done bool
		if err := q.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, horizon).Scan(&done); err != nil {
			return fmt.Errorf("replication: fence: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication: fence: %w", ctx.Err())
		case <-time.After(fencePoll):
		}
	}
}
