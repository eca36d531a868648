// Package bench measures trellis-repl's throughput end to end, and the rate
// at which pg_recvlogical alone drains the same WAL, in one run so that the
// figures can be compared as ratios on a shared, noisy machine.
//
// A run is a list of cases. Each case gets a fresh database with a source
// table src(id bigint primary key, g int, v numeric, pad text) and writes
// the same workload into it: N inserts, then N updates that move every row
// to another group, at a given number of rows per commit, then (optionally)
// one transaction updating K rows (the "re-derive" microbenchmark). An
// engine case maintains one transform while the workload runs and times
// each phase from its first write to convergence; the baseline case writes
// each phase with nothing reading the slot, then times pg_recvlogical
// draining it.
//
// A join workload (Workload.Join, see join.go) writes a star schema
// instead: a fact table joined to two dimensions, facts inserted then
// updated in the same way, then single-row dimension changes, each timed
// from its commit to convergence next to REFRESH MATERIALIZED VIEW of the
// same query on the same data.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Shape is one transform the benchmark maintains.
type Shape struct {
	// Name identifies the shape in reports (row, agg, agg1k).
	Name string
	// Groups is how many distinct values of src.g the workload writes.
	Groups int
	// Query is the transform's SELECT.
	Query string
	// Columns are the target's visible columns, in select-list order, for
	// the self-check.
	Columns []string
	// hand is the hand-written re-derive measured next to the engine's in
	// the re-derive phase (handNone: not measured). Only the known shapes
	// have one: it is written for their query.
	hand handKind
	// Join says the shape reads the star schema of a join workload (see
	// JoinShapes); the other shapes read src.
	Join bool
}

// baselineGroups is the group count the baseline's workload writes (the
// same as the row and agg shapes, so the WAL is the same).
const baselineGroups = 100_000

// KnownShapes returns the shapes the harness knows: row (a row transform,
// one target row per source row), agg (an aggregate over ~100k groups, with
// invertible count/sum and a recomputed min) and agg1k (the same aggregate
// over 1,000 groups: many rows per group, so group rows are rewritten
// often).
func KnownShapes() []Shape {
	const aggQuery = `SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo FROM src GROUP BY g`
	aggCols := []string{"g", "n", "s", "lo"}
	return []Shape{
		{Name: "row", Groups: baselineGroups,
			Query:   `SELECT id, g, v * 2 AS v2 FROM src WHERE g >= 0`,
			Columns: []string{"id", "g", "v2"}, hand: handRow},
		{Name: "agg", Groups: baselineGroups, Query: aggQuery, Columns: aggCols, hand: handAgg},
		{Name: "agg1k", Groups: 1_000, Query: aggQuery, Columns: aggCols, hand: handAgg},
	}
}

// ShapeByName returns the known shape called name.
func ShapeByName(name string) (Shape, bool) {
	for _, s := range KnownShapes() {
		if s.Name == name {
			return s, true
		}
	}
	return Shape{}, false
}

// BaselineName is the Shape column of pg_recvlogical results.
const BaselineName = "pg_recvlogical"

// The phases of a workload.
const (
	PhaseInsert   = "insert"
	PhaseUpdate   = "update"
	PhaseRederive = "rederive"
	// PhaseDimChange (join workloads, live mode): single-row changes to
	// the first dimension, each timed from its commit to convergence,
	// next to REFRESH MATERIALIZED VIEW of the same query.
	PhaseDimChange = "dimchange"
)

// The datasets a workload writes (Result.Data).
const (
	// DataSrc is the single table src.
	DataSrc = "src"
	// DataStar is the star schema of join workloads: fact, dim1, dim2.
	DataStar = "star"
)

// Modes of measuring the engine.
const (
	// ModeLive writes each phase while Run is running: end-to-end runs
	// from the first write to convergence, so the writer and the engine
	// share the machine, as in production.
	ModeLive = "live"
	// ModeCatchUp writes each phase while Run is stopped, then starts Run:
	// end-to-end runs from Run's start to convergence. This is the
	// engine's counterpart of the pg_recvlogical drain.
	ModeCatchUp = "catchup"
	// ModeDrain is the mode of the pg_recvlogical baseline.
	ModeDrain = "drain"
)

