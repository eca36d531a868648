package bench

// The suite behind `trellis-repl bench` (issue 11): scenarios users tune
// with, each on a fresh database of the server Databases hands out, each
// checking its targets against their queries at the end (a difference
// fails the run), each reporting one Point per measured figure.
//
//   - write-tax (writetax.go): pgbench's TPC-B-like workload with no
//     capture, a slot drained by pg_recvlogical, trellis-repl with one and
//     with two transforms, and trellis-repl with trigger capture, each
//     run next to a no-capture run and reported as a ratio to it.
//   - latency (latency.go): commit-to-visible latency at 10%, 50% and
//     90% of the sustainable rate.
//   - keep-up (keepup.go): writers at full speed; the backlog sampled
//     every second; the time to converge once they stop.
//   - catch-up (catchup.go): the engine catching up with WAL written while
//     it was stopped, against pg_recvlogical draining the same WAL.
//   - build (build.go): building a target against CREATE TABLE AS.
//   - refresh (build.go): a single-row change reflected in an aggregate,
//     against REFRESH MATERIALIZED VIEW.
//   - many (many.go): one runner subprocess with 1,000 transforms over 100
//     tables: connections held, apply and build time, latency under a
//     light workload, idle cost against ten transforms measured beside
//     it, status times, /metrics series and peak RSS.
//   - memory (memory.go): the runner's peak resident memory, as a child
//     process, on every path of unbounded size (issue 25, ADR 0029).
//   - tpch (tpch.go): each TPC-H query kept as a transform, one refresh
//     round (RF1 + RF2) reflected against REFRESH MATERIALIZED VIEW.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// The scenarios of the suite, in the order they run.
const (
	ScenarioWriteTax = "write-tax"
	ScenarioLatency  = "latency"
	ScenarioKeepUp   = "keep-up"
	ScenarioCatchUp  = "catch-up"
	ScenarioBuild    = "build"
	ScenarioRefresh  = "refresh"
	ScenarioMany     = "many"
)

// Scenarios lists every scenario of the suite, in the order RunSuite runs
// them.
func Scenarios() []string {
	return []string{ScenarioWriteTax, ScenarioLatency, ScenarioKeepUp, ScenarioCatchUp, ScenarioBuild, ScenarioRefresh, ScenarioTPCH, ScenarioMany, ScenarioMemory}
}

// Point is one measured figure of a scenario: one configuration in one
// round. It is written as one JSON object: scenario, point, round, then
// the metrics and labels (sorted by name), then ratio_to_baseline when the
// point has a baseline.
type Point struct {
	// Scenario is one of Scenarios().
	Scenario string
	// Point names the configuration within the scenario (for example
	// "trellis-2" or "50%").
	Point string
	// Round counts from 1.
	Round int
	// Metrics are the measured figures, named with their unit
	// (tps, latency_p99_ms, build_seconds, …).
	Metrics map[string]float64
	// Labels are non-numeric facts: the self-check verdict, what the
	// baseline was, …
	Labels map[string]string
	// Ratio, when set, is the point's figure as a ratio to its baseline
	// (which one each scenario says in docs/performance.md).
	Ratio *float64
	// Sample marks a point that is one sample of a series (keep-up's
	// per-second backlog): in the JSON lines and the charts, not in the
	// summary tables.
	Sample bool
}

