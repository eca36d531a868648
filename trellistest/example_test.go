package trellistest_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/trellistest"
)

// A test of a program that keeps a total of its orders: a throwaway
// database, a fresh instance with its pipeline running, and waits that
// fail the test with each transform's reason.
func ExamplePostgres() {
	t := trellistest.NewStandalone("example") // in a test: its *testing.T
	defer t.Close()
	ctx := context.Background()

	dsn := trellistest.Postgres(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, amount int);
		INSERT INTO orders VALUES (1, 10), (2, 20)`); err != nil {
		panic(err)
	}

	h := trellistest.Open(t, dsn)
	if _, err := h.Apply(ctx, `CREATE TRANSFORM totals AS SELECT count(*) AS n, sum(amount) AS amount FROM orders`); err != nil {
		panic(err)
	}
	trellistest.AwaitLive(t, h, "totals")

	if _, err := conn.Exec(ctx, `INSERT INTO orders VALUES (3, 30)`); err != nil {
		panic(err)
	}
	trellistest.Eventually(t, h, "totals")

	var n, amount int
	if err := conn.QueryRow(ctx, `SELECT n, amount FROM totals`).Scan(&n, &amount); err != nil {
		panic(err)
	}
	fmt.Println(n, amount)
	// Output: 3 60
}
