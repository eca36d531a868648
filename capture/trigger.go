package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// ringSize is the number of capture log partitions. Writers append to the
// current one; the drain recycles the others by TRUNCATE once every
// transaction that could write to them has ended (ADR 0012).
const ringSize = 4

// TriggerConfig configures a Trigger capture.
type TriggerConfig struct {
	// Schema is the instance schema: the capture log, its ring pointer, the
	// registry of captured tables and the trigger functions live there, and
	// the triggers are named after it.
	Schema string
	// Pool runs installs, removals and the objects' setup.
	Pool Beginner
	// Conn is the configuration of the drain's own connection.
	Conn *pgx.ConnConfig
	// Position is the local store's received position.
	Position Position
	Logger   *slog.Logger
	// PollMin and PollMax bound the drain's polling interval: PollMin after
	// a drain that found changes, doubling while idle up to PollMax.
	PollMin, PollMax time.Duration
	// RotateEvery is how often the ring moves on to its next partition
	// once the current one was written (default 1s).
	RotateEvery time.Duration
	// BatchRows caps the rows one drain transaction moves (default 20000).
	BatchRows int
	// LockTimeout bounds every wait for a lock on a user table or a used
	// capture partition (default 200ms; retried).
	LockTimeout time.Duration
	// Health, when set, follows the drain: called with up after the first
	// drain that works (and again after a failure), and with the error
	// each time a drain session fails.
	Health HealthFunc
}

