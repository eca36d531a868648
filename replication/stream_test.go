package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// recSink records what Run delivers; the test reads it concurrently.
type recSink struct {
	mu       sync.Mutex
	rels     map[uint32]string
	keys     []string // "table(values)" in delivery order
	ends     []uint64 // end LSN of each commit
	idle     uint64   // last Idle position
	streamed map[uint32][]decode.RowKey
	aborted  map[uint32]bool // subxids
	sCommits int
	fail     error // returned by Commit when set
}

func newRecSink() *recSink {
	return &recSink{rels: map[uint32]string{}, streamed: map[uint32][]decode.RowKey{}, aborted: map[uint32]bool{}}
}

func (r *recSink) Relation(_ context.Context, rel *decode.Relation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rels[rel.ID] = rel.Name
	return nil
}

func (r *recSink) Commit(_ context.Context, txn *decode.Txn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	for _, k := range txn.Keys {
		r.keys = append(r.keys, fmt.Sprintf("%s(%s)", r.rels[k.Rel], strings.Join(k.Values, ",")))
	}
	r.ends = append(r.ends, txn.EndLSN)
	return nil
}

func (r *recSink) StreamChunk(_ context.Context, xid uint32, keys []decode.RowKey, _ []uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streamed[xid] = append(r.streamed[xid], keys...)
	return nil
}

func (r *recSink) StreamCommit(context.Context, uint32, uint64, uint64, time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sCommits++
	return nil
}

func (r *recSink) StreamAbort(_ context.Context, _, subxid uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aborted[subxid] = true
	return nil
}

func (r *recSink) Idle(_ context.Context, walEnd uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idle = walEnd
	return nil
}

func (r *recSink) snapshot() (keys []string, ends []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys), slices.Clone(r.ends)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasKeys(r *recSink, want ...string) func() bool {
	return func() bool {
		keys, _ := r.snapshot()
		for _, w := range want {
			if !slices.Contains(keys, w) {
				return false
			}
		}
		return true
	}
}

func confirmedFlush(t *testing.T, conn *pgx.Conn, slot string) (pglogrepl.LSN, int) {
	t.Helper()
	info, err := SlotInfo(context.Background(), conn, slot)
	if err != nil {
		t.Fatal(err)
	}
	return info.ConfirmedFlush, info.ActivePID
}