// Workload is one commit shape: how many rows, how many per commit.
type Workload struct {
	// Rows is how many rows are inserted, then updated.
	Rows int
	// PerCommit is how many rows each transaction writes.
	PerCommit int
	// RederiveKeys, when positive, adds a phase that updates that many
	// rows (moving them between groups) in a single transaction.
	RederiveKeys int
	// Shapes, when set, replaces Config.Shapes for this workload.
	Shapes []Shape
	// Join, when set, makes this a join workload: Rows facts (inserted,
	// then updated, PerCommit per commit) referencing two dimensions
	// loaded beforehand, then Join.DimChanges dimension changes.
	// RederiveKeys does not apply. Its shapes must be join shapes.
	Join *JoinSizes
}

// Databases hands out fresh, empty databases on a server with
// wal_level=logical, as a superuser DSN. drop removes the database (and its
// replication slots); it may be a no-op when the caller cleans up itself.
type Databases interface {
	NewDatabase(ctx context.Context) (dsn string, drop func(context.Context) error, err error)
}

// Config configures a benchmark run.
type Config struct {
	// Workloads are the commit shapes to run, in order.
	Workloads []Workload
	// Shapes are the transforms to measure for every workload.
	Shapes []Shape
	// Modes are how each shape is measured: ModeLive, ModeCatchUp, or
	// both (one case, with a fresh database, per mode).
	Modes []string
	// Captures are the capture modes each engine case runs with:
	// trellis.CaptureLogical, trellis.CaptureTrigger, or both (one case
	// each; default logical only). With trigger capture the source's
	// triggers record changes in the capture log whether Run runs or not,
	// and Run drains it.
	Captures []string
	// Baseline adds a pg_recvlogical case per workload.
	Baseline bool
	// BaselineRepeats is how many times each phase's WAL is drained (one
	// slot each); the fastest counts (default 2).
	BaselineRepeats int
	// RecvLogical is the pg_recvlogical binary (default: found on PATH).
	RecvLogical string
	// ProgressInterval is passed to trellis.Config: how often an idle
	// transform records progress, which bounds how late convergence is
	// noticed (default 50ms).
	ProgressInterval time.Duration
	// BatchSize is passed to trellis.Config (0 = the library's default).
	BatchSize int
	// Tuning holds the runner's latency and sync knobs, passed to
	// trellis.Config as they are (zero fields: the library's defaults).
	Tuning Tuning
	// Verify compares the target with its query after every phase (not
	// timed).
	Verify bool
	// RecheckAfter is how long to wait before checking a differing target
	// again (default 10s).
	RecheckAfter time.Duration
	// PhaseTimeout bounds each phase's wait for convergence (default 30m).
	PhaseTimeout time.Duration
	// Logger receives the library's logs; nil discards them.
	Logger *slog.Logger
	// Progress, when set, receives one line per finished phase.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 50 * time.Millisecond
	}
	if c.BaselineRepeats <= 0 {
		c.BaselineRepeats = 2
	}
	if c.RecheckAfter <= 0 {
		c.RecheckAfter = 10 * time.Second
	}
	if c.PhaseTimeout <= 0 {
		c.PhaseTimeout = 30 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{ModeLive}
	}
	if len(c.Captures) == 0 {
		c.Captures = []string{trellis.CaptureLogical}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Result is one measured phase of one case.
type Result struct {
	// Data is the dataset the workload wrote: DataSrc or DataStar.
	Data string `json:"data"`
	// Shape is the transform shape, or BaselineName.
	Shape string `json:"shape"`
	// Mode is live or catchup for the engine, drain for the baseline.
	Mode string `json:"mode"`
	// Capture is the engine's capture mode (logical or trigger); empty
	// for the baseline.
	Capture string `json:"capture,omitempty"`
	// Phase is insert, update, rederive or dimchange.
	Phase         string `json:"phase"`
	RowsPerCommit int    `json:"rows_per_commit"`
	Rows          int    `json:"rows"`
	// WriterSeconds is how long the writer took to write the phase (for
	// the baseline, with nothing reading the slot).
	WriterSeconds float64 `json:"writer_seconds"`
	// EndToEndSeconds is, live, from the first write to convergence;
	// catch-up, from Run's start to convergence; for the baseline, how long
	// pg_recvlogical took to drain the phase's WAL after it was written;
	// for dimchange, the median of ChangeSamples.
	EndToEndSeconds float64 `json:"end_to_end_seconds"`
	// RowsPerSecond is Rows / EndToEndSeconds.
	RowsPerSecond float64 `json:"rows_per_second"`
	// BaselineRowsPerSecond is pg_recvlogical's rate for the same workload
	// and phase in this run (0 when not measured).
	BaselineRowsPerSecond float64 `json:"baseline_rows_per_second,omitempty"`
	// Ratio is RowsPerSecond / BaselineRowsPerSecond.
	Ratio float64 `json:"ratio,omitempty"`
	// KeysApplied is the transform's applied-key counter after the phase
	// (cumulative over the case; shows coalescing).
	KeysApplied int64 `json:"keys_applied,omitempty"`
	// ApplySeconds is the time the engine spent inside apply transactions
	// (re-derive + write, visibility wait included) during the phase;
	// Applies counts those transactions. The rest of the end-to-end time
	// is the writer, capture and the engine's own bookkeeping.
	ApplySeconds float64 `json:"apply_seconds,omitempty"`
	Applies      int64   `json:"apply_transactions,omitempty"`
	// SlotTransactions counts transactions the engine received from the
	// slot during the phase (its own apply transactions included).
	SlotTransactions int64 `json:"slot_transactions,omitempty"`
	// HandSeconds (re-derive phase only) is how long hand-written
	// set-based SQL took, in the same database right after the engine's
	// phase, to re-derive the same changed keys into hand-maintained copies
	// of the target (see handwritten.go): one transaction, commit included.
	// HandKeysSeconds is how long loading the changed ids into a temporary
	// table took, before that transaction; it is not part of HandSeconds.
	HandSeconds     float64 `json:"hand_seconds,omitempty"`
	HandKeysSeconds float64 `json:"hand_keys_seconds,omitempty"`
	// HandRatio is HandSeconds / ApplySeconds: above 1, the engine's apply
	// transactions took less time than the hand-written SQL.
	HandRatio float64 `json:"hand_ratio,omitempty"`
	// HandVerified is the hand-written copy compared with the query after
	// its re-derive: "ok", "DIFFERS …", or "" (not checked).
	HandVerified string `json:"hand_verified,omitempty"`
	// DrainSamples are the baseline's drain times in seconds, one per
	// repeat (EndToEndSeconds is the fastest).
	DrainSamples []float64 `json:"drain_samples_seconds,omitempty"`
	// ChangeSamples (dimchange) are the single-row dimension changes'
	// times in seconds, each from sending the UPDATE (autocommit) until
	// AwaitConverged returned; Rows is how many facts the changed rows
	// were referenced by, on average.
	ChangeSamples []float64 `json:"change_samples_seconds,omitempty"`
	// RefreshSeconds (dimchange) is the median of RefreshSamples: REFRESH
	// MATERIALIZED VIEW of the shape's query, in the same database right
	// after the changes (Run stopped), one sample per change.
	RefreshSeconds float64   `json:"refresh_seconds,omitempty"`
	RefreshSamples []float64 `json:"refresh_samples_seconds,omitempty"`
	// RefreshRatio is RefreshSeconds / EndToEndSeconds: above 1, the
	// engine converged faster than the view refreshed.
	RefreshRatio float64 `json:"refresh_ratio,omitempty"`
	// Verified is the self-check after the phase: "ok", "LATE: …" (equal
	// only some time after convergence was reported), "DIFFERS …", or ""
	// (not checked).
	Verified string `json:"verified,omitempty"`
}

// Run runs every case of cfg and returns the results in order, with the
// baseline rates filled in. A failing case stops the run; the results
// measured so far are returned with the error.
func Run(ctx context.Context, cfg Config, dbs Databases) ([]Result, error) {
	cfg.defaults()
	for _, m := range cfg.Modes {
		if m != ModeLive && m != ModeCatchUp {
			return nil, fmt.Errorf("bench: unknown mode %q; use %s or %s", m, ModeLive, ModeCatchUp)
		}
	}
	for _, c := range cfg.Captures {
		if c != trellis.CaptureLogical && c != trellis.CaptureTrigger {
			return nil, fmt.Errorf("bench: unknown capture %q; use %s or %s", c, trellis.CaptureLogical, trellis.CaptureTrigger)
		}
	}
	var out []Result
	for _, wl := range cfg.Workloads {
		if wl.Rows <= 0 || wl.PerCommit <= 0 {
			return out, fmt.Errorf("bench: workload needs positive rows and rows per commit, got %d rows, %d per commit", wl.Rows, wl.PerCommit)
		}
		shapes := cfg.Shapes
		if len(wl.Shapes) > 0 {
			shapes = wl.Shapes
		}
		for _, sh := range shapes {
			if sh.Join != (wl.Join != nil) {
				return out, fmt.Errorf("bench: shape %s does not fit a %s workload (join shapes read the star schema, the others src)", sh.Name, wl.data(0).name())
			}
		}
		if wl.Join != nil {
			if err := wl.Join.check(); err != nil {
				return out, err
			}
		}
		var base []Result
		if cfg.Baseline {
			rs, err := runBaseline(ctx, &cfg, dbs, wl)
			out = append(out, rs...)
			if err != nil {
				return out, err
			}
			base = rs
		}
		for _, capture := range cfg.Captures {
			for _, sh := range shapes {
				for _, mode := range cfg.Modes {
					rs, err := runEngine(ctx, &cfg, dbs, wl, sh, mode, capture)
					for i := range rs {
						attachBaseline(&rs[i], base)
					}
					out = append(out, rs...)
					if err != nil {
						return out, err
					}
				}
			}
		}
	}
	return out, nil
}

func attachBaseline(r *Result, base []Result) {
	for _, b := range base {
		if b.Data == r.Data && b.Phase == r.Phase && b.RowsPerCommit == r.RowsPerCommit && b.Rows == r.Rows && b.RowsPerSecond > 0 {
			r.BaselineRowsPerSecond = b.RowsPerSecond
			r.Ratio = r.RowsPerSecond / b.RowsPerSecond
		}
	}
}

func newResult(data, shape, mode, phase string, perCommit, rows int, writer, e2e time.Duration) Result {
	r := Result{Data: data, Shape: shape, Mode: mode, Phase: phase, RowsPerCommit: perCommit, Rows: rows,
		WriterSeconds: writer.Seconds(), EndToEndSeconds: e2e.Seconds()}
	if e2e > 0 {
		r.RowsPerSecond = float64(rows) / e2e.Seconds()
	}
	return r
}

// caseName is the shape, with the capture mode when it is not logical.
func (r Result) caseName() string {
	if r.Capture == trellis.CaptureTrigger {
		return r.Shape + " " + r.Capture
	}
	return r.Shape
}

func progress(cfg *Config, r Result) {
	apply := ""
	if r.Shape != BaselineName {
		apply = fmt.Sprintf(", apply %8.2fs", r.ApplySeconds)
	}
	fmt.Fprintf(cfg.Progress, "%-4s %-14s %-7s %-9s %6d rows/commit %9d rows: writer %8.2fs, end-to-end %8.2fs, %10.0f rows/s%s\n",
		r.Data, r.caseName(), r.Mode, r.Phase, r.RowsPerCommit, r.Rows, r.WriterSeconds, r.EndToEndSeconds, r.RowsPerSecond, apply)
}

// progressHand reports r's hand-written baseline.
func progressHand(cfg *Config, r Result) {
	check := ""
	if r.HandVerified != "" {
		check = ", self-check: " + r.HandVerified
	}
	fmt.Fprintf(cfg.Progress, "%-4s %-14s %-7s %-9s hand-written SQL: re-derive %.2fs (ids loaded in %.2fs, not counted); engine apply %.2fs; hand/apply %.3g%s\n",
		r.Data, r.Shape, r.Mode, r.Phase, r.HandSeconds, r.HandKeysSeconds, r.ApplySeconds, r.HandRatio, check)
}
