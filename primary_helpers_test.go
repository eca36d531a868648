package trellis_test

// Helpers of the tests where the primary itself changes (ADR 0039): a TCP
// proxy that can be switched to another server (what a DNS name or a
// pooler in front of the primary does in a failover), a writer that keeps
// committing through it, and a watch of status that records every state
// it saw.

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// proxy forwards loopback TCP connections to a server's port; switchTo
// points it at another and cuts every connection it carries, as a
// failover behind one address does.
type proxy struct {
	ln     net.Listener
	target atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func newProxy(t *testing.T, port int) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, conns: map[net.Conn]bool{}}
	p.target.Store(int64(port))
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	s, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.target.Load()))
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	c.Close()
	s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// cut closes every connection the proxy carries.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// switchTo sends new connections to port and cuts the old ones.
func (p *proxy) switchTo(port int) {
	p.target.Store(int64(port))
	p.cut()
}

// dsn is the superuser DSN of database db through the proxy.
func (p *proxy) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", p.ln.Addr(), db)
}

// writer commits small transactions of random changes to orders (the
// schema of schemaSQL) until stopped, reconnecting after every error (a
// server that went away); pause holds it between two transactions.
type writer struct {
	dsn     string
	rng     *rand.Rand
	hold    sync.Mutex
	stopped chan struct{}
	done    chan struct{}
	commits atomic.Int64
}

func startWriter(t *testing.T, dsn string, seed int64) *writer {
	w := &writer{dsn: dsn, rng: rand.New(rand.NewSource(seed)), stopped: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(w.stop)
	return w
}

func (w *writer) run() {
	defer close(w.done)
	ctx := context.Background()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(ctx)
		}
	}()
	for {
		select {
		case <-w.stopped:
			return
		case <-time.After(5 * time.Millisecond):
		}
		w.hold.Lock()
		if conn == nil {
			c, err := pgx.Connect(ctx, w.dsn)
			if err != nil {
				w.hold.Unlock()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conn = c
		}
		if err := w.one(ctx, conn); err != nil {
			conn.Close(ctx)
			conn = nil
		} else {
			w.commits.Add(1)
		}
		w.hold.Unlock()
	}
}

// one commits a transaction of one to three changes.
func (w *writer) one(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for n := 1 + w.rng.Intn(3); n > 0; n-- {
			id := w.rng.Intn(200)
			var q string
			switch w.rng.Intn(4) {
			case 0, 1:
				q = fmt.Sprintf(`INSERT INTO orders VALUES (%d, %d, 'new', %d, %d, 'w') ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount, qty = EXCLUDED.qty`,
					id, w.rng.Intn(8), w.rng.Intn(40), w.rng.Intn(5))
			case 2:
				q = fmt.Sprintf(`UPDATE orders SET customer = %d, status = 'paid' WHERE id = %d`, w.rng.Intn(8), id)
			case 3:
				q = fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
			}
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// pause waits for the transaction in flight and holds the writer.
func (w *writer) pause() { w.hold.Lock() }

// resume lets a paused writer go on.
func (w *writer) resume() { w.hold.Unlock() }

// awaitCommits waits until the writer committed n more transactions.
func (w *writer) awaitCommits(t *testing.T, n int64) {
	t.Helper()
	want := w.commits.Load() + n
	poll(t, fmt.Sprintf("the writer committed %d transactions", want), func() bool { return w.commits.Load() >= want })
}

func (w *writer) stop() {
	select {
	case <-w.stopped:
	default:
		close(w.stopped)
	}
	<-w.done
}

// statusWatch records every transform status it reads until stopped
// (errors, as during a failover, are skipped).
type statusWatch struct {
	mu   sync.Mutex
	seen []trellis.TransformStatus
	stop func()
}

func watchStatus(tr *trellis.Trellis) *statusWatch {
	ctx, cancel := context.WithCancel(context.Background())
	s := &statusWatch{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if st, err := tr.Status(ctx); err == nil {
				s.mu.Lock()
				s.seen = append(s.seen, st...)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	s.stop = func() { cancel(); <-done }
	return s
}

// neverLiveUnrepaired fails when status said live for a transform whose
// target was not rebuilt since the server changed (at since): its target
// could disagree with its query then.
func (s *statusWatch) neverLiveUnrepaired(t *testing.T, since time.Time) (states map[string]bool) {
	t.Helper()
	s.stop()
	states = map[string]bool{}
	for _, st := range s.seen {
		states[st.State] = true
		if st.State != "live" {
			continue
		}
		if st.Build == nil || st.Build.FinishedAt == nil || st.Build.StartedAt.Before(since) {
			t.Errorf("status said %s is live, with no build since the server changed at %s: %+v", st.Name, since.Format(time.RFC3339Nano), st.Build)
		}
	}
	return states
}

// openOn opens an instance on dsn for the test's reads and statements
// (the runner has its own).
func openOn(t *testing.T, dsn, schema string) *env {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	e := &env{t: t, dsn: dsn, conn: conn, cfg: trellis.Config{DSN: dsn, Schema: schema}}
	e.open()
	return e
}

// disruptedBy fails unless every transform of e is in state and its
// disruption's reason says each of says.
func disruptedBy(t *testing.T, e *env, state string, says ...string) {
	t.Helper()
	st, err := e.tr.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != state || s.Disruption == nil {
			t.Fatalf("%s: state %s, disruption %+v; want %s with a disruption", s.Name, s.State, s.Disruption, state)
		}
		for _, w := range says {
			if !strings.Contains(s.Disruption.Reason, w) {
				t.Errorf("%s: disruption %q does not say %q", s.Name, s.Disruption.Reason, w)
			}
		}
		if state == "paused" && (s.CaptureFailure == nil || !strings.Contains(s.CaptureFailure.Error, "RESUME TRANSFORM ALL")) {
			t.Errorf("%s: capture failure %+v does not name RESUME TRANSFORM ALL", s.Name, s.CaptureFailure)
		}
	}
}

// awaitState waits until every transform of e is in state.
func awaitState(t *testing.T, e *env, state string) {
	t.Helper()
	poll(t, "every transform "+state, func() bool {
		st, err := e.tr.Status(context.Background())
		all := err == nil && len(st) > 0
		for _, s := range st {
			all = all && s.State == state
		}
		return all
	})
}

// poll calls done every 50 ms until it reports true, failing the test
// (with what is still not so) after waitTimeout.
func poll(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s, still not so: %s", waitTimeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
