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
			checkSeries(t, known, "panel "+p.Title, vars.Replace(q.Expr))
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
