// Package catalog owns trellis-repl's state inside PostgreSQL: the instance
// schema, its versioned migrations, the transform definitions with their
// states and failures, and per-transform apply progress. Every process reads
// status from here, so `trellis-repl status` works from any machine.
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultSchema is the instance schema used when none is configured.
const DefaultSchema = "trellis"

// States of a transform (docs/architecture.md §3.9).
const (
	StateWaiting     = "waiting_to_backfill"
	StateBackfilling = "backfilling"
	StateLive        = "live"
	StatePaused      = "paused"
	// StateQuarantined is a transform whose key fuse tripped: it holds
	// too many keys (ADR 0013). Frozen like paused; RESUME rebuilds it.
	StateQuarantined = "quarantined"
)

// Frozen reports whether a transform in state runs no worker: paused by
// someone, or quarantined.
func Frozen(state string) bool { return state == StatePaused || state == StateQuarantined }

// Failure kinds recorded in capture_failure.
const (
	FailureCapture    = "capture"
	FailureHalt       = "halt"
	FailureDisruption = "disruption"
)

// Querier is what the catalog needs from a connection, pool or transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Catalog addresses the catalog tables of one instance schema.
type Catalog struct {
	Schema string
}

// New returns a Catalog for schema (DefaultSchema when empty).
func New(schema string) Catalog {
	if schema == "" {
		schema = DefaultSchema
	}
	return Catalog{Schema: schema}
}

// T returns the quoted, schema-qualified name of a catalog table.
func (c Catalog) T(name string) string {
	return pgx.Identifier{c.Schema, name}.Sanitize()
}

// SlotName is the replication slot of this instance. Slots are cluster-wide
// while schemas are per database, so the name carries the database OID.
func (c Catalog) SlotName(dbOID uint32) string {
	var b strings.Builder
	for _, r := range strings.ToLower(c.Schema) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("%s_%d", name, dbOID)
}

// PublicationName is the publication of this instance.
func (c Catalog) PublicationName() string { return c.Schema + "_pub" }

// LockKey is the advisory-lock key that makes one runner per instance.
func (c Catalog) LockKey() string { return "trellis-repl runner " + c.Schema }

// NotifyChannel is the channel Apply notifies after changing definitions.
func (c Catalog) NotifyChannel() string { return c.Schema + "_changed" }

// Failure describes why a transform is paused by the system, or a build that
// keeps failing. Fields are serialised with snake_case names.
type Failure struct {
	Kind       string    `json:"kind"`
	Error      string    `json:"error"`
	Columns    []string  `json:"columns,omitempty"`
	DetectedAt time.Time `json:"detected_at"`
}

// BackfillFailure describes a failing build: NextAttempt is when it is
// tried again, nil once it no longer is (the transform paused).
type BackfillFailure struct {
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error"`
	NextAttempt *time.Time `json:"next_attempt"`
}

// Transform is one catalog row.
type Transform struct {
	ID              int64
	Schema          string
	Name            string
	Definition      string // the SELECT as deparsed at define time
	Shape           string
	Plan            json.RawMessage
	State           string
	PausedBy        string // "user" or "system" when paused
	Rebuild         bool   // RESUME asked for a rebuild (orphans deleted)
	BuildCursor     []string
	BuildPhase      int
	CaptureFailure  *Failure
	BackfillFailure *BackfillFailure
	SourceTable     string // schema-qualified, quoted
	SourceOID       uint32
	CreatedAt       time.Time
	StateChangedAt  time.Time
	AppliedLSN      uint64
	AppliedAt       *time.Time
	KeysApplied     int64
	// KeysWaiting is the dirty-key backlog the runner last reported.
	KeysWaiting int64
	// Replaces is the transform this one redefines (CREATE OR REPLACE): it
	// builds into a shadow table and takes the other's place once live.
	// 0 for an ordinary transform.
	Replaces int64
	// ReplaceNotes are what the swap did not carry over (set when it ran).
	ReplaceNotes []string
	// CaptureWait is the runner's JSON description of an install of
	// capture waiting for a lock, or nil.
	CaptureWait json.RawMessage
	// DrainFailure is set while applying changes keeps failing.
	DrainFailure *DrainFailure
	// Owner is the transform this one is an inner level of (ADR 0018): it
	// was created for a derived table of the owner's FROM and lives and
	// dies with it. 0 for a transform a user defined.
	Owner int64
	// Build is the progress of the last build, nil when none started
	// since the catalog recorded builds.
	Build *BuildProgress
	// Disruption is why the target may disagree with its query (ADR
	// 0039), from the disruption until the transform is live again; nil
	// otherwise.
	Disruption *Disruption
	// BuildKind is BuildColumns during a column build, "" otherwise;
	// DropColumns are the target columns it drops once done (ADR 0041).
	BuildKind   string
	DropColumns []string
	// Version counts the definition's accepted edits (1 when created).
	Version int
	// RowVersion is the version of the catalog row as read (its xmin):
	// any change to the row gives it another.
	RowVersion string
}

// BuildProgress is how far a build got: the keys it walked (source rows,
// then on a rebuild the stored identities), the planner's estimate of
// how many it walks in all (nil when unknown), when it started, and when
// the transform went live (nil while it builds).
type BuildProgress struct {
	RowsDone   int64
	RowsTotal  *int64
	StartedAt  time.Time
	FinishedAt *time.Time
}

