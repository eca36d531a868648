package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// trellisSQL are the golang-migrate migrations of trellis statements.
//
//go:embed trellissql/*.sql
var trellisSQL embed.FS

// Migrate is a golang-migrate runner over the trellis statements of
// trellissql/ for the instance cfg; Close it when done. The tables they
// read are migrated as usual, with golang-migrate's own PostgreSQL driver,
// before it.
func Migrate(ctx context.Context, cfg trellis.Config) (*migrate.Migrate, error) {
	src, err := iofs.New(trellisSQL, "trellissql")
	if err != nil {
		return nil, err
	}
	d, err := NewDriver(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m, err := migrate.NewWithInstance("iofs", src, "trellis", d)
	if err != nil {
		d.Close()
		return nil, err
	}
	return m, nil
}

// VersionTable keeps the version of the trellis migrations, in the
// connection's current schema: apart from golang-migrate's own
// schema_migrations, which versions the tables' migrations.
const VersionTable = "trellis_schema_migrations"

// Driver is a golang-migrate database driver that applies each migration
// file, a script of trellis statements, through Apply.
type Driver struct {
	h    *trellis.Trellis
	conn *pgx.Conn // holds the migration lock and reads the version
}

var _ database.Driver = (*Driver)(nil)

// NewDriver opens the instance cfg (installing or upgrading its catalog)
// and a connection for the lock and the version table, which it creates.
func NewDriver(ctx context.Context, cfg trellis.Config) (*Driver, error) {
	h, err := trellis.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, trellis.ResolveDSN(cfg.DSN))
	if err != nil {
		h.Close()
		return nil, err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+VersionTable+` (version bigint NOT NULL, dirty boolean NOT NULL)`); err != nil {
		h.Close()
		conn.Close(ctx)
		return nil, fmt.Errorf("create %s: %w", VersionTable, err)
	}
	return &Driver{h: h, conn: conn}, nil
}

// Open is refused: the driver is made by NewDriver, with the instance's
// trellis.Config.
func (d *Driver) Open(string) (database.Driver, error) {
	return nil, errors.New("trellis driver: use migrations.NewDriver and migrate.NewWithInstance")
}

// Close closes the instance and the connection.
func (d *Driver) Close() error {
	d.h.Close()
	return d.conn.Close(context.Background())
}

// lockKey names the advisory lock that runs one migration at a time.
const lockKey = "trellis-repl golang-migrate"

// Lock takes the migration lock (waiting for another migrator).
func (d *Driver) Lock() error {
	_, err := d.conn.Exec(context.Background(), `SELECT pg_advisory_lock(hashtext($1))`, lockKey)
	return err
}

// Unlock releases it.
func (d *Driver) Unlock() error {
	_, err := d.conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext($1))`, lockKey)
	return err
}

// Run applies one migration file through Apply: all of its statements in
// one transaction, or none.
func (d *Driver) Run(migration io.Reader) error {
	script, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	_, err = d.h.Apply(context.Background(), string(script))
	return err
}

// SetVersion records the version (and whether a migration to it failed
// half-way) as golang-migrate asks.
func (d *Driver) SetVersion(version int, dirty bool) error {
	ctx := context.Background()
	tx, err := d.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `DELETE FROM `+VersionTable); err != nil {
		return err
	}
	if version >= 0 || (version == database.NilVersion && dirty) {
		if _, err := tx.Exec(ctx, `INSERT INTO `+VersionTable+` (version, dirty) VALUES ($1, $2)`, version, dirty); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// Version reads the recorded version (database.NilVersion when none).
func (d *Driver) Version() (int, bool, error) {
	var v int
	var dirty bool
	err := d.conn.QueryRow(context.Background(), `SELECT version, dirty FROM `+VersionTable+` LIMIT 1`).Scan(&v, &dirty)
	if errors.Is(err, pgx.ErrNoRows) {
		return database.NilVersion, false, nil
	}
	return v, dirty, err
}

// Drop drops every transform of the instance and the version table. A
// transform another reads is dropped after its readers.
func (d *Driver) Drop() error {
	ctx := context.Background()
	defs, err := d.h.Definitions(ctx)
	if err != nil {
		return err
	}
	left := defs
	for len(left) > 0 {
		var again []trellis.Definition
		var last error
		for _, def := range left {
			_, err := d.h.Apply(ctx, "DROP TRANSFORM IF EXISTS "+pgx.Identifier{def.Schema, def.Name}.Sanitize())
			switch {
			case trellis.CodeOf(err) == trellis.CodeConflict:
				again, last = append(again, def), err // still read by another
			case err != nil:
				return err
			}
		}
		if len(again) == len(left) {
			return last
		}
		left = again
	}
	_, err = d.conn.Exec(ctx, `DROP TABLE IF EXISTS `+VersionTable)
	return err
}
