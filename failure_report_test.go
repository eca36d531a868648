package trellis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// diskFull makes every write to table fail as a full disk would (SQLSTATE
// 53100, a statement trigger): a failure no row or key explains. The
// returned function removes it.
func diskFull(t *testing.T, e *env, table string) (fix func()) {
	t.Helper()
	e.exec(`CREATE OR REPLACE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END$$`)
	tbl := pgx.Identifier{table}.Sanitize()
	e.exec(`CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE OR DELETE ON ` + tbl + ` FOR EACH STATEMENT EXECUTE FUNCTION disk_full()`)
	return func() { e.exec(`DROP TRIGGER disk_full ON ` + tbl) }
}

// waitStatus polls the transform's status until ok accepts it.
func waitStatus(t *testing.T, e *env, name, what string, ok func(trellis.TransformStatus) bool) trellis.TransformStatus {
	t.Helper()
	deadline := time.Now().Add(convergeTimeout)
	for {
		st, err := e.tr.Status(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if ok(st[0]) {
			return st[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never %s; status %+v", name, what, st[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFailureReports: applying changes that keeps failing with nothing to
// blame shows as drain_failure (batch, tables, error, SQLSTATE, since,
// last seen, attempts), is retried and clears once it applies; a build
// that keeps failing shows as backfill_failure and after a few attempts
// pauses the transform, which a RESUME after the fix builds through.
func TestFailureReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 100) g`)
	e.apply(`CREATE TRANSFORM big_orders AS SELECT o.id, o.amount FROM orders o WHERE o.amount > 10`)
	e.start()
	e.converge("built")

	release := diskFull(t, e, "big_orders")
	e.exec(`UPDATE orders SET amount = amount + 30 WHERE id <= 5`)
	s := waitStatus(t, e, "big_orders", "reporting a drain failure", func(s trellis.TransformStatus) bool {
		return s.DrainFailure != nil && s.DrainFailure.Attempts >= 2
	})
	f := s.DrainFailure
	if f.SQLState != "53100" || f.Keys != 5 || len(f.Tables) != 1 || !strings.Contains(f.Tables[0], "orders") ||
		f.Error == "" || f.Since.IsZero() || f.LastSeen.Before(f.Since) || s.State != "live" {
		t.Fatalf("drain_failure %+v in state %s; want 5 keys of orders failing with 53100, still live", *f, s.State)
	}
	release()
	e.converge("after the disk was fixed")
	waitStatus(t, e, "big_orders", "clearing its drain failure", func(s trellis.TransformStatus) bool { return s.DrainFailure == nil })

	e.apply(`CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n FROM orders GROUP BY customer`)
	e.stop()
	release = diskFull(t, e, "by_customer")
	e.start()
	s = waitStatus(t, e, "by_customer", "paused after failed builds", func(s trellis.TransformStatus) bool { return s.State == "paused" })
	if s.BackfillFailure == nil || s.BackfillFailure.Attempts != 5 || !strings.Contains(s.BackfillFailure.LastError, "53100") ||
		s.CaptureFailure == nil || s.CaptureFailure.Kind != "halt" || !strings.Contains(s.CaptureFailure.Error, "RESUME TRANSFORM by_customer") {
		t.Fatalf("after failed builds: backfill_failure %+v, capture_failure %+v", s.BackfillFailure, s.CaptureFailure)
	}
	release()
	e.apply(`RESUME TRANSFORM by_customer`)
	e.converge("after RESUME")
	s = waitStatus(t, e, "by_customer", "live", func(s trellis.TransformStatus) bool { return s.State == "live" })
	if s.BackfillFailure != nil || s.CaptureFailure != nil {
		t.Fatalf("live again but backfill_failure %+v, capture_failure %+v", s.BackfillFailure, s.CaptureFailure)
	}
}
