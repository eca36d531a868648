package trellis

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// Metrics is the Prometheus Observer: it turns the runtime's events into
// the series docs/metrics.md lists. Create it with NewMetrics and pass it
// as Config.Metrics; Open binds it to the instance, so every series
// carries trellis_instance="<database>/<schema>".
//
// Each transform adds its own series (docs/metrics.md counts them: about
// 47 a transform, so 47,000 for 1,000 transforms). The instance's totals
// over its transforms (trellis_transforms_*) are exported beside them, so
// that dashboards and alerts need not sum 1,000 series; InstanceOnly (run
// --metrics-per-transform=false, Config.InstanceMetricsOnly) keeps only
// those.
type Metrics struct {
	s *series
	// instance is the trellis_instance label; "" until bound.
	instance string
	// txns is the transaction counter's child for instance, resolved once:
	// it is counted for every transaction captured.
	txns prometheus.Counter
	// perTransform is false when only the instance's series are kept.
	perTransform bool
	// totals are the instance's totals over its transforms; nil (none
	// kept) until bound.
	totals *instanceTotals
}

// instanceLabel is the label every series carries. Not "instance": a
// scrape sets that to the target and would rename ours exported_instance.
const instanceLabel = "trellis_instance"

// The fixed label values of the enumerated series.
var (
	transformStates = []string{catalog.StateWaiting, catalog.StateBackfilling, catalog.StateLive, catalog.StatePaused, catalog.StateQuarantined}
	walStatuses     = []string{"reserved", "extended", "unreserved", "lost"}
	captureModes    = []string{capture.ModeLogical, capture.ModeTrigger}
)

// latencyBuckets are the end-to-end latency histogram's bounds, 10 ms to
// 60 s (ADR 0017 §3).
var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// series are the vectors behind every Metrics of one registry.
type series struct {
	receivedLSN, confirmedLSN                 *prometheus.GaugeVec
	slotRetained, slotLag, slotStatus         *prometheus.GaugeVec
	slotSafe, retentionLimit, retentionOver   *prometheus.GaugeVec
	txns, errors, reconnects                  *prometheus.CounterVec
	captureMode, standby                      *prometheus.GaugeVec
	keysWaiting, state, keysHeld, buildRemain *prometheus.GaugeVec
	applyLag                                  *prometheus.GaugeVec
	keysApplied, rowsWritten, keysHeldTotal   *prometheus.CounterVec
	applyErrors                               *prometheus.CounterVec
	latency, applyDuration                    *prometheus.HistogramVec
	ready, selfCheckDiverged                  *prometheus.GaugeVec
	selfCheckRuns                             *prometheus.CounterVec
	// The instance's totals over its transforms (trellis_transforms_*).
	inState, totalWaiting, totalHeld, totalBuildRemain *prometheus.GaugeVec
	maxApplyLag, divergedTransforms                    *prometheus.GaugeVec
	totalApplied, totalRows, totalHeldKeys, totalErrs  *prometheus.CounterVec
	totalLatency, totalApplyDuration                   *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered). A second Metrics on the same registry shares the first's