// DrainFailure describes applying changes that keeps failing with nothing
// to blame: no key to hold, nothing to pause. It is retried with capped
// backoff and cleared by the next batch that applies.
type DrainFailure struct {
	// Keys is the size of the failing batch; Tables the source tables its
	// keys belong to.
	Keys     int       `json:"batch_keys"`
	Tables   []string  `json:"tables"`
	Error    string    `json:"error"`
	SQLState string    `json:"sqlstate,omitempty"`
	Since    time.Time `json:"since"`
	LastSeen time.Time `json:"last_seen"`
	Attempts int       `json:"attempts"`
}

var migrations = []string{
	// 1: the initial catalog.
	`CREATE TABLE IF NOT EXISTS {{s}}.instance (
		id int PRIMARY KEY CHECK (id = 1),
		store_id text,
		confirm_mode text,
		capture_mode text,
		capture_reason text,
		slot_name text,
		received_lsn pg_lsn,
		confirmed_lsn pg_lsn,
		runner_pid int,
		heartbeat_at timestamptz,
		started_at timestamptz
	);
	INSERT INTO {{s}}.instance (id) VALUES (1) ON CONFLICT DO NOTHING;
	CREATE TABLE IF NOT EXISTS {{s}}.transforms (
		id bigserial PRIMARY KEY,
		schema_name text NOT NULL,
		name text NOT NULL,
		definition text NOT NULL,
		shape text NOT NULL,
		plan jsonb NOT NULL,
		state text NOT NULL,
		paused_by text,
		rebuild boolean NOT NULL DEFAULT false,
		build_phase int NOT NULL DEFAULT 0,
		build_cursor text[],
		capture_failure jsonb,
		backfill_failure jsonb,
		source_table text NOT NULL,
		source_oid oid NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now(),
		state_changed_at timestamptz NOT NULL DEFAULT now(),
		UNIQUE (schema_name, name)
	);
	CREATE TABLE IF NOT EXISTS {{s}}.progress (
		transform_id bigint PRIMARY KEY REFERENCES {{s}}.transforms (id) ON DELETE CASCADE,
		applied_lsn pg_lsn NOT NULL DEFAULT '0/0',
		applied_at timestamptz,
		keys_applied bigint NOT NULL DEFAULT 0,
		held_keys bigint NOT NULL DEFAULT 0
	) WITH (fillfactor = 50);`,
	// 2: redefinition (CREATE OR REPLACE TRANSFORM): the new definition
	// builds as its own row into a shadow table and replaces the row it
	// names once live.
	`ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS replaces bigint REFERENCES {{s}}.transforms (id) ON DELETE CASCADE;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS replace_notes text[];`,
	// 3: capture waits (an install of capture waiting for a lock on a user
	// table, with the sessions holding it) and drain failures (applying
	// changes keeps failing with nothing to blame), as JSON the runner
	// writes.
	`ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS capture_wait jsonb;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS drain_failure jsonb;`,
	// 4: keys held in quarantine (ADR 0013): one row per (transform,
	// source table, key) the apply path gave up on; released rows wait
	// for the runner to mark their keys dirty again. The progress
	// column that counted the dirty-key backlog says so by its name.
	// The partitions last seen under each partitioned source, and the
	// corrections an ATTACH or DETACH PARTITION queued (ADR 0015).
	`CREATE TABLE IF NOT EXISTS {{s}}.held_keys (
		transform_id bigint NOT NULL REFERENCES {{s}}.transforms (id) ON DELETE CASCADE,
		table_oid oid NOT NULL,
		source_table text NOT NULL,
		key_id bytea NOT NULL,
		key text[] NOT NULL,
		error text NOT NULL,
		sqlstate text,
		attempts int NOT NULL,
		poisoned_at timestamptz NOT NULL,
		released boolean NOT NULL DEFAULT false,
		PRIMARY KEY (transform_id, table_oid, key_id)
	);
	CREATE INDEX IF NOT EXISTS held_keys_released ON {{s}}.held_keys (transform_id) WHERE released;
	ALTER TABLE {{s}}.progress RENAME COLUMN held_keys TO keys_waiting;
	CREATE TABLE IF NOT EXISTS {{s}}.partition_nodes (
		root_oid oid NOT NULL,
		node_oid oid NOT NULL,
		PRIMARY KEY (root_oid, node_oid)
	);
	CREATE TABLE IF NOT EXISTS {{s}}.corrections (
		transform_id bigint NOT NULL REFERENCES {{s}}.transforms (id) ON DELETE CASCADE,
		root_oid oid NOT NULL,
		node_oid oid NOT NULL,
		node text NOT NULL,
		kind text NOT NULL,
		since timestamptz NOT NULL DEFAULT now(),
		cursor text[],
		keys_remaining bigint,
		PRIMARY KEY (transform_id, node_oid)
	);`,
	// 5: build progress (ADR 0017): the rows a build has walked, the
	// estimate of how many it will walk, when it started and when the
	// transform went live, written by the building worker.
	`ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS build_rows_done bigint NOT NULL DEFAULT 0;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS build_rows_total bigint;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS build_started_at timestamptz;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS build_finished_at timestamptz;`,
	// 6: the retention guard's last reading (--max-retained-wal), which
	// the runner records with its heartbeat so any process's status sees
	// it. IF NOT EXISTS: the statement is safe whatever number it lands at.
	`ALTER TABLE {{s}}.instance ADD COLUMN IF NOT EXISTS retention jsonb;`,
	// 7: self-check jobs (ADR 0017 §6): any process queues one; the runner,
	// or the requesting process when no runner is attached, claims it
	// (claimed_pid is the claiming session's backend: a claim whose session
	// is gone may be taken again) and stores the report.
	`CREATE TABLE IF NOT EXISTS {{s}}.selfcheck_jobs (
		id bigserial PRIMARY KEY,
		transform text NOT NULL,
		transform_id bigint NOT NULL,
		requested_at timestamptz NOT NULL DEFAULT now(),
		options jsonb NOT NULL DEFAULT '{}',
		state text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed')),
		claimed_by text,
		claimed_pid int,
		started_at timestamptz,
		finished_at timestamptz,
		report jsonb,
		error text
	);
	CREATE INDEX IF NOT EXISTS selfcheck_jobs_open ON {{s}}.selfcheck_jobs (id) WHERE state IN ('queued', 'running');`,
	// 8: inner levels (ADR 0018): a transform a definition created for a
	// derived table in its FROM that aggregates, owned by it. Levels are
	// inserted before their owner (whose plan reads them), so the
	// reference is checked at commit.
	`ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS owner bigint
		REFERENCES {{s}}.transforms (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;`,
	// 9: removals of capture waiting for a lock on a user table (a table
	// no transform reads any more, so no transform row to hang them on),
	// as the JSON array the runner writes at each attempt.
	`ALTER TABLE {{s}}.instance ADD COLUMN IF NOT EXISTS capture_waits jsonb;`,
	// 10: the server the runner last started on (ADR 0039), compared at
	// every start and by status; and why a transform's target may
	// disagree with its query (a disruption), kept until it is live again.
	`ALTER TABLE {{s}}.instance ADD COLUMN IF NOT EXISTS server jsonb;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS disruption jsonb;`,
	// 11: definition scripts a restore queued (ADR 0040): the section
	// `trellis-repl dump --append-to` adds to a pg_dump file installs the
	// catalog empty and queues the instance's definitions here; the first
	// Open that may write applies them and deletes them.
	`CREATE TABLE IF NOT EXISTS {{s}}.restore_scripts (
		id bigserial PRIMARY KEY,
		script text NOT NULL,
		queued_at timestamptz NOT NULL DEFAULT now()
	);`,
	// 12: ALTER TRANSFORM (ADR 0041): the kind of build in progress
	// ('columns' for a column build, NULL for a build or rebuild), the
	// columns it drops once done, and the definition's version.
	`ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS build_kind text;
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS drop_columns text[];
	 ALTER TABLE {{s}}.transforms ADD COLUMN IF NOT EXISTS version int NOT NULL DEFAULT 1;`,
}

