package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// column is one metric column of a scenario's summary table.
type column struct {
	metric string // a Metrics key, or "ratio_to_baseline"
	header string
	format string
}

// summaryColumns are the columns of each scenario's table.
var summaryColumns = map[string][]column{
	ScenarioWriteTax: {
		{"tps", "TPS", "%.0f"}, {"rows_per_second", "rows/s", "%.0f"}, {"latency_avg_ms", "latency avg ms", "%.2f"}, {"latency_p99_ms", "latency p99 ms", "%.2f"},
		{"ratio_to_baseline", "TPS ratio", "%.3f"}, {"p99_ratio", "p99 ratio", "%.3f"},
		{"runner_cpu_us_per_txn", "runner CPU µs/txn", "%.0f"}, {"applier_cpu_us_per_txn", "appliers CPU µs/txn", "%.0f"},
		{"applier_cpu_us_per_key", "appliers CPU µs/key", "%.0f"}, {"recvlogical_cpu_us_per_txn", "pg_recvlogical CPU µs/txn", "%.0f"},
		{"catch_up_seconds", "catch-up s", "%.2f"},
	},
	ScenarioLatency: {
		{"rate_per_second", "rows/s", "%.0f"}, {"p50_ms", "p50 ms", "%.1f"}, {"p95_ms", "p95 ms", "%.1f"},
		{"p99_ms", "p99 ms", "%.1f"}, {"max_ms", "max ms", "%.1f"},
	},
	ScenarioKeepUp: {
		{"tps", "TPS", "%.0f"}, {"max_keys_waiting", "max keys waiting", "%.0f"},
		{"first_third_max_keys_waiting", "first third max", "%.0f"}, {"last_third_max_keys_waiting", "last third max", "%.0f"},
		{"max_lag_bytes", "max lag bytes", "%.0f"}, {"bounded", "bounded", "%.0f"}, {"converge_seconds", "converge s", "%.2f"},
	},
	ScenarioCatchUp: {
		{"rows", "rows", "%.0f"}, {"end_to_end_seconds", "seconds", "%.2f"}, {"rows_per_second", "rows/s", "%.0f"},
		{"baseline_rows_per_second", "pg_recvlogical rows/s", "%.0f"}, {"ratio_to_baseline", "ratio", "%.3f"},
	},
	ScenarioBuild: {
		{"source_rows", "source rows", "%.0f"}, {"target_rows", "target rows", "%.0f"}, {"build_seconds", "build s", "%.2f"},
		{"define_seconds", "of which define s", "%.2f"}, {"ctas_seconds", "CREATE TABLE AS s", "%.2f"},
		{"ratio_to_baseline", "build / CTAS", "%.2f"},
	},
	ScenarioRefresh: {
		{"source_rows", "source rows", "%.0f"}, {"groups", "groups", "%.0f"}, {"change_ms", "change -> visible ms", "%.1f"},
		{"refresh_ms", "REFRESH ms", "%.0f"}, {"ratio_to_baseline", "REFRESH / change", "%.0f"},
	},
	ScenarioTPCH: {
		{"build_seconds", "build s", "%.1f"}, {"round_ms", "round -> converged ms", "%.0f"},
		{"round_max_ms", "max ms", "%.0f"}, {"apply_ms", "of which applying ms", "%.0f"}, {"applies", "apply transactions", "%.0f"},
		{"refresh_ms", "REFRESH ms", "%.0f"}, {"ratio_to_baseline", "REFRESH / round", "%.1f"}, {"apply_ratio", "REFRESH / applying", "%.1f"},
	},
	ScenarioMany: {
		{"transforms", "transforms", "%.0f"}, {"connections_max", "connections max", "%.0f"},
		{"apply_seconds", "apply s", "%.2f"}, {"build_seconds", "build s", "%.1f"},
		{"latency_p50_ms", "p50 ms", "%.1f"}, {"latency_p99_ms", "p99 ms", "%.1f"},
		{"idle_transactions_per_second", "idle xact/s", "%.2f"}, {"idle_statements_per_second", "idle statements/s", "%.2f"},
		{"idle_runner_cpu_percent", "idle runner CPU %", "%.2f"}, {"idle_backend_cpu_percent", "idle backends CPU %", "%.2f"},
		{"ratio_to_baseline", "idle ratio", "%.2f"}, {"idle_runner_cpu_ratio", "idle CPU ratio", "%.2f"},
		{"peak_rss_mib", "peak RSS MiB", "%.0f"},
		{"status_seconds", "status s", "%.2f"}, {"status_json_seconds", "--json s", "%.2f"},
		{"status_watch_seconds", "--watch s", "%.2f"}, {"status_watch_refresh_seconds", "refresh s", "%.2f"},
		{"metrics_series_per_transform", "series/transform", "%.0f"},
	},
}

