package bench

// The memory scenario (issue 25, item 2; ADR 0029): the runner's peak
// resident memory on every path that handles a transaction, a table or a
// set of transforms of unbounded size. The runner is a child process
// (`trellis-repl run`, MemoryConfig.Runner), started afresh for each path
// so that its VmHWM (/proc/<pid>/status) is that path's peak. Per capture
// mode, on one fresh database with mem_src(id, g, v, d) and three
// transforms (mem_rows, a row transform; mem_agg, a GROUP BY; mem_div,
// SELECT id, 1000 / d, which fails for every row with d = 0):
//
//   - fault insert: Rows rows inserted in one transaction, one in
//     FailEvery with d = 0: mem_div bisects its batches, retries and holds
//     the failing keys until the fuse (--quarantine-after, Fuse) trips and
//     it is quarantined (with a fuse above Rows / FailEvery it holds them
//     all and stays live);
//   - fault update: every row updated in one transaction (one in
//     FailEvery / 2 now failing, so a transform still live trips its
//     fuse), mem_div quarantined;
//   - resume: the failing rows fixed, RESUME TRANSFORM mem_div (its held
//     keys released, a rebuild over Rows rows);
//   - self-check: mem_rows's target edited by hand at 2 rows in 1,000 (up
//     to the listed 10,000), a self-check with repair;
//   - delete: every row deleted in one transaction;
//   - truncate: mem_src filled with Rows rows again if it is empty (not
//     measured), seven more transforms defined over it and built (point
//     "build seven"; ten transforms read it), then TRUNCATE mem_src;
//   - build: BuildTransforms transforms over BuildTables tables of
//     BuildRows rows each, defined in one Apply and built at once.
//
// Each point reports peak_rss_mib (goal ≤ 256) and seconds; every target
// is compared with its query at the end of each path (mem_div's rows at
// held keys excepted while it holds them).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// ScenarioMemory is the memory scenario.
const ScenarioMemory = "memory"

// The paths of the memory scenario, in the order they run.
const (
	MemoryFault     = "fault"  // points "fault insert", "fault update"
	MemoryResume    = "resume" // needs fault
	MemorySelfCheck = "self-check"
	MemoryDelete    = "delete"
	MemoryTruncate  = "truncate" // points "build seven", "truncate"
	MemoryBuild     = "build"
	// MemoryHealthy (not run by default) is the fault path's insert and
	// update with mem_div's divisor never zero: what three healthy
	// transforms cost.
	MemoryHealthy = "healthy"
)

// MemoryPaths lists the memory scenario's paths in the order they run.
func MemoryPaths() []string {
	return []string{MemoryHealthy, MemoryFault, MemoryResume, MemorySelfCheck, MemoryDelete, MemoryTruncate, MemoryBuild}
}

// The memory scenario's points (each prefixed with the capture mode).
const (
	memPointBuild = "build"
)

// memoryPoints are the points the memory scenario measures per capture
// mode, with every path run.
func memoryPoints() []string {
	return []string{"healthy insert", "healthy update", "fault insert", "fault update", "resume", "self-check", "delete", "build seven", "truncate", memPointBuild}
}

// memoryGoals are the peak-memory goal of every point.
func memoryGoals() []Goal {
	var out []Goal
	for _, c := range []string{trellis.CaptureLogical, trellis.CaptureTrigger} {
		for _, p := range memoryPoints() {
			out = append(out, Goal{ScenarioMemory, c + " " + p, "peak_rss_mib", true, GoalPeakRSSMiB, fmt.Sprintf("runner peak RSS ≤ %d MiB", GoalPeakRSSMiB)})
		}
	}
	return out
}

// GoalPeakRSSMiB is the runner's peak resident memory on every path of
// the memory scenario (issue 25).
const GoalPeakRSSMiB = 256

