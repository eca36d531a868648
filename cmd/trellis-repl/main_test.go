package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// cli runs a command; stderr is its last line (the error, after any logs).
func cli(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	lines := strings.Split(strings.TrimSpace(e.String()), "\n")
	return code, o.String(), lines[len(lines)-1]
}

// syncBuffer is a bytes.Buffer a run may write while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCLI(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, kind text, price numeric)`); err != nil {
		t.Fatal(err)
	}

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{{}, {"frobnicate"}, {"apply", "--dsn", dsn}, {"apply", "--dsn", dsn, "-e", "x", "-f", "y"}, {"run", "--bogus"},
			{"run", "--dsn", dsn, "--coalesce-window", "-1s"}, {"run", "--dsn", dsn, "--store-sync-interval", "-5ms"},
			{"run", "--dsn", dsn, "--batch-size", "0"}, {"run", "--dsn", dsn, "--max-connections", "3"}, {"run", "--dsn", dsn, "--trigger-poll-interval", "0s"}, {"run", "--dsn", dsn, "--coalesce-window", "soon"}} {
			code, _, stderr := cli(args...)
			if code != 2 || !strings.HasPrefix(stderr, "validation: ") && len(args) > 0 {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and a validation sentence", args, code, stderr)
			}
		}
	})

	t.Run("apply errors carry a code", func(t *testing.T) {
		cases := []struct{ sql, code string }{
			{"CREATE TRANSFORM x AS SELECT id FROM missing", "not_found"},
			{"CREATE TRANSFORM x AS SELECT id FROM items LIMIT 3", "validation"},
			{"CREATE TRANSFORM x AS SELEC id FROM items", "validation"},
			{"DROP TRANSFORM nothere", "not_found"},
		}
		for _, c := range cases {
			code, _, stderr := cli("apply", "--dsn", dsn, "-e", c.sql)
			if code != 1 || !strings.HasPrefix(stderr, c.code+": ") {
				t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", c.sql, code, stderr, c.code+": ")
			}
		}
		code, _, stderr := cli("apply", "--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "-e", "PAUSE TRANSFORM x")
		if code != 1 || !strings.HasPrefix(stderr, "unavailable: ") {
			t.Errorf("unreachable server: exit %d, stderr %q", code, stderr)
		}
		code, _, stderr = cli("apply", "--dsn", dsn, "-f", "/nonexistent/defs.sql")
		if code != 1 || !strings.HasPrefix(stderr, "not_found: ") {
			t.Errorf("missing file: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("apply, run, status", func(t *testing.T) {
		f, err := os.CreateTemp(t.TempDir(), "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(`-- definitions
CREATE TRANSFORM cheap AS SELECT id, upper(kind) AS kind FROM items WHERE price < 10;
CREATE TRANSFORM kinds AS SELECT kind, count(*) AS n, max(price) AS top FROM items GROUP BY kind;`)
		f.Close()
		code, out, stderr := cli("apply", "--dsn", dsn, "-f", f.Name())
		if code != 0 || !strings.Contains(out, "CREATE TRANSFORM cheap: created") {
			t.Fatalf("apply: exit %d, out %q, err %q", code, out, stderr)
		}
		t.Setenv("TRELLIS_DATABASE_URL", dsn)
		if code, _, stderr := cli("apply", "-e", "CREATE TRANSFORM IF NOT EXISTS cheap AS SELECT id FROM items"); code != 0 {
			t.Fatalf("apply with TRELLIS_DATABASE_URL: %d %s", code, stderr)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		var runErr bytes.Buffer
		go func() {
			done <- runWithContext(runCtx, []string{"run", "--data-dir", t.TempDir(), "--metrics-addr", addr, "--log-level", "warn"}, io.Discard, &runErr)
		}()
		if _, err := conn.Exec(ctx, `INSERT INTO items SELECT g, 'k' || (g % 3), g FROM generate_series(1, 50) g`); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		var st []map[string]any
		for {
			code, out, stderr := cli("status", "--json")
			if code != 0 {
				t.Fatalf("status: %d %s", code, stderr)
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status --json is not a JSON array: %v\n%s", err, out)
			}
			var n int
			conn.QueryRow(ctx, `SELECT count(*) FROM cheap`).Scan(&n)
			if len(st) == 2 && st[0]["state"] == "live" && st[1]["state"] == "live" && n == 9 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("transforms did not go live: %v (run stderr: %s)", st, runErr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, k := range []string{"name", "state", "capture_failure", "held_keys", "backfill_failure", "capture_wait", "applied_lsn", "slot_name", "capture_mode", "runner"} {
			if _, ok := st[0][k]; !ok {
				t.Errorf("status --json lacks %q: %v", k, st[0])
			}
		}
		if st[0]["capture_failure"] != nil || st[0]["capture_mode"] != "logical" {
			t.Errorf("status: %v", st[0])
		}
		code, out, _ = cli("status", "cheap")
		if code != 0 || !strings.Contains(out, "cheap") || !strings.Contains(out, "live") || strings.Contains(out, "kinds") {
			t.Errorf("status cheap: %d %q", code, out)
		}
		if code, _, stderr := cli("status", "nope"); code != 1 || !strings.HasPrefix(stderr, "not_found: ") {
			t.Errorf("status nope: %d %q", code, stderr)
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, m := range []string{"trellis_confirmed_lsn_bytes{", "trellis_transform_keys_applied_total{transform=\"cheap\",trellis_instance=", "trellis_slot_confirm_lag_bytes{"} {
			if !strings.Contains(string(body), m) {
				t.Errorf("metrics lack %s", m)
			}
		}
		// A second runner for the same instance waits as a standby (status
		// lists it) until stopped.
		standbyCtx, stopStandby := context.WithCancel(ctx)
		var standbyLog syncBuffer
		standbyDone := make(chan int, 1)
		go func() {
			standbyDone <- runWithContext(standbyCtx, []string{"run", "--data-dir", t.TempDir()}, io.Discard, &standbyLog)
		}()
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, out, _ := cli("status", "--json")
			var st []struct {
				Runner struct {
					Attached    bool  `json:"attached"`
					StandbyPIDs []int `json:"standby_pids"`
				} `json:"runner"`
			}
			_ = json.Unmarshal([]byte(out), &st)
			if strings.Contains(standbyLog.String(), "waiting as standby") && len(st) > 0 && st[0].Runner.Attached && len(st[0].Runner.StandbyPIDs) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("second run is not a standby: status %s\nlog:\n%s", out, standbyLog.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code, out, _ := cli("status"); code != 0 || !strings.Contains(out, "runner: attached") || !strings.Contains(out, "standby backend pids") {
			t.Errorf("status table lacks the runner line: %q", out)
		}
		stopStandby()
		if c := <-standbyDone; c != 0 {
			t.Errorf("standby run exited %d: %s", c, standbyLog.String())
		}
		cancel()
		if c := <-done; c != 0 {
			t.Fatalf("run exited %d: %s", c, runErr.String())
		}
		if code, out, _ := cli("apply", "-e", "PAUSE TRANSFORM cheap; DROP TRANSFORM kinds"); code != 0 || !strings.Contains(out, "paused") {
			t.Errorf("pause/drop: %d %q", code, out)
		}
	})

	t.Run("capture mode and sizes are validated", func(t *testing.T) {
		code, _, stderr := cli("run", "--dsn", dsn, "--capture", "triggers", "--data-dir", t.TempDir())
		if code != 1 || !strings.HasPrefix(stderr, "validation: ") || !strings.Contains(stderr, "use auto, logical or trigger") {
			t.Errorf("--capture triggers: %d %q", code, stderr)
		}
		code, _, stderr = cli("run", "--dsn", dsn, "--max-retained-wal", "10XB", "--data-dir", t.TempDir())
		if code != 2 || !strings.Contains(stderr, "--max-retained-wal") {
			t.Errorf("--max-retained-wal 10XB: %d %q", code, stderr)
		}
	})

	t.Run("run --capture trigger", func(t *testing.T) {
		// The instance ran logical capture above: this run switches.
		if code, _, stderr := cli("apply", "--dsn", dsn, "-e", "RESUME TRANSFORM cheap"); code != 0 {
			t.Fatalf("resume: %s", stderr)
		}
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		var runErr bytes.Buffer
		done := make(chan int, 1)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		// Only the instance's series: none per transform (issue 25).
		go func() {
			done <- runWithContext(runCtx, []string{"run", "--dsn", dsn, "--capture", "trigger", "--data-dir", t.TempDir(), "--log-level", "warn",
				"--metrics-addr", addr, "--metrics-per-transform=false"}, io.Discard, &runErr)
		}()
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, out, stderr := cli("status", "--dsn", dsn, "--json")
			if code != 0 {
				t.Fatalf("status: %d %s", code, stderr)
			}
			var st []map[string]any
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatal(err)
			}
			if len(st) > 0 && st[0]["capture_mode"] == "trigger" && st[0]["state"] == "live" && st[0]["slot_name"] == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no live transform in trigger mode: %v (run stderr: %s)", st, runErr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The one transform live, counted in the instance's totals.
		live := regexp.MustCompile(`(?m)^trellis_transforms_in_state\{state="live",trellis_instance="[^"]+"\} 1$`)
		for {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `transform="`) {
				t.Fatalf("--metrics-per-transform=false exports series per transform:\n%s", body)
			}
			if live.Match(body) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/metrics does not count the live transform:\n%s", body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		if c := <-done; c != 0 {
			t.Fatalf("run exited %d: %s", c, runErr.String())
		}
	})
}

// TestHeldKeysCLI: held lists the keys a target refused, release
// re-derives them, quarantine reports the state; bad input gets a code.
func TestHeldKeysCLI(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	t.Setenv("TRELLIS_DATABASE_URL", dsn)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		`CREATE TABLE items (id int PRIMARY KEY, price numeric)`,
		`INSERT INTO items SELECT g, g FROM generate_series(1, 20) g`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := cli("apply", "-e", "CREATE TRANSFORM priced AS SELECT id, price FROM items"); code != 0 {
		t.Fatal(stderr)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE priced ADD CONSTRAINT under_15 CHECK (price < 15)`); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	var runErr bytes.Buffer
	go func() {
		done <- runWithContext(runCtx, []string{"run", "--data-dir", t.TempDir(), "--log-level", "warn"}, io.Discard, &runErr)
	}()
	var held []map[string]any
	deadline := time.Now().Add(60 * time.Second)
	for len(held) != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("held keys %v; want five of 15..20, then the fuse (run: %s)", held, runErr.String())
		}
		time.Sleep(100 * time.Millisecond)
		code, out, stderr := cli("held", "--json")
		if code != 0 {
			t.Fatalf("held: %d %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &held); err != nil {
			t.Fatalf("held --json: %v\n%s", err, out)
		}
	}
	if held[0]["transform"] != "priced" || held[0]["sqlstate"] != "23514" || held[0]["src_table"] != `"public"."items"` {
		t.Errorf("held entry %v", held[0])
	}
	if code, out, _ := cli("held", "priced", "--limit", "4"); code != 0 || strings.Count(out, "\npriced ") != 4 || !strings.Contains(out, "--after") {
		t.Errorf("held priced --limit 4: %d %q", code, out)
	}
	if code, out, _ := cli("quarantine", "priced"); code != 0 || !strings.Contains(out, "quarantined") {
		t.Errorf("quarantine priced (5 keys held, the fuse): %d %q", code, out)
	}
	for _, c := range []struct {
		args []string
		exit int
		code string
	}{
		{[]string{"release", "priced", "items", "3"}, 1, "not_found"},
		{[]string{"release", "priced", "items"}, 2, "validation"},
		{[]string{"release", "priced", "items", "3", "4"}, 1, "validation"},
		{[]string{"release", "nosuch", "items", "3"}, 1, "not_found"},
		{[]string{"held", "--since", "yesterday"}, 2, "validation"},
		{[]string{"held", "priced", "--after", "x"}, 1, "validation"},
	} {
		if code, _, stderr := cli(c.args...); code != c.exit || !strings.HasPrefix(stderr, c.code+": ") {
			t.Errorf("%v: exit %d, %q; want %d %s", c.args, code, stderr, c.exit, c.code)
		}
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE priced DROP CONSTRAINT under_15`); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := cli("release", "priced", "items", "15"); code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("release: %d %q %s", code, out, stderr)
	}
	if code, out, stderr := cli("release", "--all", "priced"); code != 0 || !strings.Contains(out, "released 4 keys") {
		t.Fatalf("release --all: %d %q %s", code, out, stderr)
	}
	if code, out, _ := cli("held"); code != 0 || !strings.Contains(out, "no keys held") {
		t.Errorf("held after release: %d %q", code, out)
	}
	if code, _, stderr := cli("apply", "-e", "RESUME TRANSFORM priced"); code != 0 {
		t.Fatal(stderr)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		var diff int
		var state string
		conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM (SELECT id, price FROM items EXCEPT SELECT id, price FROM priced) d), `+
			`(SELECT state FROM trellis.transforms WHERE name = 'priced')`).Scan(&diff, &state)
		if diff == 0 && state == "live" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("priced not rebuilt after RESUME: %d rows missing, state %s", diff, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, out, _ := cli("quarantine"); code != 0 || !strings.Contains(out, "no transform is quarantined") {
		t.Errorf("quarantine: %d %q", code, out)
	}
	cancel()
	if c := <-done; c != 0 {
		t.Fatalf("run exited %d: %s", c, runErr.String())
	}
}
