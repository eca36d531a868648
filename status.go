package trellis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/pipeline"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// Failure is why a transform was paused by the system.
type Failure = catalog.Failure

// CaptureWait describes an install of capture waiting for a lock on a
// source table (a transform's capture_wait), or a removal of capture
// waiting for one on a table no transform reads any more (the runner's
// capture_waits): table, operation (install or uninstall), lock mode,
// since when, and the sessions holding the lock (nothing is cancelled; the
// wait ends when they let go).
type CaptureWait = capture.Wait

// CaptureBlocker is a session holding a lock a CaptureWait waits for: pid,
// application name, state, query start and query, from pg_stat_activity.
type CaptureBlocker = capture.Blocker

// DrainFailure describes applying changes that keeps failing with nothing
// to blame (retried with capped backoff; cleared once a batch applies).
type DrainFailure = catalog.DrainFailure

// BackfillFailure describes a build that keeps failing.
type BackfillFailure = catalog.BackfillFailure

// Retention is the replication slot's retained WAL against the runner's
// --max-retained-wal (Config.MaxRetainedWAL) as the runner last read it:
// retained_bytes, limit_bytes, over_limit and since (when it went over;
// null while under). The runner records it with its heartbeat; absent
// (null) when no limit is set or capture has no slot.
type Retention = catalog.Retention

// HeldKeys are the keys a transform holds in quarantine (their re-derive
// kept failing on row data; ADR 0013): how many, and when the one held
// longest was last poisoned. HeldKeysPage lists them.
type HeldKeys struct {
	Count            int64     `json:"count"`
	OldestPoisonedAt time.Time `json:"oldest_poisoned_at"`
}

// CorrectingNode is a partition whose rows a transform re-derives because
// it was attached to or detached from a partitioned source (ADR 0015):
// the table, since when, and the keys still to re-derive (an estimate
// from the table's statistics, counted down; null when unknown).
type CorrectingNode struct {
	Node          string    `json:"node"`
	Kind          string    `json:"kind"`
	Since         time.Time `json:"since"`
	KeysRemaining *int64    `json:"keys_remaining"`
}

// StateDisrupted is the state status reports, instead of the catalog's, for
// a transform that is not frozen while the server is not the one the
// runner last started on (a promoted standby, a restore, a copy of the
// database; ADR 0039) and no runner has started here since: its target may
// disagree with its query. It is never stored: the runner's next start
// pauses or repairs the transform.
const StateDisrupted = "disrupted"

// The actions of DisruptionStatus.
const (
	// DisruptionPaused: paused until RESUME TRANSFORM (or RESUME TRANSFORM ALL).
	DisruptionPaused = "paused"
	// DisruptionRepairing: rebuilding in place (--on-disruption=repair, or
	// after RESUME).
	DisruptionRepairing = "repairing"
	// DisruptionUnseen: no runner has started on this server since it
	// changed; the next start pauses or repairs the transform.
	DisruptionUnseen = "awaiting_runner"
)

// DisruptionStatus is why a transform's target may disagree with its query
// (ADR 0039): lost continuity — a slot or store lost, a failover, a
// point-in-time restore, a copy of the database — said as a sentence,
// since when, and what is being done about it (DisruptionPaused,
// DisruptionRepairing, DisruptionUnseen). It stays until the transform is
// live again.
type DisruptionStatus struct {
	Reason     string     `json:"reason"`
	DetectedAt *time.Time `json:"detected_at"`
	Action     string     `json:"action"`
}

