package pipeline

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/plant"
	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// applierPool lends the runner's applier sessions — its connection
// budget's share for re-deriving (ADR 0028) — to the transforms' workers,
// one batch or build step at a time.
//
// Fairness: requests are served in the order they were made, so a worker
// that wants another batch queues behind those already waiting (round
// robin under contention, by the age of the request). Builds hold at most
// buildCap sessions at once: a build request waits while they are taken,
// and live requests behind it are served meanwhile.
type applierPool struct {
	connect  func(ctx context.Context) (*engine.Session, error)
	size     int
	buildCap int
	log      *slog.Logger
	// refused logs failures to connect a session once per episode
	// (refusedMu: several workers may be connecting at once).
	refused   *retry.Episode
	refusedMu sync.Mutex

	mu     sync.Mutex
	idle   []*engine.Session // connected and free, most recently used last
	open   int               // sessions connected, being connected, or lent
	builds int               // sessions lent to builds
	queue  []*leaseRequest
	closed bool
}

// leaseRequest is a worker waiting for a session.
type leaseRequest struct {
	owner int64
	build bool
	ready chan *engine.Session // nil: connect a new session in the slot given
}

// sessionLender is what a worker takes its turns from: the runner's
// applierPool, or (planted bug applier_connection_per_transform) a
// session per transform.
type sessionLender interface {
	// acquire lends a session to transform owner (build: for a build
	// step), waiting while none is free.
	acquire(ctx context.Context, owner int64, build bool) (*lease, error)
	// close ends the sessions; lent ones end when given back.
	close()
}

// lease is a session lent to a worker until release.
type lease struct {
	s    *engine.Session
	done func(broken bool)
}

// release gives the session back; broken (its connection failed or is
// closed) ends it, freeing its slot for a new one.
func (l *lease) release(broken bool) { l.done(broken) }

func newApplierPool(size, buildCap int, connect func(ctx context.Context) (*engine.Session, error), log *slog.Logger) *applierPool {
	return &applierPool{connect: connect, size: size, buildCap: buildCap, log: log,
		refused: retry.NewEpisode(log, "connecting an applier session fails; workers wait and the pool retries", "applier sessions connect again")}
}

// acquire lends a session to transform owner (build: for a build step),
// waiting for one while the budget's sessions are all lent.
func (p *applierPool) acquire(ctx context.Context, owner int64, build bool) (*lease, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, context.Canceled
	}
	if len(p.queue) == 0 && p.fits(build) {
		s := p.take(owner, build)
		p.mu.Unlock()
		return p.ready(ctx, s, build)
	}
	r := &leaseRequest{owner: owner, build: build, ready: make(chan *engine.Session, 1)}
	p.queue = append(p.queue, r)
	// Builds ahead that wait for their share do not hold it back.
	p.dispatch()
	p.mu.Unlock()
	select {
	case s := <-r.ready:
		return p.ready(ctx, s, build)
	case <-ctx.Done():
		p.mu.Lock()
		if i := slices.Index(p.queue, r); i >= 0 {
			p.queue = slices.Delete(p.queue, i, i+1)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
		p.mu.Unlock()
		// Served meanwhile: hand the grant on.
		s := <-r.ready
		p.giveBack(s, build, s == nil)
		return nil, ctx.Err()
	}
}

// fits reports whether a request can be served now. p.mu is held.
func (p *applierPool) fits(build bool) bool {
	if build && p.builds >= p.buildCap {
		return false
	}
	return len(p.idle) > 0 || p.open < p.size
}

// take grants a request that fits: an idle session, preferring the one
// owner used last, or a slot to connect a new one (nil). p.mu is held.
func (p *applierPool) take(owner int64, build bool) *engine.Session {
	if build {
		p.builds++
	}
	if len(p.idle) == 0 {
		p.open++
		return nil
	}
	// The most recently used, unless one has owner's temporary tables.
	i := len(p.idle) - 1
	for k, s := range p.idle {
		if s.Prepared(owner) {
			i = k
		}
	}
	s := p.idle[i]
	p.idle = slices.Delete(p.idle, i, i+1)
	return s
}