// setupStream creates table t, publication p (with t) and slot s.
func setupStream(t *testing.T) (dsn string, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	dsn = pgtest.NewDatabase(t)
	conn = connect(t, dsn)
	exec(t, conn, `CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE big (id int PRIMARY KEY, pad text)`)
	if _, err := EnsurePublication(ctx, conn, "p"); err != nil {
		t.Fatal(err)
	}
	if err := AddTables(ctx, conn, "p", []pgx.Identifier{{"t"}, {"big"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EnsureSlot(ctx, conn, "s"); err != nil {
		t.Fatal(err)
	}
	return dsn, conn
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// withOption adds a "-c name=value" startup option to a URL or
// keyword/value DSN.
func withOption(dsn, name, value string) string {
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "options=" + strings.ReplaceAll(url.QueryEscape("-c "+name+"="+value), "+", "%20")
	}
	return dsn + " options='-c " + name + "=" + value + "'"
}

func startRun(t *testing.T, cfg Config, sink decode.Sink) (cancel func(), result <-chan error) {
	t.Helper()
	ctx, cancelCtx := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- Run(ctx, cfg, sink) }()
	t.Cleanup(cancelCtx)
	return cancelCtx, ch
}

func TestRun(t *testing.T) {
	dsn, conn := setupStream(t)
	rec := newRecSink()
	var flush atomic.Uint64
	var starts atomic.Int32
	cfg := Config{
		// The walsender's memory limit decides when a transaction is
		// streamed in chunks.
		DSN:            withOption(dsn, "logical_decoding_work_mem", "64kB"),
		Slot:           "s",
		Publication:    "p",
		StartLSN:       func() uint64 { starts.Add(1); return flush.Load() },
		FlushLSN:       flush.Load,
		StatusInterval: 50 * time.Millisecond,
		BackoffMin:     20 * time.Millisecond,
		BackoffMax:     100 * time.Millisecond,
		Logger:         testLogger(t),
	}
	cancel, result := startRun(t, cfg, rec)

	exec(t, conn, `INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
	exec(t, conn, `UPDATE t SET id = 3 WHERE id = 2`)
	exec(t, conn, `DELETE FROM t WHERE id = 1`)
	// Three transactions: their keys alone are all seen after the second.
	waitFor(t, "first changes", func() bool { _, ends := rec.snapshot(); return len(ends) >= 3 })
	keys, ends := rec.snapshot()
	if want := []string{"t(1)", "t(2)", "t(2)", "t(3)", "t(1)"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if len(ends) != 3 || !(ends[0] < ends[1] && ends[1] < ends[2]) {
		t.Fatalf("end LSNs %v", ends)
	}

	// Nothing is confirmed while FlushLSN is 0; then exactly what it says.
	before, _ := confirmedFlush(t, conn, "s")
	time.Sleep(200 * time.Millisecond)
	if got, _ := confirmedFlush(t, conn, "s"); got != before || uint64(got) >= ends[0] {
		t.Fatalf("confirmed_flush moved to %s with FlushLSN 0 (was %s)", got, before)
	}
	flush.Store(ends[0])
	waitFor(t, "confirmed_flush_lsn to reach FlushLSN", func() bool {
		got, _ := confirmedFlush(t, conn, "s")
		return uint64(got) == ends[0]
	})
	for i := range 10 { // more traffic, keepalives: still never beyond FlushLSN
		exec(t, conn, `INSERT INTO t VALUES ($1, 'x')`, 100+i)
		if got, _ := confirmedFlush(t, conn, "s"); uint64(got) > ends[0] {
			t.Fatalf("confirmed_flush %s beyond FlushLSN %s", got, pglogrepl.LSN(ends[0]))
		}
		time.Sleep(30 * time.Millisecond)
	}
	waitFor(t, "the extra inserts", hasKeys(rec, "t(109)"))

	// Kill the walsender: Run reconnects, resumes from StartLSN (ends[0]),
	// and delivers later changes.
	_, pid := confirmedFlush(t, conn, "s")
	if pid == 0 {
		t.Fatal("slot not active")
	}
	exec(t, conn, `SELECT pg_terminate_backend($1)`, pid)
	exec(t, conn, `INSERT INTO t VALUES (50, 'after')`)
	waitFor(t, "a change after the reconnect", hasKeys(rec, "t(50)"))
	if starts.Load() < 2 {
		t.Errorf("StartLSN called %d times, want a reconnect", starts.Load())
	}
	keys, _ = rec.snapshot()
	if n := strings.Count(strings.Join(keys, " "), "t(3)"); n != 2 {
		// Replayed from ends[0]: the key-changing update comes again.
		t.Errorf("t(3) delivered %d times, want 2 (once more after resuming at the first commit)", n)
	}

	// A streamed transaction with a rolled-back savepoint.
	exec(t, conn, `BEGIN;
		INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g;
		SAVEPOINT s1;
		INSERT INTO big SELECT g, repeat('y', 100) FROM generate_series(2001, 4000) g;
		ROLLBACK TO SAVEPOINT s1;
		COMMIT`)
	waitFor(t, "the streamed transaction to commit", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.sCommits == 1
	})
	rec.mu.Lock()
	alive := 0
	for _, ks := range rec.streamed {
		for _, k := range ks {
			if !rec.aborted[k.Xid] {
				alive++
			}
		}
	}
	nAborted := len(rec.aborted)
	rec.mu.Unlock()
	if alive != 2000 || nAborted != 1 {
		t.Errorf("streamed: %d surviving keys, %d aborted subtransactions; want 2000 and 1", alive, nAborted)
	}

	// Idle keepalives advance once everything is delivered.
	_, ends = rec.snapshot()
	waitFor(t, "an Idle position past the last commit", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.idle >= ends[len(ends)-1]
	})

	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}

	// Slot dropped while stopped: a typed error, at once. (The walsender
	// may outlive the connection by a moment.)
	waitFor(t, "the slot to be released", func() bool {
		_, pid := confirmedFlush(t, conn, "s")
		return pid == 0
	})
	// A slot that confirmed more than the consumer resumes from.
	ahead := cfg
	ahead.StartLSN = func() uint64 { return ends[0] - 1 }
	var lost *SlotLostError
	if err := Run(context.Background(), ahead, rec); !errors.As(err, &lost) || lost.Kind != SlotAhead {
		t.Fatalf("Run resuming behind the slot = %v, want SlotLostError(slot_ahead)", err)
	} else {
		t.Log(err)
	}

	if err := DropSlot(context.Background(), conn, "s"); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), cfg, rec)
	if !errors.As(err, &lost) || lost.Kind != SlotMissing {
		t.Fatalf("Run without a slot = %v, want SlotLostError(slot_missing)", err)
	}
	t.Log(err)
}

func TestRunErrors(t *testing.T) {
	dsn, conn := setupStream(t)
	ctx := context.Background()
	base := Config{DSN: dsn, Slot: "s", Publication: "p", StatusInterval: 50 * time.Millisecond,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond}

	t.Run("sink error stops Run", func(t *testing.T) {
		rec := newRecSink()
		boom := errors.New("disk full")
		rec.fail = boom
		_, result := startRun(t, base, rec)
		exec(t, conn, `INSERT INTO t VALUES (1, 'a')`)
		select {
		case err := <-result:
			if !errors.Is(err, boom) {
				t.Fatalf("Run = %v, want the sink's error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return the sink error")
		}
	})

	t.Run("slot busy is retried", func(t *testing.T) {
		cancel, first := startRun(t, base, newRecSink())
		waitFor(t, "the first stream to hold the slot", func() bool {
			_, pid := confirmedFlush(t, conn, "s")
			return pid != 0
		})
		c2, stop := context.WithTimeout(ctx, 600*time.Millisecond)
		defer stop()
		if err := Run(c2, base, newRecSink()); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second Run on a busy slot = %v, want it to keep retrying", err)
		}
		cancel()
		<-first
	})

	t.Run("publication missing", func(t *testing.T) {
		cfg := base
		cfg.Publication = "nope"
		var lost *SlotLostError
		if err := Run(ctx, cfg, newRecSink()); !errors.As(err, &lost) || lost.Kind != PublicationMissing {
			t.Errorf("Run = %v, want SlotLostError(publication_missing)", err)
		}
	})

	t.Run("invalid config", func(t *testing.T) {
		for _, cfg := range []Config{{DSN: dsn, Slot: "Bad", Publication: "p"}, {DSN: dsn, Slot: "s"}} {
			if err := Run(ctx, cfg, newRecSink()); err == nil {
				t.Errorf("Run(%+v) accepted", cfg)
			}
		}
	})
}

// TestInternalErrorsEndRun: sessions that keep ending with the server's
// internal error (as decoding does when it cannot map a relation) make Run
// report the slot undecodable instead of retrying forever; any other
// failure in between starts the count again.
func TestInternalErrorsEndRun(t *testing.T) {
	internal := &pgconn.PgError{Code: "XX000", Message: `could not map filenode "base/1/2" to relation OID`}
	tests := []struct {
		name     string
		errs     []error // returned by successive sessions, then internal forever
		sessions int     // sessions run before Run returns
	}{
		{name: "internal errors only", sessions: 3},
		{name: "a network error resets the count", errs: []error{internal, internal, errors.New("EOF"), internal}, sessions: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			cfg := Config{DSN: "host=localhost", Slot: "s", Publication: "p", BackoffMin: time.Millisecond, BackoffMax: time.Millisecond,
				InternalErrorLimit: 3,
				session: func(context.Context, *Config, decode.Sink, *slog.Logger) error {
					n++
					if n <= len(tc.errs) {
						return tc.errs[n-1]
					}
					return internal
				}}
			err := Run(context.Background(), cfg, &recSink{})
			var lost *SlotLostError
			if !errors.As(err, &lost) || lost.Kind != SlotUndecodable || !errors.Is(err, internal) {
				t.Fatalf("Run = %v, want a SlotUndecodable SlotLostError wrapping the server's error", err)
			}
			if n != tc.sessions {
				t.Errorf("Run gave up after %d sessions, want %d", n, tc.sessions)
			}
		})
	}
}