// TransformStatus is one transform's state as every process sees it.
// Absent parts are nil (JSON null).
type TransformStatus struct {
	Name            string           `json:"name"`
	Schema          string           `json:"schema"`
	Shape           string           `json:"shape"`
	State           string           `json:"state"`
	PausedBy        *string          `json:"paused_by"`
	CaptureFailure  *Failure         `json:"capture_failure"`
	BackfillFailure *BackfillFailure `json:"backfill_failure"`
	CaptureWait     *CaptureWait     `json:"capture_wait"`
	DrainFailure    *DrainFailure    `json:"drain_failure"`
	HeldKeys        *HeldKeys        `json:"held_keys"`
	// KeysWaiting is the backlog of changed keys not yet re-derived, as
	// the runner last counted it.
	KeysWaiting     int64             `json:"keys_waiting"`
	SourceIndexGaps []engine.IndexGap `json:"source_index_gaps"`
	CorrectingNodes []CorrectingNode  `json:"correcting_nodes"`
	CaptureMode     *string           `json:"capture_mode"`
	// CaptureReason says why the runner chose CaptureMode.
	CaptureReason *string    `json:"capture_reason"`
	SlotName      *string    `json:"slot_name"`
	AppliedLSN    string     `json:"applied_lsn"`
	AppliedAt     *time.Time `json:"applied_at"`
	LagBytes      *int64     `json:"lag_bytes"`
	// LagSeconds is, while keys wait, how long ago the transform last
	// recorded progress (now − applied_at, by the server's clock); 0 when
	// no key waits, null before any progress. It says how long a backlog
	// has gone unapplied, not how old its oldest change is (the metric
	// trellis_apply_lag_seconds does).
	LagSeconds     *float64  `json:"lag_seconds"`
	KeysApplied    int64     `json:"keys_applied"`
	Target         string    `json:"target"`
	Source         string    `json:"source"`
	StateChangedAt time.Time `json:"state_changed_at"`
	// Replaces names the transform a redefinition in progress will
	// replace once live; NotCarried is what the last swap did not carry
	// over (grants, indexes, views).
	Replaces   *string  `json:"replaces"`
	NotCarried []string `json:"not_carried"`
	// Owner names the transform this one is an inner level of (ADR 0018:
	// kept for a derived table in the owner's FROM that aggregates); it
	// changes only with its owner.
	Owner *string `json:"owner"`
	// Runner says whether a runner maintains the instance now and when it
	// last made progress: a live state with no runner attached is stale.
	Runner *RunnerStatus `json:"runner"`
	// Build is the progress of the transform's last build (null when it
	// has not built since the catalog records builds).
	Build *BuildProgress `json:"build"`
	// Disruption says why the target may disagree with its query, from a
	// loss of continuity until the transform is live again (null otherwise).
	Disruption *DisruptionStatus `json:"disruption"`
}

// Status reports every transform, or only those named. It reads the
// whole instance in a fixed number of statements, whatever the number of
// transforms (status of 1,000 transforms answers within a second, issue
// 25): nothing is read per transform.
func (t *Trellis) Status(ctx context.Context, names ...string) ([]TransformStatus, error) {
	var out []TransformStatus
	err := t.bounded(ctx, "Status", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, err = t.status(ctx, tx, names)
		return err
	})
	return out, err
}