// series, so several instances in one process can each have their own.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	inst := []string{instanceLabel}
	tr := []string{instanceLabel, "transform"}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
	}
	s := &series{
		receivedLSN:       gauge("trellis_received_lsn_bytes", "Newest WAL position durable in the local store, as a byte offset.", inst...),
		confirmedLSN:      gauge("trellis_confirmed_lsn_bytes", "WAL position confirmed to the replication slot, as a byte offset.", inst...),
		slotRetained:      gauge("trellis_slot_retained_wal_bytes", "WAL the replication slot makes the server keep (current position minus restart_lsn).", inst...),
		slotLag:           gauge("trellis_slot_confirm_lag_bytes", "WAL between the server's current position and the slot's confirmed_flush_lsn.", inst...),
		slotStatus:        gauge("trellis_slot_wal_status", "1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others.", append(inst, "status")...),
		slotSafe:          gauge("trellis_slot_safe_wal_size_bytes", "WAL that may still be written before the slot is in danger of losing WAL it needs; absent while max_slot_wal_keep_size is unlimited.", inst...),
		retentionLimit:    gauge("trellis_slot_retained_wal_limit_bytes", "The --max-retained-wal limit; absent when none is set.", inst...),
		retentionOver:     gauge("trellis_slot_retained_wal_over_limit", "1 while the slot retains more WAL than --max-retained-wal.", inst...),
		txns:              counter("trellis_capture_transactions_total", "Committed transactions captured: decoded from the slot, or trigger drain batches.", inst...),
		errors:            counter("trellis_errors_total", "Errors the runner retried or acted on, by kind: data, halt, transient, capture, build.", append(inst, "kind")...),
		reconnects:        counter("trellis_runner_reconnects_total", "Runs started again after losing the connection, and slots recreated after a disruption.", inst...),
		captureMode:       gauge("trellis_capture_mode", "1 for the capture mode the run uses (logical, trigger), 0 for the other.", append(inst, "mode")...),
		standby:           gauge("trellis_runner_standby", "1 while this process waits as a standby for the runner that holds the instance.", inst...),
		keysWaiting:       gauge("trellis_transform_keys_waiting", "Changed keys not yet re-derived.", tr...),
		keysApplied:       counter("trellis_transform_keys_applied_total", "Keys re-derived, by builds and by batches of changes.", tr...),
		rowsWritten:       counter("trellis_transform_rows_written_total", "Target, state and ledger rows written.", tr...),
		state:             gauge("trellis_transform_state", "1 for the transform's state, 0 for the others.", append(tr, "state")...),
		keysHeld:          gauge("trellis_transform_keys_held", "Keys held in quarantine now.", tr...),
		keysHeldTotal:     counter("trellis_transform_keys_held_total", "Keys held in quarantine after their re-derive kept failing on row data.", tr...),
		buildRemain:       gauge("trellis_transform_build_rows_remaining", "Estimated source rows the build still has to read (0 once built).", tr...),
		latency:           histogram("trellis_transform_latency_seconds", "Time from a source commit to the apply that reflects it (one sample per 10 ms of commits).", latencyBuckets, tr...),
		applyLag:          gauge("trellis_transform_apply_lag_seconds", "Age of the oldest change received and not yet applied; 0 when caught up.", tr...),
		applyDuration:     histogram("trellis_transform_apply_duration_seconds", "Duration of apply transactions of changed keys.", prometheus.ExponentialBuckets(0.001, 2, 16), tr...),
		applyErrors:       counter("trellis_transform_apply_errors_total", "Apply transactions of changed keys that failed (each is retried).", tr...),
		ready:             gauge("trellis_runner_ready", "1 while this process is the ready, active runner (what /readyz answers 200 for).", inst...),
		selfCheckDiverged: gauge("trellis_selfcheck_divergences", "Divergences the last periodic self-check of the transform found in its sample (0: it matched its query).", tr...),
		selfCheckRuns:     counter("trellis_selfcheck_runs_total", "Periodic self-checks by outcome: converged, diverged, not_caught_up, not_live.", append(inst, "outcome")...),

		inState:            gauge("trellis_transforms_in_state", "Transforms of the instance in each state.", append(inst, "state")...),
		totalWaiting:       gauge("trellis_transforms_keys_waiting", "Changed keys not yet re-derived, summed over the instance's transforms.", inst...),
		totalHeld:          gauge("trellis_transforms_keys_held", "Keys held in quarantine now, summed over the instance's transforms.", inst...),
		totalBuildRemain:   gauge("trellis_transforms_build_rows_remaining", "Estimated source rows builds still have to read, summed over the instance's transforms.", inst...),
		maxApplyLag:        gauge("trellis_transforms_max_apply_lag_seconds", "The largest apply lag of the instance's transforms.", inst...),
		divergedTransforms: gauge("trellis_selfcheck_diverged_transforms", "Transforms whose last periodic self-check found divergences.", inst...),
		totalApplied:       counter("trellis_transforms_keys_applied_total", "Keys re-derived by the instance's transforms, by builds and by batches of changes.", inst...),
		totalRows:          counter("trellis_transforms_rows_written_total", "Target, state and ledger rows written by the instance's transforms.", inst...),
		totalHeldKeys:      counter("trellis_transforms_keys_held_total", "Keys the instance's transforms held in quarantine.", inst...),
		totalErrs:          counter("trellis_transforms_apply_errors_total", "Apply transactions of changed keys that failed, over the instance's transforms.", inst...),
		totalLatency:       histogram("trellis_transforms_latency_seconds", "Time from a source commit to the apply that reflects it, over the instance's transforms.", latencyBuckets, inst...),
		totalApplyDuration: histogram("trellis_transforms_apply_duration_seconds", "Duration of apply transactions of changed keys, over the instance's transforms.", prometheus.ExponentialBuckets(0.001, 2, 16), inst...),
	}
	return &Metrics{s: s, txns: s.txns.WithLabelValues(""), perTransform: true}
}

