package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/plancache"
	"github.com/trellis-repl/trellis-repl/internal/retry"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/replication"
)

// runner is one Run: a capture (logical slot or triggers) feeding the
// local store, and one worker per transform re-deriving what the store
// marks dirty.
type runner struct {
	t *Host
	// plans are the transforms' decoded plans, for the periodic passes
	// over all of them (internal/plancache).
	plans plancache.Cache
	// planBytes keeps the stored plans reconcile lists (ListCached).
	planBytes catalog.PlanCache
	store     *checkpoint.Store
	obs       Observer
	capture   capture.Capture
	intake    *intake

	// lockConn is the session holding the runner lock; the run records
	// its start from it (so status can match the row to the holder) and
	// LISTENs on it.
	lockConn *pgx.Conn

	mu      sync.Mutex
	workers map[int64]*worker
	// appliers lends the workers the sessions they apply on (ADR 0028);
	// version is the server's, which the applier statements depend on.
	appliers sessionLender
	version  int

	confirmed atomic.Uint64

	// mode is the capture mode of this run; switchTo, once set, ends the
	// run to go on in another (loop returns it).
	mode     string
	switchTo chan *switchRequest
	// retention is the retention guard's last reading (nil: no limit, or
	// no slot), recorded with the heartbeat; its Since marks the episode
	// whose warning was logged.
	retention *catalog.Retention
	// states are the transforms as last reported to the observer, by id
	// (reconcile and heartbeat only, which run on one goroutine).
	states map[int64]reported
	// driftNow asks watchDrift for a check at once; reconcileNow asks for
	// a reconcile (a definition changed, or a worker moved its transform
	// to another state, which the observer is told of there).
	driftNow, reconcileNow chan struct{}
	// heartbeatFailing and reconcileFailing log failures of the periodic
	// heartbeat and reconcile once per episode, not every 500 ms.
	heartbeatFailing, reconcileFailing *retry.Episode
	// jobWake wakes the self-check job goroutine (selfcheck_run.go).
	jobWake chan struct{}
	// retire is trigger capture this run in logical mode still has to
	// remove (left by a switch from triggers whose removal would have
	// waited for a lock); reconcile retries it until it is gone.
	retire *capture.Trigger
	// removalWaits are the removals of capture waiting for a lock, by the
	// capture that reported them (removalsCurrent, removalsRetired);
	// removalWaitsWritten is what the catalog was last given (nil before
	// this run wrote them). Reconcile's goroutine only (and prepare's,
	// before it starts).
	removalWaits        map[string][]capture.Wait
	removalWaitsWritten []byte
	// retireFailing logs failures to remove retire once per episode.
	retireFailing *retry.Episode
	// server is the server this run started on (ADR 0039): a stream that
	// finds its slot gone compares the server it reaches with it.
	server catalog.Server
	// repairAsked: a disruption while streaming paused transforms that
	// --on-disruption=repair repairs once capture streams again.
	repairAsked atomic.Bool
	// reconciled is the catalog stamp the last complete reconcile read
	// before its list, and when (reconcile's goroutine only): a tick that
	// finds the same stamp has nothing to reconcile (reconcileIfChanged).
	reconciled struct {
		stamp catalog.Stamp
		at    time.Time
	}
	// backlogs are the backlog figures last reported to the observer,
	// by transform (heartbeat's goroutine only).
	backlogs map[int64]backlog
	// waitingWritten is each transform's backlog count as this run last
	// wrote it to the catalog (heartbeat's goroutine only).
	waitingWritten map[int64]int64
	// listed is the transform list the last reconcile read, which the
	// drift watch looks at instead of reading its own.
	listed atomic.Pointer[[]*catalog.Transform]
}

// The captures whose removals the runner records (runner.removalWaits).
const (
	removalsCurrent = "current" // the run's capture, Retain at each reconcile
	removalsRetired = "retired" // trigger capture after a switch to logical replication
)

// canSwitch reports whether the runner may leave logical capture for
// triggers by itself (--capture=auto).
func (r *runner) canSwitch() bool {
	return r.t.cfg.Capture == CaptureAuto && r.mode == capture.ModeLogical
}

// streamFunc streams a slot into a sink until ctx ends or capture fails;
// replication.Run is the only one outside tests.
type streamFunc = capture.StreamFunc

// switchRequest ends a run that must go on in another capture mode.
type switchRequest struct{ mode, reason string }

func (s *switchRequest) Error() string { return "switch capture to " + s.mode + ": " + s.reason }

