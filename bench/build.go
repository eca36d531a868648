package bench

// The build and refresh scenarios (issue 11, item 5).
//
// build: for the row shape (SELECT id, g, v * 2 AS v2 FROM src WHERE g >=
// 0) and the agg shape (SELECT g, count(*), sum(v), min(v) FROM src GROUP
// BY g), a fresh database gets src with Rows rows over Groups groups,
// vacuumed and analyzed (untimed). CREATE TABLE AS of the shape's query is
// timed, and the table dropped; then an embedded instance defines the
// transform and starts Run, and the time from the definition until the
// target is built and converged is the build time (define_seconds is the
// part before Run starts: Open and CREATE TRANSFORM). The ratio is the build
// time over CREATE TABLE AS's (goal ≤ 2).
//
// refresh: the same src and an aggregate SELECT g, count(*) AS n, sum(v)
// AS s FROM src GROUP BY g, maintained live, and a materialized view of
// the same query. Changes single-row updates of src (v + 1 of one row,
// autocommit) are each timed from the commit's return until a poll of the
// target (every millisecond) shows the group's new sum. Then Run is
// stopped and REFRESH MATERIALIZED VIEW is timed as many times. The ratio
// is the refresh's median over the change's median (goal ≥ 100).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// BuildConfig configures the build scenario.
type BuildConfig struct {
	// Rows in src (default 1,000,000) over Groups groups (default
	// 100,000).
	Rows   int
	Groups int
	// Shapes are KnownShapes names (default row, agg).
	Shapes []string
}

func (c *BuildConfig) defaults() {
	if c.Rows <= 0 {
		c.Rows = 1_000_000
	}
	if c.Groups <= 0 {
		c.Groups = 100_000
	}
	if len(c.Shapes) == 0 {
		c.Shapes = []string{"row", "agg"}
	}
}

// RefreshConfig configures the refresh scenario.
type RefreshConfig struct {
	// Rows in src (default 1,000,000) over Groups groups (default
	// 100,000).
	Rows   int
	Groups int
	// Changes is how many single-row changes, and refreshes, are timed
	// (default 5).
	Changes int
}

func (c *RefreshConfig) defaults() {
	if c.Rows <= 0 {
		c.Rows = 1_000_000
	}
	if c.Groups <= 0 {
		c.Groups = 100_000
	}
	if c.Changes <= 0 {
		c.Changes = 5
	}
}

// PointRefresh is the refresh scenario's point.
const PointRefresh = "single-row change"

// loadSrc creates src with rows rows over groups groups and analyzes it.
func loadSrc(ctx context.Context, conn *pgx.Conn, rows, groups int) error {
	return execAll(ctx, conn, "load src", createSourceSQL,
		fmt.Sprintf(`INSERT INTO src (id, g, v, pad) SELECT i, i %% %d, (i %% 997) / 10.0, repeat('x', 32) FROM generate_series(1, %d) i`, groups, rows),
		`VACUUM ANALYZE src`)
}

func (s *suiteRun) build(ctx context.Context, round int) error {
	for _, name := range s.cfg.Build.Shapes {
		sh, ok := ShapeByName(name)
		if !ok {
			return fmt.Errorf("bench: unknown shape %q; use row, agg or agg1k", name)
		}
		sh.Name = "build_" + name
		if err := s.buildShape(ctx, round, name, sh); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (s *suiteRun) buildShape(ctx context.Context, round int, point string, sh Shape) (err error) {
	cfg := s.cfg.Build
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	if err := loadSrc(ctx, conn, cfg.Rows, cfg.Groups); err != nil {
		return err
	}
	if err := execAll(ctx, conn, "checkpoint", "CHECKPOINT"); err != nil {
		return err
	}
	ctas := pgx.Identifier{"public", "ctas_" + point}
	start := time.Now()
	if err := execAll(ctx, conn, "CREATE TABLE AS", "CREATE TABLE "+ctas.Sanitize()+" AS "+sh.Query); err != nil {
		return err
	}
	ctasTime := time.Since(start)
	if err := execAll(ctx, conn, "drop the CREATE TABLE AS table", "DROP TABLE "+ctas.Sanitize(), "CHECKPOINT"); err != nil {
		return err
	}
	start = time.Now()
	in, err := openInstance(ctx, s.ec, dsn, fmt.Sprintf("trellis_build_%s_%d", point, round), trellis.CaptureLogical, []Shape{sh}, false)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.close()) }()
	defineTime := time.Since(start)
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: build: %w", err)
	}
	buildTime := time.Since(start)
	verdict, err := in.verifyAll(ctx, s.ec, conn)
	if err != nil {
		return err
	}
	var targetRows int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{"public", sh.Name}.Sanitize()).Scan(&targetRows); err != nil {
		return fmt.Errorf("bench: count the target: %w", err)
	}
	s.emit(Point{Scenario: ScenarioBuild, Point: point, Round: round, Metrics: map[string]float64{
		"source_rows": float64(cfg.Rows), "groups": float64(cfg.Groups), "target_rows": float64(targetRows),
		"build_seconds": buildTime.Seconds(), "define_seconds": defineTime.Seconds(), "ctas_seconds": ctasTime.Seconds()},
		Labels: map[string]string{"verified": verdict}, Ratio: ratio(buildTime.Seconds() / ctasTime.Seconds())})
	s.progressf("build round %d %-4s: %d source rows -> %d target rows: trellis-repl build %.2fs, CREATE TABLE AS %.2fs (%.2f×)",
		round, point, cfg.Rows, targetRows, buildTime.Seconds(), ctasTime.Seconds(), buildTime.Seconds()/ctasTime.Seconds())
	return nil
}

