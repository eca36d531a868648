package generative

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"
)

// Case is one program of a lane: a seed under a profile.
type Case struct {
	Seed    int64
	Profile string
}

func (c Case) String() string { return fmt.Sprintf("%s/seed=%d", c.Profile, c.Seed) }

// Program generates the case's program.
func (c Case) Program() (*Program, error) {
	prof, ok := ProfileByName(c.Profile)
	if !ok {
		return nil, fmt.Errorf("unknown profile %q", c.Profile)
	}
	return Generate(c.Seed, prof), nil
}

// FastLaneCases are the fixed cases of the fast lane: together they cover
// every action, every join shape, every feature of the feature and poison
// streams and both capture modes with switches both ways (TestJoinPrograms,
// TestFeaturePrograms, TestCapturePrograms), and so catch every planted bug
// (the last sweep, after chains got nullable levels, caught
// skip_ledger_update, stale_read, keep_empty_group and confirm_before_record
// with mixed/1, drop_old_key (at store/3's nullable level) and
// done_clears_redirtied_key with store/3, skip_visibility_wait with held/4,
// skip_dimension_change with crash/2, ignore_left_join_nulls with join/234,
// drain_skips_open_txn with trigger/2, hold_whole_batch with poison/214;
// flatten_nullable_computed with join/234, whose t1 the nested stream
// draws: a computed output below a pass-through wrapper on the
// NULL-extended side of a LEFT JOIN, nestedSalt; exists_misses_last_delete
// with held/13, topk_no_refill and window_partition_stale with poison/214,
// whose shapes the SQL-shapes stream draws, sqlshapes.go; stale_scalar is
// caught by the root TestScalarMoves), and each passes on the current
// code. lifecycle/6 and ddl/6 draw functions in FROM over a collection
// table (srfshapes.go), concurrent/7 and join/79 recursion over graph
// tables (recursive.go), restart/5 and lifecycle/6 a table grouped by its
// key; no case that catches a planted bug draws either. store/3 and store/22 define chains
// whose first level is keyed by columns that may be NULL, with a kill
// between the levels (TestNullableChainPrograms; nullChainSalt is chosen so,
// and so that mixed/1's chain is the one it drew before): an aggregate
// grouped by a nullable expression read by one grouped by it, and one
// grouped by a nullable column with a HAVING read by an aggregate of it
// joined back to its table NULL-safely. The cases before trigger/2 draw
// logical mode and no switch (TestFastLaneCaptureDraws), as they did before
// capture modes existed; the cases before poison/214 draw no poison
// (TestFastLanePoisonDraws).
func FastLaneCases() []Case {
	return []Case{
		{Seed: 1, Profile: "mixed"},
		{Seed: 2, Profile: "crash"},
		{Seed: 3, Profile: "store"},
		{Seed: 4, Profile: "held"},
		{Seed: 5, Profile: "restart"},
		{Seed: 6, Profile: "lifecycle"},
		{Seed: 7, Profile: "concurrent"},
		{Seed: 8, Profile: "batch"},
		// Second cases for the actions that catch the timing-dependent
		// planted bugs (skip_visibility_wait, confirm_before_record).
		{Seed: 13, Profile: "held"},
		{Seed: 22, Profile: "store"},
		// Join programs (crash/seed=2 is one too): together they draw every
		// join shape (TestJoinPrograms); before the feature stream, 79
		// caught skip_dimension_change, 234 both it and
		// ignore_left_join_nulls (crash/seed=2 now catches both first);
		// 234 catches flatten_nullable_computed at its first check.
		{Seed: 79, Profile: "join"},
		{Seed: 234, Profile: "join"},
		// Trigger capture: starts in trigger mode, switches to logical
		// and back while writers commit, and holds transactions (commits
		// in flight and open ones) across drains and ring rotations while
		// fresh rows commit after them: catches drain_skips_open_txn.
		{Seed: 2, Profile: "trigger"},
		// Poison rows: a CHECK on one target, a division by zero in
		// another's select list, poisoned rows in transactions with good
		// ones, corrected, deleted, moved and met by a rebuild; catches
		// hold_whole_batch (the good keys of a failing batch held too) at
		// its first check.
		{Seed: 214, Profile: "poison"},
		// DDL on sources while the runner runs: columns nobody reads
		// added and dropped (nothing may pause), and an int column a
		// row transform reads retyped to bigint (it pauses with kind
		// capture, its RESUME re-types the target, the check compares the
		// target's types with the query's).
		{Seed: 6, Profile: "ddl"},
	}
}

// RandomCases draws n cases from base: profiles in turn, seeds at random.
func RandomCases(base int64, n int) []Case {
	r := rand.New(rand.NewPCG(uint64(base), 1))
	ps := Profiles()
	out := make([]Case, n)
	for i := range out {
		out[i] = Case{Seed: int64(r.Uint32()), Profile: ps[r.IntN(len(ps))].Name}
	}
	return out
}

// Finding is a failing program and what shrinking made of it.
type Finding struct {
	Case    Case
	Program *Program
	Failure *Failure
	// Minimal is the shrunk program (Program when not shrunk).
	Minimal        *Program
	MinimalFailure *Failure
	Tries          int
	// File is where the minimal program was written ("" if not).
	File string
}

