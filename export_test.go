package trellis

import (
	"context"

	"github.com/trellis-repl/trellis-repl/capture"
)

// StreamFunc is the slot stream a run reads, exported for the tests of
// package trellis_test that inject capture failures a real server cannot
// be made to produce on demand (an undecodable slot).
type StreamFunc = capture.StreamFunc

// RunWithStream is Run with the slot stream given, exported for tests only
// so that package trellis_test can drive the runner through a stream that
// fails on cue while reusing its end-to-end harness.
func (t *Trellis) RunWithStream(ctx context.Context, fn StreamFunc) error {
	return t.rt.RunWith(ctx, fn)
}

// SetSelfCheckHook has every self-check t runs call fn with "compare" just before
// its first comparison and "compared" just after (nil: none), for tests
// that put a change in flight exactly there.
func (t *Trellis) SetSelfCheckHook(fn func(stage string)) { t.rt.SetSelfCheckHook(fn) }
