package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statuses are the order states the workload moves orders between;
// "cancelled" matters because revenue_by_customer filters it out.
var statuses = []string{"new", "paid", "shipped", "cancelled"}

// workload writes random changes to orders from several connections at a
// bounded total rate. Each connection owns the order ids congruent to its
// index, so connections never wait on each other's row locks (and never
// deadlock), while still hitting the same customers concurrently.
type workload struct {
	pool      *pgxpool.Pool
	conns     int
	rate      float64 // rows per second across all connections
	orders    int64   // ids 1..orders exist when the workload starts
	customers int

	rows       atomic.Int64 // rows inserted, updated or deleted
	txns       atomic.Int64 // committed transactions
	rolledBack atomic.Int64 // transactions aborted by a transient conflict
}

// run writes until the deadline passes and returns once every transaction
// it began has committed or rolled back, so that a watermark taken after it
// returns covers all of them. (Cancelling the transactions' context instead
// would not do: a COMMIT already sent can still take effect after the
// client gave up on it.) It returns early, with ctx's error, when ctx ends,
// and with the first non-transient error otherwise.
func (w *workload) run(ctx context.Context, until time.Time) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i := range w.conns {
		wg.Go(func() {
			if err := w.connLoop(ctx, i, until); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// connLoop is one connection's share of the workload, paced so that it
// writes at most rate/conns rows per second.
func (w *workload) connLoop(ctx context.Context, idx int, until time.Time) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(idx)))
	c := &connState{w: w, idx: int64(idx), n: int64(w.conns), rng: rng}
	c.next = c.align(w.orders + 1)
	perConn := w.rate / float64(w.conns)
	start := time.Now()
	budget := 0.0 // rows this connection has been allowed so far
	for {
		// Pace: the next transaction may start once the time for the rows
		// already written has passed.
		next := start.Add(time.Duration(budget / perConn * float64(time.Second)))
		if !next.Before(until) {
			next = until
		}
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		if !time.Now().Before(until) {
			return nil
		}
		size := txnSize(rng)
		budget += float64(size)
		n, err := c.txn(ctx, size)
		switch {
		case err == nil:
			w.rows.Add(n)
			w.txns.Add(1)
		case ctx.Err() != nil:
			return ctx.Err()
		case transient(err):
			w.rolledBack.Add(1)
		default:
			return fmt.Errorf("workload connection %d: %w", idx, err)
		}
	}
}

// txnSize draws a transaction size in 1..200, log-uniformly: mostly small
// transactions with a steady share of large ones.
func txnSize(rng *rand.Rand) int {
	return min(200, int(math.Exp(rng.Float64()*math.Log(201))))
}

// transient reports errors after which the transaction can simply be
// dropped (a rolled-back transaction is also a valid change to capture).
func transient(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// connState is one connection's id partition and random source.
type connState struct {
	w    *workload
	idx  int64 // owns ids with id % n == idx
	n    int64
	rng  *rand.Rand
	next int64 // next unused id of this partition
}

// align returns the smallest id >= v in this connection's partition.
func (c *connState) align(v int64) int64 {
	r := v - v%c.n + c.idx
	if r < v {
		r += c.n
	}
	return r
}

// newIDs reserves k fresh ids.
func (c *connState) newIDs(k int) []int64 {
	ids := make([]int64, k)
	for i := range ids {
		ids[i] = c.next
		c.next += c.n
	}
	return ids
}

// existingIDs picks k distinct ids this connection has used (some may have
// been deleted since; the statement then simply touches fewer rows).
func (c *connState) existingIDs(k int) []int64 {
	seen := make(map[int64]bool, k)
	ids := make([]int64, 0, k)
	for range k {
		id := c.align(1 + c.rng.Int64N(c.next))
		if id >= c.next || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (c *connState) customer() int  { return 1 + c.rng.IntN(c.w.customers) }
func (c *connState) status() string { return statuses[c.rng.IntN(len(statuses))] }

// txn runs one transaction of roughly size row changes, split into a few
// statements of different kinds, and returns the rows it touched.
func (c *connState) txn(ctx context.Context, size int) (int64, error) {
	tx, err := c.w.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var total int64
	for left := size; left > 0; {
		k := 1 + c.rng.IntN(left)
		left -= k
		tag, err := c.statement(ctx, tx, k)
		if err != nil {
			return 0, err
		}
		total += tag.RowsAffected()
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return total, nil
}

// statement runs one randomly chosen change of about k rows.
func (c *connState) statement(ctx context.Context, tx pgx.Tx, k int) (pgconn.CommandTag, error) {
	switch p := c.rng.IntN(100); {
	case p < 30: // new orders
		ids := c.newIDs(k)
		custs := make([]int32, k)
		sts := make([]string, k)
		amounts := make([]string, k)
		for i := range k {
			custs[i] = int32(c.customer())
			sts[i] = c.status()
			amounts[i] = fmt.Sprintf("%d.%02d", c.rng.IntN(250), c.rng.IntN(100))
		}
		return tx.Exec(ctx, `INSERT INTO orders (id, customer_id, status, amount, created_at)
			SELECT u.id, u.customer_id, u.status, u.amount::numeric(12,2), clock_timestamp()
			FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[]) AS u(id, customer_id, status, amount)`,
			ids, custs, sts, amounts)
	case p < 50: // status changes (in and out of 'cancelled')
		return tx.Exec(ctx, `UPDATE orders SET status = $1 WHERE id = ANY($2)`, c.status(), c.existingIDs(k))
	case p < 65: // orders moved to another customer
		return tx.Exec(ctx, `UPDATE orders SET customer_id = $1 WHERE id = ANY($2)`, c.customer(), c.existingIDs(k))
	case p < 80: // new amounts (crossing big_orders' threshold both ways)
		return tx.Exec(ctx, `UPDATE orders SET amount = round((random() * 250)::numeric, 2) WHERE id = ANY($1)`, c.existingIDs(k))
	case p < 83: // a primary-key change: the old key leaves, a new one arrives
		old := c.existingIDs(1)
		if len(old) == 0 {
			return pgconn.CommandTag{}, nil
		}
		return tx.Exec(ctx, `UPDATE orders SET id = $1 WHERE id = $2`, c.newIDs(1)[0], old[0])
	default: // deletes
		return tx.Exec(ctx, `DELETE FROM orders WHERE id = ANY($1)`, c.existingIDs(k))
	}
}
