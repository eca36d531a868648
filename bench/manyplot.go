package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	trellis "github.com/trellis-repl/trellis-repl"
)

// writeManyPlot writes many.png into dir: four charts of the many
// scenario, one per question (the build over time: transforms live and
// connections held against the budget; the idle cost of the large
// instance against the small one; status against its one-second goal).
// It returns "" when rep has no many point.
func writeManyPlot(dir string, points []Point) (string, error) {
	gs := groupPoints(points)[ScenarioMany]
	var samples []Point
	for _, p := range points {
		if p.Scenario == ScenarioMany && p.Sample {
			samples = append(samples, p)
		}
	}
	if len(gs) == 0 {
		return "", nil
	}
	live, conns, err := manyBuildPlots(samples)
	if err != nil {
		return "", fmt.Errorf("bench: plot many: %w", err)
	}
	idle, err := groupedBars("idle, per second (median over rounds)", "per second · % of a core", gs,
		[]string{"idle_transactions_per_second", "idle_statements_per_second", "idle_runner_cpu_percent", "idle_backend_cpu_percent"},
		[]string{"transactions", "statements", "runner CPU %", "backends CPU %"}, 0)
	if err != nil {
		return "", fmt.Errorf("bench: plot many: %w", err)
	}
	status, err := groupedBars("status of every transform (goal dashed)", "seconds", gs,
		[]string{"status_seconds", "status_json_seconds", "status_watch_seconds", "status_watch_refresh_seconds"},
		[]string{"status", "--json", "--watch first frame", "--watch refresh"}, 1)
	if err != nil {
		return "", fmt.Errorf("bench: plot many: %w", err)
	}
	for _, p := range []*plot.Plot{idle, status} {
		var labels []string
		for _, g := range gs {
			n, _ := g.median("transforms")
			labels = append(labels, fmt.Sprintf("%s (%.0f transforms)", g.point, n))
		}
		p.NominalX(labels...)
	}
	tiles := [][]*plot.Plot{{live, conns}, {idle, status}}
	const w, h = 14 * vg.Inch, 9 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(tiles, t, dc)
	for i := range tiles {
		for j, p := range tiles[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	path := filepath.Join(dir, ScenarioMany+".png")
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("bench: save %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return "", fmt.Errorf("bench: save %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("bench: save %s: %w", path, err)
	}
	return path, nil
}

// manyBuildPlots draws the large instance's build, one line per round:
// transforms live, and connections held with the default budget dashed.
func manyBuildPlots(samples []Point) (*plot.Plot, *plot.Plot, error) {
	live, conns := plot.New(), plot.New()
	live.Title.Text = "build of the many instance: transforms live"
	conns.Title.Text = "connections the runner holds (default budget dashed)"
	for _, p := range []*plot.Plot{live, conns} {
		p.X.Label.Text = "seconds since the runner started"
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
	}
	live.Y.Label.Text = "transforms live"
	conns.Y.Label.Text = "connections"
	byRound := map[int][2]plotter.XYs{}
	var rounds []int
	end := 0.0
	for _, s := range samples {
		xy := byRound[s.Round]
		if xy[0] == nil {
			rounds = append(rounds, s.Round)
		}
		t := s.Metrics["t_seconds"]
		end = max(end, t)
		xy[0] = append(xy[0], plotter.XY{X: t, Y: s.Metrics["transforms_live"]})
		xy[1] = append(xy[1], plotter.XY{X: t, Y: s.Metrics["connections"]})
		byRound[s.Round] = xy
	}
	var lv, cn []any
	for _, r := range rounds {
		name := "round " + strconv.Itoa(r)
		lv = append(lv, name, byRound[r][0])
		cn = append(cn, name, byRound[r][1])
	}
	if len(lv) > 0 {
		if err := plotutil.AddLines(live, lv...); err != nil {
			return nil, nil, err
		}
		if err := plotutil.AddLines(conns, cn...); err != nil {
			return nil, nil, err
		}
	}
	b := float64(trellis.DefaultMaxConnections)
	budget, err := plotter.NewLine(plotter.XYs{{X: 0, Y: b}, {X: max(end, 1), Y: b}})
	if err != nil {
		return nil, nil, err
	}
	budget.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	conns.Add(budget)
	conns.Y.Max = max(conns.Y.Max, b+2)
	return live, conns, nil
}
