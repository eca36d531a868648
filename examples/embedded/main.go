// Command embedded is a small HTTP service that embeds trellis-repl: at
// start it migrates its table, opens a handle and applies its transforms,
// then runs the pipeline in-process while it serves the derived table,
// the metrics and its readiness; SIGTERM or SIGINT shut it down cleanly
// (the HTTP server drains, Run returns, the handle closes).
//
//	TRELLIS_DATABASE_URL=postgres://… ADDR=127.0.0.1:8080 go run ./examples/embedded
//
//	POST /orders?id=1&customer=7&amount=12.50   write a source row
//	GET  /totals                                 the derived table, as JSON
//	GET  /metrics                                Prometheus metrics (docs/metrics.md)
//	GET  /readyz                                 200 once the pipeline runs
//
// DATA_DIR is where the pipeline keeps its checkpoint store (default
// ./embedded-data).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	trellis "github.com/trellis-repl/trellis-repl"
)

// schema is the service's own table; in a real service its migrations
// create it.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id bigint PRIMARY KEY,
	customer int NOT NULL,
	amount numeric(12,2) NOT NULL)`

// transforms are applied at every start: IF NOT EXISTS makes that safe.
const transforms = `CREATE TRANSFORM IF NOT EXISTS customer_totals AS
	SELECT customer, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY customer`

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, log); err != nil {
		log.Error("embedded service failed", "err", err)
		os.Exit(1)
	}
	log.Info("stopped")
}

// run serves until ctx ends, then shuts down in order.
func run(ctx context.Context, log *slog.Logger) error {
	dsn := trellis.ResolveDSN("")
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the orders table: %w", err)
	}

	reg := prometheus.NewRegistry()
	dataDir := os.Getenv("DATA_DIR")
	if dataDir == "" {
		dataDir = "embedded-data"
	}
	h, err := trellis.Open(ctx, trellis.Config{DSN: dsn, DataDir: dataDir, Logger: log, Metrics: trellis.NewMetrics(reg)})
	if err != nil {
		return err
	}
	defer h.Close() // stops Run if still going
	if _, err := h.Apply(ctx, transforms); err != nil {
		return err
	}

	runDone := make(chan error, 1)
	go func() { runDone <- h.Run(ctx) }()

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	srv := &http.Server{Addr: addr, Handler: routes(db, h, reg), ReadHeaderTimeout: 5 * time.Second}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.ListenAndServe() }()
	log.Info("serving", "addr", addr)

	select {
	case <-ctx.Done():
	case err := <-srvDone:
		return err
	case err := <-runDone:
		return fmt.Errorf("the pipeline stopped: %w", err)
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-runDone; err != nil { // ctx ended: Run returns nil
		return err
	}
	return nil
}

// routes are the service's endpoints.
func routes(db *pgxpool.Pool, h *trellis.Trellis, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.Readiness().Ready {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		_, err := db.Exec(r.Context(), `INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET customer = EXCLUDED.customer, amount = EXCLUDED.amount`,
			q.Get("id"), q.Get("customer"), q.Get("amount"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /totals", func(w http.ResponseWriter, r *http.Request) {
		type total struct {
			Customer int    `json:"customer"`
			Orders   int64  `json:"orders"`
			Amount   string `json:"amount"`
		}
		rows, err := db.Query(r.Context(), `SELECT customer, orders, amount::text FROM customer_totals ORDER BY customer`)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := []total{}
		for rows.Next() {
			var t total
			if err := rows.Scan(&t.Customer, &t.Orders, &t.Amount); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			out = append(out, t)
		}
		if err := rows.Err(); err != nil && !errors.Is(err, context.Canceled) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}
