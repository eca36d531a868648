package main

// `status`: the readable table, --json, --check (exit 3 with one line per
// problem) and --watch (refreshed in place, with a progress bar for each
// transform being built). It only reads (ADR 0017 §5).

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/bubbles/progress"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/term"
	"github.com/muesli/termenv"

	trellis "github.com/trellis-repl/trellis-repl"
)

// defaultWatch is --watch's interval when none is given.
const defaultWatch = 2 * time.Second

// watchFlag is --watch[=INTERVAL]: a bool flag that takes an optional
// interval.
type watchFlag struct {
	on       bool
	interval time.Duration
}

func (w *watchFlag) String() string {
	if w == nil || !w.on {
		return ""
	}
	return w.interval.String()
}

func (w *watchFlag) IsBoolFlag() bool { return true }

func (w *watchFlag) Set(s string) error {
	switch s {
	case "true":
		w.on, w.interval = true, defaultWatch
		return nil
	case "false":
		w.on = false
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 100*time.Millisecond {
		return fmt.Errorf("%q is not an interval of at least 100ms (write it like 2s)", s)
	}
	w.on, w.interval = true, d
	return nil
}

func cmdStatus(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c common
	c.register(fs)
	asJSON := fs.Bool("json", false, "print a JSON array (fields: docs/status.md)")
	check := fs.Bool("check", false, "print one line per problem and exit 3 when there is one (0: none)")
	maxLag := fs.Duration("max-lag", time.Minute, "with --check: a transform whose lag_seconds exceeds this is a problem")
	var watch watchFlag
	fs.Var(&watch, "watch", "refresh the table in place every INTERVAL (--watch=5s; default 2s), with build progress; q quits")
	if err := parse(fs, args); err != nil {
		return err
	}
	names := fs.Args()
	if watch.on && len(names) > 0 {
		// `--watch 5s`: the flag package leaves the interval positional.
		if d, err := time.ParseDuration(names[0]); err == nil && d > 0 {
			if err := watch.Set(names[0]); err != nil {
				return usageError{"--watch: " + err.Error()}
			}
			names = names[1:]
		}
	}
	modes := 0
	for _, on := range []bool{*asJSON, *check, watch.on} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usageError{"--json, --check and --watch exclude each other; give one"}
	}
	if *maxLag < 0 {
		return usageError{"--max-lag must not be negative"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, ReadOnly: true, MaxConnections: 1})
	if err != nil {
		return err
	}
	defer t.Close()
	fetch := func(ctx context.Context) (statusView, error) {
		st, err := t.Status(ctx, names...)
		if err != nil {
			return statusView{}, err
		}
		v := statusView{st: st}
		if len(st) > 0 {
			v.runner = st[0].Runner
		} else if v.runner, err = t.Runner(ctx); err != nil {
			// No transform carries the runner: the last one's DROP may
			// have left a capture removal waiting.
			return statusView{}, err
		}
		return v, nil
	}
	// A name that does not exist ends even a watch at once; later errors
	// of a watch are shown, and the watch goes on.
	v, err := fetch(ctx)
	if err != nil {
		return err
	}
	st := v.st
	if watch.on {
		// The first frame shows what was just read: reading 1,000
		// transforms twice before it would double the wait for it.
		var shown atomic.Bool
		return watchStatus(ctx, stdout, func(ctx context.Context) (statusView, error) {
			if !shown.Swap(true) {
				return v, nil
			}
			return fetch(ctx)
		}, watch.interval)
	}
	switch {
	case *asJSON:
		return writeJSON(stdout, st)
	case *check:
		problems := statusProblems(st, *maxLag)
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		if len(problems) > 0 {
			return exitWith{code: exitBehind}
		}
		if len(st) == 0 {
			fmt.Fprintln(stdout, "ok: no transforms")
			return nil
		}
		fmt.Fprintf(stdout, "ok: %d transforms, none paused, quarantined, failing or lagging more than %s; runner attached\n", len(st), *maxLag)
		return nil
	}
	return renderStatus(stdout, v, time.Now(), plainBar())
}

// statusView is what the table shows: the transforms, and the runner
// (every transform's, or the instance's when there is none).
type statusView struct {
	st     []trellis.TransformStatus
	runner *trellis.RunnerStatus
}

