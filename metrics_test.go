package trellis_test

// The Prometheus Observer and docs/metrics.md: every series the runner can
// export is documented there with its type and labels, and every series
// documented exists (TestMetricsDocumented); the series follow the events
// (TestMetricsObserver). Neither needs PostgreSQL.

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	trellis "github.com/trellis-repl/trellis-repl"
)

var _ trellis.Observer = (*trellis.Metrics)(nil)

// driveAll reports one of every event, so every series exists.
func driveAll(o trellis.Observer) {
	o.TransactionReceived()
	o.PositionsUpdated(2000, 1000)
	o.SlotRead(trellis.SlotStats{Exists: true, RetainedBytes: 4096, ConfirmLagBytes: 1024, WALStatus: "reserved", SafeWALSize: 1 << 20})
	o.CaptureModeChosen(trellis.CaptureLogical)
	o.RetentionChecked(trellis.Retention{RetainedBytes: 4096, LimitBytes: 1 << 30})
	o.Reconnected()
	o.StandbyChanged(false)
	for _, k := range trellis.ErrorKinds() {
		o.Error(k)
	}
	o.TransformState("t1", "live")
	o.BatchApplied("t1", trellis.AppliedBatch{Keys: 3, Rows: 4, Duration: 5 * time.Millisecond})
	o.BatchApplied("t1", trellis.AppliedBatch{Keys: 10, Rows: 10, Duration: time.Millisecond, Build: true})
	o.ApplyFailed("t1")
	o.KeyHeld("t1")
	o.HeldKeys("t1", 1)
	o.KeysWaiting("t1", 7)
	o.BuildRowsRemaining("t1", 0)
	o.LatencyObserved("t1", 30*time.Millisecond)
	o.ApplyLag("t1", 2*time.Second)
	o.ReadinessChanged(true)
	for _, out := range []string{trellis.OutcomeConverged, trellis.OutcomeDiverged, trellis.OutcomeNotCaughtUp, trellis.OutcomeNotLive} {
		o.SelfCheckAudited("t1", out, 0)
	}
}

// family is one exported metric family: its type, label names and the
// values each label took.
type family struct {
	typ    string
	labels map[string]map[string]bool
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]family {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{typ: strings.ToLower(mf.GetType().String()), labels: map[string]map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if f.labels[l.GetName()] == nil {
					f.labels[l.GetName()] = map[string]bool{}
				}
				f.labels[l.GetName()][l.GetValue()] = true
			}
		}
		out[mf.GetName()] = f
	}
	return out
}

// documented is a series as docs/metrics.md lists it: its type, and per
// label the values it lists (none for a free label).
type documented struct {
	typ    string
	labels map[string][]string
}

var backticked = regexp.MustCompile("`([^`]+)`")

