package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestWriteTaxQuickRun runs the write-tax scenario at a tiny size: every
// configuration and commit size must be measured with its ratio to no
// capture, the capture configurations must converge with the target equal
// to its query, the end-to-end figures must be there for both capture
// modes, the goals must be checked, and the reports must render. Timings
// and goals are not asserted.
func TestWriteTaxQuickRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := WriteTaxConfig{
		Writers:   2,
		PerCommit: []int{1, 10},
		Duration:  400 * time.Millisecond,
		Rounds:    1,
		TableRows: 1000,
		EndToEnd:  []EndToEndSize{{PerCommit: 1, Rows: 200}, {PerCommit: 1000, Rows: 3000}},
		Idle:      true,
	}
	start := time.Now()
	rep, err := RunWriteTax(ctx, cfg, testDatabases{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("write tax quick run: %s", time.Since(start).Round(time.Millisecond))
	if want := 5 * len(cfg.PerCommit); len(rep.Points) != want {
		t.Fatalf("got %d points, want %d: %+v", len(rep.Points), want, rep.Points)
	}
	for _, p := range rep.Points {
		if p.RowsPerSecond <= 0 || p.CommitP99Ms <= 0 || p.CommitP50Ms > p.CommitP99Ms || p.RateRatio <= 0 || p.P99Ratio <= 0 || len(p.Samples) != cfg.Rounds {
			t.Errorf("%s at %d rows/commit: not measured: %+v", p.Capture, p.RowsPerCommit, p)
		}
		if p.Capture == CaptureNone && (p.RateRatio != 1 || p.Verified != "") {
			t.Errorf("none at %d rows/commit: ratio %v, check %q; want 1 and none", p.RowsPerCommit, p.RateRatio, p.Verified)
		}
		if p.Capture != CaptureNone && p.Verified != "ok" {
			t.Errorf("%s at %d rows/commit: target differs from its query: %q", p.Capture, p.RowsPerCommit, p.Verified)
		}
		for _, s := range p.Samples {
			if s.Rows%int64(p.RowsPerCommit) != 0 || s.Rows != s.Commits*int64(p.RowsPerCommit) {
				t.Errorf("%s at %d rows/commit: %d rows in %d commits", p.Capture, p.RowsPerCommit, s.Rows, s.Commits)
			}
		}
	}
	if want := 2 * len(cfg.EndToEnd); len(rep.EndToEnd) != want {
		t.Fatalf("got %d end-to-end results, want %d: %+v", len(rep.EndToEnd), want, rep.EndToEnd)
	}
	for _, r := range rep.EndToEnd {
		if r.RowsPerSecond <= 0 || r.EndToEndSeconds < r.WriterSeconds || r.Verified != "ok" {
			t.Errorf("end to end %s at %d rows/commit: %+v", r.Capture, r.RowsPerCommit, r)
		}
	}
	// logical at each size, trigger at 1 row per commit.
	if len(rep.Goals) != len(cfg.PerCommit)+1 {
		t.Errorf("got %d goals checked, want %d: %+v", len(rep.Goals), len(cfg.PerCommit)+1, rep.Goals)
	}
	var tbl bytes.Buffer
	if err := WriteTaxTable(&tbl, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"none", "logical", "trigger", "trigger-idle", "p99 ratio", "end to end", "trigger/logical", "goal "} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, Report{WriteTax: &rep}); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.WriteTax == nil || len(back.WriteTax.Points) != len(rep.Points) {
		t.Fatalf("JSON does not round-trip: %v\n%s", err, js.String())
	}
	t.Logf("\n%s", tbl.String())
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
