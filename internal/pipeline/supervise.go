package pipeline

// Run's outer loop (ADR 0014): the runner lock, held by one runner per
// instance while any others wait as standbys, and the restart of a run
// that lost its connection to PostgreSQL. A run (runMode and below, in
// run.go) knows nothing of standbys or restarts: it ends when its
// connection does, and the supervisor decides whether to start another.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/retry"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/replication"
)

// standbyPoll is how often a standby tries the runner lock.
const standbyPoll = 500 * time.Millisecond

// Run is the runtime behind the root package's Trellis.Run, whose
// comment is the contract: the runner lock with standbys, restarts after
// a lost connection, capture, builds and live maintenance until ctx ends.
func (t *Host) Run(ctx context.Context) error {
	if err := t.writable("Run"); err != nil {
		return err
	}
	return t.RunWith(ctx, replication.Run)
}

// RunWith is Run with the slot stream as a parameter, so tests can inject
// capture failures (an undecodable slot) that a real server cannot be
// made to produce on demand.
func (t *Host) RunWith(ctx context.Context, streamFn capture.StreamFunc) error {
	if err := t.budget.runnable(); err != nil {
		return err
	}
	ctx, done, err := t.runs.start(ctx)
	if err != nil {
		return err
	}
	defer done()
	t.log.Info("connection budget", "max_connections", t.budget.Total, "control", t.budget.Control,
		"appliers", t.budget.Appliers, "builds_at_most", t.budget.Builds)
	if f, err := BudgetFinding(ctx, t.pool, t.budget); err == nil && f.Result != "ok" {
		t.log.Warn(f.Detail, "fix", f.Fix)
	}
	s := &supervisor{t: t, stream: streamFn,
		lost: retry.NewEpisode(t.log, "lost the connection to PostgreSQL; restarting the run", "reconnected to PostgreSQL")}
	defer t.setRunner(RunnerStopped, "")
	for {
		t.setRunner(RunnerStarting, "")
		err := s.runOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		var moved *errServerChanged
		if !fault.Disconnected(err) && !errors.As(err, &moved) && !errors.Is(err, errInRecovery) {
			return err
		}
		t.setRunner(RunnerReconnecting, err.Error())
		// The pool's other sessions most likely went the same way (a
		// restart): let the next run start on fresh ones.
		t.pool.Reset()
		d := s.backoff.Next()
		s.lost.Fail(err, d)
		t.obs.Reconnected()
		if !retry.Sleep(ctx, d) {
			return nil
		}
	}
}

// supervisor is what Run keeps from one run to the next.
type supervisor struct {
	t      *Host
	stream streamFunc

	backoff retry.Backoff
	lost    *retry.Episode
	// mode and reason are the capture mode chosen by the first run (or
	// switched to since): a reconnect resumes in the mode it left, rather
	// than choosing again while the server may still be coming up (a
	// failed replication probe would make --capture=auto pick triggers).
	mode, reason string
	// standbyLogged: this process said it waits as a standby and has not
	// taken over since.
	standbyLogged bool
}

// runOnce is one run: its own lock session, the runner lock (waiting as a
// standby while another runner holds it), then capture and workers in the
// chosen mode, going on in another mode when the run asks to switch. It
// ends when ctx does or the run fails; the lock is released with the
// session.
func (s *supervisor) runOnce(ctx context.Context) error {
	t := s.t
	cfg := t.connConfig().Copy()
	// Tells the runner's sessions apart in pg_stat_activity, and names the
	// process holding the lock in status.
	cfg.RuntimeParams["application_name"] = runnerAppName()
	lockConn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "connect: %v", err)
	}
	defer func() {
		// Release explicitly: a closed connection's backend may outlive
		// Close briefly, and a standby or restart must find the lock free.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = lockConn.Exec(cctx, `SELECT pg_advisory_unlock_all()`)
		lockConn.Close(cctx)
	}()
	if err := s.takeLock(ctx, lockConn); err != nil {
		return err
	}
	if err := t.rebindCopy(ctx); err != nil {
		return err
	}
	var dbOID uint32
	if err := t.pool.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dbOID); err != nil {
		return terr.Wrap(terr.Unavailable, err, "identify the database: %v", err)
	}
	slot := t.cat.SlotName(dbOID)
	if s.mode == "" {
		mode, reason, err := t.chooseCapture(ctx, slot)
		if err != nil {
			return err
		}
		s.mode, s.reason = mode, reason
	}
	for {
		err := t.runMode(ctx, lockConn, s.stream, slot, s.mode, s.reason, s.running)
		var sw *switchRequest
		if !errors.As(err, &sw) {
			return err
		}
		// The runner asked to go on in another mode (--capture=auto): start
		// again there; the switch overlaps the two paths.
		t.log.Warn("switching capture mode", "to", sw.mode, "reason", sw.reason)
		s.mode, s.reason = sw.mode, sw.reason
	}
}

