package trellis_test

import (
	"context"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestTriggerCapture asks for trigger capture on a server where logical
// replication works: no slot or publication is made, status says trigger
// and why, a long transaction open across drains loses nothing, and
// dropping the transforms removes the triggers and functions.
func TestTriggerCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvOn(t, pgtest.NewDatabase(t), trellis.Config{Capture: trellis.CaptureTrigger})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 200) g`)
	e.apply(defsSQL)
	e.start()
	e.converge("after build")
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.CaptureMode == nil || *s.CaptureMode != trellis.CaptureTrigger || s.CaptureReason == nil || *s.CaptureReason != "--capture=trigger was given" {
			t.Fatalf("%s: capture_mode = %v (%v), want trigger because it was given", s.Name, s.CaptureMode, s.CaptureReason)
		}
	}
	var slots, pubs int
	if err := e.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE database = current_database()), (SELECT count(*) FROM pg_publication)`).Scan(&slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if slots+pubs != 0 {
		t.Fatalf("trigger capture created %d replication slot(s) and %d publication(s)", slots, pubs)
	}

	// A transaction open across many drains and ring rotations: its rows
	// are taken when it commits, the others' meanwhile.
	lc, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(ctx)
	long, err := lc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, `INSERT INTO orders VALUES (5000, 3, 'paid', 77, 2, 'long')`); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	workload(e, rng, 20, 10)
	e.converge("with a transaction open")
	time.Sleep(2500 * time.Millisecond) // past two ring rotations
	workload(e, rng, 5, 10)
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.converge("after the long transaction committed")
	var n int
	if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM big_orders WHERE id = 5000`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the long transaction's row is in big_orders %d times, want once", n)
	}

	e.apply(`DROP TRANSFORM big_orders; DROP TRANSFORM by_customer; DROP TRANSFORM totals;`)
	deadline := time.Now().Add(waitTimeout)
	for {
		var trig, funcs int
		if err := e.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass),
			(SELECT count(*) FROM pg_proc WHERE proname LIKE 'capture\_%')`).Scan(&trig, &funcs); err != nil {
			t.Fatal(err)
		}
		if trig+funcs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d capture trigger(s) and %d function(s) left after every transform was dropped", trig, funcs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCaptureWaitsForLock holds a lock on the source that capture's install
