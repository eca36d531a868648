package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// textSettings pin the GUCs that change how values print and parse, so
// re-derived rows never depend on a session's defaults (see ADR 0001); a
// definition's recorded settings take their place (ADR 0037).
var textSettings = [][2]string{
	{"DateStyle", "ISO, MDY"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "1"},
	{"bytea_output", "hex"},
}

// sessionSettings are every applier session's settings: the text ones,
// and those of a session that re-derives in short statements.
var sessionSettings = append(append([][2]string{}, textSettings...), [][2]string{
	{"statement_timeout", "0"},
	{"lock_timeout", "0"},
	{"idle_in_transaction_session_timeout", "0"},
	// A batch touches few rows of large tables through their keys, and the
	// tables change size between batches: plan every batch afresh, and
	// price index probes as cached data (see ADR 0003).
	{"plan_cache_mode", "force_custom_plan"},
	{"random_page_cost", "1.1"},
	// JIT compiles each statement anew (custom plans): ~1 s per batch.
	{"jit", "off"},
}...)

// Applier re-derives keys of one transform. It works on a Session it is
// attached to for a turn (Attach), or on one of its own (NewApplier).
// Exactly one Applier writes a transform's target and ledger
// (docs/architecture.md §3.8).
type Applier struct {
	ID    int64
	Plan  *Plan
	Stmts *Statements
	cat   catalog.Catalog
	log   *slog.Logger
	// conn is the attached session's connection (nil when detached);
	// owned is the session NewApplier opened for this applier alone.
	conn    *pgx.Conn
	session *Session
	owned   *Session

	// LedgerOnly, set by the worker while an aggregate's fresh build runs,
	// leaves the target alone: the apply writes the ledger only, and the
	// build ends with Reconcile (ADR 0022). Nothing for row transforms.
	LedgerOnly bool

	// stale is the planted stale_read bug's side session (test builds).
	stale *staleReader
	// scoped counts the keys the applier's committed batches re-derived
	// (Scoped).
	scoped int64
}

// Scoped is the number of source keys the applier's committed batches
// re-derived: their changed keys, with the keys outer joins and narrowed
// scalars added to a lineage scope (Step.Scope).
func (a *Applier) Scoped() int64 { return a.scoped }

// NewApplier opens a session of the applier's own and attaches to it:
// for a process that re-derives one transform (a self-check's repair, a
// test). Close ends the session.
func NewApplier(ctx context.Context, cfg *pgx.ConnConfig, cat catalog.Catalog, id int64, p *Plan, log *slog.Logger) (*Applier, error) {
	s, err := OpenSession(ctx, cfg, fmt.Sprintf("trellis-repl applier %s", p.Target.Name))
	if err != nil {
		return nil, fmt.Errorf("connect applier for %s: %w", p.Target.Name, err)
	}
	a := NewDetachedApplier(cat, id, p, s.Version(), log)
	a.owned = s
	if err := a.Attach(ctx, s); err != nil {
		s.Close(ctx)
		return nil, err
	}
	return a, nil
}

// NewDetachedApplier is transform id's applier without a session: Attach
// gives it one for a turn. version is the server's (Session.Version).
func NewDetachedApplier(cat catalog.Catalog, id int64, p *Plan, version int, log *slog.Logger) *Applier {
	st := BuildStatements(p, version)
	st.forTransform(id)
	return &Applier{ID: id, Plan: p, Stmts: st, cat: cat, log: log}
}

// Attach gives the applier session s until Detach, preparing s for its
// transform (search_path, temporary tables) where it is not already.
func (a *Applier) Attach(ctx context.Context, s *Session) error {
	if err := s.prepare(ctx, a); err != nil {
		return err
	}
	if plant.Active(plant.StaleRead) && a.stale == nil {
		// The planted bug's side session is outside any budget: test
		// builds only.
		side, err := pgx.ConnectConfig(ctx, s.cfg)
		if err != nil {
			return err
		}
		a.stale = &staleReader{conn: side}
	}
	a.session, a.conn = s, s.conn
	return nil
}

// clear empties the applier's temporary tables at the start of tx: a
// committed transaction leaves its rows there (Statements.Clear).
func (a *Applier) clear(ctx context.Context, tx pgx.Tx) error {
	if a.Stmts.Clear == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, a.Stmts.Clear); err != nil {
		return fmt.Errorf("empty the temporary tables of %s: %w", a.Plan.Target.Name, err)
	}
	return nil
}

