package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/examples/migrations"
	"github.com/trellis-repl/trellis-repl/trellistest"
)

// instance is the instance both tests migrate and then run.
func instance(dsn string) trellis.Config { return trellis.Config{DSN: dsn, Schema: "trellis"} }

// transforms are the instance's transforms by name.
func transforms(t *testing.T, dsn string) []string {
	t.Helper()
	h, err := trellis.Open(context.Background(), trellis.Config{DSN: dsn, Schema: "trellis", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	defs, err := h.Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

// TestGoose: goose up creates the table and the transform, which the
// pipeline then keeps; down drops the transform before the table; up
// again, and a re-run of the Go migration (interrupted before goose
// recorded it) is harmless.
func TestGoose(t *testing.T) {
	ctx := context.Background()
	dsn := trellistest.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := migrations.GooseProvider(db, instance(dsn))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if got := transforms(t, dsn); len(got) != 1 || got[0] != "customer_totals" {
		t.Fatalf("after up: transforms %v", got)
	}
	if _, err := db.Exec(`INSERT INTO orders SELECT g, g % 3, g FROM generate_series(1, 50) g`); err != nil {
		t.Fatal(err)
	}
	func() {
		h := trellistest.Open(t, dsn, instance(dsn))
		trellistest.Eventually(t, h, "customer_totals")
		var n int
		if err := db.QueryRow(`SELECT sum(orders) FROM customer_totals`).Scan(&n); err != nil || n != 50 {
			t.Fatalf("customer_totals counts %d orders (%v), want 50", n, err)
		}
		h.Close()
	}()
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if got := transforms(t, dsn); len(got) != 0 {
		t.Fatalf("after down: transforms %v", got)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	// Interrupted after Apply, before goose recorded version 2: run again.
	if _, err := db.Exec(`DELETE FROM goose_db_version WHERE version_id = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("a re-run of the transform's migration: %v", err)
	}
	if got := transforms(t, dsn); len(got) != 1 {
		t.Fatalf("after the re-run: transforms %v", got)
	}
}

// TestGolangMigrate: the trellis statements of trellissql/, a chain of two
// transforms, go up through the driver, are kept by the pipeline, go down
// in reverse, and up again; a dirty re-run is harmless.
func TestGolangMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := trellistest.Postgres(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The tables' own migrations, with golang-migrate's PostgreSQL driver
	// in a service; here, directly.
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL);
		INSERT INTO orders SELECT g, g % 4, g FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}
	m, err := migrations.Migrate(ctx, instance(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Up(); err != nil {
		t.Fatalf("up: %v", err)
	}
	if got := transforms(t, dsn); len(got) != 2 {
		t.Fatalf("after up: transforms %v", got)
	}
	func() {
		h := trellistest.Open(t, dsn, instance(dsn))
		trellistest.Eventually(t, h)
		for _, name := range []string{"customer_totals", "big_customers"} {
			r, err := h.CompareNow(ctx, name)
			if err != nil || !r.Equal() {
				t.Fatalf("%s differs from its query: %+v %v", name, r, err)
			}
		}
		h.Close()
	}()
	if err := m.Down(); err != nil {
		t.Fatalf("down: %v", err)
	}
	if got := transforms(t, dsn); len(got) != 0 {
		t.Fatalf("after down: transforms %v", got)
	}
	if err := m.Up(); err != nil {
		t.Fatalf("up again: %v", err)
	}
	// A migration that failed half-way is left dirty; forced back to the
	// version before it, it runs again over what it had done.
	if err := m.Force(1); err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatalf("the re-run of migration 2: %v", err)
	}
	if err := m.Up(); !errors.Is(err, migrate.ErrNoChange) {
		t.Fatalf("up with nothing to do: %v, want ErrNoChange", err)
	}
	if got := transforms(t, dsn); len(got) != 2 {
		t.Fatalf("after the re-run: transforms %v", got)
	}
}
