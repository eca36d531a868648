package pipeline

// The observer seam (ADR 0017 §1): the runtime reports what happens through
// Observer, one method per event, and never names a metric. Prometheus is
// one implementation (Metrics, metrics.go); a program embedding the library
// can route the same events elsewhere through Config.Observer.

import (
	"errors"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
)

// Observer receives the runtime events of one instance (one Open). Its
// methods are called from several goroutines at once, some on the path
// every captured transaction takes, so implementations must be safe for
// concurrent use and return quickly; they must not call back into the
// Trellis. Transform names are the catalog's (bounded by the transforms
// defined); states, modes and kinds are fixed enumerations.
//
// Embed NopObserver in an implementation to be unaffected by methods added
// later.
type Observer interface {
	// TransactionReceived reports a committed transaction delivered to
	// the intake: one decoded from the slot, or one batch moved by the
	// trigger drain.
	TransactionReceived()
	// PositionsUpdated reports the newest position durable in the local
	// store (received) and the one confirmed to the slot (confirmed).
	PositionsUpdated(received, confirmed uint64)
	// SlotRead reports the replication slot as the server last described
	// it (every heartbeat, ~500 ms, while capture is logical).
	SlotRead(s SlotStats)
	// CaptureModeChosen reports the capture mode a run uses
	// (CaptureLogical or CaptureTrigger).
	CaptureModeChosen(mode string)
	// RetentionChecked reports the slot's retained WAL against
	// --max-retained-wal (Config.MaxRetainedWAL); only called while a limit
	// is set and capture is logical.
	RetentionChecked(r catalog.Retention)
	// Reconnected reports a run started again after losing its connection,
	// or a slot recreated after a disruption.
	Reconnected()
	// StandbyChanged reports whether this process waits as a standby for
	// the runner that holds the instance.
	StandbyChanged(standby bool)
	// Error reports an error the runtime retried or acted on, by kind.
	Error(kind ErrorKind)

	// TransformState reports a transform's current state (one of the
	// catalog's: waiting_to_backfill, backfilling, live, paused,
	// quarantined). It may repeat the state last reported.
	TransformState(transform, state string)
	// TransformRemoved reports that a transform no longer exists (dropped,
	// or replaced by its redefinition under the same name, which is
	// reported again at once).
	TransformRemoved(transform string)
	// BatchApplied reports an apply transaction that committed.
	BatchApplied(transform string, b AppliedBatch)
	// ApplyFailed reports an apply transaction of changed keys that
	// failed (it is retried).
	ApplyFailed(transform string)
	// KeyHeld reports a key held in quarantine (ADR 0013).
	KeyHeld(transform string)
	// HeldKeys reports how many keys the transform holds now. Like
	// KeysWaiting and ApplyLag it is called when the figure changes (and
	// once when a run starts, or the transform's state is reported), not
	// every heartbeat: keep the last value.
	HeldKeys(transform string, n int64)
	// KeysWaiting reports the transform's backlog of changed keys not
	// yet re-derived.
	KeysWaiting(transform string, n int64)
	// BuildRowsRemaining reports the estimated source rows a build still
	// has to read (from the planner's statistics; 0 once built).
	BuildRowsRemaining(transform string, n int64)
	// LatencyObserved reports, for changes of the transform's sources
	// committed within one 10 ms bucket, the time from their commit to the
	// apply that made the target reflect them (ADR 0017 §3).
	LatencyObserved(transform string, d time.Duration)
	// ApplyLag reports the age of the oldest change received for the
	// transform and not yet applied; 0 when it is caught up.
	ApplyLag(transform string, d time.Duration)
	// ReadinessChanged reports whether this process is ready (the
	// Readiness /readyz serves): on every runner state change and with
	// every heartbeat.
	ReadinessChanged(ready bool)
	// SelfCheckAudited reports a periodic self-check of the transform
	// (Config.SelfCheckEvery): its outcome (OutcomeConverged, …) and, when
	// it compared, the divergences it found in its sample.
	SelfCheckAudited(transform, outcome string, divergences int64)
}