// statusProblems is what status --check reports, one line each: no
// runner attached, and per transform paused, quarantined, holding keys,
// failing to apply or build, waiting to install capture, or lagging more
// than maxLag. A removal of capture waiting for a lock (the runner's
// capture_waits) is none: no transform's data depends on it.
func statusProblems(st []trellis.TransformStatus, maxLag time.Duration) []string {
	var out []string
	if len(st) > 0 && st[0].Runner != nil && !st[0].Runner.Attached {
		out = append(out, "runner: not attached: nothing maintains these transforms; start `trellis-repl run`")
	}
	if len(st) > 0 && st[0].Runner != nil && st[0].Runner.Attached {
		if r := st[0].Runner.Retention; r != nil && r.OverLimit {
			out = append(out, "runner: "+retentionText(r)+"; find what holds the slot back (a stopped or slow transform, --confirm=applied)")
		}
	}
	for _, s := range st {
		add := func(format string, args ...any) {
			out = append(out, s.Name+": "+oneLine(fmt.Sprintf(format, args...)))
		}
		switch s.State {
		case "paused":
			why := "by a user"
			if s.PausedBy != nil && *s.PausedBy != "user" {
				why = "by the system"
			}
			if s.CaptureFailure != nil {
				why += " (" + s.CaptureFailure.Kind + ": " + s.CaptureFailure.Error + ")"
			}
			add("paused %s; RESUME TRANSFORM %s rebuilds it", why, s.Name)
		case trellis.StateDisrupted:
			add("%s; no runner has started on this server since: start `trellis-repl run` (it pauses or repairs the transform)", s.Disruption.Reason)
		case "quarantined":
			n := int64(0)
			if s.HeldKeys != nil {
				n = s.HeldKeys.Count
			}
			add("quarantined, holding %d keys; `trellis-repl held %s` lists them; fix the cause, then RESUME TRANSFORM %s", n, s.Name, s.Name)
		}
		if s.State != "quarantined" && s.HeldKeys != nil && s.HeldKeys.Count > 0 {
			add("holds %d keys whose re-derive fails on row data; `trellis-repl held %s` lists them", s.HeldKeys.Count, s.Name)
		}
		if s.DrainFailure != nil {
			add("applying changes fails since %s (%d attempts): %s", s.DrainFailure.Since.Format(time.RFC3339), s.DrainFailure.Attempts, s.DrainFailure.Error)
		}
		if s.BackfillFailure != nil {
			add("building fails (%d attempts): %s", s.BackfillFailure.Attempts, s.BackfillFailure.LastError)
		}
		if w := s.CaptureWait; w != nil {
			if w.Statement != "" {
				add("capture waits for the owner of the publication to run: %s", w.Statement)
			} else {
				add("capture waits since %s for a %s lock on %s", w.Since.Format(time.RFC3339), w.LockMode, w.Table)
			}
		}
		if s.LagSeconds != nil && *s.LagSeconds > maxLag.Seconds() {
			add("lags %s (more than --max-lag %s) with %d keys waiting", secs(*s.LagSeconds), maxLag, s.KeysWaiting)
		}
	}
	return out
}