// register registers c with reg, or returns the equal collector already
// registered there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if prev, ok := are.ExistingCollector.(C); ok {
				return prev
			}
		}
		panic(err) // a name clash with a foreign collector: a programming error
	}
	return c
}

// ForInstance returns Metrics sharing m's series whose events carry
// trellis_instance=instance. Open calls it with "<database>/<schema>" on
// a Config.Metrics not bound yet.
func (m *Metrics) ForInstance(instance string) *Metrics {
	b := &Metrics{s: m.s, instance: instance, txns: m.s.txns.WithLabelValues(instance), perTransform: m.perTransform,
		totals: newInstanceTotals(m.s, instance)}
	// Counters and enumerations start at 0, so rates and alerts see a
	// series before the first event.
	for _, k := range ErrorKinds() {
		m.s.errors.WithLabelValues(instance, string(k))
	}
	m.s.reconnects.WithLabelValues(instance)
	m.s.standby.WithLabelValues(instance)
	m.s.ready.WithLabelValues(instance)
	return b
}

// Instance is the trellis_instance label m's events carry ("" when not
// bound).
func (m *Metrics) Instance() string { return m.instance }

// InstanceOnly returns Metrics sharing m's series (and, when m is bound,
// its instance) that export only the instance's series: no series per
// transform, whose information stays in the instance's totals
// (trellis_transforms_*) and in `trellis-repl status`. For instances of
// many transforms, where each transform's ~47 series would make /metrics
// large (docs/metrics.md).
func (m *Metrics) InstanceOnly() *Metrics {
	b := *m
	b.perTransform = false
	return &b
}

// PerTransform reports whether m exports series per transform.
func (m *Metrics) PerTransform() bool { return m.perTransform }

// TransactionReceived counts a captured transaction.
func (m *Metrics) TransactionReceived() { m.txns.Inc() }

// PositionsUpdated sets the received and confirmed positions.
func (m *Metrics) PositionsUpdated(received, confirmed uint64) {
	m.s.receivedLSN.WithLabelValues(m.instance).Set(float64(received))
	m.s.confirmedLSN.WithLabelValues(m.instance).Set(float64(confirmed))
}

// SlotRead sets the slot series; a missing slot has no retained WAL, lag
// or safe size, and no wal_status set.
func (m *Metrics) SlotRead(s SlotStats) {
	for _, st := range walStatuses {
		v := 0.0
		if s.Exists && s.WALStatus == st {
			v = 1
		}
		m.s.slotStatus.WithLabelValues(m.instance, st).Set(v)
	}
	m.setOrDelete(m.s.slotRetained, s.Exists && s.RetainedBytes >= 0, s.RetainedBytes)
	m.setOrDelete(m.s.slotLag, s.Exists && s.ConfirmLagBytes >= 0, s.ConfirmLagBytes)
	m.setOrDelete(m.s.slotSafe, s.Exists && s.SafeWALSize >= 0, s.SafeWALSize)
}

// setOrDelete sets the instance's gauge of v to n when ok, else removes
// it: an unknown value is absent, not 0.
func (m *Metrics) setOrDelete(v *prometheus.GaugeVec, ok bool, n int64) {
	if ok {
		v.WithLabelValues(m.instance).Set(float64(n))
	} else {
		v.DeleteLabelValues(m.instance)
	}
}