// Detach ends the applier's turn on its session.
func (a *Applier) Detach() { a.session, a.conn = nil, nil }

// Close ends the session NewApplier opened (and the planted bug's side
// session); an applier attached to a lent session leaves it open.
func (a *Applier) Close(ctx context.Context) error {
	if a.stale != nil {
		a.stale.conn.Close(ctx)
	}
	if a.owned != nil {
		return a.owned.Close(ctx)
	}
	return nil
}

// staleReader plants the stale_read bug: each apply transaction reads the
// snapshot exported before the previous batch committed.
type staleReader struct {
	conn *pgx.Conn
	snap string
}

// begin starts the apply transaction on the previous snapshot and exports a
// new one for the next batch.
func (s *staleReader) begin(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, err
	}
	if s.snap != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+s.snap+"'"); err != nil {
			tx.Rollback(ctx)
			return nil, err
		}
	}
	s.snap = ""
	if _, err := s.conn.Exec(ctx, "ROLLBACK"); err != nil {
		tx.Rollback(ctx)
		return nil, err
	}
	if _, err := s.conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		tx.Rollback(ctx)
		return nil, err
	}
	if err := s.conn.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&s.snap); err != nil {
		tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// Conn exposes the applier's connection for build enumeration.
func (a *Applier) Conn() *pgx.Conn { return a.conn }

// Batch is one unit of work for Apply.
type Batch struct {
	// Keys are the dirty keys of each source, in Plan.Sources order:
	// Keys[i][r] is one key of source i as text values in its key order.
	Keys [][][]string
	// Xids are 32-bit xids of slot transactions whose effects the keys must
	// reflect: the snapshot must see them before re-deriving.
	Xids []uint32
	// AppliedLSN, when non-zero, is recorded as the transform's applied
	// position in the same transaction.
	AppliedLSN uint64
	// Extra runs inside the transaction after the writes (e.g. build cursor).
	Extra func(ctx context.Context, tx pgx.Tx) error
	// Stale, when set, receives the keys (per source, as Keys) of rows
	// whose answers a dependency level did not store yet in the apply's
	// snapshot: they must be re-derived again (ADR 0043). It is called in
	// the transaction, before Extra (which may record them with the
	// apply), and they count only once Apply returns nil.
	Stale func(keys [][][]string)
}

// Apply re-derives one batch in one transaction and returns the number of
// target and ledger row writes it made.
func (a *Applier) Apply(ctx context.Context, b Batch) (int64, error) {
	begin := a.conn.Begin
	// A plan whose answers are checked against its dependency levels
	// re-derives and checks in one snapshot (ADR 0043), taken after the
	// visibility wait.
	checked := a.Stmts.Stale != ""
	if checked {
		begin = func(ctx context.Context) (pgx.Tx, error) {
			return a.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		}
	}
	if a.stale != nil {
		begin = func(ctx context.Context) (pgx.Tx, error) { return a.stale.begin(ctx, a.conn) }
	}
	wait := len(b.Xids) > 0 && !plant.Active(plant.SkipVisibilityWait)
	if wait && checked {
		if err := waitVisible(ctx, a.conn, b.Xids); err != nil {
			return 0, err
		}
		wait = false
	}
	tx, err := begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin apply: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := a.clear(ctx, tx); err != nil {
		return 0, err
	}
	if wait {
		if err := waitVisible(ctx, tx, b.Xids); err != nil {
			return 0, err
		}
	}
	n := 0
	for _, ks := range b.Keys {
		n += len(ks)
	}
	var written, scope int64
	var stale [][][]string
	if n > 0 {
		if written, scope, err = a.rederive(ctx, tx, b.Keys); err != nil {
			return 0, err
		}
		if checked {
			if stale, err = a.staleKeys(ctx, tx); err != nil {
				return 0, err
			}
		}
	}
	if len(stale) > 0 && b.Stale != nil {
		b.Stale(stale)
	}
	if err := a.cat.RecordProgress(ctx, tx, a.ID, b.AppliedLSN, int64(n)); err != nil {
		return 0, err
	}
	if b.Extra != nil {
		if err := b.Extra(ctx, tx); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit apply of %s: %w", a.Plan.Target.Name, err)
	}
	a.scoped += scope
	return written, nil
}

// staleKeys runs the dependency check (Statements.Stale) and returns the
// keys of the rows it flags, per source (none of a dependency level).
func (a *Applier) staleKeys(ctx context.Context, tx pgx.Tx) ([][][]string, error) {
	rows, err := tx.Query(ctx, a.Stmts.Stale)
	if err != nil {
		return nil, fmt.Errorf("check %s's answers against its dependency levels: %w", a.Plan.Target.Name, err)
	}
	keys, err := scanSourceKeys(rows, len(a.Plan.Sources))
	if err != nil {
		return nil, fmt.Errorf("check %s's answers against its dependency levels: %w", a.Plan.Target.Name, err)
	}
	return keys, nil
}

// rederive runs the apply statements for the batch's keys and returns the
// number of target and ledger rows written and of keys re-derived.
func (a *Applier) rederive(ctx context.Context, tx pgx.Tx, keys [][][]string) (written, scope int64, err error) {
	batch := &pgx.Batch{}
	var ints []int64
	if a.Plan.Multi() {
		for i, ks := range a.plantKeys(keys) {
			if len(ks) > 0 {
				batch.Queue(a.Stmts.LoadSource[i], textColumns(ks, len(a.Plan.Sources[i].Key))...)
			}
		}
		for _, st := range a.Stmts.Analyze {
			batch.Queue(st)
		}
	} else {
		var one [][]string
		if len(keys) > 0 {
			one = keys[0]
		}
		scope = int64(len(one))
		if a.Stmts.IntKey {
			if ints, err = sortedInts(one); err != nil {
				return 0, 0, err
			}
		}
		if a.Stmts.LoadKeys != "" {
			if err := a.queueKeys(batch, one, ints); err != nil {
				return 0, 0, err
			}
		}
	}
	steps := a.steps()
	if a.Plan.Multi() {
		// Narrowed scalars run once, on the loaded keys (narrow.go); the
		// outer-join widening then runs to a fixpoint before the rest: a
		// key it adds may itself have changed in this snapshot (its change
		// still on its way in a later batch), and then it widens the scope
		// too (ADR 0010).
		var first, widen, rest []Step
		for _, st := range steps {
			switch st.Role {
			case RoleNarrow:
				first = append(first, st)
			case RoleExpand:
				widen = append(widen, st)
			default:
				rest = append(rest, st)
			}
		}
		steps = rest
		if len(first) > 0 || len(widen) > 0 {
			sent, err := a.send(ctx, tx, batch, first, ints)
			if err != nil {
				return 0, 0, err
			}
			scope += sent.scoped
			batch = &pgx.Batch{}
		}
		for round := 0; len(widen) > 0; round++ {
			if round == maxWidenRounds {
				return 0, 0, fmt.Errorf("re-derive %s: the outer-join scope still grows after %d rounds", a.Plan.Target.Name, round)
			}
			sent, err := a.send(ctx, tx, &pgx.Batch{}, widen, ints)
			if err != nil {
				return 0, 0, err
			}
			scope += sent.scoped
			if sent.widened == 0 {
				break
			}
		}
	}
	sent, err := a.send(ctx, tx, batch, steps, ints)
	return sent.written, scope + sent.scoped, err
}

// maxWidenRounds bounds the outer-join widening: each round adds keys of
// rows joined to the last round's, so a chain of FULL joins through n
// rows needs about n rounds.
const maxWidenRounds = 10000

// sent is what send counts: the rows written to the target and ledger,
// the keys the widening steps added, and the keys the lineage scope
// gained, its loads included (Step.Scope).
type sent struct{ written, widened, scoped int64 }

// send runs the statements queued in batch, then steps, in one round
// trip, and counts what they did.
func (a *Applier) send(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, steps []Step, ints []int64) (out sent, err error) {
	queued := batch.Len()
	for _, st := range steps {
		switch {
		case st.KeyArgs:
			batch.Queue(st.SQL, ints, ints[0], ints[len(ints)-1])
		case st.BoundArgs:
			batch.Queue(st.SQL, ints[0], ints[len(ints)-1])
		default:
			batch.Queue(st.SQL)
		}
	}
	if batch.Len() == 0 {
		return sent{}, nil
	}
	br := tx.SendBatch(ctx, batch)
	for range queued {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return sent{}, fmt.Errorf("load keys: %w", err)
		}
		if a.Plan.Multi() {
			out.scoped += tag.RowsAffected() // the key tables' loads (ANALYZE: 0)
		}
	}
	changes := int64(-1)
	for i, st := range steps {
		if st.Role == RoleRows || st.Counted {
			var n int64
			if err := br.QueryRow().Scan(&n); err != nil {
				br.Close()
				return sent{}, fmt.Errorf("re-derive %s (step %d): %w", a.Plan.Target.Name, i+1, err)
			}
			if st.Counted {
				out.scoped += n
			} else {
				out.written += n
			}
			continue
		}
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return sent{}, fmt.Errorf("re-derive %s (step %d): %w", a.Plan.Target.Name, i+1, err)
		}
		if st.ExpectChanges && changes >= 0 && tag.RowsAffected() != changes {
			br.Close()
			return sent{}, fmt.Errorf("re-derive %s (step %d): the ledger changed under the apply: %d of %d changed rows written",
				a.Plan.Target.Name, i+1, tag.RowsAffected(), changes)
		}
		out.scoped += int64(st.Scope) * tag.RowsAffected()
		switch st.Role {
		case RoleScope, RolePlanner, RoleNarrow:
		case RoleExpand:
			out.widened += tag.RowsAffected()
		case RoleChanges:
			changes = tag.RowsAffected()
			out.written += changes
		default:
			out.written += tag.RowsAffected()
		}
	}
	if err := br.Close(); err != nil {
		return sent{}, fmt.Errorf("re-derive %s: %w", a.Plan.Target.Name, err)
	}
	return out, nil
}

