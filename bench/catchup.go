package bench

// The catch-up scenario: the engine catching up with WAL written while
// Run was stopped, against pg_recvlogical draining the same WAL (Run in
// bench.go, ModeCatchUp with the baseline): Rows rows inserted then
// updated at 1,000 rows per commit, and Rows1 at 1 row per commit, for
// each shape (row, agg, agg1k; see KnownShapes). A point per shape, phase
// and commit size; its ratio is the engine's rows/s over pg_recvlogical's.

import (
	"context"
	"fmt"
	"strings"

	trellis "github.com/trellis-repl/trellis-repl"
)

// CatchUpConfig configures the catch-up scenario.
type CatchUpConfig struct {
	// Rows is the rows inserted, then updated, at 1,000 rows per commit
	// (default 200,000).
	Rows int
	// Rows1 is the same at 1 row per commit (default 20,000).
	Rows1 int
	// Shapes are KnownShapes names (default row, agg).
	Shapes []string
	// RederiveKeys adds Run's re-derive phase, with the hand-written
	// comparison, to the 1,000-row workload (default 0: none).
	RederiveKeys int
	// Modes are Run's modes (default catch-up only; live adds the
	// engine running while the workload writes).
	Modes []string
	// Captures are the capture modes (default logical and trigger): the
	// trigger cases give the trigger path's end-to-end throughput at
	// 1,000 and at 1 row per commit, against the same pg_recvlogical
	// drain. The join workload runs with logical capture only.
	Captures []string
	// JoinFacts, when positive, adds the join workload (join.go): that
	// many facts, 1,000 per commit, over a 1,000-row and a 100-row
	// dimension, shapes joinrow and joinagg (100 groups), with 5
	// dimension changes timed against REFRESH MATERIALIZED VIEW in live
	// mode.
	JoinFacts int
}

func (c *CatchUpConfig) defaults() {
	if c.Rows <= 0 {
		c.Rows = 200_000
	}
	if c.Rows1 <= 0 {
		c.Rows1 = 20_000
	}
	if len(c.Shapes) == 0 {
		c.Shapes = []string{"row", "agg"}
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{ModeCatchUp}
	}
	if len(c.Captures) == 0 {
		c.Captures = []string{trellis.CaptureLogical, trellis.CaptureTrigger}
	}
}

func (s *suiteRun) catchUp(ctx context.Context, round int) error {
	cc := s.cfg.CatchUp
	cfg := Config{Modes: cc.Modes, Baseline: true, Verify: true, ProgressInterval: s.cfg.ProgressInterval, Tuning: s.cfg.Tuning,
		PhaseTimeout: s.cfg.PhaseTimeout, Logger: s.cfg.Logger, Progress: s.cfg.Progress}
	for _, name := range cc.Shapes {
		sh, ok := ShapeByName(name)
		if !ok {
			return fmt.Errorf("bench: unknown shape %q; use row, agg or agg1k", name)
		}
		cfg.Shapes = append(cfg.Shapes, sh)
	}
	cfg.Captures = cc.Captures
	cfg.Workloads = []Workload{{Rows: cc.Rows, PerCommit: 1000, RederiveKeys: cc.RederiveKeys}, {Rows: cc.Rows1, PerCommit: 1}}
	results, err := Run(ctx, cfg, s.dbs)
	if err == nil && cc.JoinFacts > 0 {
		jc := cfg
		jc.Captures = []string{trellis.CaptureLogical}
		jc.Workloads = []Workload{{Rows: cc.JoinFacts, PerCommit: 1000, Shapes: JoinShapes(),
			Join: &JoinSizes{Dim1Rows: 1000, Dim2Rows: 100, Groups: 100, DimChanges: 5}}}
		var jr []Result
		jr, err = Run(ctx, jc, s.dbs)
		results = append(results, jr...)
	}
	for _, r := range results {
		name := fmt.Sprintf("%s %s %s %d/commit", r.caseName(), r.Mode, r.Phase, r.RowsPerCommit)
		if r.Phase == PhaseDimChange {
			name = fmt.Sprintf("%s %s %s", r.caseName(), r.Mode, r.Phase)
		}
		p := Point{Scenario: ScenarioCatchUp, Point: name, Round: round,
			Metrics: map[string]float64{"rows": float64(r.Rows), "rows_per_commit": float64(r.RowsPerCommit),
				"writer_seconds": r.WriterSeconds, "end_to_end_seconds": r.EndToEndSeconds, "rows_per_second": r.RowsPerSecond},
			Labels: map[string]string{"shape": r.Shape, "mode": r.Mode, "phase": r.Phase}}
		if r.Shape != BaselineName {
			p.Metrics["apply_seconds"] = r.ApplySeconds
			p.Labels["verified"] = r.Verified
			if r.BaselineRowsPerSecond > 0 {
				p.Metrics["baseline_rows_per_second"] = r.BaselineRowsPerSecond
				p.Ratio = ratio(r.Ratio)
			}
			if r.Phase == PhaseDimChange {
				// The baseline of a dimension change is REFRESH of the view.
				p.Metrics["refresh_seconds"] = r.RefreshSeconds
				p.Ratio = ratio(r.RefreshRatio)
			}
			if r.HandSeconds > 0 {
				p.Metrics["hand_seconds"], p.Metrics["hand_ratio"] = r.HandSeconds, r.HandRatio
				p.Labels["hand_verified"] = r.HandVerified
			}
		}
		s.emit(p)
		if r.Shape != BaselineName && r.Verified != "ok" {
			err = fmt.Errorf("bench: %s: target differs from its query: %s", p.Point, r.Verified)
		}
		if r.HandVerified != "" && r.HandVerified != "ok" && !strings.HasPrefix(r.HandVerified, "ok") {
			err = fmt.Errorf("bench: %s: hand-written copy differs from its query: %s", p.Point, r.HandVerified)
		}
	}
	return err
}