// runMode runs in one capture mode until ctx ends, capture fails, the
// lock session is lost, or the runner asks for another mode (a
// *switchRequest). It calls running once capture is prepared and the
// workers start.
func (t *Host) runMode(ctx context.Context, lockConn *pgx.Conn, streamFn streamFunc, slot, mode, reason string, running func()) error {
	r := &runner{t: t, lockConn: lockConn, workers: map[int64]*worker{}, obs: t.obs, mode: mode, switchTo: make(chan *switchRequest, 1),
		states:   map[int64]reported{},
		driftNow: make(chan struct{}, 1), reconcileNow: make(chan struct{}, 1),
		heartbeatFailing: retry.NewEpisode(t.log, "heartbeat fails; retrying", "heartbeat recovered"),
		reconcileFailing: retry.NewEpisode(t.log, "reconcile transforms fails; retrying", "reconcile transforms recovered")}
	dir, err := t.dataDir(ctx)
	if err != nil {
		return err
	}
	store, err := checkpoint.OpenWith(dir, checkpoint.Options{Logger: t.log, SyncInterval: max(t.cfg.StoreSyncInterval, 0)})
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "open the local checkpoint store in %s: %v; use --data-dir to choose a writable directory", dir, err)
	}
	defer store.Close()
	r.store = store
	if err := t.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&r.version); err != nil {
		return terr.Wrap(terr.Unavailable, err, "read the server version: %v", err)
	}
	r.appliers = t.lender()
	defer r.appliers.close()
	t.ready.startRun(mode)
	logical := capture.NewLogical(capture.LogicalConfig{
		DSN: t.cfg.DSN, Slot: slot, Publication: t.publication(), OwnedPublication: t.cfg.Publication != "", Pool: t.pool,
		Position: store, Confirmed: r.confirmed.Load, ConfirmApplied: t.cfg.Confirm == ConfirmApplied,
		Stream: streamFn, OnReconnect: r.obs.Reconnected, Health: r.captureHealth, Logger: t.log,
	})
	drainConn := t.connConfig().Copy()
	drainConn.RuntimeParams["application_name"] = "trellis-repl capture"
	trigger := capture.NewTrigger(capture.TriggerConfig{
		Schema: t.cat.Schema, Pool: t.pool, Conn: drainConn, Position: store, Health: r.captureHealth, Logger: t.log,
		PollMin: t.cfg.TriggerPollInterval,
	})
	r.capture = logical
	if mode == capture.ModeTrigger {
		r.capture = trigger
	}
	t.log.Info("capture mode chosen", "mode", mode, "reason", reason)
	r.obs.CaptureModeChosen(mode)
	r.intake = newIntake(r, t.observed)
	if err := r.prepare(ctx, mode, reason, slot, logical, trigger); err != nil {
		return err
	}
	running()
	return r.loop(ctx, lockConn)
}

// SourceTables are the tables every transform reads (plans this version
// cannot read are skipped).
func SourceTables(ctx context.Context, q catalog.Querier, cat catalog.Catalog) ([]capture.Table, error) {
	ts, err := cat.List(ctx, q)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	var out []capture.Table
	for _, tr := range ts {
		if p, err := engine.Decode(tr.Plan); err == nil {
			out = append(out, plancache.CaptureTables(p)...)
		}
	}
	return out, nil
}

// appliedFloor is what the catalog says was applied (docs/architecture.md
// §3.6): the lowest position a live transform has applied up to (0 when
// none is live), whether every live transform has recorded one, and
// whether a transform is building. A lost store is harmless only while
// capture still holds everything after that position.
func appliedFloor(ts []*catalog.Transform) (least uint64, complete, building bool) {
	complete = true
	for _, tr := range ts {
		switch tr.State {
		case catalog.StateLive:
			if tr.AppliedLSN == 0 {
				complete = false
			} else if least == 0 || tr.AppliedLSN < least {
				least = tr.AppliedLSN
			}
		case catalog.StateBackfilling:
			building = true
		}
	}
	return least, complete, building
}

// publication is the publication logical capture reads: the owner-managed
// one given, else the instance's own.
func (t *Host) publication() string {
	if t.cfg.Publication != "" {
		return t.cfg.Publication
	}
	return t.cat.PublicationName()
}