// MarshalJSON writes p as a flat object in a fixed key order.
func (p Point) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	field := func(k string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("bench: marshal %s: %w", k, err)
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
		return nil
	}
	if err := errors.Join(field("scenario", p.Scenario), field("point", p.Point), field("round", p.Round)); err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(p.Metrics)) {
		if err := field(k, roundFloat(p.Metrics[k])); err != nil {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		if err := field(k, p.Labels[k]); err != nil {
			return nil, err
		}
	}
	if p.Sample {
		if err := field("sample", true); err != nil {
			return nil, err
		}
	}
	if p.Ratio != nil {
		if err := field("ratio_to_baseline", roundFloat(*p.Ratio)); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Point) UnmarshalJSON(data []byte) error {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("bench: read point: %w", err)
	}
	*p = Point{Metrics: map[string]float64{}, Labels: map[string]string{}}
	for k, v := range m {
		switch k {
		case "scenario":
			p.Scenario, _ = v.(string)
		case "point":
			p.Point, _ = v.(string)
		case "round":
			f, _ := v.(float64)
			p.Round = int(f)
		case "sample":
			p.Sample, _ = v.(bool)
		case "ratio_to_baseline":
			f, _ := v.(float64)
			p.Ratio = &f
		default:
			switch x := v.(type) {
			case float64:
				p.Metrics[k] = x
			case string:
				p.Labels[k] = x
			}
		}
	}
	return nil
}

// roundFloat keeps 6 significant digits: the figures are noisier than
// that, and the JSON stays readable.
func roundFloat(f float64) float64 {
	var out float64
	fmt.Sscanf(fmt.Sprintf("%.6g", f), "%g", &out)
	return out
}

func ratio(x float64) *float64 { return &x }

// Goal is a target a scenario's point is checked against in the summary:
// the median over rounds of Metric (or of ratio_to_baseline when Metric is
// "ratio_to_baseline") must be at most (AtMost) or at least Want.
type Goal struct {
	// Scenario and Point name the point checked.
	Scenario string
	Point    string
	// Metric is a Metrics key, or "ratio_to_baseline".
	Metric string
	// AtMost says the median must be at most Want (else at least).
	AtMost bool
	Want   float64
	// Text describes the goal in the summary.
	Text string
}

// Goals are the suite's goals (issue 11, and the write tax of issue 9).
func Goals() []Goal {
	return append([]Goal{
		{ScenarioWriteTax, PointTrellis2, "ratio_to_baseline", false, GoalTwoTransformsRatio, "TPS ≥ 0.85× no capture"},
		{ScenarioWriteTax, writeTaxPointName(WorkloadRows1, PointTrellis1), "ratio_to_baseline", false, GoalLogicalRatio, "TPS ≥ 0.9× no capture"},
		{ScenarioWriteTax, writeTaxPointName(WorkloadRows1, PointTrigger), "ratio_to_baseline", false, GoalTriggerRatio, "TPS ≥ 0.5× no capture"},
		{ScenarioLatency, "50%", "p99_ms", true, 250, "p99 ≤ 250 ms"},
		{ScenarioKeepUp, PointKeepUp, "converge_seconds", true, 10, "converged ≤ 10 s after the writers stop"},
		{ScenarioKeepUp, PointKeepUp, "bounded", false, 1, "backlog bounded while writing"},
		{ScenarioBuild, "row", "ratio_to_baseline", true, 2, "build ≤ 2× CREATE TABLE AS"},
		{ScenarioBuild, "agg", "ratio_to_baseline", true, 2, "build ≤ 2× CREATE TABLE AS"},
		{ScenarioRefresh, PointRefresh, "ratio_to_baseline", false, 100, "≥ 100× faster than REFRESH MATERIALIZED VIEW"},
	}, slices.Concat(tpchGoals(), manyGoals(), memoryGoals())...)
}

// SuiteConfig configures RunSuite.
type SuiteConfig struct {
	// Scenarios to run (default: all), in any order; they run in the order
	// of Scenarios().
	Scenarios []string
	// Rounds is how many times each scenario is measured (default 2).
	Rounds int
	// WriteTax, Latency, KeepUp, CatchUp, Build, Refresh, TPCH, Many and
	// Memory size the scenarios (zero fields: the defaults).
	WriteTax WriteTaxConfig
	Latency  LatencyConfig
	KeepUp   KeepUpConfig
	CatchUp  CatchUpConfig
	Build    BuildConfig
	Refresh  RefreshConfig
	TPCH     TPCHConfig
	Many     ManyConfig
	Memory   MemoryConfig
	// ProgressInterval is trellis.Config's (default 50ms): how late
	// convergence is noticed.
	ProgressInterval time.Duration
	// PhaseTimeout bounds every wait for convergence (default 10m).
	PhaseTimeout time.Duration
	// Tuning is passed to every embedded runner (zero: the defaults).
	Tuning Tuning
	// Logger receives the library's logs; nil discards them.
	Logger *slog.Logger
	// Progress receives a line per finished measurement; nil discards.
	Progress io.Writer
	// Emit, when set, receives every point as it is measured.
	Emit func(Point) error
}

