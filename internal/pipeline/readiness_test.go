package pipeline

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/capture"
)

// TestReadinessChecks: ready only with every check passing; the reason is
// the first failing check's, or the runner state's when not active.
func TestReadinessChecks(t *testing.T) {
	var r readiness
	now := time.Now()
	if rd := r.read(now); rd.Ready || rd.State != RunnerStopped || len(rd.Checks) != 5 || rd.Checks[0].OK {
		t.Fatalf("no run: %+v", rd)
	}
	r.set(RunnerStandby, "another runner holds instance trellis")
	if rd := r.read(now); rd.Ready || rd.Reason != "another runner holds instance trellis" {
		t.Fatalf("standby: %+v", rd)
	}
	r.set(RunnerActive, "")
	r.startRun(capture.ModeTrigger)
	if rd := r.read(time.Now()); rd.Ready || !strings.HasPrefix(rd.Reason, "trigger capture is not draining") {
		t.Fatalf("capture not started: %+v", rd)
	}
	r.captured(true, "")
	if rd := r.read(time.Now()); !rd.Ready || rd.Reason != "" {
		t.Fatalf("everything up: %+v", rd)
	}
	r.disrupted(`replication slot "x" does not exist`)
	if rd := r.read(time.Now()); rd.Ready || !strings.Contains(rd.Reason, "does not exist") {
		t.Fatalf("disruption: %+v", rd)
	}
	r.captured(true, "")
	r.beat(io.ErrUnexpectedEOF)
	rd := r.read(time.Now())
	if rd.Ready || rd.Checks[1].Name != CheckConnected || rd.Checks[1].OK || !strings.Contains(rd.Reason, "lost the connection") {
		t.Fatalf("lost connection: %+v", rd)
	}
	r.beat(errors.New("permission denied for table instance"))
	rd = r.read(time.Now().Add(catalogStale + time.Second))
	if rd.Ready || !rd.Checks[1].OK || rd.Checks[4].OK || !strings.Contains(rd.Reason, "permission denied") {
		t.Fatalf("catalog stale: %+v", rd)
	}
	r.beat(nil)
	if rd := r.read(time.Now()); !rd.Ready {
		t.Fatalf("recovered: %+v", rd)
	}
}
