package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The source table every case writes. pad gives rows a realistic width.
const createSourceSQL = `CREATE TABLE src (id bigint PRIMARY KEY, g int NOT NULL, v numeric NOT NULL, pad text NOT NULL)`

// Rows are generated server side (one statement per commit, whatever its
// size), so the writer is as fast as one connection goes and the engine,
// not the client, is what a slow figure points at.
const (
	insertSQL = `INSERT INTO src (id, g, v, pad)
		SELECT i, i % $3::int, (i % 997) / 10.0, repeat('x', 32) FROM generate_series($1::bigint, $2::bigint) i`
	// Every update moves the row to another group and changes v.
	updateSQL = `UPDATE src SET g = (g + 37) % $3::int, v = v + 1 WHERE id BETWEEN $1::bigint AND $2::bigint`
	// The re-derive phase: one transaction changing the first $1 keys.
	rederiveSQL = `UPDATE src SET g = (g + 1) % $2::int, v = v + 1 WHERE id <= $1::bigint`
)

// rederivedIDs are the source ids rederiveSQL changes for k keys: the
// list the hand-written baseline is given.
func rederivedIDs(k int) []int64 {
	ids := make([]int64, k)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	return ids
}

// phaseSpec is one phase of a workload as the writer sees it.
type phaseSpec struct {
	name      string
	rows      int
	perCommit int
}

// phases lists the phases of wl.
func (wl Workload) phases() []phaseSpec {
	ps := []phaseSpec{
		{PhaseInsert, wl.Rows, wl.PerCommit},
		{PhaseUpdate, wl.Rows, wl.PerCommit},
	}
	if wl.Join != nil {
		if wl.Join.DimChanges > 0 {
			// rows: the facts one dimension row is referenced by, nominally
			// (the phase counts them).
			ps = append(ps, phaseSpec{PhaseDimChange, wl.Rows / max(wl.Join.Dim1Rows, 1), 1})
		}
		return ps
	}
	if k := min(wl.RederiveKeys, wl.Rows); k > 0 {
		ps = append(ps, phaseSpec{PhaseRederive, k, k})
	}
	return ps
}

// dataset is the source tables a workload writes and how.
type dataset interface {
	// name labels the dataset in reports (Result.Data).
	name() string
	// setupSQL creates the source tables, and loads the ones the workload
	// does not write, before any slot or transform exists.
	setupSQL() []string
	// tables are the source tables (the baseline publishes them).
	tables() []string
	// write runs one phase (not the dimension-change phase, which is
	// timed change by change) and returns how long it took.
	write(ctx context.Context, conn *pgx.Conn, p phaseSpec) (time.Duration, error)
}

// data is wl's dataset; groups is how many groups src's rows spread over.
func (wl Workload) data(groups int) dataset {
	if wl.Join != nil {
		return starData{*wl.Join}
	}
	return srcData{groups: groups}
}

// srcData is the single-table dataset: src.
type srcData struct{ groups int }

func (srcData) name() string       { return DataSrc }
func (srcData) setupSQL() []string { return []string{createSourceSQL} }
func (srcData) tables() []string   { return []string{"src"} }

// writer writes a dataset's workload through one connection, each
// statement its own transaction.
type writer struct {
	conn *pgx.Conn
	data dataset
}

// write runs one phase and returns how long it took.
func (w *writer) write(ctx context.Context, p phaseSpec) (time.Duration, error) {
	return w.data.write(ctx, w.conn, p)
}

func (d srcData) write(ctx context.Context, conn *pgx.Conn, p phaseSpec) (time.Duration, error) {
	start := time.Now()
	switch p.name {
	case PhaseInsert, PhaseUpdate:
		q := insertSQL
		if p.name == PhaseUpdate {
			q = updateSQL
		}
		if err := p.inCommits(func(lo, hi int) error {
			if _, err := conn.Exec(ctx, q, lo, hi, d.groups); err != nil {
				return fmt.Errorf("bench: %s rows %d..%d: %w", p.name, lo, hi, err)
			}
			return nil
		}); err != nil {
			return 0, err
		}
	case PhaseRederive:
		if _, err := conn.Exec(ctx, rederiveSQL, p.rows, d.groups); err != nil {
			return 0, fmt.Errorf("bench: update %d keys: %w", p.rows, err)
		}
	default:
		return 0, fmt.Errorf("bench: phase %q does not apply to src", p.name)
	}
	return time.Since(start), nil
}

// inCommits calls write for the phase's rows 1..rows in ranges of
// perCommit, one transaction each, stopping at the first error.
func (p phaseSpec) inCommits(write func(lo, hi int) error) error {
	for lo := 1; lo <= p.rows; lo += p.perCommit {
		if err := write(lo, min(lo+p.perCommit-1, p.rows)); err != nil {
			return err
		}
	}
	return nil
}

// currentLSN is the server's WAL write position.
func currentLSN(ctx context.Context, conn *pgx.Conn) (string, error) {
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return "", fmt.Errorf("bench: read the WAL position: %w", err)
	}
	return s, nil
}