// MemoryConfig configures the memory scenario.
type MemoryConfig struct {
	// Rows is the size of the huge transactions and tables (default
	// 5,000,000).
	Rows int
	// FailEvery: one row in FailEvery fails mem_div's re-derive in the
	// fault insert (default 5,000).
	FailEvery int
	// Fuse is the runners' --quarantine-after (default 5, the runner's
	// default: the fault insert trips it).
	Fuse int
	// Paths are the paths to run (default every one but healthy), in the
	// order of MemoryPaths.
	Paths []string
	// Captures are the capture modes (default logical and trigger), a
	// database each.
	Captures []string
	// BuildTransforms transforms (default 200) over BuildTables tables
	// (default 20) of BuildRows rows (default 50,000) for the build path.
	BuildTransforms int
	BuildTables     int
	BuildRows       int
	// Runner is the trellis-repl binary run as the child process; it
	// must be set (the CLI sets its own executable).
	Runner string
	// ProfileDir, when set, receives each path's runner log and a heap
	// profile taken at each new peak of its resident memory (the runner
	// serves /debug/pprof).
	ProfileDir string
	// RunnerArgs are extra arguments of every runner (e.g.
	// --batch-size).
	RunnerArgs []string
}

func (c *MemoryConfig) defaults() {
	if c.Rows <= 0 {
		c.Rows = 5_000_000
	}
	if c.FailEvery <= 0 {
		c.FailEvery = 5_000
	}
	if c.Fuse <= 0 {
		c.Fuse = 5
	}
	if len(c.Paths) == 0 {
		c.Paths = []string{MemoryFault, MemoryResume, MemorySelfCheck, MemoryDelete, MemoryTruncate, MemoryBuild}
	}
	if len(c.Captures) == 0 {
		c.Captures = []string{trellis.CaptureLogical, trellis.CaptureTrigger}
	}
	if c.BuildTransforms <= 0 {
		c.BuildTransforms = 200
	}
	if c.BuildTables <= 0 {
		c.BuildTables = 20
	}
	if c.BuildRows <= 0 {
		c.BuildRows = 50_000
	}
}

