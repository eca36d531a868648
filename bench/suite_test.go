package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/clibuild"
)

// quickSizesEnv, when set (to anything), runs TestQuickSuite at `bench
// --quick`'s sizes rather than smokeSuite's.
const quickSizesEnv = "TRELLIS_TEST_BENCH_QUICK"

// smokeSuite is QuickSuite cut to a smoke test of the harness: every
// scenario, every point and every path still runs, with its targets
// compared with their queries, but at the least rows, seconds and
// transforms that still do (the figures come from `make bench`, and `make
// bench-quick` runs QuickSuite). It took 186 s where QuickSuite took 212
// (the two side by side, quiet machine): what is left is mostly each
// point's setup (a fresh database, pgbench -i, a runner started, its
// transforms applied), not its size.
func smokeSuite() SuiteConfig {
	c := QuickSuite()
	// pgbench's -T is whole seconds: one is the least.
	c.WriteTax.Duration = time.Second
	c.Latency.Probe, c.Latency.Duration = time.Second, 700*time.Millisecond
	c.KeepUp.Duration = 2 * time.Second
	c.CatchUp.Rows, c.CatchUp.Rows1 = 2_000, 200
	c.Build.Rows, c.Build.Groups = 5_000, 500
	c.Refresh.Rows, c.Refresh.Groups = 5_000, 500
	// Q21's build is most of the scenario: half the rows.
	c.TPCH.SF = 0.005
	// The idle window stays: PostgreSQL reports a backend's commits to
	// its statistics at most once a second, and a 1 s window read none.
	c.Many.Workload = time.Second
	// The same 20 failing rows (one in FailEvery) trip the fuse.
	c.Memory.Rows, c.Memory.FailEvery = 5_000, 250
	c.Memory.BuildTransforms, c.Memory.BuildTables, c.Memory.BuildRows = 8, 2, 500
	return c
}

