package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// Self-check jobs (ADR 0017 §6). A job is a row of the catalog's
// selfcheck_jobs: any process queues one (SelfCheck) and reads it
// (SelfCheckJob); the runner claims and runs it, or, with Wait and no
// runner attached, the requesting process does.

// Outcomes of a self-check.
const (
	// OutcomeConverged: the target equals a fresh run of its query.
	OutcomeConverged = "converged"
	// OutcomeDiverged: it differs, after the transform caught up with
	// every change committed before the check (and, in standard mode,
	// again with every change committed before the re-check).
	OutcomeDiverged = "diverged"
	// OutcomeNotCaughtUp: the transform did not apply every change
	// committed before the check within the timeout, or no runner is
	// attached and the target differs.
	OutcomeNotCaughtUp = "not_caught_up"
	// OutcomeNotLive: the transform is building, paused or quarantined.
	OutcomeNotLive = "not_live"
)

// States of a self-check job.
const (
	SelfCheckQueued  = catalog.JobQueued
	SelfCheckRunning = catalog.JobRunning
	SelfCheckDone    = catalog.JobDone
	SelfCheckFailed  = catalog.JobFailed
)

// Kinds of divergence.
const (
	DivergenceMissingRow = selfcheck.MissingRow
	DivergenceExtraRow   = selfcheck.ExtraRow
	DivergenceCell       = selfcheck.Cell
)

// Defaults of a self-check.
const (
	// DefaultSelfCheckTimeout bounds each wait for convergence.
	DefaultSelfCheckTimeout = time.Minute
	// DefaultSelfCheckSample is the share of each target a periodic audit
	// (Config.SelfCheckEvery) compares.
	DefaultSelfCheckSample = 0.1
	// SelfCheckListed is how many divergences a report lists.
	SelfCheckListed = 100
)

// SelfCheckOptions choose how a self-check runs.
type SelfCheckOptions struct {
	// Strict reports every difference the comparison finds. By default
	// (standard mode) differences are compared again after a fresh wait
	// for convergence, and those gone were changes in flight.
	Strict bool
	// Repair re-derives the keys of the divergent rows (held keys
	// excepted) and compares them again: the report says how many were
	// fixed.
	Repair bool
	// Wait makes SelfCheck return the finished job. With no runner
	// attached, the calling process runs it. Not stored with the job.
	Wait bool
	// Timeout bounds each wait for convergence (default
	// DefaultSelfCheckTimeout).
	Timeout time.Duration
	// PageSize is how many target rows one comparison step reads (default
	// selfcheck.DefaultPageSize).
	PageSize int
}

type jobOptions struct {
	Strict   bool   `json:"strict"`
	Repair   bool   `json:"repair"`
	Timeout  string `json:"timeout"`
	PageSize int    `json:"page_size"`
}

