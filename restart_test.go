package trellis_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/clibuild"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// cliBuild is the trellis-repl binary the tests run as a child process:
// built on first use, once per test binary (linking it takes seconds of
// CPU, and eight tests and subtests ask for it), and removed by TestMain
// when the tests are done.
type cliBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// cli is the test binary's build; package state because TestMain, which
// removes it, has no other way to reach what the tests made.
var cli cliBuild

// buildCLI returns the trellis-repl binary: make test's (TRELLIS_TEST_CLI),
// else one built on the first call.
func buildCLI(t *testing.T) string {
	t.Helper()
	cli.once.Do(func() {
		if cli.dir, cli.err = os.MkdirTemp("", "trellis-test-cli-"); cli.err != nil {
			return
		}
		cli.bin, cli.err = clibuild.Build(context.Background(), cli.dir)
	})
	if cli.err != nil {
		t.Fatalf("build CLI: %v", cli.err)
	}
	return cli.bin
}

// remove deletes the binary's directory (TestMain, after the tests).
func (c *cliBuild) remove() {
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// runner is a `trellis-repl run` child process.
type runner struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func startCLI(t *testing.T, bin string, args ...string) *runner {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &runner{cmd: cmd, out: &out}
	t.Cleanup(func() { r.kill() })
	return r
}

func (r *runner) kill() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		_ = r.cmd.Wait()
	}
}

// killModes are the runs of the kill -9 tests: logical capture in both
// confirm modes, and trigger capture (a server with wal_level=replica,
// see newEnv), where the confirm mode has no slot to confirm.
var killModes = []struct{ name, confirm, capture string }{
	{trellis.ConfirmLocal, trellis.ConfirmLocal, ""},
	{trellis.ConfirmApplied, trellis.ConfirmApplied, ""},
	{trellis.CaptureTrigger, trellis.ConfirmLocal, trellis.CaptureTrigger},
}

// TestKillNineMidStream kills the runner process with SIGKILL while
// changes stream and applies run, restarts it, and checks exact
// convergence with no double counting, in both confirm modes.
func TestKillNineMidStream(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	var subs []subtest // each mode on a database of its own
	for _, m := range killModes {
		subs = append(subs, subtest{m.name, func(t *testing.T) {
			confirm := m.confirm
			e := newEnv(t, trellis.Config{Confirm: confirm, Capture: m.capture})
			e.exec(schemaSQL)
			e.apply(defsSQL)
			dir := t.TempDir()
			args := []string{"run", "--dsn", e.dsn, "--data-dir", dir, "--confirm", confirm}
			rng := rand.New(rand.NewSource(11))
			for round := 0; round < 4; round++ {
				r := startCLI(t, bin, args...)
				done := make(chan struct{})
				go func() {
					defer close(done)
					time.Sleep(time.Duration(200+rng.Intn(800)) * time.Millisecond)
					r.kill()
				}()
				workload(e, rng, 30, 50)
				<-done
			}
			r := startCLI(t, bin, args...)
			e.converge("after SIGKILL restarts")
			workload(e, rng, 10, 20)
			e.converge("after more writes")
			r.kill()
			if strings.Contains(r.out.String(), "panic") {
				t.Fatalf("runner panicked:\n%s", r.out)
			}
		}})
	}
	atOnce(t, subs...)
}

// TestStoreLost deletes the local checkpoint store between runs.
func TestStoreLost(t *testing.T) {
	t.Parallel()
	atOnce(t, subtest{"applied converges", func(t *testing.T) {
		dir := t.TempDir()
		e := newEnv(t, trellis.Config{Confirm: trellis.ConfirmApplied, DataDir: dir})
		e.exec(schemaSQL)
		e.apply(defsSQL)
		e.start()
		rng := rand.New(rand.NewSource(3))
		workload(e, rng, 10, 20)
		e.converge("first run")
		e.stop()
		workload(e, rng, 10, 20)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		e.start()
		workload(e, rng, 10, 20)
		e.converge("after losing the store")
	}}, subtest{"local pauses with disruption", func(t *testing.T) {
		dir := t.TempDir()
		e := newEnv(t, trellis.Config{DataDir: dir})
		e.exec(schemaSQL)
		e.apply(defsSQL)
		e.start()
		rng := rand.New(rand.NewSource(4))
		workload(e, rng, 5, 20)
		e.converge("first run")
		e.stop()
		workload(e, rng, 5, 20)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		e.start()
		ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
		defer cancel()
		tok, _ := e.tr.WatermarkToken(ctx)
		err := e.tr.AwaitConverged(ctx, tok)
		if trellis.CodeOf(err) != trellis.CodeConflict || !strings.Contains(err.Error(), "disruption") {
			t.Fatalf("AwaitConverged after losing the store: %v, want a conflict naming the disruption", err)
		}
		st, err := e.tr.Status(ctx, "big_orders")
		if err != nil {
			t.Fatal(err)
		}
		if st[0].State != catalog.StatePaused || st[0].CaptureFailure == nil || st[0].CaptureFailure.Kind != "disruption" {
			t.Fatalf("status after losing the store: %+v", st[0])
		}
		e.apply(`RESUME TRANSFORM big_orders; RESUME TRANSFORM by_customer; RESUME TRANSFORM totals`)
		e.converge("after RESUME rebuilds")
	}})
}

