package main

import (
	"bytes"
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/redact"
)

func ptr[T any](v T) *T { return &v }

// TestStatusProblems: what status --check reports, one line per problem.
func TestStatusProblems(t *testing.T) {
	attached := &trellis.RunnerStatus{Attached: true}
	ok := trellis.TransformStatus{Name: "ok", State: "live", LagSeconds: ptr(0.5), Runner: attached}
	cases := []struct {
		name string
		st   trellis.TransformStatus
		want string // "" for no problem
	}{
		{"live", ok, ""},
		{"paused by a user", trellis.TransformStatus{Name: "p", State: "paused", PausedBy: ptr("user"), Runner: attached}, "p: paused by a user; RESUME TRANSFORM p rebuilds it"},
		{"paused by the system", trellis.TransformStatus{Name: "p", State: "paused", PausedBy: ptr("system"), Runner: attached,
			CaptureFailure: &trellis.Failure{Kind: "halt", Error: "boom"}}, "p: paused by the system (halt: boom)"},
		{"quarantined", trellis.TransformStatus{Name: "q", State: "quarantined", HeldKeys: &trellis.HeldKeys{Count: 5}, Runner: attached}, "q: quarantined, holding 5 keys"},
		{"held keys", trellis.TransformStatus{Name: "h", State: "live", HeldKeys: &trellis.HeldKeys{Count: 2}, Runner: attached}, "h: holds 2 keys"},
		{"lagging", trellis.TransformStatus{Name: "l", State: "live", LagSeconds: ptr(90.0), KeysWaiting: 7, Runner: attached}, "l: lags 1m30s (more than --max-lag 1m0s) with 7 keys waiting"},
		{"drain failure", trellis.TransformStatus{Name: "d", State: "live", Runner: attached,
			DrainFailure: &trellis.DrainFailure{Attempts: 3, Error: "deadlock"}}, "d: applying changes fails since"},
		{"backfill failure", trellis.TransformStatus{Name: "b", State: "backfilling", Runner: attached,
			BackfillFailure: &trellis.BackfillFailure{Attempts: 2, LastError: "disk full"}}, "b: building fails (2 attempts): disk full"},
		{"capture wait", trellis.TransformStatus{Name: "w", State: "waiting_to_backfill", Runner: attached,
			CaptureWait: &trellis.CaptureWait{Statement: "ALTER PUBLICATION p ADD TABLE t;"}}, "w: capture waits for the owner of the publication to run: ALTER PUBLICATION p ADD TABLE t;"},
		{"no runner", trellis.TransformStatus{Name: "n", State: "live", Runner: &trellis.RunnerStatus{}}, "runner: not attached"},
		{"disrupted, no runner on the new server yet", trellis.TransformStatus{Name: "x", State: trellis.StateDisrupted, Runner: attached,
			Disruption: &trellis.DisruptionStatus{Reason: "the primary changed (promoted standby, timeline 1 → 2)", Action: trellis.DisruptionUnseen}},
			"x: the primary changed (promoted standby, timeline 1 → 2); no runner has started on this server since: start `trellis-repl run`"},
		{"repairing in place", trellis.TransformStatus{Name: "r", State: "backfilling", Runner: attached,
			Disruption: &trellis.DisruptionStatus{Reason: "the database was copied", Action: trellis.DisruptionRepairing}}, ""},
		{"retention over the limit", trellis.TransformStatus{Name: "ok", State: "live", Runner: &trellis.RunnerStatus{Attached: true,
			Retention: &trellis.Retention{RetainedBytes: 3 << 30, LimitBytes: 2 << 30, OverLimit: true}}},
			"runner: OVER THE LIMIT: the slot retains 3.0 GB of WAL, --max-retained-wal 2.0 GB"},
		{"retention under the limit", trellis.TransformStatus{Name: "ok", State: "live", Runner: &trellis.RunnerStatus{Attached: true,
			Retention: &trellis.Retention{RetainedBytes: 1 << 20, LimitBytes: 2 << 30}}}, ""},
		{"capture removal waits", trellis.TransformStatus{Name: "ok", State: "live", Runner: &trellis.RunnerStatus{Attached: true,
			CaptureWaits: []trellis.CaptureWait{{Table: "public.gone", Operation: "uninstall", LockMode: "AccessExclusiveLock"}}}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := strings.Join(statusProblems([]trellis.TransformStatus{c.st}, time.Minute), "\n")
			if c.want == "" && got != "" || !strings.Contains(got, c.want) || c.want != "" && strings.Count(got, "\n") > 0 {
				t.Errorf("problems %q; want one line with %q", got, c.want)
			}
		})
	}
}

