package trellis_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// Tests here call t.Parallel (make test runs -parallel 4) unless they
// change what every test on the harness's server sees: ALTER SYSTEM
// (TestDisruptSlotInvalidated, TestDisruptSlotInvalidatedWhileRunning,
// TestVisibleBeforeRederived) or roles, which are cluster-wide (role_test.go),
// or race with the load of the others (TestDDLDrift).
// Go runs the tests that do not call it first, one at a time, and the
// parallel ones only after them, so those never overlap another test. A
// parallel test keeps to its own database (pgtest.NewDatabase; slots,
// publications and locks are looked up in it), or to a server of its own
// when it restarts one (TestFaultInjection, TestReconnect).
func TestMain(m *testing.M) { pgtest.Main(m, cli.remove) }

// env is one test's database, instance and running pipeline.
type env struct {
	t      *testing.T
	dsn    string
	conn   *pgx.Conn
	tr     *trellis.Trellis
	cfg    trellis.Config
	cancel context.CancelFunc
	done   chan error
	// stream, when set, replaces the slot stream of start's runner (for
	// failures a real server cannot produce on demand); nil runs Run.
	stream trellis.StreamFunc
}

// captureModes are the capture modes the end-to-end tests run in (see
// newEnv).
var captureModes = []string{trellis.CaptureLogical, trellis.CaptureTrigger}

// eachMode runs fn as a subtest per capture mode, one after the other: for
// a test whose modes must not overlap (none here now; a new suite calls
// t.Parallel and eachModeParallel, see TestMain).
func eachMode(t *testing.T, fn func(t *testing.T, mode string)) {
	for _, mode := range captureModes {
		t.Run(mode, func(t *testing.T) { fn(t, mode) })
	}
}

// eachModeParallel is eachMode with the modes run at the same time
// (atOnce), each mode on a database — and for trigger capture a server —
// of its own.
func eachModeParallel(t *testing.T, fn func(t *testing.T, mode string)) {
	var subs []subtest
	for _, mode := range captureModes {
		subs = append(subs, subtest{mode, func(t *testing.T) { fn(t, mode) }})
	}
	atOnce(t, subs...)
}

// subtest is a named subtest body, for atOnce.
type subtest struct {
	name string
	fn   func(t *testing.T)
}

// atOnce runs subs as subtests all at the same time, each in a goroutine
// of its own, and returns when all are done. They are not parallel
// subtests (t.Parallel): the test that runs them is parallel, and its
// parallel subtests would queue for a slot (-parallel) behind every
// parallel test not started yet, so a test's own modes and parts would run
// last, after the whole suite, while the test that started them waited.
// Here they share their test's slot and start at once.
func atOnce(t *testing.T, subs ...subtest) {
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { t.Run(s.name, s.fn) })
	}
	wg.Wait()
}

// replicaServer is a server started with wal_level=replica: logical
// replication is impossible there, so --capture=auto must pick triggers.
func replicaServer(t *testing.T) *pgserver.Server {
	return pgtest.ExtraServer(t, "wal_level=replica", map[string]string{"wal_level": "replica"})
}

// newEnv makes a test's database and instance. With cfg.Capture set to
// trigger, the database is on a server with wal_level=replica and the
// instance keeps capture auto, which must choose triggers there.
func newEnv(t *testing.T, cfg trellis.Config) *env {
	t.Helper()
	var dsn string
	if cfg.Capture == trellis.CaptureTrigger {
		dsn = pgtest.NewDatabaseOn(t, replicaServer(t))
		cfg.Capture = trellis.CaptureAuto
	} else {
		dsn = pgtest.NewDatabase(t)
	}
	return newEnvOn(t, dsn, cfg)
}

// newEnvOn makes an instance with cfg on the database dsn.
func newEnvOn(t *testing.T, dsn string, cfg trellis.Config) *env {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	cfg.DSN = dsn
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = 100 * time.Millisecond
	}
	if os.Getenv("TRELLIS_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e := &env{t: t, dsn: dsn, conn: conn, cfg: cfg}
	e.open()
	return e
}