// TestVisibleBeforeRederived holds a writer's commit in flight (it is in
// the WAL and decoded, but not yet visible, as under synchronous
// replication) and checks the target does not keep the old state.
func TestVisibleBeforeRederived(t *testing.T) {
	srv := pgtest.Server(t)
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders VALUES (1, 1, 'new', 50, 1, NULL)`)
	e.apply(defsSQL)
	e.start()
	e.converge("before")
	ctx := context.Background()
	e.exec(`ALTER SYSTEM SET synchronous_standby_names = 'trellis_never_connects'`)
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		e.exec(`ALTER SYSTEM RESET synchronous_standby_names`)
		if err := srv.Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer release()
	writer, err := pgxConnect(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	committed := make(chan error, 1)
	go func() {
		_, err := writer.Exec(ctx, `SET synchronous_commit = on; UPDATE orders SET amount = 500, customer = 2 WHERE id = 1`)
		committed <- err
	}()
	// Wait until the runner has received the held transaction.
	time.Sleep(300 * time.Millisecond)
	var walLSN string
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walLSN); err != nil {
		t.Fatal(err)
	}
	want, _ := catalog.ParseLSN(walLSN)
	deadline := time.Now().Add(waitTimeout)
	for {
		var recv *string
		if err := e.conn.QueryRow(ctx, `SELECT received_lsn::text FROM trellis.instance`).Scan(&recv); err != nil {
			t.Fatal(err)
		}
		if recv != nil {
			if v, _ := catalog.ParseLSN(*recv); v >= want {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner never received the held transaction")
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case err := <-committed:
		t.Fatalf("the held commit returned early (%v): synchronous replication did not hold it", err)
	default:
	}
	var amount string
	if err := e.conn.QueryRow(ctx, `SELECT total::text FROM big_orders WHERE id = 1`).Scan(&amount); err != nil {
		t.Fatal(err)
	}
	if amount != "50.00" {
		t.Fatalf("target shows %s while the commit is still invisible", amount)
	}
	release()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	e.converge("after the held commit became visible")
}

// copyDir copies a checkpoint store directory (the runner is stopped).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// TestStaleStoreReplays restores an older copy of the checkpoint store, so
// changes already applied are delivered and re-derived a second time.
func TestStaleStoreReplays(t *testing.T) {
	t.Parallel()
	atOnce(t, subtest{"applied replays without double counting", func(t *testing.T) {
		dir, old := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "old")
		e := newEnv(t, trellis.Config{Confirm: trellis.ConfirmApplied, DataDir: dir})
		e.exec(schemaSQL)
		e.apply(defsSQL)
		e.start()
		rng := rand.New(rand.NewSource(5))
		workload(e, rng, 5, 20)
		e.converge("first run")
		e.stop()
		copyDir(t, dir, old)
		e.start()
		workload(e, rng, 10, 20)
		e.converge("second run")
		e.stop()
		copyDir(t, old, dir)
		e.start()
		workload(e, rng, 5, 20)
		e.converge("after restoring an older store")
	}}, subtest{"local is a disruption", func(t *testing.T) {
		dir, old := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "old")
		e := newEnv(t, trellis.Config{DataDir: dir})
		e.exec(schemaSQL)
		e.apply(defsSQL)
		e.start()
		rng := rand.New(rand.NewSource(6))
		workload(e, rng, 5, 20)
		e.converge("first run")
		e.stop()
		copyDir(t, dir, old)
		e.start()
		workload(e, rng, 10, 20)
		e.converge("second run")
		e.waitSlotConfirmed()
		e.stop()
		copyDir(t, old, dir)
		e.start()
		ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
		defer cancel()
		tok, _ := e.tr.WatermarkToken(ctx)
		if err := e.tr.AwaitConverged(ctx, tok); !strings.Contains(fmt.Sprint(err), "stale") {
			t.Fatalf("AwaitConverged with a stale store: %v, want a disruption naming the stale checkpoint", err)
		}
		e.apply(`RESUME TRANSFORM big_orders; RESUME TRANSFORM by_customer; RESUME TRANSFORM totals`)
		e.converge("after RESUME")
	}})
}

// waitSlotConfirmed waits until the slot is confirmed up to the current
// WAL position, so an older store copy is really behind the slot.
func (e *env) waitSlotConfirmed() {
	e.t.Helper()
	ctx := context.Background()
	var now string
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&now); err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		var ok bool
		if err := e.conn.QueryRow(ctx, `SELECT coalesce(bool_and(confirmed_flush_lsn >= $1::pg_lsn), false)
			FROM pg_replication_slots WHERE slot_name = (SELECT slot_name FROM trellis.instance)`, now).Scan(&ok); err != nil {
			e.t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the slot was never confirmed up to the current position")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
