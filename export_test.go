package trellis

import "context"

// StreamFunc is streamFunc, exported for the tests of package trellis_test
// that inject capture failures a real server cannot be made to produce on
// demand (an undecodable slot).
type StreamFunc = streamFunc

// RunWithStream is Run with the slot stream given, exported for tests only
// so that package trellis_test can drive the runner through a stream that
// fails on cue while reusing its end-to-end harness.
func (t *Trellis) RunWithStream(ctx context.Context, fn StreamFunc) error { return t.run(ctx, fn) }

// SetSelfCheckHook has every self-check t runs call fn with "compare" just before
// its first comparison and "compared" just after (nil: none), for tests
// that put a change in flight exactly there.
func (t *Trellis) SetSelfCheckHook(fn func(stage string)) {
	if fn == nil {
		t.selfCheckHook.Store(nil)
		return
	}
	t.selfCheckHook.Store(&fn)
}
