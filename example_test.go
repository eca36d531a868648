package trellis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/trellistest"
)

// exampleOrders is a fresh database with a table of orders, for the
// examples: its DSN and a connection to it (closed by t).
func exampleOrders(t *trellistest.Standalone) (string, *pgx.Conn) {
	dsn := trellistest.Postgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric);
		INSERT INTO orders VALUES (1, 1, 10), (2, 1, 15), (3, 2, 7)`); err != nil {
		t.Fatalf("%v", err)
	}
	return dsn, conn
}

func ExampleOpen() {
	t := trellistest.NewStandalone("ExampleOpen")
	defer t.Close()
	dsn, _ := exampleOrders(t)

	ctx := context.Background()
	h, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: t.TempDir()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	fmt.Println("instance schema:", h.Schema())
	// Output: instance schema: trellis
}

func ExampleTrellis_Apply() {
	t := trellistest.NewStandalone("ExampleApply")
	defer t.Close()
	dsn, _ := exampleOrders(t)
	ctx := context.Background()
	h, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: t.TempDir()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()

	res, err := h.Apply(ctx, `
		CREATE TRANSFORM per_customer AS
		  SELECT customer, sum(amount) AS amount, count(*) AS orders FROM orders GROUP BY customer;
		CREATE TRANSFORM big_orders AS SELECT id, amount FROM orders WHERE amount > 9`)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range res {
		fmt.Println(r.Statement, r.Name, r.Action)
	}
	// Output:
	// CREATE TRANSFORM per_customer created
	// CREATE TRANSFORM big_orders created
}

func ExampleTrellis_Run() {
	t := trellistest.NewStandalone("ExampleRun")
	defer t.Close()
	dsn, conn := exampleOrders(t)
	ctx := context.Background()
	h, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: t.TempDir()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	if _, err := h.Apply(ctx, `CREATE TRANSFORM per_customer AS SELECT customer, sum(amount) AS amount FROM orders GROUP BY customer`); err != nil {
		fmt.Println(err)
		return
	}

	// Run maintains the transforms until its context ends (or Close).
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- h.Run(runCtx) }()

	conn.Exec(ctx, `INSERT INTO orders VALUES (4, 2, 3)`) //nolint:errcheck
	tok, _ := h.WatermarkToken(ctx)
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.AwaitConverged(wait, tok); err != nil {
		fmt.Println(err)
		return
	}
	var amount string
	conn.QueryRow(ctx, `SELECT amount::text FROM per_customer WHERE customer = 2`).Scan(&amount) //nolint:errcheck
	fmt.Println("customer 2:", amount)

	stop()
	fmt.Println("Run returned:", <-done)
	// Output:
	// customer 2: 10
	// Run returned: <nil>
}

func ExampleTrellis_Status() {
	t := trellistest.NewStandalone("ExampleStatus")
	defer t.Close()
	dsn, _ := exampleOrders(t)
	ctx := context.Background()
	h, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: t.TempDir()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	if _, err := h.Apply(ctx, `CREATE TRANSFORM big_orders AS SELECT id, amount FROM orders WHERE amount > 9`); err != nil {
		fmt.Println(err)
		return
	}

	// No Run yet: the transform waits to be built, and no runner is
	// attached to build it.
	st, err := h.Status(ctx, "big_orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range st {
		fmt.Println(s.Name, s.Shape, s.State, "runner attached:", s.Runner.Attached)
	}
	// Output: big_orders row waiting_to_backfill runner attached: false
}

func ExampleTrellis_AwaitConverged() {
	t := trellistest.NewStandalone("ExampleAwaitConverged")
	defer t.Close()
	dsn, conn := exampleOrders(t)
	ctx := context.Background()
	h := trellistest.Open(t, dsn, trellis.Config{Schema: "trellis"}) // Open and Run in the background
	if _, err := h.Apply(ctx, `CREATE TRANSFORM totals AS SELECT count(*) AS n, sum(amount) AS amount FROM orders`); err != nil {
		fmt.Println(err)
		return
	}

	conn.Exec(ctx, `UPDATE orders SET amount = amount * 2`) //nolint:errcheck
	// A token taken after the write; once AwaitConverged returns, every
	// target reflects every write committed before the token.
	tok, err := h.WatermarkToken(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute) // a wait takes its own deadline
	defer cancel()
	if err := h.AwaitConverged(wait, tok); err != nil {
		fmt.Println(err)
		return
	}
	var n int
	var amount string
	conn.QueryRow(ctx, `SELECT n, amount::text FROM totals`).Scan(&n, &amount) //nolint:errcheck
	fmt.Println(n, amount)
	// Output: 3 64
}

func ExampleTrellis_SelfCheck() {
	t := trellistest.NewStandalone("ExampleSelfCheck")
	defer t.Close()
	dsn, _ := exampleOrders(t)
	ctx := context.Background()
	h := trellistest.Open(t, dsn, trellis.Config{Schema: "trellis"})
	if _, err := h.Apply(ctx, `CREATE TRANSFORM big_orders AS SELECT id, amount FROM orders WHERE amount > 9`); err != nil {
		fmt.Println(err)
		return
	}
	trellistest.AwaitLive(t, h, "big_orders")

	// A self-check is a job: with Wait, SelfCheck returns it finished.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	job, err := h.SelfCheck(wait, "big_orders", trellis.SelfCheckOptions{Wait: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.State, job.Report.Outcome)
	// Output: done converged
}