// chooseCapture picks the capture mode and says why: --capture=logical and
// trigger are taken as given (logical refused where it cannot work), auto
// takes logical replication where the server and role allow it.
func (t *Host) chooseCapture(ctx context.Context, slot string) (mode, reason string, err error) {
	if t.cfg.Capture == CaptureTrigger {
		return capture.ModeTrigger, "--capture=trigger was given", nil
	}
	opts := []replication.CheckOption{replication.WithSlot(slot), replication.WithPublication(t.publication())}
	if t.cfg.Capture == CaptureAuto {
		opts = append(opts, replication.WithReplicationProbe(t.cfg.DSN))
	}
	avail, err := replication.Check(ctx, t.pool, opts...)
	if err != nil {
		return "", "", terr.Wrap(terr.Unavailable, err, "check logical replication: %v", err)
	}
	if avail.Possible() {
		if t.cfg.Capture == CaptureLogical {
			return capture.ModeLogical, "--capture=logical was given", nil
		}
		if t.cfg.Publication == "" {
			// The instance's own publication needs ownership of the sources;
			// where the role has only TRIGGER on them, triggers work.
			tables, err := SourceTables(ctx, t.pool, t.cat)
			if err != nil {
				return "", "", err
			}
			pub, trig, blocker, err := capture.Capturable(ctx, t.pool, tables)
			if err != nil {
				return "", "", terr.Wrap(terr.Unavailable, err, "%v", err)
			}
			if !pub && trig {
				return capture.ModeTrigger, fmt.Sprintf("logical replication is available, but role %q may not publish %s and has the TRIGGER privilege on every source; capturing with triggers (or give --publication of a publication the owner manages)", avail.Role, blocker), nil
			}
		}
		return capture.ModeLogical, "logical replication is available", nil
	}
	if t.cfg.Capture == CaptureLogical {
		return "", "", terr.New(terr.Unavailable, "%s Or run with --capture=trigger (or auto) to capture with triggers.", avail.Reason())
	}
	return capture.ModeTrigger, avail.Reason() + " Capturing with triggers instead.", nil
}

// dataDir is the configured directory, else one per database and schema.
func (t *Host) dataDir(ctx context.Context) (string, error) {
	if t.cfg.DataDir != "" {
		return t.cfg.DataDir, nil
	}
	var sysid string
	var dboid uint32
	if err := t.pool.QueryRow(ctx, `SELECT system_identifier::text, (SELECT oid FROM pg_database WHERE datname = current_database())
		FROM pg_control_system()`).Scan(&sysid, &dboid); err != nil {
		return "", terr.Wrap(terr.Unavailable, err, "identify the database: %v", err)
	}
	return filepath.Join("trellis-repl-data", fmt.Sprintf("%s-%d-%s", sysid, dboid, t.cat.Schema)), nil
}

// prepare readies the capture, restarts builds or pauses (or repairs)
// transforms as continuity with the previous run requires, and records the
// start and the server it ran on.
func (r *runner) prepare(ctx context.Context, mode, reason, slot string, logical *capture.Logical, trigger *capture.Trigger) error {
	t := r.t
	inst, err := t.cat.GetInstance(ctx, t.pool)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	ranBefore := inst.StoreID != ""
	change, err := r.judge(ctx, inst)
	if err != nil {
		return err
	}
	tables, err := SourceTables(ctx, t.pool, t.cat)
	if err != nil {
		return err
	}
	ts, err := t.cat.List(ctx, t.pool)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	applied, complete, building := appliedFloor(ts)
	prev := capture.Continuity{
		RanBefore:       ranBefore,
		StoreLost:       ranBefore && (r.store.Created() || r.store.StoreID() != inst.StoreID),
		ConfirmApplied:  t.cfg.Confirm == ConfirmApplied,
		Applied:         applied,
		AppliedComplete: complete,
		Building:        building,
		Tables:          tables,
	}
	if change != nil {
		prev.Changed = change.Sentence
	}
	var switched capture.Prepared
	if inst.CaptureMode != "" && inst.CaptureMode != mode {
		if switched, err = r.switchCapture(ctx, inst.CaptureMode, mode, prev, logical, trigger); err != nil {
			return err
		}
		// The switch judged continuity; the new path starts afresh.
		prev.RanBefore, prev.StoreLost = false, false
	}
	p, err := r.capture.Prepare(ctx, prev)
	if err != nil {
		return err
	}
	if p.Disruption == "" {
		p.Disruption = switched.Disruption
	}
	p.RestartBuilds = p.RestartBuilds || switched.RestartBuilds
	if p.RestartBuilds {
		for _, tr := range ts {
			if tr.State == catalog.StateBackfilling {
				if _, err := t.cat.SetState(ctx, t.pool, tr.ID, catalog.StateBackfilling, catalog.StateWaiting); err != nil {
					return err
				}
				if err := t.cat.SetBuildCursor(ctx, t.pool, tr.ID, 0, nil); err != nil {
					return err
				}
			}
		}
	}
	switch {
	case p.Disruption != "":
		// No worker runs yet: a transform still waiting for its build will
		// install its capture as it is now, so it missed nothing
		// (typically one RESUMEd just before this start).
		if err := r.disrupt(ctx, p.Disruption); err != nil {
			return err
		}
	case t.cfg.OnDisruption == DisruptRepair:
		// Transforms an earlier disruption paused (under pause, or while
		// streaming) are repaired now that capture is in place.
		if err := r.repairAll(ctx, ""); err != nil {
			return err
		}
	}
	r.confirmed.Store(p.Confirmed)
	if mode == capture.ModeLogical {
		// Trigger capture a switch (this one or an earlier run's) could not
		// remove for a lock: reconcile removes it. Nothing when there is none.
		r.retire = trigger
	} else {
		slot = ""
	}
	// From the lock session, so runner_pid is the lock holder's backend.
	if err := t.cat.StartInstance(ctx, r.lockConn, r.store.StoreID(), t.cfg.Confirm, mode, reason, slot); err != nil {
		return terr.Wrap(terr.Unavailable, err, "record runner start: %v", err)
	}
	if err := r.recordServer(ctx, r.server); err != nil {
		return err
	}
	t.ready.beat(nil)
	return nil
}

