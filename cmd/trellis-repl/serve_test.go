package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	trellis "github.com/trellis-repl/trellis-repl"
)

// fixedReadiness is a readinessSource that reports rd.
type fixedReadiness struct{ rd trellis.Readiness }

func (f *fixedReadiness) Readiness() trellis.Readiness { return f.rd }

// TestServeMux: /healthz says the process runs; /readyz is 200 or 503 with
// the Readiness as JSON, each check with its reason; /metrics serves the
// registry; the profiler only when asked for.
func TestServeMux(t *testing.T) {
	reg := prometheus.NewRegistry()
	trellis.NewMetrics(reg).ForInstance("db/trellis").Reconnected()
	rs := &fixedReadiness{rd: trellis.Readiness{Ready: true, State: trellis.RunnerActive,
		Checks: []trellis.ReadinessCheck{{Name: trellis.CheckActiveRunner, OK: true}}}}
	srv := httptest.NewServer(newMux(reg, rs, false))
	defer srv.Close()
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, ct, body := get("/healthz"); code != 200 || ct != "application/json" || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("/healthz: %d %s %q", code, ct, body)
	}
	if code, _, body := get("/readyz"); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz when ready: %d %q", code, body)
	}
	rs.rd = trellis.Readiness{State: trellis.RunnerActive, Reason: "logical capture is not streaming from the replication slot: gone",
		Checks: []trellis.ReadinessCheck{{Name: trellis.CheckActiveRunner, OK: true},
			{Name: trellis.CheckCapture, Reason: "logical capture is not streaming from the replication slot: gone"}}}
	code, ct, body := get("/readyz")
	var got trellis.Readiness
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusServiceUnavailable || ct != "application/json" {
		t.Fatalf("/readyz when not ready: %d %s %q (%v)", code, ct, body, err)
	}
	if got.Ready || len(got.Checks) != 2 || got.Checks[1].OK || got.Checks[1].Reason == "" || got.Reason == "" {
		t.Errorf("/readyz body: %+v", got)
	}
	if code, _, body := get("/metrics"); code != 200 || !strings.Contains(body, `trellis_runner_reconnects_total{trellis_instance="db/trellis"} 1`) {
		t.Errorf("/metrics: %d %q", code, body)
	}
	if code, _, _ := get("/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d", code)
	}
}
