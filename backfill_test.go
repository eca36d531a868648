package trellis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestRequestBackfill: rows written behind capture's back (a load with
// the capture triggers off, and hand edits of the targets: wrong values,
// orphans) are repaired by REQUEST
// BACKFILL OF the table: every transform reading it rebuilds in place and
// converges, a transform reading another table keeps running untouched,
// and a table no transform reads is not_found (ADR 0040).
func TestRequestBackfill(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testRequestBackfill)
}

func testRequestBackfill(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	ctx := context.Background()
	e.exec(schemaSQL)
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, name text); CREATE TABLE audit (id int PRIMARY KEY)`)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 300) g`)
	e.exec(`INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 20) g`)
	e.apply(defsSQL + `CREATE TRANSFORM names AS SELECT id, upper(name) AS name FROM customers;`)
	e.start()
	e.converge("after the build")
	before := buildStarts(t, e)
	// Behind capture's back: a bulk load with the table's triggers off
	// (trigger capture misses it; logical capture does not), and targets
	// edited by hand (both miss those).
	e.exec(`DO $$ DECLARE r record; BEGIN
		ALTER TABLE orders DISABLE TRIGGER ALL;
		INSERT INTO orders SELECT g, g % 9, 'paid', g % 70, g % 3, 'bulk' FROM generate_series(301, 900) g;
		UPDATE orders SET amount = amount + 5 WHERE id % 10 = 0;
		DELETE FROM orders WHERE id % 17 = 0;
		FOR r IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal LOOP
			EXECUTE format('ALTER TABLE orders ENABLE ALWAYS TRIGGER %I', r.tgname);
		END LOOP;
	END $$`)
	e.exec(`INSERT INTO big_orders VALUES (-1, 0, 'ORPHAN', 1); UPDATE big_orders SET total = -1 WHERE id = 20;
		UPDATE by_customer SET n = n + 100 WHERE customer = 1; UPDATE names SET name = 'edited' WHERE id = 1`)
	requested := time.Now()
	r, err := e.tr.RequestBackfill(ctx, "public.orders")
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != "requested" || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "big_orders, by_customer, totals") {
		t.Fatalf("RequestBackfill: %+v; want the three readers of orders named", r)
	}
	e.await("after the backfill")
	for _, name := range []string{"big_orders", "by_customer", "totals"} {
		cmp, err := e.tr.CompareNow(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal() {
			t.Fatalf("%s after the backfill: missing %d %v, extra %d %v", name, cmp.Missing, cmp.MissingSample, cmp.Extra, cmp.ExtraSample)
		}
	}
	after := buildStarts(t, e)
	for _, name := range []string{"big_orders", "by_customer", "totals"} {
		if !after[name].After(requested.Add(-time.Second)) || !after[name].After(before[name]) {
			t.Errorf("%s: its last build started at %s, before the request at %s: no rebuild", name, after[name], requested)
		}
	}
	// The transform reading another table kept running: no new build, and
	// the hand edit of its target is still there (nothing re-derived it).
	if !after["names"].Equal(before["names"]) {
		t.Errorf("names (reads customers only) was rebuilt by a backfill of orders")
	}
	if got := e.queryString(`SELECT name FROM names WHERE id = 1`); got != "edited" {
		t.Errorf("names was re-derived by a backfill of orders: %q", got)
	}
	// The second table's backfill repairs the hand edit, and changes made
	// after the backfills flow as usual.
	if _, err := e.tr.RequestBackfill(ctx, "customers"); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE orders SET qty = qty + 1 WHERE id < 50`)
	e.converge("after the backfill of customers and writes")
	for table, code := range map[string]trellis.ErrorCode{"audit": trellis.CodeNotFound, "missing_table": trellis.CodeNotFound, "orders; DROP TRANSFORM names": trellis.CodeValidation} {
		if _, err := e.tr.RequestBackfill(ctx, table); trellis.CodeOf(err) != code {
			t.Errorf("RequestBackfill(%q): %v, want code %s", table, err, code)
		}
	}
	// A paused reader is left to its RESUME, and said so.
	e.apply(`PAUSE TRANSFORM names`)
	r, err = e.tr.RequestBackfill(ctx, "customers")
	if err != nil || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "RESUME TRANSFORM names") {
		t.Fatalf("backfill of a table only a paused transform reads: %+v, %v", r, err)
	}
	if st := statusOf(t, e, "names"); st.State != "paused" {
		t.Fatalf("a backfill request moved paused transform names to %s", st.State)
	}
}

// buildStarts is when each transform's last build started.
func buildStarts(t *testing.T, e *env) map[string]time.Time {
	t.Helper()
	st, err := e.tr.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, s := range st {
		if s.Build != nil {
			out[s.Name] = s.Build.StartedAt
		}
	}
	return out
}

// statusOf is one transform's status.
func statusOf(t *testing.T, e *env, name string) trellis.TransformStatus {
	t.Helper()
	st, err := e.tr.Status(context.Background(), name)
	if err != nil || len(st) != 1 {
		t.Fatalf("status of %s: %v %v", name, st, err)
	}
	return st[0]
}
