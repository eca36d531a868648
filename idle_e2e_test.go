package trellis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
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
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var dsn string
			capture := mode
			if mode == trellis.CaptureTrigger {
				dsn = pgtest.NewDatabaseOn(t, replicaServer(t))
				capture = trellis.CaptureAuto
			} else {
				dsn = pgtest.NewDatabase(t)
			}
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			exec := func(q string) {
				t.Helper()
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			exec(`CREATE TABLE busy (id int PRIMARY KEY, v int NOT NULL)`)
			exec(`CREATE TABLE quiet (id int PRIMARY KEY, v int NOT NULL)`)
			exec(`INSERT INTO quiet SELECT g, g FROM generate_series(1, 10) g`)
			tr, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: t.TempDir(), Capture: capture,
				ProgressInterval: time.Hour, CallTimeout: convergeTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if _, err := tr.Apply(ctx, `CREATE TRANSFORM busy_rows AS SELECT id, v * 2 AS v2 FROM busy;
				CREATE TRANSFORM quiet_sum AS SELECT count(*) AS n, sum(v) AS s FROM quiet;`); err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tr.Run(rctx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			converge := func(when string) trellis.Token {
				t.Helper()
				tok, err := tr.WatermarkToken(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tr.AwaitConverged(ctx, tok); err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				return tok
			}
			quietApplied := func() int64 {
				t.Helper()
				st, err := tr.Status(ctx, "quiet_sum")
				if err != nil {
					t.Fatal(err)
				}
				return st[0].KeysApplied
			}
			converge("built")
			before := quietApplied()
			for i := 1; i <= 3; i++ {
				exec(fmt.Sprintf(`INSERT INTO busy SELECT g, g FROM generate_series(%d, %d) g`, i*100, i*100+9))
				converge(fmt.Sprintf("after write %d", i))
			}
			if after := quietApplied(); after != before {
				t.Errorf("quiet_sum applied %d keys though nothing it reads changed", after-before)
			}
			var diff int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM ((SELECT id, v * 2 FROM busy EXCEPT ALL SELECT id, v2 FROM busy_rows)
				UNION ALL (SELECT id, v2 FROM busy_rows EXCEPT ALL SELECT id, v * 2 FROM busy)) x`).Scan(&diff); err != nil {
				t.Fatal(err)
			}
			if diff != 0 {
				t.Errorf("busy_rows differs from its query by %d rows", diff)
			}
		})
	}
}
