// Package trellis keeps derived tables inside your own PostgreSQL equal to a
// SQL SELECT while the source tables change. Define a transform with Apply,
// keep it maintained with Run (in this process, or `trellis-repl run`
// beside the database), and read its state with Status from anywhere.
//
// Changes are captured from a logical-replication slot; a change only says
// which rows changed, and the engine re-derives those rows from the source
// and diffs them against what it wrote before, so restarts and duplicate
// delivery never double-count.
package trellis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/pipeline"
	"github.com/trellis-repl/trellis-repl/internal/plancache"
	"github.com/trellis-repl/trellis-repl/internal/redact"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Error is the error type every call returns for bad input or failed
// operations: a stable Code plus a sentence naming the object and the fix.
type Error = terr.Error

// ErrorCode is the stable class of an Error.
type ErrorCode = terr.Code

// The stable error codes.
const (
	CodeValidation  = terr.Validation
	CodeNotFound    = terr.NotFound
	CodeConflict    = terr.Conflict
	CodeTimeout     = terr.Timeout
	CodeUnavailable = terr.Unavailable
	CodeInternal    = terr.Internal
)

// CodeOf returns the stable code of err (CodeInternal for foreign errors).
func CodeOf(err error) ErrorCode { return terr.CodeOf(err) }

// Capture modes.
const (
	CaptureAuto    = pipeline.CaptureAuto
	CaptureLogical = pipeline.CaptureLogical
	CaptureTrigger = pipeline.CaptureTrigger
)

// Confirm modes (docs/architecture.md §3.6, ADR 0004).
const (
	// ConfirmLocal confirms the slot once changes are durable in the local
	// store: WAL retention stays small even while a transform is slow.
	ConfirmLocal = pipeline.ConfirmLocal
	// ConfirmApplied confirms only what every running transform applied in
	// PostgreSQL: survives losing the local disk.
	ConfirmApplied = pipeline.ConfirmApplied
)