// summaryText explains each scenario's table in one sentence.
var summaryText = map[string]string{
	ScenarioWriteTax: "pgbench TPC-B-like (bare point names), and pgbench_accounts updated at 1 (rows1) and 100 (rows100) rows per commit; ratios are to the no-capture run next to each point (each none row is the median of its workload's).",
	ScenarioLatency:  "Commit-to-visible latency of single-row commits at fractions of the sustainable rate.",
	ScenarioKeepUp:   "pgbench at full speed with two transforms live; backlog sampled every second; convergence after pgbench stops.",
	ScenarioCatchUp:  "Engine catching up with WAL written while Run was stopped, against pg_recvlogical draining the same WAL.",
	ScenarioBuild:    "Building a target from scratch against CREATE TABLE AS of the same query.",
	ScenarioRefresh:  "A single-row change reflected in the aggregate target against REFRESH MATERIALIZED VIEW of the same query.",
	ScenarioTPCH:     "Each TPC-H query kept alone: one refresh round (RF1 + RF2, 0.1% of orders) until the target reflects it, against REFRESH MATERIALIZED VIEW of the same query after the same round.",
	ScenarioMany:     "One runner subprocess (run's defaults) with ten transforms per source table: few is one table, many all of them; idle costs measured in the same window, ratios many over few.",
}

// metricOf is p's figure named metric.
func metricOf(p Point, metric string) (float64, bool) {
	if metric == "ratio_to_baseline" {
		if p.Ratio == nil {
			return 0, false
		}
		return *p.Ratio, true
	}
	v, ok := p.Metrics[metric]
	return v, ok
}

// pointGroup is every round of one point.
type pointGroup struct {
	scenario, point string
	rounds          []Point
}

// median of metric over the group's rounds that have it.
func (g pointGroup) median(metric string) (float64, bool) {
	var xs []float64
	for _, p := range g.rounds {
		if v, ok := metricOf(p, metric); ok {
			xs = append(xs, v)
		}
	}
	return median(xs), len(xs) > 0
}

// groupPoints groups the summary points (samples left out) by scenario and
// point, in the order they first appear.
func groupPoints(points []Point) map[string][]*pointGroup {
	out := map[string][]*pointGroup{}
	idx := map[[2]string]*pointGroup{}
	for _, p := range points {
		if p.Sample {
			continue
		}
		k := [2]string{p.Scenario, p.Point}
		g := idx[k]
		if g == nil {
			g = &pointGroup{scenario: p.Scenario, point: p.Point}
			idx[k] = g
			out[p.Scenario] = append(out[p.Scenario], g)
		}
		g.rounds = append(g.rounds, p)
	}
	return out
}

// GoalVerdict is one goal checked against a run's medians.
type GoalVerdict struct {
	Goal Goal
	// Got is the median over rounds; Measured is false when the point
	// or its metric was not measured.
	Got      float64
	Measured bool
	Met      bool
}

// CheckGoals checks Goals() against the medians of points.
func CheckGoals(points []Point) []GoalVerdict {
	groups := groupPoints(points)
	var out []GoalVerdict
	for _, goal := range Goals() {
		for _, g := range groups[goal.Scenario] {
			if g.point != goal.Point {
				continue
			}
			v := GoalVerdict{Goal: goal}
			v.Got, v.Measured = g.median(goal.Metric)
			v.Met = v.Measured && ((goal.AtMost && v.Got <= goal.Want) || (!goal.AtMost && v.Got >= goal.Want))
			out = append(out, v)
		}
	}
	return out
}

// WriteMarkdown writes rep as Markdown: the scenarios' outcomes, then one
// table per scenario with the medians over rounds and a goal column.
func WriteMarkdown(w io.Writer, rep SuiteReport) error {
	var b strings.Builder
	b.WriteString("# trellis-repl bench\n\n")
	if len(rep.Settings) > 0 {
		for _, k := range slices.Sorted(maps.Keys(rep.Settings)) {
			fmt.Fprintf(&b, "- %s: %v\n", k, rep.Settings[k])
		}
		b.WriteString("\n")
	}
	b.WriteString("| scenario | seconds | points | outcome |\n|---|---:|---:|---|\n")
	for _, o := range rep.Scenarios {
		outcome := "ok"
		if o.Error != "" {
			outcome = "FAILED: " + strings.ReplaceAll(oneLineText(o.Error), "|", "\\|")
		}
		fmt.Fprintf(&b, "| %s | %.1f | %d | %s |\n", o.Name, o.Seconds, o.Points, outcome)
	}
	groups := groupPoints(rep.Points)
	verdicts := CheckGoals(rep.Points)
	for _, sc := range Scenarios() {
		gs := groups[sc]
		if len(gs) == 0 {
			continue
		}
		cols := summaryColumns[sc]
		fmt.Fprintf(&b, "\n## %s\n\n%s Medians over rounds.\n\n| point | rounds |", sc, summaryText[sc])
		for _, c := range cols {
			fmt.Fprintf(&b, " %s |", c.header)
		}
		b.WriteString(" goal |\n|---|---:|")
		for range cols {
			b.WriteString("---:|")
		}
		b.WriteString("---|\n")
		for _, g := range gs {
			fmt.Fprintf(&b, "| %s | %d |", g.point, len(g.rounds))
			for _, c := range cols {
				if v, ok := g.median(c.metric); ok {
					fmt.Fprintf(&b, " "+c.format+" |", v)
				} else {
					b.WriteString(" – |")
				}
			}
			var goals []string
			for _, v := range verdicts {
				if v.Goal.Scenario != sc || v.Goal.Point != g.point {
					continue
				}
				state := "missed"
				if v.Met {
					state = "met"
				}
				if !v.Measured {
					state = "not measured"
				}
				goals = append(goals, fmt.Sprintf("%s: **%s** (%.3g)", v.Goal.Text, state, v.Got))
			}
			fmt.Fprintf(&b, " %s |\n", strings.Join(goals, "; "))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("bench: write the summary: %w", err)
	}
	return nil
}

func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }
