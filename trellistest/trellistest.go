// Package trellistest helps tests of programs that embed trellis-repl:
// a throwaway PostgreSQL, a handle on a fresh instance with its pipeline
// running, and waits that fail the test saying why each transform is not
// where it should be.
//
//	func TestTotals(t *testing.T) {
//		dsn := trellistest.Postgres(t)
//		// create the tables, load fixtures …
//		h := trellistest.Open(t, dsn)
//		if _, err := h.Apply(ctx, "CREATE TRANSFORM totals AS SELECT …"); err != nil {
//			t.Fatal(err)
//		}
//		trellistest.AwaitLive(t, h, "totals")
//		// write to the sources …
//		trellistest.Eventually(t, h, "totals")
//		// read totals …
//	}
//
// Postgres needs no TestMain: the server is started on first use and
// removed when the test binary exits (ADR 0040).
package trellistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TB is what the helpers need of a test; *testing.T, *testing.B and
// *testing.F satisfy it.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
}

// WaitTimeout bounds AwaitLive, Eventually and Backfill: generous, for
// loaded CI machines.
const WaitTimeout = 2 * time.Minute

// Postgres returns the DSN of a fresh, empty database on a throwaway
// PostgreSQL server with wal_level=logical, dropped when the test ends.
// The server is the one TRELLIS_TEST_DSN names (a superuser DSN), else
// one started from the machine's PostgreSQL binaries, else a postgres
// container where Docker is reachable; it is started once per test
// binary and reused by every test.
func Postgres(t TB) string {
	t.Helper()
	admin, err := pgtest.AdminDSN()
	if err != nil {
		t.Fatalf("trellistest: no PostgreSQL for the test: %v (install postgresql, set TRELLIS_TEST_DSN, or run Docker)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, drop, err := pgtest.CreateDatabase(ctx, admin, t.Name())
	if err != nil {
		t.Fatalf("trellistest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Logf("trellistest: %v", err)
		}
	})
	return dsn
}

// Open opens a handle on a fresh instance of the database dsn and runs
// its pipeline in the background until the test ends, when the handle is
// closed. cfg, when given, is the configuration; DSN, DataDir (a
// temporary directory), Schema (a new instance schema, trellis_<hex>)
// and ProgressInterval (100ms) are filled in where unset.
func Open(t TB, dsn string, cfg ...trellis.Config) *trellis.Trellis {
	t.Helper()
	var c trellis.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.DSN = dsn
	if c.DataDir == "" {
		c.DataDir = t.TempDir()
	}
	if c.Schema == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Schema = "trellis_" + hex.EncodeToString(b[:])
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 100 * time.Millisecond
	}
	h, err := trellis.Open(context.Background(), c)
	if err != nil {
		t.Fatalf("trellistest: open an instance: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(context.Background()) }()
	t.Cleanup(func() {
		h.Close() // ends Run
		if err := <-done; err != nil {
			t.Logf("trellistest: Run ended with %v", err)
		}
	})
	return h
}

// AwaitLive waits until the named transforms (every one when none is
// named) are live, and fails the test when one is paused or quarantined,
// or when WaitTimeout passes, naming each transform's state and reason.
func AwaitLive(t TB, h *trellis.Trellis, names ...string) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		st, err := h.Status(context.Background(), names...)
		if err != nil {
			t.Fatalf("trellistest: status: %v", err)
		}
		live := true
		for _, s := range st {
			switch s.State {
			case "live":
			case "paused", "quarantined":
				t.Fatalf("trellistest: transform %s will not become live:\n%s", s.Name, Reasons(st))
			default:
				live = false
			}
		}
		if live {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trellistest: not live after %s:\n%s", WaitTimeout, Reasons(st))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Eventually waits until every write committed before the call is in the
// named transforms' targets (every transform's when none is named), as
// AwaitTransforms does, and fails the test otherwise, naming each
// transform's state and why it is not there (WaitTimeout bounds the wait).
func Eventually(t TB, h *trellis.Trellis, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	tok, err := h.WatermarkToken(ctx)
	if err == nil {
		err = h.AwaitTransforms(ctx, tok, names...)
	}
	if err == nil {
		return
	}
	st, serr := h.Status(context.Background())
	if serr != nil {
		t.Fatalf("trellistest: %v (and status: %v)", err, serr)
	}
	t.Fatalf("trellistest: %v\n%s", err, Reasons(st))
}

// Backfill re-reads table for every transform that reads it (REQUEST
// BACKFILL OF table) and waits until they converged: call it after
// loading fixtures with capture bypassed (the table's triggers disabled
// for the load, in trigger capture).
func Backfill(t TB, h *trellis.Trellis, table string) {
	t.Helper()
	if _, err := h.RequestBackfill(context.Background(), table); err != nil {
		t.Fatalf("trellistest: backfill %s: %v", table, err)
	}
	Eventually(t, h)
}

// Reasons renders each transform's state and why it is not converged:
// its failures, held keys and backlog; one line per transform.
func Reasons(st []trellis.TransformStatus) string {
	var b strings.Builder
	for _, s := range st {
		fmt.Fprintf(&b, "  %s: %s", s.Name, s.State)
		if s.CaptureFailure != nil {
			fmt.Fprintf(&b, "; %s failure: %s", s.CaptureFailure.Kind, s.CaptureFailure.Error)
		}
		if s.BackfillFailure != nil {
			fmt.Fprintf(&b, "; build failing (%d attempts): %s", s.BackfillFailure.Attempts, s.BackfillFailure.LastError)
		}
		if s.DrainFailure != nil {
			fmt.Fprintf(&b, "; applying changes failing (%d attempts): %s", s.DrainFailure.Attempts, s.DrainFailure.Error)
		}
		if s.CaptureWait != nil {
			fmt.Fprintf(&b, "; capture waits for a lock on %s", s.CaptureWait.Table)
		}
		if s.HeldKeys != nil {
			fmt.Fprintf(&b, "; %d keys held in quarantine", s.HeldKeys.Count)
		}
		if s.KeysWaiting > 0 {
			fmt.Fprintf(&b, "; %d keys waiting", s.KeysWaiting)
		}
		if s.Runner != nil && !s.Runner.Attached {
			b.WriteString("; no runner attached")
		}
		b.WriteString("\n")
	}
	return b.String()
}
