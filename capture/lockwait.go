package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// Wait describes an install or removal of capture waiting for a lock on a
// user table, with the sessions holding it.
type Wait struct {
	Table     string    `json:"table"`
	Operation string    `json:"operation"` // install or uninstall
	LockMode  string    `json:"lock_mode"`
	Since     time.Time `json:"since"`
	Blockers  []Blocker `json:"blocking_sessions"`
	// Statement is what someone else must run for the wait to end (an
	// owner-managed publication lacking the table), when that is the cause.
	Statement string `json:"statement,omitempty"`
}

// Blocker is a session holding a lock an install or removal of capture
// waits for.
type Blocker struct {
	PID             int        `json:"pid"`
	ApplicationName string     `json:"application_name"`
	State           string     `json:"state"`
	QueryStart      *time.Time `json:"query_start"`
	Query           string     `json:"query"`
}

// WaitFunc is told that an install waits for a lock (and with nil once it
// got it). It is called between attempts, so it may write the wait down.
type WaitFunc func(*Wait)

// RemovalsFunc is told, at the end of each Retain that went through the
// tables to remove, of every removal of capture left waiting for a lock
// (operation uninstall), ordered by table; empty once none waits. It may
// write them down.
type RemovalsFunc func([]Wait)

// conflicts lists, per lock mode capture takes, the modes that block it
// (PostgreSQL's lock conflict table).
var conflicts = map[string][]string{
	"ShareUpdateExclusiveLock": {"ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"},
	"ShareRowExclusiveLock":    {"RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"},
	"AccessExclusiveLock":      {"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"},
}

// lockWaiter runs statements that lock user tables with a short
// lock_timeout, retried, so the application never queues behind
// trellis-repl for long; nothing is cancelled.
type lockWaiter struct {
	pool    Beginner
	timeout time.Duration
}

// run runs fn in a transaction until it gets its locks. While it waits,
// waiting gets the wait and the sessions holding a conflicting lock on tb,
// refreshed at each attempt; then nil.
func (l lockWaiter) run(ctx context.Context, tb Table, op, mode string, waiting WaitFunc, fn func(pgx.Tx) error) error {
	var w *Wait
	defer func() {
		if w != nil && waiting != nil {
			waiting(nil)
		}
	}()
	for {
		err := l.once(ctx, fn)
		if !isLockTimeout(err) {
			return err
		}
		w = l.waited(ctx, w, tb, op, mode)
		if waiting != nil {
			cp := *w
			waiting(&cp)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.timeout):
		}
	}
}

// waited is w (a new wait when nil) after one more attempt at tb's lock
// timed out, with the sessions now holding a conflicting lock.
func (l lockWaiter) waited(ctx context.Context, w *Wait, tb Table, op, mode string) *Wait {
	if w == nil {
		w = &Wait{Table: tb.Ident().Sanitize(), Operation: op, LockMode: mode, Since: time.Now().UTC()}
	}
	if bs, err := l.blockers(ctx, tb, mode); err == nil {
		w.Blockers = bs
	}
	return w
}

// once runs fn in one transaction with lock_timeout set.
func (l lockWaiter) once(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(l.timeout.Milliseconds(), 1))); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// blockers lists the sessions holding a lock that conflicts with mode on
// tb or, for a partitioned table, on any of its partitions: a trigger on
// the root is created on every partition too, each taking the same lock.
func (l lockWaiter) blockers(ctx context.Context, tb Table, mode string) ([]Blocker, error) {
	rows, err := l.pool.Query(ctx, `
		SELECT DISTINCT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''), a.query_start, coalesce(a.query, '')
		FROM pg_locks k JOIN pg_stat_activity a ON a.pid = k.pid
		WHERE k.locktype = 'relation' AND k.granted AND k.mode = ANY($2) AND k.pid <> pg_backend_pid()
		  AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND (k.relation = $1 OR k.relation IN (SELECT relid FROM pg_partition_tree($1::oid::regclass)))
		ORDER BY a.pid`, tb.OID, conflicts[mode])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Blocker
	for rows.Next() {
		var b Blocker
		if err := rows.Scan(&b.PID, &b.ApplicationName, &b.State, &b.QueryStart, &b.Query); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// removals are the removals of capture Retain put off, by table OID: each
// is retried at the next call, never waited for beyond one lock_timeout.
// One waiting for a lock keeps its wait (refreshed at each attempt, for
// status); one failing otherwise is logged once per episode. Guarded by
// the capture's mutex.
type removals struct {
	log *slog.Logger
	// removed is logged when a removal is done; what names the removal in
	// the other lines ("remove trigger capture").
	removed, what string
	m             map[uint32]*removal
}

// removal is a removal of capture Retain put off.
type removal struct {
	wait    *Wait // while it waits for a lock
	failing *retry.Episode
}

// attempt removes capture from tb with fn, in one transaction that waits
// at most one lock_timeout for the mode lock it needs; one that would wait
// longer is left for the next call, its wait recorded.
func (rs *removals) attempt(ctx context.Context, lw lockWaiter, tb Table, mode string, fn func(pgx.Tx) error) {
	table := tb.Ident().Sanitize()
	err := lw.once(ctx, fn)
	rm := rs.m[tb.OID]
	if err == nil {
		if rm != nil {
			rm.failing.Recover()
			if rm.wait != nil {
				rs.log.Info(rs.what+" got its lock", "table", table, "waited", time.Since(rm.wait.Since).Round(time.Millisecond))
			}
			delete(rs.m, tb.OID)
		}
		rs.log.Info(rs.removed, "table", table)
		return
	}
	if ctx.Err() != nil {
		return // the run ends; the next one removes it
	}
	if rm == nil {
		if rs.m == nil {
			rs.m = map[uint32]*removal{}
		}
		rm = &removal{failing: retry.NewEpisode(rs.log.With("table", table), rs.what+" fails; retried at each reconcile", rs.what+" recovered")}
		rs.m[tb.OID] = rm
	}
	if isLockTimeout(err) {
		if rm.wait == nil {
			rs.log.Info(rs.what+" waits for a lock; retried at each reconcile, nothing is cancelled", "table", table, "lock_mode", mode)
		}
		rm.wait = lw.waited(ctx, rm.wait, tb, "uninstall", mode)
		return
	}
	// Retried at the next reconcile; nothing else depends on it.
	rm.wait = nil
	rm.failing.Fail(err, 0)
}

// keepOnly forgets the removals of tables not in pending: read again, or
// no longer captured.
func (rs *removals) keepOnly(pending map[uint32]bool) {
	for oid := range rs.m {
		if !pending[oid] {
			delete(rs.m, oid)
		}
	}
}

// waits are copies of the removals' lock waits, ordered by table.
func (rs *removals) waits() []Wait {
	out := []Wait{}
	for _, rm := range rs.m {
		if rm.wait != nil {
			w := *rm.wait
			w.Blockers = slices.Clone(w.Blockers)
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b Wait) int { return strings.Compare(a.Table, b.Table) })
	return out
}
