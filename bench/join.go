package bench

// The join scenarios.
//
// A join workload writes a star schema: fact(id bigint pk, d1, d2, v, pad)
// with an index on each join column, dim1 (Dim1Rows rows, grp taking
// Groups values) and dim2 (Dim2Rows rows), the dimensions loaded before
// any slot or transform exists. Its phases:
//
//   - insert, update: Rows facts, PerCommit per commit, as for src (every
//     update moves the fact to other dimension rows and changes v). The
//     engine's rate is compared with pg_recvlogical draining the same WAL
//     (a publication on the three tables), as for src.
//   - dimchange (live cases only): DimChanges single-row updates of dim1,
//     each to a row ~Rows/Dim1Rows facts reference (it renames the row
//     and moves it to another grp, so every joined row and, for the
//     aggregate, two groups change). Each is timed from sending the
//     UPDATE to AwaitConverged returning, while Run is running. Then Run
//     is stopped and REFRESH MATERIALIZED VIEW of the same query, on the
//     same data in the same database, is timed as many times. The figure
//     is the ratio of the medians.
//
// The shapes: joinrow (fact ⋈ dim1 ⋈ dim2, columns of each) and joinagg
// (the same join grouped by dim1.grp: count and two sums).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// JoinSizes are the sizes of a join workload beyond its fact rows.
type JoinSizes struct {
	// Dim1Rows and Dim2Rows are the dimensions' sizes.
	Dim1Rows int
	Dim2Rows int
	// Groups is how many distinct values dim1.grp takes: the aggregate's
	// group count (at most Dim1Rows).
	Groups int
	// DimChanges is how many single-row dim1 changes (and refreshes) the
	// dimchange phase times; 0 skips the phase.
	DimChanges int
}

func (j JoinSizes) check() error {
	if j.Dim1Rows <= 0 || j.Dim2Rows <= 0 || j.Groups <= 0 || j.Groups > j.Dim1Rows || j.DimChanges < 0 {
		return fmt.Errorf("bench: join sizes need positive dimensions and 0 < groups <= dim1 rows, got %+v", j)
	}
	return nil
}

// JoinShapes returns the join workload's shapes: joinrow (a row transform
// over fact ⋈ dim1 ⋈ dim2, a few columns of each) and joinagg (an
// aggregate over the same join, grouped by dim1.grp).
func JoinShapes() []Shape {
	const from = `FROM fact f JOIN dim1 d1 ON d1.id = f.d1 JOIN dim2 d2 ON d2.id = f.d2`
	return []Shape{
		{Name: "joinrow", Join: true,
			Query:   `SELECT f.id, f.v, d1.name AS d1_name, d1.grp, d2.name AS d2_name, d2.w ` + from,
			Columns: []string{"id", "v", "d1_name", "grp", "d2_name", "w"}},
		{Name: "joinagg", Join: true,
			Query:   `SELECT d1.grp, count(*) AS n, sum(f.v) AS s, sum(d2.w) AS w ` + from + ` GROUP BY d1.grp`,
			Columns: []string{"grp", "n", "s", "w"}},
	}
}

// JoinShapeByName returns the join shape called name.
func JoinShapeByName(name string) (Shape, bool) {
	for _, s := range JoinShapes() {
		if s.Name == name {
			return s, true
		}
	}
	return Shape{}, false
}

// starData is the star schema of a join workload.
type starData struct{ JoinSizes }

func (starData) name() string     { return DataStar }
func (starData) tables() []string { return []string{"fact", "dim1", "dim2"} }

