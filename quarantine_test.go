package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// sameRows fails the test unless queries a and b give the same rows
// (two-way EXCEPT ALL).
func (e *env) sameRows(when, a, b string) {
	e.t.Helper()
	q := `SELECT (SELECT count(*) FROM ((` + a + `) EXCEPT ALL (` + b + `)) a) + (SELECT count(*) FROM ((` + b + `) EXCEPT ALL (` + a + `)) b)`
	if n := e.queryInt(q); n != 0 {
		e.t.Fatalf("%s: %s differs from %s in %d rows", when, a, b, n)
	}
}

// await waits until every transform applied what was committed, without
// comparing targets to their queries (held keys make them differ).
func (e *env) await(when string) {
	e.t.Helper()
	e.awaitWithin(when, convergeTimeout)
}

// awaitWithin is await with a deadline of d.
func (e *env) awaitWithin(when string, d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tok, err := e.tr.WatermarkToken(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.tr.AwaitConverged(ctx, tok); err != nil {
		e.t.Fatalf("%s: %v", when, err)
	}
}

// awaitNamed waits until the named transforms applied what was
// committed (others may be quarantined or paused).
func (e *env) awaitNamed(when string, names ...string) {
	e.t.Helper()
	tok, err := e.tr.WatermarkToken(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range names {
		waitStatus(e.t, e, n, "applied "+when, func(s trellis.TransformStatus) bool {
			lsn, err := catalog.ParseLSN(s.AppliedLSN)
			return err == nil && s.State == "live" && lsn >= uint64(tok)
		})
	}
}

func heldCount(s trellis.TransformStatus) int64 {
	if s.HeldKeys == nil {
		return 0
	}
	return s.HeldKeys.Count
}

// TestPoisonedKeys: rows a target refuses (a user CHECK on the target, a
// division by zero in a select expression) are isolated by bisection and
// held per transform and key, in the build and live; every other key and
// every other transform keeps applying. A held key is retried when its
// row changes and on release; past the fuse the transform is quarantined,
// and RESUME after the fix rebuilds it with nothing held.
func TestPoisonedKeys(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testPoisonedKeys)
}

func testPoisonedKeys(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	ctx := context.Background()
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 12, NULL FROM generate_series(1, 300) g`)
	e.exec(`UPDATE orders SET amount = 5000 WHERE id IN (5, 77)`)
	e.exec(`UPDATE orders SET qty = 13 WHERE id IN (9, 10)`)
	e.apply(`CREATE TRANSFORM checked AS SELECT id, amount FROM orders;
		CREATE TRANSFORM ratio AS SELECT id, 100 / (qty - 13) AS r FROM orders;
		CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n, sum(amount) AS revenue FROM orders GROUP BY customer`)
	// A user constraint on the target: trellis-repl must hold the rows it
	// refuses, not stop.
	e.exec(`ALTER TABLE checked ADD CONSTRAINT amount_small CHECK (amount < 1000)`)
	e.start()
	e.await("built")
	checkRows := func(when string) {
		t.Helper()
		var held []string
		ps, err := e.tr.PoisonedSince(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Transform == "checked" {
				held = append(held, p.KeyText)
			}
		}
		notHeld := "true"
		if len(held) > 0 {
			notHeld = "id NOT IN (" + strings.Join(held, ",") + ")"
		}
		e.sameRows(when, "SELECT id, amount FROM checked WHERE "+notHeld, "SELECT id, amount FROM orders WHERE "+notHeld)
		e.sameRows(when, "SELECT customer, n, revenue FROM by_customer", "SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer")
	}
	st := waitStatus(t, e, "checked", "holding two keys", func(s trellis.TransformStatus) bool { return heldCount(s) == 2 })
	if st.State != "live" || st.HeldKeys.OldestPoisonedAt.IsZero() {
		t.Fatalf("checked after its build: %+v", st)
	}
	waitStatus(t, e, "ratio", "holding two keys", func(s trellis.TransformStatus) bool { return heldCount(s) == 2 && s.State == "live" })
	if s := waitStatus(t, e, "by_customer", "live", func(s trellis.TransformStatus) bool { return s.State == "live" }); s.HeldKeys != nil {
		t.Fatalf("by_customer holds keys it never failed on: %+v", s.HeldKeys)
	}
	ps, err := e.tr.PoisonedSince(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range ps {
		if p.SourceTable != `"public"."orders"` || p.Error == "" || p.PoisonedAt.IsZero() || p.Attempts < 3 {
			t.Fatalf("poison entry %+v", p)
		}
		got[p.Transform+"/"+p.KeyText] = p.SQLState
	}
	want := map[string]string{"checked/5": "23514", "checked/77": "23514", "ratio/9": "22012", "ratio/10": "22012"}
	if len(got) != len(want) {
		t.Fatalf("held keys %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("held keys %v, want %v", got, want)
		}
	}
	checkRows("after the build")
	e.sameRows("after the build", "SELECT id, r FROM ratio", "SELECT id, 100 / (qty - 13) FROM orders WHERE qty <> 13")

	// Live: a batch of many good keys with bad ones among them applies the
	// good ones; a corrected row is retried and released.
	e.exec(`UPDATE orders SET amount = amount + 1 WHERE id <= 150`)
	e.exec(`UPDATE orders SET amount = 7000 WHERE id = 20`)
	e.exec(`UPDATE orders SET amount = 50 WHERE id = 5`)
	e.await("live changes")
	waitStatus(t, e, "checked", "holding 77 and 20", func(s trellis.TransformStatus) bool { return heldCount(s) == 2 })
	checkRows("live changes")
	if n := e.queryInt(`SELECT count(*) FROM checked WHERE id = 5`); n != 1 {
		t.Fatal("order 5, corrected, is not in checked")
	}

	// Release: the constraint is relaxed; one key, then all.
	e.exec(`ALTER TABLE checked DROP CONSTRAINT amount_small`)
	if err := e.tr.ReleaseKey(ctx, "checked", "orders", []string{"77"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, e, "checked", "holding one key", func(s trellis.TransformStatus) bool { return heldCount(s) == 1 })
	if err := e.tr.ReleaseKey(ctx, "checked", "orders", []string{"77"}); trellis.CodeOf(err) != trellis.CodeNotFound {
		t.Fatalf("releasing a key not held: %v", err)
	}
	if err := e.tr.ReleaseKey(ctx, "checked", "nosuch", []string{"1"}); trellis.CodeOf(err) != trellis.CodeNotFound {
		t.Fatalf("releasing a key of a table the transform does not read: %v", err)
	}
	if err := e.tr.ReleaseKey(ctx, "nosuch", "orders", []string{"1"}); trellis.CodeOf(err) != trellis.CodeNotFound {
		t.Fatalf("releasing a key of no transform: %v", err)
	}
	if n, err := e.tr.ReleaseAll(ctx, "checked"); err != nil || n != 1 {
		t.Fatalf("ReleaseAll: %d, %v", n, err)
	}
	waitStatus(t, e, "checked", "holding nothing", func(s trellis.TransformStatus) bool { return s.HeldKeys == nil })
	e.await("after the releases")
	e.sameRows("after the releases", "SELECT id, amount FROM checked", "SELECT id, amount FROM orders")

	// Paging.
	page, err := e.tr.HeldKeysPage(ctx, "ratio", 1, "")
	if err != nil || len(page.Keys) != 1 || page.NextCursor == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	page2, err := e.tr.HeldKeysPage(ctx, "ratio", 1, page.NextCursor)
	if err != nil || len(page2.Keys) != 1 || page2.Keys[0].KeyText == page.Keys[0].KeyText {
		t.Fatalf("second page: %+v, %v", page2, err)
	}
	page3, err := e.tr.HeldKeysPage(ctx, "ratio", 1, page2.NextCursor)
	if err != nil || len(page3.Keys) != 0 || page3.NextCursor != page2.NextCursor {
		t.Fatalf("past the end: %+v, %v", page3, err)
	}
	if _, err := e.tr.HeldKeysPage(ctx, "ratio", 1, "garbage!"); trellis.CodeOf(err) != trellis.CodeValidation {
		t.Fatalf("a bad cursor: %v", err)
	}

	// The fuse: three more poisoned rows (five held) quarantine ratio;
	// the others keep applying.
	for _, id := range []int{30, 31, 32} {
		e.exec(`UPDATE orders SET qty = 13 WHERE id = $1`, id)
	}
	waitStatus(t, e, "ratio", "quarantined", func(s trellis.TransformStatus) bool { return s.State == "quarantined" })
	q, err := e.tr.Quarantined(ctx)
	if err != nil || len(q) != 1 || q[0].Transform != "ratio" || q[0].HeldKeys != 5 {
		t.Fatalf("Quarantined: %+v, %v", q, err)
	}
	if qs, err := e.tr.QuarantineStatus(ctx, "checked"); err != nil || qs.State != "live" || qs.HeldKeys != 0 {
		t.Fatalf("QuarantineStatus(checked): %+v, %v", qs, err)
	}
	e.exec(`UPDATE orders SET amount = amount + 2 WHERE id % 3 = 0`)
	e.awaitNamed("with ratio quarantined", "checked", "by_customer")
	e.sameRows("with ratio quarantined", "SELECT id, amount FROM checked", "SELECT id, amount FROM orders")
	checkRows("with ratio quarantined")

	// RESUME while the data is still bad rebuilds and holds again; after
	// the fix it rebuilds with nothing held.
	e.exec(`UPDATE orders SET qty = 1 WHERE qty = 13`)
	e.apply(`RESUME TRANSFORM ratio`)
	e.converge("after RESUME of ratio")
	if s := waitStatus(t, e, "ratio", "live", func(s trellis.TransformStatus) bool { return s.State == "live" }); s.HeldKeys != nil {
		t.Fatalf("ratio after RESUME holds %+v", s.HeldKeys)
	}
}

// TestHaltOnce: a failure every key reproduces — a function the
// definition calls dropped, the target dropped by hand — pauses that
// transform once as a halt naming the cause and the fix; the others keep
// running, and RESUME after the fix builds it again.
func TestHaltOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`CREATE FUNCTION tax(numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 0.2'`)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 100) g`)
	e.apply(`CREATE TRANSFORM taxed AS SELECT id, tax(amount) AS tax FROM orders;
		CREATE TRANSFORM copied AS SELECT id, amount FROM orders;` + defsSQL)
	e.start()
	e.converge("built")
	e.exec(`DROP FUNCTION tax(numeric)`)
	e.exec(`UPDATE orders SET amount = amount + 1 WHERE id <= 10`)
	s := waitStatus(t, e, "taxed", "halted", func(s trellis.TransformStatus) bool { return s.State == "paused" })
	if f := s.CaptureFailure; f == nil || f.Kind != "halt" || !strings.Contains(f.Error, "42883") || !strings.Contains(f.Error, "RESUME TRANSFORM taxed") || s.HeldKeys != nil {
		t.Fatalf("taxed: capture_failure %+v, held %+v", s.CaptureFailure, s.HeldKeys)
	}
	e.exec(`DROP TABLE copied`)
	e.exec(`UPDATE orders SET amount = amount + 1 WHERE id <= 20`)
	s = waitStatus(t, e, "copied", "halted", func(s trellis.TransformStatus) bool { return s.State == "paused" })
	if f := s.CaptureFailure; f == nil || f.Kind != "halt" || !strings.Contains(f.Error, "42P01") {
		t.Fatalf("copied: capture_failure %+v", s.CaptureFailure)
	}
	e.apply(`DROP TRANSFORM copied`)
	// RESUME while the function is still missing is refused, changing
	// nothing.
	if _, err := e.tr.Apply(context.Background(), `RESUME TRANSFORM taxed`); trellis.CodeOf(err) != trellis.CodeValidation {
		t.Fatalf("RESUME with the function missing: %v", err)
	}
	e.exec(`CREATE FUNCTION tax(numeric) RETURNS numeric IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 0.2'`)
	e.apply(`RESUME TRANSFORM taxed`)
	e.converge("after RESUME")
}

// TestUnapplicableGroupKeyHeld: a change that can never be applied (a
// group key too long for the target's index, 54000) holds that key; the
// transform stays live for its other keys and the others go on.
func TestUnapplicableGroupKeyHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(`CREATE TABLE s (k int PRIMARY KEY, t text)`)
	e.exec(schemaSQL)
	e.apply(`CREATE TRANSFORM g AS SELECT t, count(*) AS n FROM s GROUP BY t;` + defsSQL)
	_, err := e.tr.Apply(context.Background(), `CREATE TRANSFORM dup AS SELECT t, t AS t2, count(*) AS n FROM s GROUP BY t`)
	if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(fmt.Sprint(err), "select it once") {
		t.Fatalf("selecting a group expression twice: %v", err)
	}
	e.start()
	e.exec(`INSERT INTO s VALUES (1, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i)), (2, 'short')`)
	e.exec(`INSERT INTO orders VALUES (1, 1, 'new', 50, 1, NULL)`)
	waitStatus(t, e, "g", "live, holding the long key", func(s trellis.TransformStatus) bool { return heldCount(s) == 1 && s.State == "live" })
	ps, err := e.tr.PoisonedSince(context.Background(), time.Time{})
	if err != nil || len(ps) != 1 || ps[0].SQLState != "54000" || ps[0].KeyText != "1" {
		t.Fatalf("poisoned: %+v, %v", ps, err)
	}
	e.await("others with the key held")
	e.sameRows("the other key", "SELECT t, n FROM g", "SELECT t, count(*) FROM s WHERE k <> 1 GROUP BY t")
	// A TRUNCATE re-derives what is held too, though the target never
	// stored a row of it: the key is released.
	e.exec(`TRUNCATE s`)
	waitStatus(t, e, "g", "releasing the key after TRUNCATE", func(s trellis.TransformStatus) bool { return s.HeldKeys == nil })
	e.converge("after TRUNCATE")
	e.apply(`DROP TRANSFORM g`)
	e.converge("others after the hold")
}

// TestBuildHoldsTargetRefusedGroup: an aggregate's build fills its ledger
// and aggregates it once (ADR 0022); a value there that only the target
// refuses (a group key too long for the target's index, 54000) fails that
// aggregation, and the build starts over group by group so that the one
// key is held and every other group is built and kept live.
func TestBuildHoldsTargetRefusedGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(`CREATE TABLE s (k int PRIMARY KEY, t text, v int)`)
	e.exec(`INSERT INTO s SELECT g, 'g' || (g % 40), g FROM generate_series(1, 2000) g`)
	e.exec(`INSERT INTO s VALUES (5000, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i), 1)`)
	e.apply(`CREATE TRANSFORM g AS SELECT t, count(*) AS n, sum(v) AS s FROM s GROUP BY t`)
	e.start()
	st := waitStatus(t, e, "g", "live, holding the long key", func(s trellis.TransformStatus) bool { return heldCount(s) == 1 && s.State == "live" })
	if st.BackfillFailure != nil {
		t.Fatalf("backfill_failure %+v, want none", st.BackfillFailure)
	}
	ps, err := e.tr.PoisonedSince(context.Background(), time.Time{})
	if err != nil || len(ps) != 1 || ps[0].SQLState != "54000" || ps[0].KeyText != "5000" {
		t.Fatalf("poisoned: %+v, %v", ps, err)
	}
	e.sameRows("built with the key held", "SELECT t, n, s FROM g", "SELECT t, count(*), sum(v) FROM s WHERE k <> 5000 GROUP BY t")
	e.exec(`UPDATE s SET v = v + 1 WHERE k % 7 = 0`)
	e.exec(`UPDATE s SET t = 'short' WHERE k = 5000`) // the held key's row changes: retried, applied
	waitStatus(t, e, "g", "the key released", func(s trellis.TransformStatus) bool { return s.HeldKeys == nil })
	e.converge("after the held row changed")
}