// status is Status in the call's transaction.
func (t *Trellis) status(ctx context.Context, q pgx.Tx, names []string) ([]TransformStatus, error) {
	ts, err := t.cat.ListCached(ctx, q, &t.planBytes)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	inst, err := t.cat.GetInstance(ctx, q)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	runner, err := t.runnerStatus(ctx, q, inst)
	if err != nil {
		return nil, err
	}
	var cur string
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, now()`).Scan(&cur, &now); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "read WAL position: %v", err)
	}
	curLSN, _ := catalog.ParseLSN(cur)
	// A server other than the one the runner last started on (no runner
	// started here since): nothing the catalog says live can be trusted.
	moved, err := pipeline.ServerDiffers(ctx, q, inst.Server)
	if err != nil {
		return nil, err
	}
	held, err := t.cat.HeldCounts(ctx, q)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	corr, err := t.cat.Corrections(ctx, q, 0)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	byID := make(map[int64]*catalog.Transform, len(ts))
	for _, tr := range ts {
		byID[tr.ID] = tr
	}
	correcting := map[int64][]CorrectingNode{}
	for _, k := range corr {
		correcting[k.TransformID] = append(correcting[k.TransformID], CorrectingNode{Node: k.Node, Kind: k.Kind, Since: k.Since, KeysRemaining: k.KeysRemaining})
	}
	// The plans of the transforms reported, and the indexes of every
	// table they probe, read at once.
	plans := map[int64]*engine.Plan{}
	var probed []uint32
	for _, tr := range ts {
		if len(want) > 0 && !want[tr.Name] {
			continue
		}
		if p, err := engine.Decode(tr.Plan); err == nil {
			plans[tr.ID] = p
			for _, pr := range p.Probes {
				probed = append(probed, p.Sources[pr.Source].OID)
			}
		}
	}
	leading, err := engine.LeadingIndexColumns(ctx, q, probed)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	out := []TransformStatus{}
	for _, tr := range ts {
		if len(want) > 0 && !want[tr.Name] {
			continue
		}
		s := TransformStatus{Name: tr.Name, Schema: tr.Schema, Shape: tr.Shape, State: tr.State,
			CaptureFailure: tr.CaptureFailure, BackfillFailure: tr.BackfillFailure, DrainFailure: tr.DrainFailure, KeysWaiting: tr.KeysWaiting,
			AppliedLSN: catalog.FormatLSN(tr.AppliedLSN), AppliedAt: tr.AppliedAt, KeysApplied: tr.KeysApplied,
			Source: tr.SourceTable, StateChangedAt: tr.StateChangedAt, SourceIndexGaps: []engine.IndexGap{}, CorrectingNodes: []CorrectingNode{},
			Runner: runner, Build: pipeline.BuildProgressOf(tr.Build)}
		if p := plans[tr.ID]; p != nil {
			s.Target = p.Target.Ident()
			s.SourceIndexGaps = engine.GapsOf(p, leading)
		}
		if tr.PausedBy != "" {
			pb := tr.PausedBy
			s.PausedBy = &pb
		}
		s.NotCarried = tr.ReplaceNotes
		if o := byID[tr.Replaces]; o != nil && tr.Replaces != 0 {
			n := o.Name
			s.Replaces = &n
		}
		if o := byID[tr.Owner]; o != nil && tr.Owner != 0 {
			n := o.Name
			s.Owner = &n
		}
		if len(tr.CaptureWait) > 0 {
			s.CaptureWait = new(CaptureWait)
			if err := json.Unmarshal(tr.CaptureWait, s.CaptureWait); err != nil {
				return nil, fmt.Errorf("decode capture_wait of %s: %w", tr.Name, err)
			}
		}
		if c := correcting[tr.ID]; len(c) > 0 {
			s.CorrectingNodes = c
		}
		if h, ok := held[tr.ID]; ok {
			s.HeldKeys = &HeldKeys{Count: h.Count, OldestPoisonedAt: h.Oldest}
		}
		if inst.CaptureMode != "" {
			m, why := inst.CaptureMode, inst.CaptureReason
			s.CaptureMode, s.CaptureReason = &m, &why
			if inst.SlotName != "" {
				sl := inst.SlotName
				s.SlotName = &sl
			}
		}
		s.Disruption = disruptionOf(tr, moved)
		if moved != "" && !catalog.Frozen(tr.State) && tr.Disruption == nil {
			s.State = StateDisrupted
		}
		if tr.AppliedLSN > 0 && curLSN >= tr.AppliedLSN {
			lag := int64(curLSN - tr.AppliedLSN)
			s.LagBytes = &lag
		}
		if tr.AppliedAt != nil {
			var secs float64
			if tr.KeysWaiting > 0 {
				secs = max(0, now.Sub(*tr.AppliedAt).Seconds())
			}
			s.LagSeconds = &secs
		}
		out = append(out, s)
	}
	if len(want) > 0 && len(out) < len(want) {
		found := map[string]bool{}
		for _, s := range out {
			found[s.Name] = true
		}
		for _, n := range names {
			if !found[n] {
				return nil, terr.New(terr.NotFound, "transform %q does not exist; run `trellis-repl status` to list transforms", n)
			}
		}
	}
	return out, nil
}

// disruptionOf is what status says of a transform's disruption: the one
// the catalog keeps (a runner starting on a new server records the
// disruption before the server), else, when the server is not the one the
// runner last started on (moved, a sentence), that one.
func disruptionOf(tr *catalog.Transform, moved string) *DisruptionStatus {
	d := tr.Disruption
	if d == nil && moved != "" {
		return &DisruptionStatus{Reason: moved, Action: DisruptionUnseen}
	}
	if d == nil {
		return nil
	}
	at := d.DetectedAt
	out := &DisruptionStatus{Reason: d.Reason, DetectedAt: &at, Action: DisruptionRepairing}
	if catalog.Frozen(tr.State) {
		out.Action = DisruptionPaused
	}
	return out
}

// Runner is the instance's RunnerStatus, as every transform's Status
// carries it: whether a runner maintains the instance and its waits, also
// when no transform is left to carry it (after the last DROP TRANSFORM,
// whose capture removal may wait for a lock).
func (t *Trellis) Runner(ctx context.Context) (*RunnerStatus, error) {
	var rs *RunnerStatus
	err := t.bounded(ctx, "Runner", func(ctx context.Context, tx pgx.Tx) error {
		inst, err := t.cat.GetInstance(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		rs, err = t.runnerStatus(ctx, tx, inst)
		return err
	})
	return rs, err
}

// Definition is a transform's stored definition.
type Definition struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// SQL is the CREATE TRANSFORM statement that recreates it.
	SQL   string `json:"sql"`
	Shape string `json:"shape"`
	// Target is the quoted, schema-qualified target table.
	Target string `json:"target"`
	// Columns are the target's visible columns, in select-list order.
	Columns []string `json:"columns"`
	// Query is the defining query over the resolved source: what the
	// target's visible columns must equal.
	Query string `json:"query"`
	// Sources are the quoted, schema-qualified tables the query reads.
	Sources []string `json:"sources"`
	// State is the transform's state, as in Status.
	State string `json:"state"`
	// Settings are the session settings recorded when it was defined,
	// under which every session evaluates its query (ADR 0037): "name =
	// value" in a fixed order; none for a definition made before.
	Settings []string `json:"settings,omitempty"`
	// Reads names the transforms whose targets this one reads (a chain),
	// directly or through its inner levels; ReadBy those that read its
	// target. [] when none.
	Reads  []string `json:"reads"`
	ReadBy []string `json:"read_by"`
	// Version counts the definition's accepted edits: 1 when created, one
	// more per ALTER TRANSFORM (ADR 0041).
	Version int `json:"version"`
}

// Definitions lists every transform's definition, or only those named
// (name or schema.name; an unknown one is a not_found error).
func (t *Trellis) Definitions(ctx context.Context, names ...string) ([]Definition, error) {
	var ts []*catalog.Transform
	err := t.bounded(ctx, "Definitions", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if ts, err = t.cat.ListCached(ctx, tx, &t.planBytes); err != nil {
			return terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, tr := range ts {
			found = found || tr.Name == n || tr.Schema+"."+tr.Name == n
		}
		if !found {
			return nil, terr.New(terr.NotFound, "transform %q does not exist; `trellis-repl definitions` lists the transforms", n)
		}
		want[n] = true
	}
	reads := readsOf(ts)
	out := []Definition{}
	for _, tr := range ts {
		if tr.Owner != 0 {
			continue // an inner level: its owner's definition creates it (ADR 0018)
		}
		if len(want) > 0 && !want[tr.Name] && !want[tr.Schema+"."+tr.Name] {
			continue
		}
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			return nil, terr.Wrap(terr.Internal, err, "transform %q has an unreadable plan: %v", tr.Name, err)
		}
		opt := ""
		if p.NoSourceIndex {
			opt = " WITHOUT SOURCE INDEX"
		}
		out = append(out, Definition{Schema: tr.Schema, Name: tr.Name, Shape: tr.Shape,
			SQL:    "CREATE TRANSFORM " + define.QuoteName(tr.Schema, tr.Name) + opt + " AS " + tr.Definition,
			Target: p.Target.Ident(), Columns: p.Visible, Query: p.QuerySQL(), Sources: sourceIdents(p), State: tr.State,
			Settings: settingLines(p), Reads: nameList(reads[tr.ID]), ReadBy: []string{}, Version: tr.Version})
	}
	for i := range out {
		for j := range out {
			if slices.Contains(out[j].Reads, out[i].Name) && out[j].Schema+"."+out[j].Name != out[i].Schema+"."+out[i].Name {
				out[i].ReadBy = append(out[i].ReadBy, out[j].Name)
			}
		}
	}
	return out, nil
}

// readsOf maps each transform a user defined to the transforms whose
// targets it reads, itself or through its inner levels (which are named
// by their owner).
func readsOf(ts []*catalog.Transform) map[int64][]*catalog.Transform {
	byID := map[int64]*catalog.Transform{}
	for _, tr := range ts {
		byID[tr.ID] = tr
	}
	root := func(tr *catalog.Transform) *catalog.Transform {
		for tr.Owner != 0 && byID[tr.Owner] != nil {
			tr = byID[tr.Owner]
		}
		return tr
	}
	writer := map[string]*catalog.Transform{}
	plans := map[int64]*engine.Plan{}
	for _, tr := range ts {
		if p, err := engine.Decode(tr.Plan); err == nil {
			plans[tr.ID] = p
			writer[p.Target.Ident()] = root(tr)
		}
	}
	out := map[int64][]*catalog.Transform{}
	for _, tr := range ts {
		p := plans[tr.ID]
		if p == nil {
			continue
		}
		r := root(tr)
		for _, src := range p.Sources {
			if w := writer[src.Ident()]; w != nil && w != r && !slices.Contains(out[r.ID], w) {
				out[r.ID] = append(out[r.ID], w)
			}
		}
	}
	return out
}

// nameList are the transforms' names ([] for none).
func nameList(ts []*catalog.Transform) []string {
	out := []string{}
	for _, tr := range ts {
		out = append(out, tr.Name)
	}
	return out
}

// StatusOf is the status of the transform that writes table (bare,
// resolved on the search_path and then in Config.TargetSchema, or
// schema-qualified, an SQL name quoted where it must be), or nil when no
// transform writes it.
func (t *Trellis) StatusOf(ctx context.Context, table string) (*TransformStatus, error) {
	var out *TransformStatus
	err := t.bounded(ctx, "StatusOf", func(ctx context.Context, tx pgx.Tx) error {
		var schema, name string
		err := tx.QueryRow(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = coalesce(to_regclass($1), to_regclass(quote_ident($2) || '.' || $1))`, table, t.cfg.TargetSchema).Scan(&schema, &name)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return terr.Wrap(terr.Validation, err, "%q is not a table name: %v; give [schema.]table", table, err)
		}
		ts, err := t.cat.List(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		for _, tr := range ts {
			p, err := engine.Decode(tr.Plan)
			if err != nil || tr.Replaces != 0 || p.Target.Schema != schema || p.Target.Name != name {
				continue
			}
			st, err := t.status(ctx, tx, []string{tr.Name})
			if err != nil {
				return err
			}
			for i := range st {
				if st[i].Schema == tr.Schema {
					out = &st[i]
				}
			}
			return nil
		}
		return nil
	})
	return out, err
}

