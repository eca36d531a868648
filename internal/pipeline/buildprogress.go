package pipeline

import (
	"context"
	"encoding/json"
	"time"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// BuildProgress is how far a transform's last build got (ADR 0017): the
// keys it walked (source rows; on a rebuild then the identities the
// target stores), the planner's estimate of how many it walks in all
// (null when unknown; the estimate may be passed), when it started, and
// when the transform went live (null while it builds). The building
// worker writes it with each chunk of the build.
type BuildProgress struct {
	RowsDone   int64      `json:"rows_done"`
	RowsTotal  *int64     `json:"rows_total"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// BuildProgressOf is the catalog's record of a build as the API gives it.
func BuildProgressOf(b *catalog.BuildProgress) *BuildProgress {
	if b == nil {
		return nil
	}
	return &BuildProgress{RowsDone: b.RowsDone, RowsTotal: b.RowsTotal, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt}
}

// startBuild records that the worker's build starts (before its state
// says so), with the planner's
// estimate of the keys its phases walk: each phase walks one source's
// keys (a rebuild's last phases the identities stored for a source, about
// as many).
func (w *worker) startBuild(ctx context.Context, a *engine.Applier, rebuild bool) error {
	build, all := a.Phases()
	if !rebuild {
		all = build
	}
	var total int64
	known := true
	rows := map[int]int64{}
	for phase := 0; phase < all && known; phase++ {
		src := a.Stmts.Enum[phase].Source
		n, ok := rows[src]
		if !ok {
			var err error
			if n, ok, err = estimateRows(ctx, w.r.t.pool, w.plan.Sources[src]); err != nil || !ok {
				// Progress goes without a total; the build does not wait
				// for an estimate.
				w.r.t.log.Debug("estimate the rows of a source", "transform", w.name, "source", w.plan.Sources[src].Ident(), "err", err)
				known = false
				break
			}
			rows[src] = n
		}
		total += n
	}
	var t *int64
	if known {
		t = &total
	}
	return w.r.t.cat.StartBuild(ctx, w.r.t.pool, w.id, t)
}

// estimateRows is the planner's estimate of a source's rows: its
// statistics once analyzed, else what its size on disk suggests;
// partitions included. ok is false when the planner gave none.
func estimateRows(ctx context.Context, q catalog.Querier, src engine.Source) (int64, bool, error) {
	from := src.Ident()
	if len(src.From) >= 5 && src.From[:5] == "ONLY " {
		from = "ONLY " + from
	}
	var plan []byte
	if err := q.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT 1 FROM "+from).Scan(&plan); err != nil {
		return 0, false, err
	}
	var out []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &out); err != nil || len(out) == 0 {
		return 0, false, nil
	}
	return int64(out[0].Plan.Rows), true, nil
}
