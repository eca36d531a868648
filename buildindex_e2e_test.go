package trellis_test

import (
	"context"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestLedgerGroupIndexAfterBuild: a fresh aggregate build fills its ledger
// without the group-key index, which only the recompute steps read, and
// makes it before the transform goes live (ADR 0025); min/max recomputes
// then run with it.
func TestLedgerGroupIndexAfterBuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(`CREATE TABLE s (k int PRIMARY KEY, g int, v int)`)
	e.exec(`INSERT INTO s SELECT i, i % 30, i FROM generate_series(1, 3000) i`)
	e.apply(`CREATE TRANSFORM ext AS SELECT g, min(v) AS lo, max(v) AS hi, count(*) AS n FROM s GROUP BY g`)
	e.start()
	e.converge("built")
	var n int
	if err := e.conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE 'ledger\_%\_group'`,
		e.tr.Schema()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d group indexes on the ledger after the build, want 1", n)
	}
	// Every group loses its minimum and its maximum: recomputed.
	e.exec(`DELETE FROM s WHERE v <= 30 OR v > 2970`)
	e.converge("extremes deleted")
}