// CaptureModeChosen sets the capture-mode series; in trigger mode there
// is no slot, so its series are removed.
func (m *Metrics) CaptureModeChosen(mode string) {
	for _, md := range captureModes {
		v := 0.0
		if md == mode {
			v = 1
		}
		m.s.captureMode.WithLabelValues(m.instance, md).Set(v)
	}
	if mode != capture.ModeLogical {
		for _, v := range []*prometheus.GaugeVec{m.s.slotRetained, m.s.slotLag, m.s.slotSafe, m.s.retentionLimit, m.s.retentionOver} {
			v.DeleteLabelValues(m.instance)
		}
		m.s.slotStatus.DeletePartialMatch(prometheus.Labels{instanceLabel: m.instance})
	}
}

// RetentionChecked sets the retained-WAL limit and whether it is passed.
func (m *Metrics) RetentionChecked(r Retention) {
	m.s.retentionLimit.WithLabelValues(m.instance).Set(float64(r.LimitBytes))
	over := 0.0
	if r.OverLimit {
		over = 1
	}
	m.s.retentionOver.WithLabelValues(m.instance).Set(over)
}

// Reconnected counts a reconnect.
func (m *Metrics) Reconnected() { m.s.reconnects.WithLabelValues(m.instance).Inc() }

// StandbyChanged sets the standby gauge.
func (m *Metrics) StandbyChanged(standby bool) {
	v := 0.0
	if standby {
		v = 1
	}
	m.s.standby.WithLabelValues(m.instance).Set(v)
}

// Error counts an error by kind.
func (m *Metrics) Error(kind ErrorKind) { m.s.errors.WithLabelValues(m.instance, string(kind)).Inc() }

// TransformState sets the state series of the transform, and starts its
// counters at 0.
func (m *Metrics) TransformState(transform, state string) {
	m.totals.state(transform, state)
	if !m.perTransform {
		return
	}
	for _, st := range transformStates {
		v := 0.0
		if st == state {
			v = 1
		}
		m.s.state.WithLabelValues(m.instance, transform, st).Set(v)
	}
	for _, c := range []*prometheus.CounterVec{m.s.keysApplied, m.s.rowsWritten, m.s.keysHeldTotal, m.s.applyErrors} {
		c.WithLabelValues(m.instance, transform)
	}
}

// TransformRemoved removes every series of the transform.
func (m *Metrics) TransformRemoved(transform string) {
	m.totals.remove(transform)
	l := prometheus.Labels{instanceLabel: m.instance, "transform": transform}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.s.keysWaiting, m.s.state, m.s.keysHeld, m.s.buildRemain, m.s.applyLag, m.s.keysApplied, m.s.rowsWritten,
		m.s.keysHeldTotal, m.s.applyErrors, m.s.latency, m.s.applyDuration} {
		v.DeletePartialMatch(l)
	}
}

// BatchApplied counts the keys and rows of an apply transaction and, for
// a batch of changed keys, observes its duration.
func (m *Metrics) BatchApplied(transform string, b AppliedBatch) {
	m.totals.batch(b)
	if !m.perTransform {
		return
	}
	m.s.keysApplied.WithLabelValues(m.instance, transform).Add(float64(b.Keys))
	m.s.rowsWritten.WithLabelValues(m.instance, transform).Add(float64(b.Rows))
	if !b.Build {
		m.s.applyDuration.WithLabelValues(m.instance, transform).Observe(b.Duration.Seconds())
	}
}

// ApplyFailed counts a failed apply transaction.
func (m *Metrics) ApplyFailed(transform string) {
	m.totals.applyFailed()
	if !m.perTransform {
		return
	}
	m.s.applyErrors.WithLabelValues(m.instance, transform).Inc()
}

// KeyHeld counts a held key.
func (m *Metrics) KeyHeld(transform string) {
	m.totals.keyHeld()
	if !m.perTransform {
		return
	}
	m.s.keysHeldTotal.WithLabelValues(m.instance, transform).Inc()
}