// TestBuildLine: the progress of a build, with the ETA at the rate so far.
func TestBuildLine(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	bar := plainBar()
	building := func(done int64, total *int64) trellis.TransformStatus {
		return trellis.TransformStatus{Name: "big", State: "backfilling",
			Build: &trellis.BuildProgress{RowsDone: done, RowsTotal: total, StartedAt: now.Add(-30 * time.Second)}}
	}
	for _, c := range []struct {
		st   trellis.TransformStatus
		want []string
	}{
		{building(25000, ptr(int64(100000))), []string{"building big: ", " 25%", "25000/100000 rows (estimated), 30s elapsed, ETA 1m30s"}},
		{building(0, ptr(int64(100000))), []string{"  0%", "ETA unknown"}},
		{building(120, ptr(int64(100))), []string{"100%", "120/120 rows"}},
		{building(5, nil), []string{"5 rows, 30s elapsed (no estimate of the total)"}},
		{func() trellis.TransformStatus {
			st := building(50, ptr(int64(100)))
			st.Disruption = &trellis.DisruptionStatus{Reason: "the primary changed", Action: trellis.DisruptionRepairing}
			return st
		}(), []string{"repairing big in place: ", " 50%"}},
	} {
		got := buildLine(c.st, now, bar)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("buildLine(%+v) = %q; want %q", *c.st.Build, got, w)
			}
		}
	}
	live := building(10, ptr(int64(10)))
	live.State, live.Build.FinishedAt = "live", ptr(now)
	if got := buildLine(live, now, bar); got != "" {
		t.Errorf("a finished build shows %q", got)
	}
}

func TestWatchFlag(t *testing.T) {
	var w watchFlag
	for in, want := range map[string]time.Duration{"true": defaultWatch, "500ms": 500 * time.Millisecond, "1m": time.Minute} {
		if err := w.Set(in); err != nil || !w.on || w.interval != want {
			t.Errorf("Set(%q): %v %+v", in, err, w)
		}
	}
	for _, in := range []string{"often", "10ms", "-1s"} {
		if err := w.Set(in); err == nil {
			t.Errorf("Set(%q) accepted", in)
		}
	}
}

// TestRemovalWaitLine: the runner's capture removals waiting for a lock
// are printed below the runner line, with the sessions holding it, also
// when no transform is left.
func TestRemovalWaitLine(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	runner := &trellis.RunnerStatus{Attached: true, PID: ptr(41), ApplicationName: ptr("trellis-repl run"), StandbyPIDs: []int{},
		CaptureWaits: []trellis.CaptureWait{{Table: "public.gone", Operation: "uninstall", LockMode: "ShareUpdateExclusiveLock",
			Since: now.Add(-90 * time.Second), Blockers: []trellis.CaptureBlocker{{PID: 77, ApplicationName: "app", State: "idle in transaction",
				QueryStart: ptr(now.Add(-2 * time.Minute)), Query: "LOCK TABLE gone\n  IN SHARE UPDATE EXCLUSIVE MODE"}}}}}
	var b bytes.Buffer
	if err := renderStatus(&b, statusView{st: []trellis.TransformStatus{}, runner: runner}, now, plainBar()); err != nil {
		t.Fatal(err)
	}
	want := "capture removal: uninstall waits for a ShareUpdateExclusiveLock lock on public.gone since 2026-12-01T09:59:00Z (1m30s), " +
		"held by pid 77 (app, idle in transaction, since 2026-12-01T09:58:30Z): LOCK TABLE gone IN SHARE UPDATE EXCLUSIVE MODE; nothing is cancelled"
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "runner: attached, backend pid 41") || lines[1] != want ||
		!strings.Contains(b.String(), "no transforms") {
		t.Errorf("status:\n%s\nwant the runner line, then\n%s", b.String(), want)
	}
}

