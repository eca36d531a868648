package bench

// The write-tax scenario (issue 11, item 4; issue 9, item 8): what
// capturing changes costs the writers on the primary. Its workloads:
//
//   - tpcb: pgbench's TPC-B-like script (three updates, a select and an
//     insert per transaction, on four tables);
//   - rows1 and rows100: one table, pgbench_accounts, updated at 1 and at
//     100 rows per commit (a custom pgbench script; each client updates
//     its own runs of 100 accounts, so clients never wait for each other).
//     These run the points recvlogical, trellis-1 and trigger only: one
//     transform, logical or trigger capture, next to the walsender alone.
//
// Each point of each round gets a fresh database loaded by `pgbench -i -s
// Scale` and warmed up by an untimed pgbench run. In it, pgbench (`-n -c Clients -j Threads -T Duration`, every
// transaction logged with -l for the latency percentiles) runs first with
// nothing capturing (checked: no trigger on pgbench_accounts, no
// publication and no slot in the database, no logical slot in use on the
// server), then with the point's capture:
//
//   - recvlogical: a publication on pgbench_accounts and a pgoutput slot,
//     drained live by pg_recvlogical (proto_version=1, publication_names);
//   - trellis-1: trellis-repl (embedded, Run in this process) maintaining a
//     row transform SELECT aid, bid, abalance FROM pgbench_accounts;
//   - trellis-2: the same plus an aggregate SELECT bid, count(*) AS n,
//     sum(abalance) AS total FROM pgbench_accounts GROUP BY bid;
//   - trigger: trellis-1 with capture trigger.
//
// The capture run's TPS and latencies are reported as ratios to the
// no-capture run just before it, in the same database. Once pgbench stops,
// the capture catches up (timed, not part of the tax) and the targets are
// compared with their queries: a difference fails the scenario. For the
// trellis-repl points the CPU of the runner (this process's rusage, from
// pgbench's start until converged) per source transaction and of the
// applier backends (/proc of the sessions named "trellis-repl applier …")
// per applied key are reported too.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// The points of the write-tax scenario.
const (
	// PointNone is pgbench with nothing capturing.
	PointNone = "none"
	// PointRecvLogical is a slot drained live by pg_recvlogical.
	PointRecvLogical = "recvlogical"
	// PointTrellis1 is trellis-repl with one row transform.
	PointTrellis1 = "trellis-1"
	// PointTrellis2 is trellis-repl with the row transform and an
	// aggregate.
	PointTrellis2 = "trellis-2"
	// PointTrigger is trellis-1 with trigger capture.
	PointTrigger = "trigger"
)

// The workloads of the write-tax scenario.
const (
	// WorkloadTPCB is pgbench's built-in TPC-B-like script.
	WorkloadTPCB = "tpcb"
	// WorkloadRows1 updates one pgbench_accounts row per commit.
	WorkloadRows1 = "rows1"
	// WorkloadRows100 updates 100 pgbench_accounts rows per commit.
	WorkloadRows100 = "rows100"
)

// WriteTaxWorkloads are the workloads the write-tax scenario knows, in the
// order they run.
func WriteTaxWorkloads() []string { return []string{WorkloadTPCB, WorkloadRows1, WorkloadRows100} }

// rowsPerCommit is how many source rows a workload's transaction writes
// (0: a mix, as TPC-B's).
func rowsPerCommit(workload string) int {
	switch workload {
	case WorkloadRows1:
		return 1
	case WorkloadRows100:
		return 100
	}
	return 0
}

// pgbenchScript is the custom script of a single-table workload ("" for
// TPC-B's built-in one) at scale (100,000 accounts each) for clients
// clients. Client c updates runs c, c+clients, c+2·clients, … of 100
// consecutive accounts, so no two clients update the same row.
func pgbenchScript(workload string, scale, clients int) string {
	n := rowsPerCommit(workload)
	if n == 0 {
		return ""
	}
	runs := scale * 100_000 / n
	per := max(runs/clients, 1)
	return fmt.Sprintf(`\set run random(0, %d) * %d + :client_id
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid BETWEEN :run * %d + 1 AND :run * %d + %d;
`, per-1, clients, n, n, n)
}

