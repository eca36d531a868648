package main

// trellis-repl bench: the benchmark suite users tune with (bench.RunSuite).
// One JSON line per measured point goes to stdout (or --json-out FILE),
// progress to stderr, and at the end a Markdown summary (to stdout when
// the JSON lines go to a file, else to stderr; --markdown FILE as well)
// and, with --plot DIR, one PNG chart per scenario.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/bench"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

const benchUsage = `usage: trellis-repl bench [--quick] [--dsn URL] [--scenarios LIST] [--rounds N]
                          [--json-out FILE] [--markdown FILE] [--plot DIR] [size flags]
scenarios: write-tax, latency, keep-up, catch-up, build, refresh, tpch, many, memory (default: all).
--dsn is a superuser URL of a server with wal_level=logical; without it each run
starts a throwaway PostgreSQL. --quick runs every scenario at small sizes (its
timings mean little). See docs/performance.md.
`

// listFlag is a comma-separated list of strings.
type listFlag struct{ v *[]string }

// String is the list as given.
func (f listFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.Join(*f.v, ",")
}

// intListFlag is a comma-separated list of integers (--tpch-queries 1,6).
type intListFlag struct{ v *[]int }

// String is the list as given.
func (f intListFlag) String() string {
	if f.v == nil {
		return ""
	}
	parts := make([]string, len(*f.v))
	for i, n := range *f.v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// Set replaces the list with the integers of s.
func (f intListFlag) Set(s string) error {
	*f.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(strings.ToLower(p), "q"))
		if err != nil {
			return fmt.Errorf("%q is not a query number", p)
		}
		*f.v = append(*f.v, n)
	}
	return nil
}

// Set replaces the list with the items of s.
func (f listFlag) Set(s string) error {
	*f.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*f.v = append(*f.v, p)
		}
	}
	return nil
}

// fractionsFlag is a comma-separated list of percentages.
type fractionsFlag struct{ v *[]float64 }

// String is the list as percentages.
func (f fractionsFlag) String() string {
	if f.v == nil {
		return ""
	}
	var out []string
	for _, x := range *f.v {
		out = append(out, strconv.FormatFloat(x*100, 'g', -1, 64))
	}
	return strings.Join(out, ",")
}

// Set replaces the list with the percentages of s, as fractions.
func (f fractionsFlag) Set(s string) error {
	*f.v = nil
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSuffix(strings.TrimSpace(p), "%")
		if p == "" {
			continue
		}
		x, err := strconv.ParseFloat(p, 64)
		if err != nil || x <= 0 || x > 100 {
			return fmt.Errorf("%q is not a percentage in (0, 100]", p)
		}
		*f.v = append(*f.v, x/100)
	}
	return nil
}

