package trellis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/replication"
)

// runner is one Run: the slot stream feeding the local store, and one worker
// per transform re-deriving what the store marks dirty.
type runner struct {
	t       *Trellis
	store   *checkpoint.Store
	metrics *Metrics
	slot    string
	pub     string
	intake  *intake
	// streamFn is the slot stream: replication.Run, except in tests that
	// need a failure the server cannot produce on demand.
	streamFn streamFunc

	mu      sync.Mutex
	workers map[int64]*worker

	confirmed atomic.Uint64
	captureMu sync.Mutex // serialises publication changes and fences
}

// streamFunc streams a slot into a sink until ctx ends or capture fails;
// replication.Run is the only one outside tests.
type streamFunc func(ctx context.Context, cfg replication.Config, sink decode.Sink) error

// Run maintains every transform until ctx ends: it captures changes from
// the instance's replication slot, builds new transforms and keeps live ones
// exact. Only one Run per instance schema may be active; a second one
// fails with code conflict.
func (t *Trellis) Run(ctx context.Context) error { return t.run(ctx, replication.Run) }

// run is Run with the slot stream as a parameter, so tests can inject
// capture failures (an undecodable slot) that a real server cannot be
// made to produce on demand.
func (t *Trellis) run(ctx context.Context, streamFn streamFunc) error {
	lockConn, err := pgx.ConnectConfig(ctx, t.connConfig())
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "connect: %v", err)
	}
	defer func() {
		// Release explicitly: a closed connection's backend may outlive
		// Close briefly, and a restart right after must find the lock free.
		_, _ = lockConn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext($1))`, t.cat.LockKey())
		lockConn.Close(context.Background())
	}()
	var got bool
	for attempt := 0; ; attempt++ {
		if err := lockConn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, t.cat.LockKey()).Scan(&got); err != nil {
			return terr.Wrap(terr.Unavailable, err, "take the runner lock: %v", err)
		}
		// A runner that just died may hold the lock until its backend exits.
		if got || attempt >= 20 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if !got {
		return terr.New(terr.Conflict, "another `trellis-repl run` is already maintaining instance %q on this database; stop it first (one runner per instance)", t.cat.Schema)
	}
	switch t.cfg.Capture {
	case CaptureTrigger:
		return terr.New(terr.Unavailable, "trigger capture is not available in this version; use --capture=logical (requires wal_level=logical and the REPLICATION attribute)")
	}
	avail, err := replication.Check(ctx, t.pool)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "check logical replication: %v", err)
	}
	reason := "logical replication is available"
	if !avail.Possible() {
		if t.cfg.Capture == CaptureAuto {
			return terr.New(terr.Unavailable, "logical capture is not possible here (%s) and trigger capture is not available in this version; fix the server settings above", avail.Reason())
		}
		return terr.New(terr.Unavailable, "logical capture is not possible: %s", avail.Reason())
	}
	var dbOID uint32
	if err := t.pool.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dbOID); err != nil {
		return terr.Wrap(terr.Unavailable, err, "identify the database: %v", err)
	}
	r := &runner{t: t, slot: t.cat.SlotName(dbOID), pub: t.cat.PublicationName(), workers: map[int64]*worker{}, metrics: t.cfg.Metrics, streamFn: streamFn}
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	dir, err := t.dataDir(ctx)
	if err != nil {
		return err
	}
	store, err := checkpoint.Open(dir, t.log)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "open the local checkpoint store in %s: %v; use --data-dir to choose a writable directory", dir, err)
	}
	defer store.Close()
	r.store = store
	if err := r.prepareSlot(ctx, reason); err != nil {
		return err
	}
	r.intake = newIntake(r)
	return r.loop(ctx, lockConn)
}

// dataDir is the configured directory, else one per database and schema.
func (t *Trellis) dataDir(ctx context.Context) (string, error) {
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

// prepareSlot makes sure publication and slot exist, decides where to
// resume, and detects lost continuity (docs/architecture.md §3.6, §3.9).
func (r *runner) prepareSlot(ctx context.Context, reason string) error {
	t := r.t
	if _, err := replication.EnsurePublication(ctx, t.pool, r.pub); err != nil {
		return terr.Wrap(terr.Unavailable, err, "create publication %q: %v; the role needs CREATE on the database", r.pub, err)
	}
	inst, err := t.cat.GetInstance(ctx, t.pool)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	ranBefore := inst.StoreID != ""
	// A runner killed while creating the slot leaves its backend finishing
	// the creation: wait for the slot's start, or the transforms would be
	// built before it and miss the commits in between.
	slot, err := replication.AwaitSlot(ctx, t.pool, r.slot)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "read slot %q: %v", r.slot, err)
	}
	var disruption string
	if slot.Exists && slot.WALStatus == "lost" {
		disruption = fmt.Sprintf("replication slot %q was invalidated (the server removed WAL it needed; see max_slot_wal_keep_size)", r.slot)
		if err := replication.DropSlot(ctx, t.pool, r.slot); err != nil {
			return terr.Wrap(terr.Unavailable, err, "drop invalidated slot: %v", err)
		}
		slot.Exists = false
	} else if !slot.Exists && ranBefore {
		disruption = fmt.Sprintf("replication slot %q disappeared (dropped, or lost in a failover or restore)", r.slot)
	}
	freshSlot := false
	if !slot.Exists {
		_, lsn, err := replication.EnsureSlot(ctx, t.pool, r.slot)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "create replication slot %q: %v", r.slot, err)
		}
		slot.ConfirmedFlush = lsn
		freshSlot = true
	}
	storeLost := ranBefore && (r.store.Created() || r.store.StoreID() != inst.StoreID)
	start := r.store.ReceivedLSN()
	if storeLost || freshSlot || start == 0 {
		start = uint64(slot.ConfirmedFlush)
		if storeLost && !freshSlot && t.cfg.Confirm == ConfirmApplied {
			// The slot was confirmed only up to what was applied: resume from
			// there; transforms still building restart their build.
			ts, err := t.cat.List(ctx, t.pool)
			if err != nil {
				return terr.Wrap(terr.Unavailable, err, "%v", err)
			}
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
		} else if storeLost && disruption == "" {
			disruption = fmt.Sprintf("the local checkpoint store is not the one this instance last used (lost or replaced) and --confirm=%s confirmed the slot past what was applied", t.cfg.Confirm)
		}
		if err := r.store.AdvanceReceived(start); err != nil {
			return err
		}
		if err := r.store.Flush(); err != nil {
			return err
		}
	} else if uint64(slot.ConfirmedFlush) > start {
		// Under --confirm=applied the slot is confirmed only up to what every
		// running transform applied, so a stale store (an older copy) is
		// harmless: resume at the slot. Under local it means lost changes.
		if t.cfg.Confirm != ConfirmApplied {
			disruption = fmt.Sprintf("replication slot %q is confirmed at %s, past the local checkpoint %s (the checkpoint store is stale, or the slot was advanced or recreated)",
				r.slot, catalog.FormatLSN(uint64(slot.ConfirmedFlush)), catalog.FormatLSN(start))
		}
		if err := r.store.AdvanceReceived(uint64(slot.ConfirmedFlush)); err != nil {
			return err
		}
		if err := r.store.Flush(); err != nil {
			return err
		}
	}
	if disruption != "" {
		// No worker runs yet: a transform still waiting for its build will
		// install its capture on the slot as it is now, so it missed nothing
		// (typically one RESUMEd just before this start).
		if err := r.pauseAll(ctx, disruption, true); err != nil {
			return err
		}
	}
	// Start from what the slot already has: under --confirm=applied the
	// received position may be ahead of what is applied.
	r.confirmed.Store(uint64(slot.ConfirmedFlush))
	if err := t.cat.StartInstance(ctx, t.pool, r.store.StoreID(), t.cfg.Confirm, CaptureLogical, reason, r.slot); err != nil {
		return terr.Wrap(terr.Unavailable, err, "record runner start: %v", err)
	}
	return nil
}

// pauseAll pauses every transform with a disruption; with skipWaiting,
// not those waiting for their build. Only safe while no worker runs: a
// running worker may be between installing its capture and building.
func (r *runner) pauseAll(ctx context.Context, why string, skipWaiting bool) error {
	ts, err := r.t.cat.List(ctx, r.t.pool)
	if err != nil {
		return err
	}
	for _, tr := range ts {
		if tr.State == catalog.StatePaused || skipWaiting && tr.State == catalog.StateWaiting {
			continue
		}
		f := &catalog.Failure{Kind: catalog.FailureDisruption, DetectedAt: time.Now().UTC(),
			Error: why + "; changes may have been missed, so the target may be stale: RESUME TRANSFORM " + tr.Name + " rebuilds it"}
		if err := r.t.cat.Pause(ctx, r.t.pool, tr.ID, "system", f); err != nil {
			return err
		}
		r.t.log.Error("transform paused: capture disruption", "transform", tr.Name, "reason", why)
	}
	return nil
}

func (r *runner) loop(ctx context.Context, lockConn *pgx.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	reconcile := make(chan struct{}, 1)
	poke := func() {
		select {
		case reconcile <- struct{}{}:
		default:
		}
	}
	if _, err := lockConn.Exec(ctx, "LISTEN "+pgx.Identifier{r.t.cat.NotifyChannel()}.Sanitize()); err != nil {
		return terr.Wrap(terr.Unavailable, err, "listen: %v", err)
	}
	if err := r.reconcile(ctx); err != nil {
		return err
	}
	wg.Add(4)
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
		}
	}()
	go func() { // reconcile, confirm, heartbeat
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-reconcile:
			case <-tick.C:
				r.updateConfirmed()
				r.heartbeat(ctx)
			}
			if err := r.reconcile(ctx); err != nil && ctx.Err() == nil {
				r.t.log.Warn("reconcile transforms", "err", err)
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

// stream runs the replication connection, recovering from a lost slot by
// pausing the transforms (disruption) and starting a new slot.
func (r *runner) stream(ctx context.Context) error {
	for {
		err := r.streamFn(ctx, replication.Config{
			DSN: r.t.cfg.DSN, Slot: r.slot, Publication: r.pub, Logger: r.t.log,
			StartLSN: r.store.ReceivedLSN,
			FlushLSN: r.confirmed.Load,
		}, r.intake)
		if ctx.Err() != nil {
			return nil
		}
		var lost *replication.SlotLostError
		if errors.As(err, &lost) && lost.Kind == replication.SlotAhead && r.t.cfg.Confirm == ConfirmApplied {
			// See prepareSlot: under applied, resuming at the slot is safe.
			if err := r.resumeAtSlot(ctx); err != nil {
				return err
			}
			continue
		}
		if errors.As(err, &lost) {
			r.metrics.Reconnects.Inc()
			r.t.log.Error("capture disruption", "err", err)
			if perr := r.pauseAll(ctx, lost.Error(), false); perr != nil {
				return perr
			}
			switch lost.Kind {
			case replication.SlotInvalidated, replication.SlotUndecodable:
				r.dropLostSlot(ctx)
			case replication.PublicationMissing:
				// pgoutput resolves the publication at the slot's position, so
				// a recreated publication needs a new slot too.
				if _, err := replication.EnsurePublication(ctx, r.t.pool, r.pub); err != nil {
					return err
				}
				r.dropLostSlot(ctx)
			}
			if _, _, err := replication.EnsureSlot(ctx, r.t.pool, r.slot); err != nil {
				return terr.Wrap(terr.Unavailable, err, "recreate slot %q: %v", r.slot, err)
			}
			if err := r.resumeAtSlot(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "capture stopped: %v", err)
		}
		return nil
	}
}

// dropLostSlot drops the slot after a disruption while streaming. Should
// the slot stay held, the next stream reports the same disruption and the
// drop is tried again, so a failure is only logged.
func (r *runner) dropLostSlot(ctx context.Context) {
	if err := replication.DropSlot(ctx, r.t.pool, r.slot); err != nil {
		r.t.log.Warn("drop the lost replication slot", "slot", r.slot, "err", err)
	}
}

// resumeAtSlot moves the durable received position to the slot's
// confirmed position, where the next stream starts.
func (r *runner) resumeAtSlot(ctx context.Context) error {
	slot, err := replication.SlotInfo(ctx, r.t.pool, r.slot)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "read slot %q: %v", r.slot, err)
	}
	if err := r.store.AdvanceReceived(uint64(slot.ConfirmedFlush)); err != nil {
		return err
	}
	return r.store.Flush()
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
	r.metrics.ReceivedLSN.Set(float64(recv))
	r.metrics.ConfirmedLSN.Set(float64(r.confirmed.Load()))
}

func (r *runner) heartbeat(ctx context.Context) {
	if err := r.t.cat.Heartbeat(ctx, r.t.pool, r.store.ReceivedLSN(), r.confirmed.Load()); err != nil && ctx.Err() == nil {
		r.t.log.Warn("heartbeat", "err", err)
	}
	if s, err := replication.SlotInfo(ctx, r.t.pool, r.slot); err == nil && s.Exists {
		r.metrics.SlotLagBytes.Set(float64(s.ConfirmLagBytes))
		r.metrics.RetainedBytes.Set(float64(s.RetainedWALBytes))
	}
	r.mu.Lock()
	ws := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		ws = append(ws, w)
	}
	r.mu.Unlock()
	for _, w := range ws {
		n, err := r.store.Pending(w.id)
		if err != nil {
			continue
		}
		r.metrics.DirtyKeys.WithLabelValues(w.name).Set(float64(n))
		_ = r.t.cat.SetHeldKeys(ctx, r.t.pool, w.id, n)
	}
}

// reconcile starts workers for transforms that should run and stops the
// others, and drops publication membership nobody needs.
func (r *runner) reconcile(ctx context.Context) error {
	ts, err := r.t.cat.List(ctx, r.t.pool)
	if err != nil {
		return err
	}
	want := map[int64]*catalog.Transform{}
	needed := map[string]bool{}
	for _, tr := range ts {
		if p, err := engine.Decode(tr.Plan); err == nil {
			for _, src := range p.Tables() {
				needed[src.Ident()] = true
			}
		} else {
			needed[tr.SourceTable] = true
		}
		if tr.State != catalog.StatePaused {
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
		if w, ok := r.workers[id]; ok {
			if tr.State != catalog.StateLive {
				// Only the worker makes a transform live; any other state
				// under a running worker is a RESUME it has not seen.
				w.catalogChanged()
			}
			w.notify()
			continue
		}
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		w := newWorker(r, tr, p)
		r.workers[id] = w
		r.intake.addRoute(id, p)
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
	// Drop publication membership of tables no transform reads.
	r.captureMu.Lock()
	defer r.captureMu.Unlock()
	pubd, err := replication.PublishedTables(ctx, r.t.pool, r.pub)
	if err != nil {
		return err
	}
	var drop []pgx.Identifier
	for _, id := range pubd {
		if !needed[id.Sanitize()] {
			drop = append(drop, id)
		}
	}
	if len(drop) > 0 {
		if err := replication.DropTables(ctx, r.t.pool, r.pub, drop); err != nil {
			return err
		}
	}
	return nil
}

// installCapture publishes the transform's sources and waits for the fence:
// every transaction that was open when the source's changes started to be
// routed has ended, so a build reading the source afterwards misses nothing
// that the slot will not also deliver (docs/architecture.md §3.5, ADR 0007).
func (r *runner) installCapture(ctx context.Context, p *engine.Plan) error {
	r.captureMu.Lock()
	tx, err := r.t.pool.Begin(ctx)
	if err != nil {
		r.captureMu.Unlock()
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var tables []pgx.Identifier
	for _, src := range p.Tables() {
		tables = append(tables, pgx.Identifier{src.Schema, src.Name})
	}
	if err := replication.AddTables(ctx, tx, r.pub, tables); err != nil {
		r.captureMu.Unlock()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		r.captureMu.Unlock()
		return err
	}
	r.captureMu.Unlock()
	return replication.Fence(ctx, r.t.pool)
}

// pruneVisibility drops visibility entries of transactions that new
// snapshots already see, so appliers check only recent ones.
func (r *runner) pruneVisibility(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
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
