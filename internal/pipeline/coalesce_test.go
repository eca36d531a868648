package pipeline

import (
	"testing"
	"time"
)

// TestCoalesceWait: a live worker waits out its window only while waiting
// can make the next batch larger.
func TestCoalesceWait(t *testing.T) {
	cfg := Options{CoalesceWindow: 20 * time.Millisecond, CoalesceKeys: 1000, BatchSize: 10000}
	small := cfg
	small.BatchSize = 100
	for _, c := range []struct {
		name     string
		cfg      Options
		since    time.Duration
		lastKeys int
		pending  int64
		want     time.Duration
	}{
		{"the rest of the window", cfg, 5 * time.Millisecond, 10, 20, 15 * time.Millisecond},
		{"window over", cfg, 25 * time.Millisecond, 10, 20, 0},
		{"no window", Options{CoalesceKeys: 1000, BatchSize: 10}, 0, 10, 5, 0},
		{"last batch had one key", cfg, time.Millisecond, 1, 20, 0},
		{"nothing waits", cfg, time.Millisecond, 10, 0, 0},
		{"the backlog is enough", cfg, time.Millisecond, 10, 1000, 0},
		{"under the backlog, under a batch", small, time.Millisecond, 10, 99, 19 * time.Millisecond},
		// Waiting cannot make a batch larger than --batch-size: a backlog
		// under --coalesce-keys that fills one is taken at once.
		{"a full batch waits", small, time.Millisecond, 100, 100, 0},
		{"more than a batch waits", small, time.Millisecond, 100, 500, 0},
	} {
		if got := coalesceWait(c.cfg, c.since, c.lastKeys, c.pending); got != c.want {
			t.Errorf("%s: coalesceWait = %v, want %v", c.name, got, c.want)
		}
	}
}