// running is called once a run has prepared its capture and starts its
// workers: an outage is over.
func (s *supervisor) running() {
	s.t.setRunner(RunnerActive, "")
	s.backoff.Reset()
	s.lost.Recover("as", "active runner")
}

// takeLock takes the runner lock on conn. While another runner holds it,
// this one is a standby: it says so once, holds the shared standby lock
// (so status can list standbys), and tries again every standbyPoll until
// it gets the lock or ctx ends.
func (s *supervisor) takeLock(ctx context.Context, conn *pgx.Conn) error {
	key := s.t.cat.LockKey()
	standby := false
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, key).Scan(&got); err != nil {
			return terr.Wrap(terr.Unavailable, err, "take the runner lock: %v", err)
		}
		if got {
			s.t.obs.StandbyChanged(false)
			if standby {
				if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock_shared(hashtext($1))`, standbyKey(key)); err != nil {
					return terr.Wrap(terr.Unavailable, err, "leave standby: %v", err)
				}
			}
			if s.standbyLogged {
				s.standbyLogged = false
				s.t.log.Info("took over as the active runner", "instance", s.t.cat.Schema)
			}
			return nil
		}
		if !standby {
			standby = true
			// Waiting is a standby's normal state: an outage is over.
			s.backoff.Reset()
			s.lost.Recover("as", "standby")
			if _, err := conn.Exec(ctx, `SELECT pg_try_advisory_lock_shared(hashtext($1))`, standbyKey(key)); err != nil {
				return terr.Wrap(terr.Unavailable, err, "announce standby: %v", err)
			}
			s.t.obs.StandbyChanged(true)
			held, _ := InspectLock(ctx, conn, key)
			s.t.setRunner(RunnerStandby, fmt.Sprintf("another runner holds instance %s (backend %d, %s)", s.t.cat.Schema, held.PID, held.App))
			if !s.standbyLogged {
				s.standbyLogged = true
				s.t.log.Info(fmt.Sprintf("another runner holds instance %s; waiting as standby", s.t.cat.Schema),
					"holder_pid", held.PID, "holder", held.App, "poll", standbyPoll)
			}
		}
		if !retry.Sleep(ctx, standbyPoll) {
			return ctx.Err()
		}
	}
}

// standbyKey is the lock standbys hold shared while they wait.
func standbyKey(lockKey string) string { return lockKey + " standby" }

// runnerAppName is the application_name of a runner's lock session: the
// process id and host, so an operator can tell which process is active.
func runnerAppName() string {
	name := fmt.Sprintf("trellis-repl runner %d", os.Getpid())
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	// PostgreSQL keeps NAMEDATALEN-1 bytes.
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// LockState is who holds an instance's runner lock and who waits.
type LockState struct {
	// PID is the backend holding the runner lock (0: nobody), App its
	// application_name.
	PID int
	App string
	// Standbys are the backends waiting as standbys.
	Standbys []int
}

// InspectLock reads the runner lock and the standby lock from pg_locks.
// pg_try_advisory_lock(bigint) stores the key's high 32 bits as classid
// and the low 32 bits as objid, with objsubid 1 (a negative hashtext is
// sign-extended: classid 4294967295).
func InspectLock(ctx context.Context, q catalog.Querier, key string) (LockState, error) {
	rows, err := q.Query(ctx, `WITH k(standby, key) AS (VALUES (false, hashtext($1)::bigint), (true, hashtext($2)::bigint))
		SELECT k.standby, l.pid, coalesce(a.application_name, '')
		FROM pg_locks l
		JOIN k ON l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
		LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY l.pid`, key, standbyKey(key))
	if err != nil {
		return LockState{}, fmt.Errorf("read the runner lock: %w", err)
	}
	defer rows.Close()
	var st LockState
	for rows.Next() {
		var standby bool
		var pid int
		var app string
		if err := rows.Scan(&standby, &pid, &app); err != nil {
			return LockState{}, fmt.Errorf("read the runner lock: %w", err)
		}
		if standby {
			st.Standbys = append(st.Standbys, pid)
		} else {
			st.PID, st.App = pid, app
		}
	}
	if err := rows.Err(); err != nil {
		return LockState{}, fmt.Errorf("read the runner lock: %w", err)
	}
	return st, nil
}
