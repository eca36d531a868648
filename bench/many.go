package bench

// The many scenario (issue 25): one runner, 1,000 transforms over 100
// tables, on its connection budget.
//
// Two fresh databases get the same kind of source tables s<k>(id int
// primary key, g int, v int), indexed on g, with Rows rows each, and a
// ten-row dimension d(id, label). Each table has the same ten transforms
// (manyShapes): three row transforms, three aggregates, a join and a
// joined aggregate with d, and two transforms chained on the row targets.
// The small database has one table, so ten transforms; the large one
// Tables tables, so Tables × 10. Each is maintained by a `trellis-repl run`
// subprocess (Runner) with run's defaults, --max-connections included, so
// its CPU and memory are its own (/proc) and its connections its own
// (pg_stat_activity, by database and application_name); the bench's
// connections go by other names, and the statistics are read from a third
// database, so that they count nothing of their own.
//
// In each round: the small instance is defined (`trellis-repl apply`) and
// started; the large instance's script of every definition is applied
// with `trellis-repl apply` (timed) and its runner started; the time until
// every transform is live and caught up is the build time, while a
// sampler counts the runner's connections every 50 ms (the most is
// reported) and every second the transforms live. Then a light workload
// inserts single rows at Rate per second for Workload, round robin over
// the tables, and every row's latency is from its commit to the poll
// (every PollInterval) that first finds it in its table's unfiltered row
// target (as in the latency scenario). After a Settle, both instances are
// idle for the same Idle window: the transactions committed in each
// database (pg_stat_database.xact_commit) and, when the server loads
// pg_stat_statements, the statements run there, and each runner's CPU
// (utime+stime of /proc/<pid>/stat) and its backends', give per-second
// idle costs, and the large instance's over the small one's is the ratio
// (measured at the same time, so the machine's noise falls on both).
// Then `trellis-repl status`, `status --json` and `status --watch` are
// timed against each instance (StatusRuns times each; the watch from
// its start to its first frame, and each refresh), /metrics is scraped
// and its series counted, and each runner's peak RSS (VmHWM) read. Every
// target is compared with its query at the end.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// ManyConfig configures the many scenario.
type ManyConfig struct {
	// Tables is the large instance's source tables (default 100), each
	// read by ten transforms (manyShapes); the small instance has one.
	Tables int
	// Rows in each source table (default 1,000).
	Rows int
	// Rate is the light workload's commits per second (default 20), for
	// Workload (default 20s).
	Rate     float64
	Workload time.Duration
	// Settle is how long both instances are left alone before the idle
	// window (default 5s); Idle is the window (default 30s).
	Settle time.Duration
	Idle   time.Duration
	// StatusRuns is how many times each status command is timed
	// (default 3).
	StatusRuns int
	// PollInterval is the latency observer's (default 5ms).
	PollInterval time.Duration
	// Runner is the trellis-repl binary that runs the instances and the
	// timed commands. `trellis-repl bench` passes itself; without one the
	// scenario fails.
	Runner string
}

func (c *ManyConfig) defaults() {
	if c.Tables <= 0 {
		c.Tables = 100
	}
	if c.Rows <= 0 {
		c.Rows = 1_000
	}
	if c.Rate <= 0 {
		c.Rate = 20
	}
	if c.Workload <= 0 {
		c.Workload = 20 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 5 * time.Second
	}
	if c.Idle <= 0 {
		c.Idle = 30 * time.Second
	}
	if c.StatusRuns <= 0 {
		c.StatusRuns = 3
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Millisecond
	}
}

// The many scenario's points.
const (
	// PointMany is the large instance (Tables × 10 transforms).
	PointMany = "many"
	// PointFew is the small instance (ten transforms), measured beside it.
	PointFew = "few"
	// PointManySample is one per-second sample of the large instance's
	// build: transforms live and connections held.
	PointManySample = "build sample"
)

// GoalManyIdleRatio is the many scenario's goal for the large instance's
// idle statements per second over the small one's: with a hundred times
// the transforms, at most twice the statements (no idle cost per
// transform).
const GoalManyIdleRatio = 2

// manyGoals are the many scenario's goals (issue 25): the runner within
// its default budget, status of 1,000 transforms within a second, and no
// idle cost per transform.
func manyGoals() []Goal {
	return []Goal{
		{ScenarioMany, PointMany, "connections_max", true, trellis.DefaultMaxConnections, "connections ≤ the default budget"},
		{ScenarioMany, PointMany, "status_seconds", true, 1, "status ≤ 1 s"},
		{ScenarioMany, PointMany, "status_json_seconds", true, 1, "status --json ≤ 1 s"},
		{ScenarioMany, PointMany, "status_watch_seconds", true, 1, "status --watch first frame ≤ 1 s"},
		{ScenarioMany, PointMany, "ratio_to_baseline", true, GoalManyIdleRatio, "idle statements ≤ 2× ten transforms'"},
	}
}

