package trellis

import (
	"sync/atomic"
	"time"
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

// Readiness is what Run in this process is doing: Ready only while it is
// the active runner, with its capture prepared and its workers started.
// Reason says why it is not ready (the lost connection, the runner it
// waits behind); Since is when the state began. A health endpoint serves
// it (the CLI's /readyz).
type Readiness struct {
	Ready  bool      `json:"ready"`
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// readiness holds the Readiness of this process's Run.
type readiness struct{ v atomic.Pointer[Readiness] }

func (r *readiness) set(state, reason string) {
	if cur := r.v.Load(); cur != nil && cur.State == state && cur.Reason == reason {
		return
	}
	r.v.Store(&Readiness{Ready: state == RunnerActive, State: state, Reason: reason, Since: time.Now().UTC()})
}

// Readiness reports what Run in this process is doing.
func (t *Trellis) Readiness() Readiness {
	if cur := t.ready.v.Load(); cur != nil {
		return *cur
	}
	return Readiness{State: RunnerStopped}
}
