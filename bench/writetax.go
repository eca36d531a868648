package bench

// The write-tax scenario (issue 9, item 8): what capturing changes costs
// the writers on the primary.
//
// Writers (WriteTaxConfig.Writers concurrent connections) commit
// transactions of k rows (k in PerCommit) into src, preloaded with
// TableRows rows, for Duration: each row is, at random, an INSERT of a new
// id or an UPDATE by primary key of an existing row (each writer updates
// its own share of the ids, so writers never wait for each other's row
// locks), one statement per row as an OLTP client sends them, the k
// statements of a commit pipelined in one round trip. The figures are
// rows/s and the latency of each commit (its round trip), p50 and p99.
//
// Three configurations are measured, each in a fresh database:
//
//   - none: the plain table, no trellis (checked: no trigger on src, src
//     in no publication, no replication slot in the database and no
//     walsender streaming anywhere on the server);
//   - logical: a trellis instance with one row transform on src, Run with
//     capture logical running while the writers write;
//   - trigger: the same with capture trigger;
//   - logical-idle, trigger-idle (diagnostic, WriteTaxConfig.Idle): the
//     same, but Run stopped while the writers write, so what remains is
//     capture's own cost on the writers (the trigger and its log insert;
//     the slot and publication existing) without the engine's CPU.
//
// They alternate (none, logical, trigger for each k, then again for each
// round) so that the machine's noise hits them alike. A capture
// configuration then waits for convergence (untimed for the tax; reported
// as catch-up) and compares the target with its query: a difference fails
// the run. The ratios to none are taken per round (the configurations of a
// round ran minutes apart at most) and the median over rounds reported.
//
// End to end (EndToEnd): rows inserted into an empty src from the first
// write until the transform converged, live, for trigger and logical
// capture: at 1 row per commit with Writers writers, and at 1,000 (or any
// k > 1) rows per commit with one writer, each commit one INSERT … SELECT
// generate_series.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Capture configurations of the write-tax scenario (WriteTaxPoint.Capture).
const (
	// CaptureNone is the plain table: no trellis, no trigger, no slot.
	CaptureNone = "none"
	// CaptureLogical is a live trellis instance with logical capture.
	CaptureLogical = trellis.CaptureLogical
	// CaptureTrigger is a live trellis instance with trigger capture.
	CaptureTrigger = trellis.CaptureTrigger
	// IdleSuffix marks a diagnostic configuration (WriteTaxConfig.Idle):
	// the capture installed and built, but Run stopped while the writers
	// write, so the figure is capture's own cost on the writers without
	// the engine (and, for logical, decoding) competing for the machine.
	IdleSuffix = "-idle"
)

// The goals of issue 9 for the write tax: rows/s as a fraction of no
// capture's.
const (
	// GoalLogicalRatio applies at every rows-per-commit size.
	GoalLogicalRatio = 0.9
	// GoalTriggerRatio applies at 1 row per commit.
	GoalTriggerRatio = 0.5
)

// WriteTaxConfig configures the write-tax scenario.
type WriteTaxConfig struct {
	// Writers is how many connections write concurrently (default 4).
	Writers int
	// PerCommit are the rows per commit measured (default 1 and 100).
	PerCommit []int
	// Duration is how long the writers write at each point (default 10s).
	Duration time.Duration
	// Rounds is how many times each point is measured, the three
	// configurations alternating (default 2).
	Rounds int
	// TableRows is how many rows src holds before the writers start: the
	// rows the updates hit (default 50,000).
	TableRows int
	// EndToEnd are the end-to-end sizes (default: 20,000 rows at 1 row
	// per commit, 200,000 at 1,000); none skips the measurement.
	EndToEnd []EndToEndSize
	// Idle adds the diagnostic configurations logical-idle and
	// trigger-idle (see IdleSuffix) to every round; no goal applies to
	// them.
	Idle bool
	// ProgressInterval, BatchSize, PhaseTimeout, RecheckAfter, Logger and
	// Progress are as in Config.
	ProgressInterval time.Duration
	BatchSize        int
	PhaseTimeout     time.Duration
	RecheckAfter     time.Duration
	Logger           *slog.Logger
	Progress         io.Writer
}