// workloadPoints are the points a workload runs: every configured one for
// TPC-B; for the single-table workloads those with one transform.
func workloadPoints(workload string, points []string) []string {
	if workload == WorkloadTPCB {
		return points
	}
	var out []string
	for _, p := range points {
		if p != PointTrellis2 {
			out = append(out, p)
		}
	}
	return out
}

// writeTaxPointName is a point's name in reports: TPC-B's points keep
// their bare names; the others are prefixed with their workload.
func writeTaxPointName(workload, point string) string {
	if workload == WorkloadTPCB {
		return point
	}
	return workload + " " + point
}

// isNonePoint reports whether a write-tax point name is a no-capture run.
func isNonePoint(name string) bool {
	return name == PointNone || strings.HasSuffix(name, " "+PointNone)
}

// WriteTaxPoints are the capture points the write-tax scenario knows, in
// the order they run.
func WriteTaxPoints() []string {
	return []string{PointRecvLogical, PointTrellis1, PointTrellis2, PointTrigger}
}

// The goals for the write tax: TPS as a fraction of no capture's.
const (
	// GoalLogicalRatio (issue 9) applies to one transform with logical
	// capture at one row per commit.
	GoalLogicalRatio = 0.9
	// GoalTriggerRatio (issue 9) applies to trigger capture at one row per
	// commit.
	GoalTriggerRatio = 0.5
	// GoalTwoTransformsRatio (issue 11) applies to TPC-B with the row
	// transform and the aggregate.
	GoalTwoTransformsRatio = 0.85
)

// WriteTaxConfig configures the write-tax scenario.
type WriteTaxConfig struct {
	// Scale is pgbench's scale factor (default 10: 1M accounts).
	Scale int
	// Clients and Threads are pgbench's -c and -j (default 4 and 2).
	Clients int
	Threads int
	// Duration is each pgbench run's -T, in whole seconds (default 15s).
	Duration time.Duration
	// Points are the capture points (default WriteTaxPoints()); each runs
	// next to its own no-capture run.
	Points []string
	// Workloads are the workloads (default WriteTaxWorkloads()).
	Workloads []string
	// Warmup is an untimed pgbench run right after the load, before the
	// no-capture run (default 5s): the first run on a fresh database is
	// slower (cold caches, hint bits, autovacuum's first pass) and would
	// flatter the capture run after it.
	Warmup time.Duration
}

func (c *WriteTaxConfig) defaults() {
	if c.Scale <= 0 {
		c.Scale = 10
	}
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.Threads <= 0 {
		c.Threads = 2
	}
	if c.Duration <= 0 {
		c.Duration = 15 * time.Second
	}
	if len(c.Points) == 0 {
		c.Points = WriteTaxPoints()
	}
	if len(c.Workloads) == 0 {
		c.Workloads = WriteTaxWorkloads()
	}
	if c.Warmup <= 0 {
		c.Warmup = 5 * time.Second
	}
}

func (c *WriteTaxConfig) check() error {
	for _, p := range c.Points {
		if !slices.Contains(WriteTaxPoints(), p) {
			return fmt.Errorf("bench: write tax: unknown point %q; use %s", p, strings.Join(WriteTaxPoints(), ", "))
		}
	}
	for _, w := range c.Workloads {
		if !slices.Contains(WriteTaxWorkloads(), w) {
			return fmt.Errorf("bench: write tax: unknown workload %q; use %s", w, strings.Join(WriteTaxWorkloads(), ", "))
		}
	}
	return nil
}

// The pgbench transforms.
const (
	accountsTransform = "wt_accounts"
	branchTransform   = "wt_by_branch"
	wtPublication     = "bench_write_tax"
)

