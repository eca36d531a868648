package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// exitDiverged is the exit code of a self-check whose target is not known
// to equal its query: it diverged (and was not repaired), or could not be
// compared (not_caught_up, not_live).
const exitDiverged = 3

// cmdSelfCheck runs `self-check`; a report that is not converged exits 3:
//
//	self-check NAME [--wait] [--strict] [--repair] [--timeout D] [--page-size N] [--json]
//	self-check [NAME] --job ID [--wait] [--json]
//
// Without --wait it queues the job (the runner runs it) and prints its id.
func cmdSelfCheck(ctx context.Context, args []string, stdout io.Writer) error {
	code, err := selfCheck(ctx, args, stdout)
	if err != nil {
		return err
	}
	if code != exitOK {
		return exitWith{code: code}
	}
	return nil
}

func selfCheck(ctx context.Context, args []string, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("self-check", flag.ContinueOnError)
	var c common
	c.register(fs)
	wait := fs.Bool("wait", false, "wait for the job to finish (run it here when no runner is attached) and print its report")
	strict := fs.Bool("strict", false, "report every difference found; by default differences are compared again after a fresh convergence wait, so changes in flight are not divergences")
	repair := fs.Bool("repair", false, "re-derive the keys of the divergent rows, then compare them again")
	timeout := fs.String("timeout", trellis.DefaultSelfCheckTimeout.String(), "bound of each wait for convergence (e.g. 30s, 5m)")
	pageSize := fs.Int("page-size", 0, "target rows per comparison step (default 20000)")
	asJSON := fs.Bool("json", false, "print the job as JSON")
	job := fs.Int64("job", 0, "read this job (with --wait: wait for it) instead of starting one")
	if err := parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() > 1 {
		return 0, usageError{"self-check takes one transform name"}
	}
	if fs.NArg() == 0 && *job == 0 {
		return 0, usageError{"self-check needs a transform name, or --job ID to read a job"}
	}
	if *job < 0 {
		return 0, usageError{fmt.Sprintf("--job %d is not a job id; give the id `self-check NAME` printed", *job)}
	}
	d, err := time.ParseDuration(*timeout)
	if err != nil {
		return 0, usageError{fmt.Sprintf("--timeout %q is not a duration; write it like 30s, 5m or 1h", *timeout)}
	}
	if d <= 0 {
		return 0, usageError{fmt.Sprintf("--timeout %s is not positive; give a duration such as 1m", d)}
	}
	if *pageSize < 0 {
		return 0, usageError{fmt.Sprintf("--page-size %d is negative; give a number of rows such as 10000", *pageSize)}
	}
	if *job != 0 {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "strict", "repair", "timeout", "page-size":
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return 0, usageError{fmt.Sprintf("--job reads a job that has its options; %s choose how a new one runs: drop them, or start a new job with the transform's name", strings.Join(given, ", "))}
		}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema})
	if err != nil {
		return 0, err
	}
	defer t.Close()
	var j trellis.SelfCheckJob
	switch {
	case *job != 0 && *wait:
		j, err = t.AwaitSelfCheckJob(ctx, *job)
	case *job != 0:
		j, err = t.SelfCheckJob(ctx, *job)
	default:
		j, err = t.SelfCheck(ctx, fs.Arg(0), trellis.SelfCheckOptions{Strict: *strict, Repair: *repair, Wait: *wait, Timeout: d, PageSize: *pageSize})
	}
	if err != nil {
		return 0, err
	}
	if *job != 0 && fs.NArg() == 1 && fs.Arg(0) != j.Transform && !strings.HasSuffix(fs.Arg(0), "."+j.Transform) {
		return 0, &trellis.Error{Code: trellis.CodeNotFound, Msg: fmt.Sprintf("self-check job %d is a check of transform %q, not %q; give its name or none", j.ID, j.Transform, fs.Arg(0))}
	}
	if *asJSON {
		if err := writeJSON(stdout, j); err != nil {
			return 0, err
		}
	} else {
		printJob(stdout, j, *job == 0 && !*wait)
	}
	switch {
	case j.State == trellis.SelfCheckFailed:
		msg := "the self-check failed"
		if j.Error != nil {
			msg = *j.Error
		}
		return 0, &trellis.Error{Code: trellis.CodeUnavailable, Msg: fmt.Sprintf("self-check job %d of %s failed: %s", j.ID, j.Transform, msg)}
	case j.State == trellis.SelfCheckDone && !j.Report.Settled():
		return exitDiverged, nil
	}
	return 0, nil
}

