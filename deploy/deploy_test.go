// Package deploy holds what operators load into their monitoring: the
// Prometheus alerting rules (prometheus/) and the Grafana dashboard
// (grafana/). Its test checks both the way promtool and Grafana would read
// them, and that every series they use is one the runner exports.
package deploy

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	rulesFile     = "prometheus/trellis-repl-alerts.yml"
	dashboardFile = "grafana/trellis-repl-dashboard.json"
)

// TestAlertRules parses the rules as `promtool check rules` does (the same
// parser and validation) and requires the alerts the operations guide
// promises.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	known := exported(t)
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s needs a severity label, a summary and a description", r.Alert)
			}
			checkSeries(t, known, "alert "+r.Alert, r.Expr)
		}
	}
	for _, want := range []string{
		"TrellisSlotRetentionNearLimit", "TrellisSlotWALUnreserved", "TrellisSlotWALLost", "TrellisApplyLagHigh",
		"TrellisLatencyP99High", "TrellisTransformPaused", "TrellisTransformQuarantined", "TrellisKeysHeld", "TrellisRunnerDown",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s", rulesFile, want)
		}
	}
}

// TestDashboard reads the dashboard as JSON and parses every panel's query
// with Grafana's variables replaced by values.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Errorf("%s: no uid (imports would duplicate it)", dashboardFile)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$trellis_instance", ".*", "$transform", ".*", "$job", ".*")
	known := exported(t)
	perTransform := perTransformSeries(t)
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			expr := vars.Replace(q.Expr)
			checkSeries(t, known, "panel "+p.Title, expr)
			// A graph of one line per transform is unreadable with
			// hundreds of transforms (issue 25): top-k, or the
			// instance's totals. A table lists them.
			if p.Type != "table" {
				if e, err := parser.NewParser(parser.Options{}).ParseExpr(expr); err == nil && linePerTransform(e, perTransform) {
					t.Errorf("panel %q draws one line per transform (%s); use topk(10, …) or an aggregation by instance", p.Title, q.Expr)
				}
			}
		}
	}
	if queries == 0 {
		t.Fatalf("%s: no queries", dashboardFile)
	}
}

// checkSeries parses expr and fails for every series it selects that is
// not in known (exported).
func checkSeries(t *testing.T, known map[string]bool, where, expr string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if !known[vs.Name] {
			t.Errorf("%s uses %s, which the runner does not export (docs/metrics.md)", where, vs.Name)
		}
		return nil
	})
}

// perTransformSeries are the series docs/metrics.md lists with a
// transform label.
func perTransformSeries(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range docLabels.FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[3], "`transform`") {
			out[m[1]] = true
			if m[2] == "histogram" {
				out[m[1]+"_bucket"], out[m[1]+"_sum"], out[m[1]+"_count"] = true, true, true
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md lists no series with a transform label")
	}
	return out
}

// docLabels is a row of docs/metrics.md: name, type, and its labels cell
// up to the first |.
var docLabels = regexp.MustCompile("(?m)^\\| `(trellis_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\| ([^|]*)")

// linePerTransform reports whether e's result may hold a series per
// transform: it selects a per-transform series and keeps the transform
// label, through no topk, bottomk or limitk.
func linePerTransform(e parser.Node, perTransform map[string]bool) bool {
	switch n := e.(type) {
	case *parser.VectorSelector:
		return perTransform[n.Name]
	case *parser.MatrixSelector:
		return linePerTransform(n.VectorSelector, perTransform)
	case *parser.SubqueryExpr:
		return linePerTransform(n.Expr, perTransform)
	case *parser.ParenExpr:
		return linePerTransform(n.Expr, perTransform)
	case *parser.UnaryExpr:
		return linePerTransform(n.Expr, perTransform)
	case *parser.StepInvariantExpr:
		return linePerTransform(n.Expr, perTransform)
	case *parser.AggregateExpr:
		switch n.Op {
		case parser.TOPK, parser.BOTTOMK, parser.LIMITK, parser.LIMIT_RATIO:
			return false
		}
		keeps := slices.Contains(n.Grouping, "transform")
		if n.Without {
			keeps = !keeps
		}
		return keeps && linePerTransform(n.Expr, perTransform)
	case *parser.Call:
		for _, a := range n.Args {
			if linePerTransform(a, perTransform) {
				return true
			}
		}
		return false
	case *parser.BinaryExpr:
		// The result has the left side's labels (and, for or, the right
		// side's too).
		return linePerTransform(n.LHS, perTransform) || n.Op == parser.LOR && linePerTransform(n.RHS, perTransform)
	}
	return false
}

// TestLinePerTransform pins linePerTransform on the shapes the dashboard
// uses.
func TestLinePerTransform(t *testing.T) {
	per := map[string]bool{"trellis_transform_keys_waiting": true, "trellis_transform_latency_seconds_bucket": true}
	for expr, want := range map[string]bool{
		`trellis_transform_keys_waiting`:                                                                                  true,
		`trellis_transform_keys_waiting > 0`:                                                                              true,
		`topk(10, trellis_transform_keys_waiting)`:                                                                        false,
		`sum by (trellis_instance) (trellis_transform_keys_waiting)`:                                                      false,
		`sum by (trellis_instance, transform) (trellis_transform_keys_waiting)`:                                           true,
		`sum without (transform) (trellis_transform_keys_waiting)`:                                                        false,
		`histogram_quantile(0.99, sum by (transform, le) (rate(trellis_transform_latency_seconds_bucket[5m])))`:           true,
		`topk(10, histogram_quantile(0.99, sum by (transform, le) (rate(trellis_transform_latency_seconds_bucket[5m]))))`: false,
		`trellis_transforms_keys_waiting`:                                                                                 false,
	} {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := linePerTransform(e, per); got != want {
			t.Errorf("linePerTransform(%s) = %v, want %v", expr, got, want)
		}
	}
}

var docSeries = regexp.MustCompile("(?m)^\\| `(trellis_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\|")

// exported is every series name a runner's /metrics can carry: the
// documented trellis_ series (TestMetricsDocumented in the root package
// keeps docs/metrics.md equal to what NewMetrics registers), with a
// histogram's _bucket, _sum and _count, the process and Go collectors'
// series, and Prometheus's own up.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"up": true}
	for _, m := range docSeries.FindAllStringSubmatch(string(b), -1) {
		known[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[m[1]+s] = true
			}
		}
	}
	// The collectors `trellis-repl run` registers beside its own series.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		known[mf.GetName()] = true
	}
	return known
}
