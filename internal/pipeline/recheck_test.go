package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/engine"
)

// TestRecheckPause: rows whose dependency level is behind (ADR 0043) hold
// up no other key of their transform. The worker pauses only when the
// keys it marked again are all that waits, and a change arriving during
// the pause ends it. The pause is set to an hour, so that a pause taken
// where none is due shows as the context's deadline, not as a timing.
func TestRecheckPause(t *testing.T) {
	store, err := checkpoint.OpenWith(t.TempDir(), checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { store.Close() }()
	tr := &Host{log: slog.New(slog.NewTextHandler(io.Discard, nil)), obs: NopObserver{}}
	r := &runner{t: tr, obs: tr.obs, store: store, workers: map[int64]*worker{}}
	const id = 1
	// A self-join: both sources read table 7, so key 1 marked for both is
	// one dirty key.
	w := &worker{r: r, id: id, name: "owner", wake: make(chan struct{}, 1),
		plan: &engine.Plan{Sources: []engine.Source{{OID: 7}, {OID: 7}}}}
	take := func() {
		t.Helper()
		b, err := store.Take(id, 0)
		if err == nil {
			err = store.Done(id, b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pause := func(want error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitGuard)
		defer cancel()
		w.recheckWait = time.Hour
		if err := w.pauseForRecheck(ctx); !errors.Is(err, want) {
			t.Fatalf("pauseForRecheck = %v; want %v", err, want)
		}
	}
	flagged := [][][]string{{{"1"}}, {{"1"}}}

	// Another key waits: no pause.
	if err := w.markRecheck(flagged); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkDirty(id, []checkpoint.DirtyKey{{Transform: id, Table: 7, Key: checkpoint.EncodeKey([]string{"2"})}}); err != nil {
		t.Fatal(err)
	}
	if w.recheck != 1 {
		t.Fatalf("%d keys marked again; want 1 (the self-join's two sources are one key)", w.recheck)
	}
	pause(nil)
	take()

	// Only the marked key waits: a pause, which a change ends.
	if err := w.markRecheck(flagged); err != nil {
		t.Fatal(err)
	}
	signal(w.wake)
	pause(nil)

	// Only the marked key waits and nothing arrives: the pause lasts.
	if err := w.markRecheck(flagged); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.recheckWait = time.Hour
	if err := w.pauseForRecheck(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("pauseForRecheck with only the marked key waiting = %v; want the pause, cut by the context", err)
	}
}

// waitGuard bounds a wait that must not happen: a guard, not a timing.
const waitGuard = 2 * time.Minute
