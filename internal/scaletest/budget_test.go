// Package scaletest holds end-to-end tests of a runner with many
// transforms beside an application (issue 25): its own package so that it
// runs beside the root package's suite.
package scaletest

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const appConns = 40

// budgetTablesEnv sets TestConnectionBudget's source tables, four
// transforms each: 25 (100 transforms) by default, 75 (300) for the full
// size of issue 25.
const budgetTablesEnv = "TRELLIS_TEST_BUDGET_TABLES"

// budgetTables is TestConnectionBudget's number of source tables. 25 make
// 100 transforms: with a connection each (as before ADR 0028) they and
// the application's 40 would still need more than the server's 100, and
// ten times the runner's budget; 75 took the test three times as long.
func budgetTables(t *testing.T) int {
	v := os.Getenv(budgetTablesEnv)
	if v == "" {
		return 25
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of tables", budgetTablesEnv, v)
	}
	return n
}

// TestConnectionBudget: on a server with PostgreSQL's default
// max_connections = 100, 100 transforms (row, aggregate, join, chained;
// 300 with TRELLIS_TEST_BUDGET_TABLES=75) build and stay exact under a
// workload while the application's own 40 connections — and the new ones
// it opens meanwhile — never fail, and the runner never holds more than
// its budget (ADR 0028). Before the budget, each transform held a
// connection and the application was locked out. It catches the planted
// bug applier_connection_per_transform (make plants).
func TestConnectionBudget(t *testing.T) {
	budgetTables := budgetTables(t)
	srv := pgtest.ExtraServer(t, "max_connections=100", map[string]string{"max_connections": "100"})
	dsn := pgtest.NewDatabaseOn(t, srv)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var schema strings.Builder
	schema.WriteString(`CREATE TABLE d (id int PRIMARY KEY, label text);
		INSERT INTO d SELECT g, 'l' || g FROM generate_series(0, 9) g;`)
	var defs strings.Builder
	for i := 0; i < budgetTables; i++ {
		fmt.Fprintf(&schema, `CREATE TABLE s%d (id int PRIMARY KEY, g int, v int);
			INSERT INTO s%d SELECT x, x %% 12, x %% 7 FROM generate_series(1, 100) x;`, i, i)
		fmt.Fprintf(&defs, `CREATE TRANSFORM r%d AS SELECT id, g, v * 2 AS v2 FROM s%d WHERE v %% 3 <> 0;
			CREATE TRANSFORM a%d AS SELECT g, count(*) AS n, sum(v) AS sv FROM s%d GROUP BY g;
			CREATE TRANSFORM j%d AS SELECT s.id, d.label FROM s%d s LEFT JOIN d ON d.id = s.g;
			CREATE TRANSFORM c%d AS SELECT g, sum(v2) AS total, count(*) AS n FROM r%d GROUP BY g;
`, i, i, i, i, i, i, i, i)
	}
	if _, err := admin.Exec(ctx, schema.String()); err != nil {
		t.Fatal(err)
	}

	// A call timeout above the default 30 s: one Apply of every
	// definition, on a machine the parallel tests load, ran past it (the
	// test checks connections, not how fast).
	cfg := trellis.Config{DSN: dsn, DataDir: t.TempDir(), ProgressInterval: 200 * time.Millisecond, CallTimeout: 5 * time.Minute}
	tr, err := trellis.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Apply(ctx, defs.String()); err != nil {
		t.Fatal(err)
	}

	// The application: 40 sessions writing, each also opening a new
	// connection now and then; none may fail.
	appCtx, stopApp := context.WithCancel(ctx)
	var app sync.WaitGroup
	var appErr atomic.Pointer[error]
	var writes atomic.Int64
	fail := func(err error) { appErr.CompareAndSwap(nil, &err) }
	for k := 0; k < appConns; k++ {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("application connection %d: %v", k, err)
		}
		app.Add(1)
		go func(k int, conn *pgx.Conn) {
			defer app.Done()
			defer func() { conn.Close(context.Background()) }()
			rng := rand.New(rand.NewSource(int64(k)))
			for n := 0; appCtx.Err() == nil; n++ {
				tbl := rng.Intn(budgetTables)
				id := 1 + rng.Intn(140)
				var q string
				switch x := rng.Intn(40); {
				case x < 10:
					q = fmt.Sprintf(`DELETE FROM s%d WHERE id = %d`, tbl, id)
				case x == 10:
					// The dimension every join reads: a transform per table follows.
					q = fmt.Sprintf(`UPDATE d SET label = 'l%d' WHERE id = %d`, rng.Intn(100), rng.Intn(10))
				default:
					q = fmt.Sprintf(`INSERT INTO s%d VALUES (%d, %d, %d) ON CONFLICT (id) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v`,
						tbl, id, rng.Intn(12), rng.Intn(7))
				}
				if _, err := conn.Exec(appCtx, q); err != nil {
					if appCtx.Err() == nil {
						fail(fmt.Errorf("application session %d: %s: %w", k, q, err))
					}
					return
				}
				writes.Add(1)
				if n%50 == 49 {
					// A new connection, as a web request's pool would open.
					next, err := pgx.Connect(appCtx, dsn)
					if err != nil {
						if appCtx.Err() == nil {
							fail(fmt.Errorf("application session %d: connect: %w", k, err))
						}
						return
					}
					conn.Close(context.Background())
					conn = next
				}
				time.Sleep(time.Duration(5+rng.Intn(20)) * time.Millisecond)
			}
		}(k, conn)
	}

	// What the runner holds, sampled throughout; above the budget the
	// test ends at once (over).
	var most atomic.Int64
	overCtx, over := context.WithCancel(ctx)
	defer over()
	sampleCtx, stopSample := context.WithCancel(ctx)
	sampled := make(chan error, 1)
	go func() {
		sampled <- func() error {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			for sampleCtx.Err() == nil {
				var n int64
				if err := conn.QueryRow(sampleCtx, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'trellis-repl%'`).Scan(&n); err != nil {
					if sampleCtx.Err() != nil {
						return nil
					}
					return err
				}
				if n > most.Load() {
					most.Store(n)
				}
				if n > trellis.DefaultMaxConnections {
					over()
				}
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}()
	}()

	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- tr.Run(runCtx) }()
	defer func() {
		stopRun()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// Built and live while the application writes, then some more writes.
	await := func(when string) {
		t.Helper()
		actx, cancel := context.WithTimeout(overCtx, 5*time.Minute)
		defer cancel()
		tok, err := tr.WatermarkToken(actx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.AwaitConverged(actx, tok); err != nil {
			if overCtx.Err() != nil {
				t.Fatalf("%s: the runner held %d connections, more than its budget of %d", when, most.Load(), trellis.DefaultMaxConnections)
			}
			t.Fatalf("%s: %v", when, err)
		}
	}
	start := time.Now()
	await("built under the workload")
	t.Logf("%d transforms built in %s under %d writes", 4*budgetTables, time.Since(start).Round(time.Millisecond), writes.Load())
	time.Sleep(3 * time.Second)
	stopApp()
	app.Wait()
	if p := appErr.Load(); p != nil {
		t.Fatalf("the application failed beside the runner: %v", *p)
	}
	await("after the workload")
	stopSample()
	if err := <-sampled; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d application writes; the runner held at most %d connections (budget %d)", writes.Load(), most.Load(), trellis.DefaultMaxConnections)
	if most.Load() > trellis.DefaultMaxConnections {
		t.Errorf("the runner held %d connections, more than its budget of %d", most.Load(), trellis.DefaultMaxConnections)
	}
	defs2, err := tr.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs2) != 4*budgetTables {
		t.Fatalf("%d definitions, want %d", len(defs2), 4*budgetTables)
	}
	for _, d := range defs2 {
		r, err := tr.CompareNow(ctx, d.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Equal() {
			t.Errorf("%s differs from its query: missing %d %v, extra %d %v", d.Name, r.Missing, r.MissingSample, r.Extra, r.ExtraSample)
		}
	}
}