// SlotStats is the replication slot as pg_replication_slots describes it.
type SlotStats struct {
	// Exists is false when the slot is missing (dropped, or not made yet);
	// the other fields are then zero.
	Exists bool
	// RetainedBytes is the WAL the slot makes the server keep: the
	// distance from the current position to restart_lsn (-1: unknown, as
	// on a server in recovery).
	RetainedBytes int64
	// ConfirmLagBytes is the distance from the current position to
	// confirmed_flush_lsn (-1: unknown).
	ConfirmLagBytes int64
	// WALStatus is reserved, extended, unreserved or lost.
	WALStatus string
	// SafeWALSize is how much more WAL may be written before the slot is
	// in danger of losing what it needs; -1 when max_slot_wal_keep_size is
	// unlimited (-1), so nothing bounds it.
	SafeWALSize int64
}

// AppliedBatch is one apply transaction that committed.
type AppliedBatch struct {
	// Keys is the number of keys re-derived; Rows the target, state and
	// ledger rows written.
	Keys int
	Rows int64
	// Scope is the number of source keys the batch re-derived: its keys,
	// with those outer joins and narrowed scalar moves added to them
	// (engine.Applier.Scoped).
	Scope int64
	// Duration is the time the transaction took, isolation of failing
	// keys included.
	Duration time.Duration
	// Build is set for a build step (keys enumerated from the sources),
	// unset for a batch of changed keys.
	Build bool
}

// ErrorKind is the fixed enumeration of errors Observer.Error reports: the
// classes internal/fault gives errors of applying and building, plus
// capture failures and failed build steps.
type ErrorKind string

// The error kinds.
const (
	// ErrorData: an error about the rows being written (a key is isolated
	// and held).
	ErrorData ErrorKind = "data"
	// ErrorHalt: an error every key reproduces (the transform is paused on
	// its second occurrence).
	ErrorHalt ErrorKind = "halt"
	// ErrorTransient: an error that may pass by itself (retried with
	// backoff): lost connections, timeouts, conflicts.
	ErrorTransient ErrorKind = "transient"
	// ErrorCapture: capture failed: the replication stream or the trigger
	// drain broke off (retried), or continuity was lost (a disruption).
	ErrorCapture ErrorKind = "capture"
	// ErrorBuild: a build step failed (retried; the transform pauses
	// after five in a row).
	ErrorBuild ErrorKind = "build"
)

// errorKinds is every ErrorKind, in the order of the constants.
var errorKinds = [...]ErrorKind{ErrorData, ErrorHalt, ErrorTransient, ErrorCapture, ErrorBuild}

// ErrorKinds returns every ErrorKind, so an implementation can report
// each as zero before the first occurs.
func ErrorKinds() []ErrorKind { return append([]ErrorKind(nil), errorKinds[:]...) }

// kindOf is the kind of an error a worker's session ended with.
func kindOf(err error) ErrorKind {
	if be := (*buildError)(nil); errors.As(err, &be) {
		return ErrorBuild
	}
	switch fault.Classify(err) {
	case fault.Data:
		return ErrorData
	case fault.Halt:
		return ErrorHalt
	default:
		return ErrorTransient
	}
}

// NopObserver ignores every event. Embed it in an Observer that handles
// only some, so methods added later need no change.
type NopObserver struct{}

// TransactionReceived does nothing.
func (NopObserver) TransactionReceived() {}

// PositionsUpdated does nothing.
func (NopObserver) PositionsUpdated(received, confirmed uint64) {}

// SlotRead does nothing.
func (NopObserver) SlotRead(SlotStats) {}

// CaptureModeChosen does nothing.
func (NopObserver) CaptureModeChosen(string) {}

// RetentionChecked does nothing.
func (NopObserver) RetentionChecked(catalog.Retention) {}

// Reconnected does nothing.
func (NopObserver) Reconnected() {}

// StandbyChanged does nothing.
func (NopObserver) StandbyChanged(bool) {}

// Error does nothing.
func (NopObserver) Error(ErrorKind) {}

// TransformState does nothing.
func (NopObserver) TransformState(transform, state string) {}

// TransformRemoved does nothing.
func (NopObserver) TransformRemoved(string) {}

// BatchApplied does nothing.
func (NopObserver) BatchApplied(string, AppliedBatch) {}