func (c TriggerConfig) withDefaults() TriggerConfig {
	if c.PollMin <= 0 {
		c.PollMin = 2 * time.Millisecond
	}
	if c.PollMax <= 0 {
		c.PollMax = 100 * time.Millisecond
	}
	if c.RotateEvery <= 0 {
		c.RotateEvery = time.Second
	}
	if c.BatchRows <= 0 {
		c.BatchRows = 20000
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Trigger captures with statement-level triggers that append (table, key)
// to a capture log the drain moves into the intake.
type Trigger struct {
	cfg TriggerConfig
	mu  sync.Mutex // serialises installs and removals
	// removing are the removals Retain left for later: each is logged when
	// it is first put off (and fails, once per episode) and when it is
	// done, not at every reconcile. Guarded by mu.
	removing removals
}

// NewTrigger returns trigger capture for cfg.
func NewTrigger(cfg TriggerConfig) *Trigger {
	cfg = cfg.withDefaults()
	return &Trigger{cfg: cfg, removing: removals{log: cfg.Logger, removed: "trigger capture removed", what: "remove trigger capture"}}
}

// Mode is ModeTrigger.
func (t *Trigger) Mode() string { return ModeTrigger }

func (t *Trigger) obj(name string) string { return pgx.Identifier{t.cfg.Schema, name}.Sanitize() }

func (t *Trigger) part(i int) string { return t.obj(fmt.Sprintf("capture_log_%d", i)) }

// funcName is the trigger function of a source table, by its OID.
func funcName(oid uint32) string { return fmt.Sprintf("capture_%d", oid) }

// triggerName names one of the instance's triggers on a source table: the
// instance schema keeps two instances' triggers apart, within PostgreSQL's
// 63-byte names.
func (t *Trigger) triggerName(op string) string {
	n := "trellis_" + t.cfg.Schema + "_" + op
	if len(n) <= 63 {
		return n
	}
	h := sha256.Sum256([]byte(t.cfg.Schema))
	return "trellis_" + hex.EncodeToString(h[:8]) + "_" + op
}

// triggerOn names the trigger of op that captures tb on rel: tb itself,
// or one of its partitions, whose triggers carry tb's OID so that a
// partition that is a source of its own has both (and keeps them apart
// when it is detached).
func (t *Trigger) triggerOn(op string, tb Table, rel uint32) string {
	if rel == tb.OID {
		return t.triggerName(op)
	}
	return t.triggerName(fmt.Sprintf("%s_%d", op, tb.OID))
}

// triggerOps are the four triggers on every captured table.
var triggerOps = []struct{ op, event, referencing string }{
	{"ins", "INSERT", "REFERENCING NEW TABLE AS new_rows"},
	{"upd", "UPDATE", "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"},
	{"del", "DELETE", "REFERENCING OLD TABLE AS old_rows"},
	{"trunc", "TRUNCATE", ""},
}

// Prepare creates the capture log, its ring and the registry when missing.
// Trigger capture keeps no position on the server: what the drain moved is
// in the local store, so a lost store loses it (a disruption).
func (t *Trigger) Prepare(ctx context.Context, prev Continuity) (Prepared, error) {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + t.obj("capture_log") + ` (
			part smallint NOT NULL,
			rel oid NOT NULL,
			key text[],
			truncated boolean NOT NULL DEFAULT false
		) PARTITION BY LIST (part)`,
		`CREATE TABLE IF NOT EXISTS ` + t.obj("capture_ring") + ` (
			one boolean PRIMARY KEY DEFAULT true CHECK (one),
			current smallint NOT NULL
		)`,
		`INSERT INTO ` + t.obj("capture_ring") + ` (current) VALUES (0) ON CONFLICT DO NOTHING`,
		`CREATE TABLE IF NOT EXISTS ` + t.obj("capture_tables") + ` (
			rel oid PRIMARY KEY,
			schema_name text NOT NULL,
			table_name text NOT NULL,
			key_columns text[] NOT NULL,
			installed_at timestamptz NOT NULL DEFAULT now()
		)`,
	}
	for i := 0; i < ringSize; i++ {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES IN (%d)`,
			t.part(i), t.obj("capture_log"), i))
	}
	for _, s := range stmts {
		if _, err := t.cfg.Pool.Exec(ctx, s); err != nil {
			return Prepared{}, terr.Wrap(terr.Unavailable, err, "create the trigger capture log in schema %q: %v", t.cfg.Schema, err)
		}
	}
	var out Prepared
	switch {
	case prev.Changed != "":
		out.Disruption = prev.Changed + "; what trigger capture had moved out of the capture log lived in the local store, which belonged to the server before"
	case prev.RanBefore && prev.StoreLost:
		out.Disruption = "the local checkpoint store is not the one this instance last used (lost or replaced), and trigger capture removed the changes it had moved into it from the capture log"
	}
	out.Confirmed = t.cfg.Position.ReceivedLSN()
	return out, nil
}

// Install puts the capture triggers on every table that lacks them. A
// transaction that wrote a table before its triggers exist holds a lock the
// install waits for, so once Install returns every change a later snapshot
// does not see fires a trigger: no separate fence is needed.
func (t *Trigger) Install(ctx context.Context, tables []Table, waiting WaitFunc) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tb := range tables {
		ok, err := t.installed(ctx, tb)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		lw := lockWaiter{pool: t.cfg.Pool, timeout: t.cfg.LockTimeout}
		if err := lw.run(ctx, tb, "install", "ShareRowExclusiveLock", waiting, func(tx pgx.Tx) error { return t.installOne(ctx, tx, tb) }); err != nil {
			return err
		}
		t.cfg.Logger.Info("trigger capture installed", "table", tb.Ident().Sanitize())
	}
	return nil
}

// installed reports whether tb has all four triggers of this instance and
// a registry entry with the same key.
func (t *Trigger) installed(ctx context.Context, tb Table) (bool, error) {
	var n int
	var key []string
	rels, err := treeOf(ctx, t.cfg.Pool, tb)
	if err != nil {
		return false, err
	}
	var onRels []uint32
	var names []string
	for _, rel := range rels {
		for _, o := range triggerOps {
			onRels, names = append(onRels, rel), append(names, t.triggerOn(o.op, tb, rel))
		}
	}
	err = t.cfg.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_trigger g JOIN unnest($1::oid[], $2::text[]) w(rel, name) ON g.tgrelid = w.rel AND g.tgname = w.name),
		       (SELECT key_columns FROM `+t.obj("capture_tables")+` WHERE rel = $3)`,
		onRels, names, tb.OID).Scan(&n, &key)
	if err != nil {
		return false, fmt.Errorf("look up the capture triggers of %s: %w", tb.Ident().Sanitize(), err)
	}
	return n == len(names) && slices.Equal(key, tb.Key), nil
}

// treeOf is tb and, when it is partitioned, every table of its partition
// tree: a statement on a partition fires that partition's triggers only,
// so capture on the root covers every partition by putting its triggers
// on each (all record the root).
func treeOf(ctx context.Context, q Querier, tb Table) ([]uint32, error) {
	rows, err := q.Query(ctx, `SELECT relid::oid FROM pg_partition_tree($1::oid::regclass) ORDER BY level, relid`, tb.OID)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of %s: %w", tb.Ident().Sanitize(), err)
	}
	defer rows.Close()
	out := []uint32{tb.OID}
	for rows.Next() {
		var oid uint32
		if err := rows.Scan(&oid); err != nil {
			return nil, err
		}
		if oid != tb.OID {
			out = append(out, oid)
		}
	}
	return out, rows.Err()
}