// EndToEndSize is one end-to-end measurement of the write-tax scenario.
type EndToEndSize struct {
	// PerCommit is the rows per commit: 1 (Writers writers, one INSERT
	// per commit) or more (one writer, one INSERT … SELECT per commit).
	PerCommit int
	// Rows is how many rows are inserted in all.
	Rows int
}

// DefaultEndToEnd are the end-to-end sizes of a default run.
func DefaultEndToEnd() []EndToEndSize {
	return []EndToEndSize{{PerCommit: 1, Rows: 20_000}, {PerCommit: 1000, Rows: 200_000}}
}

func (c *WriteTaxConfig) defaults() {
	if c.Writers <= 0 {
		c.Writers = 4
	}
	if len(c.PerCommit) == 0 {
		c.PerCommit = []int{1, 100}
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 2
	}
	if c.TableRows <= 0 {
		c.TableRows = 50_000
	}
	if c.EndToEnd == nil {
		c.EndToEnd = DefaultEndToEnd()
	}
}

// engineConfig is the Config the shared helpers (converge, verify) read.
func (c *WriteTaxConfig) engineConfig() *Config {
	ec := &Config{ProgressInterval: c.ProgressInterval, BatchSize: c.BatchSize, PhaseTimeout: c.PhaseTimeout,
		RecheckAfter: c.RecheckAfter, Logger: c.Logger, Progress: c.Progress, Verify: true}
	ec.defaults()
	return ec
}

// WriteTaxReport is the outcome of the write-tax scenario.
type WriteTaxReport struct {
	// Points are the write-tax figures, one per configuration and rows
	// per commit (medians over the rounds).
	Points []WriteTaxPoint `json:"points"`
	// EndToEnd are the end-to-end figures.
	EndToEnd []EndToEndResult `json:"end_to_end,omitempty"`
	// Goals are the goals checked against Points.
	Goals []GoalCheck `json:"goals,omitempty"`
}

// WriteTaxPoint is one configuration at one commit size.
type WriteTaxPoint struct {
	// Capture is none, logical or trigger.
	Capture       string `json:"capture"`
	RowsPerCommit int    `json:"rows_per_commit"`
	Writers       int    `json:"writers"`
	// RowsPerSecond, CommitsPerSecond and the commit latencies are the
	// medians of Samples.
	RowsPerSecond    float64 `json:"rows_per_second"`
	CommitsPerSecond float64 `json:"commits_per_second"`
	CommitP50Ms      float64 `json:"commit_p50_ms"`
	CommitP99Ms      float64 `json:"commit_p99_ms"`
	// RateRatio is the median over rounds of this configuration's rows/s
	// over no capture's in the same round (1 for none); above 1, faster.
	RateRatio float64 `json:"rate_ratio"`
	// P99Ratio is the same for commit p99; above 1, slower commits.
	P99Ratio float64 `json:"p99_ratio"`
	// CatchUpSeconds (capture configurations) is the median time from the
	// writers' end until the transform converged.
	CatchUpSeconds float64 `json:"catch_up_seconds,omitempty"`
	// ApplySeconds (capture configurations) is the median time the engine
	// spent inside apply transactions while the writers wrote: the share
	// of the machine the transform's own writes took.
	ApplySeconds float64 `json:"apply_seconds,omitempty"`
	// Verified is the self-check after every round: "ok" or the first
	// difference ("" for none).
	Verified string `json:"verified,omitempty"`
	// Samples are the rounds' figures.
	Samples []WriteTaxSample `json:"samples"`
}

// WriteTaxSample is one round of one point.
type WriteTaxSample struct {
	Rows             int64   `json:"rows"`
	Commits          int64   `json:"commits"`
	Seconds          float64 `json:"seconds"`
	RowsPerSecond    float64 `json:"rows_per_second"`
	CommitP50Ms      float64 `json:"commit_p50_ms"`
	CommitP99Ms      float64 `json:"commit_p99_ms"`
	CatchUpSeconds   float64 `json:"catch_up_seconds,omitempty"`
	ApplySeconds     float64 `json:"apply_seconds,omitempty"`
	RateRatio        float64 `json:"rate_ratio"`
	P99Ratio         float64 `json:"p99_ratio"`
	TargetRows       int64   `json:"target_rows,omitempty"`
	CaptureInstalled string  `json:"capture_installed"`
}

