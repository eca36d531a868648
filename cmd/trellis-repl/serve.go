package main

// The HTTP surface of `run --metrics-addr`: Prometheus metrics, liveness
// and readiness (ADR 0017 §4), and optionally Go's profiler.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	trellis "github.com/trellis-repl/trellis-repl"
)

// readinessSource is what /readyz reports: *trellis.Trellis.
type readinessSource interface {
	Readiness() trellis.Readiness
}

// newMux serves /metrics from reg, /healthz (the process runs), /readyz
// (rs is the active runner with every check passing: 200, else 503; the
// JSON body lists each check) and, with withPprof, /debug/pprof/.
func newMux(reg prometheus.Gatherer, rs readinessSource, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		respondJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		rd := rs.Readiness()
		code := http.StatusOK
		if !rd.Ready {
			code = http.StatusServiceUnavailable
		}
		respondJSON(w, code, rd)
	})
	return mux
}

// respondJSON writes v as the JSON body of a response with status code.
func respondJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// serve listens on addr and serves h until the returned stop is called.
func serve(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &trellis.Error{Code: trellis.CodeUnavailable, Msg: fmt.Sprintf("cannot listen on --metrics-addr %s: %v", addr, err)}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at stop
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}
