package pipeline

// runset.go owns the Runs in progress on a Host, so that closing the
// handle ends its background work and waits for it (ADR 0040).

import (
	"context"
	"sync"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// runSet is the Runs in progress on one Host.
type runSet struct {
	mu      sync.Mutex
	stopped bool
	next    int
	cancel  map[int]context.CancelFunc
	wg      sync.WaitGroup
}

// start registers a Run: its context ends with ctx or at Stop; done
// unregisters it. A Host already stopped refuses.
func (s *runSet) start(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, nil, terr.New(terr.Validation, "Run on a closed handle: Close was called; Open the instance again")
	}
	if s.cancel == nil {
		s.cancel = map[int]context.CancelFunc{}
	}
	ctx, cancel := context.WithCancel(ctx)
	id := s.next
	s.next++
	s.cancel[id] = cancel
	s.wg.Add(1)
	return ctx, func() {
		s.mu.Lock()
		delete(s.cancel, id)
		s.mu.Unlock()
		cancel()
		s.wg.Done()
	}, nil
}

// Stop ends every Run in progress, waits until each has returned (its
// workers stopped, its store closed), and refuses Runs from then on. It
// may be called more than once.
func (t *Host) Stop() {
	s := &t.runs
	s.mu.Lock()
	s.stopped = true
	for _, c := range s.cancel {
		c()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
