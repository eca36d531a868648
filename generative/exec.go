package generative

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/engine"
)

// Failure is a program's failure: what the suite reports and the shrinker
// preserves.
type Failure struct {
	// Kind classes the failure: diverged (a target differs from its
	// query), timeout (no convergence in time), conflict (a transform
	// paused by the system), rejected (a generated definition refused),
	// capture (the catalog does not show the capture mode the runner runs
	// in: a slot left after a switch to trigger, capture triggers after a
	// switch to logical), runner (the runner panicked or died), setup (the
	// harness itself).
	Kind string
	// Step is the path of the failing step, e.g. "41" or "17/lane2/3".
	Step string
	Msg  string
	// Log is the tail of the run's log (harness events, runner output).
	Log string
}

func (f *Failure) Error() string { return fmt.Sprintf("%s at step %s: %s", f.Kind, f.Step, f.Msg) }

// Stats counts what a run did.
type Stats struct {
	Statements int // data statements executed
	StmtErrors int // statements refused by PostgreSQL as expected (keys, deadlocks)
	Txns       int
	Actions    int // runner, server and definition actions
	Checks     int
	// JoinCompares counts comparisons of targets of joins (plans of
	// several sources) with their queries.
	JoinCompares int
	// PoisonCompares counts comparisons of transforms whose rows can fail
	// (poison.go) with their held keys and queries; HeldKeys the held
	// keys those comparisons found, as expected.
	PoisonCompares, HeldKeys int
	// Rebuilds counts the ALTER TRANSFORM and REQUEST BACKFILL statements
	// the engine accepted (alterops.go).
	Rebuilds int
	// GeneratorErrors are statements refused for a reason the generator
	// should have avoided (syntax, types, overflow).
	GeneratorErrors []string
	// Notes are tolerated oddities: definition statements on names that
	// do not exist, runner exits that no server restart explains.
	Notes []string
}

// Result is the outcome of one run.
type Result struct {
	Failure  *Failure
	Stats    Stats
	Duration time.Duration
}

// run is one program executing against a fresh database.
type run struct {
	env     *Env
	p       *Program
	dsn     string
	dataDir string
	tr      *trellis.Trellis
	sup     *supervisor
	log     *logBuffer
	ctl     *session

	mu      sync.Mutex
	stats   Stats
	defs    map[string]string // transform name → its SELECT as written
	disrupt bool              // a lost store may have paused transforms (local, or trigger mode)
	retyped bool              // a source column was retyped: a chain may pause downstream (ddl.go)
	// fromTrigger: capture switched from triggers to logical since the
	// last check; keys the triggers took before the slot existed live
	// only in the store until applied, so losing it may be a disruption.
	fromTrigger bool
	restarts    int // server restarts so far
	// mode is the capture mode the runner runs (or will run) in: the
	// program's, then each switch's.
	mode string
}

// captureMode is the mode the runner is to run in.
func (r *run) captureMode() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mode
}

// Run executes the program on a fresh database and checks the oracle.
func (e *Env) Run(ctx context.Context, p *Program) Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	r := &run{env: e, p: p, log: newLogBuffer(400), defs: map[string]string{}, mode: p.Config.Capture}
	if r.mode == "" {
		r.mode = CaptureLogical
	}
	r.log.mirror = e.Trace
	f := r.execute(ctx)
	if f != nil && f.Log == "" {
		f.Log = r.log.tail(60)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return Result{Failure: f, Stats: r.stats, Duration: time.Since(start)}
}