// Config configures a Trellis instance.
type Config struct {
	// DSN is the libpq connection string (URL or key=value). Empty means
	// TRELLIS_DATABASE_URL, then the PG* environment variables.
	DSN string
	// Schema is the instance schema holding the catalog (default "trellis").
	Schema string
	// TargetSchema is where a transform named without a schema is created,
	// and where PAUSE, RESUME and DROP look a bare name up (default: the
	// connection's current schema, usually public). A qualified name
	// (CREATE TRANSFORM reports.daily AS …) still goes where it says. The
	// schema must exist; a definition reads another transform's target by
	// its bare name from any schema (ADR 0040).
	TargetSchema string
	// DataDir is where Run keeps its local checkpoint store. Default:
	// ./trellis-repl-data/<system id>-<database oid>-<schema>.
	DataDir string
	// Capture is auto (default), logical or trigger.
	Capture string
	// Confirm is local (default) or applied.
	Confirm string
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// ProgressInterval is how often an idle transform records its applied
	// position (what AwaitConverged waits for). Default 1s.
	ProgressInterval time.Duration
	// BatchSize caps the keys re-derived in one apply transaction
	// (default 10000).
	BatchSize int
	// CoalesceWindow is the latency budget of a live transform's batches
	// (default 20ms; negative: none): a worker woken by a change less than
	// this long after its last batch started waits for the rest of the
	// window, so that a trickle of one-row commits is re-derived in one
	// transaction per window rather than one per commit. A backlog of
	// CoalesceKeys keys or more (or a full batch, BatchSize) is taken at
	// once. See docs/tuning.md.
	CoalesceWindow time.Duration
	// CoalesceKeys is the backlog that ends a coalescing wait early
	// (default 1000).
	CoalesceKeys int
	// StoreSyncInterval bounds how often the local store fsyncs recorded
	// changes (default 50ms; negative: every group commit). Keys are taken
	// before the sync; only the slot's confirmed position waits for it.
	StoreSyncInterval time.Duration
	// TriggerPollInterval is, in trigger capture, how long the drain waits
	// after a drain that moved rows before it looks again (default
	// DefaultTriggerPollInterval); an idle drain backs off from it to 100ms.
	// Each drain is a transaction on the primary whatever it moves, so a
	// longer interval costs busy writers less at the price of that much
	// latency. See docs/tuning.md.
	TriggerPollInterval time.Duration
	// MaxConnections caps every connection this instance opens to
	// PostgreSQL, whatever the number of transforms (default
	// DefaultMaxConnections; ADR 0028): Run's lock session, its capture
	// (replication connection or trigger drain), the control pool
	// (catalog, status, reconcile, self-check reads) and the applier
	// sessions transforms take turns on, builds holding at most half of
	// them. A runner needs at least MinRunnerConnections; a process that
	// only reads (status, await) runs on 1.
	MaxConnections int
	// PoolSize, when > 0, is the control pool's share of MaxConnections
	// (default: a quarter of what lock and capture leave, 1 to 4).
	PoolSize int
	// Metrics, when set, receives Run's Prometheus metrics (docs/metrics.md).
	// Open binds a Metrics not bound yet (Metrics.ForInstance) to the
	// instance, labelling every series trellis_instance="<database>/<schema>".
	Metrics *Metrics
	// InstanceMetricsOnly keeps Metrics to the instance's series: none per
	// transform (about 47 each, docs/metrics.md), only the instance's totals
	// over its transforms (Metrics.InstanceOnly; run
	// --metrics-per-transform=false). For instances of many transforms.
	InstanceMetricsOnly bool
	// Observer, when set, receives the runtime's events besides Metrics
	// (FanOut combines several): for a program that routes them elsewhere
	// (ADR 0017 §1).
	Observer Observer
	// Publication, when set, names a publication the source tables' owner
	// creates and manages: trellis-repl never alters or drops it, and a
	// transform whose source is not in it waits (capture_wait gives the
	// ALTER PUBLICATION … ADD TABLE the owner must run). Empty: the
	// instance manages its own, <schema>_pub, which needs ownership of the
	// sources.
	Publication string
	// MaxRetainedWAL, when > 0, bounds the WAL (bytes) the replication
	// slot may retain: above it Run warns once per episode and, with
	// Capture auto, switches to trigger capture, which retains none.
	MaxRetainedWAL int64
	// QuarantineAfter is how many keys a transform may hold in quarantine
	// (their re-derive kept failing on row data) before the whole
	// transform is quarantined (default 5; ADR 0013).
	QuarantineAfter int
	// ReadOnly opens without installing or upgrading the catalog, on
	// sessions that may not write (default_transaction_read_only), for
	// callers that only read: Status, Definitions, the held-key and
	// quarantine listings, AwaitConverged (ADR 0017 §5). An instance
	// schema that does not exist is a not_found error and nothing is
	// created; a role with pg_monitor and USAGE and SELECT on the
	// instance schema suffices. Apply, Run and the releases refuse.
	// ReadOnly implies NoInstall.
	ReadOnly bool
	// NoInstall opens without creating or upgrading anything: the
	// instance's catalog must be there at this binary's version, installed
	// by Migrate (a missing instance is not_found, an older catalog a
	// conflict naming Migrate). For services whose schema changes run
	// apart from them (ADR 0040). Without it Open installs or upgrades the
	// catalog as Migrate does.
	NoInstall bool
	// SelfCheckEvery, when > 0, has Run compare a sample of every live
	// target with its query this often, and expose what it finds as the
	// metric trellis_selfcheck_divergences (ADR 0017 §6).
	SelfCheckEvery time.Duration
	// SelfCheckSample is the share of each target such an audit compares:
	// about that fraction of its rows, from a random one (default
	// DefaultSelfCheckSample; 1 compares everything).
	SelfCheckSample float64
	// OnDisruption is what Run does to the transforms whose targets may
	// have missed changes when continuity is lost — a slot or local store
	// lost, a failover to a promoted standby, a point-in-time restore, a
	// copy of the database, an upgrade (ADR 0039, docs/operations.md):
	// OnDisruptionPause (default) pauses each until RESUME TRANSFORM (or
	// RESUME TRANSFORM ALL); OnDisruptionRepair rebuilds each in place at
	// once, once capture is back, while the old rows keep serving.
	OnDisruption string
	// CallTimeout bounds every call that does not wait for something
	// (Open, Apply, Status, Definitions, the quarantine calls, SelfCheck's
	// request, WatermarkToken, …), waiting for a connection and for
	// locks included (default DefaultCallTimeout, 30s; ADR 0040). The
	// server enforces it (statement_timeout and lock_timeout in the call's
	// transaction) and the client backs it up a second later; a call out
	// of time fails with code timeout and changes nothing. A script given
	// to Apply has one CallTimeout per statement, each lock wait within
	// one. The waits
	// (AwaitConverged, AwaitTransforms, AwaitSelfCheckJob), CompareNow and
	// Run take their own deadline from their context.
	CallTimeout time.Duration
}

