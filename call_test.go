package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestCallTimeout: a call blocked by a lock another session holds returns
// a timeout error within the call timeout, while the lock is still held,
// and leaves nothing behind: no transform, no table, no session of its
// own still queued for the lock (ADR 0040). The waits are bounded by their
// context, not by the call timeout. Serial (not t.Parallel): the calls that
// must go through do so within the 2 s call timeout, which the parallel
// tests' load on two cores could exceed.
func TestCallTimeout(t *testing.T) {
	e := newEnv(t, trellis.Config{CallTimeout: 2 * time.Second})
	e.exec(schemaSQL)
	ctx := context.Background()
	blocker, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	blocked := func(lock string, call func() error) {
		t.Helper()
		tx, err := blocker.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, lock); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = call()
		took := time.Since(start)
		if trellis.CodeOf(err) != trellis.CodeTimeout {
			t.Fatalf("under %q: %v (code %s), want a timeout error", lock, err, trellis.CodeOf(err))
		}
		// Generous for a loaded machine; the lock is held for as long as
		// the call takes, so a call that ignored the budget would not
		// return at all.
		if took > 30*time.Second {
			t.Fatalf("under %q: the call returned after %s, far past its 2s budget", lock, took)
		}
		if n := e.queryInt(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`); n != 0 {
			t.Fatalf("under %q: %d sessions still wait for a lock after the call returned", lock, n)
		}
	}
	blocked(`LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`, func() error {
		_, err := e.tr.Apply(ctx, `CREATE TRANSFORM big AS SELECT id, amount FROM orders`)
		return err
	})
	// A script has one call timeout per statement (a thousand
	// definitions are not cut short by their number), but a lock is still
	// waited for no longer than one: the server's lock_timeout, not its
	// five-times-longer statement_timeout, ends this one.
	var scriptErr error
	blocked(`LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`, func() error {
		_, scriptErr = e.tr.Apply(ctx, `CREATE TRANSFORM s1 AS SELECT id, amount FROM orders;
CREATE TRANSFORM s2 AS SELECT id FROM orders; CREATE TRANSFORM s3 AS SELECT amount, id FROM orders;
CREATE TRANSFORM s4 AS SELECT id, amount * 2 AS a2 FROM orders; CREATE TRANSFORM s5 AS SELECT id, amount + 1 AS a1 FROM orders`)
		return scriptErr
	})
	if !strings.Contains(fmt.Sprint(scriptErr), "lock timeout") {
		t.Fatalf("a five-statement script under a lock: %v; want it ended by the lock timeout of one call", scriptErr)
	}
	if n := e.queryInt(`SELECT count(*) FROM trellis.transforms`); n != 0 {
		t.Fatalf("a timed-out Apply left %d transforms", n)
	}
	if n := e.queryInt(`SELECT count(*) FROM pg_class WHERE relname = 'big'`); n != 0 {
		t.Fatal("a timed-out Apply left its target table")
	}
	blocked(`LOCK TABLE trellis.transforms IN ACCESS EXCLUSIVE MODE`, func() error {
		_, err := e.tr.Status(ctx)
		return err
	})
	// Once the lock is free the same call goes through.
	e.apply(`CREATE TRANSFORM big AS SELECT id, amount FROM orders`)
	// A wait is bounded by its context: with no runner the transform never
	// builds, and the wait runs past the call timeout until its own
	// deadline.
	tok, err := e.tr.WatermarkToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	err = e.tr.AwaitConverged(wctx, tok)
	if trellis.CodeOf(err) != trellis.CodeTimeout || time.Since(start) < 4*time.Second {
		t.Fatalf("AwaitConverged: %v after %s; want a timeout at its own 5s deadline, not the 2s call timeout", err, time.Since(start))
	}
}