// pgbenchShapes are the transforms over pgbench_accounts: the row
// transform, then the aggregate.
func pgbenchShapes(n int) []Shape {
	all := []Shape{
		{Name: accountsTransform, Query: `SELECT aid, bid, abalance FROM pgbench_accounts`, Columns: []string{"aid", "bid", "abalance"}},
		{Name: branchTransform, Query: `SELECT bid, count(*) AS n, sum(abalance) AS total FROM pgbench_accounts GROUP BY bid`,
			Columns: []string{"bid", "n", "total"}},
	}
	return all[:n]
}

// writeTax runs one round of every workload's points.
func (s *suiteRun) writeTax(ctx context.Context, round int) error {
	for _, w := range s.cfg.WriteTax.Workloads {
		for _, p := range workloadPoints(w, s.cfg.WriteTax.Points) {
			if err := s.writeTaxPoint(ctx, round, w, p); err != nil {
				return fmt.Errorf("%s, round %d: %w", writeTaxPointName(w, p), round, err)
			}
		}
	}
	return nil
}

func (s *suiteRun) writeTaxPoint(ctx context.Context, round int, workload, point string) (err error) {
	cfg := s.cfg.WriteTax
	load := pgbenchLoad{Clients: cfg.Clients, Threads: cfg.Threads, Script: pgbenchScript(workload, cfg.Scale, cfg.Clients)}
	name := writeTaxPointName(workload, point)
	labels := map[string]string{"workload": workload}
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	if err := pgbenchInit(ctx, dsn, cfg.Scale); err != nil {
		return err
	}
	if _, err := pgbenchRun(ctx, dsn, load, cfg.Warmup); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	// The no-capture run.
	if err := checkNoCapture(ctx, conn); err != nil {
		return err
	}
	if err := execAll(ctx, conn, "checkpoint", "CHECKPOINT"); err != nil {
		return err
	}
	base, err := pgbenchRun(ctx, dsn, load, cfg.Duration)
	if err != nil {
		return err
	}
	none := Point{Scenario: ScenarioWriteTax, Point: writeTaxPointName(workload, PointNone), Round: round,
		Metrics: pgbenchMetrics(base, workload), Labels: map[string]string{"next_to": name, "workload": workload}}
	s.emit(none)
	s.progressf("write-tax round %d %-19s %8.0f tps, p99 %7.2f ms (next to %s)", round, none.Point, base.TPS, ms(base.P99), name)

	// The capture run.
	m := map[string]float64{}
	var got pgbenchResult
	switch point {
	case PointRecvLogical:
		got, err = s.writeTaxRecvLogical(ctx, dsn, conn, round, load, m)
		labels["verified"] = "drained"
	default:
		got, err = s.writeTaxTrellis(ctx, dsn, conn, round, point, load, m)
		labels["verified"] = "ok"
	}
	if err != nil {
		return err
	}
	maps.Copy(m, pgbenchMetrics(got, workload))
	m["tps_ratio"] = got.TPS / base.TPS
	m["p99_ratio"] = float64(got.P99) / float64(base.P99)
	m["latency_avg_ratio"] = float64(got.LatencyAvg) / float64(base.LatencyAvg)
	p := Point{Scenario: ScenarioWriteTax, Point: name, Round: round, Metrics: m, Labels: labels, Ratio: ratio(got.TPS / base.TPS)}
	s.emit(p)
	cpu := ""
	if v, ok := m["runner_cpu_us_per_txn"]; ok {
		cpu = fmt.Sprintf(", runner %.0f µs/txn", v)
	}
	if v, ok := m["applier_cpu_us_per_key"]; ok {
		cpu += fmt.Sprintf(", appliers %.0f µs/key", v)
	}
	s.progressf("write-tax round %d %-19s %8.0f tps (%.3f× none), p99 %7.2f ms (%.3f×)%s, catch-up %.2fs",
		round, name, got.TPS, m["tps_ratio"], ms(got.P99), m["p99_ratio"], cpu, m["catch_up_seconds"])
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pgbenchMetrics are a pgbench run's figures; for a single-table workload
// also the source rows written per second.
func pgbenchMetrics(r pgbenchResult, workload string) map[string]float64 {
	m := map[string]float64{"tps": r.TPS, "transactions": float64(r.Transactions),
		"latency_avg_ms": ms(r.LatencyAvg), "latency_p50_ms": ms(r.P50), "latency_p99_ms": ms(r.P99), "latency_max_ms": ms(r.Max)}
	if n := rowsPerCommit(workload); n > 0 {
		m["rows_per_second"] = r.TPS * float64(n)
	}
	return m
}

// writeTaxTrellis sets up an embedded instance for point, runs pgbench
// with it live, waits for convergence and checks the targets. It fills m
// with the catch-up time and the CPU figures.
func (s *suiteRun) writeTaxTrellis(ctx context.Context, dsn string, conn *pgx.Conn, round int, point string, load pgbenchLoad, m map[string]float64) (pgbenchResult, error) {
	var r pgbenchResult
	capture, n := trellis.CaptureLogical, 1
	switch point {
	case PointTrellis2:
		n = 2
	case PointTrigger:
		capture = trellis.CaptureTrigger
	}
	schema := fmt.Sprintf("trellis_wt_%s_%d", strings.ReplaceAll(point, "-", "_"), round)
	in, err := openInstance(ctx, s.ec, dsn, schema, capture, pgbenchShapes(n), true)
	if err != nil {
		return r, err
	}
	defer in.close()
	if err := execAll(ctx, conn, "checkpoint", "CHECKPOINT"); err != nil {
		return r, err
	}
	keys0, err := in.keysApplied(ctx)
	if err != nil {
		return r, err
	}
	const appliers = "trellis-repl applier"
	bcpu, err := startBackendCPU(ctx, conn, appliers)
	if err != nil {
		return r, err
	}
	cpu0 := selfCPU()
	r, err = pgbenchRun(ctx, dsn, load, s.cfg.WriteTax.Duration)
	if err != nil {
		return r, errors.Join(err, in.run.cause())
	}
	start := time.Now()
	if err := in.run.converge(ctx, s.ec); err != nil {
		return r, fmt.Errorf("bench: converge after pgbench: %w", err)
	}
	m["catch_up_seconds"] = time.Since(start).Seconds()
	runner := selfCPU() - cpu0
	backends, visible, err := bcpu.since(ctx, conn, appliers)
	if err != nil {
		return r, err
	}
	keys1, err := in.keysApplied(ctx)
	if err != nil {
		return r, err
	}
	keys := keys1 - keys0
	m["keys_applied"] = float64(keys)
	if r.Transactions > 0 {
		m["runner_cpu_us_per_txn"] = float64(runner.Microseconds()) / float64(r.Transactions)
	}
	if visible {
		m["applier_cpu_us_total"] = float64(backends.Microseconds())
		if r.Transactions > 0 {
			m["applier_cpu_us_per_txn"] = float64(backends.Microseconds()) / float64(r.Transactions)
		}
		if keys > 0 {
			m["applier_cpu_us_per_key"] = float64(backends.Microseconds()) / float64(keys)
		}
	}
	if _, err := in.verifyAll(ctx, s.ec, conn); err != nil {
		return r, err
	}
	return r, in.close()
}

// writeTaxRecvLogical runs pgbench while pg_recvlogical drains a slot with
// a publication on pgbench_accounts, then waits until the slot confirmed
// everything written. It fills m with the catch-up time and
// pg_recvlogical's CPU per transaction.
func (s *suiteRun) writeTaxRecvLogical(ctx context.Context, dsn string, conn *pgx.Conn, round int, load pgbenchLoad, m map[string]float64) (pgbenchResult, error) {
	var r pgbenchResult
	bin, err := exec.LookPath("pg_recvlogical")
	if err != nil {
		return r, fmt.Errorf("bench: pg_recvlogical is not on PATH (install postgresql-client): %w", err)
	}
	var dboid uint32
	if err := conn.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dboid); err != nil {
		return r, fmt.Errorf("bench: database oid: %w", err)
	}
	slot := fmt.Sprintf("bench_wt_%d_%d", dboid, round)
	if err := execAll(ctx, conn, "create the publication",
		"CREATE PUBLICATION "+pgx.Identifier{wtPublication}.Sanitize()+" FOR TABLE public.pgbench_accounts"); err != nil {
		return r, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		return r, fmt.Errorf("bench: create slot: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "-d", dsn, "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names="+wtPublication, "-f", "/dev/null", "-F", "0", "-s", "1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("bench: start pg_recvlogical: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return nil
	}
	defer stop()
	if err := waitSlotActive(ctx, conn, slot, exited); err != nil {
		return r, fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	if err := execAll(ctx, conn, "checkpoint", "CHECKPOINT"); err != nil {
		return r, err
	}
	cpu0, _ := procCPU(cmd.Process.Pid)
	r, err = pgbenchRun(ctx, dsn, load, s.cfg.WriteTax.Duration)
	if err != nil {
		return r, err
	}
	end, err := currentLSN(ctx, conn)
	if err != nil {
		return r, err
	}
	start := time.Now()
	if err := waitSlotConfirmed(ctx, conn, slot, end, s.cfg.PhaseTimeout, exited); err != nil {
		return r, fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	m["catch_up_seconds"] = time.Since(start).Seconds()
	if cpu1, ok := procCPU(cmd.Process.Pid); ok && r.Transactions > 0 {
		m["recvlogical_cpu_us_per_txn"] = float64((cpu1 - cpu0).Microseconds()) / float64(r.Transactions)
	}
	return r, stop()
}

// waitSlotActive waits until a walsender streams slot.
func waitSlotActive(ctx context.Context, conn *pgx.Conn, slot string, exited <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil {
			return fmt.Errorf("bench: slot %s: %w", slot, err)
		}
		if active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: pg_recvlogical did not start streaming slot %s within 30s", slot)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("bench: pg_recvlogical exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitSlotConfirmed waits until slot's confirmed_flush_lsn reaches end.
func waitSlotConfirmed(ctx context.Context, conn *pgx.Conn, slot, end string, timeout time.Duration, exited <-chan error) error {
	deadline := time.Now().Add(timeout)
	for {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`,
			slot, end).Scan(&done); err != nil {
			return fmt.Errorf("bench: slot %s: %w", slot, err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: pg_recvlogical did not confirm %s within %s", end, timeout)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("bench: pg_recvlogical exited before confirming %s: %v", end, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkNoCapture makes sure nothing captures pgbench_accounts' changes: no
// user trigger on it, no publication or slot in the database, and no
// logical slot in use anywhere on the server (another point's walsender
// can take a moment to exit, so that is waited for, up to 10 s).
func checkNoCapture(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var triggers, pubs, slots, decoding int
		err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.pgbench_accounts'::regclass AND NOT tgisinternal),
			(SELECT count(*) FROM pg_publication),
			(SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
			(SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical' AND active)`).Scan(&triggers, &pubs, &slots, &decoding)
		if err != nil {
			return fmt.Errorf("bench: inspect capture objects: %w", err)
		}
		if triggers+pubs+slots+decoding == 0 {
			return nil
		}
		if triggers+pubs+slots != 0 || time.Now().After(deadline) {
			return fmt.Errorf("bench: the no-capture run would capture: %d trigger(s) on pgbench_accounts, %d publication(s) and %d slot(s) in the database, %d logical slot(s) in use on the server",
				triggers, pubs, slots, decoding)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// percentile is the q-quantile of ds (nearest rank); ds is sorted.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
