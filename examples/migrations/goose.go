package migrations

import (
	"context"
	"database/sql"
	"embed"
	"io/fs"

	"github.com/pressly/goose/v3"

	trellis "github.com/trellis-repl/trellis-repl"
)

// gooseSQL are the goose migrations written in SQL: the tables.
//
//go:embed goosesql/*.sql
var gooseSQL embed.FS

// GooseProvider is a goose provider over db with the SQL migrations of
// goosesql/ and the Go migrations that define the transforms (version 2:
// totals per customer), all applied to the trellis-repl instance cfg.
func GooseProvider(db *sql.DB, cfg trellis.Config) (*goose.Provider, error) {
	fsys, err := fs.Sub(gooseSQL, "goosesql")
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithGoMigrations(
		TransformMigration(2, cfg,
			`CREATE TRANSFORM IF NOT EXISTS customer_totals AS
			   SELECT customer, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY customer`,
			`DROP TRANSFORM IF EXISTS customer_totals`),
	))
}

// TransformMigration is a goose Go migration at version that applies the
// trellis statements up, and down on the way back, to the instance cfg.
// It runs outside goose's transaction (Apply commits on its own
// connections), so its statements must be safe to run again: a failure
// after Apply and before goose records the version runs them a second
// time.
func TransformMigration(version int64, cfg trellis.Config, up, down string) *goose.Migration {
	return goose.NewGoMigration(version,
		&goose.GoFunc{RunDB: func(ctx context.Context, _ *sql.DB) error { return apply(ctx, cfg, up) }},
		&goose.GoFunc{RunDB: func(ctx context.Context, _ *sql.DB) error { return apply(ctx, cfg, down) }})
}

// apply opens the instance (installing or upgrading its catalog), applies
// script in one transaction, and closes it.
func apply(ctx context.Context, cfg trellis.Config, script string) error {
	h, err := trellis.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	_, err = h.Apply(ctx, script)
	return err
}
