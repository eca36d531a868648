package trellis

// call.go owns the call contract (ADR 0040): every call that does not
// wait for something returns within Config.CallTimeout, pool and lock
// waits included. The server enforces the budget (statement_timeout and
// lock_timeout, SET LOCAL in the call's transaction, so a call blocked by
// another session's lock is cancelled there and leaves nothing behind),
// and the client backs it up a second later (the context's deadline, for
// a server that does not answer). Either way the call fails with code
// timeout and changes nothing. The waits (AwaitConverged, AwaitTransforms,
// AwaitSelfCheckJob, SelfCheck with Wait), CompareNow, which reads whole
// tables, and Run are bounded by their context alone. After Close every
// call is a validation error.

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// DefaultCallTimeout is Config.CallTimeout's default.
const DefaultCallTimeout = 30 * time.Second

// callBackstop is how long after the server's budget the client gives
// up on a call: the server cancels first, keeping the connection usable.
const callBackstop = time.Second

// budgetKey carries a call's end (time.Time) in its context, for the
// server-side limits of its transaction.
type budgetKey struct{}

// lockKey carries, for a call whose budget is longer than one call
// timeout (a script of many statements), the longest a lock may be
// waited for (time.Duration): a script blocked by another session's lock
// fails as soon as a call would.
type lockKey struct{}

// call starts a call of the contract: refused once the handle is closed,
// its context bounded by the call timeout (and any earlier deadline the
// caller set) plus the backstop.
func (t *Trellis) call(ctx context.Context, what string) (context.Context, context.CancelFunc, error) {
	if err := t.open(what); err != nil {
		return nil, nil, err
	}
	ctx, cancel := withBudget(ctx, t.cfg.CallTimeout)
	return ctx, cancel, nil
}

// open refuses a call on a closed handle.
func (t *Trellis) open(what string) error {
	if t.closed.Load() {
		return terr.New(terr.Validation, "%s on a closed handle: Close was called; Open the instance again", what)
	}
	return nil
}

// withBudget bounds ctx for one call of d: the server's budget ends at
// the earlier of now+d and ctx's deadline, the client's a backstop later.
func withBudget(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	end := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		end = dl
	}
	return context.WithDeadline(context.WithValue(ctx, budgetKey{}, end), end.Add(callBackstop))
}

// limit sets, in tx, the server's side of the call's budget: what is left
// of it as statement_timeout and lock_timeout (SET LOCAL: the pool's
// session keeps its own settings). A call already out of time fails.
func limit(ctx context.Context, tx pgx.Tx) error {
	end, ok := ctx.Value(budgetKey{}).(time.Time)
	if !ok {
		return nil
	}
	left := time.Until(end).Milliseconds()
	if left < 1 {
		return context.DeadlineExceeded
	}
	lock := left
	if d, ok := ctx.Value(lockKey{}).(time.Duration); ok && d.Milliseconds() < lock {
		lock = max(d.Milliseconds(), 1)
	}
	_, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true)`,
		strconv.FormatInt(left, 10), strconv.FormatInt(lock, 10))
	return err
}

// bounded runs fn as one call of the contract, in one transaction with
// the server's limits set, committed when fn returns nil; a call that ran
// out of time is a timeout error.
func (t *Trellis) bounded(ctx context.Context, what string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return t.boundedFor(ctx, what, 1, fn)
}

// boundedFor is bounded for a call of n statements (a script): its
// budget is n call timeouts, so a long script is not cut short by its
// length, while each lock wait stays within one call timeout.
func (t *Trellis) boundedFor(ctx context.Context, what string, n int, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := t.open(what); err != nil {
		return err
	}
	d := t.cfg.CallTimeout * time.Duration(max(n, 1))
	ctx, cancel := withBudget(ctx, d)
	defer cancel()
	if n > 1 {
		ctx = context.WithValue(ctx, lockKey{}, t.cfg.CallTimeout)
	}
	return timedOut(what, d, t.inTx(ctx, func(tx pgx.Tx) error { return fn(ctx, tx) }))
}

// inTx runs fn in one transaction on the handle's pool (inTxOn).
func (t *Trellis) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return inTxOn(ctx, t.pool, fn)
}

// inTxOn runs fn in one transaction of db, under the call's limits
// (limit), committed when fn returns nil.
func inTxOn(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "begin: %v", err)
	}
	defer func() {
		// Past the call's deadline too, bounded: a rollback the server
		// does not answer leaves the connection to the pool to discard.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := limit(ctx, tx); err != nil {
		return terr.Wrap(terr.Unavailable, err, "set the call's time limits: %v", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return terr.Wrap(terr.Unavailable, err, "commit: %v", err)
	}
	return nil
}

// timedOut turns an error whose cause is the call's budget running out
// (fault.TimedOut) into a timeout error; others pass as they are.
func (t *Trellis) timedOut(what string, err error) error {
	return timedOut(what, t.cfg.CallTimeout, err)
}

// timedOut is Trellis.timedOut for a call of budget d.
func timedOut(what string, d time.Duration, err error) error {
	if err == nil || !fault.TimedOut(err) || terr.CodeOf(err) == terr.Timeout {
		return err
	}
	return terr.Wrap(terr.Timeout, err, "%s did not finish within the call timeout (%s, Config.CallTimeout): %s; nothing it did was kept: retry once what it waited for (a lock another session holds, a busy server) is free, or raise Config.CallTimeout",
		what, d, fault.Message(err))
}
