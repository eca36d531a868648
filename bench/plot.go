package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WritePlots writes one PNG chart per scenario of rep into dir (created
// if missing) and returns the files written:
//
//   - write-tax.png: TPS and p99 latency as ratios to no capture, per
//     capture point;
//   - latency.png: commit-to-visible percentiles against the load;
//   - keep-up.png: keys waiting over time, per round;
//   - catch-up.png: the engine's rows/s as a ratio to pg_recvlogical's;
//   - build.png: build time and CREATE TABLE AS time per shape;
//   - refresh.png: REFRESH MATERIALIZED VIEW time over change-to-visible
//     time, per round, with the goal;
//   - many.png: the many scenario's build, idle cost and status times;
//   - memory.png: the runner's peak RSS per path and capture, with the
//     goal.
func WritePlots(dir string, rep SuiteReport) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: plot dir: %w", err)
	}
	groups := groupPoints(rep.Points)
	var files []string
	save := func(name string, p *plot.Plot, err error) error {
		if err != nil {
			return fmt.Errorf("bench: plot %s: %w", name, err)
		}
		if p == nil {
			return nil
		}
		path := filepath.Join(dir, name+".png")
		if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
			return fmt.Errorf("bench: save %s: %w", path, err)
		}
		files = append(files, path)
		return nil
	}
	if gs := groups[ScenarioWriteTax]; len(gs) > 0 {
		var capt []*pointGroup
		for _, g := range gs {
			if !isNonePoint(g.point) {
				capt = append(capt, g)
			}
		}
		p, err := groupedBars("write tax: ratio to no capture (median over rounds)", "ratio", capt,
			[]string{"ratio_to_baseline", "p99_ratio"}, []string{"TPS", "latency p99"}, 1)
		if err := save(ScenarioWriteTax, p, err); err != nil {
			return files, err
		}
	}
	if gs := groups[ScenarioLatency]; len(gs) > 0 {
		p, err := latencyPlot(gs)
		if err := save(ScenarioLatency, p, err); err != nil {
			return files, err
		}
	}
	if p, err := keepUpPlot(rep.Points); err != nil || p != nil {
		if err := save(ScenarioKeepUp, p, err); err != nil {
			return files, err
		}
	}
	if gs := groups[ScenarioCatchUp]; len(gs) > 0 {
		var eng []*pointGroup
		for _, g := range gs {
			if _, ok := g.median("ratio_to_baseline"); ok {
				eng = append(eng, g)
			}
		}
		p, err := groupedBars("catch-up: engine rows/s over pg_recvlogical's", "ratio", eng,
			[]string{"ratio_to_baseline"}, []string{"ratio"}, 1)
		if err := save(ScenarioCatchUp, p, err); err != nil {
			return files, err
		}
	}
	if gs := groups[ScenarioBuild]; len(gs) > 0 {
		p, err := groupedBars("build: trellis-repl against CREATE TABLE AS", "seconds", gs,
			[]string{"build_seconds", "ctas_seconds"}, []string{"trellis-repl build", "CREATE TABLE AS"}, 0)
		if err := save(ScenarioBuild, p, err); err != nil {
			return files, err
		}
	}
	if gs := groups[ScenarioRefresh]; len(gs) > 0 {
		p, err := refreshPlot(gs)
		if err := save(ScenarioRefresh, p, err); err != nil {
			return files, err
		}
	}
	if gs := groups[ScenarioTPCH]; len(gs) > 0 {
		p, err := groupedBars("tpch: REFRESH MATERIALIZED VIEW / refresh round (goal ≥ 10×)", "×", gs,
			[]string{"ratio_to_baseline"}, []string{"REFRESH / round"}, 10)
		if err := save(ScenarioTPCH, p, err); err != nil {
			return files, err
		}
	}
	if gs := groups[ScenarioMemory]; len(gs) > 0 {
		p, err := groupedBars(fmt.Sprintf("memory: runner peak RSS (goal ≤ %d MiB)", GoalPeakRSSMiB), "MiB", gs,
			[]string{"peak_rss_mib"}, []string{"peak RSS"}, GoalPeakRSSMiB)
		if err := save(ScenarioMemory, p, err); err != nil {
			return files, err
		}
	}
	if f, err := writeManyPlot(dir, rep.Points); err != nil {
		return files, err
	} else if f != "" {
		files = append(files, f)
	}
	return files, nil
}

