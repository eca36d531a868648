// Command trellis-bench measures trellis-repl's throughput end to end
// against pg_recvlogical draining the same WAL, in one run on one server,
// and prints the figures as a table (or JSON with -json). The join
// workload (-join-facts) also times single-row dimension changes against
// REFRESH MATERIALIZED VIEW of the same query. The write-tax scenario
// (-scenarios write-tax) measures what capture costs the writers: rows/s
// and commit latency with no capture, logical capture and trigger
// capture, as ratios to no capture, and the trigger path end to end.
//
// Machines are shared and noisy: compare the ratios measured in one run,
// not absolute rates across runs.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trellis-repl/trellis-repl/bench"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trellis-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		dsn       = flag.String("dsn", "", "superuser DSN of a server with wal_level=logical (default: start a throwaway server)")
		rows      = flag.Int("rows", 1_000_000, "rows inserted (then updated) by workloads with more than one row per commit")
		rows1     = flag.Int("rows1", 100_000, "rows inserted (then updated) by the 1-row-per-commit workload")
		perCommit = flag.String("per-commit", "1000,1", "comma-separated rows per commit, one single-table (src) workload each (empty: none)")
		rederive  = flag.Int("rederive", -1, "keys changed in one transaction by the re-derive phase (-1: rows/10; 0: skip)")
		shapes    = flag.String("shapes", "row,agg,agg1k", "transform shapes to measure: row, agg (~100k groups), agg1k (1,000 groups)")
		shapes1   = flag.String("shapes1", "row,agg", "transform shapes for the 1-row-per-commit workload")
		modes     = flag.String("modes", "live,catchup", "how to measure each shape: live (write while Run runs), catchup (write, then start Run)")
		baseline  = flag.Bool("baseline", true, "measure pg_recvlogical draining the same workload")
		repeats   = flag.Int("baseline-repeats", 2, "drain each phase this many times (one slot each) and keep the fastest")
		recv      = flag.String("pg-recvlogical", "", "pg_recvlogical binary (default: on PATH)")
		verify    = flag.Bool("verify", true, "compare the target (and the hand-written baseline's copy) with its query after every phase (not timed)")
		quick     = flag.Bool("quick", false, "smoke run: 50,000 rows (5,000 at 1 row per commit)")
		jsonOut   = flag.Bool("json", false, "print JSON instead of a table")
		jsonFile  = flag.String("json-out", "", "also write the JSON report to this file")
		progress  = flag.Duration("progress-interval", 50*time.Millisecond, "trellis ProgressInterval (bounds how late convergence is noticed)")
		batch     = flag.Int("batch-size", 0, "trellis BatchSize (0: library default)")
		timeout   = flag.Duration("phase-timeout", 10*time.Minute, "longest wait for one phase to converge")
		verbose   = flag.Bool("v", false, "log the library's messages to stderr")
		cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of this process (the engine's Go side) to this file")

		joinFacts  = flag.Int("join-facts", 1_000_000, "join workload: fact rows inserted (then updated); 0 skips the join workload")
		joinDim1   = flag.Int("join-dim1", 1_000, "join workload: rows of dim1 (each referenced by join-facts/join-dim1 facts)")
		joinDim2   = flag.Int("join-dim2", 100, "join workload: rows of dim2")
		joinGroups = flag.Int("join-groups", 100, "join workload: distinct dim1.grp values, the joinagg shape's groups (at most join-dim1)")
		joinPer    = flag.Int("join-per-commit", 1000, "join workload: fact rows per commit")
		joinShapes = flag.String("join-shapes", "joinrow,joinagg", "join workload shapes: joinrow (fact ⋈ dim1 ⋈ dim2), joinagg (the same join grouped by dim1.grp)")
		explain    = flag.Duration("auto-explain", 0, "throwaway server only: log EXPLAIN (ANALYZE, BUFFERS) of every statement slower than this (auto_explain; slows every statement, so figures are not comparable); see -server-log")
		serverLog  = flag.String("server-log", "", "throwaway server only: copy the server's log to this file when the run ends")
		dimChanges = flag.Int("dim-changes", 5, "join workload: single-row dim1 changes timed to convergence, and REFRESH MATERIALIZED VIEW timed as often (live mode; 0: skip)")

		scenarios  = flag.String("scenarios", "src,join,write-tax", "scenarios to run: src (the -per-commit workloads), join (-join-facts), write-tax")
		taxWriters = flag.Int("tax-writers", 4, "write tax: concurrent writer connections")
		taxPer     = flag.String("tax-per-commit", "1,100", "write tax: comma-separated rows per commit")
		taxDur     = flag.Duration("tax-duration", 10*time.Second, "write tax: how long the writers write at each point")
		taxRounds  = flag.Int("tax-rounds", 2, "write tax: rounds (no capture, logical, trigger alternating); ratios are the median over rounds")
		taxRows    = flag.Int("tax-table-rows", 50_000, "write tax: rows in the source table before the writers start (what the updates hit)")
		taxIdle    = flag.Bool("tax-idle", false, "write tax: also measure logical-idle and trigger-idle (capture installed, Run stopped during the writes: capture's own cost without the engine's)")
		taxE2E     = flag.String("tax-e2e", "1:20000,1000:200000", "write tax: end-to-end sizes as rows-per-commit:rows, comma-separated (empty: skip)")
	)
	flag.Parse()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *quick {
		*rows, *rows1 = 50_000, 5_000
		*joinFacts = 50_000
		*taxDur, *taxRows, *taxE2E = 2*time.Second, 10_000, "1:4000,1000:50000"
	}
	want := map[string]bool{}
	for _, s := range splitList(*scenarios) {
		switch s {
		case "src", "join", "write-tax":
			want[s] = true
		default:
			return fmt.Errorf("-scenarios: unknown scenario %q; use src, join, write-tax", s)
		}
	}
	if !want["src"] {
		*perCommit = ""
	}
	if !want["join"] {
		*joinFacts = 0
	}
	if *rederive < 0 {
		*rederive = *rows / 10
	}

	cfg := bench.Config{Baseline: *baseline, BaselineRepeats: *repeats, RecvLogical: *recv, Verify: *verify,
		ProgressInterval: *progress, BatchSize: *batch, PhaseTimeout: *timeout, Progress: os.Stderr}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cfg.Modes = splitList(*modes)
	var err error
	if cfg.Shapes, err = parseShapes(*shapes); err != nil {
		return err
	}
	one, err := parseShapes(*shapes1)
	if err != nil {
		return err
	}
	for _, s := range splitList(*perCommit) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-per-commit: %q is not a positive number", s)
		}
		wl := bench.Workload{Rows: *rows, PerCommit: n, RederiveKeys: *rederive}
		if n == 1 {
			// The re-derive phase needs the large source; one per run.
			wl = bench.Workload{Rows: *rows1, PerCommit: 1, Shapes: one}
		}
		cfg.Workloads = append(cfg.Workloads, wl)
	}
	if *joinFacts > 0 {
		js, err := parseJoinShapes(*joinShapes)
		if err != nil {
			return err
		}
		if *joinPer <= 0 {
			return fmt.Errorf("-join-per-commit: %d is not a positive number", *joinPer)
		}
		cfg.Workloads = append(cfg.Workloads, bench.Workload{Rows: *joinFacts, PerCommit: *joinPer, Shapes: js,
			Join: &bench.JoinSizes{Dim1Rows: *joinDim1, Dim2Rows: *joinDim2, Groups: *joinGroups, DimChanges: *dimChanges}})
	}
	var taxCfg *bench.WriteTaxConfig
	if want["write-tax"] {
		tc := bench.WriteTaxConfig{Writers: *taxWriters, Duration: *taxDur, Rounds: *taxRounds, TableRows: *taxRows,
			EndToEnd: []bench.EndToEndSize{}, Idle: *taxIdle, ProgressInterval: *progress, BatchSize: *batch, PhaseTimeout: *timeout,
			Logger: cfg.Logger, Progress: os.Stderr}
		for _, s := range splitList(*taxPer) {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return fmt.Errorf("-tax-per-commit: %q is not a positive number", s)
			}
			tc.PerCommit = append(tc.PerCommit, n)
		}
		if len(tc.PerCommit) == 0 {
			return errors.New("-tax-per-commit: no size")
		}
		for _, s := range splitList(*taxE2E) {
			k, n, ok := strings.Cut(s, ":")
			pk, err1 := strconv.Atoi(k)
			rows, err2 := strconv.Atoi(n)
			if !ok || err1 != nil || err2 != nil || pk <= 0 || rows <= 0 {
				return fmt.Errorf("-tax-e2e: %q is not rows-per-commit:rows", s)
			}
			tc.EndToEnd = append(tc.EndToEnd, bench.EndToEndSize{PerCommit: pk, Rows: rows})
		}
		taxCfg = &tc
	}
	if len(cfg.Workloads) == 0 && taxCfg == nil {
		return errors.New("no workload: give -per-commit, -join-facts or -scenarios write-tax")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	adminDSN, server := *dsn, "external (-dsn)"
	if adminDSN != "" && (*explain > 0 || *serverLog != "") {
		return errors.New("-auto-explain and -server-log need the throwaway server (no -dsn)")
	}
	if adminDSN == "" {
		serverSettings := map[string]string{"max_wal_size": "'4GB'"}
		if *explain > 0 {
			for k, v := range map[string]string{"shared_preload_libraries": "'auto_explain'",
				"auto_explain.log_min_duration": fmt.Sprintf("'%dms'", explain.Milliseconds()),
				"auto_explain.log_analyze":      "on", "auto_explain.log_buffers": "on", "auto_explain.log_timing": "on"} {
				serverSettings[k] = v
			}
		}
		srv, err := pgserver.Start(ctx, pgserver.Options{ReapOnExit: true, Settings: serverSettings})
		if err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := srv.Stop(sctx); err != nil {
				fmt.Fprintln(os.Stderr, "trellis-bench: stop PostgreSQL:", err)
			}
		}()
		if *serverLog != "" {
			// Before Stop (deferred earlier, so run later) removes it.
			defer func() {
				if err := copyFile(*serverLog, srv.LogPath()); err != nil {
					fmt.Fprintln(os.Stderr, "trellis-bench: -server-log:", err)
				}
			}()
		}
		adminDSN, server = srv.DSN("postgres"), "throwaway pgserver (fsync=off)"
	}

	settings := buildSettings(ctx)
	for k, v := range map[string]any{"server": server, "rows": *rows, "rows_1_per_commit": *rows1, "per_commit": *perCommit,
		"rederive_keys": *rederive, "shapes": *shapes, "shapes_1_per_commit": *shapes1, "modes": *modes, "progress_interval": progress.String(), "batch_size": *batch,
		"join_facts": *joinFacts, "join_dim1": *joinDim1, "join_dim2": *joinDim2, "join_groups": *joinGroups,
		"join_per_commit": *joinPer, "join_shapes": *joinShapes, "dim_changes": *dimChanges, "scenarios": *scenarios,
		"tax_writers": *taxWriters, "tax_per_commit": *taxPer, "tax_duration": taxDur.String(), "tax_rounds": *taxRounds,
		"tax_table_rows": *taxRows, "tax_e2e": *taxE2E, "tax_idle": *taxIdle,
		"cpus": runtime.NumCPU(), "started_at": time.Now().UTC().Format(time.RFC3339)} {
		settings[k] = v
	}
	if rev, ok := settings["vcs.revision"]; ok {
		fmt.Fprintf(os.Stderr, "trellis-bench: code %v (modified: %v)\n", rev, settings["vcs.modified"])
	}
	if *perCommit != "" {
		fmt.Fprintf(os.Stderr, "trellis-bench: %d rows per workload (%d at 1 row/commit), shapes %s (%s at 1 row/commit), modes %s, re-derive %d keys, server %s\n",
			*rows, *rows1, *shapes, *shapes1, *modes, *rederive, server)
	}
	if *joinFacts > 0 {
		fmt.Fprintf(os.Stderr, "trellis-bench: join workload: %d facts (%d per commit) ⋈ dim1 %d rows ⋈ dim2 %d rows, %d groups, shapes %s, %d dimension changes\n",
			*joinFacts, *joinPer, *joinDim1, *joinDim2, *joinGroups, *joinShapes, *dimChanges)
	}

	if taxCfg != nil {
		fmt.Fprintf(os.Stderr, "trellis-bench: write tax: %d writers at %s rows/commit, %s per point, %d rounds, %d rows preloaded; end to end %s; server %s\n",
			*taxWriters, *taxPer, *taxDur, *taxRounds, *taxRows, *taxE2E, server)
	}

	dbs := bench.ServerDatabases{AdminDSN: adminDSN}
	var results []bench.Result
	if len(cfg.Workloads) > 0 {
		results, err = bench.Run(ctx, cfg, dbs)
	}
	rep := bench.Report{Settings: settings, Results: results}
	if taxCfg != nil && err == nil {
		tax, terr := bench.RunWriteTax(ctx, *taxCfg, dbs)
		rep.WriteTax, err = &tax, terr
	}
	if err != nil {
		rep.Error = err.Error()
	}
	if *jsonFile != "" {
		if werr := writeJSONFile(*jsonFile, rep); werr != nil {
			return errors.Join(err, werr)
		}
	}
	var out io.Writer = os.Stdout
	if *jsonOut {
		if werr := bench.WriteJSON(out, rep); werr != nil {
			return errors.Join(err, werr)
		}
	} else if len(results) > 0 {
		fmt.Fprintf(out, "\nrows/s = rows / end-to-end; ratio = engine rows/s / pg_recvlogical rows/s (same run, same phase)\n")
		fmt.Fprintf(out, "end-to-end: live = first write -> converged (writer and engine share the machine); catchup = Run started\n")
		fmt.Fprintf(out, "after the phase was written -> converged; drain = pg_recvlogical draining WAL written beforehand\n")
		fmt.Fprintf(out, "hand s (rederive) = hand-written set-based SQL re-deriving the same keys into hand-kept copies, same database,\n")
		fmt.Fprintf(out, "one transaction (loading the id list not counted); hand/apply = hand s / apply s: above 1, the engine is faster\n")
		fmt.Fprintf(out, "data star = the join workload (fact ⋈ dim1 ⋈ dim2); dimchange: end-to-end = median single-row dim1 UPDATE -> converged,\n")
		fmt.Fprintf(out, "refresh s = median REFRESH MATERIALIZED VIEW of the same query, same data; refresh/e2e above 1: the engine is faster\n\n")
		if werr := bench.WriteTable(out, results); werr != nil {
			return errors.Join(err, werr)
		}
	}
	if !*jsonOut && rep.WriteTax != nil {
		fmt.Fprintf(out, "\nwrite tax: %d writers, each commit k rows (random INSERT of a new id / UPDATE by primary key, one statement per row,\n", *taxWriters)
		fmt.Fprintf(out, "pipelined in one round trip), %s per point; none = plain table, logical/trigger = Run live with that capture.\n", *taxDur)
		fmt.Fprintf(out, "ratios are to none in the same round (median over rounds): rows/s ratio above 1 is faster, p99 ratio above 1 slower.\n")
		fmt.Fprintf(out, "-idle = capture installed but Run stopped during the writes (capture's own cost; the engine catches up after).\n")
		fmt.Fprintf(out, "apply s = the engine's time inside apply transactions during the writes (it shares the machine with the writers);\n")
		fmt.Fprintf(out, "catch-up s = writers' end -> converged (not in the tax). end to end = inserts into an empty table, first write -> converged.\n\n")
		if werr := bench.WriteTaxTable(out, *rep.WriteTax); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// buildSettings records which code was measured: the engine changes
// between runs, and figures are only comparable for one revision. `go run`
// stamps no VCS information, so ask git (read-only) when it is at hand.
func buildSettings(ctx context.Context) map[string]any {
	out := map[string]any{}
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

// copyFile copies the file at src to dst.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writeJSONFile(path string, rep bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-json-out: %w", err)
	}
	if err := bench.WriteJSON(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func parseShapes(list string) ([]bench.Shape, error) {
	var out []bench.Shape
	for _, name := range splitList(list) {
		sh, ok := bench.ShapeByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown shape %q; use row, agg or agg1k", name)
		}
		out = append(out, sh)
	}
	return out, nil
}

func parseJoinShapes(list string) ([]bench.Shape, error) {
	var out []bench.Shape
	for _, name := range splitList(list) {
		sh, ok := bench.JoinShapeByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown join shape %q; use joinrow or joinagg", name)
		}
		out = append(out, sh)
	}
	if len(out) == 0 {
		return nil, errors.New("-join-shapes: no shape; use joinrow, joinagg, or -join-facts 0")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
