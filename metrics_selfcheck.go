package trellis

import "github.com/prometheus/client_golang/prometheus"

// selfCheckMetrics are the series of periodic self-checks
// (Config.SelfCheckEvery, ADR 0017 §6).
type selfCheckMetrics struct {
	divergences *prometheus.GaugeVec
	runs        *prometheus.CounterVec
}

func newSelfCheckMetrics(reg prometheus.Registerer) selfCheckMetrics {
	m := selfCheckMetrics{
		divergences: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trellis_selfcheck_divergences",
			Help: "Divergences the last periodic self-check of the transform found in its sample (0: it matched its query)."}, []string{"transform"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_selfcheck_runs_total",
			Help: "Periodic self-checks by outcome: converged, diverged, not_caught_up, not_live."}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.divergences, m.runs)
	}
	return m
}

// ObserveSelfCheck records a periodic self-check of transform: its
// outcome, and when it compared (converged or diverged) what it found.
func (m *Metrics) ObserveSelfCheck(transform, outcome string, divergences int64) {
	if m == nil || m.selfCheck.runs == nil {
		return
	}
	m.selfCheck.runs.WithLabelValues(outcome).Inc()
	if outcome == OutcomeConverged || outcome == OutcomeDiverged {
		m.selfCheck.divergences.WithLabelValues(transform).Set(float64(divergences))
	}
}