// open opens the instance of e.cfg. A call timeout left unset is
// convergeTimeout, not the default 30 s: an Apply of dozens of transforms
// on a server the parallel tests share with two cores' worth of others ran
// past 30 s (seen at load 20-30: TestSublinks, TestFunctionsInFrom,
// TestRecursive), and the tests check what the calls do, not how fast;
// TestCallTimeout sets its own.
func (e *env) open() {
	if e.cfg.CallTimeout == 0 {
		e.cfg.CallTimeout = convergeTimeout
	}
	tr, err := trellis.Open(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.tr = tr
	e.t.Cleanup(func() { e.stop(); tr.Close() })
}

func (e *env) start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() {
		if e.stream == nil {
			e.done <- e.tr.Run(ctx)
			return
		}
		e.done <- e.tr.RunWithStream(ctx, e.stream)
	}()
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		e.t.Errorf("Run: %v", err)
	}
	e.cancel = nil
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.conn.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) apply(script string) {
	e.t.Helper()
	if _, err := e.tr.Apply(context.Background(), script); err != nil {
		e.t.Fatalf("apply: %v", err)
	}
}

// convergeTimeout bounds a test's wait for convergence (and the
// comparisons after it): a guard against a runner that stops converging,
// which fails the test naming what is behind, not a timing. It is
// generous because the tests run in parallel on two cores beside another
// package's: a build of a hundred transforms waits its turn for the CPU.
// The package's -timeout is the last resort.
const convergeTimeout = 5 * time.Minute

// waitTimeout bounds a test's wait for a state it expects soon (a status,
// a slot, a lock wait, a log line): a guard against one that never comes,
// not a timing, generous for the same reason.
const waitTimeout = 2 * time.Minute

