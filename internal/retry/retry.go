// Package retry paces and reports an operation that fails for a while and
// is tried again: a capped exponential backoff, and an Episode that logs a
// run of failures as one warning when it starts and one line when it ends,
// so an outage of minutes logs two lines, not one per attempt.
package retry

import (
	"context"
	"log/slog"
	"time"
)

// Backoff is a capped exponential delay between attempts: Min, then
// doubling up to Max. The zero value waits 100 ms doubling to 10 s.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Next returns the delay before the next attempt and doubles the one
// after it (up to Max).
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 10 * time.Second
	}
	hi = max(hi, lo)
	if b.cur < lo {
		b.cur = lo
	}
	d := b.cur
	b.cur = min(2*b.cur, hi)
	return d
}

// Reset makes the next delay Min again: the operation worked.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d or until ctx ends, and reports whether the whole delay
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Episode reports the failures of one operation from the first failure to
// the next success as one episode: a warning at the first failure, debug
// lines for the attempts after it, and one info line when the operation
// works again. It is used by one goroutine at a time.
type Episode struct {
	log       *slog.Logger
	failing   string
	recovered string

	down     bool
	warned   bool
	since    time.Time
	attempts int
}

// NewEpisode returns an episode logging failing (a warning) when the
// operation starts failing and recovered (info) when it works again.
func NewEpisode(log *slog.Logger, failing, recovered string) *Episode {
	return &Episode{log: log, failing: failing, recovered: recovered}
}

// Fail records a failed attempt, to be tried again after retryIn. Only
// the first failure of an episode is a warning.
func (e *Episode) Fail(err error, retryIn time.Duration, attrs ...any) {
	e.open()
	attrs = append([]any{"err", err, "retry_in", retryIn}, attrs...)
	if e.warned {
		e.log.Debug(e.failing, append(attrs, "attempt", e.attempts)...)
		return
	}
	e.warned = true
	e.log.Warn(e.failing, attrs...)
}

// Note records a failed attempt that something else already reported:
// it opens or continues the episode without a line of its own.
func (e *Episode) Note() { e.open() }

func (e *Episode) open() {
	e.attempts++
	if !e.down {
		e.down, e.since = true, time.Now()
	}
}

// Recover records that the operation works again, ending the episode with
// one info line when it warned (nothing when no episode is open).
func (e *Episode) Recover(attrs ...any) {
	if !e.down {
		return
	}
	if e.warned {
		e.log.Info(e.recovered, append([]any{"failed_attempts", e.attempts, "down_for", time.Since(e.since).Round(time.Millisecond)}, attrs...)...)
	}
	e.down, e.warned, e.attempts = false, false, 0
}

// Down reports whether an episode is open.
func (e *Episode) Down() bool { return e.down }