// wantsQuick says whether args ask for --quick, before the flags are
// registered: the quick sizes are the flags' defaults then.
func wantsQuick(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		switch a {
		case "-quick", "--quick", "-quick=true", "--quick=true":
			return true
		}
	}
	return false
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := wantsQuick(args)
	cfg := bench.DefaultSuite()
	if quick {
		cfg = bench.QuickSuite()
	}
	fs.Bool("quick", false, "every scenario at small sizes, one round (sizes below then default to the quick ones)")
	dsn := fs.String("dsn", "", "superuser URL of a server with wal_level=logical (default: a throwaway server)")
	fs.Var(listFlag{&cfg.Scenarios}, "scenarios", "comma-separated scenarios (default all: "+strings.Join(bench.Scenarios(), ",")+")")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds of every scenario; the summary reports medians")
	jsonOut := fs.String("json-out", "", "write the JSON lines to this file instead of stdout")
	mdOut := fs.String("markdown", "", "also write the Markdown summary to this file")
	plotDir := fs.String("plot", "", "write one PNG chart per scenario into this directory")
	serverLog := fs.String("server-log", "", "throwaway server only: copy its log to this file at the end")
	sharedBuffers := fs.String("shared-buffers", "1GB", "throwaway server only: its shared_buffers (PostgreSQL's default, 128MB, is smaller than the join workload's tables)")
	pgss := fs.Bool("pg-stat-statements", false, "throwaway server only: load pg_stat_statements, so that the many scenario counts idle statements, not only transactions (it costs writers a little)")
	verbose := fs.Bool("v", false, "log the library's messages to stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the embedded runners) to this file")
	fs.DurationVar(&cfg.ProgressInterval, "progress-interval", cfg.ProgressInterval, "trellis ProgressInterval (how late convergence is noticed)")
	fs.DurationVar(&cfg.PhaseTimeout, "phase-timeout", cfg.PhaseTimeout, "longest wait for convergence")
	// As run's flags, with run's defaults: 0s means none.
	coalesce := fs.Duration("coalesce-window", trellis.DefaultCoalesceWindow, "every runner's --coalesce-window (0s: none)")
	fs.IntVar(&cfg.Tuning.CoalesceKeys, "coalesce-keys", 1000, "every runner's --coalesce-keys")
	syncEvery := fs.Duration("store-sync-interval", trellis.DefaultStoreSyncInterval, "every runner's --store-sync-interval (0s: every group commit)")
	fs.DurationVar(&cfg.Tuning.TriggerPollInterval, "trigger-poll-interval", trellis.DefaultTriggerPollInterval, "every trigger-capture runner's --trigger-poll-interval")

	wt := &cfg.WriteTax
	fs.IntVar(&wt.Scale, "scale", wt.Scale, "write-tax: pgbench scale factor")
	fs.IntVar(&wt.Clients, "clients", wt.Clients, "write-tax: pgbench -c")
	fs.IntVar(&wt.Threads, "threads", wt.Threads, "write-tax: pgbench -j")
	fs.DurationVar(&wt.Duration, "duration", wt.Duration, "write-tax: each pgbench run's -T (whole seconds)")
	fs.DurationVar(&wt.Warmup, "warmup", wt.Warmup, "write-tax: untimed pgbench run after the load, before the no-capture run")
	fs.Var(listFlag{&wt.Points}, "capture", "write-tax: capture points, each next to its own no-capture run ("+strings.Join(bench.WriteTaxPoints(), ",")+")")
	fs.Var(listFlag{&wt.Workloads}, "workloads", "write-tax: workloads ("+strings.Join(bench.WriteTaxWorkloads(), ",")+"; rows1 and rows100 run the one-transform points only)")
	lt := &cfg.Latency
	fs.IntVar(&lt.Writers, "latency-writers", lt.Writers, "latency: writer connections")
	fs.DurationVar(&lt.Probe, "latency-probe", lt.Probe, "latency: full-speed run that measures the sustainable rate")
	fs.DurationVar(&lt.Duration, "latency-duration", lt.Duration, "latency: each paced point")
	fs.Var(fractionsFlag{&lt.Fractions}, "latency-load", "latency: comma-separated percentages of the sustainable rate")
	ku := &cfg.KeepUp
	fs.IntVar(&ku.Scale, "keepup-scale", ku.Scale, "keep-up: pgbench scale factor")
	fs.DurationVar(&ku.Duration, "keepup-duration", ku.Duration, "keep-up: how long pgbench writes at full speed")
	cu := &cfg.CatchUp
	fs.IntVar(&cu.Rows, "catchup-rows", cu.Rows, "catch-up: rows inserted then updated at 1,000 rows per commit")
	fs.IntVar(&cu.Rows1, "catchup-rows1", cu.Rows1, "catch-up: rows inserted then updated at 1 row per commit")
	fs.Var(listFlag{&cu.Shapes}, "catchup-shapes", "catch-up: shapes (row, agg, agg1k)")
	fs.IntVar(&cu.RederiveKeys, "catchup-rederive", cu.RederiveKeys, "catch-up: keys of the re-derive phase with the hand-written comparison (0: none)")
	fs.Var(listFlag{&cu.Modes}, "catchup-modes", "catch-up: catchup and/or live")
	fs.Var(listFlag{&cu.Captures}, "catchup-capture", "catch-up: logical and/or trigger (the join workload: logical only)")
	fs.IntVar(&cu.JoinFacts, "catchup-join-facts", cu.JoinFacts, "catch-up: also the join workload with this many facts (0: none)")
	bu := &cfg.Build
	fs.IntVar(&bu.Rows, "build-rows", bu.Rows, "build: source rows")
	fs.IntVar(&bu.Groups, "build-groups", bu.Groups, "build: the aggregate's groups")
	rf := &cfg.Refresh
	fs.IntVar(&rf.Rows, "refresh-rows", rf.Rows, "refresh: source rows")
	fs.IntVar(&rf.Groups, "refresh-groups", rf.Groups, "refresh: the aggregate's groups")
	fs.IntVar(&rf.Changes, "refresh-changes", rf.Changes, "refresh: single-row changes (and refreshes) timed")
	tp := &cfg.TPCH
	fs.Float64Var(&tp.SF, "tpch-sf", tp.SF, "tpch: TPC-H scale factor")
	fs.Var(intListFlag{&tp.Queries}, "tpch-queries", "tpch: query numbers kept, in order (1,6,18; default all 22)")
	fs.IntVar(&tp.Rounds, "tpch-rounds", tp.Rounds, "tpch: refresh rounds (RF1 + RF2) timed per query")
	ma := &cfg.Many
	fs.IntVar(&ma.Tables, "many-tables", ma.Tables, "many: source tables of the large instance, ten transforms each")
	fs.IntVar(&ma.Rows, "many-rows", ma.Rows, "many: rows of each source table")
	fs.DurationVar(&ma.Workload, "many-workload", ma.Workload, "many: how long the light workload writes")
	fs.Float64Var(&ma.Rate, "many-rate", ma.Rate, "many: the light workload's commits per second")
	fs.DurationVar(&ma.Idle, "many-idle", ma.Idle, "many: the idle window both instances are measured in")
	me := &cfg.Memory
	fs.IntVar(&me.Rows, "memory-rows", me.Rows, "memory: rows of the huge transactions and tables")
	fs.IntVar(&me.FailEvery, "memory-fail-every", me.FailEvery, "memory: one row in this many fails the faulty transform")
	fs.IntVar(&me.Fuse, "memory-fuse", me.Fuse, "memory: the runners' --quarantine-after (the fault insert trips it unless it is above rows/fail-every)")
	fs.Var(listFlag{&me.Paths}, "memory-paths", "memory: paths ("+strings.Join(bench.MemoryPaths(), ",")+"; default all but healthy)")
	fs.Var(listFlag{&me.Captures}, "memory-capture", "memory: logical and/or trigger")
	fs.IntVar(&me.BuildTransforms, "memory-build-transforms", me.BuildTransforms, "memory: transforms built at once")
	fs.StringVar(&me.ProfileDir, "memory-profile-dir", "", "memory: write each runner's log and heap profiles at its peaks into this directory")
	fs.StringVar(&me.Runner, "memory-runner", "", "memory: the trellis-repl binary run as the runner (default: this one; another build's, to compare)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"bench takes no arguments"}
	}
	if *coalesce < 0 || *syncEvery < 0 || cfg.Tuning.TriggerPollInterval <= 0 || cfg.Tuning.CoalesceKeys < 1 {
		return usageError{"--coalesce-window and --store-sync-interval must not be negative, --trigger-poll-interval must be positive, --coalesce-keys at least 1"}
	}
	cfg.Tuning.CoalesceWindow, cfg.Tuning.StoreSyncInterval = orNone(*coalesce), orNone(*syncEvery)
	for _, sc := range cfg.Scenarios {
		if !slicesContains(bench.Scenarios(), sc) {
			return usageError{fmt.Sprintf("--scenarios: unknown scenario %q; use %s", sc, strings.Join(bench.Scenarios(), ", "))}
		}
	}
	for _, p := range wt.Points {
		if !slicesContains(bench.WriteTaxPoints(), p) {
			return usageError{fmt.Sprintf("--capture: unknown point %q; use %s", p, strings.Join(bench.WriteTaxPoints(), ", "))}
		}
	}
	for _, c := range cu.Captures {
		if c != trellis.CaptureLogical && c != trellis.CaptureTrigger {
			return usageError{fmt.Sprintf("--catchup-capture: unknown capture %q; use %s or %s", c, trellis.CaptureLogical, trellis.CaptureTrigger)}
		}
	}
	for _, c := range me.Captures {
		if c != trellis.CaptureLogical && c != trellis.CaptureTrigger {
			return usageError{fmt.Sprintf("--memory-capture: unknown capture %q; use %s or %s", c, trellis.CaptureLogical, trellis.CaptureTrigger)}
		}
	}
	for _, p := range me.Paths {
		if !slicesContains(bench.MemoryPaths(), p) {
			return usageError{fmt.Sprintf("--memory-paths: unknown path %q; use %s", p, strings.Join(bench.MemoryPaths(), ", "))}
		}
	}
	if ma.Runner == "" {
		// The many scenario runs this binary's `run`, `apply` and
		// `status` as child processes.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this executable for the many scenario's runner: %w", err)
		}
		ma.Runner = exe
	}
	if me.Runner == "" {
		// The memory scenario runs this binary's `run` as a child process.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this executable for the memory scenario's runner: %w", err)
		}
		me.Runner = exe
	}
	if me.ProfileDir != "" {
		if err := os.MkdirAll(me.ProfileDir, 0o755); err != nil {
			return &trellis.Error{Code: trellis.CodeNotFound, Msg: fmt.Sprintf("cannot create --memory-profile-dir %s: %v", me.ProfileDir, err)}
		}
	}
	for _, w := range wt.Workloads {
		if !slicesContains(bench.WriteTaxWorkloads(), w) {
			return usageError{fmt.Sprintf("--workloads: unknown workload %q; use %s", w, strings.Join(bench.WriteTaxWorkloads(), ", "))}
		}
	}
	if *dsn != "" && (*serverLog != "" || *pgss) {
		return usageError{"--server-log and --pg-stat-statements need the throwaway server (no --dsn)"}
	}
	if !memorySize.MatchString(*sharedBuffers) {
		return usageError{fmt.Sprintf("--shared-buffers %q is not a size; give a number with kB, MB or GB (e.g. 1GB)", *sharedBuffers)}
	}
	cfg.Progress = stderr
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return &trellis.Error{Code: trellis.CodeNotFound, Msg: fmt.Sprintf("cannot create --cpuprofile %s: %v", *cpuProfile, err)}
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	var lines io.Writer = stdout
	summaryTo := stderr
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			return &trellis.Error{Code: trellis.CodeNotFound, Msg: fmt.Sprintf("cannot create --json-out %s: %v", *jsonOut, err)}
		}
		defer f.Close()
		lines, summaryTo = f, stdout
	}
	enc := json.NewEncoder(lines)
	cfg.Emit = func(p bench.Point) error { return enc.Encode(p) }

	adminDSN, server := *dsn, "external (--dsn)"
	if adminDSN == "" {
		settings := map[string]string{"max_wal_size": "'4GB'", "shared_buffers": "'" + *sharedBuffers + "'"}
		if *pgss {
			settings["shared_preload_libraries"] = "'pg_stat_statements'"
		}
		srv, err := pgserver.Start(ctx, pgserver.Options{ReapOnExit: true, Settings: settings})
		if err != nil {
			return &trellis.Error{Code: trellis.CodeUnavailable, Msg: fmt.Sprintf("cannot start a throwaway PostgreSQL (give --dsn instead): %v", err)}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := srv.Stop(sctx); err != nil {
				fmt.Fprintln(stderr, "bench: stop PostgreSQL:", err)
			}
		}()
		if *serverLog != "" {
			defer func() { // before Stop, deferred earlier, removes it
				if err := copyFile(*serverLog, srv.LogPath()); err != nil {
					fmt.Fprintln(stderr, "bench: --server-log:", err)
				}
			}()
		}
		adminDSN, server = srv.DSN("postgres"), "throwaway pgserver (fsync=off, shared_buffers="+*sharedBuffers+", same machine)"
	}

	settings := benchSettings(ctx)
	start, loadBefore := time.Now(), loadAverage()
	rep, runErr := bench.RunSuite(ctx, cfg, bench.ServerDatabases{AdminDSN: adminDSN})
	// Other work on the machine skews every figure; the load averages
	// before and after the run show whether there was any.
	settings["loadavg_before"], settings["loadavg_after"] = loadBefore, loadAverage()
	settings["server"] = server
	settings["quick"] = quick
	settings["rounds"] = cfg.Rounds
	settings["seconds"] = fmt.Sprintf("%.0f", time.Since(start).Seconds())
	settings["sizes"] = benchSizes(cfg)
	rep.Settings = settings

	var errs []error
	errs = append(errs, runErr)
	var md bytes.Buffer
	if err := bench.WriteMarkdown(&md, rep); err != nil {
		errs = append(errs, err)
	}
	fmt.Fprintf(summaryTo, "\n%s", md.String())
	if *mdOut != "" {
		if err := os.WriteFile(*mdOut, md.Bytes(), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("bench: --markdown: %w", err))
		}
	}
	if *plotDir != "" {
		files, err := bench.WritePlots(*plotDir, rep)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range files {
			fmt.Fprintln(stderr, "bench: wrote", f)
		}
	}
	return errors.Join(errs...)
}

