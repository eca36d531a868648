package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// cliAll runs a command and returns its whole stderr.
func cliAll(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = runWithContext(ctx, args, &o, &e)
	return code, o.String(), e.String()
}

// asUser is dsn with another user and password.
func asUser(t *testing.T, dsn, user, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// withRoles creates roles on dsn's server (cluster-wide: the names must be
// this test's own) and drops them, with their privileges in this
// database, at the end.
func withRoles(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var roles []string
	for _, s := range stmts {
		if f := strings.Fields(s); len(f) > 2 && f[0] == "CREATE" && f[1] == "ROLE" {
			roles = append(roles, f[2])
		}
	}
	drop := func(c *pgx.Conn) {
		for _, r := range roles {
			_, _ = c.Exec(ctx, `DROP OWNED BY `+r)
			_, _ = c.Exec(ctx, `DROP ROLE IF EXISTS `+r)
		}
	}
	drop(conn)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			drop(c)
			c.Close(ctx)
		}
	})
}

// TestCLIConventions: every command's --help exits 0 with its usage and
// flags on stdout; version; flags from TRELLIS_<FLAG>, a flag given
// winning, a bad value a usage error naming the variable.
func TestCLIConventions(t *testing.T) {
	for _, cmd := range []string{"apply", "run", "status", "definitions", "await", "doctor", "held", "release", "quarantine", "version", "bench"} {
		for _, h := range []string{"--help", "-h"} {
			code, out, stderr := cli(cmd, h)
			if code != 0 || !strings.Contains(out, "usage: trellis-repl "+cmd) || !strings.Contains(out, "TRELLIS_<FLAG>") ||
				cmd != "version" && !strings.Contains(out, "-dsn") {
				t.Errorf("%s %s: exit %d, stderr %q, stdout:\n%s", cmd, h, code, stderr, out)
			}
		}
	}
	if code, out, _ := cli("version"); code != 0 || !strings.HasPrefix(out, "trellis-repl ") || !strings.Contains(out, "commit ") {
		t.Errorf("version: %d %q", code, out)
	}
	unreachable := "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--json", "--check"}, "--json, --check and --watch exclude each other"},
		{[]string{"status", "--watch", "--json"}, "--json, --check and --watch exclude each other"},
		{[]string{"status", "--check", "--max-lag", "-1s"}, "--max-lag must not be negative"},
		{[]string{"status", "--watch=1ms"}, "not an interval of at least 100ms"},
		{[]string{"await", "--timeout", "soon"}, `invalid value "soon" for flag -timeout`},
		{[]string{"version", "extra"}, "version takes no arguments"},
		{[]string{"definitions", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		args := c.args
		if args[0] != "version" {
			args = append(args, "--dsn", unreachable)
		}
		code, _, stderr := cli(args...)
		if code != 2 || !strings.HasPrefix(stderr, "validation: ") || !strings.Contains(stderr, c.want) ||
			!strings.Contains(stderr, "trellis-repl "+c.args[0]+" --help") {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
	for _, c := range []struct {
		env, value string
		args       []string
		exit       int
		want       string // in the last stderr line
	}{
		{"TRELLIS_MAX_LAG", "soon", []string{"status", "--check", "--dsn", unreachable}, 2, "TRELLIS_MAX_LAG"},
		{"TRELLIS_MAX_LAG", "soon", []string{"status", "--check", "--max-lag", "1s", "--dsn", unreachable}, 1, "unavailable: "},
		{"TRELLIS_BATCH_SIZE", "0", []string{"run", "--dsn", unreachable}, 2, "--batch-size"},
		{"TRELLIS_BATCH_SIZE", "many", []string{"run", "--dsn", unreachable}, 2, `TRELLIS_BATCH_SIZE="many" is not a valid --batch-size (a whole number)`},
		{"TRELLIS_LOG_FORMAT", "xml", []string{"run", "--dsn", unreachable}, 2, `--log-format "xml"`},
		{"TRELLIS_WATCH", "often", []string{"status", "--dsn", unreachable}, 2, "TRELLIS_WATCH"},
		{"TRELLIS_TIMEOUT", "-1s", []string{"await", "--dsn", unreachable}, 2, "--timeout must not be negative"},
		{"TRELLIS_DATABASE_URL", unreachable, []string{"definitions"}, 1, "unavailable: "},
		{"TRELLIS_BENCH_SCENARIOS", "nope", []string{"bench"}, 2, `unknown scenario "nope"`},
		// An instance's variables do not reach bench.
		{"TRELLIS_CAPTURE", "trigger", []string{"bench", "--scenarios", "nope"}, 2, `unknown scenario "nope"`},
	} {
		t.Run(c.env+"="+c.value, func(t *testing.T) {
			t.Setenv(c.env, c.value)
			code, _, stderr := cli(c.args...)
			if code != c.exit || !strings.Contains(stderr, c.want) {
				t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, stderr, c.exit, c.want)
			}
		})
	}
}

// TestReadOnlyCommands: the reading commands create nothing (an absent
// instance schema is not_found, naming the instances there are) and work
// for a role with pg_monitor and USAGE and SELECT on the instance schema.
func TestReadOnlyCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schemas := func() string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(nspname, ',' ORDER BY nspname), '') FROM pg_namespace
			WHERE nspname NOT LIKE 'pg\_%' AND nspname NOT IN ('information_schema', 'public')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	reading := [][]string{{"status"}, {"status", "--json"}, {"status", "--check"}, {"definitions"}, {"held"}, {"quarantine"}, {"await", "--timeout", "1s"}}
	for _, args := range reading {
		args := append(append([]string{}, args...), "--dsn", dsn, "--schema", "typo")
		code, _, stderr := cli(args...)
		if code != 1 || !strings.HasPrefix(stderr, `not_found: instance schema "typo" does not exist on this database; pass --schema NAME`) ||
			!strings.Contains(stderr, "no trellis-repl instance") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
	if s := schemas(); s != "" {
		t.Fatalf("reading commands created schemas: %s", s)
	}
	for _, s := range []string{`CREATE TABLE items (id int PRIMARY KEY, price int)`, `INSERT INTO items VALUES (1, 5), (2, 50)`, `CREATE SCHEMA notaninstance`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := cli("apply", "--dsn", dsn, "-e", "CREATE TRANSFORM dear AS SELECT id, price FROM items WHERE price > 10"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := cli("status", "--dsn", dsn, "--schema", "typo"); code != 1 || !strings.Contains(stderr, "instances on this database: trellis") {
		t.Errorf("status --schema typo with an instance: %d %q", code, stderr)
	}
	if code, _, stderr := cli("status", "--dsn", dsn, "--schema", "notaninstance"); code != 1 ||
		!strings.HasPrefix(stderr, `not_found: schema "notaninstance" on this database holds no trellis-repl catalog`) {
		t.Errorf("status --schema notaninstance: %d %q", code, stderr)
	}
	if s := schemas(); s != "notaninstance,trellis" {
		t.Fatalf("schemas %s after reading", s)
	}

	withRoles(t, dsn,
		`CREATE ROLE ops_reader LOGIN PASSWORD 'reader-pw'`,
		`GRANT pg_monitor TO ops_reader`,
		`GRANT USAGE ON SCHEMA trellis TO ops_reader`,
		`GRANT SELECT ON ALL TABLES IN SCHEMA trellis TO ops_reader`,
		`CREATE ROLE ops_stranger LOGIN PASSWORD 'stranger-pw'`)
	reader := asUser(t, dsn, "ops_reader", "reader-pw")
	for _, c := range []struct {
		args []string
		exit int
		want string // in stdout (exit 0, 3) or the last stderr line
	}{
		{[]string{"status"}, 0, "dear"},
		{[]string{"status", "--json"}, 0, `"name": "dear"`},
		{[]string{"status", "--check"}, 3, "runner: not attached"},
		{[]string{"definitions", "dear"}, 0, `sources: "public"."items"`},
		{[]string{"held"}, 0, "no keys held"},
		{[]string{"held", "dear"}, 0, "no keys held"},
		{[]string{"quarantine"}, 0, "no transform is quarantined"},
		{[]string{"quarantine", "dear"}, 0, "waiting_to_backfill"},
		{[]string{"await", "--timeout", "300ms"}, 3, `timeout: timed out waiting for convergence`},
		{[]string{"await", "--timeout", "300ms", "nosuch"}, 1, `not_found: transform "nosuch" does not exist`},
		{[]string{"release", "--all", "dear"}, 1, "permission denied"},
	} {
		code, out, stderr := cli(append(c.args, "--dsn", reader)...)
		got := stderr
		if c.exit == 0 || c.exit == 3 && c.args[0] == "status" {
			got = out
		}
		if code != c.exit || !strings.Contains(got, c.want) {
			t.Errorf("%v as ops_reader: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, stderr, c.exit, c.want)
		}
	}
	if code, _, stderr := cli("await", "--timeout", "300ms", "--dsn", reader, "dear"); code != 3 ||
		!strings.Contains(stderr, "still behind: dear (waiting_to_backfill)") || !strings.Contains(stderr, "no runner is attached to instance trellis") {
		t.Errorf("await dear without a runner: %d %q", code, stderr)
	}
	code, _, stderr := cli("status", "--dsn", asUser(t, dsn, "ops_stranger", "stranger-pw"))
	if code != 1 || !strings.HasPrefix(stderr, `validation: role "ops_stranger" may not read instance schema "trellis"`) ||
		!strings.Contains(stderr, `GRANT USAGE ON SCHEMA "trellis" TO "ops_stranger"`) {
		t.Errorf("status as a role without grants: %d %q", code, stderr)
	}

	// Reading refuses a catalog older than the binary reads, and does not
	// upgrade it.
	if _, err := conn.Exec(ctx, `DELETE FROM trellis.schema_migrations WHERE version = (SELECT max(version) FROM trellis.schema_migrations)`); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("status", "--dsn", dsn); code != 1 || !strings.HasPrefix(stderr, "conflict: ") || !strings.Contains(stderr, "older than this binary reads") {
		t.Errorf("status on an old catalog: %d %q", code, stderr)
	}
	if code, _, stderr := cli("apply", "--dsn", dsn, "-e", "PAUSE TRANSFORM dear"); code != 0 {
		t.Fatalf("apply upgrades the catalog: %s", stderr)
	}
	if code, out, _ := cli("status", "--dsn", dsn, "--check"); code != 3 || !strings.Contains(out, "dear: paused by a user") {
		t.Errorf("status --check of a paused transform: %d %q", code, out)
	}
	if code, _, stderr := cli("await", "--timeout", "1s", "--dsn", dsn, "dear"); code != 3 || !strings.Contains(stderr, `conflict: transform "dear" cannot converge: paused by a user`) {
		t.Errorf("await of a paused transform: %d %q", code, stderr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestStatusBuildAwaitLogs runs `run` as a role whose DSN carries a
// password, with JSON logs at debug level: status shows a build's
// progress (an advisory lock holds it part way), --watch redraws it, await
// names what is behind and then converges, definitions lists sources and
// states, and nothing the CLI wrote to stdout or stderr, in logs or
// errors, on a lost connection or a wrong port, shows the password.
func TestStatusBuildAwaitLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := pgtest.NewDatabase(t)
	const pw = "Pw-9f3kq-never-logged"
	withRoles(t, admin, `CREATE ROLE ops_pw LOGIN SUPERUSER PASSWORD '`+pw+`'`)
	dsn := asUser(t, admin, "ops_pw", pw)
	var seen bytes.Buffer // everything the CLI printed
	cmd := func(args ...string) (int, string, string) {
		code, out, stderr := cliAll(ctx, append(args, "--dsn", dsn)...)
		seen.WriteString(out + stderr)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		return code, out, lines[len(lines)-1]
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// gate waits, at key 150001 (in the build's fourth range chunk of
	// 50,000, ADR 0020), for the advisory lock the test holds.
	for _, s := range []string{`CREATE TABLE nums (id int PRIMARY KEY, n int)`, `INSERT INTO nums SELECT g, g % 7 FROM generate_series(1, 200000) g`,
		`ANALYZE nums`, `CREATE FUNCTION gate(v int, k int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
		BEGIN IF k = 150001 THEN PERFORM pg_advisory_xact_lock_shared(4242); END IF; RETURN v; END $$`, `SELECT pg_advisory_lock(4242)`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := cmd("apply", "-e", `CREATE TRANSFORM big AS SELECT id, gate(n, id) AS n FROM nums;
		CREATE TRANSFORM sevens AS SELECT n, count(*) AS c FROM big GROUP BY n`); code != 0 {
		t.Fatal(stderr)
	}
	runCtx, cancel := context.WithCancel(ctx)
	runLog := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runWithContext(runCtx, []string{"run", "--dsn", dsn, "--data-dir", t.TempDir(), "--log-format", "json", "--log-level", "debug",
			"--progress-interval", "100ms"}, io.Discard, runLog)
	}()
	var runExit *int
	stop := func() int {
		if runExit == nil {
			cancel()
			c := <-done
			runExit = &c
		}
		return *runExit
	}
	defer stop()

	type status struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Build *struct {
			RowsDone   int64      `json:"rows_done"`
			RowsTotal  *int64     `json:"rows_total"`
			StartedAt  time.Time  `json:"started_at"`
			FinishedAt *time.Time `json:"finished_at"`
		} `json:"build"`
		LagSeconds *float64 `json:"lag_seconds"`
	}
	statusOf := func() map[string]status {
		code, out, stderr := cmd("status", "--json")
		if code != 0 {
			t.Fatalf("status --json: %d %s", code, stderr)
		}
		var st []status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		m := map[string]status{}
		for _, s := range st {
			m[s.Name] = s
		}
		return m
	}
	var big status
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		big = statusOf()["big"]
		if big.State == "backfilling" && big.Build != nil && big.Build.RowsDone == 150000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("build of big not held at 150000 rows: %+v (run log:\n%s)", big, runLog.String())
		}
	}
	if b := big.Build; b.RowsTotal == nil || *b.RowsTotal < 150000 || *b.RowsTotal > 250000 || b.FinishedAt != nil || time.Since(b.StartedAt) > time.Minute {
		t.Errorf("build progress %+v; want about 200000 rows in all, started just now, not finished", *b)
	}
	code, out, _ := cmd("status")
	if code != 0 || !strings.Contains(out, "building big: ") || !strings.Contains(out, "150000/") || !strings.Contains(out, "ETA") ||
		!strings.Contains(out, "CAPTURE") || !strings.Contains(out, "logical") {
		t.Errorf("status table:\n%s", out)
	}
	// Long enough for two frames on a loaded machine, where a status
	// read can take most of a second (the build is held meanwhile).
	watchCtx, endWatch := context.WithTimeout(ctx, 5*time.Second)
	var watched bytes.Buffer
	if code := runWithContext(watchCtx, []string{"status", "--dsn", dsn, "--watch=200ms"}, &watched, io.Discard); code != 0 {
		t.Errorf("status --watch: exit %d", code)
	}
	endWatch()
	seen.Write(watched.Bytes())
	if w := watched.String(); strings.Count(w, "--- ") < 2 || strings.Count(w, "building big: ") < 2 || !strings.Contains(w, "75%") {
		t.Errorf("status --watch=200ms for 5s:\n%s", w)
	}
	if code, _, stderr := cmd("await", "--timeout", "500ms", "sevens"); code != 3 ||
		!strings.Contains(stderr, "still behind: big (backfilling)") || !strings.Contains(stderr, "has not caught up") {
		t.Errorf("await sevens while big builds: %d %q", code, stderr)
	}

	// The runner loses its connections: the log says so once, not once
	// per attempt, and shows no password.
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'trellis-repl%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	// The build may or may not walk this row (it counts 200000 or 200001).
	if _, err := conn.Exec(ctx, `INSERT INTO nums VALUES (200001, 6)`); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := cmd("await", "--timeout", "60s", "sevens"); code != 0 || !strings.Contains(out, "converged: sevens reflects every write committed before") {
		t.Fatalf("await sevens: %d %q %q (run log:\n%s)", code, out, stderr, runLog.String())
	}
	var c int
	if err := conn.QueryRow(ctx, `SELECT c FROM sevens WHERE n = 6`).Scan(&c); err != nil || c != 28572 {
		t.Errorf("sevens after await: n=6 counts %d (%v), want 28572", c, err)
	}
	big = statusOf()["big"]
	if b := big.Build; big.State != "live" || b == nil || b.RowsDone < 200000 || b.RowsDone > 200001 || b.FinishedAt == nil || big.LagSeconds == nil {
		t.Errorf("big after its build: %+v %+v", big, b)
	}
	if code, out, _ := cmd("await", "--timeout", "10s"); code != 0 || !strings.Contains(out, "converged: every transform") {
		t.Errorf("await (all): %d %q", code, out)
	}
	if code, out, _ := cmd("status", "--check"); code != 0 || !strings.HasPrefix(out, "ok: 2 transforms") {
		t.Errorf("status --check with everything live: %d %q", code, out)
	}
	code, out, _ = cmd("definitions", "--json")
	var defs []trellis.Definition
	if err := json.Unmarshal([]byte(out), &defs); code != 0 || err != nil || len(defs) != 2 ||
		defs[1].Name != "sevens" || defs[1].State != "live" || strings.Join(defs[1].Sources, ",") != `"public"."big"` {
		t.Errorf("definitions --json: %d %v %s", code, err, out)
	}
	if code, _, stderr := cmd("definitions", "big", "nosuch"); code != 1 || !strings.HasPrefix(stderr, `not_found: transform "nosuch" does not exist`) {
		t.Errorf("definitions nosuch: %d %q", code, stderr)
	}
	if c := stop(); c != 0 {
		t.Errorf("run exited %d", c)
	}
	if code, out, _ := cmd("status", "--check"); code != 3 || !strings.Contains(out, "runner: not attached") {
		t.Errorf("status --check without a runner: %d %q", code, out)
	}

	// Errors that quote or follow a connection string.
	host := must(url.Parse(dsn)).Hostname()
	for _, args := range [][]string{
		{"run", "--dsn", "postgres://ops_pw:" + pw + "@" + host + ":1/x?connect_timeout=2", "--data-dir", t.TempDir(), "--log-format", "json"},
		{"status", "--dsn", "postgres://ops_pw:" + pw + "@" + host + ":notaport/x"},
		{"status", "--dsn", "postgres://ops_pw:" + pw + "@" + host + "/x?sslmode=bogus"},
		{"apply", "--dsn", "host=" + host + " port=1 user=ops_pw password=" + pw + " connect_timeout=2", "-e", "PAUSE TRANSFORM big"},
		{"await", "--dsn", "host=" + host + " port=1 user=ops_pw password='" + pw + "' connect_timeout=2"},
	} {
		code, out, stderr := cliAll(ctx, args...)
		seen.WriteString(out + stderr)
		if code != 1 {
			t.Errorf("%v: exit %d: %s", args[:1], code, stderr)
		}
	}

	logs := runLog.String()
	if strings.Contains(logs, pw) || strings.Contains(seen.String(), pw) {
		t.Fatalf("the password was printed:\n%s\n%s", logs, seen.String())
	}
	lost := 0
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("--log-format json wrote a line that is no JSON object: %q", l)
		}
		if rec["level"] == "WARN" && strings.Contains(rec["msg"].(string), "lost") {
			lost++
		}
	}
	if lost == 0 || lost > 3 {
		t.Errorf("%d warnings about lost connections for one outage; want one per connection that lost it:\n%s", lost, logs)
	}
}
