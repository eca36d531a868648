package pipeline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/internal/fault"
)

// Runner states Readiness reports.
const (
	// RunnerStopped: Run is not running in this process.
	RunnerStopped = "stopped"
	// RunnerStarting: Run is connecting, taking the runner lock or
	// preparing capture.
	RunnerStarting = "starting"
	// RunnerStandby: another runner holds the instance; this one waits to
	// take over.
	RunnerStandby = "standby"
	// RunnerActive: this process maintains the instance.
	RunnerActive = "active"
	// RunnerReconnecting: the run lost its connection and starts again
	// after a backoff.
	RunnerReconnecting = "reconnecting"
)

// The checks Readiness lists, in this order (ADR 0017 §4).
const (
	// CheckActiveRunner: this process is the active runner.
	CheckActiveRunner = "active_runner"
	// CheckConnected: the run's last query on its connections did not
	// fail because the connection to PostgreSQL was lost.
	CheckConnected = "connected"
	// CheckCapture: capture is streaming from the slot (logical) or the
	// trigger drain's last attempt worked (trigger).
	CheckCapture = "capture"
	// CheckNoDisruption: capture is not recovering from lost continuity
	// (a slot dropped or invalidated, a publication dropped).
	CheckNoDisruption = "no_disruption"
	// CheckCatalog: the catalog answered a heartbeat within
	// catalogStale.
	CheckCatalog = "catalog"
)

// catalogStale is how old the last successful heartbeat (every 500 ms)
// may be before the catalog counts as unreachable: a few missed beats,
// not one slow one.
const catalogStale = 3 * time.Second

// ReadinessCheck is one condition of readiness: its name (a Check…
// constant), whether it holds, and if not, why.
type ReadinessCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// Readiness is what Run in this process is doing: Ready only while it is
// the active runner, connected, with capture streaming (or draining), no
// disruption pending and the catalog answering. State is the runner state
// and Since when it began; Reason says why it is not ready (the first
// failing check); Checks lists every check. A health endpoint serves it
// (the CLI's /readyz).
type Readiness struct {
	Ready  bool             `json:"ready"`
	State  string           `json:"state"`
	Reason string           `json:"reason,omitempty"`
	Since  time.Time        `json:"since"`
	Checks []ReadinessCheck `json:"checks"`
}

// readiness holds the Readiness of this process's Run: the runner state,
// and what the current run knows of its capture and catalog.
type readiness struct {
	v atomic.Pointer[Readiness]

	mu sync.Mutex
	// mode is the run's capture mode; captureOK and captureWhy whether it
	// is streaming or draining, and why not.
	mode       string
	captureOK  bool
	captureWhy string
	// disruption is the lost continuity capture is recovering from ("":
	// none).
	disruption string
	// beatAt is the last successful heartbeat; beatErr the last one's
	// error (nil when it worked).
	beatAt  time.Time
	beatErr error
}

func (r *readiness) set(state, reason string) {
	if cur := r.v.Load(); cur != nil && cur.State == state && cur.Reason == reason {
		return
	}
	r.v.Store(&Readiness{Ready: state == RunnerActive, State: state, Reason: reason, Since: time.Now().UTC()})
}

// startRun resets what a run knows: capture has not started, nothing is
// disrupted, the catalog answered (the run just read it).
func (r *readiness) startRun(mode string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode, r.captureOK, r.captureWhy, r.disruption = mode, false, "capture has not started yet", ""
	r.beatAt, r.beatErr = time.Now(), nil
}

// captured records capture's health: up, or why it is not.
func (r *readiness) captured(up bool, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.captureOK, r.captureWhy = up, why
	if up {
		// Streaming again: the disruption is handled.
		r.disruption = ""
	}
}

// capturing reports whether capture streams (or drains) now.
func (r *readiness) capturing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.captureOK
}

// disrupted records lost continuity being recovered from.
func (r *readiness) disrupted(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.disruption = why
}

// beat records a heartbeat's outcome.
func (r *readiness) beat(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beatErr = err
	if err == nil {
		r.beatAt = time.Now()
	}
}

// setRunner records the runner state of this process and reports the
// readiness it makes to the observers.
func (t *Host) setRunner(state, reason string) {
	t.ready.set(state, reason)
	t.obs.ReadinessChanged(t.Readiness().Ready)
}

// Readiness reports what Run in this process is doing, with every check.
func (t *Host) Readiness() Readiness {
	return t.ready.read(time.Now())
}

// read composes the Readiness at now.
func (r *readiness) read(now time.Time) Readiness {
	rd := Readiness{State: RunnerStopped}
	if cur := r.v.Load(); cur != nil {
		rd = *cur
	}
	active := rd.State == RunnerActive
	runner := ReadinessCheck{Name: CheckActiveRunner, OK: active}
	if !active {
		runner.Reason = "this process is not the active runner (state " + rd.State + ")"
		if rd.Reason != "" {
			runner.Reason += ": " + rd.Reason
		}
	}
	rd.Checks = []ReadinessCheck{runner}
	if !active {
		for _, n := range []string{CheckConnected, CheckCapture, CheckNoDisruption, CheckCatalog} {
			rd.Checks = append(rd.Checks, ReadinessCheck{Name: n, Reason: "no run is active in this process"})
		}
	} else {
		r.mu.Lock()
		conn := ReadinessCheck{Name: CheckConnected, OK: r.beatErr == nil || !fault.Disconnected(r.beatErr)}
		if !conn.OK {
			conn.Reason = "lost the connection to PostgreSQL: " + r.beatErr.Error()
		}
		capt := ReadinessCheck{Name: CheckCapture, OK: r.captureOK}
		if !capt.OK {
			what := "logical capture is not streaming from the replication slot"
			if r.mode == capture.ModeTrigger {
				what = "trigger capture is not draining the capture log"
			}
			capt.Reason = what + ": " + r.captureWhy
		}
		disr := ReadinessCheck{Name: CheckNoDisruption, OK: r.disruption == ""}
		if !disr.OK {
			disr.Reason = "capture lost continuity and is recovering: " + r.disruption
		}
		cat := ReadinessCheck{Name: CheckCatalog, OK: now.Sub(r.beatAt) < catalogStale}
		if !cat.OK {
			cat.Reason = fmt.Sprintf("the catalog has not answered a heartbeat for %s", now.Sub(r.beatAt).Round(100*time.Millisecond))
			if r.beatErr != nil {
				cat.Reason += ": " + r.beatErr.Error()
			}
		}
		r.mu.Unlock()
		rd.Checks = append(rd.Checks, conn, capt, disr, cat)
	}
	rd.Ready = true
	for _, c := range rd.Checks {
		if !c.OK {
			rd.Ready = false
			if rd.Reason == "" || active {
				rd.Reason = c.Reason
			}
			break
		}
	}
	if rd.Ready {
		rd.Reason = ""
	}
	return rd
}
