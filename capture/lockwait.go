package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// Blocker is a session holding a lock a capture install waits for.
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
		if w == nil {
			w = &Wait{Table: tb.Ident().Sanitize(), Operation: op, LockMode: mode, Since: time.Now().UTC()}
		}
		bs, berr := l.blockers(ctx, tb, mode)
		if berr == nil {
			w.Blockers = bs
		}
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

// blockers lists the sessions holding a lock on tb that conflicts with mode.
func (l lockWaiter) blockers(ctx context.Context, tb Table, mode string) ([]Blocker, error) {
	rows, err := l.pool.Query(ctx, `
		SELECT DISTINCT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''), a.query_start, coalesce(a.query, '')
		FROM pg_locks k JOIN pg_stat_activity a ON a.pid = k.pid
		WHERE k.locktype = 'relation' AND k.relation = $1 AND k.granted AND k.mode = ANY($2) AND k.pid <> pg_backend_pid()
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