// captureHealth follows capture (capture.HealthFunc): readiness, and
// every failure counted as a capture error.
func (r *runner) captureHealth(up bool, reason string) {
	if !up {
		r.obs.Error(ErrorCapture)
	}
	r.t.ready.captured(up, reason)
	if up && r.repairAsked.Load() {
		signal(r.reconcileNow) // the reconcile goroutine repairs (repairPending)
	}
}

func (r *runner) loop(ctx context.Context, lockConn *pgx.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	poke := func() { signal(r.reconcileNow) }
	if _, err := lockConn.Exec(ctx, "LISTEN "+pgx.Identifier{r.t.cat.NotifyChannel()}.Sanitize()); err != nil {
		return terr.Wrap(terr.Unavailable, err, "listen: %v", err)
	}
	if err := r.reconcile(ctx); err != nil {
		return err
	}
	// Report at once, not 500 ms from now: a scrape right after the start
	// finds the slot and position series.
	r.updateConfirmed()
	r.heartbeat(ctx)
	r.startSelfChecks(ctx, &wg)
	wg.Add(6)
	go func() { // idle transforms' positions (ADR 0044)
		defer wg.Done()
		r.advanceIdle(ctx)
	}()
	go func() { // DDL on what transforms read
		defer wg.Done()
		r.watchDrift(ctx)
	}()
	go func() { // definition changes
		defer wg.Done()
		for {
			if _, err := lockConn.WaitForNotification(ctx); err != nil {
				if ctx.Err() == nil {
					errc <- terr.Wrap(terr.Unavailable, err, "lost the runner connection: %v", err)
				}
				return
			}
			poke()
			signal(r.jobWake)
		}
	}()
	go func() { // reconcile, confirm, heartbeat, idle progress
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		// The idle positions and the backlog counts are written by this
		// one goroutine: each statement updates many progress rows, and
		// two of them at once could lock them in opposite orders.
		progress := time.NewTicker(r.t.cfg.ProgressInterval)
		defer progress.Stop()
		var lastIdle time.Time
		idle := retry.NewEpisode(r.t.log, "record the progress of idle transforms fails; retrying", "record the progress of idle transforms recovered")
		for {
			asked := false // a reconcile asked for, not a tick's
			select {
			case <-ctx.Done():
				return
			case <-progress.C:
				r.recordIdleProgress(ctx, idle, nil)
				lastIdle = time.Now()
				continue
			case <-r.t.hurry:
				// A wait in this process finds transforms behind: their
				// idle positions now, not at the next interval, at most
				// one statement per hurryEvery (ADR 0044).
				if d := hurryEvery - time.Since(lastIdle); d > 0 && !retry.Sleep(ctx, d) {
					return
				}
				if ids := r.t.takeHurried(); len(ids) > 0 {
					r.recordIdleProgress(ctx, idle, ids)
					lastIdle = time.Now()
				}
				continue
			case <-r.reconcileNow:
				asked = true
			case <-tick.C:
				r.updateConfirmed()
				r.heartbeat(ctx)
			}
			if r.t.ready.capturing() {
				r.repairPending(ctx)
			}
			reconcile := r.reconcile
			if !asked {
				reconcile = r.reconcileIfChanged
			}
			if err := reconcile(ctx); err != nil {
				if ctx.Err() == nil {
					r.reconcileFailing.Fail(err, 500*time.Millisecond)
				}
			} else {
				r.reconcileFailing.Recover()
			}
		}
	}()
	go func() { // visibility list pruning
		defer wg.Done()
		r.pruneVisibility(ctx)
	}()

	go func() { // the slot stream
		defer wg.Done()
		errc <- r.stream(ctx)
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	case sw := <-r.switchTo:
		err = sw
	}
	cancel()
	r.mu.Lock()
	for _, w := range r.workers {
		w.stop()
	}
	r.mu.Unlock()
	wg.Wait()
	if ferr := r.intake.close(); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// stream runs the capture into the intake; a disruption pauses every
// transform (they must be rebuilt) before capture goes on.
func (r *runner) stream(ctx context.Context) error {
	return r.capture.Stream(ctx, r.intake, func(ctx context.Context, d capture.Disruption) error {
		// A slot gone may mean the server is another one (a proxy or DNS
		// switched the primary while the run went on): end the run, and its
		// start again judges the server (ADR 0039).
		if _, ch, err := judgeServer(ctx, r.t.pool, &r.server, 0); errors.Is(err, errInRecovery) {
			return err
		} else if err == nil && ch != nil {
			return &errServerChanged{change: ch}
		}
		// Unready until capture streams again (readiness.captured).
		r.t.ready.disrupted(d.Reason)
		if err := r.pauseAll(ctx, d.Reason, false); err != nil {
			return err
		}
		r.repairWhenCaptured()
		// Under --capture=auto a lost slot is not made again: triggers
		// cannot lose their position.
		if r.canSwitch() {
			return &switchRequest{mode: capture.ModeTrigger, reason: "the replication slot was lost (" + d.Reason + "); --capture=auto goes on with triggers"}
		}
		return nil
	})
}

// updateConfirmed decides what the slot may be confirmed up to.
func (r *runner) updateConfirmed() {
	recv := r.store.ReceivedLSN()
	c := recv
	if r.t.cfg.Confirm == ConfirmApplied {
		r.mu.Lock()
		for _, w := range r.workers {
			if p := w.persisted.Load(); p < c {
				c = p
			}
		}
		r.mu.Unlock()
	}
	if c > r.confirmed.Load() {
		r.confirmed.Store(c)
		_ = r.store.SetConfirmedLSN(c)
	}
	r.obs.PositionsUpdated(recv, r.confirmed.Load())
}

// guardRetention warns once per episode when the slot retains more WAL than
// --max-retained-wal, and under --capture=auto switches to triggers, which
// retain none. Its reading goes to the observer and, with the heartbeat,
// to the catalog, where status shows it.
func (r *runner) guardRetention(retained int64) {
	limit := r.t.cfg.MaxRetainedWAL
	if limit <= 0 {
		return
	}
	prev := r.retention
	cur := &catalog.Retention{RetainedBytes: retained, LimitBytes: limit, OverLimit: retained > limit}
	r.retention = cur
	if !cur.OverLimit {
		if prev != nil && prev.OverLimit {
			r.t.log.Info("retained WAL is back under --max-retained-wal", "retained_bytes", retained, "limit_bytes", limit)
		}
		r.obs.RetentionChecked(*cur)
		return
	}
	if prev != nil && prev.OverLimit {
		cur.Since = prev.Since
	} else {
		now := time.Now().UTC()
		cur.Since = &now
		r.t.log.Warn("the replication slot retains more WAL than --max-retained-wal", "retained_bytes", retained, "limit_bytes", limit)
	}
	r.obs.RetentionChecked(*cur)
	if r.canSwitch() {
		select {
		case r.switchTo <- &switchRequest{mode: capture.ModeTrigger,
			reason: fmt.Sprintf("the replication slot retained %d bytes of WAL, more than --max-retained-wal (%d); --capture=auto goes on with triggers", retained, limit)}:
		default:
		}
	}
}

// slotReader is a capture with a replication slot, read for the slot
// metrics and the retention guard.
type slotReader interface {
	SlotState(ctx context.Context) (replication.Slot, error)
}

// heartbeat records the runner's positions in the catalog and reports the
// slot, each transform's backlog, held keys and apply lag.
func (r *runner) heartbeat(ctx context.Context) {
	if sr, ok := r.capture.(slotReader); ok {
		if s, err := sr.SlotState(ctx); err == nil {
			r.obs.SlotRead(SlotStats{Exists: s.Exists, RetainedBytes: s.RetainedWALBytes, ConfirmLagBytes: s.ConfirmLagBytes,
				WALStatus: s.WALStatus, SafeWALSize: s.SafeWALSize})
			if s.Exists && s.RetainedWALBytes >= 0 {
				r.guardRetention(s.RetainedWALBytes)
			} else if !s.Exists {
				r.retention = nil // a missing slot retains nothing
			}
		}
	} else {
		r.retention = nil // no slot, nothing retained
	}
	err := r.t.cat.Heartbeat(ctx, r.t.pool, r.store.ReceivedLSN(), r.confirmed.Load(), r.retention)
	if ctx.Err() != nil {
		return
	}
	r.t.ready.beat(err)
	r.obs.ReadinessChanged(r.t.Readiness().Ready)
	if err != nil {
		r.heartbeatFailing.Fail(err, 500*time.Millisecond)
		return
	}
	r.heartbeatFailing.Recover()
	ws := r.workerList()
	// Each transform's backlog, read from the store once for the catalog
	// and the observer (r.states holds every running worker's transform:
	// reconcile reports states after it starts workers).
	pending := make(map[int64]int64, len(r.states))
	for id := range r.states {
		if n, err := r.store.Pending(id); err == nil {
			pending[id] = n
		}
	}
	r.recordKeysWaiting(ctx, ws, pending)
	r.reportBacklog(ctx, ws, pending)
}

// recordKeysWaiting records in the catalog the backlog counts that moved
// since this run last wrote them (runner.waitingWritten), in one
// statement, and none when none moved: an idle instance does not send
// every transform's count every heartbeat.
func (r *runner) recordKeysWaiting(ctx context.Context, ws []*worker, pending map[int64]int64) {
	next := make(map[int64]int64, len(ws))
	var ids, ns []int64
	for _, w := range ws {
		n, ok := pending[w.id]
		if !ok {
			continue
		}
		if old, ok := r.waitingWritten[w.id]; ok && old == n {
			next[w.id] = n
			continue
		}
		ids, ns = append(ids, w.id), append(ns, n)
	}
	if held, err := r.t.cat.SetKeysWaiting(ctx, r.t.pool, ids, ns); err == nil {
		at := make(map[int64]int, len(ids))
		for i, id := range ids {
			at[id] = i
		}
		for _, id := range held {
			next[id] = ns[at[id]]
		}
	}
	r.waitingWritten = next
}

// hurryEvery is the least time between two records of idle positions
// asked for by waits in this process (Host.HurryProgress).
const hurryEvery = 5 * time.Millisecond

// recordIdleProgress records, in one statement for the whole instance,
// the applied positions workers reached without writing (worker.reached):
// called once per ProgressInterval, an idle instance costs the primary
// one statement per interval whatever the number of transforms. only, when
// not nil, limits it to those transforms (a wait's).
func (r *runner) recordIdleProgress(ctx context.Context, failing *retry.Episode, only map[int64]bool) {
	var ids []int64
	var lsns []uint64
	var ws []*worker
	for _, w := range r.workerList() {
		if only != nil && !only[w.id] {
			continue
		}
		if l := w.reached.Load(); l > w.persisted.Load() {
			ids, lsns, ws = append(ids, w.id), append(lsns, l), append(ws, w)
		}
	}
	if len(ids) == 0 {
		return
	}
	held, err := r.t.cat.RecordIdleProgress(ctx, r.t.pool, ids, lsns)
	if err != nil {
		if ctx.Err() == nil {
			failing.Fail(err, r.t.cfg.ProgressInterval)
		}
		return
	}
	failing.Recover()
	// Only the rows the statement held are recorded: one another
	// transaction held (a DROP, an apply) stays due for the next call.
	isHeld := make(map[int64]bool, len(held))
	for _, id := range held {
		isHeld[id] = true
	}
	for i, w := range ws {
		if isHeld[w.id] {
			w.recorded(lsns[i])
		}
	}
	r.t.progressed.fire()
}

// idleAdvanceEvery is the least time between two passes of advanceIdle:
// under one row per commit the recorded position moves after every group
// commit, and a pass per move would cost a lock per worker per commit.
const idleAdvanceEvery = 5 * time.Millisecond

// advanceIdle moves the applied position of every parked worker whose
// dirty set is empty to the store's RecordedLSN as it moves, in one pass
// for all of them, instead of each worker waking to find its set empty
// (ADR 0044).
func (r *runner) advanceIdle(ctx context.Context) {
	failing := retry.NewEpisode(r.t.log, "advance the positions of idle transforms fails; retrying", "advance the positions of idle transforms recovered")
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.store.RecordedMoved():
		}
		// Read before any worker's set is looked at: an empty set then
		// means every change at or below upTo was applied.
		upTo := r.store.RecordedLSN()
		var err error
		for _, w := range r.workerList() {
			if werr := w.advanceIdle(upTo); werr != nil {
				err = werr
			}
		}
		if err != nil {
			failing.Fail(err, idleAdvanceEvery)
		} else {
			failing.Recover()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(idleAdvanceEvery):
		}
	}
}

