package trellis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestIdlePositionsAdvanceTogether (ADR 0044): a transform that reads
// nothing a write changed still converges on the write's token, at once,
// though its instance records idle positions only every hour: the runner
// moves the position of every idle transform with an empty dirty set as
// the stream moves, without a batch, and an AwaitConverged in its process
// has those positions recorded when it finds them behind. Before, the wait
// lasted until the next ProgressInterval (here it would time out). Both
// capture modes.
func TestIdlePositionsAdvanceTogether(t *testing.T) {
	for _, mode := range []string{trellis.CaptureLogical, trellis.CaptureTrigger} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, trellis.Config{Capture: mode, ProgressInterval: time.Hour})
			e.exec(`CREATE TABLE busy (id int PRIMARY KEY, v int NOT NULL)`)
			e.exec(`CREATE TABLE quiet (id int PRIMARY KEY, v int NOT NULL)`)
			e.exec(`INSERT INTO quiet SELECT g, g FROM generate_series(1, 10) g`)
			e.apply(`CREATE TRANSFORM busy_rows AS SELECT id, v * 2 AS v2 FROM busy;
				CREATE TRANSFORM quiet_sum AS SELECT count(*) AS n, sum(v) AS s FROM quiet;`)
			e.start()
			quietApplied := func() int64 {
				t.Helper()
				st, err := e.tr.Status(context.Background(), "quiet_sum")
				if err != nil {
					t.Fatal(err)
				}
				return st[0].KeysApplied
			}
			e.converge("built")
			before := quietApplied()
			for i := 1; i <= 3; i++ {
				e.exec(fmt.Sprintf(`INSERT INTO busy SELECT g, g FROM generate_series(%d, %d) g`, i*100, i*100+9))
				e.converge(fmt.Sprintf("after write %d", i))
			}
			if after := quietApplied(); after != before {
				t.Errorf("quiet_sum applied %d keys though nothing it reads changed", after-before)
			}
		})
	}
}