// groupedBars is a bar chart with one group of bars per point group and
// one bar per metric; refLine, when positive, draws a horizontal line.
func groupedBars(title, ylabel string, gs []*pointGroup, metrics, names []string, refLine float64) (*plot.Plot, error) {
	if len(gs) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	w := vg.Points(float64(min(40, 240/max(len(gs)*len(metrics), 1))))
	var labels []string
	for _, g := range gs {
		labels = append(labels, g.point)
	}
	for i, m := range metrics {
		vs := make(plotter.Values, len(gs))
		for j, g := range gs {
			vs[j], _ = g.median(m)
		}
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(metrics)-1)/2)
		p.Add(b)
		if len(metrics) > 1 {
			p.Legend.Add(names[i], b)
		}
	}
	if refLine > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: refLine}, {X: float64(len(gs)) - 0.5, Y: refLine}})
		if err != nil {
			return nil, err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		p.Add(l)
	}
	p.Legend.Top = true
	p.Y.Max *= 1.2 // room for the legend
	p.NominalX(labels...)
	if len(gs) > 5 {
		// Long point names side by side would overlap.
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	return p, nil
}

// latencyPlot draws p50/p95/p99/max against the load (percent of the
// sustainable rate).
func latencyPlot(gs []*pointGroup) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "latency: commit to visible (median over rounds)"
	p.X.Label.Text = "load, % of the sustainable rate"
	p.Y.Label.Text = "ms"
	var lines []any
	for _, m := range []string{"p50_ms", "p95_ms", "p99_ms", "max_ms"} {
		var xys plotter.XYs
		for _, g := range gs {
			f, ok := g.median("fraction")
			v, ok2 := g.median(m)
			if ok && ok2 {
				xys = append(xys, plotter.XY{X: f * 100, Y: v})
			}
		}
		if len(xys) > 0 {
			lines = append(lines, strings.TrimSuffix(m, "_ms"), xys)
		}
	}
	if len(lines) == 0 {
		return nil, nil
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// keepUpPlot draws keys waiting over time, one line per round.
func keepUpPlot(points []Point) (*plot.Plot, error) {
	byRound := map[int]plotter.XYs{}
	for _, pt := range points {
		if pt.Scenario == ScenarioKeepUp && pt.Sample {
			byRound[pt.Round] = append(byRound[pt.Round], plotter.XY{X: pt.Metrics["t_seconds"], Y: pt.Metrics["keys_waiting"]})
		}
	}
	if len(byRound) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "keep-up: keys waiting while pgbench writes at full speed"
	p.X.Label.Text = "seconds since pgbench started"
	p.Y.Label.Text = "keys waiting"
	p.Y.Min = 0
	var lines []any
	rounds := make([]int, 0, len(byRound))
	for r := range byRound {
		rounds = append(rounds, r)
	}
	slices.Sort(rounds)
	for _, r := range rounds {
		lines = append(lines, "round "+strconv.Itoa(r), byRound[r])
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, err
	}
	p.Legend.Top = true
	return p, nil
}

// refreshPlot draws REFRESH / change per round with the goal.
func refreshPlot(gs []*pointGroup) (*plot.Plot, error) {
	var rounds []*pointGroup
	for _, g := range gs {
		for _, r := range g.rounds {
			rounds = append(rounds, &pointGroup{scenario: g.scenario, point: fmt.Sprintf("%s, round %d", g.point, r.Round), rounds: []Point{r}})
		}
	}
	return groupedBars("refresh: REFRESH MATERIALIZED VIEW time over change-to-visible time (goal dashed)", "×", rounds,
		[]string{"ratio_to_baseline"}, []string{"ratio"}, 100)
}