// ApplyFailed does nothing.
func (NopObserver) ApplyFailed(string) {}

// KeyHeld does nothing.
func (NopObserver) KeyHeld(string) {}

// HeldKeys does nothing.
func (NopObserver) HeldKeys(string, int64) {}

// KeysWaiting does nothing.
func (NopObserver) KeysWaiting(string, int64) {}

// BuildRowsRemaining does nothing.
func (NopObserver) BuildRowsRemaining(string, int64) {}

// LatencyObserved does nothing.
func (NopObserver) LatencyObserved(string, time.Duration) {}

// ApplyLag does nothing.
func (NopObserver) ApplyLag(string, time.Duration) {}

// ReadinessChanged does nothing.
func (NopObserver) ReadinessChanged(bool) {}

// SelfCheckAudited does nothing.
func (NopObserver) SelfCheckAudited(string, string, int64) {}

// FanOut is an Observer that passes every event to each of obs in order
// (nil ones are skipped).
func FanOut(obs ...Observer) Observer {
	var out fanOut
	for _, o := range obs {
		if o == nil {
			continue
		}
		if f, ok := o.(fanOut); ok {
			out = append(out, f...)
			continue
		}
		out = append(out, o)
	}
	switch len(out) {
	case 0:
		return NopObserver{}
	case 1:
		return out[0]
	}
	return out
}

// fanOut is FanOut's Observer.
type fanOut []Observer

func (f fanOut) TransactionReceived() {
	for _, o := range f {
		o.TransactionReceived()
	}
}

func (f fanOut) PositionsUpdated(received, confirmed uint64) {
	for _, o := range f {
		o.PositionsUpdated(received, confirmed)
	}
}

func (f fanOut) SlotRead(s SlotStats) {
	for _, o := range f {
		o.SlotRead(s)
	}
}

func (f fanOut) CaptureModeChosen(mode string) {
	for _, o := range f {
		o.CaptureModeChosen(mode)
	}
}

func (f fanOut) RetentionChecked(r catalog.Retention) {
	for _, o := range f {
		o.RetentionChecked(r)
	}
}

func (f fanOut) Reconnected() {
	for _, o := range f {
		o.Reconnected()
	}
}

func (f fanOut) StandbyChanged(standby bool) {
	for _, o := range f {
		o.StandbyChanged(standby)
	}
}

func (f fanOut) Error(kind ErrorKind) {
	for _, o := range f {
		o.Error(kind)
	}
}

func (f fanOut) TransformState(transform, state string) {
	for _, o := range f {
		o.TransformState(transform, state)
	}
}

func (f fanOut) TransformRemoved(transform string) {
	for _, o := range f {
		o.TransformRemoved(transform)
	}
}

func (f fanOut) BatchApplied(transform string, b AppliedBatch) {
	for _, o := range f {
		o.BatchApplied(transform, b)
	}
}

func (f fanOut) ApplyFailed(transform string) {
	for _, o := range f {
		o.ApplyFailed(transform)
	}
}

func (f fanOut) KeyHeld(transform string) {
	for _, o := range f {
		o.KeyHeld(transform)
	}
}

func (f fanOut) HeldKeys(transform string, n int64) {
	for _, o := range f {
		o.HeldKeys(transform, n)
	}
}

func (f fanOut) KeysWaiting(transform string, n int64) {
	for _, o := range f {
		o.KeysWaiting(transform, n)
	}
}

func (f fanOut) BuildRowsRemaining(transform string, n int64) {
	for _, o := range f {
		o.BuildRowsRemaining(transform, n)
	}
}

func (f fanOut) LatencyObserved(transform string, d time.Duration) {
	for _, o := range f {
		o.LatencyObserved(transform, d)
	}
}

func (f fanOut) ApplyLag(transform string, d time.Duration) {
	for _, o := range f {
		o.ApplyLag(transform, d)
	}
}

func (f fanOut) ReadinessChanged(ready bool) {
	for _, o := range f {
		o.ReadinessChanged(ready)
	}
}

func (f fanOut) SelfCheckAudited(transform, outcome string, divergences int64) {
	for _, o := range f {
		o.SelfCheckAudited(transform, outcome, divergences)
	}
}