// MarshalJSON writes the stored options, the timeout as a Go duration.
func (o SelfCheckOptions) MarshalJSON() ([]byte, error) {
	return json.Marshal(jobOptions{Strict: o.Strict, Repair: o.Repair, Timeout: o.Timeout.String(), PageSize: o.PageSize})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (o *SelfCheckOptions) UnmarshalJSON(b []byte) error {
	var j jobOptions
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*o = SelfCheckOptions{Strict: j.Strict, Repair: j.Repair, PageSize: j.PageSize}
	if j.Timeout != "" {
		d, err := time.ParseDuration(j.Timeout)
		if err != nil {
			return err
		}
		o.Timeout = d
	}
	return nil
}

// Divergence is one difference between a target and a fresh run of its
// query: a missing row, an extra row, or a cell (the column, its stored
// and recomputed values). Values are PostgreSQL's text forms, null for
// SQL NULL; a missing or extra row is given whole, in row text form.
type Divergence = selfcheck.Divergence

// SelfCheckReport is what a self-check found.
type SelfCheckReport struct {
	Transform string `json:"transform"`
	Outcome   string `json:"outcome"`
	// Reason says why the outcome is not_live or not_caught_up, and
	// anything else worth knowing about it.
	Reason string `json:"reason,omitempty"`
	Strict bool   `json:"strict"`
	// Token is the WAL position the transform caught up with before the
	// comparison.
	Token string `json:"token,omitempty"`
	// ByRunner: the runner ran it (false: the requesting process, with no
	// runner attached, which cannot wait for convergence).
	ByRunner bool `json:"by_runner"`
	// IdentityColumns name the values of each divergence's identity.
	IdentityColumns []string `json:"identity_columns"`
	// RowsTarget and RowsQuery are the rows compared on each side; Pages
	// the comparison steps. Sampled: a periodic audit's share.
	RowsTarget int64 `json:"rows_target"`
	RowsQuery  int64 `json:"rows_query"`
	Pages      int   `json:"pages"`
	Sampled    bool  `json:"sampled,omitempty"`
	// Divergences counts the differences (a row differing in two columns
	// is two cell divergences), ByKind the same by kind; Listed are the
	// first SelfCheckListed of them.
	Divergences int64            `json:"divergences"`
	ByKind      map[string]int64 `json:"by_kind"`
	Listed      []Divergence     `json:"listed"`
	// InFlight are differences of the first comparison that the re-check
	// (standard mode) no longer found: changes not yet applied then.
	InFlight int64 `json:"in_flight"`
	// HeldKeys is how many keys the transform holds in quarantine;
	// HeldDivergences the differences at rows of held keys (a row
	// transform's), which are expected and counted nowhere else.
	HeldKeys        int64 `json:"held_keys"`
	HeldDivergences int64 `json:"held_divergences"`
	// Repair is what --repair did.
	Repair  *SelfCheckRepair `json:"repair,omitempty"`
	Seconds float64          `json:"seconds"`
}

// SelfCheckRepair is what a repair did: the source keys re-derived (and,
// for an aggregate, whether its target was recomputed from its ledger),
// and the divergences fixed and remaining when compared again.
type SelfCheckRepair struct {
	Keys       int64  `json:"keys"`
	Reconciled bool   `json:"reconciled"`
	Fixed      int64  `json:"fixed"`
	Remaining  int64  `json:"remaining"`
	Note       string `json:"note,omitempty"`
}

// Settled reports whether the target is known to equal its query at the
// end of the job: it converged, or a repair left nothing remaining.
func (r *SelfCheckReport) Settled() bool {
	if r == nil {
		return false
	}
	return r.Outcome == OutcomeConverged || r.Repair != nil && r.Repair.Remaining == 0
}

// RunJobHere claims job id for a session of this process and runs it, and
// reports whether it did (not when another live session holds it).
func (t *Host) RunJobHere(ctx context.Context, id int64) (bool, error) {
	var claimable bool
	if err := t.pool.QueryRow(ctx, `SELECT state = 'queued' OR state = 'running'
		AND NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.pid = j.claimed_pid) FROM `+t.cat.T("selfcheck_jobs")+` j WHERE id = $1`, id).Scan(&claimable); err != nil {
		return false, terr.Wrap(terr.Unavailable, err, "read self-check job %d: %v", id, err)
	}
	if !claimable {
		return false, nil
	}
	cfg := t.connConfig().Copy()
	by := processName("trellis-repl self-check")
	cfg.RuntimeParams["application_name"] = by
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, terr.Wrap(terr.Unavailable, err, "connect: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	j, err := t.cat.ClaimSelfCheck(ctx, conn, id, by, int(conn.PgConn().PID()))
	if err != nil {
		return false, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	if j == nil {
		return false, nil
	}
	return true, t.runClaimed(ctx, conn, j, nil)
}

// runClaimed runs a claimed job and records its end from conn (the
// claiming session). A job cut short by ctx goes back to the queue.
func (t *Host) runClaimed(ctx context.Context, conn catalog.Querier, j *catalog.SelfCheckJob, r *runner) error {
	pid := j.ClaimedPID
	rep, err := t.runJob(ctx, j, r)
	end := context.WithoutCancel(ctx)
	if err != nil && ctx.Err() != nil {
		return t.cat.RequeueSelfCheck(end, conn, j.ID, pid)
	}
	if err != nil {
		msg := err.Error()
		var te *terr.Error
		if errors.As(err, &te) {
			msg = string(te.Code) + ": " + te.Msg
		}
		return t.cat.FinishSelfCheck(end, conn, j.ID, pid, SelfCheckFailed, nil, msg)
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return t.cat.FinishSelfCheck(end, conn, j.ID, pid, SelfCheckDone, raw, "")
}

// processName is a session name carrying this process's id and host.
func processName(what string) string {
	name := fmt.Sprintf("%s %d", what, os.Getpid())
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// runJob runs one job: r is the runner running it, nil for this process
// with no runner attached.
func (t *Host) runJob(ctx context.Context, j *catalog.SelfCheckJob, r *runner) (*SelfCheckReport, error) {
	var opts SelfCheckOptions
	if err := json.Unmarshal(j.Options, &opts); err != nil {
		return nil, terr.Wrap(terr.Internal, err, "self-check job %d has unreadable options: %v", j.ID, err)
	}
	tr, err := t.cat.GetByID(ctx, t.pool, j.TransformID)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	if tr == nil {
		return nil, terr.New(terr.NotFound, "transform %q was dropped before its self-check ran; `trellis-repl status` lists the transforms", j.Transform)
	}
	return t.check(ctx, tr, opts, r, 0)
}

// check is a self-check of tr: r is the runner running it (nil: no runner
// attached); sample, when in (0, 1), compares about that share of the
// target, from a random row (periodic audits).
func (t *Host) check(ctx context.Context, tr *catalog.Transform, o SelfCheckOptions, r *runner, sample float64) (*SelfCheckReport, error) {
	start := time.Now()
	if o.Timeout <= 0 {
		o.Timeout = DefaultSelfCheckTimeout
	}
	p, err := engine.Decode(tr.Plan)
	if err != nil {
		return nil, terr.Wrap(terr.Internal, err, "transform %q has an unreadable plan: %v", tr.Name, err)
	}
	c := &checkRun{t: t, tr: tr, plan: p, spec: p.CheckSpec(), opts: o, r: r}
	rep := &SelfCheckReport{Transform: tr.Name, Strict: o.Strict, ByRunner: r != nil, IdentityColumns: c.spec.Identity,
		ByKind: map[string]int64{DivergenceMissingRow: 0, DivergenceExtraRow: 0, DivergenceCell: 0}, Listed: []Divergence{}}
	defer func() { rep.Seconds = math.Round(time.Since(start).Seconds()*1000) / 1000 }()
	if held, err := t.cat.HeldCounts(ctx, t.pool); err == nil {
		rep.HeldKeys = held[tr.ID].Count
	} else {
		return nil, terr.Wrap(terr.Unavailable, err, "read held keys: %v", err)
	}
	if tr.State != catalog.StateLive {
		rep.Outcome, rep.Reason = OutcomeNotLive, notLiveReason(tr, tr.Name)
		return rep, nil
	}
	token, err := t.WatermarkToken(ctx)
	if err != nil {
		return nil, err
	}
	rep.Token = token.String()
	caughtUp := true
	if r != nil {
		if out, why, err := t.awaitOne(ctx, tr.ID, token, o.Timeout); err != nil || out != "" {
			rep.Outcome, rep.Reason = out, why
			return rep, err
		}
	} else if caughtUp, err = t.appliedUpTo(ctx, tr.ID, token); err != nil {
		return nil, err
	}
	hook := t.selfCheckHook.Load()
	if hook != nil {
		(*hook)("compare")
	}
	res, err := c.compare(ctx, sample)
	if hook != nil {
		(*hook)("compared")
	}
	if err != nil {
		return nil, err
	}
	rep.RowsTarget, rep.RowsQuery, rep.Pages, rep.Sampled = res.TargetRows, res.QueryRows, res.Pages, !res.Complete
	rep.HeldDivergences = res.Held
	if res.Total > 0 && !o.Strict && r != nil {
		// Standard mode: a difference that a fresh convergence makes go
		// away was a change in flight.
		token, err := t.WatermarkToken(ctx)
		if err != nil {
			return nil, err
		}
		if out, why, err := t.awaitOne(ctx, tr.ID, token, o.Timeout); err != nil || out != "" {
			rep.Outcome, rep.Reason = out, why+" (while re-checking the differences a first comparison found)"
			c.fill(rep, res)
			return rep, err
		}
		first := res.Total
		if res, err = c.recheck(ctx, res); err != nil {
			return nil, err
		}
		rep.InFlight = max(first-res.Total, 0)
	}
	c.fill(rep, res)
	switch {
	case res.Total == 0:
		rep.Outcome = OutcomeConverged
	case !caughtUp:
		rep.Outcome = OutcomeNotCaughtUp
		rep.Reason = fmt.Sprintf("no runner is attached, and transform %q has applied changes up to %s only (the WAL is at %s): the differences may be changes not yet applied; start `trellis-repl run` and check again",
			tr.Name, catalog.FormatLSN(tr.AppliedLSN), token)
	default:
		rep.Outcome = OutcomeDiverged
	}
	if rep.HeldKeys > 0 && p.Shape != engine.ShapeRow && res.Total > 0 {
		rep.Reason = strings.TrimPrefix(rep.Reason+fmt.Sprintf("; transform %q holds %d keys in quarantine, whose groups may account for divergences (`trellis-repl held %s` lists them)", tr.Name, rep.HeldKeys, tr.Name), "; ")
	}
	if o.Repair && res.Total > 0 {
		rep.Repair = c.repair(ctx, res)
	}
	return rep, nil
}

// notLiveReason says why a transform is not live and what to do.
func notLiveReason(tr *catalog.Transform, name string) string {
	switch tr.State {
	case catalog.StateWaiting, catalog.StateBackfilling:
		return fmt.Sprintf("transform %q is %s, not live; check it once its build is done (`trellis-repl status %s`)", name, tr.State, name)
	case catalog.StateQuarantined:
		return fmt.Sprintf("transform %q is quarantined: it holds too many keys whose re-derive fails on row data; fix them (`trellis-repl held %s`) and RESUME TRANSFORM %s", name, name, name)
	}
	why := "paused"
	if tr.PausedBy != "" {
		why += " by " + tr.PausedBy
	}
	if tr.CaptureFailure != nil {
		why += " (" + tr.CaptureFailure.Kind + ": " + tr.CaptureFailure.Error + ")"
	}
	return fmt.Sprintf("transform %q is %s, so it is not kept up to date; RESUME TRANSFORM %s first", name, why, name)
}

// checkRun is one self-check's comparison state.
type checkRun struct {
	t    *Host
	tr   *catalog.Transform
	plan *engine.Plan
	spec engine.CheckSpec
	opts SelfCheckOptions
	r    *runner
	// held are the keys the transform holds, per source (key text, as
	// this session prints the key type), for a row transform.
	held map[int]map[string]bool
}

func (c *checkRun) selfSpec() selfcheck.Spec {
	return selfcheck.Spec{Target: pgx.Identifier{c.plan.Target.Schema, c.plan.Target.Name}, Columns: c.spec.Columns,
		Identity: c.spec.Identity, Query: c.spec.Query}
}

// snapshot runs fn in a read-only REPEATABLE READ transaction with the
// appliers' text settings, the definition's recorded settings (ADR 0037)
// and its search_path.
func (c *checkRun) snapshot(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := c.t.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "self-check of %s: begin: %v", c.tr.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if err := c.plan.ApplySettings(ctx, tx); err != nil {
		return terr.Wrap(terr.Unavailable, err, "self-check of %s: %v", c.tr.Name, err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, c.plan.SearchPath); err != nil {
		return terr.Wrap(terr.Unavailable, err, "self-check of %s: set search_path: %v", c.tr.Name, err)
	}
	if err := fn(tx); err != nil {
		var te *terr.Error
		if errors.As(err, &te) {
			return err
		}
		return terr.Wrap(terr.Unavailable, err, "self-check of %s: %v", c.tr.Name, err)
	}
	return nil
}

func (c *checkRun) options() selfcheck.Options {
	return selfcheck.Options{PageSize: c.opts.PageSize, Held: c.isHeld}
}

// compare is the first comparison, in one snapshot.
func (c *checkRun) compare(ctx context.Context, sample float64) (*selfcheck.Result, error) {
	var res *selfcheck.Result
	err := c.snapshot(ctx, func(tx pgx.Tx) error {
		if err := c.loadHeld(ctx, tx); err != nil {
			return err
		}
		o := c.options()
		if sample > 0 && sample < 1 && len(c.spec.Identity) > 0 {
			after, rows, err := selfcheck.RandomStart(ctx, tx, c.selfSpec())
			if err != nil {
				return err
			}
			o.After, o.MaxRows = after, int64(math.Ceil(sample*float64(max(rows, 1))))
			if o.PageSize <= 0 || int64(o.PageSize) > o.MaxRows {
				o.PageSize = int(min(o.MaxRows, selfcheck.DefaultPageSize))
			}
		}
		var err error
		res, err = selfcheck.Run(ctx, tx, c.selfSpec(), o)
		return err
	})
	return res, err
}

// recheck compares again, in a new snapshot, the identities of res's
// kept divergences; the divergences it did not keep count as they were.
func (c *checkRun) recheck(ctx context.Context, res *selfcheck.Result) (*selfcheck.Result, error) {
	var again *selfcheck.Result
	err := c.snapshot(ctx, func(tx pgx.Tx) error {
		if err := c.loadHeld(ctx, tx); err != nil {
			return err
		}
		var err error
		again, err = selfcheck.Recheck(ctx, tx, c.selfSpec(), res.Identities(), c.options())
		return err
	})
	if err != nil {
		return nil, err
	}
	// What the first comparison counted but did not keep was not
	// re-checked: it still counts.
	kept := map[string]int64{}
	for _, d := range res.Divergences {
		kept[d.Kind]++
	}
	for k, n := range res.Counts {
		again.Counts[k] += n - kept[k]
		again.Total += n - kept[k]
	}
	again.Truncated = again.Truncated || res.Truncated
	again.TargetRows, again.QueryRows, again.Pages, again.Complete = res.TargetRows, res.QueryRows, res.Pages, res.Complete
	again.Held += res.Held
	return again, nil
}

// fill copies a comparison's divergences into the report.
func (c *checkRun) fill(rep *SelfCheckReport, res *selfcheck.Result) {
	rep.Divergences = res.Total
	for k, n := range res.Counts {
		rep.ByKind[k] = n
	}
	rep.Listed = append([]Divergence{}, res.Divergences[:min(len(res.Divergences), SelfCheckListed)]...)
	rep.HeldDivergences = res.Held
}

// loadHeld reads the keys a row transform holds, as the session prints
// their key types.
func (c *checkRun) loadHeld(ctx context.Context, tx pgx.Tx) error {
	c.held = nil
	if c.plan.Shape != engine.ShapeRow {
		return nil
	}
	for _, ik := range c.spec.Keys {
		src := c.plan.Sources[ik.Source]
		var casts []string
		for j, k := range src.Key {
			casts = append(casts, fmt.Sprintf("(h.key[%d])::%s::text", j+1, k.Type))
		}
		rows, err := tx.Query(ctx, `SELECT ARRAY[`+strings.Join(casts, ", ")+`] FROM `+c.t.cat.T("held_keys")+
			` h WHERE h.transform_id = $1 AND h.table_oid = $2 AND NOT h.released`, c.tr.ID, src.OID)
		if err != nil {
			return fmt.Errorf("read held keys: %w", err)
		}
		for rows.Next() {
			var k []string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return err
			}
			if c.held == nil {
				c.held = map[int]map[string]bool{}
			}
			if c.held[ik.Source] == nil {
				c.held[ik.Source] = map[string]bool{}
			}
			c.held[ik.Source][strings.Join(k, "\x00")] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read held keys: %w", err)
		}
	}
	return nil
}

// keyOf is source ik's key in an identity, or nil when it is NULL (a
// NULL-extended source).
func (c *checkRun) keyOf(ik engine.IdentityKey, identity []*string) []string {
	var key []string
	for _, col := range ik.Columns {
		for j, id := range c.spec.Identity {
			if id == col {
				if identity[j] == nil {
					return nil
				}
				key = append(key, *identity[j])
			}
		}
	}
	return key
}

// isHeld: the row at identity is derived from a key the transform holds.
func (c *checkRun) isHeld(identity []*string) bool {
	for _, ik := range c.spec.Keys {
		if k := c.keyOf(ik, identity); k != nil && c.held[ik.Source][strings.Join(k, "\x00")] {
			return true
		}
	}
	return false
}

// appliedUpTo reports whether transform id, and every transform whose
// target it reads, has applied everything up to token.
func (t *Host) appliedUpTo(ctx context.Context, id int64, token Token) (bool, error) {
	ts, err := t.cat.List(ctx, t.pool)
	if err != nil {
		return false, terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	for _, tr := range define.UpstreamOf(ts, id) {
		if tr.AppliedLSN < uint64(token) {
			return false, nil
		}
	}
	return true, nil
}

// awaitOne waits, at most timeout, until transform id and the transforms
// whose targets it reads are live and have applied everything up to token
// (level by level along a chain, as AwaitConverged). It returns the
// outcome when they cannot (not_live) or did not in time (not_caught_up),
// with the reason, and "" once caught up.
func (t *Host) awaitOne(ctx context.Context, id int64, token Token, timeout time.Duration) (string, string, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ts, err := t.cat.List(ctx, t.pool)
	if err != nil {
		return "", "", terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	levels := define.ChainDepth(define.UpstreamOf(ts, id))
	for level := levels; ; level-- {
		if out, why, err := t.awaitLevel(ctx, wctx, id, token, timeout); err != nil || out != "" {
			return out, why, err
		}
		if level <= 1 {
			return "", "", nil
		}
		if token, err = t.WatermarkToken(ctx); err != nil {
			return "", "", err
		}
	}
}

func (t *Host) awaitLevel(ctx, wctx context.Context, id int64, token Token, timeout time.Duration) (string, string, error) {
	delay := time.Millisecond
	for {
		ts, err := t.cat.List(ctx, t.pool)
		if err != nil {
			return "", "", terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		set := define.UpstreamOf(ts, id)
		if len(set) == 0 {
			return "", "", terr.New(terr.NotFound, "transform %d was dropped during its self-check", id)
		}
		self := set[0]
		var roots []uint32
		waiting := ""
		for _, tr := range set {
			if catalog.Frozen(tr.State) {
				why := notLiveReason(tr, tr.Name)
				if tr != self {
					why = fmt.Sprintf("transform %q reads the target of %s", self.Name, why)
				}
				return OutcomeNotLive, why, nil
			}
			if p, err := engine.Decode(tr.Plan); err == nil {
				for _, src := range p.Tables() {
					roots = append(roots, src.OID)
				}
			}
			if tr.State != catalog.StateLive {
				waiting = fmt.Sprintf("transform %q is %s", tr.Name, tr.State)
			} else if tr.AppliedLSN < uint64(token) && waiting == "" {
				waiting = fmt.Sprintf("transform %q has applied changes up to %s, not yet %s", tr.Name, catalog.FormatLSN(tr.AppliedLSN), token)
			}
		}
		if waiting == "" {
			changed, err := t.cat.TreesChanged(ctx, t.pool, roots)
			if err != nil {
				return "", "", terr.Wrap(terr.Unavailable, err, "read partition trees: %v", err)
			}
			corr, err := t.cat.Corrections(ctx, t.pool, 0)
			if err != nil {
				return "", "", terr.Wrap(terr.Unavailable, err, "read partition corrections: %v", err)
			}
			if changed {
				waiting = "a partition of a source was attached or detached"
			}
			for _, k := range corr {
				for _, tr := range set {
					if k.TransformID == tr.ID {
						waiting = fmt.Sprintf("transform %q is re-deriving partition %s", tr.Name, k.Node)
					}
				}
			}
		}
		if waiting == "" {
			return "", "", nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", "", ctx.Err()
			}
			return OutcomeNotCaughtUp, fmt.Sprintf("not caught up within %s: %s; is the runner keeping up (`trellis-repl status` shows keys_waiting)? give a longer --timeout", timeout, waiting), nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}