// The values of Config.OnDisruption.
const (
	OnDisruptionPause  = pipeline.DisruptPause
	OnDisruptionRepair = pipeline.DisruptRepair
)

// The defaults of Config's latency budgets (ADR 0016, docs/tuning.md).
const (
	DefaultCoalesceWindow    = 20 * time.Millisecond
	DefaultStoreSyncInterval = 50 * time.Millisecond
	// DefaultTriggerPollInterval is Config.TriggerPollInterval's default.
	DefaultTriggerPollInterval = 2 * time.Millisecond
)

// Trellis is an open instance: a connection pool, the catalog and the
// runtime that Run drives (internal/pipeline).
type Trellis struct {
	cfg  Config
	pool *pgxpool.Pool
	// budget splits Config.MaxConnections among the connections this
	// process opens (ADR 0028); pool is its control share.
	budget pipeline.Budget
	cat    catalog.Catalog
	log    *slog.Logger
	// rt is the runtime: Run, self-checks, readiness and the progress
	// broadcast waits wake on. Set by Open once the observers are known.
	rt *pipeline.Host
	// def applies definition statements (internal/define).
	def *define.Definer
	// planBytes and plans keep the transforms' stored and decoded plans
	// for the catalog reads callers repeat (a wait's polls, Status,
	// Definitions): plans travel and decode only when their row changed.
	planBytes catalog.PlanCache
	plans     plancache.Cache
	// closed is set by Close: every call is refused from then on.
	closed    atomic.Bool
	closeOnce sync.Once
}

// ResolveDSN returns dsn, else TRELLIS_DATABASE_URL, else "" (which pgx
// completes from the PG* variables).
func ResolveDSN(dsn string) string {
	if dsn != "" {
		return dsn
	}
	return os.Getenv("TRELLIS_DATABASE_URL")
}