// Investigate shrinks a failure within budget (0 = do not shrink) and, when
// dir is not "", writes the minimal program there as a regression file.
func (e *Env) Investigate(ctx context.Context, c Case, p *Program, f *Failure, budget time.Duration, dir string) *Finding {
	fd := &Finding{Case: c, Program: p, Failure: f, Minimal: p, MinimalFailure: f}
	if budget > 0 {
		sh := &Shrinker{Env: e, Budget: budget, Logf: func(format string, args ...any) {
			e.logger().Info(fmt.Sprintf(format, args...), "case", c.String())
		}}
		fd.Minimal, fd.MinimalFailure, fd.Tries = sh.Shrink(ctx, p, f)
	}
	if dir != "" && fd.MinimalFailure.Kind != "setup" {
		path, err := WriteRegression(dir, fd.Minimal, fd.MinimalFailure)
		if err == nil {
			fd.File = path
		} else {
			fd.File = "(could not write: " + err.Error() + ")"
		}
	}
	return fd
}

// Report renders the finding for a human: the seed and how to reproduce
// it, what failed, and the minimal program.
func (fd *Finding) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "FAILED seed=%d profile=%s", fd.Case.Seed, fd.Case.Profile)
	if pl := ActivePlant(); pl != "" {
		fmt.Fprintf(&b, " (planted bug %s)", pl)
	}
	fmt.Fprintf(&b, "\nreproduce: TRELLIS_GEN_SEED=%d TRELLIS_GEN_PROFILE=%s go test ./generative/ -run TestSeed -v\n", fd.Case.Seed, fd.Case.Profile)
	fmt.Fprintf(&b, "failure: %v\n", fd.Failure)
	if fd.Minimal != fd.Program {
		fmt.Fprintf(&b, "shrunk from %d steps / %d ops to %d steps / %d ops in %d runs; minimal failure: %v\n",
			len(fd.Program.Steps), fd.Program.Ops(), len(fd.Minimal.Steps), fd.Minimal.Ops(), fd.Tries, fd.MinimalFailure)
	}
	if fd.File != "" {
		fmt.Fprintf(&b, "minimal program written to %s\n", fd.File)
	}
	b.WriteString("---- minimal program ----\n")
	b.WriteString(fd.Minimal.Format())
	if fd.MinimalFailure != nil && fd.MinimalFailure.Log != "" {
		b.WriteString("---- log tail ----\n")
		b.WriteString(fd.MinimalFailure.Log)
		b.WriteString("\n")
	}
	return b.String()
}

// SoakOptions configures Soak.
type SoakOptions struct {
	Duration time.Duration
	// Seed starts the sequence of random cases (printed, so a soak run can
	// be repeated).
	Seed int64
	// Profile restricts the cases to one profile ("" = all in turn).
	Profile string
	// ShrinkBudget bounds the shrinking of each failure (0 = do not shrink).
	ShrinkBudget time.Duration
	// Dir receives minimal programs of failures ("" = not written).
	Dir string
	// StopOnFailure ends the soak at the first failure.
	StopOnFailure bool
}

// SoakResult counts what a soak checked.
type SoakResult struct {
	Programs, Ops, Statements, Checks int
	Findings                          []*Finding
	Elapsed                           time.Duration
}

// Soak runs fresh cases until the duration is over, printing throughput
// every minute and each failure with its seed to out.
func (e *Env) Soak(ctx context.Context, opt SoakOptions, out io.Writer) SoakResult {
	start := time.Now()
	end := start.Add(opt.Duration)
	r := rand.New(rand.NewPCG(uint64(opt.Seed), 2))
	ps := Profiles()
	var res SoakResult
	lastReport, lastPrograms, lastOps := start, 0, 0
	fmt.Fprintf(out, "soak: seed %d, until %s\n", opt.Seed, end.Format(time.TimeOnly))
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		prof := ps[i%len(ps)]
		if opt.Profile != "" {
			prof, _ = ProfileByName(opt.Profile)
		}
		c := Case{Seed: int64(r.Uint32()), Profile: prof.Name}
		p := Generate(c.Seed, prof)
		rr := e.Run(ctx, p)
		res.Programs++
		res.Ops += p.Ops()
		res.Statements += rr.Stats.Statements
		res.Checks += rr.Stats.Checks
		if len(rr.Stats.GeneratorErrors) > 0 {
			fmt.Fprintf(out, "soak: %s: generator errors: %s\n", c, strings.Join(rr.Stats.GeneratorErrors, "; "))
		}
		for _, n := range rr.Stats.Notes {
			if strings.Contains(n, "runner exited") || strings.Contains(n, "server fault") {
				fmt.Fprintf(out, "soak: %s: %s\n", c, n)
			}
		}
		if rr.Failure != nil && ctx.Err() == nil {
			fmt.Fprintf(out, "soak: %s FAILED: %v\n", c, rr.Failure)
			fd := e.Investigate(ctx, c, p, rr.Failure, opt.ShrinkBudget, opt.Dir)
			res.Findings = append(res.Findings, fd)
			fmt.Fprintln(out, fd.Report())
			if opt.StopOnFailure {
				break
			}
		}
		if now := time.Now(); now.Sub(lastReport) >= time.Minute {
			mins := now.Sub(lastReport).Minutes()
			fmt.Fprintf(out, "soak: %s elapsed: %d programs, %d ops (%.1f programs/min, %.0f ops/min), %d failures\n",
				now.Sub(start).Round(time.Second), res.Programs, res.Ops,
				float64(res.Programs-lastPrograms)/mins, float64(res.Ops-lastOps)/mins, len(res.Findings))
			lastReport, lastPrograms, lastOps = now, res.Programs, res.Ops
		}
	}
	res.Elapsed = time.Since(start)
	mins := res.Elapsed.Minutes()
	fmt.Fprintf(out, "soak: done in %s: %d programs, %d ops, %d statements, %d checks (%.1f programs/min, %.0f ops/min), %d failures\n",
		res.Elapsed.Round(time.Second), res.Programs, res.Ops, res.Statements, res.Checks,
		float64(res.Programs)/mins, float64(res.Ops)/mins, len(res.Findings))
	return res
}