// manyPerTable is how many transforms read each source table.
const manyPerTable = 10

// manyShapes are the transforms of source table s<k>, in an order a
// script can define them (a chained transform after the one it reads).
func manyShapes(k int) []Shape {
	s := func(name, query string, cols ...string) Shape {
		return Shape{Name: fmt.Sprintf(name, k), Query: strings.ReplaceAll(query, "%d", fmt.Sprint(k)), Columns: cols}
	}
	return []Shape{
		s("r%d_0", `SELECT id, g, v * 2 AS v2 FROM s%d`, "id", "g", "v2"),
		s("r%d_1", `SELECT id, v FROM s%d WHERE v % 3 <> 0`, "id", "v"),
		s("r%d_2", `SELECT id, g + v AS gv FROM s%d WHERE g < 6`, "id", "gv"),
		s("a%d_0", `SELECT g, count(*) AS n, sum(v) AS sv FROM s%d GROUP BY g`, "g", "n", "sv"),
		s("a%d_1", `SELECT v, count(*) AS n, max(id) AS top FROM s%d GROUP BY v`, "v", "n", "top"),
		s("a%d_2", `SELECT g, min(v) AS lo, max(v) AS hi FROM s%d GROUP BY g`, "g", "lo", "hi"),
		s("j%d_0", `SELECT s.id, d.label FROM s%d s LEFT JOIN d ON d.id = s.g`, "id", "label"),
		s("j%d_1", `SELECT d.label, count(*) AS n, sum(s.v) AS sv FROM s%d s JOIN d ON d.id = s.g GROUP BY d.label`, "label", "n", "sv"),
		s("c%d_0", `SELECT g, sum(v2) AS total, count(*) AS n FROM r%d_0 GROUP BY g`, "g", "total", "n"),
		s("c%d_1", `SELECT id, v FROM r%d_1 WHERE v > 2`, "id", "v"),
	}
}

// manySetup creates d and tables source tables of rows rows each.
func manySetup(tables, rows int) string {
	var b strings.Builder
	b.WriteString(`CREATE TABLE d (id int PRIMARY KEY, label text NOT NULL);
		INSERT INTO d SELECT g, 'l' || g FROM generate_series(0, 9) g;
`)
	for k := range tables {
		fmt.Fprintf(&b, `CREATE TABLE s%d (id int PRIMARY KEY, g int NOT NULL, v int NOT NULL);
			CREATE INDEX ON s%d (g);
			INSERT INTO s%d SELECT x, x %% 12, x %% 7 FROM generate_series(1, %d) x;
`, k, k, k, rows)
	}
	b.WriteString("ANALYZE;\n")
	return b.String()
}

// manyInstance is one database and the runner maintaining it.
type manyInstance struct {
	name   string // the point
	db     string // current_database()
	dsn    string
	conn   *pgx.Conn
	shapes []Shape
	// statusDSN is dsn with an application_name the connection sampler
	// does not count.
	statusDSN string
	runner    *manyRunner
	// obs is a reading instance (one connection) for convergence and
	// the library's Status.
	obs *trellis.Trellis
}

// script is every definition of the instance, in order.
func (in *manyInstance) script() string {
	var b strings.Builder
	for _, sh := range in.shapes {
		fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", pgx.Identifier{sh.Name}.Sanitize(), sh.Query)
	}
	return b.String()
}

// manyRun is one round's state.
type manyRun struct {
	s       *suiteRun
	cfg     ManyConfig
	dir     string
	few     *manyInstance
	many    *manyInstance
	ctlConn *pgx.Conn // in a third database: reads statistics
	cleanup []func() error
}

func (s *suiteRun) many(ctx context.Context, round int) (err error) {
	cfg := s.cfg.Many
	if cfg.Runner == "" {
		return errors.New("bench: many: no trellis-repl binary to run (ManyConfig.Runner)")
	}
	r := &manyRun{s: s, cfg: cfg}
	defer func() {
		for i := len(r.cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, r.cleanup[i]())
		}
	}()
	if r.dir, err = os.MkdirTemp("", "trellis-bench-many-"); err != nil {
		return fmt.Errorf("bench: many: %w", err)
	}
	r.cleanup = append(r.cleanup, func() error { return os.RemoveAll(r.dir) })
	_, ctl, ctlDone, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	r.cleanup = append(r.cleanup, ctlDone)
	r.ctlConn = ctl
	if r.few, err = r.newInstance(ctx, PointFew, 1); err != nil {
		return err
	}
	if r.many, err = r.newInstance(ctx, PointMany, cfg.Tables); err != nil {
		return err
	}
	return r.measure(ctx, round)
}