// SelfCheckResult is the outcome of comparing a target with a fresh run of
// its query.
type SelfCheckResult struct {
	Name string `json:"name"`
	// Rows is the number of rows in the target.
	Rows int64 `json:"rows"`
	// Missing and Extra count rows in the query but not the target, and
	// in the target but not the query (by multiplicity).
	Missing int64 `json:"missing"`
	Extra   int64 `json:"extra"`
	// Samples of differing rows, in PostgreSQL's row text form.
	MissingSample []string `json:"missing_sample"`
	ExtraSample   []string `json:"extra_sample"`
}

// Equal reports whether the target equals its query.
func (r SelfCheckResult) Equal() bool { return r.Missing == 0 && r.Extra == 0 }

// CompareNow compares a transform's target with a fresh run of its query
// at once, in this process, both read in one REPEATABLE READ snapshot
// with a two-way EXCEPT ALL over the visible columns, the query under the
// settings its definition recorded. Call it after
// AwaitConverged (or with writes stopped): a live target legitimately
// trails its source. SelfCheck is the job that waits for convergence,
// pages through large targets, names each divergence and can repair.
// It reads whole tables, so ctx alone bounds it, not Config.CallTimeout.
func (t *Trellis) CompareNow(ctx context.Context, name string) (SelfCheckResult, error) {
	res := SelfCheckResult{Name: name}
	if err := t.open("CompareNow"); err != nil {
		return res, err
	}
	ts, err := t.cat.ListCached(ctx, t.pool, &t.planBytes)
	if err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	for _, tr := range ts {
		if tr.Name != name {
			continue
		}
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			return res, terr.Wrap(terr.Internal, err, "%v", err)
		}
		diff, err := selfcheck.CompareUnder(ctx, t.pool, pgx.Identifier{p.Target.Schema, p.Target.Name}, p.Visible, p.QuerySQL(), p.SessionSettings())
		if err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "compare %s with its query: %v", name, err)
		}
		if err := t.pool.QueryRow(ctx, "SELECT count(*) FROM "+p.Target.Ident()).Scan(&res.Rows); err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "count %s: %v", p.Target.Ident(), err)
		}
		res.Missing, res.Extra, res.MissingSample, res.ExtraSample = diff.Missing, diff.Extra, diff.MissingSample, diff.ExtraSample
		return res, nil
	}
	return res, terr.New(terr.NotFound, "transform %q does not exist; run `trellis-repl status` to list transforms", name)
}