// Open connects and creates or upgrades the catalog, within
// Config.CallTimeout.
func Open(ctx context.Context, cfg Config) (*Trellis, error) {
	cfg.DSN = ResolveDSN(cfg.DSN)
	if cfg.CallTimeout < 0 {
		return nil, terr.New(terr.Validation, "call timeout %s is negative; give a positive duration such as 30s, or none for the default (%s)", cfg.CallTimeout, DefaultCallTimeout)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.TargetSchema != "" && cfg.TargetSchema == catalog.New(cfg.Schema).Schema {
		return nil, terr.New(terr.Validation, "target schema %q is the instance schema, which holds trellis-repl's catalog; put the targets in another schema (Config.TargetSchema)", cfg.TargetSchema)
	}
	octx, cancel := withBudget(ctx, cfg.CallTimeout)
	defer cancel()
	t, err := open(octx, cfg)
	return t, timedOut("Open", cfg.CallTimeout, err)
}

// open is Open once the call timeout is set.
func open(ctx context.Context, cfg Config) (*Trellis, error) {
	if cfg.Capture == "" {
		cfg.Capture = CaptureAuto
	}
	if cfg.Confirm == "" {
		cfg.Confirm = ConfirmLocal
	}
	switch cfg.Capture {
	case CaptureAuto, CaptureLogical, CaptureTrigger:
	default:
		return nil, terr.New(terr.Validation, "capture mode %q is unknown; use auto, logical or trigger", cfg.Capture)
	}
	switch cfg.Confirm {
	case ConfirmLocal, ConfirmApplied:
	default:
		return nil, terr.New(terr.Validation, "confirm mode %q is unknown; use local or applied", cfg.Confirm)
	}
	if cfg.OnDisruption == "" {
		cfg.OnDisruption = OnDisruptionPause
	}
	if cfg.OnDisruption != OnDisruptionPause && cfg.OnDisruption != OnDisruptionRepair {
		return nil, terr.New(terr.Validation, "on-disruption mode %q is unknown; use pause (wait for RESUME TRANSFORM) or repair (rebuild in place at once)", cfg.OnDisruption)
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = time.Second
	}
	if cfg.QuarantineAfter <= 0 {
		cfg.QuarantineAfter = 5
	}
	if cfg.SelfCheckEvery < 0 {
		return nil, terr.New(terr.Validation, "self-check interval %s is negative; give a positive duration such as 1h, or 0 for no periodic self-check", cfg.SelfCheckEvery)
	}
	if cfg.SelfCheckSample == 0 {
		cfg.SelfCheckSample = DefaultSelfCheckSample
	}
	if !(cfg.SelfCheckSample > 0 && cfg.SelfCheckSample <= 1) {
		return nil, terr.New(terr.Validation, "self-check sample %g is not a share of the target; give a fraction in (0, 1], such as 0.1", cfg.SelfCheckSample)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 10000
	}
	if cfg.CoalesceWindow == 0 {
		cfg.CoalesceWindow = DefaultCoalesceWindow
	}
	if cfg.CoalesceKeys <= 0 {
		cfg.CoalesceKeys = 1000
	}
	if cfg.StoreSyncInterval == 0 {
		cfg.StoreSyncInterval = DefaultStoreSyncInterval
	}
	if cfg.TriggerPollInterval <= 0 {
		cfg.TriggerPollInterval = DefaultTriggerPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, terr.Wrap(terr.Validation, err, "the connection string is not valid: %s; pass --dsn postgres://user@host/db or set TRELLIS_DATABASE_URL", redact.ParseError(err))
	}
	if cfg.ReadOnly {
		pcfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	budget, err := pipeline.SplitBudget(cfg.MaxConnections, cfg.PoolSize)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(budget.Control)
	pcfg.MinConns = 0
	if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
		// Names trellis-repl's sessions in pg_stat_activity; the runner's
		// own (lock, appliers, capture) say which they are.
		pcfg.ConnConfig.RuntimeParams["application_name"] = "trellis-repl"
	}
	schema := catalog.New(cfg.Schema).Schema
	pcfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		// Unqualified names must never resolve in the instance schema (a
		// role named like it would, through "$user"): definitions, targets,
		// RESUME and DROP name the user's objects.
		var setting, user string
		if err := conn.QueryRow(ctx, `SELECT current_setting('search_path'), current_user`).Scan(&setting, &user); err != nil {
			return err
		}
		if sp, changed := withoutSchema(setting, user, schema); changed {
			_, err := conn.Exec(ctx, `SELECT set_config('search_path', $1, false)`, sp)
			return err
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "cannot connect to PostgreSQL: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, terr.Wrap(terr.Unavailable, err, "cannot connect to PostgreSQL at %s:%d: %v; check --dsn and that the server is running",
			pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, err)
	}
	t := &Trellis{cfg: cfg, pool: pool, cat: catalog.New(cfg.Schema), log: cfg.Logger, budget: budget}
	t.def = define.New(t.cat, cfg.TargetSchema)
	if cfg.ReadOnly {
		if err := t.checkCatalog(ctx); err != nil {
			pool.Close()
			return nil, err
		}
		t.rt = pipeline.New(t.options(), pool, budget, t.cat, t.log, nil)
		return t, nil
	}
	if cfg.NoInstall {
		err = t.checkCatalog(ctx)
	} else {
		err = t.inTx(ctx, func(tx pgx.Tx) error { return install(ctx, tx, t.cat, cfg.TargetSchema) })
	}
	if err == nil {
		err = t.applyRestored(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := t.observe(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return t, nil
}

// checkCatalog makes sure an open that installs nothing (ReadOnly,
// NoInstall) finds the instance's catalog,
// at the version this binary reads, and that the role may read it.
func (t *Trellis) checkCatalog(ctx context.Context) error {
	p, err := t.cat.Probe(ctx, t.pool)
	if fault.SQLState(err) == "42501" {
		role := pgx.Identifier{t.pool.Config().ConnConfig.User}.Sanitize()
		schema := pgx.Identifier{t.cat.Schema}.Sanitize()
		return terr.Wrap(terr.Validation, err, "role %s may not read instance schema %q: %v; as its owner run GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT ON ALL TABLES IN SCHEMA %s TO %s; (and GRANT pg_monitor TO %s)",
			role, t.cat.Schema, err, schema, role, schema, role, role)
	}
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "read the catalog of instance schema %q: %v", t.cat.Schema, err)
	}
	if !p.HasCatalog {
		others, err := catalog.Instances(ctx, t.pool)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		see := "this database holds no trellis-repl instance: `trellis-repl migrate` (Migrate) or `apply` creates one"
		if len(others) > 0 {
			see = "instances on this database: " + strings.Join(others, ", ")
		}
		if p.SchemaExists {
			return terr.New(terr.NotFound, "schema %q on this database holds no trellis-repl catalog; pass --schema NAME of an instance (%s)", t.cat.Schema, see)
		}
		return terr.New(terr.NotFound, "instance schema %q does not exist on this database; pass --schema NAME of an instance (%s)", t.cat.Schema, see)
	}
	switch want := catalog.Current(); {
	case p.Version > want:
		return terr.New(terr.Conflict, "the catalog in schema %q is at version %d, newer than this binary reads (%d): upgrade trellis-repl", t.cat.Schema, p.Version, want)
	case p.Version < want:
		return terr.New(terr.Conflict, "the catalog in schema %q is at version %d, older than this binary reads (%d): `trellis-repl migrate` (Migrate) of this version upgrades it (reading commands and Config.NoInstall never write)", t.cat.Schema, p.Version, want)
	}
	return nil
}

// observe sets up the instance's observers: Config.Metrics bound to the
// instance, then Config.Observer.
func (t *Trellis) observe(ctx context.Context) error {
	var obs []Observer
	if m := t.cfg.Metrics; m != nil {
		if m.Instance() == "" {
			var db string
			if err := t.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
				return terr.Wrap(terr.Unavailable, err, "identify the database: %v", err)
			}
			m = m.ForInstance(db + "/" + t.cat.Schema)
		}
		if t.cfg.InstanceMetricsOnly {
			m = m.InstanceOnly()
		}
		obs = append(obs, m)
	}
	if t.cfg.Observer != nil {
		obs = append(obs, t.cfg.Observer)
	}
	t.rt = pipeline.New(t.options(), t.pool, t.budget, t.cat, t.log, FanOut(obs...))
	return nil
}

