package trellis_test

// Hot standby (ADR 0014): a second `trellis-repl run` for the instance
// waits, says so once, is listed in status, and takes over when the active
// runner is killed with SIGKILL while a writer commits, with the same data
// directory (a shared disk) or its own. Its own directory is a lost store,
// and continuity decides as on any start: --confirm=applied resumes from
// the slot; --confirm=local and trigger capture pause the transforms with
// a disruption, and RESUME rebuilds them. Every target ends equal to its
// query.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestStandbyTakesOver(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	cases := []struct {
		name, capture, confirm string
		sameDir                bool
		// disrupted: the standby's own store is a lost store that
		// continuity cannot bridge.
		disrupted bool
	}{
		{name: "logical local shared dir", capture: trellis.CaptureLogical, confirm: trellis.ConfirmLocal, sameDir: true},
		{name: "logical applied own dir", capture: trellis.CaptureLogical, confirm: trellis.ConfirmApplied},
		{name: "logical local own dir", capture: trellis.CaptureLogical, confirm: trellis.ConfirmLocal, disrupted: true},
		{name: "trigger shared dir", capture: trellis.CaptureTrigger, confirm: trellis.ConfirmLocal, sameDir: true},
		{name: "trigger own dir", capture: trellis.CaptureTrigger, confirm: trellis.ConfirmLocal, disrupted: true},
	}
	var subs []subtest // each on a database of its own
	for _, c := range cases {
		subs = append(subs, subtest{c.name, func(t *testing.T) {
			var dsn string
			if c.capture == trellis.CaptureTrigger {
				dsn = pgtest.NewDatabaseOn(t, replicaServer(t))
			} else {
				dsn = pgtest.NewDatabase(t)
			}
			e := haEnv(t, dsn, trellis.Config{})
			dirA, dirB := t.TempDir(), t.TempDir()
			if c.sameDir {
				dirB = dirA
			}
			addrA, addrB := freeAddr(t), freeAddr(t)
			args := func(dir, addr string) []string {
				return []string{"run", "--dsn", dsn, "--data-dir", dir, "--confirm", c.confirm, "--metrics-addr", addr}
			}
			a := startHARun(t, bin, args(dirA, addrA)...)
			e.converge("runner A built")
			e.awaitRunner(a.pid(), time.Time{})
			b := startHARun(t, bin, args(dirB, addrB)...)
			b.await(0, "another runner holds instance trellis; waiting as standby")
			waitStandbys(t, e, 1)
			awaitReady(t, addrA, http.StatusOK, trellis.RunnerActive)
			awaitReady(t, addrB, http.StatusServiceUnavailable, trellis.RunnerStandby)
			// A still maintains the instance while B waits.
			e.awaitRunner(a.pid(), time.Time{})

			w := startHAWriter(t, dsn, 1)
			time.Sleep(500 * time.Millisecond)
			a.kill()
			killed := time.Now()
			rs := e.awaitRunner(b.pid(), killed)
			t.Logf("runner B took over %s after A was killed", rs.Since.Sub(killed).Round(time.Millisecond))
			b.await(0, "took over as the active runner")
			awaitReady(t, addrB, http.StatusOK, trellis.RunnerActive)
			if got := len(rs.StandbyPIDs); got != 0 {
				t.Errorf("standbys after the takeover: %v", rs.StandbyPIDs)
			}
			time.Sleep(time.Second) // writes go on under B
			w.halt()
			if w.commits.Load() == 0 {
				t.Fatal("the writer committed nothing")
			}
			if c.disrupted {
				ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
				defer cancel()
				tok, err := e.tr.WatermarkToken(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.tr.AwaitConverged(ctx, tok); trellis.CodeOf(err) != trellis.CodeConflict || !strings.Contains(err.Error(), "disruption") {
					t.Fatalf("AwaitConverged after a takeover with a store of its own: %v, want a conflict naming the disruption", err)
				}
				e.apply(`RESUME TRANSFORM big_orders; RESUME TRANSFORM by_customer`)
			}
			e.converge("after the takeover")
			b.alive("after the takeover")
			if n := strings.Count(b.text(0), "waiting as standby"); n != 1 {
				t.Errorf("standby announced %d times, want once", n)
			}
		}})
	}
	atOnce(t, subs...)
}

// waitStandbys waits until status lists n standbys.
func waitStandbys(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		st, err := e.tr.Status(context.Background())
		if err == nil && len(st) > 0 && len(st[0].Runner.StandbyPIDs) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never listed %d standbys: %+v %v", n, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr is a local address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// awaitReady polls a runner's /readyz until it answers code with state.
func awaitReady(t *testing.T, addr string, code int, state string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			var rd trellis.Readiness
			derr := json.NewDecoder(resp.Body).Decode(&rd)
			resp.Body.Close()
			if derr == nil && resp.StatusCode == code && rd.State == state && rd.Ready == (code == http.StatusOK) {
				return
			}
			last = fmt.Sprintf("%d %+v", resp.StatusCode, rd)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("/readyz of %s never answered %d %s; last: %s", addr, code, state, last)
}