// TestQuickSuite runs every scenario at a small size (smokeSuite; `bench
// --quick`'s with TRELLIS_TEST_BENCH_QUICK=1): each must finish without
// error (every target equal to its query), produce its points with their
// figures and ratios, and render as JSON lines, Markdown and charts.
// Timings and goals are not asserted.
func TestQuickSuite(t *testing.T) {
	// A guard against a hang, under make test's 25 min per binary: the
	// suite took 7m37s beside the parallel root package at load 20-30,
	// and an 8 min guard killed its last scenario's status call.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cfg := smokeSuite()
	if os.Getenv(quickSizesEnv) != "" {
		cfg = QuickSuite()
	}
	cfg.Many.Runner = trellisRepl(t)
	cfg.Memory.Runner = cfg.Many.Runner
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	cfg.Emit = func(p Point) error { return enc.Encode(p) }
	var progress bytes.Buffer
	cfg.Progress = &progress
	start := time.Now()
	rep, err := RunSuite(ctx, cfg, testDatabases{t})
	t.Logf("quick suite: %s\n%s", time.Since(start).Round(time.Millisecond), progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != len(Scenarios()) {
		t.Fatalf("got %d scenario outcomes, want %d: %+v", len(rep.Scenarios), len(Scenarios()), rep.Scenarios)
	}
	for _, o := range rep.Scenarios {
		t.Logf("%-9s %6.1fs %3d points", o.Name, o.Seconds, o.Points)
	}
	// Every point each scenario must produce, and a metric each must have.
	want := map[string]map[string]string{
		ScenarioWriteTax: {PointNone: "latency_p99_ms", PointRecvLogical: "p99_ratio", PointTrellis1: "applier_cpu_us_per_key",
			PointTrellis2: "runner_cpu_us_per_txn", PointTrigger: "tps",
			"rows100 none": "rows_per_second", "rows100 recvlogical": "rows_per_second", "rows100 trellis-1": "rows_per_second",
			"rows100 trigger": "rows_per_second"},
		ScenarioLatency: {PointSustainable: "rate_per_second", "10%": "p99_ms", "50%": "p99_ms", "90%": "max_ms"},
		ScenarioKeepUp:  {PointKeepUp: "converge_seconds", PointKeepUpSample: "keys_waiting"},
		ScenarioCatchUp: {"row catchup insert 1000/commit": "rows_per_second", "row catchup update 1/commit": "rows_per_second",
			"row trigger catchup insert 1000/commit": "rows_per_second", "row trigger catchup update 1/commit": "rows_per_second",
			BaselineName + " drain insert 1/commit": "rows_per_second"},
		ScenarioBuild:   {"row": "build_seconds", "agg": "ctas_seconds"},
		ScenarioRefresh: {PointRefresh: "refresh_ms"},
		ScenarioTPCH:    {"q6": "round_ms", "q21": "refresh_ms"},
		ScenarioMany:    {PointMany: "connections_max", PointFew: "idle_runner_cpu_percent", PointManySample: "transforms_live"},
		ScenarioMemory: {"logical fault insert": "peak_rss_mib", "logical fault update": "peak_rss_mib", "logical resume": "peak_rss_mib",
			"logical self-check": "peak_rss_mib", "logical delete": "peak_rss_mib", "logical truncate": "peak_rss_mib", "logical build": "peak_rss_mib",
			"trigger fault insert": "peak_rss_mib", "trigger delete": "peak_rss_mib", "trigger truncate": "peak_rss_mib", "trigger build": "peak_rss_mib"},
	}
	got := map[[2]string]Point{}
	for _, p := range rep.Points {
		got[[2]string{p.Scenario, p.Point}] = p
	}
	for sc, points := range want {
		for name, metric := range points {
			p, ok := got[[2]string{sc, name}]
			if !ok {
				t.Errorf("%s: no point %q", sc, name)
				continue
			}
			if v, ok := p.Metrics[metric]; !ok || v < 0 {
				t.Errorf("%s %s: metric %s missing or negative: %+v", sc, name, metric, p)
			}
			if v := p.Labels["verified"]; v != "" && v != "ok" && v != "drained" {
				t.Errorf("%s %s: verified %q", sc, name, v)
			}
		}
	}
	if p, ok := got[[2]string{ScenarioMany, PointMany}]; ok {
		for _, m := range []string{"apply_seconds", "build_seconds", "latency_p99_ms", "idle_transactions_per_second", "idle_runner_cpu_percent",
			"peak_rss_mib", "status_seconds", "status_json_seconds", "status_watch_seconds", "status_library_seconds", "metrics_series_per_transform"} {
			if v, ok := p.Metrics[m]; !ok || v <= 0 {
				t.Errorf("many: %s missing or not positive: %+v", m, p)
			}
		}
		if n := p.Metrics["connections_max"]; n > p.Metrics["connection_budget"] {
			t.Errorf("many: the runner held %.0f connections, more than its budget %.0f", n, p.Metrics["connection_budget"])
		}
	}
	for _, p := range rep.Points {
		needRatio := (p.Scenario == ScenarioWriteTax && !isNonePoint(p.Point)) || p.Scenario == ScenarioBuild || p.Scenario == ScenarioRefresh || p.Scenario == ScenarioTPCH ||
			(p.Scenario == ScenarioMany && p.Point == PointMany) ||
			(p.Scenario == ScenarioCatchUp && p.Labels["shape"] != BaselineName)
		if needRatio && (p.Ratio == nil || *p.Ratio <= 0) {
			t.Errorf("%s %s: no ratio to its baseline: %+v", p.Scenario, p.Point, p)
		}
	}

	// One JSON line per point, each read back the same.
	ls := strings.Split(strings.TrimSpace(lines.String()), "\n")
	if len(ls) != len(rep.Points) {
		t.Fatalf("got %d JSON lines for %d points", len(ls), len(rep.Points))
	}
	for i, l := range ls {
		var p Point
		if err := json.Unmarshal([]byte(l), &p); err != nil || p.Scenario != rep.Points[i].Scenario || p.Point != rep.Points[i].Point {
			t.Fatalf("line %d does not read back: %v\n%s", i, err, l)
		}
		if !strings.HasPrefix(l, `{"scenario":`) {
			t.Errorf("line %d does not start with the scenario: %s", i, l)
		}
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, sc := range Scenarios() {
		if !strings.Contains(md.String(), "## "+sc+"\n") {
			t.Errorf("summary lacks a %s table:\n%s", sc, md.String())
		}
	}
	if !strings.Contains(md.String(), "p99 ≤ 250 ms: **") {
		t.Errorf("summary lacks the latency goal:\n%s", md.String())
	}
	t.Logf("\n%s", md.String())
	files, err := WritePlots(t.TempDir(), rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(Scenarios()) {
		t.Errorf("got charts %v, want one per scenario", files)
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG: %v", filepath.Base(f), err)
		}
	}
}

// TestPointJSON: the fixed key order, and a round trip.
func TestPointJSON(t *testing.T) {
	p := Point{Scenario: ScenarioWriteTax, Point: PointTrellis2, Round: 2, Metrics: map[string]float64{"tps": 1234.56789, "p99_ratio": 1.5},
		Labels: map[string]string{"verified": "ok"}, Ratio: ratio(0.81234567)}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"scenario":"write-tax","point":"trellis-2","round":2,"p99_ratio":1.5,"tps":1234.57,"verified":"ok","ratio_to_baseline":0.812346}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back Point
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Point != p.Point || back.Round != 2 || back.Metrics["tps"] != 1234.57 || back.Labels["verified"] != "ok" || back.Ratio == nil || *back.Ratio != 0.812346 {
		t.Errorf("round trip: %+v", back)
	}
}

// TestCheckGoals: medians over rounds against the goals, met and missed.
func TestCheckGoals(t *testing.T) {
	pts := []Point{
		{Scenario: ScenarioLatency, Point: "50%", Round: 1, Metrics: map[string]float64{"p99_ms": 100}},
		{Scenario: ScenarioLatency, Point: "50%", Round: 2, Metrics: map[string]float64{"p99_ms": 900}},
		{Scenario: ScenarioLatency, Point: "50%", Round: 3, Metrics: map[string]float64{"p99_ms": 200}},
		{Scenario: ScenarioBuild, Point: "row", Round: 1, Ratio: ratio(2.5)},
	}
	got := map[string]GoalVerdict{}
	for _, v := range CheckGoals(pts) {
		got[v.Goal.Scenario+" "+v.Goal.Point] = v
	}
	if v := got["latency 50%"]; !v.Measured || !v.Met || v.Got != 200 {
		t.Errorf("latency: %+v, want met at the median 200", v)
	}
	if v := got["build row"]; !v.Measured || v.Met {
		t.Errorf("build: %+v, want missed", v)
	}
	if _, ok := got["build agg"]; ok {
		t.Error("a goal of a point not measured was checked")
	}
}

// TestParsePgbench reads pgbench 15's summary.
func TestParsePgbench(t *testing.T) {
	const out = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 1
query mode: simple
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 3521
number of failed transactions: 0 (0.000%)
latency average = 2.271 ms
initial connection time = 6.519 ms
tps = 1761.288031 (without initial connection time)
`
	r, err := parsePgbenchSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Transactions != 3521 || r.TPS != 1761.288031 || r.LatencyAvg != 2271*time.Microsecond {
		t.Errorf("got %+v", r)
	}
	if _, err := parsePgbenchSummary("pgbench: error: connection failed"); err == nil {
		t.Error("no error for output without a summary")
	}
}

// TestPercentile: nearest rank, on unsorted input.
func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond, 0: time.Millisecond} {
		if got := percentile(ds, q); got != want {
			t.Errorf("percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
}

// trellisRepl builds the trellis-repl binary the many scenario runs as
// its runner and commands (the CLI passes itself) into t's directory, or
// returns make test's (TRELLIS_TEST_CLI).
func trellisRepl(t *testing.T) string {
	t.Helper()
	bin, err := clibuild.Build(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