// withoutSchema is the search_path setting without the instance schema,
// whether named or reached through "$user" (a role named like it), and
// whether it changed.
func withoutSchema(setting, user, schema string) (string, bool) {
	var out []string
	changed := false
	for _, e := range strings.Split(setting, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name := strings.ToLower(e)
		if strings.HasPrefix(e, `"`) && strings.HasSuffix(e, `"`) && len(e) >= 2 {
			name = strings.ReplaceAll(e[1:len(e)-1], `""`, `"`)
		}
		if name == "$user" {
			name = user
		}
		if name == schema {
			changed = true
			continue
		}
		out = append(out, e)
	}
	return strings.Join(out, ", "), changed
}

// Close stops the background work of this handle (every Run in
// progress returns, its workers stopped and its store closed) and then
// releases its connections. It may be called more than once; every call
// after it is a validation error.
func (t *Trellis) Close() {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		t.rt.Stop()
		t.pool.Close()
	})
}

// Schema is the instance schema.
func (t *Trellis) Schema() string { return t.cat.Schema }

// WatermarkToken returns a token for "now": AwaitConverged(token) returns
// once every write committed before this call is in every target.
func (t *Trellis) WatermarkToken(ctx context.Context) (Token, error) {
	ctx, cancel, err := t.call(ctx, "WatermarkToken")
	if err != nil {
		return 0, err
	}
	defer cancel()
	tk, err := t.rt.WatermarkToken(ctx)
	return tk, t.timedOut("WatermarkToken", err)
}