// relName is the quoted qualified name of a relation by OID ("" when it
// no longer exists).
func relName(ctx context.Context, q Querier, oid uint32) (string, error) {
	var name *string
	err := q.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, oid).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && name == nil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look up relation %d: %w", oid, err)
	}
	return *name, nil
}

// functionSQL is the trigger function of a table: one INSERT … SELECT per
// statement from its transition tables, keys as text in the settings the
// re-derive parses them with. SECURITY DEFINER with a fixed search_path: a
// writer needs no privilege on the capture log and cannot redirect it.
func (t *Trigger) functionSQL(tb Table, settings string) string {
	keyArray := func(alias string) string {
		parts := make([]string, len(tb.Key))
		for i, k := range tb.Key {
			parts[i] = alias + "." + pgx.Identifier{k}.Sanitize() + "::text"
		}
		return "ARRAY[" + strings.Join(parts, ", ") + "]"
	}
	logT, ring := t.obj("capture_log"), t.obj("capture_ring")
	oid := fmt.Sprint(tb.OID)
	return `CREATE OR REPLACE FUNCTION ` + t.obj(funcName(tb.OID)) + `() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp` + settings + `
AS $trellis$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO ` + logT + ` (part, rel, key)
		SELECT r.current, ` + oid + `, ` + keyArray("n") + ` FROM new_rows n CROSS JOIN ` + ring + ` r;
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO ` + logT + ` (part, rel, key)
		SELECT r.current, ` + oid + `, c.k FROM (
			SELECT ` + keyArray("o") + ` FROM old_rows o
			UNION
			SELECT ` + keyArray("n") + ` FROM new_rows n) AS c(k)
		CROSS JOIN ` + ring + ` r;
	ELSIF TG_OP = 'DELETE' THEN
		INSERT INTO ` + logT + ` (part, rel, key)
		SELECT r.current, ` + oid + `, ` + keyArray("o") + ` FROM old_rows o CROSS JOIN ` + ring + ` r;
	ELSE
		INSERT INTO ` + logT + ` (part, rel, truncated)
		SELECT r.current, ` + oid + `, true FROM ` + ring + ` r;
	END IF;
	RETURN NULL;
END
$trellis$`
}