// conflicts with: status shows capture_wait naming the holding session,
// nothing is cancelled, and once it lets go capture installs and the
// transform goes live. Both capture modes.
func TestCaptureWaitsForLock(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		ctx := context.Background()
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(schemaSQL)
		e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 50) g`)
		holder, pid := lockHolder(t, e, "lock-holder")
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE orders IN SHARE MODE`); err != nil {
			t.Fatal(err)
		}
		e.apply(`CREATE TRANSFORM big_orders AS SELECT o.id, o.amount FROM orders o WHERE o.amount > 10`)
		e.start()
		s := waitStatus(t, e, "big_orders", "waiting for the lock", func(s trellis.TransformStatus) bool {
			return s.CaptureWait != nil && len(s.CaptureWait.Blockers) > 0
		})
		w, b := s.CaptureWait, s.CaptureWait.Blockers[0]
		if w.Operation != "install" || !strings.Contains(w.Table, "orders") || w.LockMode == "" || w.Since.IsZero() ||
			b.PID != pid || b.ApplicationName != "lock-holder" || s.State == "live" {
			t.Fatalf("capture_wait %+v (state %s), want an install on orders blocked by pid %d (lock-holder)", *w, s.State, pid)
		}
		// The runner's reconcile and heartbeat go on while the install
		// waits (a removal never waits behind it).
		waitStatus(t, e, "big_orders", "a later heartbeat while the install waits", func(s2 trellis.TransformStatus) bool {
			return s2.CaptureWait != nil && s2.Runner.HeartbeatAt != nil && s.Runner.HeartbeatAt != nil &&
				s2.Runner.HeartbeatAt.After(s.Runner.HeartbeatAt.Add(time.Second))
		})
		// Nothing was cancelled: the holder's transaction is still usable.
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM orders`); err != nil {
			t.Fatalf("the lock holder's transaction was disturbed: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		e.exec(`UPDATE orders SET amount = amount + 20 WHERE id <= 10`)
		e.converge("after the lock was released")
		st, err := e.tr.Status(ctx, "big_orders")
		if err != nil {
			t.Fatal(err)
		}
		if st[0].CaptureWait != nil || st[0].State != "live" {
			t.Fatalf("after the wait: capture_wait %+v, state %s; want none, live", st[0].CaptureWait, st[0].State)
		}
	})
}

// TestCaptureWaitsForPartitionLock: trigger capture on a partitioned
// source creates its triggers on every partition, so a session holding a
// lock on one partition blocks the install; capture_wait names that
// session although it holds nothing on the root.
func TestCaptureWaitsForPartitionLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, trellis.Config{Capture: trellis.CaptureTrigger})
	e.exec(`CREATE TABLE m (id int, r int, v int, PRIMARY KEY (id, r)) PARTITION BY LIST (r)`)
	e.exec(`CREATE TABLE m0 PARTITION OF m FOR VALUES IN (0)`)
	e.exec(`CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1)`)
	e.exec(`INSERT INTO m SELECT g, g % 2, g FROM generate_series(1, 20) g`)
	holder, pid := lockHolder(t, e, "partition-holder")
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE m1 IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	e.apply(`CREATE TRANSFORM mt AS SELECT id, r, v FROM m WHERE v > 3`)
	e.start()
	s := waitStatus(t, e, "mt", "waiting for the partition's lock", func(s trellis.TransformStatus) bool {
		return s.CaptureWait != nil && len(s.CaptureWait.Blockers) > 0
	})
	if b := s.CaptureWait.Blockers[0]; s.CaptureWait.Operation != "install" || b.PID != pid || b.ApplicationName != "partition-holder" {
		t.Fatalf("capture_wait %+v, want an install blocked by pid %d (partition-holder)", *s.CaptureWait, pid)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE m SET v = v + 10 WHERE id <= 6`)
	e.converge("after the partition's lock was released")
	st, err := e.tr.Status(ctx, "mt")
	if err != nil {
		t.Fatal(err)
	}
	if st[0].CaptureWait != nil || st[0].State != "live" {
		t.Fatalf("after the wait: capture_wait %+v, state %s; want none, live", st[0].CaptureWait, st[0].State)
	}
}

// lockHolder opens a session named app that a test takes locks in, closed
// when the test ends, and returns it with its backend pid.
func lockHolder(t *testing.T, e *env, app string) (*pgx.Conn, int) {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(ctx) })
	if _, err := holder.Exec(ctx, "SET application_name = "+pgx.Identifier{app}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return holder, pid
}

