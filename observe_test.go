package trellis_test

// The operations surface against a real server (ADR 0017): /metrics
// scraped during a workload shows plausible values, the lags grow while
// the runner is stopped and fall once it caught up, the state series
// follow PAUSE and RESUME, readiness lists its checks, and status shows
// the retention guard's reading.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	trellis "github.com/trellis-repl/trellis-repl"
)

// scraped is one /metrics scrape: series text ("name{a="x",b="y"}", labels
// sorted as the exposition writes them) to value.
type scraped map[string]float64

// scrape reads the text exposition at url.
func scrape(t *testing.T, url string) scraped {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	out := scraped{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("unreadable sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// get is the value of the series of name with exactly labels (name=value
// pairs, any order), and whether it is there.
func (s scraped) get(name string, labels ...string) (float64, bool) {
	pairs := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	for key, v := range s {
		n, rest, _ := strings.Cut(key, "{")
		if n != name {
			continue
		}
		have := strings.Split(strings.TrimSuffix(rest, "}"), ",")
		if len(have) != len(pairs) {
			continue
		}
		match := true
		for _, p := range pairs {
			match = match && contains(have, p)
		}
		if match {
			return v, true
		}
	}
	return 0, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// metricsEnv is an env whose runner exports its metrics on an HTTP
// server, as `run --metrics-addr` does.
type metricsEnv struct {
	*env
	url  string
	inst string // the trellis_instance label
}

func newMetricsEnv(t *testing.T, cfg trellis.Config) *metricsEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = trellis.NewMetrics(reg)
	e := &metricsEnv{env: newEnv(t, cfg)}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/metrics"
	var db string
	if err := e.conn.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	e.inst = db + "/" + e.tr.Schema()
	return e
}

// value reads one series of the instance from a fresh scrape; labels
// besides trellis_instance as name, value pairs.
func (e *metricsEnv) value(name string, labels ...string) (float64, bool) {
	e.t.Helper()
	return scrape(e.t, e.url).get(name, append([]string{"trellis_instance", e.inst}, labels...)...)
}

// eventually scrapes until cond holds, failing after 20 s with what it
// last saw.
func (e *metricsEnv) eventually(what string, cond func(s scraped) (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, saw := cond(scrape(e.t, e.url))
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %s; last %s", what, waitTimeout, saw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// of is s.get with the instance label added.
func (e *metricsEnv) of(s scraped, name string, labels ...string) (float64, bool) {
	return s.get(name, append([]string{"trellis_instance", e.inst}, labels...)...)
}

// stateIs reports whether transform's state series say state (1 for it,
// 0 for the others).
func (e *metricsEnv) stateIs(s scraped, transform, state string) (bool, string) {
	var saw []string
	ok := true
	for _, st := range []string{"waiting_to_backfill", "backfilling", "live", "paused", "quarantined"} {
		v, present := e.of(s, "trellis_transform_state", "transform", transform, "state", st)
		saw = append(saw, fmt.Sprintf("%s=%v(%v)", st, v, present))
		want := 0.0
		if st == state {
			want = 1
		}
		ok = ok && present && v == want
	}
	return ok, strings.Join(saw, " ")
}

// TestMetricsScrape: scraped during a workload, the series are there with
// plausible values; confirm lag and apply lag grow while the runner is
// stopped (and its restart cannot apply) and fall once it has caught up;
// the state series flip on PAUSE and RESUME.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	const limit = 1 << 40
	// --confirm=applied: the slot is confirmed only as far as every
	// transform applied, so a transform that cannot apply holds the
	// confirm lag up.
	e := newMetricsEnv(t, trellis.Config{Capture: trellis.CaptureLogical, Confirm: trellis.ConfirmApplied, MaxRetainedWAL: limit,
		CoalesceWindow: 5 * time.Millisecond})
	ctx := context.Background()
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, grp int NOT NULL, v int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g % 5, g FROM generate_series(1, 500) g`)
	e.apply(`CREATE TRANSFORM item_rows AS SELECT id, v * 2 AS v2 FROM items;
		CREATE TRANSFORM item_groups AS SELECT grp, count(*) AS n, sum(v) AS total FROM items GROUP BY grp`)
	e.start()
	e.converge("after build")
	for i := 0; i < 30; i++ {
		e.exec(`UPDATE items SET v = v + 1 WHERE id = $1`, i+1)
	}
	e.converge("after the workload")

	// Gauges come with the heartbeat (every 500 ms), states with the
	// reconcile that follows a change.
	var s scraped
	e.eventually("the heartbeat's series", func(sc scraped) (bool, string) {
		s = sc
		_, held := e.of(sc, "trellis_transform_keys_held", "transform", "item_rows")
		_, slot := e.of(sc, "trellis_slot_retained_wal_bytes")
		live, states := e.stateIs(sc, "item_rows", "live")
		return held && slot && live, fmt.Sprintf("held keys present %v, retained WAL present %v, states %s", held, slot, states)
	})
	for _, c := range []struct {
		name   string
		labels []string
		ok     func(float64) bool
		want   string
	}{
		{"trellis_capture_mode", []string{"mode", "logical"}, eq(1), "1"},
		{"trellis_capture_mode", []string{"mode", "trigger"}, eq(0), "0"},
		{"trellis_capture_transactions_total", nil, atLeast(30), ">= 30"},
		{"trellis_received_lsn_bytes", nil, atLeast(1), "> 0"},
		{"trellis_confirmed_lsn_bytes", nil, atLeast(1), "> 0"},
		{"trellis_slot_retained_wal_bytes", nil, atLeast(1), "> 0"},
		{"trellis_slot_confirm_lag_bytes", nil, atLeast(0), ">= 0"},
		{"trellis_slot_wal_status", []string{"status", "lost"}, eq(0), "0"},
		{"trellis_slot_retained_wal_limit_bytes", nil, eq(limit), fmt.Sprint(limit)},
		{"trellis_slot_retained_wal_over_limit", nil, eq(0), "0"},
		{"trellis_runner_standby", nil, eq(0), "0"},
		{"trellis_errors_total", []string{"kind", "halt"}, eq(0), "0"},
		{"trellis_transform_keys_applied_total", []string{"transform", "item_rows"}, atLeast(530), ">= 530 (500 built, 30 changed)"},
		{"trellis_transform_rows_written_total", []string{"transform", "item_rows"}, atLeast(530), ">= 530"},
		{"trellis_transform_latency_seconds_count", []string{"transform", "item_rows"}, atLeast(1), "> 0"},
		{"trellis_transform_latency_seconds_count", []string{"transform", "item_groups"}, atLeast(1), "> 0"},
		{"trellis_transform_apply_duration_seconds_count", []string{"transform", "item_rows"}, atLeast(1), "> 0"},
		{"trellis_transform_build_rows_remaining", []string{"transform", "item_rows"}, eq(0), "0"},
		{"trellis_transform_keys_held", []string{"transform", "item_rows"}, eq(0), "0"},
		{"trellis_transform_apply_errors_total", []string{"transform", "item_rows"}, eq(0), "0"},
	} {
		v, ok := e.of(s, c.name, c.labels...)
		if !ok || !c.ok(v) {
			t.Errorf("%s%v = %v (present %v), want %s", c.name, c.labels, v, ok, c.want)
		}
	}
	// A live runner exports every documented series; the safe WAL size
	// only where the server bounds retention, which this one does not, and
	// the self-check audit's only with --self-check-every (selfcheck_test.go).
	families := map[string]bool{}
	for key := range s {
		name, _, _ := strings.Cut(key, "{")
		families[strings.TrimSuffix(name, "_count")] = true
	}
	for name, d := range readDocs(t) {
		if !families[name] && name != "trellis_slot_safe_wal_size_bytes" && !strings.HasPrefix(name, "trellis_selfcheck_") {
			t.Errorf("documented %s %s is not exported by a running runner", d.typ, name)
		}
	}
	if recv, _ := e.of(s, "trellis_received_lsn_bytes"); recv < mustOf(e, s, "trellis_confirmed_lsn_bytes") {
		t.Errorf("received position %v is behind the confirmed one", recv)
	}
	if v, ok := e.of(s, "trellis_slot_wal_status", "status", "reserved"); !ok || v != 1 {
		if v2, _ := e.of(s, "trellis_slot_wal_status", "status", "extended"); v2 != 1 {
			t.Errorf("wal_status: neither reserved nor extended is 1")
		}
	}
	e.eventually("keys waiting reported as 0", func(s scraped) (bool, string) {
		v, ok := e.of(s, "trellis_transform_keys_waiting", "transform", "item_groups")
		return ok && v == 0, fmt.Sprint(v, ok)
	})

	// Status shows the retention guard's reading; readiness lists its checks.
	st, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := st[0].Runner.Retention; r == nil || r.LimitBytes != limit || r.OverLimit || r.RetainedBytes <= 0 || r.Since != nil {
		t.Errorf("status runner.retention = %+v, want the limit, not over, some bytes retained", r)
	}
	rd := e.tr.Readiness()
	if !rd.Ready || len(rd.Checks) != 5 {
		t.Errorf("readiness of a running runner: %+v", rd)
	}

	// The runner stops; changes committed meanwhile wait in the slot. The
	// restart cannot apply item_rows (its target is locked), so the lags
	// are still visible, and growing, after it received them.
	e.stop()
	stoppedAt := time.Now()
	walAt := func() float64 {
		var lsn float64
		if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	from := walAt()
	for i := 0; i < 30; i++ {
		e.exec(`UPDATE items SET v = v + 1 WHERE id = $1`, 100+i)
	}
	e.exec(`INSERT INTO items SELECT g, g % 5, g FROM generate_series(1001, 1400) g`)
	// item_rows cannot confirm past what it applied before the stop, so
	// the confirm lag covers at least what was written since.
	written := walAt() - from
	time.Sleep(time.Second)
	lockConn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close(ctx)
	lock, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE item_rows IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	e.start()
	var lag1, confirmLag float64
	e.eventually("apply and confirm lag after the restart", func(s scraped) (bool, string) {
		lag1, _ = e.of(s, "trellis_transform_apply_lag_seconds", "transform", "item_rows")
		confirmLag, _ = e.of(s, "trellis_slot_confirm_lag_bytes")
		return lag1 >= 1 && confirmLag >= written, fmt.Sprintf("apply lag %vs, confirm lag %v bytes (written while stopped %v)", lag1, confirmLag, written)
	})
	time.Sleep(700 * time.Millisecond)
	lag2, _ := e.value("trellis_transform_apply_lag_seconds", "transform", "item_rows")
	if lag2 <= lag1 || lag2 > time.Since(stoppedAt).Seconds()+1 {
		t.Errorf("apply lag %vs then %vs, want it growing and no older than the stop (%v ago)", lag1, lag2, time.Since(stoppedAt))
	}
	if g, _ := e.value("trellis_transform_apply_lag_seconds", "transform", "item_groups"); g >= lag2 {
		t.Errorf("item_groups, not blocked, lags %vs, as much as the blocked item_rows (%vs)", g, lag2)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.converge("after the restart")
	e.eventually("lags fall once caught up", func(s scraped) (bool, string) {
		lag, _ := e.of(s, "trellis_transform_apply_lag_seconds", "transform", "item_rows")
		cl, _ := e.of(s, "trellis_slot_confirm_lag_bytes")
		return lag == 0 && cl < confirmLag, fmt.Sprintf("apply lag %vs, confirm lag %v bytes (peak %v)", lag, cl, confirmLag)
	})
	if n, _ := e.value("trellis_transform_latency_seconds_bucket", "transform", "item_rows", "le", "1"); n == mustValue(e, "trellis_transform_latency_seconds_count", "transform", "item_rows") {
		t.Errorf("no latency sample above 1 s, though changes waited for the restart")
	}

	// PAUSE and RESUME, from the catalog as any process would.
	e.apply(`PAUSE TRANSFORM item_groups`)
	e.eventually("item_groups paused", func(s scraped) (bool, string) { return e.stateIs(s, "item_groups", "paused") })
	e.apply(`RESUME TRANSFORM item_groups`)
	e.eventually("item_groups live again", func(s scraped) (bool, string) { return e.stateIs(s, "item_groups", "live") })
	e.converge("after RESUME")
}

func eq(want float64) func(float64) bool     { return func(v float64) bool { return v == want } }
func atLeast(min float64) func(float64) bool { return func(v float64) bool { return v >= min } }

func mustOf(e *metricsEnv, s scraped, name string, labels ...string) float64 {
	e.t.Helper()
	v, ok := e.of(s, name, labels...)
	if !ok {
		e.t.Fatalf("%s%v is not exported", name, labels)
	}
	return v
}

func mustValue(e *metricsEnv, name string, labels ...string) float64 {
	e.t.Helper()
	v, ok := e.value(name, labels...)
	if !ok {
		e.t.Fatalf("%s%v is not exported", name, labels)
	}
	return v
}

// TestMetricsTrigger: in trigger capture the latency is timed from the
// drain, the runner is ready while the drain works, and there are no slot
// series.
func TestMetricsTrigger(t *testing.T) {
	t.Parallel()
	e := newMetricsEnv(t, trellis.Config{Capture: trellis.CaptureTrigger, MaxRetainedWAL: 1 << 30, CoalesceWindow: 5 * time.Millisecond})
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	e.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 100) g`)
	e.apply(`CREATE TRANSFORM item_rows AS SELECT id, v + 1 AS v1 FROM items`)
	e.start()
	e.converge("after build")
	for i := 0; i < 10; i++ {
		e.exec(`UPDATE items SET v = v + 1 WHERE id = $1`, i+1)
	}
	e.converge("after the workload")
	e.eventually("trigger capture's series", func(s scraped) (bool, string) {
		mode, _ := e.of(s, "trellis_capture_mode", "mode", "trigger")
		n, _ := e.of(s, "trellis_transform_latency_seconds_count", "transform", "item_rows")
		live, states := e.stateIs(s, "item_rows", "live")
		_, lag := e.of(s, "trellis_transform_apply_lag_seconds", "transform", "item_rows")
		return mode == 1 && n > 0 && live && lag, fmt.Sprintf("mode trigger %v, latency samples %v, states %s, apply lag present %v", mode, n, states, lag)
	})
	s := scrape(t, e.url)
	for _, n := range []string{"trellis_slot_retained_wal_bytes", "trellis_slot_confirm_lag_bytes", "trellis_slot_retained_wal_limit_bytes", "trellis_slot_retained_wal_over_limit"} {
		if v, ok := e.of(s, n); ok {
			t.Errorf("%s = %v in trigger capture, want absent", n, v)
		}
	}
	if rd := e.tr.Readiness(); !rd.Ready {
		t.Errorf("trigger capture draining, not ready: %+v", rd)
	}
	st, err := e.tr.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Runner.Retention != nil {
		t.Errorf("retention %+v without a slot, want none", st[0].Runner.Retention)
	}
}