// keySettings are the SET clauses the trigger function needs so that its
// key text does not depend on the writer's session: only for key types
// whose text output reads a setting (each SET costs every statement a
// save and restore of the setting).
func keySettings(ctx context.Context, q Querier, tb Table) (string, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT t.typcategory::text, t.typname::text
		FROM pg_attribute a JOIN pg_type b ON b.oid = a.atttypid
		JOIN pg_type t ON t.oid = CASE WHEN b.typtype = 'd' THEN b.typbasetype ELSE b.oid END
		WHERE a.attrelid = $1 AND a.attname = ANY($2)`, tb.OID, tb.Key)
	if err != nil {
		return "", fmt.Errorf("read the key types of %s: %w", tb.Ident().Sanitize(), err)
	}
	defer rows.Close()
	need := map[string]bool{}
	for rows.Next() {
		var cat, name string
		if err := rows.Scan(&cat, &name); err != nil {
			return "", err
		}
		switch {
		case cat == "D" || name == "interval" || name == "time" || name == "timetz":
			need["datestyle = 'ISO, MDY'"], need["intervalstyle = 'postgres'"], need["timezone = 'UTC'"] = true, true, true
		case name == "float4" || name == "float8":
			need["extra_float_digits = '3'"] = true
		case name == "bytea":
			need["bytea_output = 'hex'"] = true
		case name == "uuid" || name == "citext":
		case cat == "A" || cat == "C" || cat == "U":
			// Arrays, composites, user types: any setting may show.
			for _, s := range []string{"datestyle = 'ISO, MDY'", "intervalstyle = 'postgres'", "timezone = 'UTC'", "extra_float_digits = '3'", "bytea_output = 'hex'"} {
				need[s] = true
			}
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	var out []string
	for s := range need {
		out = append(out, s)
	}
	slices.Sort(out)
	var b strings.Builder
	for _, s := range out {
		b.WriteString(" SET " + s)
	}
	return b.String(), nil
}

// installOne creates the function and the triggers of tb in tx.
func (t *Trigger) installOne(ctx context.Context, tx pgx.Tx, tb Table) error {
	table := tb.Ident().Sanitize()
	rights, err := rightsOn(ctx, tx, tb)
	if err != nil {
		return err
	}
	if !rights.Owns && !rights.CanTrigger {
		return triggerError(rights, tb, nil)
	}
	settings, err := keySettings(ctx, tx, tb)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, t.functionSQL(tb, settings)); err != nil {
		return fmt.Errorf("create the capture function of %s: %w", table, err)
	}
	if _, err := tx.Exec(ctx, `REVOKE ALL ON FUNCTION `+t.obj(funcName(tb.OID))+`() FROM PUBLIC`); err != nil {
		return fmt.Errorf("revoke the capture function of %s from PUBLIC: %w", table, err)
	}
	owner := rights.Owns
	rels, err := treeOf(ctx, tx, tb)
	if err != nil {
		return err
	}
	for _, rel := range rels {
		name, err := relName(ctx, tx, rel)
		if err != nil {
			return err
		}
		if err := t.placeTriggers(ctx, tx, tb, rel, name, owner, rights); err != nil {
			return err
		}
	}
	if !owner {
		t.cfg.Logger.Warn("capture triggers do not fire under session_replication_role = replica: the role does not own the table", "table", table)
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+t.obj("capture_tables")+` (rel, schema_name, table_name, key_columns)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (rel) DO UPDATE SET schema_name = excluded.schema_name, table_name = excluded.table_name,
			key_columns = excluded.key_columns, installed_at = now()`, tb.OID, tb.Schema, tb.Name, tb.Key)
	if err != nil {
		return fmt.Errorf("register the capture of %s: %w", table, err)
	}
	return nil
}

// placeTriggers puts the four capture triggers of tb on rel (tb itself or
// one of its partitions, named table), all calling tb's function.
func (t *Trigger) placeTriggers(ctx context.Context, tx pgx.Tx, tb Table, rel uint32, table string, owner bool, rights tableRights) error {
	names := make([]string, len(triggerOps))
	for i, o := range triggerOps {
		names[i] = t.triggerOn(o.op, tb, rel)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = $1 AND tgname = ANY($2)`, rel, names).Scan(&have); err != nil {
		return fmt.Errorf("look up the capture triggers of %s: %w", table, err)
	}
	if have == len(triggerOps) && !owner {
		// Left by a removal that could not drop them (TRIGGER without
		// ownership): the function just created gives them back their body.
		return nil
	}
	for i, o := range triggerOps {
		name := pgx.Identifier{names[i]}.Sanitize()
		if _, err := tx.Exec(ctx, `DROP TRIGGER IF EXISTS `+name+` ON `+table); err != nil {
			return fmt.Errorf("replace trigger %s on %s: %w", name, table, err)
		}
		if _, err := tx.Exec(ctx, `CREATE TRIGGER `+name+` AFTER `+o.event+` ON `+table+` `+o.referencing+
			` FOR EACH STATEMENT EXECUTE FUNCTION `+t.obj(funcName(tb.OID))+`()`); err != nil {
			if isPrivilege(err) {
				return triggerError(rights, tb, err)
			}
			return fmt.Errorf("create trigger %s on %s: %w", name, table, err)
		}
		// ENABLE ALWAYS: the triggers fire under session_replication_role =
		// replica too (a logical replica's apply, pg_restore). Only the
		// table's owner may set it; a role with the TRIGGER privilege gets
		// triggers that fire in the default role only.
		if owner {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+table+` ENABLE ALWAYS TRIGGER `+name); err != nil {
				return fmt.Errorf("enable trigger %s on %s always: %w", name, table, err)
			}
		}
	}
	return nil
}