// waitRunner polls the instance's runner status until ok accepts it.
func waitRunner(t *testing.T, e *env, what string, ok func(*trellis.RunnerStatus) bool) *trellis.RunnerStatus {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		r, err := e.tr.Runner(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s; runner %+v", what, *r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCaptureRemovalWaitsForLock: removing capture from a table no
// transform reads any more (after DROP TRANSFORM) while another session
// holds a lock that conflicts with the removal (SHARE UPDATE EXCLUSIVE:
// DROP TRIGGER needs ACCESS EXCLUSIVE, ALTER PUBLICATION … DROP TABLE
// SHARE UPDATE EXCLUSIVE; the application's reads and writes go on beside
// it). The runner's capture_waits names the holder, nothing is cancelled,
// the application never queues for long, the runner keeps its heartbeat;
// a transform reading the table again clears the wait, and once the
// holder lets go capture is removed and the wait clears. Both modes.
func TestCaptureRemovalWaitsForLock(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		ctx := context.Background()
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(schemaSQL)
		e.exec(`CREATE TABLE other (id int PRIMARY KEY, v int)`)
		e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 50) g`)
		e.exec(`INSERT INTO other SELECT g, g FROM generate_series(1, 10) g`)
		e.apply(`CREATE TRANSFORM big_orders AS SELECT o.id, o.amount FROM orders o WHERE o.amount > 10;
			CREATE TRANSFORM others AS SELECT id, v FROM other`)
		e.start()
		e.converge("built")
		captured := func() int {
			t.Helper()
			var n int
			if err := e.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal)
				+ (SELECT count(*) FROM pg_publication_rel WHERE prrelid = 'orders'::regclass)`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if captured() == 0 {
			t.Fatal("orders is not captured while big_orders reads it")
		}
		waitRunner := func(what string, ok func(*trellis.RunnerStatus) bool) *trellis.RunnerStatus {
			t.Helper()
			return waitRunner(t, e, what, ok)
		}
		holder, pid := lockHolder(t, e, "lock-holder")
		lockMode := "ShareUpdateExclusiveLock"
		if mode == trellis.CaptureTrigger {
			lockMode = "AccessExclusiveLock"
		}
		blockedBy := func(pid int) func(*trellis.RunnerStatus) bool {
			return func(r *trellis.RunnerStatus) bool {
				return len(r.CaptureWaits) == 1 && len(r.CaptureWaits[0].Blockers) > 0 && r.CaptureWaits[0].Blockers[0].PID == pid
			}
		}
		hold := func() pgx.Tx {
			t.Helper()
			tx, err := holder.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `LOCK TABLE orders IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		tx := hold()
		e.apply(`DROP TRANSFORM big_orders`)

		// The wait, as status shows it (another transform carries the runner).
		var r *trellis.RunnerStatus
		deadline := time.Now().Add(waitTimeout)
		for {
			st, err := e.tr.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st) == 1 && st[0].Name == "others" && st[0].Runner != nil && blockedBy(pid)(st[0].Runner) {
				r = st[0].Runner
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never showed the removal waiting for lock-holder (pid %d): %+v", pid, st)
			}
			time.Sleep(50 * time.Millisecond)
		}
		w, b := r.CaptureWaits[0], r.CaptureWaits[0].Blockers[0]
		if w.Operation != "uninstall" || w.Table != `"public"."orders"` || w.LockMode != lockMode || w.Since.IsZero() ||
			b.ApplicationName != "lock-holder" || b.State != "idle in transaction" || !strings.Contains(b.Query, "LOCK TABLE orders") {
			t.Fatalf("capture_waits %+v; want an uninstall of public.orders waiting for %s, blocked by pid %d (lock-holder)", r.CaptureWaits, lockMode, pid)
		}
		if captured() == 0 {
			t.Fatal("capture was removed from orders while the lock was held")
		}

		// The application reads and writes as the lock allows, never queued
		// behind the removal for long; the runner's heartbeat goes on.
		if _, err := e.conn.Exec(ctx, `SET statement_timeout = '5s'`); err != nil {
			t.Fatal(err)
		}
		for i := range 15 {
			start := time.Now()
			if _, err := e.conn.Exec(ctx, `UPDATE orders SET qty = qty + 1 WHERE id = $1`, i+1); err != nil {
				t.Fatalf("the application's write beside the waiting removal: %v", err)
			}
			var n int
			if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
				t.Fatalf("the application's read beside the waiting removal: %v", err)
			}
			if d := time.Since(start); d > 1500*time.Millisecond {
				t.Fatalf("a write and a read took %s beside the waiting removal: the application queued behind it", d)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := e.conn.Exec(ctx, `RESET statement_timeout`); err != nil {
			t.Fatal(err)
		}
		again := waitRunner("refreshed the wait", func(r2 *trellis.RunnerStatus) bool {
			return blockedBy(pid)(r2) && r2.HeartbeatAt != nil && r.HeartbeatAt != nil && r2.HeartbeatAt.After(r.HeartbeatAt.Add(time.Second))
		})
		if !again.CaptureWaits[0].Since.Equal(w.Since) {
			t.Fatalf("the wait's since moved from %s to %s while it went on", w.Since, again.CaptureWaits[0].Since)
		}
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatalf("the lock holder's transaction was disturbed: %v", err)
		}

		// Read again: the wait clears and capture stays.
		e.apply(`CREATE TRANSFORM big_again AS SELECT o.id, o.qty FROM orders o WHERE o.qty > 1`)
		waitRunner("cleared the wait once orders is read again", func(r *trellis.RunnerStatus) bool { return len(r.CaptureWaits) == 0 })
		if captured() == 0 {
			t.Fatal("capture was removed from orders although big_again reads it")
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		e.exec(`UPDATE orders SET qty = qty + 1 WHERE id <= 5`)
		e.converge("with orders read again")

		// No transform left: the instance's runner still shows the wait,
		// which ends when the holder commits.
		tx = hold()
		e.apply(`DROP TRANSFORM big_again; DROP TRANSFORM others`)
		r = waitRunner("showed the removal waiting again", blockedBy(pid))
		if st, err := e.tr.Status(ctx); err != nil || len(st) != 0 {
			t.Fatalf("status with no transform: %v %v", st, err)
		}
		if !r.CaptureWaits[0].Since.After(w.Since) {
			t.Fatalf("the new wait's since %s is not after the first one's %s", r.CaptureWaits[0].Since, w.Since)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		waitRunner("cleared the wait after the lock was let go", func(r *trellis.RunnerStatus) bool { return len(r.CaptureWaits) == 0 })
		if n := captured(); n != 0 {
			t.Fatalf("orders is still captured (%d triggers and publication memberships) after the removal got its lock", n)
		}
	})
}

// TestSwitchRemovalWaitsForLock switches from trigger capture to logical
// replication while a reader holds ACCESS SHARE on the source, which the
// triggers' removal (ACCESS EXCLUSIVE) conflicts with: the switch goes
// through, the transform stays live on the slot, the removal waits in the
// runner's capture_waits, and once the reader ends reconcile removes the
// triggers and the capture log.
func TestSwitchRemovalWaitsForLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvOn(t, pgtest.NewDatabase(t), trellis.Config{Capture: trellis.CaptureTrigger})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 50) g`)
	e.apply(`CREATE TRANSFORM big_orders AS SELECT o.id, o.amount FROM orders o WHERE o.amount > 10`)
	e.start()
	e.converge("built with triggers")
	e.stop()
	reader, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	var pid int
	if err := reader.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM orders`); err != nil {
		t.Fatal(err)
	}
	left := func() (triggers, logs int) {
		t.Helper()
		if err := e.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal),
			(SELECT count(*) FROM pg_class WHERE relname = 'capture_log')`).Scan(&triggers, &logs); err != nil {
			t.Fatal(err)
		}
		return triggers, logs
	}
	e.cfg.Capture = trellis.CaptureLogical
	e.tr.Close()
	e.open()
	e.start()
	r := waitRunner(t, e, "showed the triggers' removal waiting for the reader", func(r *trellis.RunnerStatus) bool {
		return len(r.CaptureWaits) == 1 && len(r.CaptureWaits[0].Blockers) > 0 && r.CaptureWaits[0].Blockers[0].PID == pid
	})
	if w := r.CaptureWaits[0]; w.Operation != "uninstall" || w.LockMode != "AccessExclusiveLock" || w.Table != `"public"."orders"` {
		t.Fatalf("capture_waits %+v; want the uninstall of public.orders waiting for AccessExclusiveLock", r.CaptureWaits)
	}
	e.exec(`UPDATE orders SET amount = amount + 20 WHERE id <= 10`)
	e.converge("on the slot, the triggers still in place")
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st[0].CaptureMode == nil || *st[0].CaptureMode != trellis.CaptureLogical || st[0].State != "live" {
		t.Fatalf("after the switch: %s is %s in capture mode %v; want live, logical", st[0].Name, st[0].State, st[0].CaptureMode)
	}
	if trig, _ := left(); trig == 0 {
		t.Fatal("the triggers were removed while the reader held its lock")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitRunner(t, e, "cleared the wait once the reader ended", func(r *trellis.RunnerStatus) bool { return len(r.CaptureWaits) == 0 })
	deadline := time.Now().Add(waitTimeout)
	for {
		trig, logs := left()
		if trig+logs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d trigger(s) and %d capture log(s) left after the reader ended", trig, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.exec(`UPDATE orders SET amount = amount - 20 WHERE id <= 10`)
	e.converge("after the triggers were removed")
}

// TestCaptureSwitch switches the capture mode twice while writers keep
// committing: logical → trigger → logical. The targets stay exact, the
// slot and publication are gone after the switch to triggers, the
// triggers and capture log after the switch back.
func TestCaptureSwitch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvOn(t, pgtest.NewDatabase(t), trellis.Config{Capture: trellis.CaptureLogical})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 200) g`)
	e.apply(defsSQL)
	e.start()
	e.converge("logical, built")
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := e.conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	writers := func(seed int64) (stop func()) {
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			we := &env{t: t, dsn: e.dsn}
			c, err := pgx.Connect(ctx, e.dsn)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(ctx)
			we.conn = c
			rng := rand.New(rand.NewSource(seed))
			for {
				select {
				case <-done:
					return
				default:
				}
				workload(we, rng, 2, 5)
			}
		}()
		return func() { close(done); <-finished }
	}
	for i, mode := range []string{trellis.CaptureTrigger, trellis.CaptureLogical} {
		stop := writers(int64(i + 1))
		time.Sleep(300 * time.Millisecond)
		e.stop()
		e.cfg.Capture = mode
		e.tr.Close()
		e.open()
		e.start()
		time.Sleep(700 * time.Millisecond)
		stop()
		e.converge("after switching to " + mode)
		st, err := e.tr.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.CaptureMode == nil || *s.CaptureMode != mode || s.State != "live" {
				t.Fatalf("after the switch to %s: %s is %s in capture mode %v", mode, s.Name, s.State, s.CaptureMode)
			}
		}
		slots := count(`SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`)
		pubs := count(`SELECT count(*) FROM pg_publication`)
		trig := count(`SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass`)
		logs := count(`SELECT count(*) FROM pg_class WHERE relname = 'capture_log'`)
		switch mode {
		case trellis.CaptureTrigger:
			if slots+pubs != 0 || trig != 4 {
				t.Fatalf("in trigger mode: %d slot(s), %d publication(s), %d trigger(s); want 0, 0, 4", slots, pubs, trig)
			}
		case trellis.CaptureLogical:
			if slots != 1 || pubs != 1 || trig+logs != 0 {
				t.Fatalf("back in logical mode: %d slot(s), %d publication(s), %d trigger(s), %d capture log(s); want 1, 1, 0, 0", slots, pubs, trig, logs)
			}
		}
	}
}

// TestTriggerKeyText: trigger capture writes key text that parses back
// the same whatever the writer's session settings (DateStyle, TimeZone,
// IntervalStyle, extra_float_digits): keys of the types those settings
// change, written by a session with unusual ones, stay exact.
func TestTriggerKeyText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvOn(t, pgtest.NewDatabase(t), trellis.Config{Capture: trellis.CaptureTrigger})
	e.exec(`CREATE TABLE k (ts timestamptz, d date, f float8, iv interval, u uuid, n numeric, v int, PRIMARY KEY (ts, d, f, iv, u, n))`)
	e.exec(`CREATE TABLE i (id int PRIMARY KEY, v int)`)
	e.apply(`CREATE TRANSFORM kt AS SELECT ts, d, f, iv, u, n, v FROM k; CREATE TRANSFORM it AS SELECT id, v FROM i`)
	e.start()
	e.converge("built")
	for _, s := range []string{`SET DateStyle = 'SQL, DMY'`, `SET TimeZone = 'Asia/Tokyo'`, `SET IntervalStyle = 'sql_standard'`, `SET extra_float_digits = -3`} {
		e.exec(s)
	}
	e.exec(`INSERT INTO k SELECT '2024-03-01 12:34:56.789+02'::timestamptz + g * interval '37 minutes', DATE '2024-02-27' + g,
		0.1 * g + 1e-12, g * interval '1 day 3 hours 4.5 seconds', md5(g::text)::uuid, g / 7.0, g FROM generate_series(1, 50) g`)
	e.exec(`INSERT INTO i SELECT g, g FROM generate_series(1, 20) g`)
	e.converge("after inserts by an unusual session")
	e.exec(`UPDATE k SET v = v + 1 WHERE v % 3 = 0`)
	e.exec(`DELETE FROM k WHERE v % 5 = 0`)
	e.exec(`UPDATE i SET v = -v`)
	e.converge("after updates and deletes by an unusual session")
	var settings string
	if err := e.conn.QueryRow(ctx, `SELECT array_to_string(proconfig, ',') FROM pg_proc WHERE proname = 'capture_' || 'i'::regclass::oid`).Scan(&settings); err != nil {
		t.Fatal(err)
	}
	if settings != "search_path=pg_catalog, pg_temp" {
		t.Fatalf("the capture function of an int-keyed table sets %q; want only search_path", settings)
	}
}

// TestPartitionedSource: capture on a partitioned table covers writes to
// the root and to each partition (trigger capture puts its triggers on
// every table of the partition tree), in both modes. A TRUNCATE of one
// partition is checked in trigger mode only: pgoutput does not send it
// when the publication publishes through the root (a gap of logical
// capture, see docs/sql-support.md).
func TestPartitionedSource(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := newEnv(t, trellis.Config{Capture: mode})
		e.exec(`CREATE TABLE m (id int, r int, v int, PRIMARY KEY (id, r)) PARTITION BY LIST (r)`)
		e.exec(`CREATE TABLE m0 PARTITION OF m FOR VALUES IN (0)`)
		e.exec(`CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1, 2) PARTITION BY LIST (r)`)
		e.exec(`CREATE TABLE m1a PARTITION OF m1 FOR VALUES IN (1)`)
		e.exec(`CREATE TABLE m1b PARTITION OF m1 FOR VALUES IN (2)`)
		e.exec(`INSERT INTO m SELECT g, g % 3, g FROM generate_series(1, 30) g`)
		e.apply(`CREATE TRANSFORM mt AS SELECT id, r, v FROM m WHERE v > 3; CREATE TRANSFORM mr AS SELECT r, count(*) AS n, sum(v) AS s FROM m GROUP BY r`)
		e.start()
		e.converge("built")
		e.exec(`INSERT INTO m VALUES (100, 0, 50)`)
		e.exec(`UPDATE m SET v = v + 10`)
		e.exec(`UPDATE m SET r = 2 WHERE id = 4`) // moves between partitions
		e.converge("after writes to the root")
		e.exec(`INSERT INTO m1a VALUES (101, 1, 60)`)
		e.exec(`UPDATE m0 SET v = -1 WHERE id < 9`)
		e.exec(`DELETE FROM m1b WHERE id = 5`)
		e.exec(`UPDATE m1 SET v = v * 2 WHERE id > 20`)
		e.converge("after writes to the partitions")
		e.exec(`TRUNCATE m`)
		e.exec(`INSERT INTO m SELECT g, g % 3, g FROM generate_series(1, 10) g`)
		e.converge("after TRUNCATE of the root")
		if mode == trellis.CaptureTrigger {
			e.exec(`TRUNCATE m1a`)
			e.converge("after TRUNCATE of a partition")
		}
	})
}

// TestStoreLostAfterSwitchToLogical loses the store right after a switch
// from triggers to logical replication, before the keys the switch took
// from the capture log were applied. Those keys lived only in the store
// (the slot starts after them), so under --confirm=applied too the loss is
// a disruption: the transforms pause, and RESUME rebuilds them exact.
// Before, the new slot's start was taken for "everything not applied is
// still in the slot", and the targets converged without those changes.
func TestStoreLostAfterSwitchToLogical(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	e := newEnvOn(t, pgtest.NewDatabase(t), trellis.Config{Capture: trellis.CaptureTrigger, Confirm: trellis.ConfirmApplied, DataDir: dir})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 100) g`)
	e.apply(defsSQL)
	e.start()
	e.converge("built with triggers")
	e.stop()
	// Changes the triggers log while no runner drains them.
	e.exec(`UPDATE orders SET amount = amount + 100, qty = qty + 1 WHERE id % 3 = 0`)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'paid', 500, 1, 'late' FROM generate_series(101, 150) g`)
	// The targets stay readable but not writable, so the keys the switch
	// drains wait in the store.
	holder, _ := lockHolder(t, e, "target-lock")
	if _, err := holder.Exec(ctx, `BEGIN; LOCK TABLE big_orders, by_customer, totals IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	e.cfg.Capture = trellis.CaptureLogical
	e.tr.Close()
	e.open()
	e.start()
	deadline := time.Now().Add(waitTimeout)
	for {
		var waiting int
		if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND relation IN ('big_orders'::regclass, 'by_customer'::regclass, 'totals'::regclass)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no apply waited for the targets' lock after the switch to logical replication")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	e.tr.Close()
	e.open()
	e.start()
	actx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	tok, err := e.tr.WatermarkToken(actx)
	if err != nil {
		t.Fatal(err)
	}
	err = e.tr.AwaitConverged(actx, tok)
	if trellis.CodeOf(err) != trellis.CodeConflict || !strings.Contains(err.Error(), "disruption") {
		t.Fatalf("AwaitConverged after losing the store right after the switch: %v; want a conflict naming the disruption", err)
	}
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != "paused" || s.CaptureFailure == nil || s.CaptureFailure.Kind != "disruption" || !strings.Contains(s.CaptureFailure.Error, "trigger capture") {
			t.Fatalf("after losing the store: %s is %s, capture failure %+v; want paused by a disruption naming trigger capture", s.Name, s.State, s.CaptureFailure)
		}
	}
	e.apply(`RESUME TRANSFORM big_orders; RESUME TRANSFORM by_customer; RESUME TRANSFORM totals`)
	e.converge("after RESUME rebuilds")
}
