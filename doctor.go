package trellis

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pipeline"
	"github.com/trellis-repl/trellis-repl/internal/redact"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/replication"
)

// Finding is one check of Doctor: what was checked, ok, fail or skip, what
// was found, and the fix when it failed.
type Finding = replication.Finding

// DoctorReport is what Doctor found: every check, the capture mode
// --capture=auto would pick and why, and what to change to get logical
// replication (empty when it is available).
type DoctorReport struct {
	Checks []Finding `json:"checks"`
	// AutoMode is the mode --capture=auto picks here (logical or trigger).
	AutoMode string `json:"auto_mode"`
	// Reason says why.
	Reason string `json:"reason"`
	// ToGetLogical are the fixes of the failed checks, in order.
	ToGetLogical []string `json:"to_get_logical"`
	// Privileges says, for the source tables of the instance's transforms,
	// which capture setups the role's privileges allow (README, Privileges).
	Privileges []Finding `json:"privileges"`
	// Connections compares the runner's connection budget
	// (Config.MaxConnections) with the server's max_connections, its
	// reserved slots and the connections in use.
	Connections Finding `json:"connections"`
}

// Doctor checks, without changing anything, whether logical replication
// is available to cfg's role on cfg's server (wal_level, the REPLICATION
// attribute, free slots and WAL senders, primary or standby, version, and
// a real replication connection, which pg_hba.conf or a pooler may refuse),
// and reports the mode --capture=auto would choose.
func Doctor(ctx context.Context, cfg Config) (*DoctorReport, error) {
	dsn := ResolveDSN(cfg.DSN)
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, terr.Wrap(terr.Validation, err, "the connection string is not valid: %s; pass --dsn postgres://user@host/db or set TRELLIS_DATABASE_URL", redact.ParseError(err))
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "cannot connect to PostgreSQL at %s:%d: %v; check --dsn and that the server is running", cc.Host, cc.Port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dbOID uint32
	if err := conn.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dbOID); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "identify the database: %v", err)
	}
	cat := catalog.New(cfg.Schema)
	avail, err := replication.Check(ctx, conn, replication.WithSlot(cat.SlotName(dbOID)),
		replication.WithPublication(cat.PublicationName()), replication.WithReplicationProbe(dsn))
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "check logical replication: %v", err)
	}
	r := &DoctorReport{Checks: avail.Findings()}
	for _, f := range r.Checks {
		if f.Result == "fail" && !slices.Contains(r.ToGetLogical, f.Fix) {
			r.ToGetLogical = append(r.ToGetLogical, f.Fix)
		}
	}
	privs, pub, trig, err := privilegeFindings(ctx, conn, cat, avail.Role)
	if err != nil {
		return nil, err
	}
	r.Privileges = privs
	budget, err := pipeline.SplitBudget(cfg.MaxConnections, cfg.PoolSize)
	if err != nil {
		return nil, err
	}
	if r.Connections, err = pipeline.BudgetFinding(ctx, conn, budget); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	switch {
	case avail.Possible() && cfg.Publication == "" && !pub && trig:
		r.AutoMode, r.Reason = CaptureTrigger, "logical replication is available, but the role may not publish every source and has TRIGGER on all of them"
	case avail.Possible():
		r.AutoMode, r.Reason = CaptureLogical, "logical replication is available"
	default:
		r.AutoMode = CaptureTrigger
		r.Reason = strings.TrimSuffix(avail.Reason(), ".") + "; --capture=auto captures with triggers instead."
	}
	return r, nil
}

// privilegeFindings checks the role's privileges on the source tables of
// the instance's transforms (none when the instance is not installed): may
// it publish them (setups a, b) and create triggers on them (setup c).
func privilegeFindings(ctx context.Context, conn *pgx.Conn, cat catalog.Catalog, role string) (out []Finding, publish, trigger bool, err error) {
	v, err := cat.Version(ctx, conn)
	if err != nil || v == 0 {
		return nil, true, true, err
	}
	tables, err := pipeline.SourceTables(ctx, conn, cat)
	if err != nil {
		return nil, false, false, err
	}
	if len(tables) == 0 {
		return nil, true, true, nil
	}
	pub, trig, blocker, err := capture.Capturable(ctx, conn, tables)
	if err != nil {
		return nil, false, false, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	r := pgx.Identifier{role}.Sanitize()
	out = []Finding{{Check: "publish_sources", Result: "ok", Detail: "the role owns every source table (setup b, or its own publication)"}}
	if !pub {
		out[0] = Finding{Check: "publish_sources", Result: "fail", Detail: "the role does not own " + blocker,
			Fix: "setup (a): the owner runs CREATE PUBLICATION app_pub FOR TABLE <sources> WITH (publish_via_partition_root = true); and trellis-repl runs with --publication app_pub — or setup (b): GRANT <owner> TO " + r + ";"}
	}
	tf := Finding{Check: "trigger_sources", Result: "ok", Detail: "the role owns or has TRIGGER on every source table (setup c)"}
	if !trig {
		tf = Finding{Check: "trigger_sources", Result: "fail", Detail: "the role lacks TRIGGER on some source table",
			Fix: "setup (c): the owner runs GRANT TRIGGER ON <sources> TO " + r + ";"}
	}
	return append(out, tf), pub, trig, nil
}