// Retain removes the triggers and function of every registered table not
// in keep. DROP TRIGGER takes ACCESS EXCLUSIVE on the table: a removal
// that would wait longer than lock_timeout for it is left for the next
// call, and waiting is told of every removal left so (nil: not told).
// While an install holds the capture (it may be waiting for a lock
// itself), every removal is left for the next call.
func (t *Trigger) Retain(ctx context.Context, keep []Table, waiting RemovalsFunc) error {
	if !t.mu.TryLock() {
		return nil
	}
	defer t.mu.Unlock()
	want := map[uint32]bool{}
	for _, tb := range keep {
		want[tb.OID] = true
	}
	regs, err := t.registered(ctx)
	if err != nil {
		return err
	}
	lw := lockWaiter{pool: t.cfg.Pool, timeout: t.cfg.LockTimeout}
	pending := map[uint32]bool{}
	for _, tb := range regs {
		if want[tb.OID] {
			continue
		}
		pending[tb.OID] = true
		t.removing.attempt(ctx, lw, tb, "AccessExclusiveLock", func(tx pgx.Tx) error { return t.removeOne(ctx, tx, tb) })
	}
	t.removing.keepOnly(pending)
	if waiting != nil {
		waiting(t.removing.waits())
	}
	return nil
}

// registered lists the tables in the capture registry.
func (t *Trigger) registered(ctx context.Context) ([]Table, error) {
	rows, err := t.cfg.Pool.Query(ctx, `SELECT rel, schema_name, table_name, key_columns FROM `+t.obj("capture_tables")+` ORDER BY rel`)
	if err != nil {
		return nil, fmt.Errorf("list captured tables: %w", err)
	}
	var out []Table
	for rows.Next() {
		var tb Table
		if err := rows.Scan(&tb.OID, &tb.Schema, &tb.Name, &tb.Key); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, tb)
	}
	rows.Close()
	return out, rows.Err()
}

