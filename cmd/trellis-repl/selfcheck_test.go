package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestSelfCheckCLI runs self-check with no runner attached: the command
// runs the job itself, cannot wait for convergence (a difference is
// not_caught_up, exit 3) and repairs with an applier of its own; without
// --wait it queues a job that --job reads. Bad input exits with a code
// and a sentence and queues nothing.
func TestSelfCheckCLI(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE items (id int PRIMARY KEY, kind text, price numeric);
		INSERT INTO items SELECT g, 'k' || (g % 3), g FROM generate_series(1, 30) g`)
	// Build the transform with a runner, then stop it.
	tr, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: t.TempDir(), ProgressInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Apply(ctx, `CREATE TRANSFORM priced AS SELECT id, kind, price * 2 AS p2 FROM items`); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tr.Run(runCtx) }()
	tok, err := tr.WatermarkToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.AwaitConverged(ctx, tok); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tr.Close()
	jobs := func() (n int) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM trellis.selfcheck_jobs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	code, out, stderr := cli("self-check", "--dsn", dsn, "priced", "--wait", "--page-size", "4")
	if code != 0 || !strings.Contains(out, "outcome: converged") || !strings.Contains(out, "no runner attached") {
		t.Fatalf("healthy: exit %d, stdout %q, stderr %q; want 0 and converged", code, out, stderr)
	}

	exec(`UPDATE priced SET p2 = 0 WHERE id = 4`)
	code, out, _ = cli("self-check", "--dsn", dsn, "priced", "--wait")
	if code != exitDiverged || !strings.Contains(out, "outcome: not_caught_up") || !strings.Contains(out, "cell") ||
		!strings.Contains(out, "id=4  column p2: stored 0, recomputed 8") {
		t.Fatalf("hand edit, no runner: exit %d, stdout %q; want exit 3, not_caught_up listing the cell", code, out)
	}

	code, out, stderr = cli("self-check", "--dsn", dsn, "priced", "--wait", "--repair", "--json")
	var j trellis.SelfCheckJob
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("--json: %v: %q (stderr %q)", err, out, stderr)
	}
	if code != 0 || j.Report == nil || j.Report.Repair == nil || j.Report.Repair.Fixed != 1 || j.Report.Repair.Remaining != 0 {
		t.Fatalf("repair: exit %d, job %s; want exit 0 and one divergence fixed", code, out)
	}

	code, out, _ = cli("self-check", "--dsn", dsn, "priced")
	m := regexp.MustCompile(`self-check job (\d+) of priced queued; .trellis-repl self-check --job (\d+).`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("without --wait: exit %d, stdout %q; want the queued job's id", code, out)
	}
	id := m[1]
	if code, out, _ = cli("self-check", "--dsn", dsn, "--job", id); code != 0 || !strings.Contains(out, "queued") {
		t.Errorf("--job %s: exit %d, stdout %q; want it queued (no runner)", id, code, out)
	}
	if code, out, _ = cli("self-check", "--dsn", dsn, "priced", "--job", id, "--wait"); code != 0 || !strings.Contains(out, "outcome: converged") {
		t.Errorf("--job %s --wait: exit %d, stdout %q; want it run here, converged", id, code, out)
	}

	before := jobs()
	for _, c := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"self-check", "--dsn", dsn, "nothere", "--wait"}, 1, `not_found: transform "nothere" does not exist; ` + "`trellis-repl status`"},
		{[]string{"self-check", "--dsn", dsn, "priced", "--timeout", "soon"}, 2, `validation: --timeout "soon" is not a duration; write it like 30s`},
		{[]string{"self-check", "--dsn", dsn, "priced", "--timeout", "-1s"}, 2, "validation: --timeout -1s is not positive"},
		{[]string{"self-check", "--dsn", dsn, "priced", "--page-size", "-3"}, 2, "validation: --page-size -3 is negative"},
		{[]string{"self-check", "--dsn", dsn}, 2, "validation: self-check needs a transform name"},
		{[]string{"self-check", "--dsn", dsn, "a", "b"}, 2, "validation: self-check takes one transform name"},
		{[]string{"self-check", "--dsn", dsn, "--job", "999999"}, 1, "not_found: self-check job 999999 does not exist"},
		{[]string{"self-check", "--dsn", dsn, "--job", id, "--strict"}, 2, "validation: --job reads a job that has its options; --strict"},
		{[]string{"self-check", "--dsn", dsn, "other", "--job", id}, 1, fmt.Sprintf(`not_found: self-check job %s is a check of transform "priced", not "other"`, id)},
		{[]string{"run", "--dsn", dsn, "--self-check-every", "-1h"}, 2, "validation: --self-check-every -1h0m0s is negative"},
		{[]string{"run", "--dsn", dsn, "--self-check-sample", "1.5"}, 2, "validation: --self-check-sample 1.5 is not a share of the target"},
		{[]string{"run", "--dsn", dsn, "--self-check-every", "often"}, 2, "validation: invalid value"},
	} {
		code, _, stderr := cli(c.args...)
		if code != c.code || !strings.Contains(stderr, c.contains) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", c.args[3:], code, stderr, c.code, c.contains)
		}
	}
	if n := jobs(); n != before {
		t.Errorf("%d jobs after bad input, %d before", n, before)
	}
}