// textColumns turns keys of n columns into one text[] argument per column.
func textColumns(keys [][]string, n int) []any {
	cols := make([][]string, n)
	for i := range cols {
		cols[i] = make([]string, len(keys))
	}
	for r, k := range keys {
		for i := 0; i < n && i < len(k); i++ {
			cols[i][r] = k[i]
		}
	}
	args := make([]any, n)
	for i := range cols {
		args[i] = cols[i]
	}
	return args
}

// queueKeys queues the statements that fill the key table (and the bounds
// table) with a batch's keys: ints under IntKey, else the text values.
func (a *Applier) queueKeys(batch *pgx.Batch, keys [][]string, ints []int64) error {
	if a.Stmts.IntKey {
		batch.Queue(a.Stmts.LoadKeys, ints)
	} else {
		nk := len(a.Plan.Sources[0].Key)
		for _, k := range keys {
			if len(k) != nk {
				return fmt.Errorf("key %v has %d values, want %d", k, len(k), nk)
			}
		}
		batch.Queue(a.Stmts.LoadKeys, textColumns(keys, nk)...)
	}
	// Real row counts for the key table: unanalyzed, the planner assumes
	// thousands of keys and scans whole tables to re-derive a few (80x
	// slower for 30 keys of a 100k-row table).
	batch.Queue(a.Stmts.AnalyzeKeys)
	if a.Stmts.LoadBounds != "" {
		batch.Queue(a.Stmts.LoadBounds)
	}
	return nil
}

