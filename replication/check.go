package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

// Availability is what the server and role offer for logical capture
// (reference §6). `--capture auto` uses Reason to choose between logical
// and trigger capture and to say why.
type Availability struct {
	ServerVersion int // server_version_num
	WALLevel      string
	InRecovery    bool // a standby: logical capture needs the primary
	Role          string
	// ReplicationPrivilege: superuser, REPLICATION attribute, or member of
	// rds_replication (RDS/Aurora).
	ReplicationPrivilege bool
	// CanCreatePublication: CREATE on the current database.
	CanCreatePublication bool
	MaxReplicationSlots  int
	FreeReplicationSlots int
	MaxWALSenders        int
	FreeWALSenders       int
	// SlotExists and PublicationExists are only meaningful when the
	// corresponding CheckOption was given.
	SlotExists        bool
	PublicationExists bool
	// ReplicationConnError is why the probe replication connection failed
	// ("" when it worked or WithReplicationProbe was not given).
	ReplicationConnError string
	// ReplicationConnCode is the SQLSTATE of that failure, when the server
	// sent one.
	ReplicationConnCode string
	// ReplicationProbed: WithReplicationProbe was given.
	ReplicationProbed bool
	// Database is the current database.
	Database string
}

// Finding is one line of the availability check: what was checked, its
// result (ok, fail or skip), what was found and, when it failed, the fix.
type Finding struct {
	Check  string `json:"check"`
	Result string `json:"result"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Findings lists every check with its result, in the order an operator
// fixes them.
func (a Availability) Findings() []Finding {
	var out []Finding
	add := func(check string, ok bool, detail, fix string) {
		f := Finding{Check: check, Result: "ok", Detail: detail}
		if !ok {
			f.Result, f.Fix = "fail", fix
		}
		out = append(out, f)
	}
	add("server_version", a.ServerVersion >= 130000, fmt.Sprintf("PostgreSQL %d.%d", a.ServerVersion/10000, a.ServerVersion%10000),
		"upgrade to PostgreSQL 13 or later")
	add("wal_level", a.WALLevel == "logical", "wal_level = "+a.WALLevel,
		"ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")
	role := "primary"
	if a.InRecovery {
		role = "standby (in recovery)"
	}
	add("primary", !a.InRecovery, "the server is a "+role, "connect to the primary")
	add("replication_privilege", a.ReplicationPrivilege, fmt.Sprintf("role %s: REPLICATION attribute or superuser = %v", quoteIdent(a.Role), a.ReplicationPrivilege),
		fmt.Sprintf("ALTER ROLE %s REPLICATION;", quoteIdent(a.Role)))
	slotDetail := fmt.Sprintf("%d of %d replication slots free", max(a.FreeReplicationSlots, 0), a.MaxReplicationSlots)
	if a.SlotExists {
		slotDetail += " (the instance's slot exists)"
	}
	add("replication_slots", a.SlotExists || a.FreeReplicationSlots > 0, slotDetail,
		fmt.Sprintf("ALTER SYSTEM SET max_replication_slots = %d; then restart PostgreSQL (or drop unused slots)", a.MaxReplicationSlots+1))
	add("wal_senders", a.FreeWALSenders > 0, fmt.Sprintf("%d of %d WAL senders free", max(a.FreeWALSenders, 0), a.MaxWALSenders),
		fmt.Sprintf("ALTER SYSTEM SET max_wal_senders = %d; then restart PostgreSQL", a.MaxWALSenders+1))
	add("create_publication", a.PublicationExists || a.CanCreatePublication,
		fmt.Sprintf("role %s may create a publication = %v (exists = %v)", quoteIdent(a.Role), a.CanCreatePublication, a.PublicationExists),
		fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s;", quoteIdent(a.Database), quoteIdent(a.Role)))
	switch {
	case !a.ReplicationProbed:
		out = append(out, Finding{Check: "replication_connection", Result: "skip", Detail: "not tried"})
	case a.ReplicationConnError == "":
		add("replication_connection", true, "IDENTIFY_SYSTEM over a replication=database connection worked", "")
	case a.ReplicationConnCode == "42501":
		add("replication_connection", false, a.ReplicationConnError, fmt.Sprintf("ALTER ROLE %s REPLICATION;", quoteIdent(a.Role)))
	default:
		add("replication_connection", false, a.ReplicationConnError,
			"let the role connect to this database in pg_hba.conf (a logical replication connection matches the database's own line, not the \"replication\" one) and connect directly, not through a pooler")
	}
	return out
}

// CheckOption refines Check.
type CheckOption func(*checkOptions)

type checkOptions struct {
	slot, publication, probeDSN string
}

// WithSlot names the slot the instance uses: when it already exists, no
// free slot is needed.
func WithSlot(name string) CheckOption { return func(o *checkOptions) { o.slot = name } }

// WithPublication names the publication the instance uses: when it already
// exists, CREATE on the database is not needed.
func WithPublication(name string) CheckOption {
	return func(o *checkOptions) { o.publication = name }
}

// WithReplicationProbe also opens a replication=database connection with
// dsn and runs IDENTIFY_SYSTEM: pg_hba.conf or a pooler can refuse it even
// when everything else allows logical capture.
func WithReplicationProbe(dsn string) CheckOption {
	return func(o *checkOptions) { o.probeDSN = dsn }
}

// Check reads, on a normal connection, whether logical capture is possible.
// The error is only for failing to find out; a "no" is in Reason.
func Check(ctx context.Context, q Querier, opts ...CheckOption) (Availability, error) {
	var o checkOptions
	for _, opt := range opts {
		opt(&o)
	}
	var a Availability
	var usedSlots, usedSenders int
	err := q.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int,
		       current_setting('wal_level'),
		       pg_is_in_recovery(),
		       current_user::text, current_database()::text,
		       coalesce((SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user), false)
		         OR coalesce((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = 'rds_replication'), false),
		       has_database_privilege(current_database(), 'CREATE'),
		       current_setting('max_replication_slots')::int,
		       (SELECT count(*) FROM pg_replication_slots)::int,
		       current_setting('max_wal_senders')::int,
		       (SELECT count(*) FROM pg_stat_replication)::int,
		       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
		       EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2)`,
		o.slot, o.publication).Scan(
		&a.ServerVersion, &a.WALLevel, &a.InRecovery, &a.Role, &a.Database, &a.ReplicationPrivilege,
		&a.CanCreatePublication, &a.MaxReplicationSlots, &usedSlots, &a.MaxWALSenders, &usedSenders,
		&a.SlotExists, &a.PublicationExists)
	if err != nil {
		return Availability{}, fmt.Errorf("replication: check logical capture: %w", err)
	}
	a.FreeReplicationSlots = a.MaxReplicationSlots - usedSlots
	a.FreeWALSenders = a.MaxWALSenders - usedSenders
	if o.probeDSN != "" {
		a.ReplicationProbed = true
		if err := probe(ctx, o.probeDSN); err != nil {
			a.ReplicationConnError, a.ReplicationConnCode = probeReason(err), pgCode(err)
		}
	}
	return a, nil
}