func (d starData) setupSQL() []string {
	return []string{
		`CREATE TABLE dim1 (id int PRIMARY KEY, name text NOT NULL, grp int NOT NULL, pad text NOT NULL)`,
		`CREATE TABLE dim2 (id int PRIMARY KEY, name text NOT NULL, w int NOT NULL, pad text NOT NULL)`,
		`CREATE TABLE fact (id bigint PRIMARY KEY, d1 int NOT NULL, d2 int NOT NULL, v numeric NOT NULL, pad text NOT NULL)`,
		// The re-derive of a dimension change reaches its facts through
		// these (without them status reports source_index_gaps).
		`CREATE INDEX fact_d1 ON fact (d1)`,
		`CREATE INDEX fact_d2 ON fact (d2)`,
		fmt.Sprintf(`INSERT INTO dim1 SELECT i, 'd1-' || i, i %% %d, repeat('y', 16) FROM generate_series(1, %d) i`, d.Groups, d.Dim1Rows),
		fmt.Sprintf(`INSERT INTO dim2 SELECT i, 'd2-' || i, i %% 17, repeat('z', 16) FROM generate_series(1, %d) i`, d.Dim2Rows),
		`ANALYZE dim1, dim2`,
	}
}

// Facts are generated server side, one statement per commit, as for src.
// Fact i references dim1 row 1 + i % Dim1Rows, so each dim1 row is
// referenced by Rows/Dim1Rows facts; every update shifts both references
// (keeping that spread) and changes v.
const (
	factInsertSQL = `INSERT INTO fact (id, d1, d2, v, pad)
		SELECT i, 1 + i % $3::int, 1 + (i / 7) % $4::int, (i % 997) / 10.0, repeat('x', 32) FROM generate_series($1::bigint, $2::bigint) i`
	factUpdateSQL = `UPDATE fact SET d1 = 1 + (d1 + 36) % $3::int, d2 = 1 + (d2 + 12) % $4::int, v = v + 1
		WHERE id BETWEEN $1::bigint AND $2::bigint`
	// One dim1 row renamed and moved to the next group: every fact it is
	// joined to changes in the row target, and two groups of the
	// aggregate.
	dimChangeSQL = `UPDATE dim1 SET name = 'd1-' || id || '-c' || $2::int, grp = (grp + 1) % $3::int WHERE id = $1::int`
	// The facts a dim1 row is referenced by (untimed).
	dimFactsSQL = `SELECT count(*) FROM fact WHERE d1 = $1::int`
)

func (d starData) write(ctx context.Context, conn *pgx.Conn, p phaseSpec) (time.Duration, error) {
	start := time.Now()
	switch p.name {
	case PhaseInsert, PhaseUpdate:
		q := factInsertSQL
		if p.name == PhaseUpdate {
			q = factUpdateSQL
		}
		if err := p.inCommits(func(lo, hi int) error {
			if _, err := conn.Exec(ctx, q, lo, hi, d.Dim1Rows, d.Dim2Rows); err != nil {
				return fmt.Errorf("bench: fact %s rows %d..%d: %w", p.name, lo, hi, err)
			}
			return nil
		}); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("bench: phase %q is not written in bulk", p.name)
	}
	return time.Since(start), nil
}

// changedDimRow is the dim1 row the r-th change updates: spread over the
// table, distinct as long as r < Dim1Rows / gcd(97, Dim1Rows).
func (d starData) changedDimRow(r int) int { return 1 + (r*97+13)%d.Dim1Rows }

// dimChangeCase is what the dimchange phase needs of its engine case.
type dimChangeCase struct {
	conn   *pgx.Conn
	run    *running
	reg    *prometheus.Registry
	schema string
	name   string // the transform (and target) name
	sh     Shape
	sizes  JoinSizes
}