// TestWatchModel drives the terminal view without a terminal: it loads,
// renders and quits on q.
func TestWatchModel(t *testing.T) {
	st := []trellis.TransformStatus{{Name: "big", State: "backfilling", AppliedLSN: "0/0", Runner: &trellis.RunnerStatus{},
		Build: &trellis.BuildProgress{RowsDone: 50, RowsTotal: ptr(int64(100)), StartedAt: time.Now().Add(-time.Second)}}}
	m := watchModel{ctx: context.Background(), interval: time.Second, bar: plainBarModel(),
		fetch: func(context.Context) (statusView, error) { return statusView{st: st, runner: st[0].Runner}, nil }}
	if v := m.View(); !strings.Contains(v, "reading the catalog") {
		t.Errorf("before the first load: %q", v)
	}
	next, cmd := m.Update(m.Init()())
	if cmd == nil {
		t.Error("no refresh scheduled after a load")
	}
	if v := next.View(); !strings.Contains(v, "building big: ") || !strings.Contains(v, "50%") || !strings.Contains(v, "NOT ATTACHED") {
		t.Errorf("view:\n%s", v)
	}
	next, _ = next.Update(statusMsg{err: &trellis.Error{Code: trellis.CodeUnavailable, Msg: "lost it"}, at: time.Now()})
	if v := next.View(); !strings.Contains(v, "unavailable: lost it (retrying)") {
		t.Errorf("view after an error:\n%s", v)
	}
	if _, cmd := next.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}); cmd == nil || cmd() != tea.Quit() {
		t.Error("q does not quit")
	}
}

// TestLoggerMasks: the run logger masks passwords in messages and
// attributes, in text and JSON, and leaves other values as they are.
func TestLoggerMasks(t *testing.T) {
	m := redact.New("s3cret-pw")
	for _, format := range []string{"text", "json"} {
		var b bytes.Buffer
		lf := logFlags{format: format, level: "debug"}
		log, err := lf.logger(&b, m)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("connect to postgres://app:s3cret-pw@db/shop failed", "err", errors.New("auth s3cret-pw"), "dsn", "host=db password=other",
			"columns", []string{"a", "b"}, "n", 3)
		if out := b.String(); strings.Contains(out, "s3cret") || strings.Contains(out, "other") || !strings.Contains(out, "a b") && !strings.Contains(out, `["a","b"]`) {
			t.Errorf("%s log: %s", format, out)
		}
	}
	if _, err := (&logFlags{format: "xml", level: "info"}).logger(&bytes.Buffer{}, m); err == nil {
		t.Error("--log-format xml accepted")
	}
	if _, err := (&logFlags{format: "text", level: "loud"}).logger(&bytes.Buffer{}, m); err == nil {
		t.Error("--log-level loud accepted")
	}
}

func TestEnvNameAndVersion(t *testing.T) {
	for _, c := range [][3]string{{"run", "max-retained-wal", "TRELLIS_MAX_RETAINED_WAL"}, {"status", "dsn", "TRELLIS_DATABASE_URL"},
		{"bench", "dsn", "TRELLIS_BENCH_DSN"}, {"bench", "build-rows", "TRELLIS_BENCH_BUILD_ROWS"}} {
		if got := envName(c[0], c[1]); got != c[2] {
			t.Errorf("envName(%s, %s) = %s, want %s", c[0], c[1], got, c[2])
		}
	}
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}}
	if got := versionLine(bi, true); !strings.HasPrefix(got, "trellis-repl v1.2.3 (commit abc123, modified, 2026-12-01T10:00:00Z) go") {
		t.Errorf("versionLine = %q", got)
	}
	if got := versionLine(nil, false); !strings.HasPrefix(got, "trellis-repl (devel) (commit unknown) go") {
		t.Errorf("versionLine without build info = %q", got)
	}
}
