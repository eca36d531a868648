package trellis_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// pausedFor waits until a transform is paused with a capture failure and
// checks its columns and that the error says what to do.
func pausedFor(t *testing.T, e *env, name string, columns []string, says string) trellis.TransformStatus {
	t.Helper()
	s := waitStatus(t, e, name, "paused for DDL drift", func(s trellis.TransformStatus) bool { return s.State == "paused" })
	f := s.CaptureFailure
	if f == nil || f.Kind != "capture" || !slices.Equal(f.Columns, columns) || !strings.Contains(f.Error, says) {
		t.Fatalf("%s: capture_failure %+v; want kind capture, columns %v, saying %q", name, f, columns, says)
	}
	return s
}

// stillLive checks, a few drift checks later, that a transform kept
// running.
func stillLive(t *testing.T, e *env, names ...string) {
	t.Helper()
	time.Sleep(2500 * time.Millisecond)
	for _, n := range names {
		st, err := e.tr.Status(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		if st[0].State != "live" {
			t.Fatalf("%s is %s (%+v), want live", n, st[0].State, st[0].CaptureFailure)
		}
	}
}

// TestDDLDrift: DDL on what a transform reads — a column dropped, renamed
// or retyped, the primary key changed, the table dropped or renamed —
// pauses that transform with capture_failure.kind = capture, the columns
// and the fix, found by the periodic catalog check even with no further
// write; the others keep running. A new column nobody reads changes
// nothing. RESUME refuses while the definition is broken and, after a
// retype, re-types the stored columns and rebuilds.
//
// Not parallel: whether the drift check or the worker's re-derive of the
// write after the rename meets the renamed column first is a race, and
// under the load of parallel tests the worker won once (kind halt, not
// capture; the same test passes alone and in the serial phase).
func TestDDLDrift(t *testing.T) {
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`ALTER TABLE orders ADD COLUMN code varchar(5)`)
	e.exec(`CREATE TABLE extra (id int PRIMARY KEY, v int)`)
	e.exec(`CREATE TABLE keyed (a int, b int, v int, PRIMARY KEY (a))`)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, 'n' || g, 'c' || (g % 9) FROM generate_series(1, 200) g`)
	e.exec(`INSERT INTO extra SELECT g, g FROM generate_series(1, 20) g`)
	e.exec(`INSERT INTO keyed SELECT g, g, g FROM generate_series(1, 20) g`)
	e.apply(`CREATE TRANSFORM notes AS SELECT id, note FROM orders;
		CREATE TRANSFORM states AS SELECT id, status FROM orders;
		CREATE TRANSFORM qtys AS SELECT id, qty FROM orders;
		CREATE TRANSFORM by_code AS SELECT code, count(*) AS n, sum(amount) AS total FROM orders GROUP BY code;
		CREATE TRANSFORM amounts AS SELECT customer, sum(amount) AS total FROM orders GROUP BY customer;
		CREATE TRANSFORM qsums AS SELECT customer, sum(qty) AS q, sum(qty) * 2 AS q2 FROM orders GROUP BY customer HAVING count(*) > 0;
		CREATE TRANSFORM extras AS SELECT id, v FROM extra;
		CREATE TRANSFORM keyeds AS SELECT a, v FROM keyed`)
	e.start()
	e.converge("built")

	// A column nobody reads, added and dropped: nothing pauses.
	e.exec(`ALTER TABLE orders ADD COLUMN unused int`)
	e.exec(`UPDATE orders SET unused = 1 WHERE id < 5`)
	e.exec(`ALTER TABLE orders DROP COLUMN unused`)
	stillLive(t, e, "notes", "states", "qtys", "by_code", "amounts")

	// Dropped, with no write after it: the periodic check finds it.
	e.exec(`ALTER TABLE orders DROP COLUMN note`)
	pausedFor(t, e, "notes", []string{"note"}, "RESUME TRANSFORM notes")
	if _, err := e.tr.Apply(context.Background(), `RESUME TRANSFORM notes`); trellis.CodeOf(err) != trellis.CodeValidation {
		t.Fatalf("RESUME with the column still dropped: %v", err)
	}
	if s := pausedFor(t, e, "notes", []string{"note"}, "no longer plans"); s.PausedBy == nil || *s.PausedBy != "system" {
		t.Fatalf("the refused RESUME changed the transform: %+v", s)
	}
	// Renamed, with writes after it.
	e.exec(`ALTER TABLE orders RENAME COLUMN status TO state`)
	e.exec(`UPDATE orders SET amount = amount + 1 WHERE id < 50`)
	pausedFor(t, e, "states", []string{"status"}, "RESUME TRANSFORM states")
	stillLive(t, e, "qtys", "by_code", "amounts", "extras", "keyeds")
	e.awaitNamed("with two paused", "qtys", "by_code", "amounts")
	e.sameRows("amounts", "SELECT customer, total FROM amounts", "SELECT customer, sum(amount) FROM orders GROUP BY customer")

	// Fixed: RESUME rebuilds them.
	e.exec(`ALTER TABLE orders ADD COLUMN note text`)
	e.exec(`ALTER TABLE orders RENAME COLUMN state TO status`)
	e.apply(`RESUME TRANSFORM notes; RESUME TRANSFORM states`)

	// Retyped: int -> bigint and a longer varchar pause with a RESUME
	// that re-types the stored columns.
	e.exec(`ALTER TABLE orders ALTER COLUMN qty TYPE bigint`)
	e.exec(`ALTER TABLE orders ALTER COLUMN code TYPE varchar(12)`)
	pausedFor(t, e, "qtys", []string{"qty"}, "re-types")
	pausedFor(t, e, "by_code", []string{"code", "__g0"}, "re-types")
	pausedFor(t, e, "qsums", []string{"q", "q2", "__x0", "__a0"}, "re-types")
	e.exec(`UPDATE orders SET qty = 5000000000, code = 'a-longer-one' WHERE id = 3`)
	e.apply(`RESUME TRANSFORM qtys; RESUME TRANSFORM by_code; RESUME TRANSFORM qsums`)
	e.converge("after the re-typing RESUMEs")
	if typ := e.queryText(`SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'qtys'::regclass AND attname = 'qty'`); typ != "bigint" {
		t.Fatalf("qtys.qty is %s after RESUME, want bigint", typ)
	}
	// sum(bigint) is numeric: the target follows the query's type.
	if typ := e.queryText(`SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'qsums'::regclass AND attname = 'q'`); typ != "numeric" {
		t.Fatalf("qsums.q is %s after RESUME, want numeric (the type of sum(bigint))", typ)
	}

	// The primary key changed; the table renamed; the table dropped.
	e.exec(`ALTER TABLE keyed DROP CONSTRAINT keyed_pkey, ADD PRIMARY KEY (b)`)
	pausedFor(t, e, "keyeds", []string{"a", "b"}, "primary key")
	e.apply(`DROP TRANSFORM keyeds`)
	e.exec(`ALTER TABLE extra RENAME TO extra2`)
	pausedFor(t, e, "extras", nil, "renamed")
	e.exec(`ALTER TABLE extra2 RENAME TO extra`)
	e.apply(`RESUME TRANSFORM extras`)
	e.converge("after the rename back")
	e.exec(`DROP TABLE extra`)
	pausedFor(t, e, "extras", nil, "dropped")
	stillLive(t, e, "notes", "states", "qtys", "by_code", "amounts", "qsums")
	e.apply(`DROP TRANSFORM extras`)
	e.exec(`UPDATE orders SET amount = amount + 1, note = 'x' WHERE id % 5 = 0`)
	e.converge("at the end")
}

func (e *env) queryText(sql string, args ...any) string {
	e.t.Helper()
	var s string
	if err := e.conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return s
}
