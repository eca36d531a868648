package trellis_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestBuildSeesWriterInPublishWindow: a transaction that takes its xid after
// the runner's ALTER PUBLICATION … ADD TABLE took its own, and writes the
// source before that commits, is decoded without the table in the
// publication (its changes precede the commit in the WAL), so only the
// build can see it: the fence must wait for it before the build reads the
// source. The runner's publishing transaction is held open, after its
// catalog change, by an event trigger waiting on an advisory lock.
func TestBuildSeesWriterInPublishWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, trellis.Config{})
	e.exec(`CREATE TABLE src (id int PRIMARY KEY, v int)`)
	e.exec(`INSERT INTO src SELECT g, g FROM generate_series(1, 10) g`)
	e.exec(`CREATE FUNCTION hold_publish() RETURNS event_trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(4242); END $$`)
	e.exec(`CREATE EVENT TRIGGER hold_publish ON ddl_command_end WHEN TAG IN ('ALTER PUBLICATION') EXECUTE FUNCTION hold_publish()`)
	locker, writer := connectTo(t, e.dsn), connectTo(t, e.dsn)
	if _, err := locker.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.apply(`CREATE TRANSFORM t_rows AS SELECT id, v FROM src`)
	// The runner's ALTER PUBLICATION has its xid and waits in the trigger.
	for deadline := time.Now().Add(waitTimeout); ; {
		var waiting bool
		if err := e.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner never published src")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A writer with a later xid writes before the publication commits.
	for _, s := range []string{`BEGIN`, `INSERT INTO src VALUES (100, 100)`} {
		if _, err := writer.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := locker.Exec(ctx, `SELECT pg_advisory_unlock(4242)`); err != nil {
		t.Fatal(err)
	}
	// Give a build that does not wait for the writer time to finish.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		st, err := e.tr.Status(ctx, "t_rows")
		if err != nil {
			t.Fatal(err)
		}
		if len(st) == 1 && st[0].State == "live" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := writer.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO src VALUES (101, 101)`)
	e.converge("after a write inside the publishing window")
}

func connectTo(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