// converge waits for convergence and checks every target equals its query.
func (e *env) converge(when string) {
	e.t.Helper()
	e.await(when)
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	defs, err := e.tr.Definitions(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range defs {
		r, err := e.tr.CompareNow(ctx, d.Name)
		if err != nil {
			e.t.Fatal(err)
		}
		if !r.Equal() {
			e.t.Fatalf("%s: %s differs from its query: missing %d %v extra %d %v", when, d.Name, r.Missing, r.MissingSample, r.Extra, r.ExtraSample)
		}
	}
}

const schemaSQL = `CREATE TABLE orders (id bigint PRIMARY KEY, customer int, status text, amount numeric(12,2), qty int, note text)`

const defsSQL = `
CREATE TRANSFORM big_orders AS SELECT o.id, o.customer, upper(o.status) AS status, o.amount * o.qty AS total
  FROM orders o WHERE o.amount > 10;
CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n, sum(amount) AS revenue, avg(qty) AS avg_qty,
  min(amount) AS smallest, max(note) AS last_note, count(note) AS notes FROM orders WHERE status <> 'cancelled' GROUP BY customer;
CREATE TRANSFORM totals AS SELECT count(*) AS n, sum(qty) AS qty FROM orders;
`

// workload writes random changes in transactions of 1..maxRows rows over
// small domains, so keys and groups collide.
func workload(e *env, rng *rand.Rand, txns, maxRows int) {
	e.t.Helper()
	ctx := context.Background()
	statuses := []string{"'new'", "'paid'", "'cancelled'", "NULL"}
	val := func(n int) string {
		if rng.Intn(8) == 0 {
			return "NULL"
		}
		return fmt.Sprint(rng.Intn(n))
	}
	for i := 0; i < txns; i++ {
		tx, err := e.conn.Begin(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 1 + rng.Intn(maxRows)
		for j := 0; j < n; j++ {
			id := rng.Intn(300)
			var q string
			switch rng.Intn(6) {
			case 0, 1:
				q = fmt.Sprintf(`INSERT INTO orders VALUES (%d, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET customer = EXCLUDED.customer, amount = EXCLUDED.amount`,
					id, val(10), statuses[rng.Intn(4)], val(40), val(5), []string{"NULL", "''", "'a'", "'b'"}[rng.Intn(4)])
			case 2:
				q = fmt.Sprintf(`UPDATE orders SET customer = %s, status = %s WHERE id = %d`, val(10), statuses[rng.Intn(4)], id)
			case 3:
				q = fmt.Sprintf(`UPDATE orders SET id = id + 1000 WHERE id = %d AND NOT EXISTS (SELECT 1 FROM orders WHERE id = %d)`, id, id+1000)
			case 4:
				q = fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
			case 5:
				q = fmt.Sprintf(`UPDATE orders SET amount = amount + 1, qty = %s WHERE customer = %s`, val(5), val(10))
			}
			if _, err := tx.Exec(ctx, q); err != nil {
				e.t.Fatalf("%s: %v", q, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
	// Keys moved past 1000 come back, so later rounds keep colliding.
	if _, err := e.conn.Exec(ctx, `DELETE FROM orders WHERE id >= 1000 AND id - 1000 IN (SELECT id FROM orders)`); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.conn.Exec(ctx, `UPDATE orders SET id = id - 1000 WHERE id >= 1000`); err != nil {
		e.t.Fatal(err)
	}
}

func TestPipelineConverges(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testPipelineConverges)
}

func testPipelineConverges(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 200) g`)
	e.apply(defsSQL)
	e.start()
	e.converge("after build")
	if mode == trellis.CaptureTrigger {
		// auto, on a server with wal_level=replica: triggers, and why.
		st, err := e.tr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.CaptureMode == nil || *s.CaptureMode != trellis.CaptureTrigger || s.CaptureReason == nil ||
				!strings.Contains(*s.CaptureReason, "wal_level") || s.SlotName != nil {
				t.Fatalf("%s: capture_mode %v, reason %v, slot %v; want trigger because of wal_level, no slot", s.Name, s.CaptureMode, s.CaptureReason, s.SlotName)
			}
		}
	}
	rng := rand.New(rand.NewSource(42))
	for round := 0; round < 5; round++ {
		workload(e, rng, 20, 30)
		e.converge(fmt.Sprintf("round %d", round))
	}
	// A big transaction (streamed by the server in chunks).
	e.exec(`INSERT INTO orders SELECT g, g % 13, 'paid', g % 90, g % 6, 'x' FROM generate_series(10000, 110000) g`)
	e.exec(`UPDATE orders SET customer = customer + 1 WHERE id >= 10000 AND id % 3 = 0`)
	e.converge("after 100k-row transactions")
	e.exec(`DELETE FROM orders WHERE id >= 10000`)
	e.exec(`TRUNCATE orders`)
	e.exec(`INSERT INTO orders VALUES (1, 1, 'new', 5, 1, NULL)`)
	e.converge("after truncate")
}

func TestRestartResumes(t *testing.T) {
	t.Parallel()
	var subs []subtest // each on a database of its own
	for _, mode := range []string{trellis.ConfirmLocal, trellis.ConfirmApplied, trellis.CaptureTrigger} {
		subs = append(subs, subtest{mode, func(t *testing.T) {
			cfg := trellis.Config{Confirm: mode}
			if mode == trellis.CaptureTrigger {
				cfg = trellis.Config{Capture: mode}
			}
			e := newEnv(t, cfg)
			e.exec(schemaSQL)
			e.apply(defsSQL)
			e.start()
			rng := rand.New(rand.NewSource(7))
			workload(e, rng, 10, 20)
			e.converge("first run")
			e.stop()
			workload(e, rng, 10, 20) // while stopped
			e.start()
			workload(e, rng, 10, 20)
			e.converge("after restart")
		}})
	}
	atOnce(t, subs...)
}

func TestStatementErrorsChangeNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`CREATE TABLE nokey (a int)`)
	cases := []struct{ sql, code, want string }{
		{`CREATE TRANSFORM x AS SELECT a FROM nokey`, "validation", "no primary key"},
		{`CREATE TRANSFORM x AS SELECT a FROM missing_table`, "not_found", "does not exist"},
		{`CREATE TRANSFORM x AS SELECT id, random() AS r FROM orders`, "validation", "random"},
		{`CREATE TRANSFORM x AS SELECT id, nope FROM orders`, "not_found", "nope"},
		{`CREATE TRANSFORM x AS SELECT id FROM orders LIMIT 3`, "validation", "LIMIT"},
		{`CREATE TRANSFORM ok1 AS SELECT id FROM orders; CREATE TRANSFORM bad AS SELECT id FROM nokey`, "validation", "no primary key"},
		{`PAUSE TRANSFORM nothere`, "not_found", "does not exist"},
		{`CREATE TRANSFORM orders AS SELECT id FROM orders`, "conflict", "already exists"},
	}
	for _, c := range cases {
		_, err := e.tr.Apply(context.Background(), c.sql)
		if err == nil {
			t.Errorf("%s: no error", c.sql)
			continue
		}
		if string(trellis.CodeOf(err)) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v (code %s), want code %s containing %q", c.sql, err, trellis.CodeOf(err), c.code, c.want)
		}
	}
	var n int
	if err := e.conn.QueryRow(context.Background(), `SELECT count(*) FROM trellis.transforms`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("failed statements left %d transforms (err %v)", n, err)
	}
	var ok bool
	if err := e.conn.QueryRow(context.Background(), `SELECT to_regclass('ok1') IS NULL`).Scan(&ok); err != nil || !ok {
		t.Fatalf("a failed script left the table of its first statement")
	}
}

// TestResumeNotPaused: RESUME of a transform that is not paused is a
// conflict naming its state, and — like any failing statement — leaves the
// whole script unapplied, including statements before it that succeeded.
func TestResumeNotPaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	ctx := context.Background()
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 5, 'new', g, 1, NULL FROM generate_series(1, 50) g`)
	e.apply(`CREATE TRANSFORM a AS SELECT id, amount FROM orders;
		CREATE TRANSFORM b AS SELECT customer, count(*) AS n FROM orders GROUP BY customer`)
	sentence := func(name, state string) string {
		return fmt.Sprintf("conflict: transform %q is not paused (state %s); RESUME only applies to a paused transform — PAUSE TRANSFORM it first, or leave it running", name, state)
	}
	// snapshot is what a script could have changed: every catalog row (not
	// progress, which the runner moves on its own), the tables of schema
	// public, and the publication's tables.
	snapshot := func(t *testing.T) string {
		t.Helper()
		var s string
		if err := e.conn.QueryRow(ctx, `SELECT concat_ws(E'\n',
			(SELECT string_agg(concat_ws(' ', id, name, state, paused_by, rebuild, build_phase, build_cursor::text,
				capture_failure::text, backfill_failure::text, md5(plan::text), state_changed_at), E'\n' ORDER BY id)
			 FROM trellis.transforms),
			(SELECT string_agg(relname, ' ' ORDER BY relname) FROM pg_class
			 WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'),
			(SELECT string_agg(tablename, ' ' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = 'trellis_pub'))`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	type resumeCase struct {
		name   string
		setup  string // applied (and required to succeed) before the snapshot
		script string
		want   string // the whole error text
	}
	run := func(t *testing.T, c resumeCase) {
		t.Helper()
		if c.setup != "" {
			if _, err := e.tr.Apply(ctx, c.setup); err != nil {
				t.Fatalf("setup %s: %v", c.setup, err)
			}
		}
		before := snapshot(t)
		res, err := e.tr.Apply(ctx, c.script)
		if err == nil {
			t.Fatalf("%s: applied (%+v), want %s", c.script, res, c.want)
		}
		if trellis.CodeOf(err) != trellis.CodeConflict {
			t.Errorf("%s: code %s, want %s", c.script, trellis.CodeOf(err), trellis.CodeConflict)
		}
		if err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.script, err, c.want)
		}
		if after := snapshot(t); after != before {
			t.Errorf("%s changed something:\nbefore:\n%s\nafter:\n%s", c.script, before, after)
		}
	}

	// Before any runner: both wait for their build.
	t.Run("waiting to backfill", func(t *testing.T) {
		run(t, resumeCase{script: `RESUME TRANSFORM b`, want: sentence("b", "waiting_to_backfill")})
	})

	e.start()
	e.converge("built")
	// In order: the last case leaves a paused.
	for _, c := range []resumeCase{
		{name: "live", script: `RESUME TRANSFORM b`, want: sentence("b", "live")},
		{name: "after a pause in the same script", script: `PAUSE TRANSFORM a; RESUME TRANSFORM b`, want: sentence("b", "live")},
		{name: "after a create", script: `CREATE TRANSFORM c AS SELECT id, qty FROM orders; RESUME TRANSFORM b`, want: sentence("b", "live")},
		{name: "after a drop", script: `DROP TRANSFORM a; RESUME TRANSFORM b`, want: sentence("b", "live")},
		{name: "after a resume that succeeds", setup: `PAUSE TRANSFORM a`,
			script: `RESUME TRANSFORM a; RESUME TRANSFORM b`, want: sentence("b", "live")},
	} {
		t.Run(c.name, func(t *testing.T) { run(t, c) })
	}
	st, err := e.tr.Status(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if st[0].State != "paused" {
		t.Fatalf("a after the failed RESUME script: state %s, want paused (its RESUME rolled back)", st[0].State)
	}
	// The refusal is about state only: the same RESUME of a paused
	// transform still works, and everything converges.
	e.apply(`RESUME TRANSFORM a`)
	e.converge("after RESUME of the paused transform")
}

func pgxConnect(dsn string) (*pgx.Conn, error) { return pgx.Connect(context.Background(), dsn) }

// TestReplicaIdentityDrift: when a table's changes stop carrying the
// transform's key, that transform pauses with a capture failure naming the
// column, and the others keep converging; with the identity restored,
// RESUME makes it exact and its table's changes reach it again.
func TestReplicaIdentityDrift(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`CREATE TABLE tags (id int PRIMARY KEY, code text NOT NULL, label text);
		CREATE UNIQUE INDEX tags_code ON tags (code);
		INSERT INTO tags VALUES (1, 'a', 'x'), (2, 'b', 'y')`)
	e.apply(defsSQL + `CREATE TRANSFORM tag_labels AS SELECT id, label FROM tags;`)
	e.start()
	e.converge("before")
	e.exec(`ALTER TABLE tags REPLICA IDENTITY USING INDEX tags_code`)
	e.exec(`UPDATE tags SET label = 'z' WHERE id = 1`)
	e.exec(`INSERT INTO orders VALUES (1, 1, 'new', 50, 1, NULL)`)
	ctx := context.Background()
	deadline := time.Now().Add(waitTimeout)
	for {
		st, err := e.tr.Status(ctx, "tag_labels")
		if err != nil {
			t.Fatal(err)
		}
		if f := st[0].CaptureFailure; f != nil {
			if f.Kind != "capture" || !strings.Contains(f.Error, `"id"`) {
				t.Fatalf("capture failure %+v", f)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tag_labels was not paused: %+v", st[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Once the key is the replica identity again, RESUME rebuilds it and
	// its table's changes reach it: the worker that lost the table's
	// route was ended and replaced with its routes (intake.stopRoute).
	e.exec(`ALTER TABLE tags REPLICA IDENTITY DEFAULT`)
	e.apply(`RESUME TRANSFORM tag_labels`)
	e.exec(`UPDATE tags SET label = 'w' WHERE id = 2; INSERT INTO tags VALUES (3, 'c', 'v')`)
	e.converge("after restoring the replica identity and RESUME")
	e.exec(`UPDATE tags SET label = 'u' WHERE id = 3`)
	e.converge("a change after the rebuild")
}

// TestPauseResumeDrop: a paused transform stops changing; RESUME rebuilds
// it, deleting rows that do not belong (orphans); DROP removes the target,
// the ledger and publication membership no other transform needs.
func TestPauseResumeDrop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`CREATE TABLE notes (id int PRIMARY KEY, body text)`)
	e.exec(`INSERT INTO orders SELECT g, g % 5, 'new', g, 1, NULL FROM generate_series(1, 100) g`)
	e.apply(defsSQL + `CREATE TRANSFORM note_bodies AS SELECT id, body FROM notes;`)
	e.start()
	e.converge("built")
	ctx := context.Background()
	e.apply(`PAUSE TRANSFORM big_orders; PAUSE TRANSFORM by_customer`)
	time.Sleep(300 * time.Millisecond) // let the runner stop the workers
	e.exec(`UPDATE orders SET amount = amount + 1000 WHERE id <= 20`)
	e.exec(`INSERT INTO big_orders VALUES (-1, 0, 'ORPHAN', 1)`)
	e.exec(`UPDATE by_customer SET n = 999`)
	tok, _ := e.tr.WatermarkToken(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	if err := e.tr.AwaitConverged(waitCtx, tok); err != nil {
		t.Fatalf("user-paused transforms must not block convergence: %v", err)
	}
	var total string
	if err := e.conn.QueryRow(ctx, `SELECT total::text FROM big_orders WHERE id = 20`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != "20.00" {
		t.Fatalf("a paused transform changed: total = %s", total)
	}
	st, _ := e.tr.Status(ctx, "big_orders")
	if st[0].State != "paused" || st[0].PausedBy == nil || *st[0].PausedBy != "user" {
		t.Fatalf("status of a paused transform: %+v", st[0])
	}
	e.apply(`RESUME TRANSFORM big_orders; RESUME TRANSFORM by_customer`)
	e.converge("after RESUME (orphans deleted, stale rows fixed)")

	// PAUSE and RESUME seen by the runner together still rebuild: the
	// orphan below is only deleted by a rebuild.
	e.exec(`INSERT INTO big_orders VALUES (-2, 0, 'ORPHAN', 1)`)
	e.apply(`PAUSE TRANSFORM big_orders; RESUME TRANSFORM big_orders`)
	e.converge("after PAUSE and RESUME in one script")

	var pubBefore int
	e.conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'trellis_pub'`).Scan(&pubBefore)
	e.apply(`DROP TRANSFORM note_bodies; DROP TRANSFORM IF EXISTS nothing_here`)
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		e.conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'trellis_pub' AND tablename = 'notes'`).Scan(&n)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("notes is still published after its only transform was dropped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var gone bool
	e.conn.QueryRow(ctx, `SELECT to_regclass('note_bodies') IS NULL`).Scan(&gone)
	if !gone {
		t.Fatal("DROP TRANSFORM left the target table")
	}
	e.apply(`DROP TRANSFORM by_customer`)
	var ledgers int
	e.conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'trellis' AND tablename LIKE 'ledger%'`).Scan(&ledgers)
	if ledgers != 1 { // totals keeps its ledger
		t.Fatalf("%d ledgers left, want 1 (totals)", ledgers)
	}
	e.exec(`DELETE FROM orders WHERE id > 50`)
	e.converge("after drops")
}

// awaitOnly waits for convergence without comparing (for timing).
func (e *env) awaitOnly() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tok, err := e.tr.WatermarkToken(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.tr.AwaitConverged(ctx, tok); err != nil {
		e.t.Fatal(err)
	}
}

// splitBy deals items into at most n parts of about equal weight (the
// heaviest first, each to the lightest part so far), each part keeping
// the items' order.
func splitBy[T any](items []T, n int, weight func(T) int) [][]T {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(weight(items[b]), weight(items[a])) })
	load := make([]int, n)
	of := make([]int, len(items))
	for _, i := range order {
		p := 0
		for q := range load {
			if load[q] < load[p] {
				p = q
			}
		}
		of[i] = p
		load[p] += weight(items[i])
	}
	parts := make([][]T, n)
	for i, it := range items {
		parts[of[i]] = append(parts[of[i]], it)
	}
	return slices.DeleteFunc(parts, func(p []T) bool { return len(p) == 0 })
}

// inParts runs fn on each part at once (atOnce), as subtests part1,
// part2, ….
func inParts[T any](t *testing.T, parts [][]T, fn func(t *testing.T, part []T)) {
	var subs []subtest
	for i, p := range parts {
		subs = append(subs, subtest{fmt.Sprintf("part%d", i+1), func(t *testing.T) { fn(t, p) }})
	}
	atOnce(t, subs...)
}