// HeldKeys sets how many keys the transform holds.
func (m *Metrics) HeldKeys(transform string, n int64) {
	m.totals.setHeld(transform, n)
	if !m.perTransform {
		return
	}
	m.s.keysHeld.WithLabelValues(m.instance, transform).Set(float64(n))
}

// KeysWaiting sets the transform's backlog.
func (m *Metrics) KeysWaiting(transform string, n int64) {
	m.totals.setWaiting(transform, n)
	if !m.perTransform {
		return
	}
	m.s.keysWaiting.WithLabelValues(m.instance, transform).Set(float64(n))
}

// BuildRowsRemaining sets the rows the build still has to read.
func (m *Metrics) BuildRowsRemaining(transform string, n int64) {
	m.totals.setBuildRemain(transform, n)
	if !m.perTransform {
		return
	}
	m.s.buildRemain.WithLabelValues(m.instance, transform).Set(float64(n))
}

// LatencyObserved observes an end-to-end latency sample.
func (m *Metrics) LatencyObserved(transform string, d time.Duration) {
	m.totals.latencyObserved(d)
	if !m.perTransform {
		return
	}
	m.s.latency.WithLabelValues(m.instance, transform).Observe(d.Seconds())
}

// ApplyLag sets the transform's apply lag.
func (m *Metrics) ApplyLag(transform string, d time.Duration) {
	m.totals.lag(transform, d)
	if !m.perTransform {
		return
	}
	m.s.applyLag.WithLabelValues(m.instance, transform).Set(d.Seconds())
}

// ReadinessChanged sets the ready gauge.
func (m *Metrics) ReadinessChanged(ready bool) {
	v := 0.0
	if ready {
		v = 1
	}
	m.s.ready.WithLabelValues(m.instance).Set(v)
}

// SelfCheckAudited counts a periodic self-check by outcome and, when it
// compared (converged or diverged), sets what it found.
func (m *Metrics) SelfCheckAudited(transform, outcome string, divergences int64) {
	m.s.selfCheckRuns.WithLabelValues(m.instance, outcome).Inc()
	if outcome == OutcomeConverged || outcome == OutcomeDiverged {
		m.totals.audited(transform, divergences > 0)
		if m.perTransform {
			m.s.selfCheckDiverged.WithLabelValues(m.instance, transform).Set(float64(divergences))
		}
	}
}

// instanceTotals keeps an instance's totals over its transforms: the
// counters and histograms directly, the gauges from each transform's
// last value (sums kept as they change, so a heartbeat reporting 1,000
// transforms costs 1,000 updates, not 1,000 sums of 1,000). A nil one
// (an unbound Metrics) keeps nothing.
type instanceTotals struct {
	// The instance's children, resolved once: some are counted on every
	// apply.
	applied, rows, heldKeys, errs prometheus.Counter
	latency, applyDuration        prometheus.Observer
	lagG, divergedG               prometheus.Gauge
	inState                       map[string]prometheus.Gauge

	mu                         sync.Mutex
	states                     map[string]string
	waiting, held, buildRemain gaugeSum
	lags                       map[string]time.Duration
	// maxLag is the largest of lags, held by maxLagOf.
	maxLag   time.Duration
	maxLagOf string
	diverged map[string]bool
}

// gaugeSum is a gauge of the sum of per-transform values.
type gaugeSum struct {
	g   prometheus.Gauge
	of  map[string]int64
	sum int64
}

func newGaugeSum(g prometheus.Gauge) gaugeSum { return gaugeSum{g: g, of: map[string]int64{}} }

