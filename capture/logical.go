package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/replication"
)

// StreamFunc streams a slot into a sink until ctx ends or capture fails;
// replication.Run is the only one outside tests.
type StreamFunc func(ctx context.Context, cfg replication.Config, sink decode.Sink) error

// LogicalConfig configures a Logical capture.
type LogicalConfig struct {
	// DSN is the connection string of the replication connection.
	DSN         string
	Slot        string
	Publication string
	// Pool runs the management statements.
	Pool Beginner
	// Position is the local store's received position.
	Position Position
	// Confirmed is the position the slot may be confirmed up to.
	Confirmed func() uint64
	// ConfirmApplied: the slot is confirmed only up to what was applied.
	ConfirmApplied bool
	// Stream is replication.Run unless a test injects a failure.
	Stream StreamFunc
	// OnReconnect is called when the slot is recreated after a disruption.
	OnReconnect func()
	// Health, when set, follows the stream: called with up once the
	// server streams from the slot, and with the error each time a
	// session fails (so every failure is seen, not only the first).
	Health HealthFunc
	Logger *slog.Logger
	// LockTimeout bounds each wait for a table's lock when publishing it
	// (default 200ms; retried).
	LockTimeout time.Duration
	// OwnedPublication: Publication is created and managed by the tables'
	// owner (--publication). Capture never alters or drops it: a table not
	// in it waits (capture_wait with the ALTER PUBLICATION the owner must
	// run), and removing capture leaves it as it is.
	OwnedPublication bool
}

// Logical captures through a publication and a logical-replication slot.
type Logical struct {
	cfg LogicalConfig
	mu  sync.Mutex // serialises publication changes
	// removing are the removals Retain left for later. Guarded by mu.
	removing removals
}