func readDocs(t *testing.T) map[string]documented {
	t.Helper()
	b, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]documented{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `trellis_") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "¦"), "|")
		if len(cells) < 6 {
			t.Fatalf("docs/metrics.md: a row needs name, type, labels, meaning, alert: %q", line)
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		d := documented{typ: strings.TrimSpace(cells[2]), labels: map[string][]string{}}
		for _, part := range strings.Split(cells[3], ", ") {
			names, values, _ := strings.Cut(part, "=")
			m := backticked.FindStringSubmatch(names)
			if m == nil {
				t.Fatalf("docs/metrics.md: %s: unreadable label %q", name, part)
			}
			var vals []string
			for _, v := range backticked.FindAllStringSubmatch(values, -1) {
				vals = append(vals, v[1])
			}
			d.labels[m[1]] = vals
		}
		if _, dup := out[name]; dup {
			t.Fatalf("docs/metrics.md lists %s twice", name)
		}
		out[name] = d
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md lists no series")
	}
	return out
}

// TestMetricsDocumented: the series exported after every event are
// exactly those docs/metrics.md lists, with the documented types, labels
// and enumerated values.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	driveAll(trellis.NewMetrics(reg).ForInstance("db/trellis"))
	got := gather(t, reg)
	docs := readDocs(t)
	for name, f := range got {
		if !strings.HasPrefix(name, "trellis_") {
			continue
		}
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s (%s) is exported but not documented in docs/metrics.md", name, f.typ)
			continue
		}
		if d.typ != f.typ {
			t.Errorf("%s: documented as %s, is a %s", name, d.typ, f.typ)
		}
		var gotLabels, docLabels []string
		for l := range f.labels {
			gotLabels = append(gotLabels, l)
		}
		for l := range d.labels {
			docLabels = append(docLabels, l)
		}
		sort.Strings(gotLabels)
		sort.Strings(docLabels)
		if !slices.Equal(gotLabels, docLabels) {
			t.Errorf("%s: labels %v, documented %v", name, gotLabels, docLabels)
		}
		if !f.labels["trellis_instance"]["db/trellis"] {
			t.Errorf("%s lacks trellis_instance=\"db/trellis\": %v", name, f.labels)
		}
		for l, vals := range d.labels {
			if len(vals) == 0 {
				continue
			}
			var seen []string
			for v := range f.labels[l] {
				seen = append(seen, v)
			}
			sort.Strings(seen)
			want := slices.Clone(vals)
			sort.Strings(want)
			if !slices.Equal(seen, want) {
				t.Errorf("%s: %s takes %v, documented %v", name, l, seen, want)
			}
		}
	}
	for name := range docs {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/metrics.md documents %s, which is not exported", name)
		}
	}
}

// value is the value of the series of name whose labels include want, and
// whether it exists (a histogram's is its sample count).
func value(reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, name, val string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == val {
			return true
		}
	}
	return false
}

// TestMetricsObserver: the series follow the events: enumerations flip,
// unknown values are absent, a dropped transform's series go, and two
// instances on one registry keep theirs apart.
func TestMetricsObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := trellis.NewMetrics(reg).ForInstance("db/a")
	b := trellis.NewMetrics(reg).ForInstance("db/b") // shares the series
	driveAll(a)
	inA := map[string]string{"trellis_instance": "db/a"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"trellis_instance": "db/a"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	expect := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if v, ok := value(reg, name, labels); !ok || v != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
		}
	}
	absent := func(name string, labels map[string]string) {
		t.Helper()
		if v, ok := value(reg, name, labels); ok {
			t.Errorf("%s%v = %v, want absent", name, labels, v)
		}
	}
	expect("trellis_transform_state", with("transform", "t1", "state", "live"), 1)
	expect("trellis_transform_state", with("transform", "t1", "state", "paused"), 0)
	a.TransformState("t1", "paused")
	expect("trellis_transform_state", with("transform", "t1", "state", "live"), 0)
	expect("trellis_transform_state", with("transform", "t1", "state", "paused"), 1)
	expect("trellis_transform_keys_applied_total", with("transform", "t1"), 13)
	expect("trellis_transform_apply_duration_seconds", with("transform", "t1"), 1) // the build step is not timed
	expect("trellis_slot_safe_wal_size_bytes", inA, 1<<20)

	// A missing slot: no wal_status, no sizes.
	a.SlotRead(trellis.SlotStats{})
	for _, st := range []string{"reserved", "extended", "unreserved", "lost"} {
		expect("trellis_slot_wal_status", with("status", st), 0)
	}
	absent("trellis_slot_retained_wal_bytes", inA)
	absent("trellis_slot_safe_wal_size_bytes", inA)
	// Unbounded retention: no safe size.
	a.SlotRead(trellis.SlotStats{Exists: true, RetainedBytes: 1, ConfirmLagBytes: 1, WALStatus: "extended", SafeWALSize: -1})
	expect("trellis_slot_wal_status", with("status", "extended"), 1)
	absent("trellis_slot_safe_wal_size_bytes", inA)
	a.RetentionChecked(trellis.Retention{RetainedBytes: 2 << 30, LimitBytes: 1 << 30, OverLimit: true})
	expect("trellis_slot_retained_wal_over_limit", inA, 1)

	// Trigger capture has no slot.
	a.CaptureModeChosen(trellis.CaptureTrigger)
	expect("trellis_capture_mode", with("mode", "trigger"), 1)
	expect("trellis_capture_mode", with("mode", "logical"), 0)
	for _, n := range []string{"trellis_slot_retained_wal_bytes", "trellis_slot_confirm_lag_bytes", "trellis_slot_wal_status",
		"trellis_slot_retained_wal_limit_bytes", "trellis_slot_retained_wal_over_limit"} {
		absent(n, inA)
	}

	b.TransformState("t1", "live")
	a.TransformRemoved("t1")
	absent("trellis_transform_state", with("transform", "t1"))
	absent("trellis_transform_latency_seconds", with("transform", "t1"))
	if v, ok := value(reg, "trellis_transform_state", map[string]string{"trellis_instance": "db/b", "transform": "t1", "state": "live"}); !ok || v != 1 {
		t.Errorf("instance b's transform t1 lost its state with a's: %v %v", v, ok)
	}
	expect("trellis_errors_total", with("kind", "halt"), 1)
	if v, ok := value(reg, "trellis_errors_total", map[string]string{"trellis_instance": "db/b", "kind": "capture"}); !ok || v != 0 {
		t.Errorf("instance b's errors start at 0: %v %v", v, ok)
	}
}

// exposed counts the series reg exposes the way /metrics writes them (a
// histogram's buckets, +Inf, _sum and _count each a line): all trellis_
// series, and those of transform tr.
func exposed(t *testing.T, reg *prometheus.Registry, tr string) (all, of int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "trellis_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			n := 1
			if h := m.GetHistogram(); h != nil {
				n = len(h.GetBucket()) + 3
			}
			all += n
			if hasLabel(m, "transform", tr) {
				of += n
			}
		}
	}
	return all, of
}

// TestMetricsInstanceOnly: each transform adds the series docs/metrics.md
// counts (47, 48 with self-check audits) and the instance's totals
// follow its transforms; InstanceOnly (run --metrics-per-transform=false)
// keeps the same totals and no series per transform, so its series do not
// grow with the transforms.
func TestMetricsInstanceOnly(t *testing.T) {
	// An unbound Metrics keeps no totals, and takes every event.
	driveAll(trellis.NewMetrics(prometheus.NewRegistry()))
	driveAll(trellis.NewMetrics(prometheus.NewRegistry()).InstanceOnly())
	for _, only := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		m := trellis.NewMetrics(reg).ForInstance("db/trellis")
		if only {
			m = m.InstanceOnly()
		}
		if m.PerTransform() == only {
			t.Fatalf("PerTransform() = %v with InstanceOnly %v", m.PerTransform(), only)
		}
		drive := func(tr, state string, waiting int64, lag time.Duration) {
			m.TransformState(tr, state)
			m.BatchApplied(tr, trellis.AppliedBatch{Keys: 3, Rows: 4, Duration: 5 * time.Millisecond})
			m.BatchApplied(tr, trellis.AppliedBatch{Keys: 10, Rows: 10, Duration: time.Millisecond, Build: true})
			m.ApplyFailed(tr)
			m.KeyHeld(tr)
			m.HeldKeys(tr, 1)
			m.KeysWaiting(tr, waiting)
			m.BuildRowsRemaining(tr, 0)
			m.LatencyObserved(tr, 30*time.Millisecond)
			m.ApplyLag(tr, lag)
		}
		drive("t1", "live", 7, 2*time.Second)
		one, of1 := exposed(t, reg, "t1")
		drive("t2", "live", 5, 5*time.Second)
		drive("t3", "paused", 0, time.Second)
		three, of3 := exposed(t, reg, "t3")
		perTransform := (three - one) / 2
		t.Logf("instance only %v: %d series with one transform, %d with three; %d of t3's", only, one, three, of3)
		want := 47
		if only {
			want = 0
		}
		if perTransform != want || of1 != want || of3 != want {
			t.Errorf("instance only %v: each transform adds %d series (t1 %d, t3 %d), want %d (docs/metrics.md)", only, perTransform, of1, of3, want)
		}
		m.SelfCheckAudited("t3", trellis.OutcomeDiverged, 2)
		if _, of := exposed(t, reg, "t3"); !only && of != 48 {
			t.Errorf("t3 audited: %d series, want 48", of)
		}

		in := func(kv ...string) map[string]string {
			l := map[string]string{"trellis_instance": "db/trellis"}
			for i := 0; i < len(kv); i += 2 {
				l[kv[i]] = kv[i+1]
			}
			return l
		}
		expect := func(name string, labels map[string]string, want float64) {
			t.Helper()
			if v, ok := value(reg, name, labels); !ok || v != want {
				t.Errorf("instance only %v: %s%v = %v (present %v), want %v", only, name, labels, v, ok, want)
			}
		}
		expect("trellis_transforms_keys_waiting", in(), 12)
		expect("trellis_transforms_keys_held", in(), 3)
		expect("trellis_transforms_max_apply_lag_seconds", in(), 5)
		expect("trellis_transforms_in_state", in("state", "live"), 2)
		expect("trellis_transforms_in_state", in("state", "paused"), 1)
		expect("trellis_transforms_in_state", in("state", "quarantined"), 0)
		expect("trellis_transforms_keys_applied_total", in(), 39)
		expect("trellis_transforms_rows_written_total", in(), 42)
		expect("trellis_transforms_apply_errors_total", in(), 3)
		expect("trellis_transforms_keys_held_total", in(), 3)
		expect("trellis_transforms_latency_seconds", in(), 3)
		expect("trellis_transforms_apply_duration_seconds", in(), 3) // builds are not timed
		expect("trellis_selfcheck_diverged_transforms", in(), 1)

		// The largest lag falls; a transform goes; a state changes.
		m.ApplyLag("t2", 0)
		expect("trellis_transforms_max_apply_lag_seconds", in(), 2)
		m.TransformRemoved("t1")
		expect("trellis_transforms_max_apply_lag_seconds", in(), 1)
		expect("trellis_transforms_keys_waiting", in(), 5)
		expect("trellis_transforms_in_state", in("state", "live"), 1)
		m.TransformState("t3", "live")
		expect("trellis_transforms_in_state", in("state", "live"), 2)
		expect("trellis_transforms_in_state", in("state", "paused"), 0)
		m.SelfCheckAudited("t3", trellis.OutcomeConverged, 0)
		expect("trellis_selfcheck_diverged_transforms", in(), 0)
		if _, of := exposed(t, reg, "t1"); of != 0 {
			t.Errorf("instance only %v: removed t1 keeps %d series", only, of)
		}
	}
}