// BuildColumns is the build_kind of a column build (ADR 0041): the build
// phases re-derive every key with the plan ALTER TRANSFORM changed.
const BuildColumns = "columns"

// Current is the catalog version this binary writes and reads.
func Current() int { return len(migrations) }

// Migrate creates or upgrades the instance schema to the newest version. It
// is idempotent and safe to run from several processes at once (it takes a
// transaction-scoped advisory lock).
func (c Catalog) Migrate(ctx context.Context, conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin migration: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := c.MigrateTx(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// MigrateTx is Migrate inside the caller's transaction, which commits it.
func (c Catalog) MigrateTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "trellis-repl migrate "+c.Schema); err != nil {
		return fmt.Errorf("lock for migration: %w", err)
	}
	s := pgx.Identifier{c.Schema}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s); err != nil {
		return fmt.Errorf("create schema %s: %w", s, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+c.T("schema_migrations")+
		` (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+c.T("schema_migrations")).Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("catalog schema %s is at version %d, newer than this binary knows (%d): upgrade trellis-repl", c.Schema, have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		sql := replaceSchema(migrations[v-1], s)
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("apply catalog migration %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+c.T("schema_migrations")+` (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("record catalog migration %d: %w", v, err)
		}
	}
	return nil
}

// InstallSQL is the SQL that installs this binary's catalog in a schema
// that does not hold one, as psql runs it: the schema, every migration and
// their versions recorded (a restore section, ADR 0040).
func (c Catalog) InstallSQL() string {
	s := pgx.Identifier{c.Schema}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE SCHEMA %s;\n", s)
	fmt.Fprintf(&b, "CREATE TABLE %s (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());\n", c.T("schema_migrations"))
	for v, m := range migrations {
		fmt.Fprintf(&b, "-- catalog migration %d\n%s\n", v+1, strings.TrimRight(replaceSchema(m, s), "; \n\t")+";")
	}
	fmt.Fprintf(&b, "INSERT INTO %s (version) SELECT generate_series(1, %d);\n", c.T("schema_migrations"), len(migrations))
	return b.String()
}

// RestoreScript is a definition script a restore queued.
type RestoreScript struct {
	ID     int64
	Script string
}

// TakeRestoreScripts returns the queued restore scripts, oldest first,
// locked until tx ends, and deletes them in tx: applied in the same
// transaction, they go only if they applied.
func (c Catalog) TakeRestoreScripts(ctx context.Context, tx pgx.Tx) ([]RestoreScript, error) {
	rows, err := tx.Query(ctx, `DELETE FROM `+c.T("restore_scripts")+` WHERE id IN
		(SELECT id FROM `+c.T("restore_scripts")+` ORDER BY id FOR UPDATE) RETURNING id, script`)
	if err != nil {
		return nil, fmt.Errorf("read the queued restore scripts: %w", err)
	}
	defer rows.Close()
	var out []RestoreScript
	for rows.Next() {
		var r RestoreScript
		if err := rows.Scan(&r.ID, &r.Script); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the queued restore scripts: %w", err)
	}
	slices.SortFunc(out, func(a, b RestoreScript) int { return int(a.ID - b.ID) })
	return out, nil
}