// options are the settings the runtime reads, from cfg with its defaults.
func (t *Trellis) options() pipeline.Options {
	c := t.cfg
	return pipeline.Options{DSN: c.DSN, DataDir: c.DataDir, Capture: c.Capture, Confirm: c.Confirm, Publication: c.Publication,
		ProgressInterval: c.ProgressInterval, BatchSize: c.BatchSize, CoalesceWindow: c.CoalesceWindow, CoalesceKeys: c.CoalesceKeys,
		StoreSyncInterval: c.StoreSyncInterval, TriggerPollInterval: c.TriggerPollInterval, MaxRetainedWAL: c.MaxRetainedWAL,
		QuarantineAfter: c.QuarantineAfter, ReadOnly: c.ReadOnly, SelfCheckEvery: c.SelfCheckEvery, SelfCheckSample: c.SelfCheckSample,
		OnDisruption: c.OnDisruption}
}

// writable refuses a call that writes on a read-only open.
func (t *Trellis) writable(what string) error {
	if t.cfg.ReadOnly {
		return terr.New(terr.Validation, "%s writes to the catalog, and this instance was opened read-only (Config.ReadOnly); open it without ReadOnly", what)
	}
	return nil
}

// AwaitConverged waits until every transform that is not paused by a user
// is live and has applied everything up to token. It fails at once, naming
// it, when a transform is paused by the system (its capture failed), since
// it would never converge; the context bounds the wait (code timeout,
// naming every transform still behind).
//
// A chain's levels converge one after the other: what a level writes
// while applying up to token lies after token in the WAL. So for a chain
// of n levels the wait is repeated n-1 times, each to a new token taken
// once the level above has converged.
func (t *Trellis) AwaitConverged(ctx context.Context, token Token) error {
	return t.AwaitTransforms(ctx, token)
}

// AwaitTransforms is AwaitConverged for the named transforms (name or
// schema.name) and the transforms whose targets they read, directly or
// through others; no names: every one. A named transform that is paused,
// by anyone, cannot converge (code conflict); an unknown name is a
// not_found error.
func (t *Trellis) AwaitTransforms(ctx context.Context, token Token, names ...string) error {
	if err := t.open("AwaitTransforms"); err != nil {
		return err
	}
	ts, err := t.cat.ListCached(ctx, t.pool, &t.planBytes)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "read transforms: %v", err)
	}
	for _, n := range names {
		if findNamed(ts, n) == nil {
			return terr.New(terr.NotFound, "transform %q does not exist; `trellis-repl status` lists the transforms", n)
		}
	}
	for level := define.ChainDepth(awaitScope(ts, names)); ; level-- {
		if err := t.awaitApplied(ctx, token, names); err != nil {
			return err
		}
		if level <= 1 {
			return nil
		}
		if token, err = t.WatermarkToken(ctx); err != nil {
			return err
		}
	}
}

