package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestMigrateAndNoInstall: Open with NoInstall creates nothing and says
// not_found for a missing instance, conflict for an older catalog; Migrate
// installs and upgrades idempotently, and refuses public, the target
// schema, another instance's target schema and a schema of other tables,
// changing nothing (ADR 0040).
func TestMigrateAndNoInstall(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	schemas := func() string {
		t.Helper()
		var s string
		if err := conn.QueryRow(ctx, `SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	exec(`CREATE TABLE orders (id int PRIMARY KEY, amount int)`)
	before := schemas()
	cfg := trellis.Config{DSN: dsn, NoInstall: true, DataDir: t.TempDir()}
	if _, err := trellis.Open(ctx, cfg); trellis.CodeOf(err) != trellis.CodeNotFound || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("NoInstall on a database without the instance: %v, want not_found naming migrate", err)
	}
	if after := schemas(); after != before {
		t.Fatalf("NoInstall created schemas: %s, was %s", after, before)
	}
	for i := 0; i < 2; i++ {
		if err := trellis.Migrate(ctx, trellis.Config{DSN: dsn}); err != nil {
			t.Fatalf("Migrate #%d: %v", i+1, err)
		}
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM trellis.schema_migrations`).Scan(&version); err != nil || version != catalog.Current() {
		t.Fatalf("catalog version %d (%v), want %d", version, err, catalog.Current())
	}
	h, err := trellis.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("NoInstall after Migrate: %v", err)
	}
	if _, err := h.Apply(ctx, `CREATE TRANSFORM big AS SELECT id, amount FROM orders WHERE amount > 10`); err != nil {
		t.Fatalf("Apply on a NoInstall handle: %v", err)
	}
	h.Close()
	// An older catalog: NoInstall refuses naming Migrate, which upgrades it.
	exec(fmt.Sprintf(`DELETE FROM trellis.schema_migrations WHERE version = %d`, catalog.Current()))
	if _, err := trellis.Open(ctx, cfg); trellis.CodeOf(err) != trellis.CodeConflict || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("NoInstall on an older catalog: %v, want conflict naming migrate", err)
	}
	if err := trellis.Migrate(ctx, trellis.Config{DSN: dsn}); err != nil {
		t.Fatal(err)
	}
	h, err = trellis.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("NoInstall after the upgrade: %v", err)
	}
	h.Close()
	// Refusals change nothing.
	exec(`CREATE SCHEMA reports; CREATE SCHEMA app; CREATE TABLE app.users (id int PRIMARY KEY)`)
	h, err = trellis.Open(ctx, trellis.Config{DSN: dsn, TargetSchema: "reports", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Apply(ctx, `CREATE TRANSFORM totals AS SELECT sum(amount) AS amount FROM orders`); err != nil {
		t.Fatal(err)
	}
	h.Close()
	before = schemas()
	for _, c := range []struct {
		cfg  trellis.Config
		want string
	}{
		{trellis.Config{DSN: dsn, Schema: "public"}, "database's own tables"},
		{trellis.Config{DSN: dsn, Schema: "marts", TargetSchema: "marts"}, "is the target schema"},
		{trellis.Config{DSN: dsn, Schema: "reports"}, `targets of instance "trellis"`},
		{trellis.Config{DSN: dsn, Schema: "app"}, "not a trellis-repl catalog (users)"},
	} {
		err := trellis.Migrate(ctx, c.cfg)
		if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Migrate into %q: %v, want a validation error containing %q", c.cfg.Schema, err, c.want)
		}
		c.cfg.DataDir = t.TempDir()
		if h, err := trellis.Open(ctx, c.cfg); trellis.CodeOf(err) != trellis.CodeValidation {
			if h != nil {
				h.Close()
			}
			t.Errorf("Open installing into %q: %v, want the same validation error", c.cfg.Schema, err)
		}
	}
	if after := schemas(); after != before {
		t.Fatalf("refused installs changed the schemas: %s, was %s", after, before)
	}
}