// runDimChange times the dimchange phase of a live join case (see the
// top of this file). Run is running and converged on entry. The
// materialized view and the maintenance before the clock starts are
// untimed: the view is created, then the sources and the engine's tables
// are vacuumed and analyzed, as autovacuum would after the earlier
// phases' million updates, so both sides start from the same state.
func runDimChange(ctx context.Context, cfg *Config, c dimChangeCase) (Result, error) {
	d := starData{c.sizes}
	n := c.sizes.DimChanges
	mv := pgx.Identifier{"public", "mv_" + c.name}
	prep := []string{
		"CREATE MATERIALIZED VIEW " + mv.Sanitize() + " AS " + c.sh.Query,
		"VACUUM ANALYZE fact, dim1, dim2",
	}
	for _, q := range prep {
		if _, err := c.conn.Exec(ctx, q); err != nil {
			return Result{}, fmt.Errorf("bench: dimchange setup: %w", err)
		}
	}
	if err := vacuumEngine(ctx, c.conn, c.schema, c.name); err != nil {
		return Result{}, err
	}
	if err := c.run.converge(ctx, cfg); err != nil {
		return Result{}, fmt.Errorf("bench: %s before the dimension changes: %w", c.name, err)
	}

	facts := 0
	for r := range n {
		var k int
		if err := c.conn.QueryRow(ctx, dimFactsSQL, d.changedDimRow(r)).Scan(&k); err != nil {
			return Result{}, fmt.Errorf("bench: count a dimension row's facts: %w", err)
		}
		facts += k
	}
	before := readApplyStats(c.reg, c.name)
	var changes []float64
	for r := range n {
		start := time.Now()
		if _, err := c.conn.Exec(ctx, dimChangeSQL, d.changedDimRow(r), r, c.sizes.Groups); err != nil {
			return Result{}, fmt.Errorf("bench: dimension change: %w", err)
		}
		if err := c.run.converge(ctx, cfg); err != nil {
			return Result{}, fmt.Errorf("bench: %s dimension change %d: %w", c.name, r+1, err)
		}
		changes = append(changes, time.Since(start).Seconds())
	}
	after := readApplyStats(c.reg, c.name)

	// REFRESH with Run stopped, so that neither the engine nor its
	// walsender decoding the refresh's WAL competes with it.
	if err := c.run.stop(); err != nil {
		return Result{}, fmt.Errorf("bench: %s: %w", c.name, err)
	}
	var refreshes []float64
	for range n {
		start := time.Now()
		if _, err := c.conn.Exec(ctx, "REFRESH MATERIALIZED VIEW "+mv.Sanitize()); err != nil {
			return Result{}, fmt.Errorf("bench: refresh the materialized view: %w", err)
		}
		refreshes = append(refreshes, time.Since(start).Seconds())
	}

	e2e := time.Duration(median(changes) * float64(time.Second))
	r := newResult(DataStar, c.sh.Name, ModeLive, PhaseDimChange, 1, facts/max(n, 1), 0, e2e)
	r.ChangeSamples, r.RefreshSamples = changes, refreshes
	r.RefreshSeconds = median(refreshes)
	if r.EndToEndSeconds > 0 {
		r.RefreshRatio = r.RefreshSeconds / r.EndToEndSeconds
	}
	r.ApplySeconds = after.seconds - before.seconds
	r.Applies = int64(after.count - before.count)
	r.SlotTransactions = int64(after.slotTxns - before.slotTxns)
	progress(cfg, r)
	fmt.Fprintf(cfg.Progress, "%-4s %-14s %-7s %-9s %d changes of one dim1 row (~%d facts each): change -> converged %s s (median %.3f), REFRESH MATERIALIZED VIEW %s s (median %.3f); refresh/engine %.3g\n",
		r.Data, r.Shape, r.Mode, r.Phase, n, r.Rows, fmtSamples(changes), r.EndToEndSeconds, fmtSamples(refreshes), r.RefreshSeconds, r.RefreshRatio)

	// Run catches up with the refreshes' WAL (untimed) before the check.
	if err := c.run.converge(ctx, cfg); err != nil {
		return r, fmt.Errorf("bench: %s after the refreshes: %w", c.name, err)
	}
	if cfg.Verify {
		var err error
		if r.Verified, err = verify(ctx, cfg, c.conn, c.name, c.sh); err != nil {
			return r, err
		}
		fmt.Fprintf(cfg.Progress, "%-4s %-14s %-7s %-9s self-check: %s\n", r.Data, r.Shape, r.Mode, r.Phase, r.Verified)
	}
	return r, nil
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtSamples(xs []float64) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.3f", x)
	}
	return out
}
