// Command soak runs the generative suite with fresh seeds until a time
// limit, printing programs and operations checked per minute and every
// failure with its seed, shrunk to a minimal program written under
// testdata/regressions/pending.
//
//	go run ./generative/cmd/soak -duration 30m
//	go run ./generative/cmd/soak -print -seed 3 -profile store   # show one case
//
// It starts its own throwaway PostgreSQL (or uses -dsn, a superuser DSN of
// a server with wal_level=logical; server restarts and held commits are
// then skipped).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/trellis-repl/trellis-repl/generative"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
}

func run() error {
	duration := flag.Duration("duration", 30*time.Minute, "how long to run")
	seed := flag.Int64("seed", time.Now().UnixNano()%1_000_000, "seed of the sequence of cases (printed; repeats a soak)")
	profile := flag.String("profile", "", "run only this profile (default: all in turn)")
	shrink := flag.Duration("shrink", 5*time.Minute, "shrink budget per failure (0 = do not shrink)")
	dsn := flag.String("dsn", "", "superuser DSN of an existing server (default: start a throwaway one)")
	out := flag.String("out", "", "directory for minimal failing programs (default testdata/regressions/pending)")
	stop := flag.Bool("stop-on-failure", false, "stop at the first failure")
	converge := flag.Duration("converge-timeout", 25*time.Second, "how long a check waits for convergence")
	verbose := flag.Bool("v", false, "log shrinking progress")
	printOnly := flag.Bool("print", false, "print the program of -seed and -profile (default mixed) and exit")
	flag.Parse()
	if *printOnly {
		name := *profile
		if name == "" {
			name = "mixed"
		}
		prof, ok := generative.ProfileByName(name)
		if !ok {
			return fmt.Errorf("unknown profile %q", name)
		}
		fmt.Print(generative.Generate(*seed, prof).Format())
		return nil
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	env := &generative.Env{ConvergeTimeout: *converge, Logger: log}
	if *dsn != "" {
		env.AdminDSN = *dsn
	} else {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
		srv, err := pgserver.Start(sctx, pgserver.Options{ReapOnExit: true})
		scancel()
		if err != nil {
			return fmt.Errorf("start PostgreSQL: %w", err)
		}
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			_ = srv.Stop(sctx)
		}()
		env.Server, env.AdminDSN = srv, srv.DSN("postgres")
	}
	tmp, err := os.MkdirTemp("", "trellis-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env.TempDir = tmp
	if env.CLI, err = generative.BuildCLI(ctx, tmp); err != nil {
		return err
	}
	if *out == "" {
		dir, err := generative.RegressionDir()
		if err != nil {
			return err
		}
		*out = filepath.Join(dir, "pending")
	}
	if pl := generative.ActivePlant(); pl != "" {
		fmt.Printf("soak: planted bug %s\n", pl)
	}
	res := env.Soak(ctx, generative.SoakOptions{Duration: *duration, Seed: *seed, Profile: *profile,
		ShrinkBudget: *shrink, Dir: *out, StopOnFailure: *stop}, os.Stdout)
	if len(res.Findings) > 0 {
		os.Exit(1)
	}
	return nil
}