func (r *run) logf(format string, args ...any) {
	r.log.Write([]byte(time.Now().Format("15:04:05.000") + " harness: " + fmt.Sprintf(format, args...) + "\n"))
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	r.stats.Notes = append(r.stats.Notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *run) execute(ctx context.Context) (f *Failure) {
	setup := func(err error) *Failure { return &Failure{Kind: "setup", Step: "-", Msg: err.Error()} }
	dbName, dsn, err := r.env.createDatabase(ctx, r.p.Seed)
	if err != nil {
		return setup(err)
	}
	r.dsn = dsn
	defer func() {
		if os.Getenv("TRELLIS_GEN_KEEP_DB") != "" {
			r.logf("kept database %s", dsn)
			return
		}
		if err := r.env.dropDatabase(dbName); err != nil && f == nil {
			f = setup(fmt.Errorf("drop database: %w", err))
		}
	}()
	base := r.env.TempDir
	if base == "" {
		base = os.TempDir()
	}
	tmp, err := os.MkdirTemp(base, "trellis-gen-")
	if err != nil {
		return setup(err)
	}
	defer os.RemoveAll(tmp)
	r.dataDir = filepath.Join(tmp, "store")
	if r.p.Config.Stream {
		if err := r.env.alterSystem(ctx, `ALTER SYSTEM SET logical_decoding_work_mem = '64kB'`); err != nil {
			return setup(err)
		}
		defer func() {
			_ = r.env.alterSystem(context.WithoutCancel(ctx), `ALTER SYSTEM RESET logical_decoding_work_mem`)
		}()
	}
	r.tr, err = trellis.Open(ctx, trellis.Config{DSN: dsn})
	if err != nil {
		return setup(err)
	}
	defer r.tr.Close()
	r.ctl = &session{dsn: dsn}
	defer r.ctl.close()
	r.sup = newSupervisor(r)
	defer func() {
		r.sup.stop(false)
		if f == nil {
			if msg := r.sup.panicked(); msg != "" {
				f = &Failure{Kind: "runner", Step: "end", Msg: msg}
			}
		}
	}()
	steps := r.p.Steps
	if len(steps) == 0 || steps[len(steps)-1].Kind != StepCheck {
		steps = append(append([]Step(nil), steps...), Step{Kind: StepCheck})
	}
	for i, s := range steps {
		if f := r.step(ctx, fmt.Sprint(i), s, r.ctl); f != nil {
			return f
		}
	}
	return nil
}

// step executes one step on the given writer session.
func (r *run) step(ctx context.Context, path string, s Step, sess *session) *Failure {
	if ctx.Err() != nil {
		return &Failure{Kind: "setup", Step: path, Msg: ctx.Err().Error()}
	}
	count := func() {
		r.mu.Lock()
		r.stats.Actions++
		r.mu.Unlock()
	}
	switch s.Kind {
	case StepSQL:
		for _, st := range s.Stmts {
			conn, err := sess.get(ctx)
			if err != nil {
				return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
			}
			if _, err := conn.Exec(ctx, st); err != nil {
				r.stmtError(sess, st, err)
			}
		}
	case StepApply:
		count()
		return r.apply(ctx, path, s.Stmts)
	case StepStart:
		count()
		r.logf("step %s: start runner", path)
		r.sup.start()
	case StepStop:
		count()
		r.logf("step %s: stop runner", path)
		r.sup.stop(true)
	case StepKill:
		count()
		r.logf("step %s: kill runner (restart after %d ms)", path, s.Arg)
		if s.AfterConfirm {
			r.awaitConfirm(ctx, path)
		}
		if r.sup.stop(false) {
			r.logPositions(ctx)
			time.Sleep(time.Duration(s.Arg) * time.Millisecond)
			r.sup.start()
		}
	case StepLoseStore:
		count()
		r.logf("step %s: kill runner and delete its store", path)
		if s.AfterConfirm {
			r.awaitConfirm(ctx, path)
		}
		was := r.sup.stop(false)
		r.logPositions(ctx)
		if err := os.RemoveAll(r.dataDir); err != nil {
			return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
		}
		// A lost store is a disruption under --confirm=local and, whatever
		// --confirm says, in trigger mode: the capture log keeps no
		// position on the server (ADR 0012); so it may be right after a
		// switch to logical, until what the triggers took is applied.
		r.mu.Lock()
		if r.p.Config.Confirm != trellis.ConfirmApplied || r.mode == CaptureTrigger || r.fromTrigger {
			r.disrupt = true
		}
		r.mu.Unlock()
		if was {
			r.sup.start()
		}
	case StepRestartPG:
		count()
		if r.env.Server == nil {
			r.note("restart-pg skipped: external server")
			return nil
		}
		r.logf("step %s: restart PostgreSQL", path)
		r.mu.Lock()
		r.restarts++
		r.mu.Unlock()
		if err := r.env.Server.Restart(ctx); err != nil {
			return &Failure{Kind: "setup", Step: path, Msg: fmt.Sprintf("restart PostgreSQL: %v", err)}
		}
		r.ctl.close()
	case StepTxn:
		return r.txn(ctx, path, s, sess, false)
	case StepHeld:
		if s.Open {
			r.logf("step %s: transaction held open for %d ms", path, s.Arg)
			return r.txn(ctx, path, s, sess, true)
		}
		if r.env.Server == nil {
			r.note("held commit ran as a plain transaction: external server")
			return r.txn(ctx, path, s, sess, false)
		}
		return r.held(ctx, path, s)
	case StepSwitch:
		count()
		return r.switchMode(ctx, path, s)
	case StepDDL:
		count()
		return r.ddl(ctx, path, s)
	case StepAlter, StepBackfill:
		count()
		return r.rebuild(ctx, path, s)
	case StepConcurrent:
		count()
		var wg sync.WaitGroup
		fails := make([]*Failure, len(s.Lanes))
		for li, lane := range s.Lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ls := &session{dsn: r.dsn}
				defer ls.close()
				for si, st := range lane {
					if f := r.step(ctx, fmt.Sprintf("%s/lane%d/%d", path, li, si), st, ls); f != nil {
						fails[li] = f
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, f := range fails {
			if f != nil {
				return f
			}
		}
	case StepWait:
		time.Sleep(time.Duration(s.Arg) * time.Millisecond)
	case StepStall:
		count()
		r.stall(ctx, path, time.Duration(s.Arg)*time.Millisecond)
	case StepCheck:
		r.mu.Lock()
		r.stats.Checks++
		r.mu.Unlock()
		r.logf("step %s: check", path)
		return r.check(ctx, path)
	default:
		return &Failure{Kind: "setup", Step: path, Msg: "unknown step " + string(s.Kind)}
	}
	return nil
}

// stall locks every target against writes for d, in its own session.
func (r *run) stall(ctx context.Context, path string, d time.Duration) {
	conn, err := connectRetry(ctx, r.dsn)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	var targets []string
	rows, err := tx.Query(ctx, `SELECT plan FROM trellis.transforms`)
	if err == nil {
		for rows.Next() {
			var raw []byte
			if rows.Scan(&raw) == nil {
				if p, err := engine.Decode(raw); err == nil {
					targets = append(targets, p.Target.Ident())
				}
			}
		}
		rows.Close()
	}
	if len(targets) > 0 {
		if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(targets, ", ")+" IN EXCLUSIVE MODE"); err != nil {
			r.logf("step %s: stall: %v", path, err)
			return
		}
	}
	r.logf("step %s: targets locked for %v", path, d)
	time.Sleep(d)
	_ = tx.Commit(ctx)
	r.logf("step %s: targets unlocked", path)
}

// awaitConfirm waits (at most 3s) until the slot's confirmed position
// moves, polling often so that a crash lands right after the server
// processed the runner's standby status update. In trigger mode, where no
// slot exists, it waits for the position the runner records with what the
// drain moved (the drain deletes from the capture log what it made
// durable): the crash lands right after a drain.
func (r *run) awaitConfirm(ctx context.Context, path string) {
	conn, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	q := `SELECT coalesce(max(confirmed_flush_lsn)::text, '0/0') FROM pg_replication_slots WHERE database = current_database()`
	if r.captureMode() == CaptureTrigger {
		q = `SELECT coalesce(max(received_lsn)::text, '0/0') FROM trellis.instance`
	}
	var first string
	if err := conn.QueryRow(ctx, q).Scan(&first); err != nil {
		return
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var cur string
		if err := conn.QueryRow(ctx, q).Scan(&cur); err != nil {
			return
		}
		if cur != first {
			r.logf("step %s: confirmed position moved %s -> %s; crashing now", path, first, cur)
			return
		}
		time.Sleep(3 * time.Millisecond)
	}
	r.logf("step %s: confirmed position stayed at %s for 3s; crashing anyway", path, first)
}

// logPositions logs where the slot is confirmed and what each transform
// applied (after a crash, for the failure log).
func (r *run) logPositions(ctx context.Context) {
	conn, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	var slot, applied string
	_ = conn.QueryRow(ctx, `SELECT coalesce(string_agg(slot_name || ' ' || confirmed_flush_lsn::text, ', '), 'none') FROM pg_replication_slots WHERE database = current_database()`).Scan(&slot)
	_ = conn.QueryRow(ctx, `SELECT coalesce(string_agg(t.name || ' ' || coalesce(p.applied_lsn::text, '-'), ', ' ORDER BY t.name), 'none') FROM trellis.transforms t LEFT JOIN trellis.progress p ON p.transform_id = t.id`).Scan(&applied)
	r.logf("after the crash: slot confirmed %s; applied: %s", slot, applied)
}

// isControl: savepoint statements run as written, never wrapped.
func isControl(st string) bool {
	u := strings.ToUpper(strings.TrimSpace(st))
	return strings.HasPrefix(u, "SAVEPOINT") || strings.HasPrefix(u, "ROLLBACK TO") || strings.HasPrefix(u, "RELEASE")
}

// txn runs one transaction: each statement in its own savepoint (unless
// NoSavepoints), so a refused statement does not abort the others. With
// open it holds the transaction open for s.Arg ms before it ends.
func (r *run) txn(ctx context.Context, path string, s Step, sess *session, open bool) *Failure {
	r.mu.Lock()
	r.stats.Txns++
	r.mu.Unlock()
	conn, err := sess.get(ctx)
	if err != nil {
		return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		r.connError(sess, err)
		return nil
	}
	aborted := false
	for _, st := range s.Stmts {
		r.mu.Lock()
		r.stats.Statements++
		r.mu.Unlock()
		if s.NoSavepoints || isControl(st) {
			if _, err := conn.Exec(ctx, st); err != nil {
				r.stmtError(sess, st, err)
				aborted = true
				break
			}
			continue
		}
		if _, err := conn.Exec(ctx, "SAVEPOINT w; "+st+"; RELEASE SAVEPOINT w"); err != nil {
			r.stmtError(sess, st, err)
			if sess.conn == nil {
				return nil
			}
			if _, err := conn.Exec(ctx, "ROLLBACK TO SAVEPOINT w; RELEASE SAVEPOINT w"); err != nil {
				aborted = true
				break
			}
		}
	}
	if sess.conn == nil {
		return nil
	}
	if open {
		time.Sleep(time.Duration(s.Arg) * time.Millisecond)
	}
	end := "COMMIT"
	if s.Rollback || aborted {
		end = "ROLLBACK"
	}
	if _, err := conn.Exec(ctx, end); err != nil {
		r.stmtError(sess, end, err)
		if sess.conn != nil {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}
	return nil
}

// stmtError classifies a refused statement.
func (r *run) stmtError(sess *session, st string, err error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		r.connError(sess, err)
		return
	}
	switch pgErr.Code[:2] {
	case "57", "08":
		r.connError(sess, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch pgErr.Code[:2] {
	case "22", "42":
		if len(r.stats.GeneratorErrors) < 20 {
			r.stats.GeneratorErrors = append(r.stats.GeneratorErrors, fmt.Sprintf("%s: %s (%s)", st, pgErr.Message, pgErr.Code))
		}
	default:
		r.stats.StmtErrors++
	}
}

// connError drops a session whose connection failed (server restart); the
// next statement reconnects.
func (r *run) connError(sess *session, err error) {
	r.logf("session error: %v", err)
	sess.close()
}

// held runs a transaction whose commit waits for a synchronous standby that
// never connects, until the runner has received it and Arg ms more.
func (r *run) held(ctx context.Context, path string, s Step) *Failure {
	r.logf("step %s: held commit", path)
	if err := r.env.alterSystem(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'trellis_gen_never_connects'`); err != nil {
		return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
	}
	released := false
	release := func() *Failure {
		if released {
			return nil
		}
		released = true
		if err := r.env.alterSystem(context.WithoutCancel(ctx), `ALTER SYSTEM RESET synchronous_standby_names`); err != nil {
			return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
		}
		return nil
	}
	defer release()
	hs := &session{dsn: r.dsn, setup: []string{"SET synchronous_commit = on"}}
	defer hs.close()
	done := make(chan *Failure, 1)
	go func() { done <- r.txn(ctx, path, s, hs, false) }()
	time.Sleep(100 * time.Millisecond)
	var walLSN string
	conn, err := r.ctl.get(ctx)
	if err != nil {
		return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
	}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walLSN); err != nil {
		r.connError(r.ctl, err)
	}
	// Wait until the runner has received the held transaction (its
	// heartbeat records the received position), or give up after a while.
	deadline := time.Now().Add(5 * time.Second)
	for walLSN != "" && time.Now().Before(deadline) && r.sup.running() {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT coalesce(received_lsn >= $1::pg_lsn, false) FROM trellis.instance`, walLSN).Scan(&ok); err == nil && ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Duration(s.Arg) * time.Millisecond)
	if f := release(); f != nil {
		return f
	}
	select {
	case f := <-done:
		return f
	case <-time.After(60 * time.Second):
		return &Failure{Kind: "setup", Step: path, Msg: "the held commit never returned after release"}
	}
}

// apply runs a definition script; names that do not exist (or already
// do) are tolerated, so that shrinking can remove any statement.
func (r *run) apply(ctx context.Context, path string, stmts []string) *Failure {
	if len(stmts) == 0 {
		return nil
	}
	script := strings.Join(stmts, ";\n")
	r.logf("step %s: apply %s", path, oneLine(script, 200))
	err := r.applyRetry(ctx, script)
	if err == nil {
		r.noteDefs(stmts)
		return nil
	}
	switch trellis.CodeOf(err) {
	case trellis.CodeNotFound, trellis.CodeConflict:
		if len(stmts) == 1 {
			if f := r.plannable(ctx, path, stmts[0], err); f != nil {
				return f
			}
			r.note("step %s: %v", path, err)
			return nil
		}
		for _, st := range stmts {
			if f := r.apply(ctx, path, []string{st}); f != nil {
				return f
			}
		}
		return nil
	}
	return &Failure{Kind: "rejected", Step: path, Msg: fmt.Sprintf("%s: %v", script, err)}
}

// plannable fails a definition refused as naming something that does not
// exist (a source another statement dropped, which shrinking may cause)
// when PostgreSQL plans its SELECT all the same: the engine rewrote a
// query PostgreSQL accepts into one it rejects.
func (r *run) plannable(ctx context.Context, path, st string, err error) *Failure {
	kind, _, sel := splitDefinition(st)
	if kind != "create" || trellis.CodeOf(err) != trellis.CodeNotFound {
		return nil
	}
	conn, cerr := connectRetry(ctx, r.dsn)
	if cerr != nil {
		return nil // no verdict without a connection; the refusal stands as a note
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, perr := conn.Exec(ctx, "EXPLAIN "+sel); perr != nil {
		return nil
	}
	return &Failure{Kind: "rejected", Step: path, Msg: fmt.Sprintf("%s: refused, though PostgreSQL plans its SELECT: %v", st, err)}
}

func (r *run) applyRetry(ctx context.Context, script string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := r.tr.Apply(ctx, script)
		if err == nil || trellis.CodeOf(err) != trellis.CodeUnavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noteDefs tracks each transform's SELECT for the independent oracle.
func (r *run) noteDefs(stmts []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range stmts {
		kind, name, sel := splitDefinition(st)
		switch kind {
		case "create":
			if _, ok := r.defs[name]; !ok || !strings.Contains(strings.ToUpper(st), "IF NOT EXISTS") {
				r.defs[name] = sel
			}
		case "drop":
			delete(r.defs, name)
		}
	}
}

// splitDefinition recognises "CREATE TRANSFORM [IF NOT EXISTS] name AS sel"
// and "DROP TRANSFORM [IF EXISTS] name".
func splitDefinition(st string) (kind, name, sel string) {
	s := strings.TrimSpace(st)
	word := func() string {
		s = strings.TrimLeft(s, " \t\n")
		if strings.HasPrefix(s, `"`) {
			for i := 1; i < len(s); i++ {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						i++
						continue
					}
					w := s[:i+1]
					s = s[i+1:]
					return w
				}
			}
		}
		i := strings.IndexAny(s, " \t\n")
		if i < 0 {
			i = len(s)
		}
		w := s[:i]
		s = s[i:]
		return w
	}
	first, second := strings.ToUpper(word()), strings.ToUpper(word())
	if second != "TRANSFORM" {
		return "", "", ""
	}
	switch first {
	case "CREATE":
		n := word()
		if strings.ToUpper(n) == "IF" {
			word()
			word()
			n = word()
		}
		if strings.ToUpper(word()) != "AS" {
			return "", "", ""
		}
		return "create", unquote(n), strings.TrimSpace(s)
	case "DROP":
		n := word()
		if strings.ToUpper(n) == "IF" {
			word()
			n = word()
		}
		return "drop", unquote(n), ""
	}
	return "", "", ""
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// session is a writer's connection, reconnected after a failure.
type session struct {
	dsn   string
	setup []string
	conn  *pgx.Conn
}

func (s *session) get(ctx context.Context) (*pgx.Conn, error) {
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	conn, err := connectRetry(ctx, s.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	for _, st := range s.setup {
		if _, err := conn.Exec(ctx, st); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("%s: %w", st, err)
		}
	}
	s.conn = conn
	return conn, nil
}

func (s *session) close() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.conn.Close(ctx)
		cancel()
		s.conn = nil
	}
}

// logBuffer keeps the last lines written to it.
type logBuffer struct {
	mirror io.Writer
	mu     sync.Mutex
	max    int
	lines  []string
	part   string
}

func newLogBuffer(max int) *logBuffer { return &logBuffer{max: max} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mirror != nil {
		_, _ = b.mirror.Write(p)
	}
	s := b.part + string(p)
	parts := strings.Split(s, "\n")
	b.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		b.lines = append(b.lines, l)
	}
	if len(b.lines) > b.max {
		b.lines = append([]string(nil), b.lines[len(b.lines)-b.max:]...)
	}
	return len(p), nil
}

func (b *logBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.lines
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