func replaceSchema(sql, quoted string) string {
	out := make([]byte, 0, len(sql))
	for i := 0; i < len(sql); {
		if i+5 <= len(sql) && sql[i:i+5] == "{{s}}" {
			out = append(out, quoted...)
			i += 5
			continue
		}
		out = append(out, sql[i])
		i++
	}
	return string(out)
}

// Version returns the catalog's migration version, 0 when not installed.
func (c Catalog) Version(ctx context.Context, q Querier) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, c.T("schema_migrations")).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look for catalog: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+c.T("schema_migrations")).Scan(&v)
	return v, err
}

const transformCols = `t.id, t.schema_name, t.name, t.definition, t.shape, t.plan, t.state,
	coalesce(t.paused_by, ''), t.rebuild, t.build_cursor, t.build_phase, t.capture_failure, t.backfill_failure,
	t.source_table, t.source_oid, t.created_at, t.state_changed_at,
	coalesce(p.applied_lsn, '0/0')::text, p.applied_at, coalesce(p.keys_applied, 0), coalesce(p.keys_waiting, 0),
	coalesce(t.replaces, 0), t.replace_notes, t.capture_wait, t.drain_failure,
	t.build_rows_done, t.build_rows_total, t.build_started_at, t.build_finished_at, coalesce(t.owner, 0), t.disruption,
	coalesce(t.build_kind, ''), t.drop_columns, t.version, t.xmin::text`

// transformColsNoPlan is transformCols with the plan left out (NULL):
// ListCached reads plans apart, only those whose row changed.
var transformColsNoPlan = strings.Replace(transformCols, "t.plan,", "NULL::bytea,", 1)

func scanTransform(row pgx.Row) (*Transform, error) {
	var t Transform
	// The plan is read as bytes: into a json.RawMessage pgx would run the
	// JSON decoder over it only to validate what PostgreSQL stored as
	// jsonb (a sixth of an idle runner's CPU listing 1,000 transforms).
	var cf, bf, df, dis, plan []byte
	var lsn string
	var cursor []string
	var b BuildProgress
	var bStarted *time.Time
	if err := row.Scan(&t.ID, &t.Schema, &t.Name, &t.Definition, &t.Shape, &plan, &t.State,
		&t.PausedBy, &t.Rebuild, &cursor, &t.BuildPhase, &cf, &bf, &t.SourceTable, &t.SourceOID,
		&t.CreatedAt, &t.StateChangedAt, &lsn, &t.AppliedAt, &t.KeysApplied, &t.KeysWaiting, &t.Replaces, &t.ReplaceNotes, &t.CaptureWait, &df,
		&b.RowsDone, &b.RowsTotal, &bStarted, &b.FinishedAt, &t.Owner, &dis, &t.BuildKind, &t.DropColumns, &t.Version, &t.RowVersion); err != nil {
		return nil, err
	}
	t.Plan = plan
	var err error
	if t.Disruption, err = scanDisruption(dis, t.Name); err != nil {
		return nil, err
	}
	if bStarted != nil {
		b.StartedAt = *bStarted
		t.Build = &b
	}
	t.BuildCursor = cursor
	if len(cf) > 0 {
		t.CaptureFailure = new(Failure)
		if err := json.Unmarshal(cf, t.CaptureFailure); err != nil {
			return nil, fmt.Errorf("decode capture_failure of %s: %w", t.Name, err)
		}
	}
	if len(bf) > 0 {
		t.BackfillFailure = new(BackfillFailure)
		if err := json.Unmarshal(bf, t.BackfillFailure); err != nil {
			return nil, fmt.Errorf("decode backfill_failure of %s: %w", t.Name, err)
		}
		if na := t.BackfillFailure.NextAttempt; na != nil && na.IsZero() {
			t.BackfillFailure.NextAttempt = nil // recorded by a version that wrote a zero time
		}
	}
	if len(df) > 0 {
		t.DrainFailure = new(DrainFailure)
		if err := json.Unmarshal(df, t.DrainFailure); err != nil {
			return nil, fmt.Errorf("decode drain_failure of %s: %w", t.Name, err)
		}
	}
	v, err := ParseLSN(lsn)
	if err != nil {
		return nil, err
	}
	t.AppliedLSN = v
	return &t, nil
}

// Stamp is a cheap reading of what a runner's reconcile acts on: it
// differs between two readings whenever a transform was defined, dropped
// or had its row changed, or released keys wait, in between.
type Stamp struct {
	// Transforms is the number of transform rows and Versions the sum of
	// their row versions (xmin): an insert, update or delete changes one
	// or both.
	Transforms, Versions int64
	// Released: held keys wait to be marked dirty (catalog.Released).
	Released bool
}

// Stamp reads the catalog's Stamp in one statement that touches no
// plan: an idle runner reads it every interval instead of every
// transform's row.
func (c Catalog) Stamp(ctx context.Context, q Querier) (Stamp, error) {
	var s Stamp
	err := q.QueryRow(ctx, `SELECT count(*), coalesce(sum(xmin::text::bigint), 0)::bigint,
		EXISTS (SELECT FROM `+c.T("held_keys")+` WHERE released) FROM `+c.T("transforms")).Scan(&s.Transforms, &s.Versions, &s.Released)
	if err != nil {
		return Stamp{}, fmt.Errorf("read the catalog stamp: %w", err)
	}
	return s, nil
}

