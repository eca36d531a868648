package trellis_test

// Restarts and reconnects (ADR 0014): PostgreSQL restarted (fast and
// immediate), the walsender and each of the runner's connections
// terminated, with a writer committing throughout. The runner — the CLI, as
// users run it — must still run afterwards, every target must equal its
// query once writes settle, status must show the runner attached, and the
// log must carry one warning per episode, not one per retry.

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// haRun is a `trellis-repl run` child process logging to a file, which the
// test reads while it runs.
type haRun struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startHARun(t *testing.T, bin string, args ...string) *haRun {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "run-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &haRun{t: t, cmd: cmd, log: f.Name(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(r.kill)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of runner %d:\n%s", r.pid(), r.text(0))
		}
	})
	return r
}

// pid is the runner's process id.
func (r *haRun) pid() int { return r.cmd.Process.Pid }

// alive fails the test if the runner has exited.
func (r *haRun) alive(when string) {
	r.t.Helper()
	select {
	case <-r.done:
		r.t.Fatalf("%s: the runner exited (%v); log:\n%s", when, r.cmd.ProcessState, r.text(0))
	default:
	}
}

func (r *haRun) kill() {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.done
	}
}

// text is the log from byte offset from on.
func (r *haRun) text(from int) string {
	b, err := os.ReadFile(r.log)
	if err != nil {
		r.t.Fatal(err)
	}
	if from > len(b) {
		return ""
	}
	return string(b[from:])
}

// size is the log's length, to read what a disruption logs.
func (r *haRun) size() int { return len(r.text(0)) }

