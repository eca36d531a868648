package trellis_test

// A runner on a new machine — the local store lost, the slot still there
// (issue 26 item 6) — and the two ways out of the disruption it is:
// RESUME TRANSFORM ALL, and --on-disruption=repair (ADR 0039).

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// TestStoreLostRepairs loses the local store under --confirm=local. With
// pause, every transform the system paused is resumed by one RESUME
// TRANSFORM ALL and the one a user paused stays paused; with repair, the
// runner rebuilds every transform in place by itself, and what a
// disruption paused under an earlier pause run too.
func TestStoreLostRepairs(t *testing.T) {
	t.Parallel()
	lose := func(t *testing.T, cfg trellis.Config, seed int64) *env {
		cfg.DataDir = t.TempDir()
		e := newEnv(t, cfg)
		e.exec(schemaSQL)
		e.apply(defsSQL)
		e.start()
		rng := rand.New(rand.NewSource(seed))
		workload(e, rng, 5, 20)
		e.converge("first run")
		e.stop()
		workload(e, rng, 5, 20)
		if err := os.RemoveAll(cfg.DataDir); err != nil {
			t.Fatal(err)
		}
		return e
	}
	// Each case on a database and store of its own, all at once.
	atOnce(t, subtest{"pause, then RESUME TRANSFORM ALL", func(t *testing.T) {
		e := lose(t, trellis.Config{}, 31)
		e.apply(`PAUSE TRANSFORM totals`)
		if res, err := e.tr.Apply(context.Background(), `RESUME TRANSFORM ALL`); err != nil || res[0].Action != "unchanged" {
			t.Fatalf("RESUME TRANSFORM ALL with only a user's pause: %+v, %v; want unchanged", res, err)
		}
		e.start()
		awaitPaused(t, e, "big_orders", "by_customer")
		disruption := 0
		st, err := e.tr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Disruption != nil && s.Disruption.Action == trellis.DisruptionPaused && strings.Contains(s.Disruption.Reason, "local checkpoint store") {
				disruption++
			}
		}
		if disruption != 2 {
			t.Fatalf("status: %d transforms paused by the disruption, want 2: %+v", disruption, st)
		}
		res, err := e.tr.Apply(context.Background(), `RESUME TRANSFORM ALL`)
		if err != nil {
			t.Fatal(err)
		}
		notes := strings.Join(res[0].Notes, "\n")
		if res[0].Action != "resumed" || !strings.Contains(notes, "resumed: big_orders, by_customer") || !strings.Contains(notes, "left paused by a user (RESUME TRANSFORM each by name): totals") {
			t.Fatalf("RESUME TRANSFORM ALL: %+v", res)
		}
		e.apply(`RESUME TRANSFORM totals`)
		e.converge("after RESUME TRANSFORM ALL")
	}}, subtest{"repair", func(t *testing.T) {
		e := lose(t, trellis.Config{OnDisruption: trellis.OnDisruptionRepair}, 32)
		e.start()
		e.converge("repaired in place")
		st, err := e.tr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Build == nil || s.Build.FinishedAt == nil || s.Disruption != nil {
				t.Fatalf("%s after the repair: build %+v, disruption %+v; want a finished rebuild and no disruption left", s.Name, s.Build, s.Disruption)
			}
		}
	}}, subtest{"paused before, repaired by a runner with repair", func(t *testing.T) {
		e := lose(t, trellis.Config{}, 33)
		e.start()
		awaitPaused(t, e, "big_orders", "by_customer", "totals")
		e.stop()
		e.tr.Close()
		e.cfg.OnDisruption = trellis.OnDisruptionRepair
		e.open()
		e.start()
		awaitUnpaused(t, e) // AwaitConverged fails at once on a paused transform
		e.converge("repaired by the next runner")
	}})
}

// awaitPaused waits until each named transform is paused by the system.
func awaitPaused(t *testing.T, e *env, names ...string) {
	t.Helper()
	for _, n := range names {
		poll(t, n+" paused by the system", func() bool {
			st, err := e.tr.Status(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			return st[0].State == catalog.StatePaused && st[0].PausedBy != nil && *st[0].PausedBy == "system"
		})
	}
}

// awaitUnpaused waits until no transform is paused.
func awaitUnpaused(t *testing.T, e *env) {
	t.Helper()
	poll(t, "no transform paused", func() bool {
		st, err := e.tr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.State == catalog.StatePaused {
				return false
			}
		}
		return true
	})
}

// TestSlotDroppedRepairs drops the slot under a running runner started
// with --on-disruption=repair: the transforms pause while capture is down,
// and once the new slot streams the runner rebuilds them in place by
// itself — the changes made while the slot was gone reach the targets.
func TestSlotDroppedRepairs(t *testing.T) {
	t.Parallel()
	e := newDisruptEnvWith(t, nil, trellis.Config{Capture: trellis.CaptureLogical, OnDisruption: trellis.OnDisruptionRepair})
	e.start()
	e.converge("after build")
	st, err := e.tr.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]time.Time{}
	for _, s := range st {
		built[s.Name] = s.Build.StartedAt
	}
	e.dropSlot()
	e.write(0) // lost with the slot
	poll(t, "every transform rebuilt after the slot was dropped", func() bool {
		st, err := e.tr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.State != catalog.StateLive || s.Build == nil || !s.Build.StartedAt.After(built[s.Name]) || s.Disruption != nil {
				return false
			}
		}
		return true
	})
	e.converge("repaired in place")
	e.write(1)
	e.converge("after writes on the new slot")
	e.running("at the end")
}

// TestOnDisruptionRefused: an --on-disruption mode that is neither pause
// nor repair is a validation error naming both, before anything connects.
func TestOnDisruptionRefused(t *testing.T) {
	t.Parallel()
	_, err := trellis.Open(context.Background(), trellis.Config{DSN: "postgres://nobody@127.0.0.1:1/none", OnDisruption: "rebuild"})
	if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(fmt.Sprint(err), `on-disruption mode "rebuild" is unknown; use pause`) || !strings.Contains(fmt.Sprint(err), "or repair") {
		t.Fatalf("Open with --on-disruption=rebuild: %v; want a validation error naming pause and repair", err)
	}
}