// settingLines are p's recorded settings as "name = 'value'".
func settingLines(p *engine.Plan) []string {
	var out []string
	for _, st := range p.Settings {
		out = append(out, st.Name+" = '"+strings.ReplaceAll(st.Value, "'", "''")+"'")
	}
	return out
}

// sourceIdents are the tables p reads, quoted and qualified.
func sourceIdents(p *engine.Plan) []string {
	out := []string{}
	for _, s := range p.Tables() {
		out = append(out, s.Ident())
	}
	return out
}

// RunnerStatus says whether a runner maintains the instance now, so that
// a transform's state (live) is never read without knowing whether
// anything keeps it so.
type RunnerStatus struct {
	// Attached: a runner holds the instance's runner lock.
	Attached bool `json:"attached"`
	// PID is the PostgreSQL backend of the runner's lock session (as in
	// pg_stat_activity), ApplicationName that session's name, which
	// carries the runner's process id and host.
	PID             *int    `json:"pid"`
	ApplicationName *string `json:"application_name"`
	// Since is when the attached runner started its current run (a
	// reconnect starts a new one); null until it has recorded it.
	Since *time.Time `json:"since"`
	// HeartbeatAt is the last heartbeat (every 500 ms) of the runner that
	// is attached, or of the last one that was.
	HeartbeatAt *time.Time `json:"heartbeat_at"`
	// StandbyPIDs are the backends of runners waiting to take over.
	StandbyPIDs []int `json:"standby_pids"`
	// Retention is the retention guard's last reading (null without
	// --max-retained-wal or a slot), from the runner's last heartbeat.
	Retention *Retention `json:"retention"`
	// CaptureWaits are the removals of capture (operation uninstall) that
	// wait for a lock on a table no transform reads any more, with the
	// sessions holding it: nothing is cancelled, each is retried at every
	// reconcile and leaves the list once it got through, or once a
	// transform reads the table again. [] when none.
	CaptureWaits []CaptureWait `json:"capture_waits"`
}

