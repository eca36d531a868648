package trellis_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestFaultInjection: a mixed workload (a writer committing single-row
// changes throughout, bulk loads, a huge transaction, a transform defined
// mid-run) with the runner killed (kill -9) at 20 random points —
// including mid-build and mid-huge-transaction — two PostgreSQL restarts
// (fast, and immediate) and a walsender kill under a live runner.
// Afterwards every target equals its query.
func TestFaultInjection(t *testing.T) {
	t.Parallel()
	srv := pgtest.ExtraServer(t, "faults", nil)
	dsn := pgtest.NewDatabaseOn(t, srv)
	e := haEnv(t, dsn, trellis.Config{})
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, kind int NOT NULL, price int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g % 13, g % 97 FROM generate_series(1, 100000) g`)
	e.apply(`CREATE TRANSFORM kinds AS SELECT kind, count(*) AS n, sum(price) AS total FROM items GROUP BY kind`)
	bin := buildCLI(t)
	args := []string{"run", "--dsn", dsn, "--data-dir", t.TempDir(), "--log-level", "warn"}
	w := startHAWriter(t, dsn, 7)
	rng := rand.New(rand.NewSource(17))
	ctx := context.Background()
	huge := make(chan error, 1)
	for round := 0; round < 20; round++ {
		started := time.Now()
		r := startHARun(t, bin, args...)
		wait := time.Duration(100+rng.Intn(1400)) * time.Millisecond
		if round == 11 || round == 14 || round == 17 {
			// The runner must live through what comes, so it has to be
			// running first: on a loaded machine its start can take
			// longer than wait, and a server that refuses its first
			// connection is a wrong --dsn to it (it exits).
			e.awaitRunner(r.pid(), started)
		}
		switch round {
		case 4:
			// Killed while it builds a transform over 100,000 rows.
			e.apply(`CREATE TRANSFORM pricey AS SELECT id, kind, price * 2 AS doubled FROM items WHERE price > 20`)
			wait = 400 * time.Millisecond
		case 8:
			// Killed while a 300,000-row transaction streams and commits.
			go func() {
				huge <- e.execErr(`INSERT INTO items SELECT g, g % 13, g % 97 FROM generate_series(100001, 400000) g`)
			}()
			wait = 700 * time.Millisecond
		case 11:
			time.Sleep(wait)
			if err := srv.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			e.reopen()
		case 14:
			time.Sleep(wait)
			if err := srv.StopImmediate(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if err := srv.Start(ctx); err != nil {
				t.Fatal(err)
			}
			e.reopen()
		case 17:
			time.Sleep(wait)
			e.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_replication`)
		case 2, 6, 12, 18:
			e.exec(fmt.Sprintf(`UPDATE items SET price = price + 1 WHERE id %% 10 = %d`, round%10))
		}
		if round == 11 || round == 14 || round == 17 {
			// The runner lives through it and goes on.
			time.Sleep(time.Second)
			r.alive(fmt.Sprintf("round %d", round))
		} else {
			time.Sleep(wait)
		}
		r.kill()
		if round == 8 {
			if err := <-huge; err != nil {
				t.Fatalf("the huge transaction: %v", err)
			}
		}
	}
	startHARun(t, bin, args...)
	w.halt()
	if w.commits.Load() == 0 {
		t.Fatal("the writer committed nothing")
	}
	e.converge(fmt.Sprintf("after 20 kills, two restarts and a walsender kill (%d writer commits)", w.commits.Load()))
}

// execErr runs sql on the env's connection and returns its error.
func (e *env) execErr(sql string) error {
	_, err := e.conn.Exec(context.Background(), sql)
	return err
}