// sortedInts parses a batch of one-column integer keys, sorted and
// without duplicates (IntKey): the statements that read them as an array
// neither cast nor de-duplicate, and take the first and last as bounds.
func sortedInts(keys [][]string) ([]int64, error) {
	out := make([]int64, 0, len(keys))
	for _, k := range keys {
		if len(k) != 1 {
			return nil, fmt.Errorf("key %v has %d values, want 1", k, len(k))
		}
		v, err := strconv.ParseInt(k[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("integer key %q: %w", k[0], err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// steps are the apply statements to run; planted bugs (test builds only)
// leave some out.
func (a *Applier) steps() []Step {
	all := a.Stmts.Apply
	if a.LedgerOnly && a.Plan.Ledger != nil {
		all = ledgerOnlySteps(all)
	}
	if !plant.Enabled {
		return all
	}
	out := make([]Step, 0, len(all))
	for _, st := range all {
		if st.Role == RoleLedger && plant.Active(plant.SkipLedgerUpdate) ||
			st.Role == RoleEmptyGroups && plant.Active(plant.KeepEmptyGroup) ||
			st.Role == RoleExpand && plant.Active(plant.IgnoreLeftJoinNulls) {
			continue
		}
		if st.EmptyClause != "" && plant.Active(plant.KeepEmptyGroup) {
			st.SQL = strings.Replace(st.SQL, st.EmptyClause, "", 1)
		}
		out = append(out, st)
	}
	return out
}

// ledgerOnlySteps are the steps of an aggregate's apply that bring its
// ledger up to date: the scope, the changes and the ledger writes, without
// the target's (LedgerOnly). The narrowed scalars' steps stay: they record
// the level's row the later steps read in its place (narrow.go), and a
// build that read an empty applied table would take every row's scalar as
// missing, a move the first batch after it cannot see.
func ledgerOnlySteps(steps []Step) []Step {
	var out []Step
	for _, st := range steps {
		switch st.Role {
		case RoleNarrow, RoleScope, RoleExpand, RoleChanges, RoleLedger, RolePlanner:
			out = append(out, st)
		}
	}
	return out
}

// ClearAggregate empties an aggregate's target, state and ledger and runs
// then (the build's restart) in the same transaction, so that a build can
// start over (ADR 0022's fallback); join mirrors are left, the scope keeps
// them exact either way.
func (a *Applier) ClearAggregate(ctx context.Context, then func(context.Context, pgx.Tx) error) error {
	if a.Plan.Ledger == nil {
		return nil
	}
	tables := []string{a.Plan.Target.Ident(), a.Plan.Ledger.Ident()}
	if a.Plan.State != nil {
		tables = append(tables, a.Plan.State.Ident())
	}
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")); err != nil {
		return fmt.Errorf("empty %s to build it again: %w", a.Plan.Target.Name, err)
	}
	if err := then(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// plantKeys drops the keys of every source but the first under the planted
// skip_dimension_change bug (test builds only).
func (a *Applier) plantKeys(keys [][][]string) [][][]string {
	if !plant.Enabled || !plant.Active(plant.SkipDimensionChange) || len(keys) < 2 {
		return keys
	}
	return keys[:1]
}

// visibleSQL returns the xids (of those given) that the statement's snapshot
// does not see yet. A 32-bit xid is widened to the full xid8 nearest the
// snapshot's xmax: a transaction the slot decoded is recent, but it may be
// at or past xmax while its commit is in flight, so "the epoch of xmax, or
// the one before" would be wrong there (see ADR 0002).
const visibleSQL = `
SELECT x FROM unnest($1::bigint[]) AS x,
  (SELECT pg_current_snapshot() AS s) sn,
  LATERAL (SELECT pg_snapshot_xmax(sn.s)::text::bigint AS m) mx
WHERE NOT pg_visible_in_snapshot(
  (mx.m + (((((x - (mx.m & 4294967295)) % 4294967296) + 4294967296 + 2147483648) % 4294967296) - 2147483648))::text::xid8,
  sn.s)`

// waitVisible blocks until a statement snapshot of tx sees every xid. In READ
// COMMITTED each later statement's snapshot sees at least as much.
func waitVisible(ctx context.Context, tx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, xids []uint32) error {
	arg := make([]int64, len(xids))
	for i, x := range xids {
		arg[i] = int64(x)
	}
	delay := time.Millisecond
	for {
		rows, err := tx.Query(ctx, visibleSQL, arg)
		if err != nil {
			return fmt.Errorf("check visibility: %w", err)
		}
		var pending []int64
		for rows.Next() {
			var x int64
			if err := rows.Scan(&x); err != nil {
				rows.Close()
				return err
			}
			pending = append(pending, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("check visibility: %w", err)
		}
		if len(pending) == 0 {
			return nil
		}
		arg = pending
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

// VisibleNow returns which xids a new snapshot sees (used to prune the
// store's visibility list without opening an apply transaction).
func VisibleNow(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, xids []uint32) (map[uint32]bool, error) {
	arg := make([]int64, len(xids))
	for i, x := range xids {
		arg[i] = int64(x)
	}
	rows, err := q.Query(ctx, visibleSQL, arg)
	if err != nil {
		return nil, fmt.Errorf("check visibility: %w", err)
	}
	defer rows.Close()
	out := make(map[uint32]bool, len(xids))
	for _, x := range xids {
		out[x] = true
	}
	for rows.Next() {
		var x int64
		if err := rows.Scan(&x); err != nil {
			return nil, err
		}
		out[uint32(x)] = false
	}
	return out, rows.Err()
}

// Reconcile makes an aggregate target exactly the aggregation of its
// ledger, in one transaction (no-op for row transforms, whose target is
// their ledger).
func (a *Applier) Reconcile(ctx context.Context) error {
	if len(a.Stmts.Reconcile) == 0 {
		return nil
	}
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := a.clear(ctx, tx); err != nil {
		return err
	}
	for _, s := range a.Stmts.Reconcile {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("reconcile %s with its ledger: %w", a.Plan.Target.Name, err)
		}
	}
	return tx.Commit(ctx)
}

// AnalyzeStored gathers statistics on the tables the applier writes
// (target, ledger, state, join mirrors) once a build has filled them:
// created empty, they would otherwise be planned as empty until
// autovacuum gets to them, and a batch would scan them whole.
func (a *Applier) AnalyzeStored(ctx context.Context) error {
	tables := []string{a.Plan.Target.Ident()}
	if a.Plan.Ledger != nil {
		tables = append(tables, a.Plan.Ledger.Ident())
	}
	if a.Plan.State != nil {
		tables = append(tables, a.Plan.State.Ident())
	}
	for _, oj := range a.Plan.Outer {
		if oj.Mirror != nil {
			tables = append(tables, oj.Mirror.Ident())
		}
	}
	for _, t := range tables {
		if _, err := a.conn.Exec(ctx, "ANALYZE "+t); err != nil {
			return fmt.Errorf("analyze %s: %w", t, err)
		}
	}
	return nil
}

// EnsureGroupIndex makes the ledger's group-key index if the plan defers
// it (ADR 0025) and it does not exist yet: a fresh build fills the ledger
// without it, since only the recompute steps a ledger-only build skips
// read the ledger by group. Call it before any apply that is not
// ledger-only.
func (a *Applier) EnsureGroupIndex(ctx context.Context) error {
	if !a.Plan.GroupIndexLater {
		return nil
	}
	if ddl := a.Plan.groupIndexDDL(); ddl != "" {
		if _, err := a.conn.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("index the ledger %s by group: %w", a.Plan.Ledger.Ident(), err)
		}
	}
	return nil
}

// Phases is the number of build phases: the cover sources' keys, then,
// for a rebuild, the keys the stored rows hold (ADR 0010).
func (a *Applier) Phases() (build, rebuild int) {
	for _, e := range a.Stmts.Enum {
		if !e.Stored {
			build++
		}
	}
	return build, len(a.Stmts.Enum)
}

// Enumerate lists up to limit keys after cursor (nil = from the start) of
// build phase phase, and the source they are keys of.
func (a *Applier) Enumerate(ctx context.Context, phase int, cursor []string, limit int) (int, [][]string, error) {
	if phase < 0 || phase >= len(a.Stmts.Enum) {
		return 0, nil, fmt.Errorf("enumerate keys of %s: no build phase %d", a.Plan.Target.Name, phase)
	}
	e := a.Stmts.Enum[phase]
	sql, args := e.First, []any{limit}
	if cursor != nil {
		sql = e.After
		args = args[:0]
		for _, c := range cursor {
			args = append(args, c)
		}
		args = append(args, limit)
	}
	rows, err := a.conn.Query(ctx, sql, args...)
	if err != nil {
		return 0, nil, fmt.Errorf("enumerate keys of %s: %w", a.Plan.Target.Name, err)
	}
	out, err := scanKeys(rows)
	return e.Source, out, err
}

// scanKeys reads rows of key values cast to text.
func scanKeys(rows pgx.Rows) ([][]string, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]string, error) {
		k := make([]string, len(row.FieldDescriptions()))
		ptrs := make([]any, len(k))
		for i := range k {
			ptrs[i] = &k[i]
		}
		return k, row.Scan(ptrs...)
	})
}

// scanSourceKeys reads rows of (source index, key as text[]) into a
// Batch's per-source key lists (of sources sources); nil when there are
// none. As scanKeys, every value is text: the SQL leaves out NULL keys.
func scanSourceKeys(rows pgx.Rows, sources int) ([][][]string, error) {
	type sourceKey struct {
		src int
		key []string
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (sourceKey, error) {
		var k sourceKey
		return k, row.Scan(&k.src, &k.key)
	})
	if err != nil || len(got) == 0 {
		return nil, err
	}
	out := make([][][]string, sources)
	for _, k := range got {
		if k.src < 0 || k.src >= sources {
			return nil, fmt.Errorf("key of source %d, of a plan of %d sources", k.src, sources)
		}
		out[k.src] = append(out[k.src], k.key)
	}
	return out, nil
}

// KeysOf places keys of source i in a Batch's per-source key list.
func (a *Applier) KeysOf(i int, keys [][]string) [][][]string {
	out := make([][][]string, len(a.Plan.Sources))
	out[i] = keys
	return out
}
