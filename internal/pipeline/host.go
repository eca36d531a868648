package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Capture modes (Options.Capture).
const (
	CaptureAuto    = "auto"
	CaptureLogical = capture.ModeLogical
	CaptureTrigger = capture.ModeTrigger
)

// Confirm modes (Options.Confirm; docs/architecture.md §3.6, ADR 0004).
const (
	ConfirmLocal   = "local"
	ConfirmApplied = "applied"
)

// Options are the settings the runtime reads: the public Config's, with
// its defaults already applied (the root package's Open does that and
// documents each one). They are fixed for the Host's life.
type Options struct {
	DSN, DataDir, Capture, Confirm, Publication string
	ProgressInterval                            time.Duration
	BatchSize                                   int
	CoalesceWindow                              time.Duration
	CoalesceKeys                                int
	StoreSyncInterval, TriggerPollInterval      time.Duration
	MaxRetainedWAL                              int64
	QuarantineAfter                             int
	ReadOnly                                    bool
	SelfCheckEvery                              time.Duration
	SelfCheckSample                             float64
	// OnDisruption is DisruptPause or DisruptRepair (ADR 0039).
	OnDisruption string
}

// Host is what the runtime runs on for one open instance: its settings,
// the control pool, the connection budget, the catalog and the observer,
// and what Run in this process shares with the instance's readers
// (readiness, the progress broadcast). The root package's Trellis holds
// one and calls it for Run, self-checks and the runner's state.
type Host struct {
	cfg    Options
	pool   *pgxpool.Pool
	budget Budget
	cat    catalog.Catalog
	log    *slog.Logger
	// ready is what Run in this process is doing (readiness.go).
	ready readiness
	// selfCheckHook, when set (tests only, through SetSelfCheckHook), is
	// called with "compare" just before a self-check's first comparison
	// and "compared" just after.
	selfCheckHook atomic.Pointer[func(stage string)]
	// obs receives the runtime's events (observer.go); observed is false
	// when nothing but NopObserver does, so Run keeps no latency queues.
	obs      Observer
	observed bool
	// progressed fires when Run here applies or changes a transform's
	// state (broadcast.go); waits wake on it.
	progressed broadcast
	// hurry asks Run here to record the positions idle transforms
	// reached now (HurryProgress): hurried are the transforms asked for.
	hurry   chan struct{}
	hurryMu sync.Mutex
	hurried map[int64]bool
	// runs are the Runs in progress, which Stop ends (runset.go).
	runs runSet
}

// New returns a Host over an open pool. obs may be nil (NopObserver).
func New(opts Options, pool *pgxpool.Pool, budget Budget, cat catalog.Catalog, log *slog.Logger, obs Observer) *Host {
	if obs == nil {
		obs = NopObserver{}
	}
	_, nop := obs.(NopObserver)
	h := &Host{cfg: opts, pool: pool, budget: budget, cat: cat, log: log, obs: obs, observed: !nop, hurry: make(chan struct{}, 1)}
	return h
}

// SetSelfCheckHook installs fn as the self-check's stage hook (nil
// removes it): a seam for tests that must act between a check's stages.
func (t *Host) SetSelfCheckHook(fn func(stage string)) {
	if fn == nil {
		t.selfCheckHook.Store(nil)
		return
	}
	t.selfCheckHook.Store(&fn)
}

// Progressed returns a channel closed at the next progress of Run in this
// process (a batch applied, a state changed). Take it before reading what
// is waited for, so progress made during the read is not missed.
func (t *Host) Progressed() <-chan struct{} { return t.progressed.wait() }

// HurryProgress asks Run in this process, if one runs, to record the
// positions transforms ids reached while idle now rather than at the next
// ProgressInterval: a wait here found them behind (ADR 0044). It does not
// block; asks made before the record is written make one.
func (t *Host) HurryProgress(ids []int64) {
	if len(ids) == 0 {
		return
	}
	t.hurryMu.Lock()
	if t.hurried == nil {
		t.hurried = map[int64]bool{}
	}
	for _, id := range ids {
		t.hurried[id] = true
	}
	t.hurryMu.Unlock()
	signal(t.hurry)
}

// takeHurried returns the transforms HurryProgress asked for since the
// last call.
func (t *Host) takeHurried() map[int64]bool {
	t.hurryMu.Lock()
	defer t.hurryMu.Unlock()
	ids := t.hurried
	t.hurried = nil
	return ids
}

// writable refuses a call that writes on a read-only open.
func (t *Host) writable(what string) error {
	if t.cfg.ReadOnly {
		return terr.New(terr.Validation, "%s writes to the catalog, and this instance was opened read-only (Config.ReadOnly); open it without ReadOnly", what)
	}
	return nil
}

func (t *Host) connConfig() *pgx.ConnConfig { return t.pool.Config().ConnConfig }

// Token is a watermark: a WAL position such that every write committed
// before it was taken lies before it.
type Token uint64

// String renders the token as a PostgreSQL LSN.
func (tk Token) String() string { return catalog.FormatLSN(uint64(tk)) }

// WatermarkToken returns a token for "now".
//
// In trigger mode the token is a position after a commit the token makes
// itself (ADR 0023): a drain position is the moment it was read, and a
// commit record can precede the moment its transaction becomes visible, so
// the plain WAL position could be one that a drain recorded while a commit
// that has since returned was still invisible to it.
func (t *Host) WatermarkToken(ctx context.Context) (Token, error) {
	var s, mode string
	if err := t.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, coalesce((SELECT capture_mode FROM `+t.cat.T("instance")+`), '')`).Scan(&s, &mode); err != nil {
		return 0, terr.Wrap(terr.Unavailable, err, "read the current WAL position: %v", err)
	}
	if mode == capture.ModeTrigger {
		var err error
		if s, err = committedPosition(ctx, t.pool); err != nil {
			return 0, terr.Wrap(terr.Unavailable, err, "take a convergence token: %v", err)
		}
	}
	v, err := catalog.ParseLSN(s)
	return Token(v), err
}

// committedPosition commits a transaction that holds an xid and writes
// nothing else, without waiting for a flush or a standby, and returns the
// WAL insert position after its commit record.
func committedPosition(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `BEGIN; SET LOCAL synchronous_commit = off; SELECT pg_current_xact_id(); COMMIT`, pgx.QueryExecModeSimpleProtocol); err != nil {
		return "", err
	}
	var s string
	err = conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s)
	return s, err
}

// walPosition is the server's WAL write position now (a position in the
// WAL, not a token).
func (t *Host) walPosition(ctx context.Context) (uint64, error) {
	var s string
	if err := t.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, terr.Wrap(terr.Unavailable, err, "read the current WAL position: %v", err)
	}
	return catalog.ParseLSN(s)
}