// QuickSuite is the configuration of `bench --quick`: every scenario at a
// small size, one round. It asserts correctness and that each scenario
// measures its points; its timings mean little.
func QuickSuite() SuiteConfig {
	c := SuiteConfig{
		Rounds: 1,
		WriteTax: WriteTaxConfig{Scale: 1, Duration: 2 * time.Second, Warmup: time.Second,
			Points:    []string{PointRecvLogical, PointTrellis1, PointTrellis2, PointTrigger},
			Workloads: []string{WorkloadTPCB, WorkloadRows100}},
		Latency: LatencyConfig{Probe: 1500 * time.Millisecond, Duration: 1500 * time.Millisecond},
		KeepUp:  KeepUpConfig{Scale: 1, Duration: 4 * time.Second},
		CatchUp: CatchUpConfig{Rows: 5_000, Rows1: 500, Shapes: []string{"row"}},
		Build:   BuildConfig{Rows: 20_000, Groups: 2_000},
		Refresh: RefreshConfig{Rows: 20_000, Groups: 2_000, Changes: 3},
		// Q6 reads one table; Q21 joins four with EXISTS and NOT EXISTS.
		TPCH: TPCHConfig{SF: 0.01, Queries: []int{6, 21}, Rounds: 1},
		Many: ManyConfig{Tables: 3, Rows: 200, Workload: 2 * time.Second, Settle: time.Second, Idle: 3 * time.Second,
			StatusRuns: 1},
		Memory: MemoryConfig{Rows: 20_000, FailEvery: 1_000, BuildTransforms: 20, BuildTables: 4, BuildRows: 2_000},
	}
	c.defaults()
	c.Logger, c.Progress = nil, nil
	return c
}