// await waits until the log from offset from contains want.
func (r *haRun) await(from int, want string) {
	r.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(r.text(from), want) {
		r.alive("waiting for " + want)
		if time.Now().After(deadline) {
			r.t.Fatalf("the log never said %q:\n%s", want, r.text(from))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var (
	warnLine = regexp.MustCompile(`level=WARN msg=("(?:[^"\\]|\\.)*"|\S+)`)
	attrOf   = regexp.MustCompile(`transform=(\S+)`)
)

// warnings counts the log's warnings by message and transform.
func warnings(log string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		m := warnLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		key := strings.Trim(m[1], `"`)
		if a := attrOf.FindStringSubmatch(line); a != nil {
			key += " [" + a[1] + "]"
		}
		out[key]++
	}
	return out
}

// haSchema is the source and the two transforms of the tests here: a row
// transform and a GROUP BY with count, sum and max.
const haSchema = `CREATE TABLE orders (id int PRIMARY KEY, customer int NOT NULL, amount int NOT NULL);
INSERT INTO orders SELECT g, g % 7, g % 50 FROM generate_series(1, 300) g`

const haDefs = `CREATE TRANSFORM big_orders AS SELECT id, customer, amount * 2 AS doubled FROM orders WHERE amount > 10;
CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n, sum(amount) AS revenue, max(amount) AS top FROM orders GROUP BY customer`

// haEnv is an env whose own sessions are named trellis-test, so the
// runner's (named trellis-repl …) can be told from them.
func haEnv(t *testing.T, dsn string, cfg trellis.Config) *env {
	t.Helper()
	e := newEnvOn(t, withParam(dsn, "application_name", "trellis-test"), cfg)
	e.exec(haSchema)
	e.apply(haDefs)
	return e
}

// withParam adds a query parameter to a URL DSN.
func withParam(dsn, k, v string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + k + "=" + v
}

// haWriter commits single-row changes to orders until stopped, riding out
// outages (it reconnects after any error): writes go on while the runner
// reconnects.
type haWriter struct {
	stop    chan struct{}
	done    chan struct{}
	commits atomic.Int64
}

func startHAWriter(t *testing.T, dsn string, seed int64) *haWriter {
	w := &haWriter{stop: make(chan struct{}), done: make(chan struct{})}
	dsn = withParam(dsn, "application_name", "trellis-test-writer")
	go func() {
		defer close(w.done)
		rng := rand.New(rand.NewSource(seed))
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if conn == nil {
				c, err := pgx.Connect(ctx, dsn)
				if err != nil {
					cancel()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				conn = c
			}
			id := 1 + rng.Intn(400)
			var q string
			switch rng.Intn(4) {
			case 0:
				q = fmt.Sprintf(`INSERT INTO orders VALUES (%d, %d, %d) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount`, id, rng.Intn(9), rng.Intn(60))
			case 1:
				q = fmt.Sprintf(`UPDATE orders SET amount = amount + 3 WHERE id = %d`, id)
			case 2:
				q = fmt.Sprintf(`UPDATE orders SET customer = %d WHERE id = %d`, rng.Intn(9), id)
			case 3:
				q = fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
			}
			_, err := conn.Exec(ctx, q)
			cancel()
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				time.Sleep(50 * time.Millisecond)
				continue
			}
			w.commits.Add(1)
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// halt stops the writer and waits for it.
func (w *haWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// reopen replaces the env's own connection after a server restart.
func (e *env) reopen() {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		conn, err := pgx.Connect(context.Background(), e.dsn)
		if err == nil {
			old := e.conn
			e.conn = conn
			old.Close(context.Background())
			e.t.Cleanup(func() { conn.Close(context.Background()) })
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("reconnect after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitRunner waits until status shows a runner attached whose lock
// session is named for process pid (0: any), whose run started after
// since and which has sent a heartbeat since the call, and returns it.
func (e *env) awaitRunner(pid int, since time.Time) *trellis.RunnerStatus {
	e.t.Helper()
	called := time.Now()
	deadline := called.Add(waitTimeout)
	var last any
	for {
		st, err := e.tr.Status(context.Background())
		if err == nil && len(st) > 0 {
			r := st[0].Runner
			last = r
			if r.Attached && r.Since != nil && !r.Since.Before(since) && r.HeartbeatAt != nil && r.HeartbeatAt.After(called) &&
				(pid == 0 || strings.Contains(*r.ApplicationName, fmt.Sprintf("runner %d@", pid)) || strings.HasSuffix(*r.ApplicationName, fmt.Sprintf("runner %d", pid))) {
				return r
			}
		} else {
			last = err
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no runner of process %d attached since %s: %+v", pid, since.Format(time.RFC3339Nano), last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noFailures fails the test if a transform still reports a failure once
// it has converged: a failure of the connection is no lasting problem.
func (e *env) noFailures(when string) {
	e.t.Helper()
	st, err := e.tr.Status(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range st {
		if s.State != "live" || s.DrainFailure != nil || s.BackfillFailure != nil || s.CaptureFailure != nil {
			e.t.Errorf("%s: %s is %s with drain_failure %+v, backfill_failure %+v, capture_failure %+v",
				when, s.Name, s.State, s.DrainFailure, s.BackfillFailure, s.CaptureFailure)
		}
	}
}

// terminate ends the backends of the test's database that where selects
// (over pg_stat_activity) and reports how many it ended.
func (e *env) terminate(where string) int {
	e.t.Helper()
	var n int
	if err := e.conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND `+where).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// reconnectServers are the servers of TestReconnect, which restarts them:
// its own, so no other test's server is disturbed.
func reconnectServer(t *testing.T, mode string) *pgserver.Server {
	if mode == trellis.CaptureTrigger {
		return pgtest.ExtraServer(t, "reconnect wal_level=replica", map[string]string{"wal_level": "replica"})
	}
	return pgtest.ExtraServer(t, "reconnect", nil)
}

func TestReconnect(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	eachModeParallel(t, func(t *testing.T, mode string) { testReconnect(t, bin, mode) })
}

func testReconnect(t *testing.T, bin, mode string) {
	srv := reconnectServer(t, mode)
	dsn := pgtest.NewDatabaseOn(t, srv)
	e := haEnv(t, dsn, trellis.Config{})
	r := startHARun(t, bin, "run", "--dsn", dsn, "--data-dir", t.TempDir())
	e.converge("first build")
	e.awaitRunner(r.pid(), time.Time{})
	if !strings.Contains(r.text(0), "capture mode chosen\" mode="+mode) {
		t.Fatalf("the runner did not capture in %s mode:\n%s", mode, r.text(0))
	}
	ctx := context.Background()
	type disruption struct {
		name string
		do   func()
		// restarts: the run must be torn down and started again; else the
		// connection is recovered in place.
		restarts bool
		// warns is a warning the episode must log (once).
		warns string
	}
	var up time.Time // when a restarted server was back
	kill := func(where string) func() {
		return func() {
			if n := e.terminate(where); n == 0 {
				t.Fatalf("no session where %s", where)
			}
		}
	}
	ds := []disruption{
		{name: "appliers terminated", do: kill(`application_name LIKE 'trellis-repl applier%'`)},
		{name: "pool sessions terminated", do: kill(`application_name = 'trellis-repl' AND backend_type = 'client backend'`)},
		{name: "lock session terminated", do: kill(`application_name LIKE 'trellis-repl runner %'`), restarts: true,
			warns: "lost the connection to PostgreSQL; restarting the run"},
		{name: "fast restart", restarts: true, warns: "lost the connection to PostgreSQL; restarting the run", do: func() {
			if err := srv.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "immediate stop, start", restarts: true, warns: "lost the connection to PostgreSQL; restarting the run", do: func() {
			if err := srv.StopImmediate(ctx); err != nil {
				t.Fatal(err)
			}
			// Down long enough for several reconnect attempts.
			time.Sleep(3 * time.Second)
			if err := srv.Start(ctx); err != nil {
				t.Fatal(err)
			}
			up = time.Now()
		}},
	}
	if mode == trellis.CaptureLogical {
		ds = append([]disruption{{name: "walsender terminated", do: kill(`backend_type = 'walsender'`),
			warns: "replication connection lost; reconnecting"}}, ds...)
	} else {
		ds = append([]disruption{{name: "capture drain terminated", do: kill(`application_name = 'trellis-repl capture'`),
			warns: "trigger capture drain failed; retrying"}}, ds...)
	}
	for i, d := range ds {
		from := r.size()
		w := startHAWriter(t, dsn, int64(i))
		time.Sleep(300 * time.Millisecond)
		before := e.awaitRunner(r.pid(), time.Time{})
		at := time.Now()
		up = time.Time{}
		d.do()
		if d.restarts {
			e.reopen()
			r.await(from, `as="active runner"`) // msg="reconnected to PostgreSQL"
		}
		rs := e.awaitRunner(r.pid(), time.Time{})
		if d.restarts {
			rs = e.awaitRunner(r.pid(), at)
			msg := fmt.Sprintf("%s: run resumed %s after the disruption began", d.name, rs.Since.Sub(at).Round(time.Millisecond))
			if !up.IsZero() {
				msg += fmt.Sprintf(", %s after the server was back", rs.Since.Sub(up).Round(time.Millisecond))
			}
			t.Logf("%s", msg)
		} else if !rs.Since.Equal(*before.Since) {
			t.Errorf("%s: the run restarted (since %s, was %s); the connection should be recovered in place", d.name, rs.Since, before.Since)
		}
		// Writes go on after the recovery, then settle.
		time.Sleep(500 * time.Millisecond)
		w.halt()
		if w.commits.Load() == 0 {
			t.Fatalf("%s: the writer committed nothing", d.name)
		}
		e.converge(d.name)
		r.alive(d.name)
		e.awaitRunner(r.pid(), time.Time{})
		e.noFailures(d.name)
		log := r.text(from)
		warned := warnings(log)
		for k, n := range warned {
			if n > 1 {
				t.Errorf("%s: %q logged %d times; want one warning per episode:\n%s", d.name, k, n, log)
			}
		}
		if d.warns != "" && warned[d.warns] != 1 {
			t.Errorf("%s: want one warning %q, got %v:\n%s", d.name, d.warns, warned, log)
		}
		if !d.restarts && strings.Contains(log, "restarting the run") {
			t.Errorf("%s: the run restarted; the connection should be recovered in place:\n%s", d.name, log)
		}
		t.Logf("%s: %d commits; warnings %v", d.name, w.commits.Load(), warned)
	}
	if strings.Contains(r.text(0), "panic") {
		t.Fatalf("runner panicked:\n%s", r.text(0))
	}
}
