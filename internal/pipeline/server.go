package pipeline

// The server's identity (ADR 0039): what the runner reads of the server it
// runs against, and how a server that is not the one the instance last ran
// on is told apart — a promoted standby, a point-in-time restore, a copy of
// the database into another cluster or database, an upgrade, an older copy
// — from the identity the catalog (travelling with the database) and the
// local store (staying with the runner) recorded. classifyServer is pure;
// the runner acts on its answer in prepare (run.go) and rebind.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/plant"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// storeServerState is the store's named state holding the server it last
// ran against (catalog.Server as JSON).
const storeServerState = "server"

// ReadServer reads the identity of the server and database q is connected
// to. The timeline is the one WAL is inserted on (the first eight digits of
// the current WAL file's name), right from a promotion on, before the
// end-of-recovery checkpoint reaches pg_control_checkpoint(). A server in
// recovery (a standby) is refused: the runner needs the primary.
func ReadServer(ctx context.Context, q catalog.Querier) (catalog.Server, error) {
	var s catalog.Server
	var tl *int64
	var insert *string
	err := q.QueryRow(ctx, `SELECT c.system_identifier::text, d.oid, d.datname::text, current_setting('server_version_num')::int,
		CASE WHEN pg_is_in_recovery() THEN NULL ELSE ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint END,
		CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_insert_lsn()::text END
		FROM pg_control_system() c, pg_database d WHERE d.datname = current_database()`).
		Scan(&s.SystemID, &s.DatabaseOID, &s.Database, &s.Version, &tl, &insert)
	if err != nil {
		return s, terr.Wrap(terr.Unavailable, err, "identify the server: %v", err)
	}
	if tl == nil || insert == nil {
		return s, terr.Wrap(terr.Unavailable, errInRecovery, "the server of database %q is in recovery (a standby); point the runner at the primary (after a failover: the promoted standby)", s.Database)
	}
	s.Timeline, s.InsertLSN = uint32(*tl), *insert
	return s, nil
}

// errInRecovery is a server in recovery: a standby not promoted yet (a
// proxy or DNS may reach it first during a failover). The supervisor
// tries again, as after a lost connection.
var errInRecovery = errors.New("the server is in recovery")

// timelineSwitch is where a timeline ended, as the history file of a later
// timeline records it: its switch point and why recovery stopped there.
type timelineSwitch struct {
	At     uint64
	Reason string
}

// readSwitch reads, from the history file of timeline cur, where timeline
// from ended: ok is false when the file cannot be read (a role without
// pg_read_server_files) or from is not in cur's history.
func readSwitch(ctx context.Context, q catalog.Querier, cur, from uint32) (timelineSwitch, bool) {
	var text string
	if err := q.QueryRow(ctx, `SELECT pg_read_file($1)`, fmt.Sprintf("pg_wal/%08X.history", cur)).Scan(&text); err != nil {
		return timelineSwitch{}, false
	}
	return parseHistory(text, from)
}

// parseHistory finds timeline from's line in a timeline history file
// ("<tli>\t<switch point>\t<reason>" per line, comments after '#').
func parseHistory(text string, from uint32) (timelineSwitch, bool) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, "\t", 3)
		if len(f) < 2 {
			f = strings.Fields(line)
		}
		if len(f) < 2 {
			continue
		}
		tli, err := strconv.ParseUint(strings.TrimSpace(f[0]), 10, 32)
		if err != nil || uint32(tli) != from {
			continue
		}
		at, err := catalog.ParseLSN(strings.TrimSpace(f[1]))
		if err != nil {
			return timelineSwitch{}, false
		}
		sw := timelineSwitch{At: at}
		if len(f) == 3 {
			sw.Reason = strings.TrimSpace(f[2])
		}
		return sw, true
	}
	return timelineSwitch{}, false
}

// The kinds of ServerChange.
const (
	ChangeUpgraded       = "upgraded"
	ChangeCopiedCluster  = "copied_cluster"
	ChangeCopiedDatabase = "copied_database"
	ChangePromoted       = "promoted"
	ChangeRestored       = "restored_earlier"
	ChangeOlderCopy      = "older_copy"
	ChangeRewound        = "rewound"
)

// ServerChange says how the server differs from the one the instance (or
// its store) last ran on, in a sentence for the disruption it causes.
type ServerChange struct {
	Kind     string
	Sentence string
}

// Copied reports a change to another cluster or database: relation OIDs
// may name other tables, WAL positions are another cluster's.
func (c *ServerChange) Copied() bool {
	return c != nil && (c.Kind == ChangeUpgraded || c.Kind == ChangeCopiedCluster || c.Kind == ChangeCopiedDatabase)
}