// check says what is wrong with c, if anything.
func (c *MemoryConfig) check() error {
	for _, p := range c.Paths {
		if !contains(MemoryPaths(), p) {
			return fmt.Errorf("bench: unknown memory path %q; use %s", p, strings.Join(MemoryPaths(), ", "))
		}
	}
	if contains(c.Paths, MemoryResume) && !contains(c.Paths, MemoryFault) {
		return errors.New("bench: the memory path resume needs the fault path (it resumes the transform the fault path quarantined)")
	}
	if c.FailEvery < 4 || c.Rows/c.FailEvery < 2 {
		return fmt.Errorf("bench: memory: %d rows with one in %d failing hold fewer than two keys; give more rows or a smaller fail-every", c.Rows, c.FailEvery)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// memTransforms are the fault path's three transforms.
var memTransforms = []Shape{
	{Name: "mem_rows", Query: `SELECT id, g, v * 2 AS v2 FROM mem_src`, Columns: []string{"id", "g", "v2"}},
	{Name: "mem_agg", Query: `SELECT g, count(*) AS n, sum(v) AS s FROM mem_src GROUP BY g`, Columns: []string{"g", "n", "s"}},
	{Name: "mem_div", Query: `SELECT id, 1000 / d AS r FROM mem_src`, Columns: []string{"id", "r"}},
}

// memTen are the seven transforms the truncate path adds.
func memTen() []Shape {
	var out []Shape
	for k := 1; k <= 7; k++ {
		name := fmt.Sprintf("mem_t%d", k)
		if k%2 == 1 {
			out = append(out, Shape{Name: name, Query: fmt.Sprintf(`SELECT id, v + %d AS x FROM mem_src WHERE g %% 7 <> %d`, k, k), Columns: []string{"id", "x"}})
		} else {
			out = append(out, Shape{Name: name, Query: fmt.Sprintf(`SELECT d, count(*) AS n, max(v) AS hi FROM mem_src WHERE g %% 7 <> %d GROUP BY d`, k), Columns: []string{"d", "n", "hi"}})
		}
	}
	return out
}

// memory runs the scenario for each capture mode.
func (s *suiteRun) memory(ctx context.Context, round int) error {
	mc := s.cfg.Memory
	if mc.Runner == "" {
		return errors.New("bench: the memory scenario runs `trellis-repl run` as a child process; set MemoryConfig.Runner to the binary")
	}
	for _, capture := range mc.Captures {
		if err := s.memoryCapture(ctx, round, capture); err != nil {
			return fmt.Errorf("%s capture: %w", capture, err)
		}
	}
	return nil
}

// memRun is one capture mode's run of the memory scenario.
type memRun struct {
	s       *suiteRun
	cfg     MemoryConfig
	round   int
	capture string
	dsn     string
	conn    *pgx.Conn
	tr      *trellis.Trellis
	dataDir string
	fuse    int
	shapes  []Shape
	// timeout bounds each wait for a path to settle.
	timeout time.Duration
}

func (s *suiteRun) memoryCapture(ctx context.Context, round int, capture string) (err error) {
	mc := s.cfg.Memory
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	dir, err := os.MkdirTemp("", "trellis-bench-memory-")
	if err != nil {
		return fmt.Errorf("bench: data dir: %w", err)
	}
	defer os.RemoveAll(dir)
	m := &memRun{s: s, cfg: mc, round: round, capture: capture, dsn: dsn, conn: conn, dataDir: filepath.Join(dir, "store"),
		fuse: mc.Fuse, shapes: memTransforms,
		timeout: max(s.cfg.PhaseTimeout, time.Duration(mc.Rows)*time.Millisecond)}
	m.tr, err = trellis.Open(ctx, trellis.Config{DSN: dsn, MaxConnections: 4})
	if err != nil {
		return fmt.Errorf("bench: open: %w", err)
	}
	defer m.tr.Close()
	if err := execAll(ctx, conn, "create mem_src", `CREATE TABLE mem_src (id bigint PRIMARY KEY, g int NOT NULL, v int NOT NULL, d int NOT NULL)`); err != nil {
		return err
	}
	if err := m.define(ctx, m.shapes); err != nil {
		return err
	}
	// The runner installs capture and builds the empty transforms.
	if err := m.path(ctx, "setup", false, func(ctx context.Context, p *runnerProc) error {
		return m.converged(ctx, p)
	}); err != nil {
		return err
	}
	runs := map[string]func(context.Context) error{
		MemoryHealthy: m.healthy, MemoryFault: m.fault, MemoryResume: m.resume, MemorySelfCheck: m.selfCheck,
		MemoryDelete: m.delete, MemoryTruncate: m.truncate, MemoryBuild: m.build,
	}
	for _, path := range MemoryPaths() {
		if !contains(mc.Paths, path) {
			continue
		}
		if err := runs[path](ctx); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// define creates shapes as transforms.
func (m *memRun) define(ctx context.Context, shapes []Shape) error {
	var script strings.Builder
	for _, sh := range shapes {
		fmt.Fprintf(&script, "CREATE TRANSFORM %s AS %s;\n", pgx.Identifier{sh.Name}.Sanitize(), sh.Query)
	}
	if _, err := m.tr.Apply(ctx, script.String()); err != nil {
		return fmt.Errorf("bench: define: %w", err)
	}
	return nil
}

// path starts a runner, waits for it to settle what the earlier paths
// left, runs fn and reports the runner's peak resident memory as the
// point name (when measured).
func (m *memRun) path(ctx context.Context, name string, measured bool, fn func(context.Context, *runnerProc) error) (err error) {
	p, err := startRunner(ctx, m.cfg, m.runnerArgs(), m.profileBase(name))
	if err != nil {
		return err
	}
	defer func() {
		if serr := p.stop(); serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			err = fmt.Errorf("%w\nrunner log (last lines):\n%s", err, p.tail())
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	// A runner that exits ends the wait at once.
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	if err := fn(ctx, p); err != nil {
		return errors.Join(err, p.exitErr())
	}
	secs := time.Since(start).Seconds()
	peak, err := p.peakRSS()
	if err != nil {
		return err
	}
	if !measured {
		return nil
	}
	pt := Point{Scenario: ScenarioMemory, Point: m.capture + " " + name, Round: m.round,
		Metrics: map[string]float64{"peak_rss_mib": float64(peak) / (1 << 20), "seconds": secs, "rows": float64(m.cfg.Rows)},
		Labels:  map[string]string{"capture": m.capture, "path": name, "verified": "ok"}}
	m.s.emit(pt)
	m.s.progressf("bench: memory %s %s: peak RSS %.0f MiB in %.1fs", m.capture, name, pt.Metrics["peak_rss_mib"], secs)
	return nil
}

func (m *memRun) runnerArgs() []string {
	args := []string{"run", "--dsn", m.dsn, "--data-dir", m.dataDir, "--capture", m.capture, "--log-level", "warn",
		"--quarantine-after", strconv.Itoa(m.fuse), "--progress-interval", m.s.cfg.ProgressInterval.String()}
	return append(args, m.cfg.RunnerArgs...)
}

// profileBase is where a path's runner log and heap profiles go ("": none).
func (m *memRun) profileBase(name string) string {
	if m.cfg.ProfileDir == "" {
		return ""
	}
	return filepath.Join(m.cfg.ProfileDir, fmt.Sprintf("memory-%s-%s-r%d", m.capture, strings.ReplaceAll(name, " ", "-"), m.round))
}

// converged waits until every transform not quarantined has applied what
// was committed so far.
func (m *memRun) converged(ctx context.Context, p *runnerProc) error {
	tok, err := m.tr.WatermarkToken(ctx)
	if err != nil {
		return err
	}
	if err := m.tr.AwaitConverged(ctx, tok); err != nil {
		return fmt.Errorf("bench: await convergence: %w", err)
	}
	return nil
}

// awaitNamed waits until the named transforms have applied what was
// committed so far (others may be quarantined).
func (m *memRun) awaitNamed(ctx context.Context, names ...string) error {
	tok, err := m.tr.WatermarkToken(ctx)
	if err != nil {
		return err
	}
	if err := m.tr.AwaitTransforms(ctx, tok, names...); err != nil {
		return fmt.Errorf("bench: await %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// waitStatus polls name's status until ok.
func (m *memRun) waitStatus(ctx context.Context, name, what string, ok func(trellis.TransformStatus) bool) error {
	var last trellis.TransformStatus
	for {
		st, err := m.tr.Status(ctx, name)
		if err == nil && len(st) == 1 {
			last = st[0]
			if ok(last) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %s never %s (last: state %s, held %v, waiting %d): %w", name, what, last.State, last.HeldKeys, last.KeysWaiting, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// verify compares every target with its query; mem_div's rows at held
// keys (d = 0) are left out of its comparison while it holds keys.
func (m *memRun) verify(ctx context.Context, shapes []Shape) error {
	ec := m.s.ec
	for _, sh := range shapes {
		if sh.Name == "mem_div" {
			st, err := m.tr.Status(ctx, sh.Name)
			if err != nil {
				return err
			}
			if len(st) == 1 && (st[0].State != "live" || st[0].HeldKeys != nil && st[0].HeldKeys.Count > 0) {
				continue // its held rows differ by design; checked after the resume
			}
		}
		v, err := verify(ctx, ec, m.conn, sh.Name, sh)
		if err != nil {
			return err
		}
		if v != "ok" {
			return fmt.Errorf("bench: target %s differs from its query: %s", sh.Name, v)
		}
	}
	return nil
}

// insertSQL inserts the Rows rows; a row fails mem_div when d = 0, which
// failEvery > 0 makes one row in failEvery.
func (m *memRun) insertSQL(failEvery int) string {
	d := "1 + i % 97"
	if failEvery > 0 {
		d = fmt.Sprintf("i %% %d", failEvery)
	}
	return fmt.Sprintf(`INSERT INTO mem_src SELECT i, i %% 1000, i %% 997, %s FROM generate_series(1, %d) i`, d, m.cfg.Rows)
}

// healthy is the fault path's insert and update with nothing failing,
// then the rows deleted again (unmeasured) for the paths that follow.
func (m *memRun) healthy(ctx context.Context) error {
	err := m.path(ctx, "healthy insert", true, func(ctx context.Context, p *runnerProc) error {
		if err := execAll(ctx, m.conn, "insert", m.insertSQL(0)); err != nil {
			return err
		}
		return m.converged(ctx, p)
	})
	if err == nil {
		err = m.path(ctx, "healthy update", true, func(ctx context.Context, p *runnerProc) error {
			if err := execAll(ctx, m.conn, "update", `UPDATE mem_src SET v = v + 1`); err != nil {
				return err
			}
			return m.converged(ctx, p)
		})
	}
	if err == nil {
		err = m.verify(ctx, m.shapes)
	}
	if err == nil {
		err = m.path(ctx, "healthy cleanup", false, func(ctx context.Context, p *runnerProc) error {
			if err := execAll(ctx, m.conn, "empty mem_src", `DELETE FROM mem_src`); err != nil {
				return err
			}
			return m.converged(ctx, p)
		})
	}
	return err
}

// fault: the insert holds Rows/FailEvery keys of mem_div; the update
// makes twice as many fail, and the fuse quarantines it.
func (m *memRun) fault(ctx context.Context) error {
	held := int64(m.cfg.Rows / m.cfg.FailEvery)
	err := m.path(ctx, "fault insert", true, func(ctx context.Context, p *runnerProc) error {
		if err := execAll(ctx, m.conn, "insert", m.insertSQL(m.cfg.FailEvery)); err != nil {
			return err
		}
		if err := m.awaitNamed(ctx, "mem_rows", "mem_agg"); err != nil {
			return err
		}
		return m.waitStatus(ctx, "mem_div", fmt.Sprintf("quarantined or held its %d failing keys", held), func(s trellis.TransformStatus) bool {
			return s.State == "quarantined" || s.HeldKeys != nil && s.HeldKeys.Count == held && s.KeysWaiting == 0 && s.State == "live"
		})
	})
	if err != nil {
		return err
	}
	if err := m.verify(ctx, m.shapes); err != nil {
		return err
	}
	err = m.path(ctx, "fault update", true, func(ctx context.Context, p *runnerProc) error {
		if err := execAll(ctx, m.conn, "update", fmt.Sprintf(`UPDATE mem_src SET v = v + 1, d = id %% %d`, m.cfg.FailEvery/2)); err != nil {
			return err
		}
		if err := m.awaitNamed(ctx, "mem_rows", "mem_agg"); err != nil {
			return err
		}
		return m.waitStatus(ctx, "mem_div", "quarantined", func(s trellis.TransformStatus) bool { return s.State == "quarantined" })
	})
	if err != nil {
		return err
	}
	return m.verify(ctx, m.shapes)
}

// resume fixes the failing rows and resumes mem_div: its held keys are
// released and it is rebuilt over Rows rows.
func (m *memRun) resume(ctx context.Context) error {
	if err := execAll(ctx, m.conn, "fix the failing rows", `UPDATE mem_src SET d = 1 WHERE d = 0`); err != nil {
		return err
	}
	err := m.path(ctx, "resume", true, func(ctx context.Context, p *runnerProc) error {
		if _, err := m.tr.Apply(ctx, `RESUME TRANSFORM mem_div`); err != nil {
			return fmt.Errorf("bench: resume: %w", err)
		}
		if err := m.converged(ctx, p); err != nil {
			return err
		}
		return m.waitStatus(ctx, "mem_div", "released its held keys", func(s trellis.TransformStatus) bool {
			return s.State == "live" && (s.HeldKeys == nil || s.HeldKeys.Count == 0)
		})
	})
	if err != nil {
		return err
	}
	return m.verify(ctx, m.shapes)
}

// selfCheck edits mem_rows's target by hand (two rows in 1,000: a row
// gone, a cell changed, at most the 10,000 a report lists) and has the
// runner check and repair it.
func (m *memRun) selfCheck(ctx context.Context) error {
	var n int64
	if err := m.conn.QueryRow(ctx, `SELECT count(*) FROM mem_src`).Scan(&n); err != nil {
		return fmt.Errorf("bench: count mem_src: %w", err)
	}
	if n == 0 {
		if err := execAll(ctx, m.conn, "insert", m.insertSQL(0)); err != nil {
			return err
		}
	}
	err := m.path(ctx, "self-check", true, func(ctx context.Context, p *runnerProc) error {
		if err := m.converged(ctx, p); err != nil {
			return err
		}
		every := max(m.cfg.Rows/5000, 2)
		if err := execAll(ctx, m.conn, "edit mem_rows by hand",
			fmt.Sprintf(`DELETE FROM mem_rows WHERE id %% %d = 0`, every),
			fmt.Sprintf(`UPDATE mem_rows SET v2 = -1 WHERE id %% %d = 1`, every)); err != nil {
			return err
		}
		job, err := m.tr.SelfCheck(ctx, "mem_rows", trellis.SelfCheckOptions{Repair: true, Wait: true, Timeout: m.timeout})
		if err != nil {
			return fmt.Errorf("bench: self-check: %w", err)
		}
		if job.State != trellis.SelfCheckDone || job.Report == nil || !job.Report.ByRunner || !job.Report.Settled() {
			return fmt.Errorf("bench: self-check with repair did not settle mem_rows: state %s, report %+v, error %v", job.State, job.Report, job.Error)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.verify(ctx, m.shapes)
}

// delete deletes every row in one transaction.
func (m *memRun) delete(ctx context.Context) error {
	err := m.path(ctx, "delete", true, func(ctx context.Context, p *runnerProc) error {
		if err := execAll(ctx, m.conn, "delete", `DELETE FROM mem_src`); err != nil {
			return err
		}
		return m.converged(ctx, p)
	})
	if err != nil {
		return err
	}
	return m.verify(ctx, m.shapes)
}

// truncate fills mem_src again when it is empty, builds seven more
// transforms over it (ten read it) and truncates it.
func (m *memRun) truncate(ctx context.Context) error {
	var n int64
	if err := m.conn.QueryRow(ctx, `SELECT count(*) FROM mem_src`).Scan(&n); err != nil {
		return fmt.Errorf("bench: count mem_src: %w", err)
	}
	if n == 0 {
		err := m.path(ctx, "refill", false, func(ctx context.Context, p *runnerProc) error {
			if err := execAll(ctx, m.conn, "insert", m.insertSQL(0)); err != nil {
				return err
			}
			return m.converged(ctx, p)
		})
		if err != nil {
			return err
		}
	}
	ten := memTen()
	err := m.path(ctx, "build seven", true, func(ctx context.Context, p *runnerProc) error {
		if err := m.converged(ctx, p); err != nil {
			return err
		}
		if err := m.define(ctx, ten); err != nil {
			return err
		}
		return m.converged(ctx, p)
	})
	m.shapes = append(m.shapes, ten...)
	if err == nil {
		err = m.verify(ctx, m.shapes)
	}
	if err != nil {
		return err
	}
	err = m.path(ctx, "truncate", true, func(ctx context.Context, p *runnerProc) error {
		if err := m.converged(ctx, p); err != nil {
			return err
		}
		if err := execAll(ctx, m.conn, "truncate", `TRUNCATE mem_src`); err != nil {
			return err
		}
		return m.converged(ctx, p)
	})
	if err != nil {
		return err
	}
	return m.verify(ctx, m.shapes)
}

// build defines BuildTransforms transforms over BuildTables tables in one
// Apply while the runner runs, and waits until every one is built.
func (m *memRun) build(ctx context.Context) error {
	c := m.cfg
	var stmts []string
	for i := 0; i < c.BuildTables; i++ {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE mem_b%d (id bigint PRIMARY KEY, g int NOT NULL, v int NOT NULL)`, i),
			fmt.Sprintf(`INSERT INTO mem_b%d SELECT i, i %% 500, i %% 997 FROM generate_series(1, %d) i`, i, c.BuildRows),
			fmt.Sprintf(`ANALYZE mem_b%d`, i))
	}
	if err := execAll(ctx, m.conn, "create the build tables", stmts...); err != nil {
		return err
	}
	var shapes []Shape
	for k := 0; k < c.BuildTransforms; k++ {
		src := fmt.Sprintf("mem_b%d", k%c.BuildTables)
		name := fmt.Sprintf("mem_build%d", k)
		switch k % 3 {
		case 0:
			shapes = append(shapes, Shape{Name: name, Query: fmt.Sprintf(`SELECT id, g, v + %d AS x FROM %s`, k, src), Columns: []string{"id", "g", "x"}})
		case 1:
			shapes = append(shapes, Shape{Name: name, Query: fmt.Sprintf(`SELECT g, count(*) AS n, sum(v + %d) AS s FROM %s GROUP BY g`, k, src), Columns: []string{"g", "n", "s"}})
		default:
			shapes = append(shapes, Shape{Name: name, Query: fmt.Sprintf(`SELECT id, v * %d AS x FROM %s WHERE g %% 3 = %d`, k, src, k%3), Columns: []string{"id", "x"}})
		}
	}
	err := m.path(ctx, memPointBuild, true, func(ctx context.Context, p *runnerProc) error {
		if err := m.converged(ctx, p); err != nil {
			return err
		}
		if err := m.define(ctx, shapes); err != nil {
			return err
		}
		return m.converged(ctx, p)
	})
	if err != nil {
		return err
	}
	return m.verify(ctx, shapes)
}

// runnerProc is a `trellis-repl run` child process.
type runnerProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited is closed
	log    *logTail
	stopMu sync.Once
	// done stops the profiler.
	done chan struct{}
	wg   sync.WaitGroup
}

// startRunner starts the runner; with base set, its log goes to
// base.log and a heap profile to base.heap at each new peak of its
// resident memory.
func startRunner(ctx context.Context, cfg MemoryConfig, args []string, base string) (*runnerProc, error) {
	var addr string
	if base != "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: pick a port for the runner's profiler: %w", err)
		}
		addr = l.Addr().String()
		l.Close()
		args = append(args, "--metrics-addr", addr, "--pprof")
	}
	p := &runnerProc{exited: make(chan struct{}), done: make(chan struct{}), log: &logTail{}}
	var out io.Writer = p.log
	if base != "" {
		f, err := os.Create(base + ".log")
		if err != nil {
			return nil, fmt.Errorf("bench: runner log: %w", err)
		}
		out = io.MultiWriter(p.log, f)
		defer func() {
			go func() { <-p.exited; f.Close() }()
		}()
	}
	// Not CommandContext: the runner is stopped with SIGTERM (stop), so
	// that it ends as in production.
	p.cmd = exec.Command(cfg.Runner, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the runner %s: %w", cfg.Runner, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if base != "" {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.profile(ctx, addr, base)
		}()
	}
	return p, nil
}

// profile saves a heap profile of the runner (file.heap, and file.txt
// with the runtime's memory statistics) each time its resident memory
// grows past its peak by 8 MiB.
func (p *runnerProc) profile(ctx context.Context, addr, file string) {
	var peak int64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.exited:
			return
		case <-tick.C:
		}
		rss, err := procStatus(p.cmd.Process.Pid, "VmRSS:")
		if err != nil || rss < peak+8<<20 {
			continue
		}
		peak = rss
		// The profile, and its text form, whose end is the runtime's
		// memory statistics: what of the RSS is Go's heap.
		if body, err := fetch(ctx, "http://"+addr+"/debug/pprof/heap"); err == nil {
			_ = os.WriteFile(file+".heap", body, 0o644) // gzipped: nothing may follow it
		}
		if body, err := fetch(ctx, "http://"+addr+"/debug/pprof/heap?debug=1"); err == nil {
			_ = os.WriteFile(file+".txt", append(body, fmt.Sprintf("\n# VmRSS at the fetch: %d\n", rss)...), 0o644)
		}
	}
}

// fetch GETs url's body.
func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// peakRSS is the runner's peak resident memory so far (VmHWM).
func (p *runnerProc) peakRSS() (int64, error) {
	select {
	case <-p.exited:
		return 0, fmt.Errorf("bench: the runner exited: %v", p.err)
	default:
	}
	return procStatus(p.cmd.Process.Pid, "VmHWM:")
}

// procStatus reads a kB field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: the memory scenario reads /proc (Linux): %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) == 3 && fs[0] == field {
			kb, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: %s in /proc/%d/status: %w", field, pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("bench: no %s in /proc/%d/status", field, pid)
}

// exitErr is why the runner exited on its own, or nil while it runs.
func (p *runnerProc) exitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("bench: the runner exited: %v", p.err)
	default:
		return nil
	}
}

// stop ends the runner with SIGTERM (SIGKILL after a minute) and reports
// whether it had exited on its own before.
func (p *runnerProc) stop() error {
	err := p.exitErr()
	p.stopMu.Do(func() {
		close(p.done)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.wg.Wait()
	})
	return err
}

// tail is the end of the runner's log.
func (p *runnerProc) tail() string { return p.log.String() }

// logTail keeps the last 16 kB written to it.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

// Write keeps the tail of what it is given.
func (l *logTail) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	if over := len(l.buf) - 16<<10; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(b), nil
}

// String is what it kept.
func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