// newInstance creates a database with tables source tables and their
// transforms' definitions (not applied yet).
func (r *manyRun) newInstance(ctx context.Context, name string, tables int) (*manyInstance, error) {
	dsn, conn, done, err := newDatabase(ctx, r.s.dbs)
	if err != nil {
		return nil, err
	}
	r.cleanup = append(r.cleanup, done)
	in := &manyInstance{name: name, dsn: dsn, conn: conn}
	if in.statusDSN, err = withAppName(dsn, "bench status"); err != nil {
		return nil, err
	}
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&in.db); err != nil {
		return nil, fmt.Errorf("bench: many: %w", err)
	}
	if err := execAll(ctx, conn, "create the source tables", manySetup(tables, r.cfg.Rows)); err != nil {
		return nil, err
	}
	for k := range tables {
		in.shapes = append(in.shapes, manyShapes(k)...)
	}
	return in, nil
}

// apply applies the instance's script with `trellis-repl apply -f`.
func (r *manyRun) apply(ctx context.Context, in *manyInstance) (time.Duration, error) {
	path := filepath.Join(r.dir, in.name+".sql")
	if err := os.WriteFile(path, []byte(in.script()), 0o644); err != nil {
		return 0, fmt.Errorf("bench: many: %w", err)
	}
	took, _, err := cliRun(ctx, r.cfg.Runner, "apply", "--dsn", in.statusDSN, "-f", path)
	return took, err
}

// start starts the instance's runner and opens its reading instance.
func (r *manyRun) start(ctx context.Context, in *manyInstance) error {
	dir := filepath.Join(r.dir, in.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: many: %w", err)
	}
	run, err := startManyRunner(r.cfg.Runner, in.dsn, dir)
	if err != nil {
		return err
	}
	in.runner = run
	r.cleanup = append(r.cleanup, run.stop)
	obsDSN, err := withAppName(in.dsn, "bench observer")
	if err != nil {
		return err
	}
	if in.obs, err = trellis.Open(ctx, trellis.Config{DSN: obsDSN, ReadOnly: true, MaxConnections: 1}); err != nil {
		return fmt.Errorf("bench: many: open a reading instance: %w", err)
	}
	r.cleanup = append(r.cleanup, func() error { in.obs.Close(); return nil })
	return nil
}

// converge waits until every transform of in reflects every write so
// far, failing at once if its runner exits.
func (r *manyRun) converge(ctx context.Context, in *manyInstance) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.PhaseTimeout)
	defer cancel()
	go func() {
		select {
		case <-in.runner.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	tok, err := in.obs.WatermarkToken(ctx)
	if err == nil {
		err = in.obs.AwaitConverged(ctx, tok)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("bench: many: %s: %w", in.name, err), in.runner.cause())
	}
	return nil
}

// allLive checks that every transform of in is live.
func allLive(ctx context.Context, in *manyInstance) error {
	st, err := in.obs.Status(ctx)
	if err != nil {
		return fmt.Errorf("bench: many: status: %w", err)
	}
	var not []string
	for _, t := range st {
		if t.State != "live" {
			not = append(not, t.Name+" "+t.State)
		}
	}
	if len(st) != len(in.shapes) || len(not) > 0 {
		return fmt.Errorf("bench: many: %s: %d transforms of %d, not live: %s", in.name, len(st), len(in.shapes), strings.Join(not[:min(len(not), 10)], ", "))
	}
	return nil
}

