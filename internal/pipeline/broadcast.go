package pipeline

import "sync"

// broadcast wakes every goroutine waiting on it at once: a waiter takes
// the current channel with wait, and fire closes it and opens the next.
// A Trellis that runs Run fires its progress broadcast whenever a
// transform's applied position or state moves, so that AwaitConverged in
// the same process (an embedding program, the bench, the tests) returns
// when the change it waits for is applied instead of at its next poll of
// the catalog; a wait from another process still polls.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait is the channel the next fire closes.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// fire wakes the current waiters.
func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
