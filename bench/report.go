package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes results as an aligned table. End-to-end runs, for live
// engine rows, from the first write to convergence; for catch-up rows, from
// Run's start (the phase written while it was stopped) to convergence; for
// pg_recvlogical, it is the time to drain WAL written beforehand. tail
// (live only) is end-to-end minus writer: how long the engine needed after
// the writer finished. apply s is the time inside the engine's apply
// transactions, applies their number. hand s (re-derive phase) is the
// hand-written set-based SQL re-deriving the same keys in the same database
// (see handwritten.go), hand/apply its ratio to apply s: above 1, the
// engine was faster; hand check is its copy compared with the query. data
// is the dataset (src, or star for join workloads). For dimchange rows
// (join workloads), end-to-end is the median time from a single-row
// dimension change to convergence, refresh s the median REFRESH
// MATERIALIZED VIEW of the same query, refresh/e2e their ratio: above 1,
// the engine was faster.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "data\tshape\tmode\tphase\trows/commit\trows\twriter s\tend-to-end s\ttail s\tapply s\tapplies\trows/s\tpg_recvlogical rows/s\tratio\thand s\thand/apply\trefresh s\trefresh/e2e\tcheck\thand check\t")
	for _, r := range results {
		tail, base, ratio, apply, applies, hand, handRatio, refresh, refreshRatio := "", "", "", "", "", "", "", "", ""
		if r.Mode == ModeLive && r.Phase != PhaseDimChange {
			tail = fmt.Sprintf("%.2f", r.EndToEndSeconds-r.WriterSeconds)
		}
		if r.Shape != BaselineName {
			apply, applies = fmt.Sprintf("%.2f", r.ApplySeconds), fmt.Sprint(r.Applies)
		}
		if r.BaselineRowsPerSecond > 0 {
			base = fmt.Sprintf("%.0f", r.BaselineRowsPerSecond)
			ratio = fmt.Sprintf("%.3f", r.Ratio)
		}
		if r.HandSeconds > 0 {
			hand = fmt.Sprintf("%.3f", r.HandSeconds)
			if r.HandRatio > 0 {
				handRatio = fmt.Sprintf("%.3g", r.HandRatio)
			}
		}
		if r.RefreshSeconds > 0 {
			refresh = fmt.Sprintf("%.3f", r.RefreshSeconds)
			if r.RefreshRatio > 0 {
				refreshRatio = fmt.Sprintf("%.3g", r.RefreshRatio)
			}
		}
		e2e := fmt.Sprintf("%.2f", r.EndToEndSeconds)
		if r.Phase == PhaseDimChange {
			e2e = fmt.Sprintf("%.3f", r.EndToEndSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Data, r.Shape, r.Mode, r.Phase, r.RowsPerCommit, r.Rows, r.WriterSeconds, e2e, tail, apply, applies, r.RowsPerSecond, base, ratio,
			hand, handRatio, refresh, refreshRatio, shortCheck(r.Verified), shortCheck(r.HandVerified))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: write table: %w", err)
	}
	return nil
}

// shortCheck is a self-check verdict without its details (they are in the
// progress log and the JSON).
func shortCheck(v string) string {
	if i := strings.IndexByte(v, ':'); i > 0 {
		return v[:i]
	}
	return v
}
