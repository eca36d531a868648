package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testDatabases hands out pgtest databases, dropped at the test's end.
type testDatabases struct{ t *testing.T }

func (d testDatabases) NewDatabase(context.Context) (string, func(context.Context) error, error) {
	return pgtest.NewDatabase(d.t), func(context.Context) error { return nil }, nil
}

// TestJoinQuickRun runs the join scenarios at a tiny size: the fact
// phases and the dimension changes must converge with the targets equal
// to their queries, both sides of each comparison must be measured (the
// pg_recvlogical drain of the same WAL; REFRESH MATERIALIZED VIEW), and
// the report must render. Timings are not asserted.
func TestJoinQuickRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sizes := JoinSizes{Dim1Rows: 20, Dim2Rows: 7, Groups: 5, DimChanges: 3}
	cfg := Config{
		Workloads: []Workload{{Rows: 2000, PerCommit: 500, Join: &sizes}},
		Shapes:    JoinShapes(),
		// Catch-up cases take seconds each to settle the slot, and run the
		// same code as for src (TestQuickRun); dimchange is live only.
		Modes:    []string{ModeLive},
		Baseline: true,
		Verify:   true,
	}
	results, err := Run(ctx, cfg, testDatabases{t})
	if err != nil {
		t.Fatal(err)
	}
	// Baseline: insert and update; each shape: both, then dimchange.
	if want := 2 + len(cfg.Shapes)*3; len(results) != want {
		t.Fatalf("got %d results, want %d: %+v", len(results), want, results)
	}
	changes := 0
	for _, r := range results {
		if r.Data != DataStar {
			t.Errorf("%s %s: data %q, want %q", r.Shape, r.Phase, r.Data, DataStar)
		}
		if r.RowsPerSecond <= 0 || r.EndToEndSeconds <= 0 {
			t.Errorf("%s %s %s: no rate measured: %+v", r.Shape, r.Mode, r.Phase, r)
		}
		if r.Shape != BaselineName && r.Verified != "ok" {
			t.Errorf("%s %s %s: target differs from its query: %q", r.Shape, r.Mode, r.Phase, r.Verified)
		}
		switch {
		case r.Phase == PhaseDimChange:
			changes++
			if r.Mode != ModeLive || r.Rows != 2000/sizes.Dim1Rows {
				t.Errorf("%s dimchange: mode %s, %d facts per changed row; want live, %d", r.Shape, r.Mode, r.Rows, 2000/sizes.Dim1Rows)
			}
			if len(r.ChangeSamples) != sizes.DimChanges || len(r.RefreshSamples) != sizes.DimChanges ||
				r.RefreshSeconds <= 0 || r.RefreshRatio <= 0 || r.Applies <= 0 {
				t.Errorf("%s dimchange: not measured: %+v", r.Shape, r)
			}
		case r.Shape != BaselineName && r.Ratio <= 0:
			t.Errorf("%s %s %s: no ratio against the baseline: %+v", r.Shape, r.Mode, r.Phase, r)
		}
	}
	if changes != len(cfg.Shapes) {
		t.Errorf("got %d dimchange results, want %d", changes, len(cfg.Shapes))
	}
	var tbl bytes.Buffer
	if err := WriteTable(&tbl, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"star", "joinrow", "joinagg", "dimchange", "refresh/e2e"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
	t.Logf("\n%s", tbl.String())
}

// TestShapeFitsWorkload: a join shape over src (or the reverse) is
// refused before anything runs.
func TestShapeFitsWorkload(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []Config{
		{Workloads: []Workload{{Rows: 10, PerCommit: 1}}, Shapes: JoinShapes()},
		{Workloads: []Workload{{Rows: 10, PerCommit: 1, Join: &JoinSizes{Dim1Rows: 2, Dim2Rows: 2, Groups: 1}}}, Shapes: []Shape{mustShape(t, "row")}},
		{Workloads: []Workload{{Rows: 10, PerCommit: 1, Join: &JoinSizes{Dim1Rows: 2, Dim2Rows: 2, Groups: 3}}}, Shapes: JoinShapes()},
	} {
		if _, err := Run(ctx, cfg, nil); err == nil {
			t.Errorf("%+v: no error", cfg.Workloads[0])
		}
	}
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
		{"join", Workload{Rows: 100, PerCommit: 10, RederiveKeys: 30, Join: &JoinSizes{Dim1Rows: 20, Dim2Rows: 5, Groups: 4, DimChanges: 3}},
			[]phaseSpec{{PhaseInsert, 100, 10}, {PhaseUpdate, 100, 10}, {PhaseDimChange, 5, 1}}},
		{"join without changes", Workload{Rows: 100, PerCommit: 10, Join: &JoinSizes{Dim1Rows: 20, Dim2Rows: 5, Groups: 4}},
			[]phaseSpec{{PhaseInsert, 100, 10}, {PhaseUpdate, 100, 10}}},
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

// TestHandwritten checks the hand-written baseline's SQL on its own: copies
// built before a change that inserts, deletes and updates source rows
// (emptying a group and creating one) must differ from the query until
// the changed ids are re-derived, and equal it afterwards.
func TestHandwritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"row", "agg"} {
		t.Run(name, func(t *testing.T) {
			sh := mustShape(t, name)
			conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.WithoutCancel(ctx))
			// Groups 0..4, two rows each, and group -1 (filtered out of row).
			for _, q := range []string{createSourceSQL,
				`INSERT INTO src SELECT i, i % 5, i, '' FROM generate_series(1, 10) i`,
				`INSERT INTO src VALUES (11, -1, 5, '')`,
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			if err := buildHand(ctx, conn, sh.hand); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				`DELETE FROM src WHERE id IN (1, 6)`,            // group 1 empties
				`INSERT INTO src VALUES (12, 7, 3, '')`,         // group 7 appears
				`UPDATE src SET v = 0 WHERE id = 2`,             // group 2's min drops
				`UPDATE src SET g = 3, v = v + 1 WHERE id = 4`,  // 4 -> 3
				`UPDATE src SET g = 0 WHERE id = 11`,            // into the row filter
				`UPDATE src SET g = -1 WHERE id = 10`,           // out of it
				`UPDATE src SET v = v + 100 WHERE id IN (3, 8)`, // group 3's min rises
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			d, err := selfcheck.Compare(ctx, conn, sh.hand.handTable(), sh.Columns, sh.Query)
			if err != nil {
				t.Fatal(err)
			}
			if d.Equal() {
				t.Fatal("the copy already equals the query before the re-derive: the test changes nothing")
			}
			hr, err := measureHand(ctx, conn, sh.hand, sh, []int64{1, 2, 3, 4, 6, 8, 10, 11, 12}, true)
			if err != nil {
				t.Fatal(err)
			}
			if hr.verified != "ok" || hr.rederive <= 0 || hr.keys <= 0 {
				t.Errorf("got %+v, want a verified, timed re-derive", hr)
			}
		})
	}
}