func (c *SuiteConfig) defaults() {
	if len(c.Scenarios) == 0 {
		c.Scenarios = Scenarios()
	}
	if c.Rounds <= 0 {
		c.Rounds = 2
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 50 * time.Millisecond
	}
	if c.PhaseTimeout <= 0 {
		c.PhaseTimeout = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	c.WriteTax.defaults()
	c.Latency.defaults()
	c.KeepUp.defaults()
	c.CatchUp.defaults()
	c.Build.defaults()
	c.Refresh.defaults()
	c.TPCH.defaults()
	c.Many.defaults()
	c.Memory.defaults()
}

// engineConfig is the Config the shared helpers (running.converge, verify)
// read.
func (c *SuiteConfig) engineConfig() *Config {
	ec := &Config{ProgressInterval: c.ProgressInterval, PhaseTimeout: c.PhaseTimeout, Tuning: c.Tuning, Logger: c.Logger, Progress: c.Progress, Verify: true}
	ec.defaults()
	return ec
}

// ScenarioOutcome is how one scenario of a suite run went.
type ScenarioOutcome struct {
	// Name is the scenario.
	Name string `json:"name"`
	// Seconds is how long its rounds took, setup included.
	Seconds float64 `json:"seconds"`
	// Points counts the points it measured.
	Points int `json:"points"`
	// Error is why the scenario failed ("" when it did not).
	Error string `json:"error,omitempty"`
}

// SuiteReport is what RunSuite measured.
type SuiteReport struct {
	// Points are every point measured, in order.
	Points []Point
	// Scenarios are the outcomes of the scenarios run, in order.
	Scenarios []ScenarioOutcome
	// Settings describes the run (sizes, server, code revision); the
	// caller fills in what RunSuite cannot know.
	Settings map[string]any
}

// suiteRun is one RunSuite call's state.
type suiteRun struct {
	cfg *SuiteConfig
	ec  *Config
	dbs Databases
	rep *SuiteReport
	// emitErr is the first error Emit returned.
	emitErr error
}

// emit records p and hands it to cfg.Emit.
func (s *suiteRun) emit(p Point) {
	s.rep.Points = append(s.rep.Points, p)
	if s.cfg.Emit != nil && s.emitErr == nil {
		s.emitErr = s.cfg.Emit(p)
	}
}

func (s *suiteRun) progressf(format string, args ...any) {
	fmt.Fprintf(s.cfg.Progress, format+"\n", args...)
}

// RunSuite runs the scenarios of cfg, every round of each before the next
// scenario. A scenario that fails (a target that differs from its query,
// no point measured, or any other error) does not stop the others; the
// returned error joins every scenario's failure.
func RunSuite(ctx context.Context, cfg SuiteConfig, dbs Databases) (SuiteReport, error) {
	cfg.defaults()
	rep := SuiteReport{Settings: map[string]any{}}
	want := map[string]bool{}
	for _, sc := range cfg.Scenarios {
		if !slices.Contains(Scenarios(), sc) {
			return rep, fmt.Errorf("bench: unknown scenario %q; use %s", sc, strings.Join(Scenarios(), ", "))
		}
		want[sc] = true
	}
	if err := cfg.WriteTax.check(); err != nil {
		return rep, err
	}
	if err := cfg.TPCH.check(); err != nil {
		return rep, err
	}
	if want[ScenarioMemory] {
		if err := cfg.Memory.check(); err != nil {
			return rep, err
		}
	}
	s := &suiteRun{cfg: &cfg, ec: cfg.engineConfig(), dbs: dbs, rep: &rep}
	runners := map[string]func(context.Context, int) error{
		ScenarioWriteTax: s.writeTax,
		ScenarioLatency:  s.latency,
		ScenarioKeepUp:   s.keepUp,
		ScenarioCatchUp:  s.catchUp,
		ScenarioBuild:    s.build,
		ScenarioRefresh:  s.refresh,
		ScenarioTPCH:     s.tpch,
		ScenarioMany:     s.many,
		ScenarioMemory:   s.memory,
	}
	var errs []error
	for _, sc := range Scenarios() {
		if !want[sc] {
			continue
		}
		start, before := time.Now(), len(rep.Points)
		var err error
		for round := 1; round <= cfg.Rounds && err == nil; round++ {
			s.progressf("bench: %s, round %d of %d", sc, round, cfg.Rounds)
			err = runners[sc](ctx, round)
		}
		out := ScenarioOutcome{Name: sc, Seconds: time.Since(start).Seconds(), Points: len(rep.Points) - before}
		if err == nil && out.Points == 0 {
			err = fmt.Errorf("bench: %s measured no point", sc)
		}
		if err != nil {
			err = fmt.Errorf("bench: %s: %w", sc, err)
			out.Error = err.Error()
			errs = append(errs, err)
			s.progressf("bench: %s FAILED after %.1fs: %v", sc, out.Seconds, err)
		} else {
			s.progressf("bench: %s done in %.1fs, %d points", sc, out.Seconds, out.Points)
		}
		rep.Scenarios = append(rep.Scenarios, out)
		if ctx.Err() != nil {
			break
		}
	}
	if s.emitErr != nil {
		errs = append(errs, fmt.Errorf("bench: write a point: %w", s.emitErr))
	}
	return rep, errors.Join(errs...)
}

// DefaultSuite is the configuration of a full `bench` run: every
// scenario at its default size, two rounds.
func DefaultSuite() SuiteConfig {
	var c SuiteConfig
	c.defaults()
	c.Logger, c.Progress = nil, nil
	return c
}
