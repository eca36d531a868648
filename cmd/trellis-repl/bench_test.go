package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestBenchCLI runs `bench` against the test server at a tiny size: exit
// 0, one JSON line per point on --json-out, the Markdown summary on
// stdout and in --markdown, a chart per scenario in --plot. Bad flags are
// usage errors.
func TestBenchCLI(t *testing.T) {
	for _, args := range [][]string{{"bench", "--scenarios", "nope"}, {"bench", "--capture", "nope"}, {"bench", "extra"},
		{"bench", "--latency-load", "150"}, {"bench", "--shared-buffers", "1GB'; x"}} {
		if code, _, stderr := cli(args...); code != 2 || !strings.HasPrefix(stderr, "validation: ") {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, stderr)
		}
	}
	if code, out, _ := cli("bench", "--help"); code != 0 || !strings.Contains(out, "-build-rows") {
		t.Errorf("bench --help: exit %d:\n%s", code, out)
	}

	dir := t.TempDir()
	lines, md, plots := filepath.Join(dir, "points.jsonl"), filepath.Join(dir, "summary.md"), filepath.Join(dir, "plots")
	code, stdout, stderr := cli("bench", "--quick", "--dsn", pgtest.NewDatabase(t), "--scenarios", "build,refresh",
		"--build-rows", "3000", "--build-groups", "300", "--refresh-rows", "3000", "--refresh-groups", "300", "--refresh-changes", "2",
		"--json-out", lines, "--markdown", md, "--plot", plots)
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(lines)
	if err != nil {
		t.Fatal(err)
	}
	var scenarios []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var p map[string]any
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		if p["ratio_to_baseline"] == nil || p["verified"] != "ok" || p["round"] != 1.0 {
			t.Errorf("point lacks its ratio, check or round: %s", l)
		}
		scenarios = append(scenarios, p["scenario"].(string))
	}
	if strings.Join(scenarios, ",") != "build,build,refresh" {
		t.Errorf("points of %v, want build (row, agg) and refresh", scenarios)
	}
	if !strings.Contains(stdout, "## build") || !strings.Contains(stdout, "## refresh") || !strings.Contains(stdout, "build ≤ 2× CREATE TABLE AS: **") {
		t.Errorf("summary on stdout lacks its tables:\n%s", stdout)
	}
	if m, err := os.ReadFile(md); err != nil || !strings.Contains(stdout, string(m)) {
		t.Errorf("--markdown differs from the summary printed: %v", err)
	}
	for _, f := range []string{"build.png", "refresh.png"} {
		if _, err := os.Stat(filepath.Join(plots, f)); err != nil {
			t.Errorf("chart: %v", err)
		}
	}
}