// EndToEndResult is one end-to-end measurement.
type EndToEndResult struct {
	// Capture is logical or trigger.
	Capture       string `json:"capture"`
	RowsPerCommit int    `json:"rows_per_commit"`
	Writers       int    `json:"writers"`
	Rows          int    `json:"rows"`
	// WriterSeconds is how long the writers took; EndToEndSeconds is from
	// the first write until the transform converged.
	WriterSeconds   float64 `json:"writer_seconds"`
	EndToEndSeconds float64 `json:"end_to_end_seconds"`
	// RowsPerSecond is Rows / EndToEndSeconds.
	RowsPerSecond float64 `json:"rows_per_second"`
	// Verified is the self-check after convergence.
	Verified string `json:"verified"`
}

// GoalCheck is one goal and whether this run met it.
type GoalCheck struct {
	Goal string `json:"goal"`
	// Want is the least rows/s ratio to no capture; Got the measured one.
	Want float64 `json:"want"`
	Got  float64 `json:"got"`
	Met  bool    `json:"met"`
}

const (
	taxTransform = "tax"
	taxQuery     = `SELECT id, g, v FROM src`
	// The writers' statements, one row each.
	taxInsertSQL = `INSERT INTO src (id, g, v, pad) VALUES ($1::bigint, $2::int, $3::numeric, repeat('x', 32))`
	taxUpdateSQL = `UPDATE src SET g = g + 1, v = v + 1 WHERE id = $1::bigint`
	taxGroups    = 1000
)

func taxShape() Shape {
	return Shape{Name: taxTransform, Query: taxQuery, Columns: []string{"id", "g", "v"}}
}