// findNamed is the transform called name (or schema.name), nil when none.
func findNamed(ts []*catalog.Transform, name string) *catalog.Transform {
	for _, tr := range ts {
		if tr.Replaces == 0 && (tr.Name == name || tr.Schema+"."+tr.Name == name) {
			return tr
		}
	}
	return nil
}

// awaitScope is what a wait for names covers: the named transforms, the
// redefinitions that will replace them, and upstream the transforms whose
// targets they read; every transform when names is empty.
func awaitScope(ts []*catalog.Transform, names []string) []*catalog.Transform {
	if len(names) == 0 {
		return ts
	}
	in := map[int64]bool{}
	var add func(id int64)
	add = func(id int64) {
		for _, tr := range define.UpstreamOf(ts, id) {
			if in[tr.ID] {
				continue
			}
			in[tr.ID] = true
			for _, o := range ts {
				if o.Replaces == tr.ID {
					add(o.ID)
				}
			}
		}
	}
	for _, n := range names {
		if tr := findNamed(ts, n); tr != nil {
			add(tr.ID)
		}
	}
	var out []*catalog.Transform
	for _, tr := range ts {
		if in[tr.ID] {
			out = append(out, tr)
		}
	}
	return out
}

// awaitApplied is one level of AwaitTransforms. It polls quickly at first
// (a change is usually applied within milliseconds), then every 20 ms.
func (t *Trellis) awaitApplied(ctx context.Context, token Token, names []string) error {
	delay := time.Millisecond
	named := map[int64]bool{}
	var behind []string
	for {
		// Taken before the reads, so a batch applied while they run wakes
		// the wait below.
		woken := t.rt.Progressed()
		// The reads are not cut short by ctx's deadline: a wait that ends
		// while they run still names what is behind (they take
		// milliseconds; their own bound is catalogReadTimeout).
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), catalogReadTimeout)
		// Plans only of rows that changed since the last poll, decoded
		// once per version: a wait polls every few milliseconds.
		all, err := t.cat.ListCached(qctx, t.pool, &t.planBytes)
		if err != nil {
			cancel()
			if slowRead(ctx, err) {
				behind = append(behind[:0], "the catalog (a read of transform progress took over "+catalogReadTimeout.String()+")")
				delay = t.waitRound(ctx, woken, delay)
				continue
			}
			return terr.Wrap(terr.Unavailable, err, "read transform progress: %v", err)
		}
		ts := awaitScope(all, names)
		for _, n := range names {
			if tr := findNamed(all, n); tr != nil {
				named[tr.ID] = true
			}
		}
		behind = behind[:0]
		var positions []int64 // transforms behind by their applied position only
		// A partition attached or detached is a change no position
		// covers: wait until its corrections are queued and done (ADR 0015).
		var roots []uint32
		for _, tr := range ts {
			if e, err := t.plans.Get(tr); err == nil && !catalog.Frozen(tr.State) {
				for _, src := range e.Tables {
					roots = append(roots, src.OID)
				}
			}
		}
		changed, err := t.cat.TreesChanged(qctx, t.pool, roots)
		var corr []catalog.Correction
		if err == nil {
			corr, err = t.cat.Corrections(qctx, t.pool, 0)
		}
		cancel()
		if err != nil {
			if slowRead(ctx, err) {
				behind = append(behind[:0], "the catalog (a read of partition corrections took over "+catalogReadTimeout.String()+")")
				delay = t.waitRound(ctx, woken, delay)
				continue
			}
			return terr.Wrap(terr.Unavailable, err, "read partition corrections: %v", err)
		}
		if changed {
			behind = append(behind, "a partition tree change (its corrections are not queued yet)")
		}
		correcting := map[int64]bool{}
		for _, k := range corr {
			correcting[k.TransformID] = true
		}
		for _, tr := range ts {
			if catalog.Frozen(tr.State) {
				if tr.PausedBy == "user" && !named[tr.ID] {
					continue
				}
				msg := "paused by the system"
				if tr.PausedBy == "user" {
					msg = "paused by a user"
				}
				if tr.State == catalog.StateQuarantined {
					msg = "quarantined: it holds too many keys whose re-derive fails on row data (trellis-repl held lists them)"
				}
				if tr.CaptureFailure != nil {
					msg = tr.CaptureFailure.Kind + ": " + tr.CaptureFailure.Error
				}
				return terr.New(terr.Conflict, "transform %q cannot converge: %s; fix the cause and RESUME TRANSFORM %s", tr.Name, msg, define.ResumeName(all, tr))
			}
			// A redefinition converges when it has replaced the old one.
			switch {
			case tr.State != catalog.StateLive:
				behind = append(behind, fmt.Sprintf("%s (%s)", tr.Name, tr.State))
			case tr.Replaces != 0:
				behind = append(behind, fmt.Sprintf("%s (a redefinition not swapped in yet)", tr.Name))
			case correcting[tr.ID]:
				behind = append(behind, fmt.Sprintf("%s (correcting partitions)", tr.Name))
			case tr.AppliedLSN < uint64(token):
				behind = append(behind, fmt.Sprintf("%s (applied %s)", tr.Name, catalog.FormatLSN(tr.AppliedLSN)))
				positions = append(positions, tr.ID)
			}
		}
		// A runner here records the positions these reached while idle
		// now, not at its next ProgressInterval (ADR 0044).
		t.rt.HurryProgress(positions)
		if len(behind) == 0 {
			// Converged, unless the server is not the one the runner last
			// started on (ADR 0039): then the positions say nothing yet.
			moved, err := t.serverMoved(ctx)
			if err != nil {
				return err
			}
			if moved == "" {
				return nil
			}
			behind = append(behind, "every transform ("+moved+"; no runner has started on this server since)")
		}
		if ctx.Err() != nil {
			return t.behindError(ctx, token, behind)
		}
		delay = t.waitRound(ctx, woken, delay)
	}
}

