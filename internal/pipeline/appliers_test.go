package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestSplitBudget pins how a connection budget is split (ADR 0028).
func TestSplitBudget(t *testing.T) {
	for _, tc := range []struct {
		max, pool int
		want      Budget
		runnable  bool
	}{
		{0, 0, Budget{Total: 10, Lock: 1, Capture: 1, Control: 2, Appliers: 6, Builds: 3}, true},
		{4, 0, Budget{Total: 4, Lock: 1, Capture: 1, Control: 1, Appliers: 1, Builds: 1}, true},
		{30, 0, Budget{Total: 30, Lock: 1, Capture: 1, Control: 4, Appliers: 24, Builds: 12}, true},
		{10, 5, Budget{Total: 10, Lock: 1, Capture: 1, Control: 5, Appliers: 3, Builds: 1}, true},
		{1, 0, Budget{Total: 1, Control: 1}, false},
	} {
		got, err := SplitBudget(tc.max, tc.pool)
		if err != nil || got != tc.want || (got.runnable() == nil) != tc.runnable {
			t.Errorf("SplitBudget(%d, %d) = %+v, %v (runnable %v), want %+v", tc.max, tc.pool, got, err, got.runnable(), tc.want)
		}
	}
	for _, bad := range [][2]int{{-1, 0}, {10, 8}} {
		if _, err := SplitBudget(bad[0], bad[1]); err == nil {
			t.Errorf("SplitBudget(%d, %d) accepted", bad[0], bad[1])
		}
	}
}

// TestApplierPool: the pool never opens more sessions than its size,
// serves waiting requests in the order they were made, keeps builds to
// their share while live requests behind them are served, and replaces a
// broken session; a refused connection is retried, not returned.
func TestApplierPool(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var opened atomic.Int32
	var refuse atomic.Int32 // connections to refuse before one succeeds
	connect := func(ctx context.Context) (*engine.Session, error) {
		if refuse.Add(-1) >= 0 {
			return nil, &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}
		}
		opened.Add(1)
		return engine.OpenSession(ctx, cfg, "trellis-repl applier test")
	}
	p := newApplierPool(2, 1, connect, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer p.close()

	a, err := p.acquire(ctx, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	// A second build waits for the builds' share; a live request behind
	// it is served.
	build2 := make(chan *lease, 1)
	go func() {
		l, err := p.acquire(ctx, 2, true)
		if err != nil {
			t.Error(err)
		}
		build2 <- l
	}()
	waitFor(t, func() bool { return p.waiting() })
	live, err := p.acquire(ctx, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-build2:
		t.Fatal("a second build was served beyond the builds' share")
	case <-time.After(50 * time.Millisecond):
	}
	// Nothing is free now: requests queue in order.
	order := make(chan int64, 2)
	for _, owner := range []int64{4, 5} {
		go func() {
			l, err := p.acquire(ctx, owner, false)
			if err != nil {
				t.Error(err)
				return
			}
			order <- owner
			time.Sleep(20 * time.Millisecond)
			l.release(false)
		}()
		waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.queue) >= int(owner)-2 })
	}
	live.release(false) // serves 4 (build 2 still waits for the share)
	if got := <-order; got != 4 {
		t.Fatalf("request of %d served first, want 4 (the older)", got)
	}
	a.release(false) // the build's share is free: build 2, then 5
	l2 := <-build2
	if got := <-order; got != 5 {
		t.Fatalf("request of %d served, want 5", got)
	}
	l2.release(false)
	if n := opened.Load(); n != 2 || p.inUse() != 2 {
		t.Fatalf("opened %d sessions, %d in use; want 2 (the pool's size)", n, p.inUse())
	}

	// A broken session is replaced; refused connections are retried.
	other, _ := p.acquire(ctx, 10, false)
	other.release(true)
	refuse.Store(2)
	l, err := p.acquire(ctx, 11, false)
	if err != nil {
		t.Fatalf("a refused connection was returned, not retried: %v", err)
	}
	l.release(false)
	if n := opened.Load(); n != 3 {
		t.Fatalf("opened %d sessions, want 3 (one replaced)", n)
	}

	// A waiting request ends with its context.
	hold1, _ := p.acquire(ctx, 12, false)
	hold2, _ := p.acquire(ctx, 13, false)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.acquire(cctx, 14, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request with every session lent returned %v, want its context's end", err)
	}
	hold1.release(false)
	hold2.release(false)
	if p.inUse() > 2 {
		t.Fatalf("%d sessions in use, more than the pool's 2", p.inUse())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
