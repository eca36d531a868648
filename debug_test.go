package trellis_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

func TestDebugWorkload(t *testing.T) {
	e := newEnv(t, trellis.Config{})
	e.exec(schemaSQL)
	e.apply(`CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n FROM orders WHERE status <> 'cancelled' GROUP BY customer;`)
	e.start()
	rng := rand.New(rand.NewSource(42))
	for round := 0; round < 6; round++ {
		workload(e, rng, 20, 30)
		func() {
			defer func() {
				if t.Failed() {
					rows, _ := e.conn.Query(context.Background(), `SELECT coalesce(l.__k0, o.id), l.__g0, o.customer, o.status FROM trellis.ledger_1 l FULL JOIN (SELECT * FROM orders WHERE status <> 'cancelled') o ON o.id = l.__k0 WHERE l.__k0 IS NULL OR o.id IS NULL OR l.__g0 IS DISTINCT FROM o.customer`)
					for rows.Next() {
						v, _ := rows.Values()
						fmt.Println("DIFF", v)
					}
					rows.Close()
				}
			}()
			e.converge(fmt.Sprint("round ", round))
		}()
	}
}