func newInstanceTotals(s *series, instance string) *instanceTotals {
	t := &instanceTotals{
		applied: s.totalApplied.WithLabelValues(instance), rows: s.totalRows.WithLabelValues(instance),
		heldKeys: s.totalHeldKeys.WithLabelValues(instance), errs: s.totalErrs.WithLabelValues(instance),
		latency: s.totalLatency.WithLabelValues(instance), applyDuration: s.totalApplyDuration.WithLabelValues(instance),
		waiting: newGaugeSum(s.totalWaiting.WithLabelValues(instance)), held: newGaugeSum(s.totalHeld.WithLabelValues(instance)),
		buildRemain: newGaugeSum(s.totalBuildRemain.WithLabelValues(instance)), lagG: s.maxApplyLag.WithLabelValues(instance),
		divergedG: s.divergedTransforms.WithLabelValues(instance), inState: map[string]prometheus.Gauge{},
		states: map[string]string{}, lags: map[string]time.Duration{}, diverged: map[string]bool{},
	}
	for _, st := range transformStates {
		t.inState[st] = s.inState.WithLabelValues(instance, st)
	}
	return t
}

// state records a transform's state.
func (t *instanceTotals) state(transform, state string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.states[transform]; ok {
		if g := t.inState[old]; g != nil {
			g.Dec()
		}
	}
	t.states[transform] = state
	if g := t.inState[state]; g != nil {
		g.Inc()
	}
}

// remove forgets a transform.
func (t *instanceTotals) remove(transform string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.states[transform]; ok {
		if g := t.inState[old]; g != nil {
			g.Dec()
		}
		delete(t.states, transform)
	}
	for _, gs := range []*gaugeSum{&t.waiting, &t.held, &t.buildRemain} {
		gs.sum -= gs.of[transform]
		delete(gs.of, transform)
		gs.g.Set(float64(gs.sum))
	}
	delete(t.lags, transform)
	if t.maxLagOf == transform {
		t.recomputeLag()
	}
	if t.diverged[transform] {
		delete(t.diverged, transform)
		t.divergedG.Set(float64(len(t.diverged)))
	}
}

func (t *instanceTotals) setWaiting(transform string, n int64) {
	if t != nil {
		t.set(&t.waiting, transform, n)
	}
}

func (t *instanceTotals) setHeld(transform string, n int64) {
	if t != nil {
		t.set(&t.held, transform, n)
	}
}

func (t *instanceTotals) setBuildRemain(transform string, n int64) {
	if t != nil {
		t.set(&t.buildRemain, transform, n)
	}
}

// set records a transform's value of one summed gauge.
func (t *instanceTotals) set(sum *gaugeSum, transform string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sum.sum += n - sum.of[transform]
	sum.of[transform] = n
	sum.g.Set(float64(sum.sum))
}

// lag records a transform's apply lag.
func (t *instanceTotals) lag(transform string, d time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lags[transform] = d
	switch {
	case d >= t.maxLag:
		t.maxLag, t.maxLagOf = d, transform
	case transform == t.maxLagOf:
		t.recomputeLag() // the largest fell
	}
	t.lagG.Set(t.maxLag.Seconds())
}

// recomputeLag finds the largest lag again; t.mu is held.
func (t *instanceTotals) recomputeLag() {
	t.maxLag, t.maxLagOf = 0, ""
	for tr, d := range t.lags {
		if d > t.maxLag || t.maxLagOf == "" {
			t.maxLag, t.maxLagOf = d, tr
		}
	}
	t.lagG.Set(t.maxLag.Seconds())
}

// audited records whether a transform's last audit found divergences.
func (t *instanceTotals) audited(transform string, diverged bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if diverged {
		t.diverged[transform] = true
	} else {
		delete(t.diverged, transform)
	}
	t.divergedG.Set(float64(len(t.diverged)))
}

func (t *instanceTotals) batch(b AppliedBatch) {
	if t == nil {
		return
	}
	t.applied.Add(float64(b.Keys))
	t.rows.Add(float64(b.Rows))
	if !b.Build {
		t.applyDuration.Observe(b.Duration.Seconds())
	}
}

func (t *instanceTotals) applyFailed() {
	if t != nil {
		t.errs.Inc()
	}
}

func (t *instanceTotals) keyHeld() {
	if t != nil {
		t.heldKeys.Inc()
	}
}

func (t *instanceTotals) latencyObserved(d time.Duration) {
	if t != nil {
		t.latency.Observe(d.Seconds())
	}
}
