package trellis_test

// A database holding an instance, copied with pg_dump and restored into
// another database (issue 26 item 4, ADR 0039): the restore succeeds with
// no error from the instance's objects, status never says live for a
// target the copy may have left stale, and the first run on the copy (a
// fresh data directory) rebinds the transforms to the copy's tables,
// reports the disruption and makes every target exact.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// copySQL adds a second source and a join to schemaSQL and defsSQL.
const copySQL = `CREATE TABLE customers (id int PRIMARY KEY, name text);
INSERT INTO customers SELECT g, 'c' || g FROM generate_series(0, 9) g;
CREATE INDEX ON orders (customer);
CREATE TABLE extra (id int PRIMARY KEY, v int);
INSERT INTO extra SELECT g, g FROM generate_series(1, 10) g`

// copyDefs adds a join, and a transform of a table the dump leaves out.
const copyDefs = defsSQL + `CREATE TRANSFORM named AS SELECT o.id, o.amount, c.name FROM orders o JOIN customers c ON c.id = o.customer;
CREATE TRANSFORM extra_sum AS SELECT count(*) AS n, sum(v) AS v FROM extra;`

// TestDumpRestore copies the database in both capture modes: logical, as
// the role that owns the database and everything in it, with pg_dump -Fc
// and pg_restore into another database of the cluster, repaired in place
// (--on-disruption=repair); trigger, as a superuser, with a plain pg_dump
// and psql from a server with wal_level=replica into another cluster,
// paused until RESUME TRANSFORM ALL. Rows written to the copy before its
// first run (the restored capture triggers fire under the old tables'
// OIDs) reach the targets too. The dump leaves one source table out
// (pg_dump -T): its transform is paused with the fix, and the runner goes
// on with the others.
func TestDumpRestore(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testDumpRestore)
}

func testDumpRestore(t *testing.T, mode string) {
	var srcDSN, copyDSN string
	cfg := trellis.Config{OnDisruption: trellis.OnDisruptionRepair}
	says := "copied into another database"
	if mode == trellis.CaptureLogical {
		role := newLoginRole(t)
		srcDSN = ownedDatabase(t, pgtest.NewDatabase(t), role)
		copyDSN = ownedDatabase(t, pgtest.NewDatabase(t), role)
	} else {
		srcDSN = pgtest.NewDatabaseOn(t, replicaServer(t))
		copyDSN = pgtest.NewDatabase(t)
		cfg = trellis.Config{Capture: trellis.CaptureTrigger, OnDisruption: trellis.OnDisruptionPause}
		says = "copied into another cluster"
	}
	src := newEnvOn(t, srcDSN, trellis.Config{Capture: cfg.Capture})
	src.exec(schemaSQL)
	src.exec(copySQL)
	src.apply(copyDefs)
	rng := mrand.New(mrand.NewSource(262))
	workload(src, rng, 20, 10)
	src.start()
	src.converge("on the original")
	workload(src, rng, 5, 10)
	src.awaitOnly()
	src.stop()

	restore(t, mode, srcDSN, copyDSN)
	c := newEnvOn(t, copyDSN, cfg)
	disruptedBy(t, c, trellis.StateDisrupted, says)
	workload(c, rng, 10, 10) // before any runner on the copy
	watch := watchStatus(c.tr)
	started := time.Now()
	c.start()
	awaitPaused(t, c, "extra_sum")
	st, err := c.tr.Status(context.Background(), "extra_sum")
	if err != nil {
		t.Fatal(err)
	}
	if f := st[0].CaptureFailure; f == nil || !strings.Contains(f.Error, says) || !strings.Contains(f.Error, `its FROM table public.extra no longer exists; recreate it, or DROP TRANSFORM extra_sum`) {
		t.Fatalf("extra_sum on a copy without its source: %+v", f)
	}
	if cfg.OnDisruption == trellis.OnDisruptionPause {
		awaitPaused(t, c, "big_orders", "by_customer", "totals", "named")
		res, err := c.tr.Apply(context.Background(), `RESUME TRANSFORM ALL`)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Join(res[0].Notes, "\n"); !strings.Contains(n, "resumed: big_orders, by_customer, totals, named") || !strings.Contains(n, "not resumed: extra_sum: ") {
			t.Fatalf("RESUME TRANSFORM ALL: %+v", res)
		}
		paused := 0
		all, err := c.tr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range all {
			if s.Disruption == nil || !strings.Contains(s.Disruption.Reason, says) {
				t.Errorf("%s: disruption %+v, want one saying %q", s.Name, s.Disruption, says)
			}
			if s.State == catalog.StatePaused {
				paused++
			}
		}
		if paused != 1 {
			t.Errorf("%d transforms paused after RESUME TRANSFORM ALL, want extra_sum alone", paused)
		}
	}
	c.apply(`DROP TRANSFORM extra_sum`)
	c.converge("first run on the copy")
	t.Logf("%s: exact %s after the first run started; states status showed: %v", mode, time.Since(started).Round(time.Millisecond), watch.neverLiveUnrepaired(t, started.Add(-time.Second)))
	workload(c, rng, 10, 10)
	c.converge("writes on the copy")
}

// restore copies database srcDSN, but for table extra, into copyDSN:
// logical, pg_dump -Fc and pg_restore; trigger, a plain pg_dump run by
// psql. Either must succeed without an error.
func restore(t *testing.T, mode, srcDSN, copyDSN string) {
	t.Helper()
	dir := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.Command(pgtest.Tool(t, name), args...).CombinedOutput()
		if err != nil || strings.Contains(strings.ToLower(string(out)), "error") {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	if mode == trellis.CaptureLogical {
		f := filepath.Join(dir, "db.dump")
		run("pg_dump", "-Fc", "-T", "extra", "-f", f, "--dbname="+srcDSN)
		run("pg_restore", "--exit-on-error", "--dbname="+copyDSN, f)
		return
	}
	f := filepath.Join(dir, "db.sql")
	run("pg_dump", "-T", "extra", "-f", f, "--dbname="+srcDSN)
	run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-o", "/dev/null", "-f", f, "--dbname="+copyDSN)
}

// newLoginRole creates a role that may log in and replicate, dropped when
// the test ends (after the databases it owns).
func newLoginRole(t *testing.T) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "owner_" + hex.EncodeToString(b[:])
	admin := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(context.Background(), `CREATE ROLE `+role+` LOGIN REPLICATION`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After every database the role owns is dropped: cleanups run in
		// reverse, and the role was made before them.
		if _, err := conn.Exec(context.Background(), `DROP ROLE IF EXISTS `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role
}

// ownedDatabase gives database dsn (a superuser's) to role and returns
// role's DSN of it.
func ownedDatabase(t *testing.T, dsn, role string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{cc.Database}.Sanitize()+` OWNER TO `+role); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", role, cc.Host, cc.Port, cc.Database)
}