// List returns every transform, ordered by id.
func (c Catalog) List(ctx context.Context, q Querier) ([]*Transform, error) {
	return c.listWith(ctx, q, transformCols)
}

// listWith lists every transform, ordered by id, reading cols
// (transformCols or transformColsNoPlan).
func (c Catalog) listWith(ctx context.Context, q Querier, cols string) ([]*Transform, error) {
	rows, err := q.Query(ctx, `SELECT `+cols+` FROM `+c.T("transforms")+` t LEFT JOIN `+
		c.T("progress")+` p ON p.transform_id = t.id ORDER BY t.id`)
	if err != nil {
		return nil, fmt.Errorf("list transforms: %w", err)
	}
	defer rows.Close()
	var out []*Transform
	for rows.Next() {
		t, err := scanTransform(rows)
		if err != nil {
			return nil, fmt.Errorf("read transform: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Get returns one transform by schema and name; nil when absent.
func (c Catalog) Get(ctx context.Context, q Querier, schema, name string) (*Transform, error) {
	t, err := scanTransform(q.QueryRow(ctx, `SELECT `+transformCols+` FROM `+c.T("transforms")+` t LEFT JOIN `+
		c.T("progress")+` p ON p.transform_id = t.id WHERE t.schema_name = $1 AND t.name = $2`, schema, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read transform %s.%s: %w", schema, name, err)
	}
	return t, nil
}

// GetByID returns one transform by id; nil when absent.
func (c Catalog) GetByID(ctx context.Context, q Querier, id int64) (*Transform, error) {
	t, err := scanTransform(q.QueryRow(ctx, `SELECT `+transformCols+` FROM `+c.T("transforms")+` t LEFT JOIN `+
		c.T("progress")+` p ON p.transform_id = t.id WHERE t.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read transform %d: %w", id, err)
	}
	return t, nil
}

// ReserveID takes a new transform id before the transform is inserted
// (Insert with Transform.ID set): an owner's inner levels are named by it
// and created first (ADR 0018).
func (c Catalog) ReserveID(ctx context.Context, q Querier) (int64, error) {
	var id int64
	if err := q.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence($1, 'id'))`, c.T("transforms")).Scan(&id); err != nil {
		return 0, fmt.Errorf("reserve a transform id: %w", err)
	}
	return id, nil
}

// Insert records a new transform in state waiting_to_backfill and returns
// its id: t.ID when set (reserved by ReserveID), else a new one.
func (c Catalog) Insert(ctx context.Context, q Querier, t *Transform) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO `+c.T("transforms")+
		` (id, schema_name, name, definition, shape, plan, state, source_table, source_oid, replaces, owner)
		  VALUES (coalesce(nullif($10::bigint, 0), nextval(pg_get_serial_sequence($12, 'id'))),
		          $1, $2, $3, $4, $5, $6, $7, $8, nullif($9, 0), nullif($11::bigint, 0)) RETURNING id`,
		t.Schema, t.Name, t.Definition, t.Shape, []byte(t.Plan), StateWaiting, t.SourceTable, t.SourceOID, t.Replaces,
		t.ID, t.Owner, c.T("transforms")).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record transform %s: %w", t.Name, err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO `+c.T("progress")+` (transform_id) VALUES ($1)`, id); err != nil {
		return 0, fmt.Errorf("record progress of %s: %w", t.Name, err)
	}
	return id, nil
}

// SetPlan replaces a transform's plan (used when a rebuild re-validates it).
func (c Catalog) SetPlan(ctx context.Context, q Querier, id int64, plan json.RawMessage) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET plan = $2 WHERE id = $1`, id, []byte(plan))
	return err
}

// Pause moves a transform to paused. by is "user" or "system"; failure may be nil.
func (c Catalog) Pause(ctx context.Context, q Querier, id int64, by string, failure *Failure) error {
	var cf []byte
	if failure != nil {
		var err error
		if cf, err = json.Marshal(failure); err != nil {
			return err
		}
	}
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET state = $2, paused_by = $3,
		capture_failure = coalesce($4::jsonb, capture_failure), state_changed_at = now() WHERE id = $1`,
		id, StatePaused, by, cf)
	if err != nil {
		return fmt.Errorf("pause transform %d: %w", id, err)
	}
	return nil
}

// Resume clears failures, releases every key the transform holds (the
// rebuild re-derives them) and asks for a full rebuild.
func (c Catalog) Resume(ctx context.Context, q Querier, id int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET state = $2, paused_by = NULL, rebuild = true, build_kind = NULL,
		build_phase = 0, build_cursor = NULL, capture_failure = NULL, backfill_failure = NULL,
		drain_failure = NULL, state_changed_at = now(),
		build_rows_done = 0, build_rows_total = NULL, build_started_at = NULL, build_finished_at = NULL WHERE id = $1`, id, StateWaiting)
	if err != nil {
		return fmt.Errorf("resume transform %d: %w", id, err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM `+c.T("held_keys")+` WHERE transform_id = $1`, id); err != nil {
		return fmt.Errorf("release the keys of transform %d: %w", id, err)
	}
	return nil
}

// Quarantine moves a running transform to quarantined (its key fuse
// tripped); a transform already frozen stays as it is.
func (c Catalog) Quarantine(ctx context.Context, q Querier, id int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET state = $2, paused_by = 'system', state_changed_at = now()
		WHERE id = $1 AND state NOT IN ($3, $2)`, id, StateQuarantined, StatePaused)
	if err != nil {
		return fmt.Errorf("quarantine transform %d: %w", id, err)
	}
	return nil
}

// SetState moves a transform between the build states. It only applies when
// the transform is still in state from (so a concurrent PAUSE wins).
func (c Catalog) SetState(ctx context.Context, q Querier, id int64, from, to string) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET state = $3, state_changed_at = now(),
		rebuild = CASE WHEN $3 = 'live' THEN false ELSE rebuild END,
		build_kind = CASE WHEN $3 = 'live' THEN NULL ELSE build_kind END,
		backfill_failure = CASE WHEN $3 = 'live' THEN NULL ELSE backfill_failure END,
		build_finished_at = CASE WHEN $3 = 'live' AND build_started_at IS NOT NULL THEN coalesce(build_finished_at, now()) ELSE build_finished_at END,
		disruption = CASE WHEN $3 = 'live' THEN NULL ELSE disruption END
		WHERE id = $1 AND state = $2`, id, from, to)
	if err != nil {
		return false, fmt.Errorf("set state of transform %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetBuildCursor records build progress (phase and the last key done).
func (c Catalog) SetBuildCursor(ctx context.Context, q Querier, id int64, phase int, cursor []string) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET build_phase = $2, build_cursor = $3 WHERE id = $1`,
		id, phase, cursor)
	return err
}

// StartBuild records that a build starts now and walks about total keys
// (nil: unknown).
func (c Catalog) StartBuild(ctx context.Context, q Querier, id int64, total *int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET build_rows_done = 0, build_rows_total = $2,
		build_started_at = now(), build_finished_at = NULL WHERE id = $1`, id, total)
	if err != nil {
		return fmt.Errorf("record the build start of transform %d: %w", id, err)
	}
	return nil
}

// AdvanceBuild records build progress: the phase, the last key done and
// rows more keys walked (in the transaction that applied them). Only a
// build in progress moves: one a backfill request started over since
// (RequestBackfill) keeps the cursor it reset.
func (c Catalog) AdvanceBuild(ctx context.Context, q Querier, id int64, phase int, cursor []string, rows int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET build_phase = $2, build_cursor = $3,
		build_rows_done = build_rows_done + $4 WHERE id = $1 AND state = $5`, id, phase, cursor, rows, StateBackfilling)
	return err
}

// StartColumnBuild records an accepted ALTER TRANSFORM (ADR 0041): the
// new plan and definition, the version bumped, the columns to drop once
// built, and a column build starting now.
func (c Catalog) StartColumnBuild(ctx context.Context, q Querier, id int64, plan json.RawMessage, definition string, drops []string) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET plan = $2, definition = $3, version = version + 1,
		drop_columns = $4, state = $5, build_kind = $6, rebuild = false, build_phase = 0, build_cursor = NULL,
		backfill_failure = NULL, state_changed_at = now(), build_rows_done = 0, build_rows_total = NULL,
		build_started_at = now(), build_finished_at = NULL WHERE id = $1`,
		id, []byte(plan), definition, drops, StateBackfilling, BuildColumns)
	if err != nil {
		return fmt.Errorf("record the edit of transform %d: %w", id, err)
	}
	return nil
}