// RunWriteTax runs the write-tax scenario (see the top of this file). A
// target that differs from its query, or a configuration that is not what
// it claims (a trigger or slot where none should be), fails the run; a
// missed goal does not (GoalCheck.Met). The figures measured so far are
// returned with an error.
func RunWriteTax(ctx context.Context, cfg WriteTaxConfig, dbs Databases) (WriteTaxReport, error) {
	cfg.defaults()
	var rep WriteTaxReport
	for _, k := range cfg.PerCommit {
		if k <= 0 {
			return rep, fmt.Errorf("bench: write tax: rows per commit must be positive, got %d", k)
		}
	}
	for _, e := range cfg.EndToEnd {
		if e.PerCommit <= 0 || e.Rows <= 0 {
			return rep, fmt.Errorf("bench: write tax: end-to-end size needs positive rows and rows per commit, got %+v", e)
		}
	}
	ec := cfg.engineConfig()
	captures := []string{CaptureNone, CaptureLogical, CaptureTrigger}
	if cfg.Idle {
		captures = append(captures, CaptureLogical+IdleSuffix, CaptureTrigger+IdleSuffix)
	}
	// samples[k][capture] in round order.
	samples := map[int]map[string][]WriteTaxSample{}
	verified := map[int]map[string]string{}
	for _, k := range cfg.PerCommit {
		samples[k], verified[k] = map[string][]WriteTaxSample{}, map[string]string{}
	}
	var failed error
rounds:
	for round := range cfg.Rounds {
		for _, k := range cfg.PerCommit {
			for _, c := range captures {
				s, v, err := runTaxPoint(ctx, &cfg, ec, dbs, c, k, round)
				if s.Seconds > 0 {
					samples[k][c] = append(samples[k][c], s)
					if verified[k][c] == "" || verified[k][c] == "ok" {
						verified[k][c] = v // the first difference stays
					}
				}
				if err != nil {
					failed = err
					break rounds
				}
			}
		}
	}
	for _, k := range cfg.PerCommit {
		for _, c := range captures {
			ss := samples[k][c]
			if len(ss) == 0 {
				continue
			}
			base := samples[k][CaptureNone]
			for i := range ss {
				if i < len(base) && base[i].RowsPerSecond > 0 && base[i].CommitP99Ms > 0 {
					ss[i].RateRatio = ss[i].RowsPerSecond / base[i].RowsPerSecond
					ss[i].P99Ratio = ss[i].CommitP99Ms / base[i].CommitP99Ms
				}
			}
			p := WriteTaxPoint{Capture: c, RowsPerCommit: k, Writers: cfg.Writers, Samples: ss, Verified: verified[k][c],
				RowsPerSecond:    medianOf(ss, func(s WriteTaxSample) float64 { return s.RowsPerSecond }),
				CommitsPerSecond: medianOf(ss, func(s WriteTaxSample) float64 { return float64(s.Commits) / s.Seconds }),
				CommitP50Ms:      medianOf(ss, func(s WriteTaxSample) float64 { return s.CommitP50Ms }),
				CommitP99Ms:      medianOf(ss, func(s WriteTaxSample) float64 { return s.CommitP99Ms }),
				RateRatio:        medianOf(ss, func(s WriteTaxSample) float64 { return s.RateRatio }),
				P99Ratio:         medianOf(ss, func(s WriteTaxSample) float64 { return s.P99Ratio }),
				CatchUpSeconds:   medianOf(ss, func(s WriteTaxSample) float64 { return s.CatchUpSeconds }),
				ApplySeconds:     medianOf(ss, func(s WriteTaxSample) float64 { return s.ApplySeconds }),
			}
			rep.Points = append(rep.Points, p)
		}
	}
	rep.Goals = checkGoals(rep.Points)
	if failed != nil {
		return rep, failed
	}
	for _, e := range cfg.EndToEnd {
		for _, c := range []string{CaptureTrigger, CaptureLogical} {
			r, err := runTaxEndToEnd(ctx, &cfg, ec, dbs, c, e)
			if r.Capture != "" {
				rep.EndToEnd = append(rep.EndToEnd, r)
			}
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// checkGoals checks the goals against points.
func checkGoals(points []WriteTaxPoint) []GoalCheck {
	var out []GoalCheck
	for _, p := range points {
		switch {
		case p.Capture == CaptureLogical:
			out = append(out, GoalCheck{Goal: fmt.Sprintf("logical capture >= %.1fx no capture's rows/s at %d row(s) per commit", GoalLogicalRatio, p.RowsPerCommit),
				Want: GoalLogicalRatio, Got: p.RateRatio, Met: p.RateRatio >= GoalLogicalRatio})
		case p.Capture == CaptureTrigger && p.RowsPerCommit == 1:
			out = append(out, GoalCheck{Goal: fmt.Sprintf("trigger capture >= %.1fx no capture's rows/s at 1 row per commit", GoalTriggerRatio),
				Want: GoalTriggerRatio, Got: p.RateRatio, Met: p.RateRatio >= GoalTriggerRatio})
		}
	}
	return out
}

func medianOf(ss []WriteTaxSample, f func(WriteTaxSample) float64) float64 {
	xs := make([]float64, 0, len(ss))
	for _, s := range ss {
		xs = append(xs, f(s))
	}
	return median(xs)
}

// taxCase is one configuration's database, and its trellis instance when
// it captures.
type taxCase struct {
	dsn  string
	conn *pgx.Conn
	tr   *trellis.Trellis
	reg  *prometheus.Registry
	run  *running
	done []func() error
}

// close stops Run and releases everything, newest first.
func (c *taxCase) close() error {
	var errs []error
	for i := len(c.done) - 1; i >= 0; i-- {
		errs = append(errs, c.done[i]())
	}
	return errors.Join(errs...)
}

// openTaxCase creates a fresh database with src holding preload rows and,
// unless capture is none, a trellis instance maintaining the tax transform
// with Run running and converged.
func openTaxCase(ctx context.Context, ec *Config, dbs Databases, capture, schema string, preload int) (c *taxCase, err error) {
	c = &taxCase{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
		}
	}()
	dsn, drop, err := dbs.NewDatabase(ctx)
	if err != nil {
		return c, fmt.Errorf("bench: new database: %w", err)
	}
	c.dsn = dsn
	c.done = append(c.done, func() error {
		if err := drop(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("bench: drop database: %w", err)
		}
		return nil
	})
	if c.conn, err = pgx.Connect(ctx, dsn); err != nil {
		return c, fmt.Errorf("bench: connect: %w", err)
	}
	c.done = append(c.done, func() error { return c.conn.Close(context.WithoutCancel(ctx)) })
	setup := []string{createSourceSQL}
	if preload > 0 {
		setup = append(setup, fmt.Sprintf(`INSERT INTO src (id, g, v, pad)
			SELECT i, i %% %d, (i %% 997) / 10.0, repeat('x', 32) FROM generate_series(1, %d) i`, taxGroups, preload))
	}
	setup = append(setup, `VACUUM ANALYZE src`)
	for _, q := range setup {
		if _, err := c.conn.Exec(ctx, q); err != nil {
			return c, fmt.Errorf("bench: create the source table: %w", err)
		}
	}
	if capture == CaptureNone {
		return c, nil
	}
	dir, err := os.MkdirTemp("", "trellis-bench-tax-")
	if err != nil {
		return c, fmt.Errorf("bench: data dir: %w", err)
	}
	c.done = append(c.done, func() error { return os.RemoveAll(dir) })
	c.reg = prometheus.NewRegistry()
	c.tr, err = trellis.Open(ctx, trellis.Config{DSN: dsn, Schema: schema, DataDir: dir, Confirm: trellis.ConfirmLocal,
		Capture: capture, ProgressInterval: ec.ProgressInterval, BatchSize: ec.BatchSize, Logger: ec.Logger,
		Metrics: trellis.NewMetrics(c.reg)})
	if err != nil {
		return c, fmt.Errorf("bench: open (%s capture): %w", capture, err)
	}
	c.done = append(c.done, func() error { c.tr.Close(); return nil })
	if _, err := c.tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM %s AS %s", pgx.Identifier{taxTransform}.Sanitize(), taxQuery)); err != nil {
		return c, fmt.Errorf("bench: define %s: %w", taxTransform, err)
	}
	c.run = &running{tr: c.tr}
	c.done = append(c.done, func() error {
		if err := c.run.stop(); err != nil {
			return fmt.Errorf("bench: %s (%s capture): %w", taxTransform, capture, err)
		}
		return nil
	})
	if err := c.run.converge(ctx, ec); err != nil {
		return c, fmt.Errorf("bench: %s build (%s capture): %w", taxTransform, capture, err)
	}
	return c, nil
}

// captureObjects is what captures src's changes in a database.
type captureObjects struct {
	triggers     int // user triggers on src
	publications int // publications src is in (FOR ALL TABLES included)
	slots        int // replication slots of this database
	decoding     int // logical slots in use, server-wide
}

func (o captureObjects) String() string {
	return fmt.Sprintf("%d trigger(s) on src, in %d publication(s), %d slot(s) in the database, %d logical slot(s) in use on the server", o.triggers, o.publications, o.slots, o.decoding)
}

func inspectCapture(ctx context.Context, conn *pgx.Conn) (captureObjects, error) {
	var o captureObjects
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.src'::regclass AND NOT tgisinternal),
		(SELECT count(*) FROM pg_publication p WHERE p.puballtables
			OR EXISTS (SELECT FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = 'public.src'::regclass)),
		(SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
		(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical' AND active)`).Scan(&o.triggers, &o.publications, &o.slots, &o.decoding)
	if err != nil {
		return o, fmt.Errorf("bench: inspect capture objects: %w", err)
	}
	return o, nil
}

// checkCapture makes sure the database captures src the way capture says:
// none has no trigger, publication or slot, and no logical slot is in use
// on the server (so that no other configuration's decoding competes with
// it); logical has a slot and a publication and no trigger; trigger has
// triggers and no slot. The walsender of an earlier configuration can take
// a moment to exit, so none waits up to 10 s for that.
func checkCapture(ctx context.Context, conn *pgx.Conn, capture string) (captureObjects, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, err := inspectCapture(ctx, conn)
		if err != nil {
			return o, err
		}
		var bad string
		switch capture {
		case CaptureNone:
			if o.triggers+o.publications+o.slots+o.decoding != 0 {
				bad = "want none of these"
			}
		case CaptureLogical:
			if o.triggers != 0 || o.publications == 0 || o.slots == 0 {
				bad = "want a slot, a publication and no trigger"
			}
		case CaptureTrigger:
			if o.triggers == 0 || o.publications != 0 || o.slots != 0 {
				bad = "want triggers, no publication and no slot"
			}
		}
		if bad == "" {
			return o, nil
		}
		if capture != CaptureNone || o.triggers+o.publications+o.slots != 0 || time.Now().After(deadline) {
			return o, fmt.Errorf("bench: write tax, %s capture: %s; %s", capture, o, bad)
		}
		select {
		case <-ctx.Done():
			return o, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runTaxPoint measures one configuration at k rows per commit once, in a
// fresh database, and returns its sample and self-check verdict.
func runTaxPoint(ctx context.Context, cfg *WriteTaxConfig, ec *Config, dbs Databases, capture string, k, round int) (s WriteTaxSample, verdict string, err error) {
	mode, idle := strings.CutSuffix(capture, IdleSuffix)
	schema := fmt.Sprintf("trellis_tax_%s_%d_%d", strings.ReplaceAll(capture, "-", "_"), k, round)
	c, err := openTaxCase(ctx, ec, dbs, mode, schema, cfg.TableRows)
	if err != nil {
		return s, "", err
	}
	defer func() {
		if cerr := c.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	objs, err := checkCapture(ctx, c.conn, mode)
	if err != nil {
		return s, "", err
	}
	s.CaptureInstalled = objs.String()
	if idle {
		if err := c.run.stop(); err != nil {
			return s, "", fmt.Errorf("bench: %s (%s capture): %w", taxTransform, mode, err)
		}
	}
	// Every configuration starts its window right after a checkpoint.
	if _, err := c.conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return s, "", fmt.Errorf("bench: checkpoint: %w", err)
	}
	var before applyStats
	if c.reg != nil {
		before = readApplyStats(c.reg, taxTransform)
	}
	m, err := runTaxWriters(ctx, c.dsn, cfg.Writers, k, cfg.TableRows, cfg.Duration, int64(round))
	if c.reg != nil {
		s.ApplySeconds = readApplyStats(c.reg, taxTransform).seconds - before.seconds
	}
	if err != nil {
		if c.run != nil && !idle {
			err = errors.Join(err, c.run.cause())
		}
		return s, "", err
	}
	s.Rows, s.Commits, s.Seconds = m.rows, int64(len(m.latencies)), m.elapsed.Seconds()
	s.RowsPerSecond = float64(m.rows) / m.elapsed.Seconds()
	s.CommitP50Ms = percentile(m.latencies, 0.50).Seconds() * 1000
	s.CommitP99Ms = percentile(m.latencies, 0.99).Seconds() * 1000
	if capture != CaptureNone {
		start := time.Now()
		if err := c.run.converge(ctx, ec); err != nil {
			return s, "", fmt.Errorf("bench: %s after the writers (%s capture, %d rows/commit): %w", taxTransform, capture, k, err)
		}
		s.CatchUpSeconds = time.Since(start).Seconds()
		if verdict, err = verify(ctx, ec, c.conn, taxTransform, taxShape()); err != nil {
			return s, verdict, err
		}
		if err := c.conn.QueryRow(ctx, `SELECT count(*) FROM public.`+pgx.Identifier{taxTransform}.Sanitize()).Scan(&s.TargetRows); err != nil {
			return s, verdict, fmt.Errorf("bench: count the target: %w", err)
		}
	}
	catchUp, check := "", ""
	if capture != CaptureNone {
		catchUp = fmt.Sprintf(", engine apply %.2fs during the writes, catch-up %.2fs", s.ApplySeconds, s.CatchUpSeconds)
		check = ", self-check: " + verdict
	}
	fmt.Fprintf(ec.Progress, "tax  round %d %-7s %4d rows/commit x %d writers: %8d rows in %5.2fs, %9.0f rows/s, commit p50 %7.3f ms p99 %7.3f ms%s%s\n",
		round+1, capture, k, cfg.Writers, s.Rows, s.Seconds, s.RowsPerSecond, s.CommitP50Ms, s.CommitP99Ms, catchUp, check)
	if verdict != "" && verdict != "ok" {
		return s, verdict, fmt.Errorf("bench: write tax, %s capture, %d rows/commit, round %d: target differs from its query: %s", capture, k, round+1, verdict)
	}
	return s, verdict, nil
}

// taxMeasure is what the writers of one point did.
type taxMeasure struct {
	rows      int64
	latencies []time.Duration // one per commit
	elapsed   time.Duration
}

// runTaxWriters runs writers connections writing k-row transactions into
// src (holding rows 1..preload) for d, and returns what they committed
// within d. Writer w updates only ids ≡ w (mod writers) and inserts only
// new ids ≡ w (mod writers), so writers never conflict.
func runTaxWriters(ctx context.Context, dsn string, writers, k, preload int, d time.Duration, seed int64) (taxMeasure, error) {
	conns := make([]*pgx.Conn, writers)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	for i := range conns {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return taxMeasure{}, fmt.Errorf("bench: writer connect: %w", err)
		}
		conns[i] = c
	}
	type out struct {
		rows int64
		lat  []time.Duration
		err  error
	}
	outs := make([]out, writers)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tw := taxWriter{conn: conns[w], w: w, n: writers, preload: preload,
				rng: rand.New(rand.NewSource(seed*1000 + int64(w) + 1))}
			o := &outs[w]
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := tw.commit(ctx, k); err != nil {
					o.err = err
					return
				}
				if t1 := time.Now(); !t1.After(deadline) {
					o.rows += int64(k)
					o.lat = append(o.lat, t1.Sub(t0))
				}
			}
		}()
	}
	wg.Wait()
	m := taxMeasure{elapsed: d}
	var errs []error
	for _, o := range outs {
		m.rows += o.rows
		m.latencies = append(m.latencies, o.lat...)
		errs = append(errs, o.err)
	}
	if err := errors.Join(errs...); err != nil {
		return m, err
	}
	if len(m.latencies) == 0 {
		return m, fmt.Errorf("bench: write tax: no commit finished within %s", d)
	}
	return m, nil
}

// taxWriter is one writer of the write-tax scenario.
type taxWriter struct {
	conn    *pgx.Conn
	w, n    int
	preload int
	inserts int64
	rng     *rand.Rand
}

// row is the next row's statement and arguments: an insert of a new id or
// an update of an existing one, at random.
func (tw *taxWriter) row() (string, []any) {
	if tw.rng.Intn(2) == 0 || tw.preload < tw.n {
		id := int64(tw.preload) + 1 + int64(tw.w) + int64(tw.n)*tw.inserts
		tw.inserts++
		return taxInsertSQL, []any{id, int(id % taxGroups), float64(id%997) / 10}
	}
	// 1 + w + n*j for j in [0, preload/n): ids within 1..preload.
	id := 1 + int64(tw.w) + int64(tw.n)*tw.rng.Int63n(int64(tw.preload/tw.n))
	return taxUpdateSQL, []any{id}
}

// commit writes one transaction of k rows, one statement each. One row is
// one autocommit statement; more are pipelined between BEGIN and COMMIT
// in one round trip.
func (tw *taxWriter) commit(ctx context.Context, k int) error {
	if k == 1 {
		q, args := tw.row()
		if _, err := tw.conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("bench: write tax writer %d: %w", tw.w, err)
		}
		return nil
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for range k {
		q, args := tw.row()
		b.Queue(q, args...)
	}
	b.Queue("COMMIT")
	if err := tw.conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("bench: write tax writer %d: %w", tw.w, err)
	}
	return nil
}

