package trellis_test

// When the primary itself changes (issue 26, ADR 0039): a failover to a
// promoted physical standby while the runner applies, and a point-in-time
// restore under a runner that kept its store. Each test starts servers of
// its own (pgtest.NewServer), so they run only with local binaries.

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// pausedDefs are defsSQL's transforms with their targets in schema p, for
// a second instance (schema trellis_p) on the same database.
var pausedDefs = strings.ReplaceAll(defsSQL, "CREATE TRANSFORM ", "CREATE TRANSFORM p.")

// TestFailoverToPromotedStandby runs two instances on one database, one
// with --on-disruption=repair and one with pause, both through a proxy in
// front of the primary, while a writer commits throughout. The primary
// crashes while the runners apply, its streaming standby is promoted and
// the proxy switched to it: the runners notice the new timeline, discard
// their stores (the slots are gone), and every target equals its query
// afterwards — repaired in place by one runner, after RESUME TRANSFORM ALL
// for the other — and goes on being maintained from the new slots. Status
// never says live for a target not rebuilt since the switch.
func TestFailoverToPromotedStandby(t *testing.T) {
	t.Parallel() // servers of its own, mostly waited on
	ctx := context.Background()
	primary := pgtest.NewServer(t, nil, false)
	standby := pgtest.Backup(t, primary, true)
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, primary.Port())
	dsn := px.dsn("app")

	repair := newEnvOn(t, dsn, trellis.Config{OnDisruption: trellis.OnDisruptionRepair})
	repair.exec(schemaSQL)
	repair.exec(`CREATE SCHEMA p`)
	repair.apply(defsSQL)
	paused := newEnvOn(t, dsn, trellis.Config{Schema: "trellis_p"})
	paused.apply(pausedDefs)
	workload(repair, rand.New(rand.NewSource(26)), 20, 10)
	repair.start()
	paused.start()
	w := startWriter(t, dsn, 1)
	w.awaitCommits(t, 20)
	w.pause()
	repair.converge("before the failover")
	paused.converge("before the failover")
	w.resume()

	// The runners apply while the writer goes on; the primary crashes.
	w.awaitCommits(t, 30)
	if err := primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	px.switchTo(standby.Port())
	t.Logf("failover: primary stopped, standby promoted and the proxy switched in %s", time.Since(switched).Round(time.Millisecond))

	reads := openOn(t, dsn, "trellis")
	watch := watchStatus(reads.tr)
	readsP := openOn(t, dsn, "trellis_p")
	w.awaitCommits(t, 30) // writes on the new primary, during the repair
	w.pause()
	reads.converge("after the failover, repaired in place")
	repairedIn := time.Since(switched)
	states := watch.neverLiveUnrepaired(t, switched.Add(-time.Second))
	t.Logf("repaired in place %s after the switch; states status showed meanwhile: %v", repairedIn.Round(time.Millisecond), states)

	awaitState(t, readsP, catalog.StatePaused)
	disruptedBy(t, readsP, catalog.StatePaused, "the primary changed (promoted standby, timeline 1 → 2", `replication slot "trellis_p_`)
	readsP.apply(`RESUME TRANSFORM ALL`)
	readsP.converge("after the failover and RESUME TRANSFORM ALL")

	// Both keep maintaining their targets from the new slots.
	w.resume()
	w.awaitCommits(t, 30)
	w.pause()
	reads.converge("writes after the repair")
	readsP.converge("writes after the resume")
	w.resume()
}