// probeReason names why a replication connection failed, from its SQLSTATE
// where the server gave one.
func probeReason(err error) string {
	var un *UnavailableError
	if c := classify(err, "", ""); errors.As(c, &un) {
		return un.Reason + ": " + err.Error()
	}
	return err.Error()
}

func probe(ctx context.Context, dsn string) error {
	conn, err := connectReplication(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	if _, err := pglogrepl.IdentifySystem(ctx, conn); err != nil {
		return fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	return nil
}

// Possible reports whether logical capture can run.
func (a Availability) Possible() bool { return a.Reason() == "" }

// Reason is "" when logical capture is possible, else a sentence naming
// every obstacle and its fix.
func (a Availability) Reason() string {
	var why []string
	if a.ServerVersion < 130000 {
		why = append(why, fmt.Sprintf("PostgreSQL %d is too old (13 or later is required)", a.ServerVersion/10000))
	}
	if a.WALLevel != "logical" {
		why = append(why, fmt.Sprintf("wal_level is %q (set wal_level = logical and restart PostgreSQL)", a.WALLevel))
	}
	if a.InRecovery {
		why = append(why, "the server is a standby (connect to the primary)")
	}
	if !a.ReplicationPrivilege {
		why = append(why, fmt.Sprintf("role %q has no REPLICATION attribute (ALTER ROLE %s REPLICATION)", a.Role, quoteIdent(a.Role)))
	}
	if !a.SlotExists && a.FreeReplicationSlots <= 0 {
		why = append(why, fmt.Sprintf("all %d replication slots are in use (raise max_replication_slots)", a.MaxReplicationSlots))
	}
	if a.FreeWALSenders <= 0 {
		why = append(why, fmt.Sprintf("all %d WAL senders are in use (raise max_wal_senders)", a.MaxWALSenders))
	}
	if !a.PublicationExists && !a.CanCreatePublication {
		why = append(why, fmt.Sprintf("role %q may not create a publication (GRANT CREATE ON DATABASE to it)", a.Role))
	}
	if a.ReplicationConnError != "" {
		why = append(why, "a replication connection failed ("+a.ReplicationConnError+"; check pg_hba.conf and that no pooler is in the way)")
	}
	if len(why) == 0 {
		return ""
	}
	return "logical capture is not possible: " + strings.Join(why, "; ") + "."
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