// waitRound waits for the next round of a wait: a batch applied (woken),
// the delay, or the end of ctx (the round after it reports what is
// behind); it returns the next round's delay.
func (t *Trellis) waitRound(ctx context.Context, woken <-chan struct{}, delay time.Duration) time.Duration {
	select {
	case <-ctx.Done():
	case <-woken:
	case <-time.After(delay):
	}
	return min(2*delay, 20*time.Millisecond)
}

// slowRead reports whether a catalog read of a wait failed only because
// it took longer than its own bound while the caller's context still
// runs: on a loaded server a round then learns nothing, and the wait goes
// on (its context bounds it).
func slowRead(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// serverMoved is the sentence saying how the server is not the one the
// runner last started on, "" when it is.
func (t *Trellis) serverMoved(ctx context.Context) (string, error) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), catalogReadTimeout)
	defer cancel()
	inst, err := t.cat.GetInstance(qctx, t.pool)
	if err != nil {
		return "", terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
	}
	return pipeline.ServerDiffers(qctx, t.pool, inst.Server)
}

// catalogReadTimeout bounds the catalog reads of one round of a wait.
const catalogReadTimeout = 10 * time.Second

// behindError is the timeout of a wait: what is still behind and, when no
// runner is attached, that nothing will catch up.
func (t *Trellis) behindError(ctx context.Context, token Token, behind []string) error {
	cause := "is `trellis-repl run` running?"
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if st, err := pipeline.InspectLock(cctx, t.pool, t.cat.LockKey()); err == nil {
		if st.PID == 0 {
			cause = "no runner is attached to instance " + t.cat.Schema + ": start `trellis-repl run`"
		} else {
			cause = fmt.Sprintf("the runner (backend %d) has not caught up", st.PID)
		}
	}
	what := "the transforms"
	if len(behind) > 0 {
		what = strings.Join(behind, ", ")
	}
	return terr.Wrap(terr.Timeout, ctx.Err(), "timed out waiting for convergence to %s; still behind: %s; %s", token, what, cause)
}