// removeOne drops the triggers (on the table and its partitions, while
// they exist), the function and the registry entry of tb.
func (t *Trigger) removeOne(ctx context.Context, tx pgx.Tx, tb Table) error {
	name, err := relName(ctx, tx, tb.OID)
	if err != nil {
		return err
	}
	if name != "" {
		rights, err := rightsOn(ctx, tx, tb)
		if err != nil {
			return err
		}
		rels, err := treeOf(ctx, tx, tb)
		if err != nil {
			return err
		}
		if !rights.Owns {
			// Only the owner may drop triggers: leave them calling a
			// function that does nothing, and tell the owner how to drop them.
			if _, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION `+t.obj(funcName(tb.OID))+`() RETURNS trigger
				LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $trellis$BEGIN RETURN NULL; END$trellis$`); err != nil {
				return fmt.Errorf("disable the capture function of %s: %w", name, err)
			}
			var drops []string
			for _, rel := range rels {
				rn, err := relName(ctx, tx, rel)
				if err != nil {
					return err
				}
				for _, o := range triggerOps {
					drops = append(drops, "DROP TRIGGER "+pgx.Identifier{t.triggerOn(o.op, tb, rel)}.Sanitize()+" ON "+rn+";")
				}
			}
			t.cfg.Logger.Warn("capture triggers left in place, doing nothing: only the table's owner may drop them",
				"table", name, "owner", rights.Owner, "statements", strings.Join(drops, " "))
			_, err = tx.Exec(ctx, `DELETE FROM `+t.obj("capture_tables")+` WHERE rel = $1`, tb.OID)
			return err
		}
		for _, rel := range rels {
			rn, err := relName(ctx, tx, rel)
			if err != nil {
				return err
			}
			for _, o := range triggerOps {
				if _, err := tx.Exec(ctx, `DROP TRIGGER IF EXISTS `+pgx.Identifier{t.triggerOn(o.op, tb, rel)}.Sanitize()+` ON `+rn); err != nil {
					return fmt.Errorf("drop the capture triggers of %s: %w", rn, err)
				}
			}
		}
	}
	if _, err := tx.Exec(ctx, `DROP FUNCTION IF EXISTS `+t.obj(funcName(tb.OID))+`() CASCADE`); err != nil {
		return fmt.Errorf("drop the capture function of %s: %w", tb.Ident().Sanitize(), err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+t.obj("capture_tables")+` WHERE rel = $1`, tb.OID); err != nil {
		return fmt.Errorf("unregister the capture of %s: %w", tb.Ident().Sanitize(), err)
	}
	return nil
}

// Remove drops every trigger, function and the capture log: trigger
// capture is no longer used by this instance. Like Retain it waits for no
// lock beyond lock_timeout: done is false, with no error, when something
// is left for another call (the removals still waiting are told to
// waiting, as Retain tells them).
func (t *Trigger) Remove(ctx context.Context, waiting RemovalsFunc) (done bool, err error) {
	var exists bool
	if err := t.cfg.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.obj("capture_tables")).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up the capture registry: %w", err)
	}
	if !exists {
		if waiting != nil {
			waiting(nil)
		}
		return true, nil
	}
	if err := t.Retain(ctx, nil, waiting); err != nil {
		return false, err
	}
	regs, err := t.registered(ctx)
	if err != nil {
		return false, err
	}
	if len(regs) > 0 {
		return false, nil
	}
	// A writer that fired a trigger before it was dropped holds its lock
	// on the log until it ends: wait for none of them either.
	lw := lockWaiter{pool: t.cfg.Pool, timeout: t.cfg.LockTimeout}
	err = lw.once(ctx, func(tx pgx.Tx) error {
		for _, n := range []string{"capture_log", "capture_ring", "capture_tables"} {
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+t.obj(n)); err != nil {
				return fmt.Errorf("drop %s: %w", t.obj(n), err)
			}
		}
		return nil
	})
	if isLockTimeout(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	t.cfg.Logger.Info("trigger capture removed from the instance")
	return true, nil
}

// ForgetCopied undoes what a copy of the database (pg_dump and restore,
// CREATE DATABASE … TEMPLATE) brought of trigger capture under OIDs that
// are not the tables' any more (ADR 0039): each registry row whose OID no
// longer names its table loses its function, dropped with CASCADE (the
// restored triggers that call it go with it; the lock each takes is
// waited for with a short lock_timeout, retried), and the row; the capture
// log is emptied, since its rows are keyed by those OIDs (the rebuild a
// copy needs covers what they said). Install puts capture back under the
// tables' OIDs now. It reports how many registrations it dropped.
func (t *Trigger) ForgetCopied(ctx context.Context) (int, error) {
	var exists bool
	if err := t.cfg.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.obj("capture_tables")).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look up the capture registry: %w", err)
	}
	if !exists {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	regs, err := t.registered(ctx)
	if err != nil {
		return 0, err
	}
	lw := lockWaiter{pool: t.cfg.Pool, timeout: t.cfg.LockTimeout}
	n := 0
	for _, reg := range regs {
		// The restored triggers sit on the table that bears the name now.
		on := reg
		if err := t.cfg.Pool.QueryRow(ctx, `SELECT coalesce(to_regclass($1)::oid, 0)`, reg.Ident().Sanitize()).Scan(&on.OID); err != nil {
			return n, fmt.Errorf("look up %s: %w", reg.Ident().Sanitize(), err)
		}
		if on.OID == reg.OID {
			continue // the copy kept this table's OID (pg_upgrade does)
		}
		err = lw.run(ctx, on, "uninstall", "AccessExclusiveLock", nil, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `DROP FUNCTION IF EXISTS `+t.obj(funcName(reg.OID))+`() CASCADE`); err != nil {
				return fmt.Errorf("drop the copied capture function of %s: %w", reg.Ident().Sanitize(), err)
			}
			_, err := tx.Exec(ctx, `DELETE FROM `+t.obj("capture_tables")+` WHERE rel = $1`, reg.OID)
			return err
		})
		if err != nil {
			return n, err
		}
		n++
	}
	if n > 0 {
		if _, err := t.cfg.Pool.Exec(ctx, `DELETE FROM `+t.obj("capture_log")); err != nil {
			return n, fmt.Errorf("empty the copied capture log: %w", err)
		}
		t.cfg.Logger.Info("trigger capture of the copied database dropped; it is installed again for the tables' OIDs", "registrations", n)
	}
	return n, nil
}
