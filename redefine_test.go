package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestRedefine: CREATE OR REPLACE TRANSFORM builds the new definition
// beside the old target, which keeps serving (a reader never sees it empty
// or partial), then swaps it in; grants, the user's indexes and views that
// still fit are carried over, and Apply says which do not.
func TestRedefine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	ctx := context.Background()
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'open', g, 1, 'n' FROM generate_series(1, 3000) g`)
	e.exec(`DO $$ BEGIN CREATE ROLE trellis_reader; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	e.apply(`CREATE TRANSFORM t AS SELECT id, customer, amount FROM orders WHERE amount > 10`)
	e.start()
	defer e.stop()
	e.converge("first definition")
	e.exec(`CREATE INDEX t_customer ON t (customer); CREATE INDEX t_amount ON t (amount);
		GRANT SELECT ON t TO trellis_reader; CREATE VIEW t_ids AS SELECT id, customer FROM t; CREATE VIEW t_amounts AS SELECT amount FROM t;
		COMMENT ON TABLE t IS 'kept'`)

	// A reader counts the target all along: never empty, never partial.
	reader, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			var n int
			if err := reader.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
				bad.Store("read failed: " + err.Error())
				return
			}
			if n != 2990 {
				bad.Store(fmt.Sprintf("a reader saw %d rows", n))
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	res, err := e.tr.Apply(ctx, `CREATE OR REPLACE TRANSFORM t AS SELECT id, customer, amount * 2 AS doubled FROM orders WHERE amount > 10`)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(res[0].Notes, "\n")
	if res[0].Action != "redefining" || !strings.Contains(notes, "index t_amount was not carried over") ||
		!strings.Contains(notes, "t_amounts was not carried over") || strings.Contains(notes, "t_customer") || strings.Contains(notes, "t_ids") {
		t.Fatalf("Apply said %s: %q", res[0].Action, notes)
	}
	e.converge("after the redefinition")
	stop.Store(true)
	wg.Wait()
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	var cols, comment string
	var granted, idx, view bool
	if err := e.conn.QueryRow(ctx, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 't'::regclass AND attnum > 0 AND NOT attisdropped AND attname NOT LIKE '\_\_%'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if err := e.conn.QueryRow(ctx, `SELECT has_table_privilege('trellis_reader', 't', 'SELECT'), to_regclass('t_customer') IS NOT NULL,
		to_regclass('t_ids') IS NOT NULL, obj_description('t'::regclass, 'pg_class')`).Scan(&granted, &idx, &view, &comment); err != nil {
		t.Fatal(err)
	}
	if cols != "id,customer,doubled" || !granted || !idx || !view || comment != "kept" {
		t.Fatalf("after the swap: columns %s, grant %v, index %v, view %v, comment %q", cols, granted, idx, view, comment)
	}
	var n int
	if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM t_ids`).Scan(&n); err != nil || n != 2990 {
		t.Fatalf("view over the new target: %d rows, %v", n, err)
	}
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Name != "t" || len(st[0].NotCarried) != 2 {
		t.Fatalf("status after the swap: %+v", st)
	}
	// Changes after the swap reach the new definition.
	e.exec(`UPDATE orders SET amount = 5 WHERE id <= 100`)
	e.converge("after writes to the redefined transform")
}

// TestRedefineRefusals: a redefinition that would read its own target
// through a chain is refused naming the cycle, and changes nothing; CREATE
// OR REPLACE of a transform that does not exist creates it.
func TestRedefineRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	ctx := context.Background()
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'open', g, 1, 'n' FROM generate_series(1, 100) g`)
	e.apply(`CREATE OR REPLACE TRANSFORM a AS SELECT id, customer, amount FROM orders;
		CREATE TRANSFORM b AS SELECT id, count(*) AS n FROM a GROUP BY id`)
	_, err := e.tr.Apply(ctx, `CREATE OR REPLACE TRANSFORM a AS SELECT id, n AS customer, n AS amount FROM b`)
	if err == nil || trellis.CodeOf(err) != "validation" || !strings.Contains(err.Error(), "(a → b → a)") {
		t.Fatalf("cycle: %v", err)
	}
	_, err = e.tr.Apply(ctx, `CREATE OR REPLACE TRANSFORM a AS SELECT id, customer, amount * 2 AS amount FROM orders`)
	if err == nil || trellis.CodeOf(err) != "conflict" || !strings.Contains(err.Error(), `transform "a" is read by transform "b"`) {
		t.Fatalf("redefining a target another transform reads: %v", err)
	}
	st, err := e.tr.Status(ctx)
	if err != nil || len(st) != 2 {
		t.Fatalf("after the refused cycle: %+v, %v", st, err)
	}
	var shadow bool
	if err := e.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname LIKE '\_\_trellis\_next%')`).Scan(&shadow); err != nil || shadow {
		t.Fatalf("a shadow table was left behind (%v)", err)
	}
	e.start()
	defer e.stop()
	e.converge("chain")
}
