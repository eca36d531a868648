package trellis_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestRepairUnderSustainedWrites: while writers that never pause keep
// keys waiting, a self-check's repair, which runs on the worker between
// its batches (the worker yields every liveTurn), must still be taken and
// fix the row a hand edit broke. (On this machine it also passed before
// the worker yielded: the dirty set still emptied between batches now and
// then; it guards the behaviour.)
func TestRepairUnderSustainedWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{Capture: trellis.CaptureLogical})
	ctx := context.Background()
	e.exec(`CREATE TABLE hot (id bigint PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO hot SELECT g, 0 FROM generate_series(1, 20000) g`)
	e.apply(`CREATE TRANSFORM hot_t AS SELECT id, v FROM hot`)
	e.start()
	e.converge("built")

	stopWriters := writeUntilStopped(t, e.dsn, 3, func(rng *rand.Rand) (string, []any) {
		// Every id but 1, the row the hand edit breaks.
		return `UPDATE hot SET v = v + 1 WHERE id = $1`, []any{2 + rng.Int64N(19999)}
	})
	defer stopWriters()
	time.Sleep(time.Second) // the backlog never empties from here on
	e.exec(`UPDATE hot_t SET v = 42 WHERE id = 1`)
	j, err := e.tr.SelfCheck(ctx, "hot_t", trellis.SelfCheckOptions{Repair: true, Wait: true, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("self-check with repair while writers run: %v", err)
	}
	if j.Report == nil || j.Report.Repair == nil || j.Report.Repair.Fixed < 1 {
		t.Fatalf("self-check with repair while writers run: %+v", j.Report)
	}
	if got := e.queryInt(`SELECT v FROM hot_t WHERE id = 1`); got != 0 {
		t.Fatalf("repaired row has v = %d, want 0", got)
	}
	stopWriters()
	e.converge("after the writers")
}