// percentile is the q-quantile of ds (nearest rank); ds is sorted.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// runTaxEndToEnd inserts e.Rows rows into an empty src while Run (with
// capture) is running, and times the first write to convergence.
func runTaxEndToEnd(ctx context.Context, cfg *WriteTaxConfig, ec *Config, dbs Databases, capture string, e EndToEndSize) (r EndToEndResult, err error) {
	schema := fmt.Sprintf("trellis_tax_e2e_%s_%d", capture, e.PerCommit)
	c, err := openTaxCase(ctx, ec, dbs, capture, schema, 0)
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := c.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if _, err := checkCapture(ctx, c.conn, capture); err != nil {
		return r, err
	}
	writers := 1
	if e.PerCommit == 1 {
		writers = cfg.Writers
	}
	r = EndToEndResult{Capture: capture, RowsPerCommit: e.PerCommit, Writers: writers, Rows: e.Rows}
	start := time.Now()
	if e.PerCommit == 1 {
		err = insertSingleRows(ctx, c.dsn, writers, e.Rows)
	} else {
		p := phaseSpec{name: PhaseInsert, rows: e.Rows, perCommit: e.PerCommit}
		_, err = srcData{groups: taxGroups}.write(ctx, c.conn, p)
	}
	if err != nil {
		return r, errors.Join(err, c.run.cause())
	}
	r.WriterSeconds = time.Since(start).Seconds()
	if err := c.run.converge(ctx, ec); err != nil {
		return r, fmt.Errorf("bench: %s end to end (%s capture, %d rows/commit): %w", taxTransform, capture, e.PerCommit, err)
	}
	r.EndToEndSeconds = time.Since(start).Seconds()
	r.RowsPerSecond = float64(e.Rows) / r.EndToEndSeconds
	if r.Verified, err = verify(ctx, ec, c.conn, taxTransform, taxShape()); err != nil {
		return r, err
	}
	fmt.Fprintf(ec.Progress, "tax  end-to-end %-7s %4d rows/commit x %d writer(s): %8d rows, writer %6.2fs, end-to-end %6.2fs, %9.0f rows/s, self-check: %s\n",
		capture, e.PerCommit, writers, e.Rows, r.WriterSeconds, r.EndToEndSeconds, r.RowsPerSecond, r.Verified)
	if r.Verified != "ok" {
		return r, fmt.Errorf("bench: write tax end to end, %s capture, %d rows/commit: target differs from its query: %s", capture, e.PerCommit, r.Verified)
	}
	return r, nil
}

