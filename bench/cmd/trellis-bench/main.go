// Command trellis-bench measures trellis-repl's throughput end to end
// against pg_recvlogical draining the same WAL, in one run on one server,
// and prints the figures as a table (or JSON with -json).
//
// Machines are shared and noisy: compare the ratios measured in one run,
// not absolute rates across runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
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
		perCommit = flag.String("per-commit", "1000,1", "comma-separated rows per commit, one workload each")
		rederive  = flag.Int("rederive", -1, "keys changed in one transaction by the re-derive phase (-1: rows/10; 0: skip)")
		shapes    = flag.String("shapes", "row,agg,agg1k", "transform shapes to measure: row, agg (~100k groups), agg1k (1,000 groups)")
		modes     = flag.String("modes", "live,catchup", "how to measure each shape: live (write while Run runs), catchup (write, then start Run)")
		baseline  = flag.Bool("baseline", true, "measure pg_recvlogical draining the same workload")
		recv      = flag.String("pg-recvlogical", "", "pg_recvlogical binary (default: on PATH)")
		verify    = flag.Bool("verify", true, "compare every target with its query after each case")
		quick     = flag.Bool("quick", false, "smoke run: 50,000 rows (5,000 at 1 row per commit)")
		jsonOut   = flag.Bool("json", false, "print JSON instead of a table")
		jsonFile  = flag.String("json-out", "", "also write the JSON report to this file")
		progress  = flag.Duration("progress-interval", 50*time.Millisecond, "trellis ProgressInterval (bounds how late convergence is noticed)")
		batch     = flag.Int("batch-size", 0, "trellis BatchSize (0: library default)")
		timeout   = flag.Duration("phase-timeout", 30*time.Minute, "longest wait for one phase to converge")
		verbose   = flag.Bool("v", false, "log the library's messages to stderr")
	)
	flag.Parse()
	if *quick {
		*rows, *rows1 = 50_000, 5_000
	}
	if *rederive < 0 {
		*rederive = *rows / 10
	}

	cfg := bench.Config{Baseline: *baseline, RecvLogical: *recv, Verify: *verify,
		ProgressInterval: *progress, BatchSize: *batch, PhaseTimeout: *timeout, Progress: os.Stderr}
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	cfg.Modes = splitList(*modes)
	for _, name := range splitList(*shapes) {
		sh, ok := bench.ShapeByName(name)
		if !ok {
			return fmt.Errorf("unknown shape %q; use row, agg or agg1k", name)
		}
		cfg.Shapes = append(cfg.Shapes, sh)
	}
	for _, s := range splitList(*perCommit) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-per-commit: %q is not a positive number", s)
		}
		wl := bench.Workload{Rows: *rows, PerCommit: n, RederiveKeys: *rederive}
		if n == 1 {
			// The re-derive phase needs the large source; one per run.
			wl = bench.Workload{Rows: *rows1, PerCommit: 1}
		}
		cfg.Workloads = append(cfg.Workloads, wl)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	adminDSN, server := *dsn, "external (-dsn)"
	if adminDSN == "" {
		srv, err := pgserver.Start(ctx, pgserver.Options{ReapOnExit: true,
			Settings: map[string]string{"max_wal_size": "'4GB'"}})
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
		adminDSN, server = srv.DSN("postgres"), "throwaway pgserver (fsync=off)"
	}

	settings := map[string]any{"server": server, "rows": *rows, "rows_1_per_commit": *rows1, "per_commit": *perCommit,
		"rederive_keys": *rederive, "shapes": *shapes, "modes": *modes, "progress_interval": progress.String(), "batch_size": *batch,
		"cpus": runtime.NumCPU(), "started_at": time.Now().UTC().Format(time.RFC3339)}
	fmt.Fprintf(os.Stderr, "trellis-bench: %d rows per workload (%d at 1 row/commit), shapes %s, re-derive %d keys, server %s\n",
		*rows, *rows1, *shapes, *rederive, server)

	results, err := bench.Run(ctx, cfg, bench.ServerDatabases{AdminDSN: adminDSN})
	rep := bench.Report{Settings: settings, Results: results}
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
	} else {
		fmt.Fprintf(out, "\nrows/s = rows / end-to-end; ratio = engine rows/s / pg_recvlogical rows/s (same run, same phase)\n")
		fmt.Fprintf(out, "end-to-end: live = first write -> converged (writer and engine share the machine); catchup = Run started\n")
		fmt.Fprintf(out, "after the phase was written -> converged; drain = pg_recvlogical draining WAL written beforehand\n\n")
		if werr := bench.WriteTable(out, results); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
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

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