// workerList is a snapshot of the running workers.
func (r *runner) workerList() []*worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		ws = append(ws, w)
	}
	return ws
}

// endWorker ends transform id's worker, if one runs, and asks for a
// reconcile: reconcile replaces an ended worker of a transform that is not
// frozen, removing its routes and adding them again before it starts.
func (r *runner) endWorker(id int64) {
	r.mu.Lock()
	if w := r.workers[id]; w != nil {
		w.stop()
	}
	r.mu.Unlock()
	signal(r.reconcileNow)
}

// reconcile starts workers for transforms that should run and stops the
// others, and removes capture from tables nobody reads.
func (r *runner) reconcile(ctx context.Context) error {
	// Read before the list: a change after it shows in the next stamp.
	stamp, err := r.t.cat.Stamp(ctx, r.t.pool)
	if err != nil {
		return err
	}
	return r.reconcileFrom(ctx, stamp)
}

// reconcileFrom is reconcile with the catalog stamp read before it.
func (r *runner) reconcileFrom(ctx context.Context, stamp catalog.Stamp) error {
	// Plans only of rows that changed: during a build its progress moves
	// the stamp every tick, and every plan would travel each time.
	ts, err := r.t.cat.ListCached(ctx, r.t.pool, &r.planBytes)
	if err != nil {
		return err
	}
	r.listed.Store(&ts)
	want := map[int64]*catalog.Transform{}
	var needed []capture.Table
	complete := true
	r.plans.Keep(ts)
	for _, tr := range ts {
		if e, err := r.plans.Get(tr); err == nil {
			needed = append(needed, e.Tables...)
		} else {
			// A plan this version cannot read: remove no capture it may need.
			complete = false
		}
		if !catalog.Frozen(tr.State) {
			want[tr.ID] = tr
		}
	}
	r.mu.Lock()
	var stopped []*worker
	for id, w := range r.workers {
		if _, ok := want[id]; !ok {
			w.stop()
			delete(r.workers, id)
			stopped = append(stopped, w)
		}
	}
	for id, tr := range want {
		if w, ok := r.workers[id]; ok && w.exited() {
			// The worker paused its transform and ended; a RESUME since
			// (seen together with the pause) needs a new one.
			delete(r.workers, id)
			r.intake.removeRoute(id)
		} else if ok {
			if tr.State != catalog.StateLive {
				// Only the worker makes a transform live; any other state
				// under a running worker is a RESUME it has not seen.
				w.catalogChanged()
				w.notify()
			}
			// A live worker is woken by what gives it work, and its idle
			// position moves without it (ADR 0044).
			continue
		}
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		anc, err := ancestorsOf(ctx, r.t.pool, p)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		w := newWorker(r, tr, p)
		w.resume = define.ResumeName(ts, tr)
		r.workers[id] = w
		w.lag = r.intake.addRoute(id, p, anc)
		w.start(ctx)
	}
	r.mu.Unlock()
	for _, w := range stopped {
		w.wait()
		r.intake.removeRoute(w.id)
		if still, _ := r.t.cat.GetByID(ctx, r.t.pool, w.id); still == nil {
			if err := r.store.DropTransform(w.id); err != nil {
				return err
			}
		}
	}
	// After the stopped workers ended: none reports on a transform whose
	// series were just removed.
	r.reportStates(ts)
	if err := r.releaseKeys(ctx); err != nil {
		return err
	}
	if r.retire != nil {
		// A logical run reads nothing through triggers: no plan decides
		// what of them stays, and a failure to remove them stops no other
		// work.
		done, err := r.retire.Remove(ctx, r.removalsOf(ctx, removalsRetired))
		if r.retireFailing == nil {
			r.retireFailing = retry.NewEpisode(r.t.log, "remove the trigger capture left by the switch to logical replication fails; retried at each reconcile",
				"remove the trigger capture left by the switch to logical replication recovered")
		}
		switch {
		case err != nil && ctx.Err() == nil:
			r.retireFailing.Fail(err, 500*time.Millisecond)
		case err == nil:
			r.retireFailing.Recover()
			if done {
				r.retire = nil
			}
		}
	}
	if !complete {
		return nil
	}
	if err := r.capture.Retain(ctx, needed, r.removalsOf(ctx, removalsCurrent)); err != nil {
		return err
	}
	r.reconciled.stamp, r.reconciled.at = stamp, time.Now()
	return nil
}