// NewTimeline reports a change of timeline on the same cluster (a
// promotion, a point-in-time restore, an older copy).
func (c *ServerChange) NewTimeline() bool {
	return c != nil && (c.Kind == ChangePromoted || c.Kind == ChangeRestored || c.Kind == ChangeOlderCopy)
}

// serverFacts is what classifyServer judges: the server now, the identity
// last recorded (nil: none), where the recorded timeline ended in the
// current one's history (nil: unknown), and the newest position the local
// store holds (0: none).
type serverFacts struct {
	cur     catalog.Server
	rec     *catalog.Server
	sw      *timelineSwitch
	stored  uint64
	ancient bool // rec's timeline is not in cur's history (read from it)
}

// classifyServer says how the server differs from the recorded one, or
// nil when it is the same and nothing of the store lies past its WAL.
func classifyServer(f serverFacts) *ServerChange {
	cur, rec := f.cur, f.rec
	insert := cur.Insert()
	if rec != nil && rec.SystemID != cur.SystemID {
		if rec.Version/10000 != cur.Version/10000 {
			return &ServerChange{Kind: ChangeUpgraded, Sentence: fmt.Sprintf("the database was upgraded (PostgreSQL %d → %d, with pg_upgrade or a dump and restore: system identifier %s → %s)",
				rec.Version/10000, cur.Version/10000, rec.SystemID, cur.SystemID)}
		}
		return &ServerChange{Kind: ChangeCopiedCluster, Sentence: fmt.Sprintf("the database was copied into another cluster (a dump and restore, or a copy of its files: system identifier %s → %s, database %q)",
			rec.SystemID, cur.SystemID, cur.Database)}
	}
	if rec != nil && rec.DatabaseOID != cur.DatabaseOID {
		return &ServerChange{Kind: ChangeCopiedDatabase, Sentence: fmt.Sprintf("the database was copied into another database (a dump and restore, or CREATE DATABASE … TEMPLATE: %q, oid %d → %q, oid %d)",
			rec.Database, rec.DatabaseOID, cur.Database, cur.DatabaseOID)}
	}
	if rec != nil && rec.Timeline != cur.Timeline {
		if cur.Timeline < rec.Timeline || f.ancient {
			return &ServerChange{Kind: ChangeOlderCopy, Sentence: fmt.Sprintf("the server is on timeline %d, and the runner last ran on timeline %d, which is not in its history: this is another copy of the database than the one the runner followed (the old primary after a failover?)",
				cur.Timeline, rec.Timeline)}
		}
		began, known := insert, false
		if f.sw != nil {
			began, known = f.sw.At, true
		}
		past := f.stored > began
		target := f.sw != nil && f.sw.Reason != "" && !strings.Contains(f.sw.Reason, "no recovery target")
		if target || (!known && past) {
			s := fmt.Sprintf("the database was restored to an earlier point (point-in-time recovery, timeline %d → %d", rec.Timeline, cur.Timeline)
			if f.sw != nil && f.sw.Reason != "" {
				s += "; recovery stopped " + f.sw.Reason
			}
			if past {
				s += fmt.Sprintf("; the runner had received changes up to %s, past %s where this timeline begins, from a future this database no longer has", catalog.FormatLSN(f.stored), catalog.FormatLSN(began))
			}
			return &ServerChange{Kind: ChangeRestored, Sentence: s + ")"}
		}
		s := fmt.Sprintf("the primary changed (promoted standby, timeline %d → %d", rec.Timeline, cur.Timeline)
		if past && known {
			s += fmt.Sprintf("; the old primary had sent the runner changes up to %s, past %s where the standby's timeline begins: they were lost with the old primary", catalog.FormatLSN(f.stored), catalog.FormatLSN(began))
		}
		return &ServerChange{Kind: ChangePromoted, Sentence: s + ")"}
	}
	if rec != nil && rec.Insert() > insert {
		return &ServerChange{Kind: ChangeRewound, Sentence: fmt.Sprintf("the database is behind where the runner last started (its WAL is at %s, the runner had seen %s on the same timeline): it was restored from an earlier copy of its files",
			catalog.FormatLSN(insert), rec.InsertLSN)}
	}
	if f.stored > insert {
		return &ServerChange{Kind: ChangeRewound, Sentence: fmt.Sprintf("the database is behind what the runner had received (up to %s; this server's WAL is at %s): it was restored from an earlier copy of its files",
			catalog.FormatLSN(f.stored), catalog.FormatLSN(insert))}
	}
	return nil
}

