package trellis_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestRepairUnderSustainedWrites: writers that never pause keep the dirty
// set from ever being empty, and a worker that drained until it was
// never served anything else. A self-check's repair, which runs on the
// worker between batches, must still be taken and fix the row a hand edit
// broke.
func TestRepairUnderSustainedWrites(t *testing.T) {
	e := newEnv(t, trellis.Config{Capture: trellis.CaptureLogical})
	ctx := context.Background()
	e.exec(`CREATE TABLE hot (id bigint PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO hot SELECT g, 0 FROM generate_series(1, 20000) g`)
	e.apply(`CREATE TRANSFORM hot_t AS SELECT id, v FROM hot`)
	e.start()
	e.converge("built")

	pool, err := pgxpool.New(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for !stop.Load() {
				// Every id but 1, the row the hand edit breaks.
				if _, err := pool.Exec(ctx, `UPDATE hot SET v = v + 1 WHERE id = $1`, 2+rng.Int64N(19999)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
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
	stop.Store(true)
	wg.Wait()
	e.converge("after the writers")
}
