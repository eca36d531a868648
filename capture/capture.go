// Package capture gets the changes of source tables into the runner's
// intake, by one of two paths behind one interface:
//
//	          logical (a slot)                         trigger (no slot)
//	source ──WAL──▶ walsender ──pgoutput──▶ decode ─┐   source ──statement triggers──▶ capture log
//	                                                │                                       │ drain
//	                                                ▼                                       ▼
//	                                    decode.Sink (the runner's intake) ◀──────────────────┘
//	                                                │ (table, key) per committed transaction
//	                                                ▼
//	                                    checkpoint store: dirty keys ──▶ workers re-derive
//
// Both paths deliver only which rows changed (table and primary key), in
// commit order, into the same decode.Sink; neither applies row images
// (docs/architecture.md §3.1). Capture never decides what a lost
// continuity means for a transform: it reports a Disruption and the
// runner pauses what it must (docs/architecture.md §3.9). This package
// never imports the root package.
package capture

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/decode"
)

// The capture modes a Capture implements (and the runner's --capture values
// besides auto).
const (
	ModeLogical = "logical"
	ModeTrigger = "trigger"
)

// Capture is one way of capturing changes: the runner prepares it once per
// run, installs it for the tables transforms read, removes it from tables
// nobody reads, and streams its changes into the intake.
type Capture interface {
	// Mode is ModeLogical or ModeTrigger.
	Mode() string
	// Prepare readies capture at the start of a run (publication and slot,
	// or the capture log) and says where it resumes and whether continuity
	// with the previous run was lost.
	Prepare(ctx context.Context, prev Continuity) (Prepared, error)
	// Install captures tables; when it returns, every change to them that
	// a later snapshot does not see will be delivered (the fence,
	// docs/architecture.md §3.5). Locks on the tables are waited for with
	// a short lock_timeout, retried; waiting is told meanwhile.
	Install(ctx context.Context, tables []Table, waiting WaitFunc) error
	// Retain removes capture from every table not in keep. Locks on the
	// tables are waited for with a short lock_timeout and never longer: a
	// removal that would wait is left for the next call, and waiting (when
	// not nil) is told of every removal so left, refreshed at each call.
	Retain(ctx context.Context, keep []Table, waiting RemovalsFunc) error
	// Stream delivers changes into sink until ctx ends (nil) or capture
	// fails for good. Continuity lost while streaming is reported to
	// disrupted, which pauses what it must, before capture starts again
	// from a new position.
	Stream(ctx context.Context, sink Sink, disrupted func(context.Context, Disruption) error) error
}

// Sink is where capture delivers changes: decode.Sink, and a way to make
// everything delivered so far durable. The trigger drain needs it before it
// deletes the rows it moved; the slot stream needs none (the slot keeps
// what is not confirmed, and the runner confirms only what its store made
// durable).
type Sink interface {
	decode.Sink
	// Sync returns once everything delivered before it is durable.
	Sync(ctx context.Context) error
}

// HealthFunc follows a capture's health: up once it streams (or drains),
// and down, with the error, each time an attempt fails.
type HealthFunc func(up bool, reason string)

// Table is a source table: its name, OID (changes are routed by it) and
// the key columns a change must carry, in the order capture reports them.
type Table struct {
	Schema, Name string
	OID          uint32
	Key          []string
}

// Ident is the table as a pgx identifier.
func (t Table) Ident() pgx.Identifier { return pgx.Identifier{t.Schema, t.Name} }

// Continuity is what the runner knows about the previous run.
type Continuity struct {
	// RanBefore: the instance has run before (it recorded a store).
	RanBefore bool
	// StoreLost: the local checkpoint store is not the one the previous
	// run used (lost, replaced, or a new one).
	StoreLost bool
	// ConfirmApplied: capture may release a change only once every
	// transform applied it (--confirm=applied).
	ConfirmApplied bool
	// Applied is the least position every live transform has applied up
	// to (0 when none is live). Under ConfirmApplied a lost store is
	// harmless only while capture still holds everything after it: keys
	// taken before the slot existed (trigger capture, before a switch to
	// logical) lived only in the store.
	Applied uint64
	// AppliedComplete: every live transform has recorded an applied
	// position (Applied is then what every one of them reached).
	AppliedComplete bool
	// Building: a transform is building (its build would restart).
	Building bool
	// Tables are the tables the transforms read: capture that cannot
	// work for them is refused before it creates anything (a slot).
	Tables []Table
	// Changed, when not "", says how the server is not the one the
	// instance last ran on (a promoted standby, a point-in-time restore, a
	// copy of the database; ADR 0039). The local store was discarded:
	// only what capture holds on this server, against what the catalog
	// says was applied, can keep continuity.
	Changed string
}

// Prepared is where capture stands after Prepare.
type Prepared struct {
	// Disruption is "" or the sentence saying how continuity was lost:
	// changes may have been missed, so the transforms must be rebuilt.
	Disruption string
	// RestartBuilds: builds in progress must restart (the store that held
	// their changes is gone but capture kept everything since what was
	// applied).
	RestartBuilds bool
	// Confirmed is the position capture has already released.
	Confirmed uint64
	// Slot names the replication slot ("" in trigger mode).
	Slot string
}

// Disruption is continuity lost while streaming.
type Disruption struct {
	// Reason is a sentence naming what was lost and why.
	Reason string
}

// Position is the durable received position of the local store: where
// capture resumes, advanced as changes are recorded.
type Position interface {
	ReceivedLSN() uint64
	AdvanceReceived(lsn uint64) error
	Flush() error
}

// Querier is what capture needs from a normal connection: *pgx.Conn,
// *pgxpool.Pool and pgx.Tx all fit.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner is a Querier that can start a transaction.
type Beginner interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}
