package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const baselinePub = "bench_baseline"

// runBaseline measures how fast pg_recvlogical alone drains each phase of
// wl: pgoutput slots and a publication on the workload's source tables
// (src, or a join workload's fact and dimensions, loaded beforehand) exist
// before the workload;
// each phase is written while nothing reads the slots, then pg_recvlogical
// is timed from start to exit at the phase's end position, once per slot
// (the same WAL each time). The fastest drain is the figure: a single
// sample on a shared machine is easily hit by a neighbour.
func runBaseline(ctx context.Context, cfg *Config, dbs Databases, wl Workload) (results []Result, err error) {
	bin := cfg.RecvLogical
	if bin == "" {
		if bin, err = exec.LookPath("pg_recvlogical"); err != nil {
			return nil, fmt.Errorf("bench: pg_recvlogical is not on PATH (install postgresql-client, or pass its path): %w", err)
		}
	}
	dsn, drop, err := dbs.NewDatabase(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: new database: %w", err)
	}
	defer func() {
		if derr := drop(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = fmt.Errorf("bench: drop database: %w", derr)
		}
	}()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	data := wl.data(baselineGroups)
	var tables []string
	for _, t := range data.tables() {
		tables = append(tables, pgx.Identifier{t}.Sanitize())
	}
	setup := append(data.setupSQL(),
		`CREATE PUBLICATION `+pgx.Identifier{baselinePub}.Sanitize()+` FOR TABLE `+strings.Join(tables, ", "))
	for _, q := range setup {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("bench: baseline setup: %w", err)
		}
	}
	// Slot names are cluster-wide: the database's OID keeps them apart
	// from other cases' slots.
	var dboid uint32
	if err := conn.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dboid); err != nil {
		return nil, fmt.Errorf("bench: baseline setup: %w", err)
	}
	slots := make([]string, max(cfg.BaselineRepeats, 1))
	for i := range slots {
		slots[i] = fmt.Sprintf("bench_baseline_%d_%d", dboid, i)
		if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slots[i]); err != nil {
			return nil, fmt.Errorf("bench: create slot: %w", err)
		}
		defer func(slot string) {
			_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_drop_replication_slot($1)`, slot)
		}(slots[i])
	}

	w := &writer{conn: conn, data: data}
	for _, p := range wl.phases() {
		if p.name == PhaseDimChange {
			continue // a latency, not a drain rate: see join.go
		}
		wrote, err := w.write(ctx, p)
		if err != nil {
			return results, err
		}
		end, err := currentLSN(ctx, conn)
		if err != nil {
			return results, err
		}
		var best time.Duration
		var samples []float64
		for _, slot := range slots {
			drained, err := drain(ctx, bin, dsn, slot, end)
			if err != nil {
				return results, err
			}
			// pg_recvlogical confirms what it received on exit; if it did
			// not, the next phase would drain this one again and look
			// slower.
			if _, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)
				FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn < $2::pg_lsn`, slot, end); err != nil {
				return results, fmt.Errorf("bench: advance slot: %w", err)
			}
			samples = append(samples, drained.Seconds())
			if best == 0 || drained < best {
				best = drained
			}
		}
		r := newResult(data.name(), BaselineName, ModeDrain, p.name, p.perCommit, p.rows, wrote, best)
		r.DrainSamples = samples
		progress(cfg, r)
		results = append(results, r)
	}
	return results, nil
}

// drain runs pg_recvlogical until it has received everything up to endpos.
func drain(ctx context.Context, bin, dsn, slot, endpos string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, bin, "-d", dsn, "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names="+baselinePub,
		"-f", "/dev/null", "--endpos", endpos)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("bench: pg_recvlogical: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return time.Since(start), nil
}
