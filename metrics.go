package trellis

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics Run maintains. Create them with
// NewMetrics and register them wherever the program serves metrics.
type Metrics struct {
	ReceivedLSN   prometheus.Gauge
	ConfirmedLSN  prometheus.Gauge
	SlotLagBytes  prometheus.Gauge
	RetainedBytes prometheus.Gauge
	DirtyKeys     *prometheus.GaugeVec
	AppliedKeys   *prometheus.CounterVec
	RowsWritten   *prometheus.CounterVec
	ApplySeconds  *prometheus.HistogramVec
	ApplyErrors   *prometheus.CounterVec
	Transactions  prometheus.Counter
	Reconnects    prometheus.Counter
	Live          *prometheus.GaugeVec
	// KeysHeld counts keys held in quarantine (ADR 0013).
	KeysHeld *prometheus.CounterVec
	// Standby is 1 while Run waits for another runner to let go of the
	// instance.
	Standby prometheus.Gauge

	selfCheck selfCheckMetrics // metrics_selfcheck.go
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ReceivedLSN:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_received_lsn", Help: "Newest slot position durable in the local store."}),
		ConfirmedLSN:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_confirmed_lsn", Help: "Position confirmed to the replication slot."}),
		SlotLagBytes:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_slot_confirm_lag_bytes", Help: "Bytes of WAL between the server's position and the slot's confirmed position."}),
		RetainedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_slot_retained_wal_bytes", Help: "Bytes of WAL the slot makes the server retain."}),
		DirtyKeys:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellis_transform_dirty_keys", Help: "Keys waiting to be re-derived."}, []string{"transform"}),
		AppliedKeys:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_keys_applied_total", Help: "Keys re-derived."}, []string{"transform"}),
		RowsWritten:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_rows_written_total", Help: "Target and ledger rows written."}, []string{"transform"}),
		ApplySeconds:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trellis_transform_apply_seconds", Help: "Duration of apply transactions.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"transform"}),
		ApplyErrors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_apply_errors_total", Help: "Failed apply transactions."}, []string{"transform"}),
		Transactions:  prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_slot_transactions_total", Help: "Committed transactions received from the slot."}),
		Reconnects:    prometheus.NewCounter(prometheus.CounterOpts{Name: "trellis_runner_restarts_total", Help: "Capture restarts after errors: a slot recreated, a run restarted after losing its connection."}),
		Live:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellis_transform_live", Help: "1 when the transform is live."}, []string{"transform"}),
		KeysHeld:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_transform_keys_held_total", Help: "Keys held in quarantine after their re-derive kept failing on row data."}, []string{"transform"}),
		Standby:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "trellis_runner_standby", Help: "1 while waiting as a standby for the runner that holds the instance."}),
	}
	m.selfCheck = newSelfCheckMetrics(reg)
	if reg != nil {
		reg.MustRegister(m.ReceivedLSN, m.ConfirmedLSN, m.SlotLagBytes, m.RetainedBytes, m.DirtyKeys, m.AppliedKeys,
			m.RowsWritten, m.ApplySeconds, m.ApplyErrors, m.Transactions, m.Reconnects, m.Live, m.KeysHeld, m.Standby)
	}
	return m
}