// renderStatus prints the runner line, the table and, for each transform
// being built, its progress (bar renders a fraction).
func renderStatus(w io.Writer, v statusView, now time.Time, bar func(float64) string) error {
	st := v.st
	if v.runner != nil {
		fmt.Fprintln(w, runnerLine(v.runner, now))
	}
	if len(st) == 0 {
		fmt.Fprintln(w, "no transforms; `trellis-repl apply` defines them")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tCAPTURE\tAPPLIED LSN\tLAG BYTES\tLAG\tKEYS WAITING\tHELD KEYS\tPROBLEM")
	for _, s := range st {
		lagBytes, lag, held, mode := "-", "-", "0", "-"
		if s.LagBytes != nil {
			lagBytes = fmt.Sprint(*s.LagBytes)
		}
		if s.LagSeconds != nil {
			lag = secs(*s.LagSeconds)
		}
		if s.HeldKeys != nil {
			held = fmt.Sprint(s.HeldKeys.Count)
		}
		if s.CaptureMode != nil {
			mode = *s.CaptureMode
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Name, s.State, mode, s.AppliedLSN, lagBytes, lag, s.KeysWaiting, held, problemOf(s))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range st {
		if line := buildLine(s, now, bar); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// problemOf is the table's PROBLEM cell: the first failure a transform
// reports.
func problemOf(s trellis.TransformStatus) string {
	p := ""
	switch {
	case s.CaptureFailure != nil:
		p = s.CaptureFailure.Kind + ": " + s.CaptureFailure.Error
	case s.BackfillFailure != nil:
		p = fmt.Sprintf("build fails (%d attempts): %s", s.BackfillFailure.Attempts, s.BackfillFailure.LastError)
	case s.DrainFailure != nil:
		p = fmt.Sprintf("apply fails (%d attempts): %s", s.DrainFailure.Attempts, s.DrainFailure.Error)
	case s.CaptureWait != nil && s.CaptureWait.Statement != "":
		p = "capture waits for: " + s.CaptureWait.Statement
	case s.CaptureWait != nil:
		p = "capture waits for a lock on " + s.CaptureWait.Table
	case s.PausedBy != nil:
		p = "paused by " + *s.PausedBy
	case s.Disruption != nil:
		p = s.Disruption.Action + ": " + s.Disruption.Reason
	}
	return oneLine(p)
}

// buildLine is the progress of a transform being built: bar, rows done of
// the estimate, elapsed time and the time left at the rate so far; ""
// when it is not building.
func buildLine(s trellis.TransformStatus, now time.Time, bar func(float64) string) string {
	b := s.Build
	if b == nil || b.FinishedAt != nil || s.State != "backfilling" {
		return ""
	}
	elapsed := max(now.Sub(b.StartedAt), 0)
	line := fmt.Sprintf("building %s: ", s.Name)
	if s.Disruption != nil {
		line = fmt.Sprintf("repairing %s in place: ", s.Name)
	}
	if b.RowsTotal == nil || *b.RowsTotal <= 0 {
		return line + fmt.Sprintf("%d rows, %s elapsed (no estimate of the total)", b.RowsDone, elapsed.Round(time.Second))
	}
	total := max(*b.RowsTotal, b.RowsDone)
	frac := float64(b.RowsDone) / float64(total)
	eta := "unknown"
	if b.RowsDone > 0 && elapsed > 0 {
		left := time.Duration(float64(elapsed) / float64(b.RowsDone) * float64(total-b.RowsDone))
		eta = left.Round(time.Second).String()
	}
	return line + fmt.Sprintf("%s  %d/%d rows (estimated), %s elapsed, ETA %s", bar(frac), b.RowsDone, total, elapsed.Round(time.Second), eta)
}

// errorLine is err as the CLI prints errors: code: sentence.
func errorLine(err error) string {
	var te *trellis.Error
	if errors.As(err, &te) {
		return string(te.Code) + ": " + oneLine(te.Msg)
	}
	return "internal: " + oneLine(err.Error())
}

func secs(v float64) string {
	return (time.Duration(v * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// runnerLine says whether a runner maintains the instance: the states
// below it are only kept up to date while one is attached.
func runnerLine(r *trellis.RunnerStatus, now time.Time) string {
	beat := "never"
	if r.HeartbeatAt != nil {
		beat = now.Sub(*r.HeartbeatAt).Round(100*time.Millisecond).String() + " ago"
	}
	if !r.Attached {
		return "runner: NOT ATTACHED, nothing maintains these transforms (last heartbeat " + beat + ")"
	}
	line := fmt.Sprintf("runner: attached, backend pid %d (%s)", *r.PID, *r.ApplicationName)
	if r.Since != nil {
		line += ", since " + r.Since.Format(time.RFC3339)
	}
	line += ", heartbeat " + beat
	if len(r.StandbyPIDs) > 0 {
		line += fmt.Sprintf(", standby backend pids %v", r.StandbyPIDs)
	}
	if r.Retention != nil {
		line += "\nretention: " + retentionText(r.Retention)
	}
	for _, cw := range r.CaptureWaits {
		line += "\ncapture removal: " + removalText(cw, now)
	}
	return line
}

// clip cuts s to n characters, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// removalText is a removal of capture waiting for a lock as a sentence:
// the table, the lock, for how long, and who holds it.
func removalText(w trellis.CaptureWait, now time.Time) string {
	text := fmt.Sprintf("%s waits for a %s lock on %s since %s (%s)", w.Operation, w.LockMode, w.Table,
		w.Since.Format(time.RFC3339), max(now.Sub(w.Since), 0).Round(time.Second))
	if len(w.Blockers) == 0 {
		return text + "; nothing is cancelled, retried at each reconcile"
	}
	held := make([]string, len(w.Blockers))
	for i, b := range w.Blockers {
		held[i] = fmt.Sprintf("pid %d (%s, %s", b.PID, b.ApplicationName, b.State)
		if b.QueryStart != nil {
			held[i] += ", since " + b.QueryStart.Format(time.RFC3339)
		}
		held[i] += "): " + clip(oneLine(b.Query), 80)
	}
	return text + ", held by " + strings.Join(held, "; ") + "; nothing is cancelled"
}

// retentionText is the retention guard's last reading as a sentence.
func retentionText(r *trellis.Retention) string {
	text := fmt.Sprintf("the slot retains %s of WAL, --max-retained-wal %s", sizeText(r.RetainedBytes), sizeText(r.LimitBytes))
	if r.OverLimit {
		text = "OVER THE LIMIT: " + text
		if r.Since != nil {
			text += ", since " + r.Since.Format(time.RFC3339)
		}
	}
	return text
}

// sizeText writes a byte count with PostgreSQL's units (1 kB = 1024 B).
func sizeText(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// plainBar renders a progress bar without colours (for pipes and files).
func plainBar() func(float64) string { return plainBarModel().ViewAs }

func plainBarModel() progress.Model {
	return progress.New(progress.WithWidth(36), progress.WithColorProfile(termenv.Ascii))
}

type fetchFunc func(context.Context) (statusView, error)

// watchStatus refreshes the status every interval until ctx ends (or q on
// a terminal): in place on a terminal, else one frame after another.
func watchStatus(ctx context.Context, stdout io.Writer, fetch fetchFunc, interval time.Duration) error {
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(f.Fd()) {
		m := watchModel{ctx: ctx, fetch: fetch, interval: interval,
			bar: progress.New(progress.WithDefaultGradient(), progress.WithWidth(36))}
		_, err := tea.NewProgram(m, tea.WithContext(ctx), tea.WithOutput(f)).Run()
		if err != nil && (ctx.Err() != nil || errors.Is(err, tea.ErrProgramKilled)) {
			return nil
		}
		return err
	}
	bar := plainBar()
	for {
		v, err := fetch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "--- %s (every %s)\n", time.Now().Format(time.RFC3339), interval)
		if err != nil {
			fmt.Fprintf(&b, "%s (retrying)\n", errorLine(err))
		} else if err := renderStatus(&b, v, time.Now(), bar); err != nil {
			return err
		}
		if _, err := stdout.Write(b.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// watchModel is status --watch on a terminal (bubbletea): it fetches the
// status every interval and redraws it in place.
type watchModel struct {
	ctx      context.Context
	fetch    fetchFunc
	interval time.Duration
	bar      progress.Model

	v   statusView
	err error
	at  time.Time
}

type statusMsg struct {
	v   statusView
	err error
	at  time.Time
}

type tickMsg struct{}

func (m watchModel) load() tea.Msg {
	v, err := m.fetch(m.ctx)
	return statusMsg{v: v, err: err, at: time.Now()}
}

func (m watchModel) Init() tea.Cmd { return m.load }

func (m watchModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "esc", "ctrl+c":
			return m, tea.Quit
		}
	case tea.WindowSizeMsg:
		m.bar.Width = max(10, min(60, msg.Width/3))
	case statusMsg:
		m.v, m.err, m.at = msg.v, msg.err, msg.at
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.load
	}
	return m, nil
}

var headerStyle = lipgloss.NewStyle().Bold(true)

func (m watchModel) View() string {
	var b strings.Builder
	b.WriteString(headerStyle.Render(fmt.Sprintf("trellis-repl status, every %s (q quits)", m.interval)))
	if !m.at.IsZero() {
		b.WriteString("  " + m.at.Format("15:04:05"))
	}
	b.WriteString("\n")
	switch {
	case m.err != nil:
		fmt.Fprintf(&b, "%s (retrying)\n", errorLine(m.err))
	case m.at.IsZero():
		b.WriteString("reading the catalog…\n")
	default:
		_ = renderStatus(&b, m.v, time.Now(), m.bar.ViewAs)
	}
	return b.String()
}