func (r *manyRun) measure(ctx context.Context, round int) error {
	cfg, s := r.cfg, r.s
	few, many := r.few, r.many
	if _, err := r.apply(ctx, few); err != nil {
		return err
	}
	if err := r.start(ctx, few); err != nil {
		return err
	}
	if err := r.converge(ctx, few); err != nil {
		return err
	}

	applyTime, err := r.apply(ctx, many)
	if err != nil {
		return err
	}
	s.progressf("many round %d: %d definitions applied in %.2fs (one script, trellis-repl apply)", round, len(many.shapes), applyTime.Seconds())
	smp := &connSampler{db: many.db}
	sampled, stopSampler, err := smp.start(ctx, r.ctlConn.Config().ConnString(), many.dsn)
	if err != nil {
		return err
	}
	defer stopSampler()
	if err := r.start(ctx, many); err != nil {
		return err
	}
	started := time.Now()
	smp.building(started)
	if err := r.converge(ctx, many); err != nil {
		return err
	}
	buildTime := time.Since(started)
	smp.built()
	if err := allLive(ctx, many); err != nil {
		return err
	}
	s.progressf("many round %d: %d transforms live in %.2fs from the runner's start", round, len(many.shapes), buildTime.Seconds())
	// The last sample: everything live, now.
	samples := append(smp.samples(), buildSample{at: buildTime, live: int64(len(many.shapes)), conns: smp.most.Load()})
	for _, p := range samples {
		s.emit(Point{Scenario: ScenarioMany, Point: PointManySample, Round: round, Sample: true, Metrics: map[string]float64{
			"t_seconds": p.at.Seconds(), "transforms_live": float64(p.live), "connections": float64(p.conns)}})
	}

	lat, achieved, err := manyWorkload(ctx, many, cfg)
	if err != nil {
		return errors.Join(err, many.runner.cause())
	}
	if err := r.converge(ctx, many); err != nil {
		return err
	}
	s.progressf("many round %d: light workload %.0f commits/s: commit -> visible p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		round, achieved, ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(percentile(lat, 1)))

	idle, err := r.idle(ctx)
	if err != nil {
		return err
	}
	s.progressf("many round %d: idle for %s: %s", round, cfg.Idle, idle.text())
	for _, in := range []*manyInstance{few, many} {
		for _, q := range idle.top[in] {
			s.progressf("many round %d %-4s idle: %s", round, in.name, q)
		}
	}

	points := map[*manyInstance]Point{}
	for _, in := range []*manyInstance{few, many} {
		p := Point{Scenario: ScenarioMany, Point: in.name, Round: round, Metrics: map[string]float64{
			"transforms": float64(len(in.shapes)), "tables": float64(len(in.shapes) / manyPerTable)}, Labels: map[string]string{}}
		idle.fill(in, &p)
		if err := r.timeStatus(ctx, in, &p); err != nil {
			return err
		}
		if err := scrapeMetrics(ctx, in, &p); err != nil {
			return err
		}
		if rss, ok := peakRSS(in.runner.pid()); ok {
			p.Metrics["peak_rss_mib"] = float64(rss) / (1 << 20)
		}
		points[in] = p
		s.progressf("many round %d %-4s: %d transforms: status %.2fs, --json %.2fs, --watch first frame %.2fs (refresh %.2fs), library %.2fs; %.0f series on /metrics (%.1f per transform); peak RSS %.0f MiB",
			round, in.name, len(in.shapes), p.Metrics["status_seconds"], p.Metrics["status_json_seconds"], p.Metrics["status_watch_seconds"],
			p.Metrics["status_watch_refresh_seconds"], p.Metrics["status_library_seconds"], p.Metrics["metrics_series"],
			p.Metrics["metrics_series_per_transform"], p.Metrics["peak_rss_mib"])
	}
	stopSampler()
	if err := <-sampled; err != nil {
		return err
	}

	pm := points[many]
	pm.Metrics["apply_seconds"] = applyTime.Seconds()
	pm.Metrics["apply_ms_per_definition"] = ms(applyTime) / float64(len(many.shapes))
	pm.Metrics["build_seconds"] = buildTime.Seconds()
	pm.Metrics["connections_max"] = float64(smp.most.Load())
	pm.Metrics["connection_budget"] = trellis.DefaultMaxConnections
	pm.Metrics["workload_rate_per_second"] = achieved
	pm.Metrics["latency_p50_ms"] = ms(percentile(lat, 0.5))
	pm.Metrics["latency_p99_ms"] = ms(percentile(lat, 0.99))
	pm.Metrics["latency_max_ms"] = ms(percentile(lat, 1))
	// The idle cost against the small instance's, measured in the same
	// window: 1 means none per transform; the transform count's ratio
	// means all of it per transform.
	stmts := "idle_statements_per_second"
	if _, ok := pm.Metrics[stmts]; !ok {
		stmts = "idle_transactions_per_second"
	}
	pm.Labels["idle_ratio_of"] = stmts
	if f := points[few].Metrics[stmts]; f > 0 {
		pm.Ratio = ratio(pm.Metrics[stmts] / f)
	}
	if f := points[few].Metrics["idle_runner_cpu_percent"]; f > 0 {
		pm.Metrics["idle_runner_cpu_ratio"] = pm.Metrics["idle_runner_cpu_percent"] / f
	}
	if f := points[few].Metrics["peak_rss_mib"]; f > 0 {
		pm.Metrics["peak_rss_ratio"] = pm.Metrics["peak_rss_mib"] / f
	}
	points[many] = pm

	for _, in := range []*manyInstance{few, many} {
		p := points[in]
		verdict, err := verifyShapes(ctx, s.ec, in.conn, in.shapes)
		p.Labels["verified"] = verdict
		if err != nil {
			return err
		}
		if err := in.runner.stop(); err != nil {
			return err
		}
		s.emit(p)
	}
	s.progressf("many round %d: %d transforms against %d: connections at most %d (budget %d), build %.1fs; idle %s %.3g×, runner CPU %.3g×; latency p99 %.1f ms",
		round, len(many.shapes), len(few.shapes), smp.most.Load(), trellis.DefaultMaxConnections, buildTime.Seconds(), stmts,
		valueOr(pm.Ratio), pm.Metrics["idle_runner_cpu_ratio"], pm.Metrics["latency_p99_ms"])
	return nil
}

func valueOr(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// verifyShapes compares every shape's target with its query; any verdict
// but "ok" is an error.
func verifyShapes(ctx context.Context, ec *Config, conn *pgx.Conn, shapes []Shape) (string, error) {
	for _, sh := range shapes {
		v, err := verify(ctx, ec, conn, sh.Name, sh)
		if err != nil {
			return v, err
		}
		if v != "ok" {
			return v, fmt.Errorf("bench: target %s differs from its query: %s", sh.Name, v)
		}
	}
	return "ok", nil
}

// connSampler counts the runner's connections to one database every
// 50 ms (the most is kept) and, while the runner builds, the transforms
// live every second.
type connSampler struct {
	db   string
	most atomic.Int64

	mu      sync.Mutex
	since   time.Time // the runner's start; zero: not building
	recent  int64     // most connections since the last sample
	collect []buildSample
}

// buildSample is the state of a build at one second.
type buildSample struct {
	at    time.Duration
	live  int64
	conns int64
}

// start samples until stop is called; ctlDSN is where pg_stat_activity
// is read, dsn the instance's database (its catalog). The returned
// channel receives the sampler's error once it stopped.
func (c *connSampler) start(ctx context.Context, ctlDSN, dsn string) (<-chan error, func(), error) {
	ctl, err := connectAs(ctx, ctlDSN, "bench sampler")
	if err != nil {
		return nil, nil, err
	}
	cat, err := connectAs(ctx, dsn, "bench sampler")
	if err != nil {
		ctl.Close(ctx)
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		defer ctl.Close(context.WithoutCancel(ctx))
		defer cat.Close(context.WithoutCancel(ctx))
		done <- c.loop(sctx, ctl, cat)
	}()
	var once sync.Once
	return done, func() { once.Do(cancel) }, nil
}

func (c *connSampler) loop(ctx context.Context, ctl, cat *pgx.Conn) error {
	var lastLive time.Time // the first sample at once
	for {
		var n int64
		err := ctl.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'trellis-repl%'`, c.db).Scan(&n)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bench: many: count the runner's connections: %w", err)
		}
		if n > c.most.Load() {
			c.most.Store(n)
		}
		c.mu.Lock()
		c.recent = max(c.recent, n)
		since := c.since
		c.mu.Unlock()
		if !since.IsZero() && time.Since(lastLive) >= time.Second {
			lastLive = time.Now()
			var live int64
			// The catalog's own table: cheaper than Status, and read by
			// the sampler's connection, which the statistics leave out.
			err := cat.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'live') FROM trellis.transforms`).Scan(&live)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("bench: many: count the transforms live: %w", err)
			}
			c.mu.Lock()
			if !c.since.IsZero() {
				c.collect = append(c.collect, buildSample{at: time.Since(c.since), live: live, conns: c.recent})
			}
			c.recent = 0
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// building starts the per-second samples, timed from since.
func (c *connSampler) building(since time.Time) {
	c.mu.Lock()
	c.since = since
	c.mu.Unlock()
}

// built ends them.
func (c *connSampler) built() {
	c.mu.Lock()
	c.since = time.Time{}
	c.mu.Unlock()
}

func (c *connSampler) samples() []buildSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.collect)
}