// printJob prints a job: queued (how to read it), running, or its report.
func printJob(w io.Writer, j trellis.SelfCheckJob, started bool) {
	switch j.State {
	case trellis.SelfCheckQueued, trellis.SelfCheckRunning:
		if started {
			fmt.Fprintf(w, "self-check job %d of %s queued; `trellis-repl self-check --job %d` reads it (--wait waits for it)\n", j.ID, j.Transform, j.ID)
			return
		}
		line := fmt.Sprintf("self-check job %d of %s: %s", j.ID, j.Transform, j.State)
		if j.ClaimedBy != nil {
			line += " (by " + *j.ClaimedBy + ")"
		}
		fmt.Fprintln(w, line+"; --wait waits for it")
		return
	case trellis.SelfCheckFailed:
		fmt.Fprintf(w, "self-check job %d of %s: failed\n", j.ID, j.Transform)
		return
	}
	r := j.Report
	by := "by the runner"
	if !r.ByRunner {
		by = "by the requesting process (no runner attached)"
	}
	mode := "standard"
	if r.Strict {
		mode = "strict"
	}
	fmt.Fprintf(w, "self-check job %d of %s: done in %.2fs %s, %s mode\n", j.ID, j.Transform, r.Seconds, by, mode)
	fmt.Fprintf(w, "outcome: %s\n", r.Outcome)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	if r.Outcome == trellis.OutcomeNotLive {
		return
	}
	if r.Pages > 0 {
		ident := strings.Join(r.IdentityColumns, ", ")
		if ident == "" {
			ident = "none: one row"
		}
		fmt.Fprintf(w, "compared %d target rows with %d query rows at %s (identity %s; %d pages)\n", r.RowsTarget, r.RowsQuery, r.Token, ident, r.Pages)
	}
	fmt.Fprintf(w, "divergences: %d (missing_row %d, extra_row %d, cell %d); in flight %d; held keys %d (%d divergences at them)\n",
		r.Divergences, r.ByKind[trellis.DivergenceMissingRow], r.ByKind[trellis.DivergenceExtraRow], r.ByKind[trellis.DivergenceCell],
		r.InFlight, r.HeldKeys, r.HeldDivergences)
	for _, d := range r.Listed {
		fmt.Fprintf(w, "  %-12s %s  %s\n", d.Kind, identityText(r.IdentityColumns, d.Identity), divergenceText(d))
	}
	if n := r.Divergences - int64(len(r.Listed)); n > 0 {
		fmt.Fprintf(w, "  … and %d more (--json lists the first %d)\n", n, len(r.Listed))
	}
	if rp := r.Repair; rp != nil {
		what := fmt.Sprintf("re-derived %d keys", rp.Keys)
		if rp.Reconciled {
			what += " and recomputed the target from its ledger"
		}
		fmt.Fprintf(w, "repair: %s; fixed %d, remaining %d\n", what, rp.Fixed, rp.Remaining)
		if rp.Note != "" {
			fmt.Fprintf(w, "repair note: %s\n", rp.Note)
		}
	}
}

func textOf(p *string) string {
	if p == nil {
		return "NULL"
	}
	return *p
}

func identityText(cols []string, vals []*string) string {
	if len(vals) == 0 {
		return "(the one row)"
	}
	parts := make([]string, len(vals))
	for i, v := range vals {
		name := fmt.Sprint(i)
		if i < len(cols) {
			name = cols[i]
		}
		parts[i] = name + "=" + textOf(v)
	}
	return strings.Join(parts, " ")
}

func divergenceText(d trellis.Divergence) string {
	switch d.Kind {
	case trellis.DivergenceCell:
		return fmt.Sprintf("column %s: stored %s, recomputed %s", d.Column, textOf(d.Stored), textOf(d.Recomputed))
	case trellis.DivergenceMissingRow:
		return "recomputed " + textOf(d.Recomputed) + ", not stored"
	default:
		return "stored " + textOf(d.Stored) + ", not recomputed"
	}
}

// selfCheckRun are run's periodic self-check flags.
type selfCheckRun struct {
	every  *time.Duration
	sample *float64
}

func selfCheckRunFlags(fs *flag.FlagSet) selfCheckRun {
	return selfCheckRun{
		every: fs.Duration("self-check-every", 0, "compare a sample of every live target with its query this often (e.g. 1h; 0s: never); the metric trellis_selfcheck_divergences shows what it finds"),
		sample: fs.Float64("self-check-sample", trellis.DefaultSelfCheckSample,
			"share of each target a periodic self-check compares, in (0, 1]"),
	}
}

// apply checks the flags and sets them in cfg.
func (s selfCheckRun) apply(cfg *trellis.Config) error {
	if *s.every < 0 {
		return usageError{fmt.Sprintf("--self-check-every %s is negative; give a duration such as 1h, or 0s for none", *s.every)}
	}
	if !(*s.sample > 0 && *s.sample <= 1) {
		return usageError{fmt.Sprintf("--self-check-sample %g is not a share of the target; give a fraction in (0, 1], such as 0.1", *s.sample)}
	}
	cfg.SelfCheckEvery, cfg.SelfCheckSample = *s.every, *s.sample
	return nil
}