// memorySize is a PostgreSQL memory setting: a number with an optional
// unit (it goes into postgresql.conf quoted, so nothing else may).
var memorySize = regexp.MustCompile(`^[0-9]+(kB|MB|GB|TB)?$`)

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// benchSizes describes the sizes a run used, for the summary.
func benchSizes(c bench.SuiteConfig) string {
	return fmt.Sprintf("write-tax scale %d, %d clients/%d threads, %s runs, points %s, workloads %s; latency %d writers, probe %s, %s per point; "+
		"keep-up scale %d for %s; catch-up %d rows at 1000/commit and %d at 1/commit, shapes %s; build %d rows/%d groups; refresh %d rows/%d groups, %d changes; tpch SF %g, queries %v, %d rounds each; "+
		"many %d tables of %d rows, %.0f commits/s for %s, idle %s; memory %d rows (one in %d failing), paths %s, captures %s, %d transforms built",
		c.WriteTax.Scale, c.WriteTax.Clients, c.WriteTax.Threads, c.WriteTax.Duration, strings.Join(c.WriteTax.Points, ","), strings.Join(c.WriteTax.Workloads, ","),
		c.Latency.Writers, c.Latency.Probe, c.Latency.Duration, c.KeepUp.Scale, c.KeepUp.Duration,
		c.CatchUp.Rows, c.CatchUp.Rows1, strings.Join(c.CatchUp.Shapes, ","), c.Build.Rows, c.Build.Groups,
		c.Refresh.Rows, c.Refresh.Groups, c.Refresh.Changes, c.TPCH.SF, c.TPCH.Queries, c.TPCH.Rounds,
		c.Many.Tables, c.Many.Rows, c.Many.Rate, c.Many.Workload, c.Many.Idle, c.Memory.Rows, c.Memory.FailEvery, strings.Join(c.Memory.Paths, ","), strings.Join(c.Memory.Captures, ","), c.Memory.BuildTransforms)
}

// benchSettings records which code was measured and where: figures are
// only comparable for one revision on one machine. `go run` stamps no
// VCS information, so git is asked (read-only) when it is at hand.
func benchSettings(ctx context.Context) map[string]any {
	out := map[string]any{"cpus": runtime.NumCPU(), "go": runtime.Version(), "started_at": time.Now().UTC().Format(time.RFC3339)}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision", "vcs.modified":
				out[s.Key] = s.Value
			}
		}
	}
	if _, ok := out["vcs.revision"]; !ok {
		if rev, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
			out["vcs.revision"] = strings.TrimSpace(string(rev))
			if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
				out["vcs.modified"] = strconv.FormatBool(len(bytes.TrimSpace(st)) > 0)
			}
		}
	}
	return out
}

// loadAverage is the first three fields of /proc/loadavg ("" when not
// available).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// copyFile copies the file at src to dst.
func copyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
