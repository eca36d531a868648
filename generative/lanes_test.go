package generative

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// shared is the test binary's environment (one server, one CLI build).
var shared suite

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

// shrinkBudget is TRELLIS_GEN_SHRINK (a duration, 0 = off); by default 3
// minutes, and off when a bug is planted (the sweep wants the catch fast).
func shrinkBudget() time.Duration {
	if v := os.Getenv("TRELLIS_GEN_SHRINK"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		return 0
	}
	if ActivePlant() != "" {
		return 0
	}
	return 3 * time.Minute
}

// findingsDir is where minimal programs of failures go: pending/ beside the
// replayed regressions, or a temporary directory for planted bugs.
func findingsDir(t *testing.T) string {
	if ActivePlant() != "" {
		d, err := os.MkdirTemp("", "trellis-gen-planted-")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := RegressionDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "pending")
}

// runCases runs cases on every lane at once, each lane one case at a time
// taking the next when it is done, and stops taking cases at the first
// failure, which it reports with its seed, shrinks and writes as a
// regression file.
func runCases(t *testing.T, cases []Case) {
	ctx := context.Background()
	start := time.Now()
	var ops atomic.Int64
	var failed atomic.Bool
	onLanes(t, len(cases), func(env *Env, i int) {
		c := cases[i]
		if failed.Load() {
			return
		}
		t.Run(c.String(), func(t *testing.T) {
			p, err := c.Program()
			if err != nil {
				t.Fatal(err)
			}
			res := env.Run(ctx, p)
			ops.Add(int64(p.Ops()))
			t.Logf("seed=%d profile=%s: %d steps, %d ops, %d txns, %d checks (%d of join targets, %d of poisoned ones finding %d held keys), %d ALTERs and backfills, %d refused statements in %v",
				c.Seed, c.Profile, len(p.Steps), p.Ops(), res.Stats.Txns, res.Stats.Checks, res.Stats.JoinCompares, res.Stats.PoisonCompares, res.Stats.HeldKeys,
				res.Stats.Rebuilds, res.Stats.StmtErrors, res.Duration.Round(time.Millisecond))
			for _, n := range res.Stats.Notes {
				t.Logf("note: %s", n)
			}
			if len(res.Stats.GeneratorErrors) > 0 {
				t.Errorf("seed=%d profile=%s: the generator wrote statements PostgreSQL refused:\n%v", c.Seed, c.Profile, res.Stats.GeneratorErrors)
			}
			if res.Failure != nil {
				failed.Store(true)
				t.Errorf("seed=%d profile=%s FAILED: %v", c.Seed, c.Profile, res.Failure)
				t.Logf("program (seed=%d profile=%s):\n%s", c.Seed, c.Profile, p.Format())
				fd := env.Investigate(ctx, c, p, res.Failure, shrinkBudget(), findingsDir(t))
				t.Log(fd.Report())
			}
		})
	})
	t.Logf("%d programs, %d ops in %v", len(cases), ops.Load(), time.Since(start).Round(time.Second))
}

// onLanes calls run(env, i) for i from 0 to n-1, on every lane at once:
// each lane takes the next i when its call returns. run may call t.Run
// (subtests from several goroutines at once), which keeps each program's
// subtest name whatever lane it ran on.
func onLanes(t *testing.T, n int, run func(env *Env, i int)) {
	t.Helper()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for _, env := range shared.lanes(t, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				run(env, i)
			}
		}()
	}
	wg.Wait()
}

// TestFastLane is the fast lane: fixed cases that cover every action, plus
// TRELLIS_GEN_RANDOM (default 2) random ones from TRELLIS_GEN_RANDOM_SEED
// (default: the clock; printed).
func TestFastLane(t *testing.T) {
	if testing.Short() {
		t.Skip("the generative fast lane takes about two minutes")
	}
	base := envInt("TRELLIS_GEN_RANDOM_SEED", time.Now().UnixNano()%1_000_000)
	n := int(envInt("TRELLIS_GEN_RANDOM", 2))
	t.Logf("random cases: TRELLIS_GEN_RANDOM=%d TRELLIS_GEN_RANDOM_SEED=%d", n, base)
	if pl := ActivePlant(); pl != "" {
		t.Logf("planted bug: %s", pl)
	}
	runCases(t, append(FastLaneCases(), RandomCases(base, n)...))
}