// NewLogical returns logical capture for cfg.
func NewLogical(cfg LogicalConfig) *Logical {
	if cfg.Stream == nil {
		cfg.Stream = replication.Run
	}
	if cfg.OnReconnect == nil {
		cfg.OnReconnect = func() {}
	}
	if cfg.Health == nil {
		cfg.Health = func(bool, string) {}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Logical{cfg: cfg, removing: removals{log: log, removed: "table removed from the publication", what: "remove the table from the publication"}}
}

// Mode is ModeLogical.
func (l *Logical) Mode() string { return ModeLogical }

// Prepare makes sure publication and slot exist, decides where to resume,
// and detects lost continuity (docs/architecture.md §3.6, §3.9).
func (l *Logical) Prepare(ctx context.Context, prev Continuity) (Prepared, error) {
	c := l.cfg
	if err := l.ensurePublication(ctx); err != nil {
		return Prepared{}, err
	}
	// A runner killed while creating the slot leaves its backend finishing
	// the creation: wait for the slot's start, or the transforms would be
	// built before it and miss the commits in between.
	slot, err := replication.AwaitSlot(ctx, c.Pool, c.Slot)
	if err != nil {
		return Prepared{}, terr.Wrap(terr.Unavailable, err, "read slot %q: %v", c.Slot, err)
	}
	var out Prepared
	out.Slot = c.Slot
	if slot.Exists && slot.WALStatus == "lost" {
		out.Disruption = fmt.Sprintf("replication slot %q was invalidated (the server removed WAL it needed; see max_slot_wal_keep_size)", c.Slot)
		if err := replication.DropSlot(ctx, c.Pool, c.Slot); err != nil {
			return Prepared{}, terr.Wrap(terr.Unavailable, err, "drop invalidated slot: %v", err)
		}
		slot.Exists = false
	} else if !slot.Exists && prev.RanBefore {
		out.Disruption = fmt.Sprintf("replication slot %q disappeared (dropped, or lost in a failover or restore)", c.Slot)
	}
	if prev.Changed != "" {
		out.Disruption, out.RestartBuilds = afterServerChange(prev, c.Slot, slot)
	}
	freshSlot := false
	if !slot.Exists {
		// No slot before capture can work: one that can publish none of
		// the sources would only hold WAL. (A transform whose source alone
		// cannot be published is paused when its capture is installed.)
		if err := l.canPublishAny(ctx, prev.Tables); err != nil {
			return Prepared{}, err
		}
		_, lsn, err := replication.EnsureSlot(ctx, c.Pool, c.Slot)
		if err != nil {
			return Prepared{}, terr.Wrap(terr.Unavailable, err, "create replication slot %q: %v", c.Slot, err)
		}
		slot.ConfirmedFlush = lsn
		freshSlot = true
	}
	start := c.Position.ReceivedLSN()
	if prev.StoreLost || freshSlot || start == 0 {
		start = uint64(slot.ConfirmedFlush)
		if prev.Changed != "" {
			// Judged above: the store is new, the slot is where to resume.
		} else if prev.StoreLost && !freshSlot && prev.ConfirmApplied && prev.Applied != 0 && start > prev.Applied && out.Disruption == "" {
			// The slot starts past what a live transform applied: the keys
			// between (taken by trigger capture before the switch to this
			// slot) lived only in the lost store.
			out.Disruption = fmt.Sprintf("the local checkpoint store is not the one this instance last used (lost or replaced), and replication slot %q starts at %s, past %s, which a transform had applied up to: the changes between lived only in the store (taken by trigger capture before the switch to logical replication)",
				c.Slot, catalog.FormatLSN(start), catalog.FormatLSN(prev.Applied))
		} else if prev.StoreLost && !freshSlot && prev.ConfirmApplied {
			// The slot was confirmed only up to what was applied: resume from
			// there; transforms still building restart their build.
			out.RestartBuilds = true
		} else if prev.StoreLost && out.Disruption == "" {
			out.Disruption = "the local checkpoint store is not the one this instance last used (lost or replaced) and --confirm=local confirmed the slot past what was applied"
		}
		if err := l.advance(start); err != nil {
			return Prepared{}, err
		}
	} else if uint64(slot.ConfirmedFlush) > start {
		// Under --confirm=applied the slot is confirmed only up to what every
		// running transform applied, so a stale store (an older copy) is
		// harmless: resume at the slot. Under local it means lost changes.
		if !prev.ConfirmApplied {
			out.Disruption = fmt.Sprintf("replication slot %q is confirmed at %s, past the local checkpoint %s (the checkpoint store is stale, or the slot was advanced or recreated)",
				c.Slot, catalog.FormatLSN(uint64(slot.ConfirmedFlush)), catalog.FormatLSN(start))
		}
		if err := l.advance(uint64(slot.ConfirmedFlush)); err != nil {
			return Prepared{}, err
		}
	}
	// Start from what the slot already has: under --confirm=applied the
	// received position may be ahead of what is applied.
	out.Confirmed = uint64(slot.ConfirmedFlush)
	return out, nil
}

// afterServerChange judges a slot once the server turned out to be another
// than the one the instance last ran on and the store was discarded (ADR
// 0039): a slot here that is confirmed no further than what every live
// transform applied (PostgreSQL 17 failover slots; a file-level copy that
// kept pg_replslot) still delivers everything after each applied position,
// so capture goes on from it and builds restart; otherwise the change is a
// disruption, the slot's state said.
func afterServerChange(prev Continuity, name string, slot replication.Slot) (disruption string, restartBuilds bool) {
	usable := slot.Exists && slot.WALStatus != "lost"
	if usable && prev.Applied != 0 && prev.AppliedComplete && uint64(slot.ConfirmedFlush) <= prev.Applied {
		return "", prev.Building
	}
	switch {
	case !usable:
		return fmt.Sprintf("%s; replication slot %q does not exist on this server (a logical slot is not carried to a promoted standby before PostgreSQL 17, nor by a base backup, pg_dump or pg_upgrade before 17)", prev.Changed, name), false
	case prev.Applied == 0 || !prev.AppliedComplete:
		return fmt.Sprintf("%s; replication slot %q on this server cannot say what the transforms missed: not every live transform recorded what it applied", prev.Changed, name), false
	default:
		return fmt.Sprintf("%s; replication slot %q on this server is confirmed at %s, past %s, where a transform had applied up to: the changes between lived only in the discarded store",
			prev.Changed, name, catalog.FormatLSN(uint64(slot.ConfirmedFlush)), catalog.FormatLSN(prev.Applied)), false
	}
}

func (l *Logical) advance(lsn uint64) error {
	if err := l.cfg.Position.AdvanceReceived(lsn); err != nil {
		return err
	}
	return l.cfg.Position.Flush()
}

// Install publishes the tables and waits for the fence: every transaction
// that was open when their changes started to be published has ended, so a
// build reading them afterwards misses nothing that the slot will not also
// deliver (docs/architecture.md §3.5, ADR 0007).
func (l *Logical) Install(ctx context.Context, tables []Table, waiting WaitFunc) error {
	if err := l.publish(ctx, tables, waiting); err != nil {
		return err
	}
	return replication.Fence(ctx, l.cfg.Pool)
}

// Publish creates the publication if needed and publishes tables before a
// slot exists (a switch from trigger capture), fence included.
func (l *Logical) Publish(ctx context.Context, tables []Table) error {
	if err := l.ensurePublication(ctx); err != nil {
		return err
	}
	return l.Install(ctx, tables, nil)
}

// ensurePublication creates or repairs the instance's publication; an
// owner-managed one (--publication) must exist and is only checked.
func (l *Logical) ensurePublication(ctx context.Context) error {
	c := l.cfg
	if !c.OwnedPublication {
		if _, err := replication.EnsurePublication(ctx, c.Pool, c.Publication); err != nil {
			return terr.Wrap(terr.Unavailable, err, "create publication %q: %v; the role needs CREATE on the database", c.Publication, err)
		}
		return nil
	}
	var exists, ok bool
	err := c.Pool.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_and(pubinsert AND pubupdate AND pubdelete AND pubtruncate), false)
		FROM pg_publication WHERE pubname = $1`, c.Publication).Scan(&exists, &ok)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "look up publication %q: %v", c.Publication, err)
	}
	pub := quoteIdent(c.Publication)
	if !exists {
		return terr.New(terr.NotFound, "publication %s (--publication) does not exist; the owner of the source tables creates it: CREATE PUBLICATION %s FOR TABLE <each source table> WITH (publish_via_partition_root = true);", pub, pub)
	}
	if !ok {
		return terr.New(terr.Validation, "publication %s (--publication) does not publish every row change; its owner must run: ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate');", pub, pub)
	}
	return nil
}

// canPublish checks that every table can be published: it is in the
// owner-managed publication or owned by the role (through membership too).
func (l *Logical) canPublish(ctx context.Context, tables []Table) error {
	if l.cfg.OwnedPublication {
		return nil // tables not in it wait for their owner
	}
	for _, tb := range tables {
		r, err := rightsOn(ctx, l.cfg.Pool, tb)
		if err != nil {
			return err
		}
		if !r.Owns {
			return publishError(r, tb, l.cfg.Publication, nil)
		}
	}
	return nil
}

// canPublishAny is nil when there are no tables or at least one can be
// published, else the privilege error of the first.
func (l *Logical) canPublishAny(ctx context.Context, tables []Table) error {
	var first error
	for _, tb := range tables {
		err := l.canPublish(ctx, []Table{tb})
		if err == nil {
			return nil
		}
		if errors.Is(err, pgx.ErrNoRows) {
			continue // gone (a copy of the database without it): nothing to publish
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// publish adds the tables to the publication one by one (ALTER PUBLICATION
// takes SHARE UPDATE EXCLUSIVE on each), waiting for their locks with a
// short lock_timeout.
func (l *Logical) publish(ctx context.Context, tables []Table, waiting WaitFunc) error {
	if l.cfg.OwnedPublication {
		return l.awaitMembers(ctx, tables, waiting)
	}
	if err := l.canPublish(ctx, tables); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lw := lockWaiter{pool: l.cfg.Pool, timeout: l.lockTimeout()}
	for _, t := range tables {
		err := lw.run(ctx, t, "install", "ShareUpdateExclusiveLock", waiting, func(tx pgx.Tx) error {
			return replication.AddTables(ctx, tx, l.cfg.Publication, []pgx.Identifier{t.Ident()})
		})
		if isPrivilege(err) {
			r, rerr := rightsOn(ctx, l.cfg.Pool, t)
			if rerr != nil {
				return err
			}
			return publishError(r, t, l.cfg.Publication, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *Logical) lockTimeout() time.Duration {
	if l.cfg.LockTimeout > 0 {
		return l.cfg.LockTimeout
	}
	return 200 * time.Millisecond
}

// awaitMembers waits until the owner added every table to the
// owner-managed publication; meanwhile waiting says which statement the
// owner must run.
func (l *Logical) awaitMembers(ctx context.Context, tables []Table, waiting WaitFunc) error {
	for _, tb := range tables {
		var w *Wait
		for {
			var member bool
			err := l.cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
				WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`, l.cfg.Publication, tb.Schema, tb.Name).Scan(&member)
			if err != nil {
				return terr.Wrap(terr.Unavailable, err, "read the tables of publication %q: %v", l.cfg.Publication, err)
			}
			if member {
				break
			}
			if w == nil {
				w = &Wait{Table: tb.Ident().Sanitize(), Operation: "install", Since: time.Now().UTC(),
					Statement: fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s;", quoteIdent(l.cfg.Publication), tb.Ident().Sanitize())}
				if l.cfg.Logger != nil {
					l.cfg.Logger.Warn("capture waits for the publication's owner", "table", w.Table, "statement", w.Statement)
				}
				if waiting != nil {
					waiting(w)
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		if w != nil && waiting != nil {
			waiting(nil)
		}
	}
	return nil
}

// Retain drops publication membership of tables not in keep (never of an
// owner-managed publication), one table per transaction. ALTER
// PUBLICATION … DROP TABLE takes SHARE UPDATE EXCLUSIVE on the table (as
// ADD does): a removal that would wait longer than lock_timeout for it is
// left for the next call, and waiting is told of every removal left so
// (nil: not told). While an install holds the publication (it may be
// waiting for a lock itself), every removal is left for the next call.
func (l *Logical) Retain(ctx context.Context, keep []Table, waiting RemovalsFunc) error {
	if l.cfg.OwnedPublication {
		if waiting != nil {
			waiting(nil)
		}
		return nil
	}
	if !l.mu.TryLock() {
		return nil
	}
	defer l.mu.Unlock()
	byOID, byName := map[uint32]bool{}, map[string]bool{}
	for _, t := range keep {
		byOID[t.OID], byName[t.Ident().Sanitize()] = true, true
	}
	pubd, err := replication.PublishedTables(ctx, l.cfg.Pool, l.cfg.Publication)
	if err != nil {
		return err
	}
	names := make([]string, len(pubd))
	for i, id := range pubd {
		names[i] = id.Sanitize()
	}
	oids := make([]uint32, len(pubd))
	if len(pubd) > 0 {
		// 0 for a table dropped since it was listed (which leaves the
		// publication with it).
		rows, err := l.cfg.Pool.Query(ctx, `SELECT coalesce(to_regclass(n)::oid, 0) FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i`, names)
		if err != nil {
			return fmt.Errorf("look up the tables of publication %s: %w", quoteIdent(l.cfg.Publication), err)
		}
		for i := 0; rows.Next(); i++ {
			if err := rows.Scan(&oids[i]); err != nil {
				rows.Close()
				return fmt.Errorf("look up the tables of publication %s: %w", quoteIdent(l.cfg.Publication), err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look up the tables of publication %s: %w", quoteIdent(l.cfg.Publication), err)
		}
	}
	lw := lockWaiter{pool: l.cfg.Pool, timeout: l.lockTimeout()}
	pending := map[uint32]bool{}
	for i, id := range pubd {
		if oids[i] == 0 || byOID[oids[i]] || byName[names[i]] {
			continue
		}
		pending[oids[i]] = true
		tb := Table{Schema: id[0], Name: id[1], OID: oids[i]}
		l.removing.attempt(ctx, lw, tb, "ShareUpdateExclusiveLock", func(tx pgx.Tx) error {
			return replication.DropTables(ctx, tx, l.cfg.Publication, []pgx.Identifier{id})
		})
	}
	l.removing.keepOnly(pending)
	if waiting != nil {
		waiting(l.removing.waits())
	}
	return nil
}

// Stream runs the replication connection, recovering from a lost slot:
// disrupted pauses the transforms, then a new slot starts.
func (l *Logical) Stream(ctx context.Context, sink Sink, disrupted func(context.Context, Disruption) error) error {
	c := l.cfg
	for {
		err := c.Stream(ctx, replication.Config{
			DSN: c.DSN, Slot: c.Slot, Publication: c.Publication, Logger: c.Logger,
			Catalog:     c.Pool,
			StartLSN:    c.Position.ReceivedLSN,
			FlushLSN:    c.Confirmed,
			Streaming:   func() { c.Health(true, "") },
			Interrupted: func(err error) { c.Health(false, err.Error()) },
		}, sink)
		if ctx.Err() != nil {
			return nil
		}
		var lost *replication.SlotLostError
		if errors.As(err, &lost) && lost.Kind == replication.SlotAhead && c.ConfirmApplied {
			// See Prepare: under applied, resuming at the slot is safe.
			if err := l.resumeAtSlot(ctx); err != nil {
				return err
			}
			continue
		}
		if errors.As(err, &lost) {
			c.OnReconnect()
			if c.Logger != nil {
				c.Logger.Error("capture disruption", "err", err)
			}
			if perr := disrupted(ctx, Disruption{Reason: lost.Error()}); perr != nil {
				return perr
			}
			switch lost.Kind {
			case replication.SlotInvalidated, replication.SlotUndecodable:
				l.dropLostSlot(ctx)
			case replication.PublicationMissing:
				// pgoutput resolves the publication at the slot's position, so
				// a recreated publication needs a new slot too.
				if _, err := replication.EnsurePublication(ctx, c.Pool, c.Publication); err != nil {
					return err
				}
				l.dropLostSlot(ctx)
			}
			if _, _, err := replication.EnsureSlot(ctx, c.Pool, c.Slot); err != nil {
				return terr.Wrap(terr.Unavailable, err, "recreate slot %q: %v", c.Slot, err)
			}
			if err := l.resumeAtSlot(ctx); err != nil {
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
func (l *Logical) dropLostSlot(ctx context.Context) {
	if err := replication.DropSlot(ctx, l.cfg.Pool, l.cfg.Slot); err != nil && l.cfg.Logger != nil {
		l.cfg.Logger.Warn("drop the lost replication slot", "slot", l.cfg.Slot, "err", err)
	}
}

// resumeAtSlot moves the durable received position to the slot's
// confirmed position, where the next stream starts.
func (l *Logical) resumeAtSlot(ctx context.Context) error {
	slot, err := replication.SlotInfo(ctx, l.cfg.Pool, l.cfg.Slot)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "read slot %q: %v", l.cfg.Slot, err)
	}
	return l.advance(uint64(slot.ConfirmedFlush))
}

// SlotExists reports whether the instance's slot exists.
func (l *Logical) SlotExists(ctx context.Context) (bool, error) {
	s, err := replication.SlotInfo(ctx, l.cfg.Pool, l.cfg.Slot)
	if err != nil {
		return false, terr.Wrap(terr.Unavailable, err, "read slot %q: %v", l.cfg.Slot, err)
	}
	return s.Exists, nil
}

// SlotState reads the instance's slot (Exists false when it is missing),
// for the runner's slot metrics and retention guard.
func (l *Logical) SlotState(ctx context.Context) (replication.Slot, error) {
	s, err := replication.SlotInfo(ctx, l.cfg.Pool, l.cfg.Slot)
	if err != nil {
		return replication.Slot{}, terr.Wrap(terr.Unavailable, err, "read slot %q: %v", l.cfg.Slot, err)
	}
	return s, nil
}

// Remove drops the slot and the publication: logical capture is no longer
// used by this instance (a switch to trigger capture).
func (l *Logical) Remove(ctx context.Context) error {
	if err := replication.DropSlot(ctx, l.cfg.Pool, l.cfg.Slot); err != nil {
		return fmt.Errorf("drop replication slot %q: %w", l.cfg.Slot, err)
	}
	if l.cfg.OwnedPublication {
		return nil
	}
	if _, err := l.cfg.Pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{l.cfg.Publication}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %q: %w", l.cfg.Publication, err)
	}
	return nil
}