func (s *suiteRun) refresh(ctx context.Context, round int) (err error) {
	cfg := s.cfg.Refresh
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	if err := loadSrc(ctx, conn, cfg.Rows, cfg.Groups); err != nil {
		return err
	}
	sh := Shape{Name: "refresh_agg", Query: `SELECT g, count(*) AS n, sum(v) AS s FROM src GROUP BY g`, Columns: []string{"g", "n", "s"}}
	mv := pgx.Identifier{"public", "mv_refresh_agg"}
	if err := execAll(ctx, conn, "create the materialized view", "CREATE MATERIALIZED VIEW "+mv.Sanitize()+" AS "+sh.Query); err != nil {
		return err
	}
	in, err := openInstance(ctx, s.ec, dsn, fmt.Sprintf("trellis_refresh_%d", round), trellis.CaptureLogical, []Shape{sh}, true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.close()) }()
	if err := execAll(ctx, conn, "vacuum", "VACUUM ANALYZE src", "VACUUM ANALYZE public.refresh_agg"); err != nil {
		return err
	}
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: converge before the changes: %w", err)
	}
	var changes []time.Duration
	for i := range cfg.Changes {
		id := int64(1 + (i*7919+13)%cfg.Rows)
		d, err := timeChange(ctx, conn, id, in)
		if err != nil {
			return err
		}
		changes = append(changes, d)
	}
	if err := in.run.stop(); err != nil {
		return fmt.Errorf("bench: stop Run: %w", err)
	}
	var refreshes []time.Duration
	for range cfg.Changes {
		start := time.Now()
		if err := execAll(ctx, conn, "refresh the materialized view", "REFRESH MATERIALIZED VIEW "+mv.Sanitize()); err != nil {
			return err
		}
		refreshes = append(refreshes, time.Since(start))
	}
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: converge after the refreshes: %w", err)
	}
	verdict, err := in.verifyAll(ctx, s.ec, conn)
	if err != nil {
		return err
	}
	change, refresh := percentile(changes, 0.5), percentile(refreshes, 0.5)
	s.emit(Point{Scenario: ScenarioRefresh, Point: PointRefresh, Round: round, Metrics: map[string]float64{
		"source_rows": float64(cfg.Rows), "groups": float64(cfg.Groups), "changes": float64(cfg.Changes),
		"change_ms": ms(change), "change_max_ms": ms(percentile(changes, 1)), "refresh_ms": ms(refresh)},
		Labels: map[string]string{"verified": verdict}, Ratio: ratio(float64(refresh) / float64(change))})
	s.progressf("refresh round %d: single-row change -> visible median %.1f ms (max %.1f), REFRESH MATERIALIZED VIEW median %.0f ms (%.0f×)",
		round, ms(change), ms(percentile(changes, 1)), ms(refresh), float64(refresh)/float64(change))
	return nil
}

// timeChange updates row id of src (v + 1) and returns the time from the
// commit's return until the target's row for its group shows the new sum.
func timeChange(ctx context.Context, conn *pgx.Conn, id int64, in *instance) (time.Duration, error) {
	var g int64
	var want string
	if err := conn.QueryRow(ctx, `SELECT s.g, (t.s + 1)::text FROM src s JOIN public.refresh_agg t ON t.g = s.g WHERE s.id = $1`, id).Scan(&g, &want); err != nil {
		return 0, fmt.Errorf("bench: read row %d's group: %w", id, err)
	}
	if _, err := conn.Exec(ctx, `UPDATE src SET v = v + 1 WHERE id = $1`, id); err != nil {
		return 0, fmt.Errorf("bench: update row %d: %w", id, err)
	}
	committed := time.Now()
	deadline := committed.Add(time.Minute)
	for {
		var got string
		if err := conn.QueryRow(ctx, `SELECT s::text FROM public.refresh_agg WHERE g = $1`, g).Scan(&got); err != nil {
			return 0, fmt.Errorf("bench: poll the target: %w", err)
		}
		if got == want {
			return time.Since(committed), nil
		}
		if err := in.run.cause(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("bench: group %d still shows sum %s a minute after row %d changed (want %s)", g, got, id, want)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