// connectAs connects to dsn as application name.
func connectAs(ctx context.Context, dsn, name string) (*pgx.Conn, error) {
	d, err := withAppName(dsn, name)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return conn, nil
}

// manyWorkload inserts one row per commit at cfg.Rate for cfg.Workload,
// round robin over the instance's tables, while an observer polls each
// table's unfiltered row target (r<k>_0) for the rows not yet seen. It
// returns every row's commit-to-visible latency and the rate achieved.
func manyWorkload(ctx context.Context, in *manyInstance, cfg ManyConfig) ([]time.Duration, float64, error) {
	tables := len(in.shapes) / manyPerTable
	w, err := connectAs(ctx, in.dsn, "bench writer")
	if err != nil {
		return nil, 0, err
	}
	defer w.Close(context.WithoutCancel(ctx))
	o, err := connectAs(ctx, in.dsn, "bench observer")
	if err != nil {
		return nil, 0, err
	}
	defer o.Close(context.WithoutCancel(ctx))

	type row struct {
		table int
		id    int64
		at    time.Time
	}
	var mu sync.Mutex
	var pending []row
	var lat []time.Duration
	var writing atomic.Bool
	writing.Store(true)
	obsErr := make(chan error, 1)
	go func() {
		obsErr <- func() error {
			var stoppedAt time.Time
			for {
				done := !writing.Load()
				mu.Lock()
				wait := slices.Clone(pending)
				mu.Unlock()
				if done && len(wait) == 0 {
					return nil
				}
				if done && stoppedAt.IsZero() {
					stoppedAt = time.Now()
				}
				if !stoppedAt.IsZero() && time.Since(stoppedAt) > time.Minute {
					return fmt.Errorf("bench: many: %d rows not visible in their targets a minute after the workload stopped", len(wait))
				}
				if err := in.runner.cause(); err != nil {
					return err
				}
				if len(wait) > 0 {
					at := time.Now()
					seen, err := pollRows(ctx, o, wait, func(r row) (int, int64) { return r.table, r.id })
					if err != nil {
						return err
					}
					mu.Lock()
					pending = slices.DeleteFunc(pending, func(r row) bool {
						if seen[[2]int64{int64(r.table), r.id}] {
							lat = append(lat, max(at.Sub(r.at), 0))
							return true
						}
						return false
					})
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(cfg.PollInterval):
				}
			}
		}()
	}()

	every := time.Duration(float64(time.Second) / cfg.Rate)
	start := time.Now()
	n := 0
	var werr error
	for next := start; next.Sub(start) < cfg.Workload; next = next.Add(every) {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				werr = ctx.Err()
			case <-time.After(d):
			}
		}
		if werr != nil {
			break
		}
		k, id := n%tables, int64(1_000_000+n)
		if _, err := w.Exec(ctx, fmt.Sprintf(`INSERT INTO s%d (id, g, v) VALUES ($1::int, $1::int %% 12, $1::int %% 7)`, k), id); err != nil {
			werr = fmt.Errorf("bench: many: insert row %d into s%d: %w", id, k, err)
			break
		}
		at := time.Now()
		mu.Lock()
		pending = append(pending, row{table: k, id: id, at: at})
		mu.Unlock()
		n++
	}
	elapsed := time.Since(start)
	writing.Store(false)
	if err := errors.Join(werr, <-obsErr); err != nil {
		return nil, 0, err
	}
	if len(lat) == 0 {
		return nil, 0, errors.New("bench: many: no row written")
	}
	return lat, float64(n) / elapsed.Seconds(), nil
}

