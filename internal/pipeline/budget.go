package pipeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/replication"
)

// DefaultMaxConnections is Config.MaxConnections' default: 10% of
// PostgreSQL's default max_connections.
const DefaultMaxConnections = 10

// MinRunnerConnections is the smallest budget a runner runs on: the lock
// session, capture, one control connection and one applier session.
const MinRunnerConnections = 4

// Budget is how a process's connection budget (Config.MaxConnections)
// is split among its uses (ADR 0028). Every connection the process opens
// comes out of one of these shares.
type Budget struct {
	// Total is the budget; Lock the runner-lock session; Capture the
	// replication connection or the trigger drain; Control the shared
	// pool (catalog, status, reconcile, heartbeat, self-check reads,
	// replication preflight); Appliers the sessions transforms take turns
	// on, of which builds may hold at most Builds at once.
	Total, Lock, Capture, Control, Appliers, Builds int
}

// SplitBudget splits total connections (0: DefaultMaxConnections). Below
// MinRunnerConnections only a reading process fits: everything is
// Control, and runnable reports why a runner cannot start. poolSize, when
// > 0, is the control pool's size (Config.PoolSize).
func SplitBudget(total, poolSize int) (Budget, error) {
	if total == 0 {
		total = DefaultMaxConnections
	}
	if total < 0 {
		return Budget{}, terr.New(terr.Validation, "the connection budget %d is negative; give --max-connections a positive number (default %d)", total, DefaultMaxConnections)
	}
	if total < MinRunnerConnections {
		return Budget{Total: total, Control: total}, nil
	}
	b := Budget{Total: total, Lock: 1, Capture: 1}
	rest := total - b.Lock - b.Capture
	b.Control = min(max(rest/4, 1), 4)
	if poolSize > 0 {
		if poolSize > rest-1 {
			return Budget{}, terr.New(terr.Validation, "a pool of %d connections leaves no applier session in a budget of %d (1 lock, 1 capture, at least 1 applier); raise --max-connections to at least %d or lower --pool-size", poolSize, total, poolSize+3)
		}
		b.Control = poolSize
	}
	b.Appliers = rest - b.Control
	b.Builds = max(b.Appliers/2, 1)
	return b, nil
}

// runnable reports why a runner cannot start on this budget ("" when it
// can).
func (b Budget) runnable() error {
	if b.Appliers == 0 {
		return terr.New(terr.Validation, "the connection budget of %d is too small for a runner: it needs at least %d (1 lock session, 1 capture, 1 control, 1 applier session); give --max-connections %d or more (default %d)",
			b.Total, MinRunnerConnections, MinRunnerConnections, DefaultMaxConnections)
	}
	return nil
}

// String names the shares, for logs and doctor.
func (b Budget) String() string {
	return fmt.Sprintf("%d connections: 1 lock, 1 capture, %d control, %d applier sessions (builds at most %d)", b.Total, b.Control, b.Appliers, b.Builds)
}

// BudgetFinding compares a runner's budget with what the server allows
// ordinary roles (max_connections less the reserved slots) and what is in
// use: "fail" when it does not fit now, "warn" when it takes more than a
// quarter of what the server allows, else "ok". doctor reports it; run
// logs it when it is not ok.
func BudgetFinding(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, b Budget) (replication.Finding, error) {
	var maxConns, superuser, reserved, inUse int
	if err := q.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int,
		coalesce(current_setting('reserved_connections', true)::int, 0),
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&maxConns, &superuser, &reserved, &inUse); err != nil {
		return replication.Finding{}, fmt.Errorf("read max_connections: %w", err)
	}
	allowed := maxConns - superuser - reserved
	f := replication.Finding{Check: "connection_budget", Result: "ok",
		Detail: fmt.Sprintf("the runner opens at most %d connections (--max-connections); the server allows ordinary roles %d (max_connections %d less %d reserved), %d in use now",
			b.Total, allowed, maxConns, superuser+reserved, inUse)}
	switch {
	case b.Total > allowed-inUse:
		f.Result = "fail"
		f.Fix = fmt.Sprintf("the budget does not fit beside the %d connections in use: lower --max-connections (at least %d) or raise max_connections", inUse, MinRunnerConnections)
	case 4*b.Total > allowed:
		f.Result = "warn"
		f.Fix = fmt.Sprintf("the budget is more than a quarter of max_connections' %d for ordinary roles: lower --max-connections unless the application needs few connections", allowed)
	}
	return f, nil
}