// removalsOf records what capture (removalsCurrent or removalsRetired)
// reports of its removals waiting for a lock (capture.RemovalsFunc): the
// instance's capture_waits, in status, are every capture's, written only
// when they changed (a blocker's state or query counts).
func (r *runner) removalsOf(ctx context.Context, from string) capture.RemovalsFunc {
	return func(ws []capture.Wait) {
		if r.removalWaits == nil {
			r.removalWaits = map[string][]capture.Wait{}
		}
		r.removalWaits[from] = ws
		var all []capture.Wait
		for _, k := range []string{removalsCurrent, removalsRetired} {
			all = append(all, r.removalWaits[k]...)
		}
		var v any
		b := []byte("null")
		if len(all) > 0 {
			slices.SortStableFunc(all, func(a, b capture.Wait) int { return strings.Compare(a.Table, b.Table) })
			v = all
			var err error
			if b, err = json.Marshal(all); err != nil {
				r.t.log.Debug("encode capture waits", "err", err)
				return
			}
		}
		if r.removalWaitsWritten != nil && bytes.Equal(b, r.removalWaitsWritten) {
			return
		}
		if err := r.t.cat.SetCaptureWaits(context.WithoutCancel(ctx), r.t.pool, v); err != nil {
			// Written again at the next reconcile; a catalog that fails is
			// reported once, by the heartbeat's episode.
			r.t.log.Debug("record capture waits", "err", err)
			return
		}
		r.removalWaitsWritten = b
	}
}