// ready turns a grant into a lease, connecting a session in the slot
// granted when there is none: a failure is retried with backoff (logged
// once per episode) until it connects or ctx ends.
func (p *applierPool) ready(ctx context.Context, s *engine.Session, build bool) (*lease, error) {
	if s != nil {
		return p.lend(s, build), nil
	}
	backoff := 100 * time.Millisecond
	for {
		s, err := p.connect(ctx)
		if err == nil {
			p.refusedMu.Lock()
			p.refused.Recover()
			p.refusedMu.Unlock()
			return p.lend(s, build), nil
		}
		if ctx.Err() != nil {
			p.giveBack(nil, build, true)
			return nil, ctx.Err()
		}
		p.refusedMu.Lock()
		p.refused.Fail(err, backoff)
		p.refusedMu.Unlock()
		if !retry.Sleep(ctx, backoff) {
			p.giveBack(nil, build, true)
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// lend is a lease of s.
func (p *applierPool) lend(s *engine.Session, build bool) *lease {
	return &lease{s: s, done: func(broken bool) { p.giveBack(s, build, broken) }}
}

// giveBack takes a session (nil: a slot granted to connect one) back from
// a lease; broken ends it.
func (p *applierPool) giveBack(s *engine.Session, build, broken bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if build {
		p.builds--
	}
	if s != nil && (broken || p.closed || s.Conn().IsClosed()) {
		go s.Close(context.Background()) //nolint:errcheck
		s = nil
	}
	if s == nil {
		p.open--
	} else {
		p.idle = append(p.idle, s)
	}
	p.dispatch()
}

// dispatch serves waiting requests in order while sessions are free; a
// build request that cannot be served (builds hold their share) is passed
// over, not the requests behind it. p.mu is held.
func (p *applierPool) dispatch() {
	for i := 0; i < len(p.queue) && !p.closed; {
		r := p.queue[i]
		if !p.fits(r.build) {
			if len(p.idle) == 0 && p.open >= p.size {
				return // nothing free for anyone
			}
			i++
			continue
		}
		p.queue = slices.Delete(p.queue, i, i+1)
		r.ready <- p.take(r.owner, r.build)
	}
}

// waiting reports whether a worker waits for a session: a worker holding
// one ends its turn early then.
func (p *applierPool) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0
}

// close ends the idle sessions; lent ones end when given back. Workers
// are stopped first.
func (p *applierPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	p.mu.Unlock()
	for _, s := range idle {
		s.Close(context.Background()) //nolint:errcheck
	}
}

// inUse is how many sessions are connected or lent (for tests and
// metrics).
func (p *applierPool) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// brokenBy reports whether err leaves a session unusable: its connection
// closed or went away.
func brokenBy(s *engine.Session, err error) bool {
	return err != nil && (s.Conn().IsClosed() || fault.Disconnected(err))
}

// lender is the runner's source of applier sessions: a pool of the
// budget's size, or with the planted bug applier_connection_per_transform
// a session per transform, as before ADR 0028.
func (t *Host) lender() sessionLender {
	cfg := t.connConfig()
	connect := func(ctx context.Context) (*engine.Session, error) {
		return engine.OpenSession(ctx, cfg, "trellis-repl applier")
	}
	if plant.Active(plant.ApplierConnectionPerTransform) {
		return &perTransform{connect: connect, sessions: map[int64]*engine.Session{}}
	}
	return newApplierPool(t.budget.Appliers, t.budget.Builds, connect, t.log)
}

// perTransform is the planted bug applier_connection_per_transform: every
// transform keeps a session of its own, outside the budget.
type perTransform struct {
	connect  func(ctx context.Context) (*engine.Session, error)
	mu       sync.Mutex
	sessions map[int64]*engine.Session
}

func (p *perTransform) acquire(ctx context.Context, owner int64, build bool) (*lease, error) {
	p.mu.Lock()
	s := p.sessions[owner]
	p.mu.Unlock()
	if s == nil {
		var err error
		if s, err = p.connect(ctx); err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.sessions[owner] = s
		p.mu.Unlock()
	}
	return &lease{s: s, done: func(broken bool) {
		if broken {
			p.mu.Lock()
			delete(p.sessions, owner)
			p.mu.Unlock()
			s.Close(context.Background()) //nolint:errcheck
		}
	}}, nil
}

func (p *perTransform) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, s := range p.sessions {
		s.Close(context.Background()) //nolint:errcheck
		delete(p.sessions, id)
	}
}
