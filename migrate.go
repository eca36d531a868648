package trellis

// migrate.go owns installing the catalog: Migrate for programs that
// separate schema changes from running, the refusals an install makes
// (installable), and what Open does instead with Config.NoInstall or
// ReadOnly (checkCatalog in trellis.go) (ADR 0040).

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/redact"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Migrate creates or upgrades the catalog of cfg's instance schema to the
// version this binary writes, and changes nothing else: for programs that
// run schema changes apart from the service (which then opens with
// Config.NoInstall). It is idempotent and safe to run from several
// processes at once, within Config.CallTimeout. It refuses (validation,
// nothing created) the schema public, the target schema, a schema holding
// another instance's targets, and a schema holding tables that are not a
// trellis-repl catalog.
func Migrate(ctx context.Context, cfg Config) error {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	ctx, cancel := withBudget(ctx, cfg.CallTimeout)
	defer cancel()
	cc, err := pgx.ParseConfig(ResolveDSN(cfg.DSN))
	if err != nil {
		return terr.Wrap(terr.Validation, err, "the connection string is not valid: %s; pass --dsn postgres://user@host/db or set TRELLIS_DATABASE_URL", redact.ParseError(err))
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return timedOut("Migrate", cfg.CallTimeout, terr.Wrap(terr.Unavailable, err, "cannot connect to PostgreSQL at %s:%d: %v; check --dsn and that the server is running", cc.Host, cc.Port, err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return timedOut("Migrate", cfg.CallTimeout, inTxOn(ctx, conn, func(tx pgx.Tx) error {
		return install(ctx, tx, catalog.New(cfg.Schema), cfg.TargetSchema)
	}))
}

// install checks that the instance schema may hold a catalog and creates
// or upgrades it in tx.
func install(ctx context.Context, tx pgx.Tx, cat catalog.Catalog, targetSchema string) error {
	if err := installable(ctx, tx, cat, targetSchema); err != nil {
		return err
	}
	if err := cat.MigrateTx(ctx, tx); err != nil {
		return terr.Wrap(terr.Unavailable, err, "cannot install the catalog in schema %q: %v; the role needs CREATE on the database", cat.Schema, err)
	}
	return nil
}

// installable refuses an instance schema that is not the instance's own:
// public, the target schema, one holding another instance's targets, or
// one holding tables that are not a catalog.
func installable(ctx context.Context, q catalog.Querier, cat catalog.Catalog, targetSchema string) error {
	s := cat.Schema
	switch {
	case s == "public":
		return terr.New(terr.Validation, "instance schema %q holds the database's own tables; give the instance a schema of its own (Config.Schema, --schema; default %q)", s, catalog.DefaultSchema)
	case s == targetSchema:
		return terr.New(terr.Validation, "instance schema %q is the target schema; give the instance a schema of its own (Config.Schema, --schema), apart from the targets'", s)
	}
	others, err := catalog.Instances(ctx, q)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	for _, o := range others {
		if o == s {
			continue
		}
		var readable, holds bool
		t := pgx.Identifier{o, "transforms"}.Sanitize()
		if err := q.QueryRow(ctx, `SELECT has_schema_privilege($1, 'USAGE') AND has_table_privilege($2, 'SELECT')`, o, t).Scan(&readable); err != nil {
			return terr.Wrap(terr.Unavailable, err, "read instance %q: %v", o, err)
		}
		if !readable {
			continue // another role's instance: its targets are its own to guard
		}
		if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+t+` WHERE schema_name = $1)`, s).Scan(&holds); err != nil {
			return terr.Wrap(terr.Unavailable, err, "read instance %q: %v", o, err)
		}
		if holds {
			return terr.New(terr.Validation, "schema %q holds targets of instance %q; give this instance a schema of its own (Config.Schema, --schema)", s, o)
		}
	}
	p, err := cat.Probe(ctx, q)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	if p.HasCatalog {
		return nil
	}
	var tables []string
	rows, err := q.Query(ctx, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1 LIMIT 3`, s)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "look into schema %q: %v", s, err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return terr.Wrap(terr.Unavailable, err, "look into schema %q: %v", s, err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return terr.Wrap(terr.Unavailable, err, "look into schema %q: %v", s, err)
	}
	if len(tables) > 0 {
		return terr.New(terr.Validation, "schema %q holds tables that are not a trellis-repl catalog (%s); give the instance a schema of its own (Config.Schema, --schema)", s, strings.Join(tables, ", "))
	}
	return nil
}