// installCapture captures the transform's sources; when it returns, a
// build reading them misses nothing capture will not also deliver
// (docs/architecture.md §3.5, ADR 0007).
// While a lock on a source is waited for, the transform's capture_wait
// says so.
func (r *runner) installCapture(ctx context.Context, id int64, p *engine.Plan) error {
	err := r.capture.Install(ctx, plancache.CaptureTables(p), func(w *capture.Wait) {
		var v any
		if w != nil {
			v = w
		}
		if err := r.t.cat.SetCaptureWait(context.WithoutCancel(ctx), r.t.pool, id, v); err != nil {
			// Called at every attempt of the wait: a catalog that fails
			// is reported once, by the heartbeat's episode.
			r.t.log.Debug("record capture wait", "err", err)
		}
	})
	if err != nil {
		return err
	}
	// The build reads the partitions there are now; later ones are
	// corrections (ADR 0015).
	return r.recordPartitions(ctx, p)
}

// pruneVisibility drops visibility entries of transactions that new
// snapshots already see, so appliers check only recent ones. Each drain
// resolves the entries its apply saw visible; this is the backstop for
// entries no drain passes (every transform paused, building or idle), so
// it runs seldom: at 20 ms its query was 17 % of the runner's CPU under
// TPC-B (ADR 0021).
func (r *runner) pruneVisibility(ctx context.Context) {
	tick := time.NewTicker(pruneInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pend, err := r.store.PendingXids(math.MaxUint64, 10000)
		if err != nil || len(pend) == 0 {
			continue
		}
		xids := make([]uint32, len(pend))
		for i, e := range pend {
			xids[i] = e.Xid
		}
		vis, err := engine.VisibleNow(ctx, r.t.pool, xids)
		if err != nil {
			continue
		}
		var upTo uint64
		for _, e := range pend {
			if !vis[e.Xid] {
				break
			}
			upTo = e.LSN
		}
		if upTo > 0 {
			_ = r.store.ResolveXids(upTo)
		}
	}
}

// pruneInterval is how often pruneVisibility runs.
const pruneInterval = 250 * time.Millisecond