// TestPointInTimeRestore restores the primary's base backup to a position
// before writes the runner had applied (and past which it had received
// much more WAL), and restarts the runner on it with its store kept. The
// runner must see the new timeline and the store's positions past where
// it begins, discard the store, and never apply anything from the future
// the database no longer has: the rows written after the target are not in
// the targets, every target equals its query after RESUME TRANSFORM ALL,
// and writes on the new timeline — at positions the discarded store had
// already passed — reach the targets. With the planted bug
// trust_store_after_promotion (the store kept) the runner streams from the
// store's position and those writes never arrive.
func TestPointInTimeRestore(t *testing.T) {
	t.Parallel() // servers of its own, mostly waited on
	ctx := context.Background()
	primary := pgtest.NewServer(t, nil, true)
	if _, err := primary.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	e := newEnvOn(t, primary.DSN("app"), trellis.Config{DataDir: store})
	e.exec(schemaSQL)
	e.exec(`CREATE TABLE filler (id bigint PRIMARY KEY, pad text)`)
	e.apply(defsSQL)
	rng := rand.New(rand.NewSource(261))
	workload(e, rng, 10, 10)
	e.start()
	e.converge("first writes")
	backup := pgtest.Backup(t, primary, false)
	workload(e, rng, 10, 10)
	e.converge("writes the restore keeps")
	var target string
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}

	// The future: rows the runner applies, then WAL it receives, all
	// after the restore's target.
	e.exec(`INSERT INTO orders SELECT 9000 + g, 1, 'future', 500, 1, 'gone' FROM generate_series(0, 49) g`)
	e.exec(`UPDATE orders SET amount = 999 WHERE id < 9000 AND id % 3 = 0`)
	e.converge("writes the restore discards")
	e.exec(`INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 60000) g`)
	var end string
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	awaitReceived(t, e, end)
	e.stop()
	var seg string
	if err := e.conn.QueryRow(ctx, `SELECT pg_walfile_name($1::pg_lsn)`, end).Scan(&seg); err != nil {
		t.Fatal(err)
	}
	e.exec(`SELECT pg_switch_wal()`)
	awaitArchived(t, e, seg)
	if err := primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}

	if err := backup.Recover(primary.ArchiveDir(), target); err != nil {
		t.Fatal(err)
	}
	if err := backup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := backup.AwaitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	r := newEnvOn(t, backup.DSN("app"), trellis.Config{DataDir: store})
	var insert string
	if err := r.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&insert); err != nil {
		t.Fatal(err)
	}
	t.Logf("restored to %s (target %s); the runner had received up to %s", insert, target, end)
	r.start()
	awaitState(t, r, catalog.StatePaused)
	disruptedBy(t, r, catalog.StatePaused, "restored to an earlier point (point-in-time recovery, timeline 1 → 2", "past")
	r.apply(`RESUME TRANSFORM ALL`)
	r.converge("after the restore and RESUME TRANSFORM ALL")
	var future int
	if err := r.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM big_orders WHERE id >= 9000) + (SELECT count(*) FROM orders WHERE id >= 9000)`).Scan(&future); err != nil {
		t.Fatal(err)
	}
	if future != 0 {
		t.Fatalf("%d rows of the discarded future are back", future)
	}

	// Writes on the new timeline, at positions the old store had passed.
	workload(r, rng, 10, 10)
	var now string
	if err := r.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if n, _ := catalog.ParseLSN(now); n >= mustLSN(t, end) {
		t.Fatalf("the new timeline reached %s, past the old store's %s: the test no longer writes where the old store had been", now, end)
	}
	r.converge("writes on the new timeline")
}

// awaitReceived waits until the runner's store received everything up to
// lsn (the heartbeat records it).
func awaitReceived(t *testing.T, e *env, lsn string) {
	t.Helper()
	awaitQuery(t, e, "the runner received up to "+lsn, `SELECT coalesce(received_lsn >= $1::pg_lsn, false) FROM trellis.instance`, lsn)
}

// awaitArchived waits until WAL file seg is archived.
func awaitArchived(t *testing.T, e *env, seg string) {
	t.Helper()
	awaitQuery(t, e, "WAL file "+seg+" archived", `SELECT coalesce(last_archived_wal >= $1, false) FROM pg_stat_archiver`, seg)
}

// awaitQuery waits until query (one boolean) says true.
func awaitQuery(t *testing.T, e *env, what, query string, args ...any) {
	t.Helper()
	poll(t, what, func() bool {
		var ok bool
		if err := e.conn.QueryRow(context.Background(), query, args...).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

func mustLSN(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := catalog.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