// judgeServer reads the server and classifies it against rec (the
// catalog's record, else the store's) and the store's newest position
// (0: none).
func judgeServer(ctx context.Context, q catalog.Querier, rec *catalog.Server, stored uint64) (catalog.Server, *ServerChange, error) {
	cur, err := ReadServer(ctx, q)
	if err != nil {
		return cur, nil, err
	}
	f := serverFacts{cur: cur, rec: rec, stored: stored}
	if rec != nil && rec.SystemID == cur.SystemID && rec.DatabaseOID == cur.DatabaseOID && rec.Timeline < cur.Timeline {
		if sw, ok := readSwitch(ctx, q, cur.Timeline, rec.Timeline); ok {
			f.sw = &sw
		} else if readable(ctx, q, cur.Timeline) {
			f.ancient = true // the history is readable and does not name it
		}
	}
	return cur, classifyServer(f), nil
}

// readable reports whether the history file of timeline tl can be read.
func readable(ctx context.Context, q catalog.Querier, tl uint32) bool {
	var n int
	err := q.QueryRow(ctx, `SELECT length(pg_read_file($1))`, fmt.Sprintf("pg_wal/%08X.history", tl)).Scan(&n)
	return err == nil
}

// ServerDiffers is what status and AwaitConverged say of a catalog whose
// recorded server is not the one they read: the change's sentence, or ""
// when it is the same (or nothing was recorded). Only what the catalog
// recorded is compared (status has no store).
func ServerDiffers(ctx context.Context, q catalog.Querier, rec *catalog.Server) (string, error) {
	if rec == nil {
		return "", nil
	}
	_, ch, err := judgeServer(ctx, q, rec, 0)
	if err != nil || ch == nil {
		return "", err
	}
	return ch.Sentence, nil
}

// judge compares the server with the one the instance last ran on (the
// catalog's record, else the store's) and the store's positions with the
// server's WAL (ADR 0039). When the server is another one, or the store is
// not the one the instance last used, the store is discarded: its positions
// are a future this server never had, another timeline's or another
// cluster's (ReceivedLSN never goes back, so streaming would start past
// this server's own transactions), and its keys are covered by the
// rebuild that follows. Applied positions past the server's WAL are reset
// (all of them after a copy into another cluster or database).
func (r *runner) judge(ctx context.Context, inst *catalog.Instance) (*ServerChange, error) {
	t := r.t
	stored, err := r.storedServer()
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	rec := inst.Server
	if rec == nil {
		rec = stored
	}
	cur, change, err := judgeServer(ctx, t.pool, rec, max(r.store.ReceivedLSN(), r.store.ConfirmedLSN()))
	if err != nil {
		return nil, err
	}
	r.server = cur
	if change != nil {
		t.log.Warn("the server is not the one this instance last ran on", "change", change.Kind, "detail", change.Sentence)
	}
	foreign := inst.StoreID != "" && !r.store.Created() && r.store.StoreID() != inst.StoreID
	moved := stored != nil && (stored.SystemID != cur.SystemID || stored.DatabaseOID != cur.DatabaseOID || stored.Timeline != cur.Timeline)
	trust := change.NewTimeline() && plant.Active(plant.TrustStoreAfterPromotion)
	if (change != nil || foreign || moved) && !trust && !r.store.Created() {
		if err := r.store.Reset(); err != nil {
			return nil, terr.Wrap(terr.Unavailable, err, "discard the local checkpoint store: %v", err)
		}
		t.log.Warn("local checkpoint store discarded: what it held belongs to another server, timeline or instance", "store_id", r.store.StoreID())
	}
	past := cur.Insert()
	if change.Copied() {
		past = 0
	}
	n, err := t.cat.ResetAppliedPast(ctx, t.pool, past)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	if n > 0 {
		t.log.Warn("applied positions of another WAL history reset", "transforms", n)
	}
	return change, nil
}

// recordServer records cur as the server the runner started on, in the
// catalog (from the lock session: the same statement stream as the start)
// and in the store.
func (r *runner) recordServer(ctx context.Context, cur catalog.Server) error {
	cur.RecordedAt = time.Now().UTC()
	if err := r.t.cat.RecordServer(ctx, r.lockConn, cur); err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	b, err := json.Marshal(cur)
	if err != nil {
		return fmt.Errorf("encode the server identity: %w", err)
	}
	return r.store.PutState(storeServerState, b)
}

// storedServer is the server the store last ran against (nil: none).
func (r *runner) storedServer() (*catalog.Server, error) {
	b, err := r.store.State(storeServerState)
	if err != nil || b == nil {
		return nil, err
	}
	s := new(catalog.Server)
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("decode the store's server identity: %w", err)
	}
	return s, nil
}