// runnerStatus is the instance's RunnerStatus.
func (t *Trellis) runnerStatus(ctx context.Context, q catalog.Querier, inst *catalog.Instance) (*RunnerStatus, error) {
	st, err := pipeline.InspectLock(ctx, q, t.cat.LockKey())
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	rs := &RunnerStatus{Attached: st.PID != 0, HeartbeatAt: inst.HeartbeatAt, StandbyPIDs: st.Standbys, Retention: inst.Retention,
		CaptureWaits: []CaptureWait{}}
	if rs.StandbyPIDs == nil {
		rs.StandbyPIDs = []int{}
	}
	if len(inst.CaptureWaits) > 0 {
		if err := json.Unmarshal(inst.CaptureWaits, &rs.CaptureWaits); err != nil {
			return nil, terr.Wrap(terr.Internal, err, "decode the instance's capture_waits: %v", err)
		}
		if rs.CaptureWaits == nil {
			rs.CaptureWaits = []CaptureWait{}
		}
	}
	if st.PID != 0 {
		pid, app := st.PID, st.App
		rs.PID, rs.ApplicationName = &pid, &app
		// The run records its start from its lock session, so the row
		// belongs to this runner when the pids match.
		if inst.RunnerPID == st.PID {
			rs.Since = inst.StartedAt
		}
	}
	return rs, nil
}