// pollRows reads which of rows (table, id) their tables' row targets
// hold now, in one statement.
func pollRows[R any](ctx context.Context, conn *pgx.Conn, rows []R, key func(R) (int, int64)) (map[[2]int64]bool, error) {
	ids := map[int][]int64{}
	for _, r := range rows {
		k, id := key(r)
		ids[k] = append(ids[k], id)
	}
	var parts []string
	var args []any
	for _, k := range slices.Sorted(maps.Keys(ids)) {
		args = append(args, ids[k])
		parts = append(parts, fmt.Sprintf(`SELECT %d::bigint, id::bigint FROM public.r%d_0 WHERE id = ANY ($%d::int[])`, k, k, len(args)))
	}
	q, err := conn.Query(ctx, strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return nil, fmt.Errorf("bench: many: poll the targets: %w", err)
	}
	out := map[[2]int64]bool{}
	var k, id int64
	if _, err := pgx.ForEachRow(q, []any{&k, &id}, func() error {
		out[[2]int64{k, id}] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("bench: many: poll the targets: %w", err)
	}
	return out, nil
}

// idleCost is what both instances cost while idle, over one window.
type idleCost struct {
	window time.Duration
	// per instance: transactions committed in its database, statements
	// run there (when pg_stat_statements is loaded), its runner's CPU and
	// its runner's backends' CPU over the window.
	xacts   map[*manyInstance]int64
	stmts   map[*manyInstance]float64
	cpu     map[*manyInstance]time.Duration
	backend map[*manyInstance]time.Duration
	// backendSeen is false when the backends' /proc is not readable (a
	// server on another machine).
	backendSeen bool
	// top are, with pg_stat_statements, the statements run most often in
	// each instance's database over the window, for the progress log.
	top map[*manyInstance][]string
}

// idleReading is one reading of the counters idleCost is the difference
// of.
type idleReading struct {
	xacts   map[*manyInstance]int64
	stmts   map[*manyInstance]float64
	cpu     map[*manyInstance]time.Duration
	backend map[*manyInstance]map[int]time.Duration
	ok      bool // every backend's /proc was readable
	// calls are, with pg_stat_statements, each statement's calls so far
	// (by query text).
	calls map[*manyInstance]map[string]float64
}

// idle lets both instances settle, then measures one idle window.
func (r *manyRun) idle(ctx context.Context) (*idleCost, error) {
	ins := []*manyInstance{r.few, r.many}
	var pgss bool
	if err := r.ctlConn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries') ~ 'pg_stat_statements'`).Scan(&pgss); err != nil {
		return nil, fmt.Errorf("bench: many: %w", err)
	}
	if pgss {
		if err := execAll(ctx, r.ctlConn, "create pg_stat_statements", `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return nil, err
		}
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(r.cfg.Settle):
	}
	before, err := r.read(ctx, ins, pgss)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(r.cfg.Idle):
	}
	after, err := r.read(ctx, ins, pgss)
	if err != nil {
		return nil, err
	}
	c := &idleCost{window: time.Since(start), xacts: map[*manyInstance]int64{}, cpu: map[*manyInstance]time.Duration{},
		backend: map[*manyInstance]time.Duration{}, backendSeen: before.ok && after.ok}
	if pgss {
		c.stmts, c.top = map[*manyInstance]float64{}, map[*manyInstance][]string{}
	}
	for _, in := range ins {
		if err := in.runner.cause(); err != nil {
			return nil, err
		}
		c.xacts[in] = after.xacts[in] - before.xacts[in]
		c.cpu[in] = after.cpu[in] - before.cpu[in]
		if pgss {
			c.stmts[in] = after.stmts[in] - before.stmts[in]
			c.top[in] = topCalls(before.calls[in], after.calls[in], 5)
		}
		for pid, v := range after.backend[in] {
			c.backend[in] += v - before.backend[in][pid] // a backend started meanwhile counts whole
		}
	}
	return c, nil
}

// read reads the counters of ins, from the control database (so the
// reading counts in neither instance's).
func (r *manyRun) read(ctx context.Context, ins []*manyInstance, pgss bool) (idleReading, error) {
	rd := idleReading{xacts: map[*manyInstance]int64{}, stmts: map[*manyInstance]float64{}, cpu: map[*manyInstance]time.Duration{},
		backend: map[*manyInstance]map[int]time.Duration{}, ok: true, calls: map[*manyInstance]map[string]float64{}}
	for _, in := range ins {
		q := `SELECT xact_commit, 0::float8 FROM pg_stat_database WHERE datname = $1`
		if pgss {
			q = `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = $1),
				(SELECT coalesce(sum(calls), 0)::float8 FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1)`
		}
		var x int64
		var st float64
		if err := r.ctlConn.QueryRow(ctx, q, in.db).Scan(&x, &st); err != nil {
			return rd, fmt.Errorf("bench: many: read the statistics of %s: %w", in.db, err)
		}
		rd.xacts[in], rd.stmts[in] = x, st
		if pgss {
			rows, err := r.ctlConn.Query(ctx, `SELECT left(regexp_replace(s.query, '\s+', ' ', 'g'), 100), sum(s.calls)::float8
				FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 GROUP BY 1`, in.db)
			if err != nil {
				return rd, fmt.Errorf("bench: many: read pg_stat_statements: %w", err)
			}
			rd.calls[in] = map[string]float64{}
			var q string
			var n float64
			if _, err := pgx.ForEachRow(rows, []any{&q, &n}, func() error { rd.calls[in][q] = n; return nil }); err != nil {
				return rd, fmt.Errorf("bench: many: read pg_stat_statements: %w", err)
			}
		}
		c, ok := procCPU(in.runner.pid())
		if !ok {
			return rd, errors.Join(fmt.Errorf("bench: many: the %s runner's CPU is not readable", in.name), in.runner.cause())
		}
		rd.cpu[in] = c
		rows, err := r.ctlConn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'trellis-repl%'`, in.db)
		if err != nil {
			return rd, fmt.Errorf("bench: many: list backends: %w", err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return rd, fmt.Errorf("bench: many: list backends: %w", err)
		}
		rd.backend[in] = map[int]time.Duration{}
		for _, pid := range pids {
			c, ok := procCPU(int(pid))
			rd.ok = rd.ok && ok
			rd.backend[in][int(pid)] = c
		}
	}
	return rd, nil
}

