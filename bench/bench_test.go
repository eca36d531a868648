package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testDatabases hands out pgtest databases, dropped at the test's end.
type testDatabases struct{ t *testing.T }

func (d testDatabases) NewDatabase(context.Context) (string, func(context.Context) error, error) {
	return pgtest.NewDatabase(d.t), func(context.Context) error { return nil }, nil
}

// TestQuickRun runs the whole harness at a tiny size: every phase of every
// case must converge, the targets must equal their queries, and the
// reports must render.
func TestQuickRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{
		Workloads: []Workload{
			{Rows: 2000, PerCommit: 1000, RederiveKeys: 200},
			{Rows: 100, PerCommit: 1},
		},
		Shapes:   []Shape{mustShape(t, "row"), mustShape(t, "agg")},
		Modes:    []string{ModeLive, ModeCatchUp},
		Baseline: true,
		Verify:   true,
	}
	results, err := Run(ctx, cfg, testDatabases{t})
	if err != nil {
		t.Fatal(err)
	}
	// Baseline: 3 + 2 phases; each shape and mode: 3 + 2 phases.
	if want := 5 * (1 + len(cfg.Shapes)*len(cfg.Modes)); len(results) != want {
		t.Fatalf("got %d results, want %d: %+v", len(results), want, results)
	}
	for _, r := range results {
		if r.RowsPerSecond <= 0 || r.EndToEndSeconds <= 0 {
			t.Errorf("%s %s: no rate measured: %+v", r.Shape, r.Phase, r)
		}
		if r.Shape != BaselineName && r.Ratio <= 0 {
			t.Errorf("%s %s: no ratio against the baseline: %+v", r.Shape, r.Phase, r)
		}
		if r.Shape != BaselineName && r.Verified != "" && r.Verified != "ok" {
			t.Errorf("%s: target differs from its query: %s", r.Shape, r.Verified)
		}
	}
	var tbl bytes.Buffer
	if err := WriteTable(&tbl, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pg_recvlogical", "rederive", "agg", "catchup", "ratio"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, Report{Results: results}); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Results) != len(results) {
		t.Fatalf("JSON does not round-trip: %v\n%s", err, js.String())
	}
	t.Logf("\n%s", tbl.String())
}

func mustShape(t *testing.T, name string) Shape {
	t.Helper()
	sh, ok := ShapeByName(name)
	if !ok {
		t.Fatalf("no shape %q", name)
	}
	return sh
}

func TestWorkloadPhases(t *testing.T) {
	tests := []struct {
		name string
		wl   Workload
		want []phaseSpec
	}{
		{"no rederive", Workload{Rows: 10, PerCommit: 1},
			[]phaseSpec{{PhaseInsert, 10, 1}, {PhaseUpdate, 10, 1}}},
		{"rederive", Workload{Rows: 10, PerCommit: 5, RederiveKeys: 3},
			[]phaseSpec{{PhaseInsert, 10, 5}, {PhaseUpdate, 10, 5}, {PhaseRederive, 3, 3}}},
		{"rederive capped at rows", Workload{Rows: 10, PerCommit: 5, RederiveKeys: 30},
			[]phaseSpec{{PhaseInsert, 10, 5}, {PhaseUpdate, 10, 5}, {PhaseRederive, 10, 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.wl.phases()
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("phase %d: got %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestWithDatabase(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u@h:5/db?sslmode=disable", "postgres://u@h:5/x?sslmode=disable"},
		{"postgres://u@h/?dbname=db", "postgres://u@h/x"},
		{"host=h user=u dbname=db", "host=h user=u dbname=db dbname='x'"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "x")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