// insertSingleRows inserts ids 1..rows, one autocommit INSERT each, over
// writers connections (writer w takes the ids ≡ w mod writers).
func insertSingleRows(ctx context.Context, dsn string, writers, rows int) error {
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs[w] = fmt.Errorf("bench: writer connect: %w", err)
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			for id := int64(w + 1); id <= int64(rows); id += int64(writers) {
				if _, err := conn.Exec(ctx, taxInsertSQL, id, int(id%taxGroups), float64(id%997)/10); err != nil {
					errs[w] = fmt.Errorf("bench: insert row %d: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WriteTaxTable writes rep as aligned tables, then the goals, one line
// each ("goal met" or "goal missed").
func WriteTaxTable(w io.Writer, rep WriteTaxReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "capture\trows/commit\twriters\trounds\trows/s\tcommits/s\tp50 ms\tp99 ms\trows/s ratio\tp99 ratio\trows/s ratio by round\tapply s\tcatch-up s\tcheck\t")
	for _, p := range rep.Points {
		var byRound []string
		for _, s := range p.Samples {
			byRound = append(byRound, fmt.Sprintf("%.3f", s.RateRatio))
		}
		apply, catchUp := "", ""
		if p.Capture != CaptureNone {
			apply, catchUp = fmt.Sprintf("%.2f", p.ApplySeconds), fmt.Sprintf("%.2f", p.CatchUpSeconds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t\n",
			p.Capture, p.RowsPerCommit, p.Writers, len(p.Samples), p.RowsPerSecond, p.CommitsPerSecond, p.CommitP50Ms, p.CommitP99Ms,
			p.RateRatio, p.P99Ratio, strings.Join(byRound, " "), apply, catchUp, shortCheck(p.Verified))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	if len(rep.EndToEnd) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "end to end\trows/commit\twriters\trows\twriter s\tend-to-end s\trows/s\ttrigger/logical\tcheck\t")
		for _, r := range rep.EndToEnd {
			ratio := ""
			if r.Capture == CaptureTrigger {
				for _, l := range rep.EndToEnd {
					if l.Capture == CaptureLogical && l.RowsPerCommit == r.RowsPerCommit && l.RowsPerSecond > 0 {
						ratio = fmt.Sprintf("%.3f", r.RowsPerSecond/l.RowsPerSecond)
					}
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%.2f\t%.0f\t%s\t%s\t\n", r.Capture, r.RowsPerCommit, r.Writers, r.Rows,
				r.WriterSeconds, r.EndToEndSeconds, r.RowsPerSecond, ratio, shortCheck(r.Verified))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("bench: write table: %w", err)
		}
	}
	if len(rep.Goals) > 0 {
		fmt.Fprintln(w)
	}
	for _, g := range rep.Goals {
		verdict := "goal missed"
		if g.Met {
			verdict = "goal met"
		}
		fmt.Fprintf(w, "%s: %s (measured %.3fx)\n", verdict, g.Goal, g.Got)
	}
	return nil
}