// TestSeed reproduces one case: TRELLIS_GEN_SEED and TRELLIS_GEN_PROFILE.
func TestSeed(t *testing.T) {
	v := os.Getenv("TRELLIS_GEN_SEED")
	if v == "" {
		t.Skip("set TRELLIS_GEN_SEED (and TRELLIS_GEN_PROFILE) to reproduce a case")
	}
	seed, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	prof := os.Getenv("TRELLIS_GEN_PROFILE")
	if prof == "" {
		prof = "mixed"
	}
	runCases(t, []Case{{Seed: seed, Profile: prof}})
}

// TestRegressions replays every program in testdata/regressions (or the
// one file in TRELLIS_GEN_FILE); each must pass.
func TestRegressions(t *testing.T) {
	progs := map[string]*Program{}
	if f := os.Getenv("TRELLIS_GEN_FILE"); f != "" {
		progs[filepath.Base(f)] = readProgram(t, f)
	} else {
		dir, err := RegressionDir()
		if err != nil {
			t.Fatal(err)
		}
		if progs, err = LoadRegressions(dir); err != nil {
			t.Fatal(err)
		}
	}
	if len(progs) == 0 {
		t.Skip("no regression programs")
	}
	names := SortedNames(progs)
	onLanes(t, len(names), func(env *Env, i int) {
		name := names[i]
		t.Run(name, func(t *testing.T) {
			res := env.Run(context.Background(), progs[name])
			if res.Failure != nil {
				t.Fatalf("%s: %v\n%s", name, res.Failure, res.Failure.Log)
			}
		})
	})
}

// TestSoak runs the soak inside the test binary when TRELLIS_GEN_SOAK is a
// duration (e.g. 30m); `go run ./generative/cmd/soak` does the same
// standalone.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("TRELLIS_GEN_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set TRELLIS_GEN_SOAK=30m to soak")
	}
	env := shared.get(t)
	res := env.Soak(context.Background(), SoakOptions{Duration: d, Seed: envInt("TRELLIS_GEN_RANDOM_SEED", time.Now().UnixNano()%1_000_000),
		ShrinkBudget: shrinkBudget(), Dir: findingsDir(t)}, testWriter{t})
	if len(res.Findings) > 0 {
		t.Errorf("%d failures", len(res.Findings))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestShrinkFile shrinks the failing program in TRELLIS_GEN_SHRINK_FILE
// (TRELLIS_GEN_SHRINK budget, TRELLIS_GEN_SHRINK_ATTEMPTS runs per
// candidate for timing-dependent failures) into testdata/regressions/pending.
func TestShrinkFile(t *testing.T) {
	f := os.Getenv("TRELLIS_GEN_SHRINK_FILE")
	if f == "" {
		t.Skip("set TRELLIS_GEN_SHRINK_FILE to shrink a failing program")
	}
	p := readProgram(t, f)
	env := shared.get(t)
	attempts := int(envInt("TRELLIS_GEN_SHRINK_ATTEMPTS", 1))
	var res Result
	for a := 0; a < attempts; a++ {
		if res = env.Run(context.Background(), p); res.Failure != nil {
			break
		}
	}
	if res.Failure == nil {
		t.Skipf("%s passed %d times: nothing to shrink", f, attempts)
	}
	sh := &Shrinker{Env: env, Budget: shrinkBudget(), Attempts: attempts, Logf: t.Logf}
	min, mf, tries := sh.Shrink(context.Background(), p, res.Failure)
	path, err := WriteRegression(findingsDir(t), min, mf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shrunk in %d runs to %d steps, %d ops: %s\n%s", tries, len(min.Steps), min.Ops(), path, min.Format())
}

// readProgram parses the program in file f.
func readProgram(t *testing.T, f string) *Program {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(string(b))
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	return p
}