// topCalls are the k statements called most between two readings, as
// "calls× query".
func topCalls(before, after map[string]float64, k int) []string {
	type qc struct {
		q string
		n float64
	}
	var all []qc
	for q, n := range after {
		if d := n - before[q]; d > 0 {
			all = append(all, qc{q, d})
		}
	}
	slices.SortFunc(all, func(a, b qc) int { return cmp.Compare(b.n, a.n) })
	var out []string
	for _, x := range all[:min(k, len(all))] {
		out = append(out, fmt.Sprintf("%.0f× %s", x.n, x.q))
	}
	return out
}

// fill puts in's idle figures into p.
func (c *idleCost) fill(in *manyInstance, p *Point) {
	secs := c.window.Seconds()
	p.Metrics["idle_seconds"] = secs
	p.Metrics["idle_transactions_per_second"] = float64(c.xacts[in]) / secs
	if c.stmts != nil {
		p.Metrics["idle_statements_per_second"] = c.stmts[in] / secs
	}
	p.Metrics["idle_runner_cpu_percent"] = 100 * c.cpu[in].Seconds() / secs
	if c.backendSeen {
		p.Metrics["idle_backend_cpu_percent"] = 100 * c.backend[in].Seconds() / secs
	}
}

// text is the idle figures of both instances in a sentence.
func (c *idleCost) text() string {
	var parts []string
	for in, x := range c.xacts {
		t := fmt.Sprintf("%s (%d transforms): %.1f transactions/s", in.name, len(in.shapes), float64(x)/c.window.Seconds())
		if c.stmts != nil {
			t += fmt.Sprintf(", %.1f statements/s", c.stmts[in]/c.window.Seconds())
		}
		t += fmt.Sprintf(", runner CPU %.2f%%", 100*c.cpu[in].Seconds()/c.window.Seconds())
		parts = append(parts, t)
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// timeStatus times `status`, `status --json`, `status --watch` and the
// library's Status against in, StatusRuns times each (medians; the
// slowest `status` too).
func (r *manyRun) timeStatus(ctx context.Context, in *manyInstance, p *Point) error {
	n := r.cfg.StatusRuns
	var plain, asJSON, lib []time.Duration
	for range n {
		took, _, err := cliRun(ctx, r.cfg.Runner, "status", "--dsn", in.statusDSN)
		if err != nil {
			return err
		}
		plain = append(plain, took)
		took, out, err := cliRun(ctx, r.cfg.Runner, "status", "--json", "--dsn", in.statusDSN)
		if err != nil {
			return err
		}
		var st []json.RawMessage
		if err := json.Unmarshal(out, &st); err != nil || len(st) != len(in.shapes) {
			return fmt.Errorf("bench: many: status --json of %s gave %d transforms, want %d (%v)", in.name, len(st), len(in.shapes), err)
		}
		asJSON = append(asJSON, took)
		start := time.Now()
		if _, err := in.obs.Status(ctx); err != nil {
			return fmt.Errorf("bench: many: status: %w", err)
		}
		lib = append(lib, time.Since(start))
	}
	first, refresh, err := watchTimes(ctx, r.cfg.Runner, 200*time.Millisecond, n+1, "--dsn", in.statusDSN)
	if err != nil {
		return err
	}
	p.Metrics["status_seconds"] = percentile(plain, 0.5).Seconds()
	p.Metrics["status_max_seconds"] = percentile(plain, 1).Seconds()
	p.Metrics["status_json_seconds"] = percentile(asJSON, 0.5).Seconds()
	p.Metrics["status_watch_seconds"] = first.Seconds()
	p.Metrics["status_watch_refresh_seconds"] = percentile(refresh, 0.5).Seconds()
	p.Metrics["status_library_seconds"] = percentile(lib, 0.5).Seconds()
	return nil
}

// scrapeMetrics reads the runner's /metrics once: how long it took, and
// its trellis_ series, in all and per transform.
func scrapeMetrics(ctx context.Context, in *manyInstance, p *Point) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.runner.metricsURL, nil)
	if err != nil {
		return fmt.Errorf("bench: many: %w", err)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: many: scrape %s: %w", in.runner.metricsURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: many: scrape %s: %s %w", in.runner.metricsURL, resp.Status, err)
	}
	var all, per int
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "trellis_") {
			continue
		}
		all++
		if strings.Contains(line, `transform="`) {
			per++
		}
	}
	p.Metrics["metrics_series"] = float64(all)
	p.Metrics["metrics_series_per_transform"] = float64(per) / float64(len(in.shapes))
	p.Metrics["metrics_scrape_seconds"] = took.Seconds()
	p.Metrics["metrics_bytes"] = float64(len(body))
	return nil
}