// ColumnsDropped clears the columns a column build had to drop.
func (c Catalog) ColumnsDropped(ctx context.Context, q Querier, id int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET drop_columns = NULL WHERE id = $1`, id)
	return err
}

// RequestBackfill starts a transform that is not frozen over on the path
// RESUME takes (ADR 0040): waiting_to_backfill with a rebuild, which
// re-derives every key in place and deletes orphans. It reports whether
// it did (a frozen transform is left as it is). Held keys stay held.
func (c Catalog) RequestBackfill(ctx context.Context, q Querier, id int64) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET state = $2, rebuild = true, build_kind = NULL,
		build_phase = 0, build_cursor = NULL, backfill_failure = NULL, state_changed_at = now(),
		build_rows_done = 0, build_rows_total = NULL, build_started_at = NULL, build_finished_at = NULL
		WHERE id = $1 AND state NOT IN ($3, $4)`, id, StateWaiting, StatePaused, StateQuarantined)
	if err != nil {
		return false, fmt.Errorf("request a backfill of transform %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetBackfillFailure records a failed build attempt (nil clears it).
func (c Catalog) SetBackfillFailure(ctx context.Context, q Querier, id int64, f *BackfillFailure) error {
	if f == nil {
		return c.setJSON(ctx, q, id, "backfill_failure", nil)
	}
	return c.setJSON(ctx, q, id, "backfill_failure", f)
}

// SetDrainFailure records (or with nil clears) a failing drain.
func (c Catalog) SetDrainFailure(ctx context.Context, q Querier, id int64, f *DrainFailure) error {
	if f == nil {
		return c.setJSON(ctx, q, id, "drain_failure", nil)
	}
	return c.setJSON(ctx, q, id, "drain_failure", f)
}

// setJSON writes v as JSON (nil: NULL) into a jsonb column of a transform,
// when it differs.
func (c Catalog) setJSON(ctx context.Context, q Querier, id int64, column string, v any) error {
	var b []byte
	if v != nil {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return fmt.Errorf("encode %s: %w", column, err)
		}
	}
	col := pgx.Identifier{column}.Sanitize()
	_, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET `+col+` = $2 WHERE id = $1 AND `+col+` IS DISTINCT FROM $2::jsonb`, id, b)
	if err != nil {
		return fmt.Errorf("record %s: %w", column, err)
	}
	return nil
}

// Promote makes a redefinition the transform it replaced: the old row is
// deleted and this one takes its name and plan (the swap's catalog half).
func (c Catalog) Promote(ctx context.Context, q Querier, id, old int64, name string, plan json.RawMessage, notes []string) error {
	if _, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET replaces = NULL WHERE id = $1`, id); err != nil {
		return fmt.Errorf("promote transform %d: %w", id, err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM `+c.T("transforms")+` WHERE id = $1`, old); err != nil {
		return fmt.Errorf("remove replaced transform %d: %w", old, err)
	}
	if notes == nil {
		notes = []string{}
	}
	if _, err := q.Exec(ctx, `UPDATE `+c.T("transforms")+` SET name = $2, plan = $3, replace_notes = $4 WHERE id = $1`,
		id, name, []byte(plan), notes); err != nil {
		return fmt.Errorf("promote transform %d: %w", id, err)
	}
	return nil
}

// Delete removes a transform's catalog rows (progress cascades).
func (c Catalog) Delete(ctx context.Context, q Querier, id int64) error {
	_, err := q.Exec(ctx, `DELETE FROM `+c.T("transforms")+` WHERE id = $1`, id)
	return err
}

// RecordProgress adds n applied keys and, when lsn > 0, moves applied_lsn
// forward (never back). Called inside the apply transaction.
func (c Catalog) RecordProgress(ctx context.Context, q Querier, id int64, lsn uint64, n int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("progress")+` SET
		applied_lsn = CASE WHEN $2::pg_lsn > applied_lsn THEN $2::pg_lsn ELSE applied_lsn END,
		keys_applied = keys_applied + $3, applied_at = now() WHERE transform_id = $1`, id, FormatLSN(lsn), n)
	if err != nil {
		return fmt.Errorf("record progress of transform %d: %w", id, err)
	}
	return nil
}

// RecordIdleProgress records the applied positions transforms reached
// without writes (ids[i] reached lsns[i]), all in one statement: an idle
// instance writes once per interval, not once per transform. It returns
// the transforms whose rows it held, whether it moved them or found them
// already at or past their position.
//
// It takes the rows' locks in transform order and skips any another
// transaction holds: a DROP or apply of an owner and its levels deletes
// or updates several of these rows in one transaction, and a background
// statement that waited on one of them while holding another could
// deadlock with it and make the user's statement fail. A skipped row is
// recorded at the next call.
func (c Catalog) RecordIdleProgress(ctx context.Context, q Querier, ids []int64, lsns []uint64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	texts := make([]string, len(lsns))
	for i, l := range lsns {
		texts[i] = FormatLSN(l)
	}
	rows, err := q.Query(ctx, `WITH l AS (
			SELECT p.transform_id, v.lsn::pg_lsn AS lsn
			FROM `+c.T("progress")+` p JOIN unnest($1::bigint[], $2::text[]) AS v(id, lsn) ON p.transform_id = v.id
			ORDER BY p.transform_id FOR NO KEY UPDATE OF p SKIP LOCKED),
		u AS (UPDATE `+c.T("progress")+` p SET applied_lsn = l.lsn, applied_at = now()
			FROM l WHERE p.transform_id = l.transform_id AND l.lsn > p.applied_lsn)
		SELECT transform_id FROM l`, ids, texts)
	return heldIDs(rows, err, "record the progress of %d transforms: %w", len(ids))
}

// heldIDs collects the transform ids a many-row update of progress rows
// returns, its error (err, or the rows') wrapped with format and n.
func heldIDs(rows pgx.Rows, err error, format string, n int) ([]int64, error) {
	if err == nil {
		var held []int64
		if held, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err == nil {
			return held, nil
		}
	}
	return nil, fmt.Errorf(format, n, err)
}

// SetKeysWaiting records the dirty-key backlog counts status reports
// (ids[i] has ns[i] keys waiting), in one statement for every transform,
// and returns the transforms whose rows it held (set, or already equal).
// It locks in transform order and skips rows another transaction holds,
// for the reason RecordIdleProgress gives; a skipped count is set at the
// next report.
func (c Catalog) SetKeysWaiting(ctx context.Context, q Querier, ids []int64, ns []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `WITH l AS (
			SELECT p.transform_id, v.n
			FROM `+c.T("progress")+` p JOIN unnest($1::bigint[], $2::bigint[]) AS v(id, n) ON p.transform_id = v.id
			ORDER BY p.transform_id FOR NO KEY UPDATE OF p SKIP LOCKED),
		u AS (UPDATE `+c.T("progress")+` p SET keys_waiting = l.n FROM l WHERE p.transform_id = l.transform_id AND p.keys_waiting <> l.n)
		SELECT transform_id FROM l`, ids, ns)
	return heldIDs(rows, err, "record the backlog of %d transforms: %w", len(ids))
}

// SetCaptureWait records (v not nil, marshalled to JSON) or clears (nil)
// the transform's capture wait.
func (c Catalog) SetCaptureWait(ctx context.Context, q Querier, id int64, v any) error {
	return c.setJSON(ctx, q, id, "capture_wait", v)
}

// Instance is the singleton instance row.
type Instance struct {
	StoreID       string
	ConfirmMode   string
	CaptureMode   string
	CaptureReason string
	SlotName      string
	ReceivedLSN   uint64
	ConfirmedLSN  uint64
	RunnerPID     int
	HeartbeatAt   *time.Time
	StartedAt     *time.Time
	// Retention is the retention guard's last reading (nil: no limit set,
	// or capture without a slot).
	Retention *Retention
	// CaptureWaits is the runner's JSON array of removals of capture
	// waiting for a lock, or nil (none).
	CaptureWaits json.RawMessage
	// Server is the server the runner last started on (nil: none
	// recorded, before catalog version 10 or any start since).
	Server *Server
}

// Retention is the replication slot's retained WAL against the runner's
// --max-retained-wal, as the runner last read it.
type Retention struct {
	RetainedBytes int64 `json:"retained_bytes"`
	LimitBytes    int64 `json:"limit_bytes"`
	OverLimit     bool  `json:"over_limit"`
	// Since is when the slot went over the limit (null while under).
	Since *time.Time `json:"since"`
}

// GetInstance reads the instance row.
func (c Catalog) GetInstance(ctx context.Context, q Querier) (*Instance, error) {
	var in Instance
	var recv, conf *string
	var pid *int
	var store, mode, cmode, creason, slot *string
	var retention, waits, server []byte
	// retention, capture_waits and server through to_jsonb: a catalog not
	// migrated to them yet (read by a process that does not migrate) reads
	// as none.
	err := q.QueryRow(ctx, `SELECT store_id, confirm_mode, capture_mode, capture_reason, slot_name,
		received_lsn::text, confirmed_lsn::text, runner_pid, heartbeat_at, started_at, to_jsonb(i) -> 'retention',
		to_jsonb(i) -> 'capture_waits', to_jsonb(i) -> 'server'
		FROM `+c.T("instance")+` i WHERE id = 1`).
		Scan(&store, &mode, &cmode, &creason, &slot, &recv, &conf, &pid, &in.HeartbeatAt, &in.StartedAt, &retention, &waits, &server)
	if err != nil {
		return nil, fmt.Errorf("read instance: %w", err)
	}
	if in.Server, err = decodeServer(server); err != nil {
		return nil, err
	}
	if len(waits) > 0 && string(waits) != "null" {
		in.CaptureWaits = waits
	}
	if len(retention) > 0 && string(retention) != "null" {
		in.Retention = new(Retention)
		if err := json.Unmarshal(retention, in.Retention); err != nil {
			return nil, fmt.Errorf("decode instance retention: %w", err)
		}
	}
	in.StoreID, in.ConfirmMode, in.CaptureMode, in.CaptureReason, in.SlotName =
		deref(store), deref(mode), deref(cmode), deref(creason), deref(slot)
	if pid != nil {
		in.RunnerPID = *pid
	}
	if recv != nil {
		if in.ReceivedLSN, err = ParseLSN(*recv); err != nil {
			return nil, err
		}
	}
	if conf != nil {
		if in.ConfirmedLSN, err = ParseLSN(*conf); err != nil {
			return nil, err
		}
	}
	return &in, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// StartInstance records a runner start.
func (c Catalog) StartInstance(ctx context.Context, q Querier, storeID, confirmMode, captureMode, reason, slot string) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("instance")+` SET store_id = $1, confirm_mode = $2, capture_mode = $3,
		capture_reason = $4, slot_name = $5, runner_pid = pg_backend_pid(), started_at = now(), heartbeat_at = now() WHERE id = 1`,
		storeID, confirmMode, captureMode, reason, slot)
	return err
}

// Heartbeat records the runner's positions and its retention guard's
// reading (nil: none).
func (c Catalog) Heartbeat(ctx context.Context, q Querier, received, confirmed uint64, retention *Retention) error {
	var r []byte
	if retention != nil {
		var err error
		if r, err = json.Marshal(retention); err != nil {
			return fmt.Errorf("encode retention: %w", err)
		}
	}
	_, err := q.Exec(ctx, `UPDATE `+c.T("instance")+` SET received_lsn = $1::pg_lsn, confirmed_lsn = $2::pg_lsn,
		retention = $3::jsonb, heartbeat_at = now() WHERE id = 1`, FormatLSN(received), FormatLSN(confirmed), r)
	if err != nil {
		return fmt.Errorf("record heartbeat: %w", err)
	}
	return nil
}

// SetCaptureWaits records the removals of capture waiting for a lock (v
// marshalled to a JSON array), or clears them (nil).
func (c Catalog) SetCaptureWaits(ctx context.Context, q Querier, v any) error {
	var b []byte
	if v != nil {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return fmt.Errorf("encode capture_waits: %w", err)
		}
	}
	if _, err := q.Exec(ctx, `UPDATE `+c.T("instance")+` SET capture_waits = $1::jsonb WHERE id = 1`, b); err != nil {
		return fmt.Errorf("record capture_waits: %w", err)
	}
	return nil
}

// ParseLSN parses PostgreSQL's X/Y text form.
func ParseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// FormatLSN renders an LSN in PostgreSQL's X/Y text form.
func FormatLSN(v uint64) string {
	return fmt.Sprintf("%X/%X", uint32(v>>32), uint32(v))
}
