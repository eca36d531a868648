package pgtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestDatabases(t *testing.T) {
	ctx := context.Background()
	dsnA, dsnB := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	if dsnA == dsnB {
		t.Fatalf("two databases share a DSN: %s", dsnA)
	}
	a, b := connect(t, dsnA), connect(t, dsnB)

	var walLevel string
	if err := a.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		t.Fatal(err)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical", walLevel)
	}

	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("table created in database A is visible in database B")
	}

	// The slot is left behind on purpose: NewDatabase's cleanup must drop it
	// or DROP DATABASE fails.
	if _, err := a.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", "pgtest_slot_"+strings.ToLower(t.Name())); err != nil {
		t.Fatalf("create logical slot: %v", err)
	}
}

// The harness's own server must not make sessions wait for a standby:
// tests name a missing synchronous standby to hold one commit in flight.
func TestServerSettings(t *testing.T) {
	srv := pgtest.Server(t)
	conn := connect(t, srv.DSN("postgres"))
	for name, want := range map[string]string{
		"synchronous_commit":    "local",
		"wal_level":             "logical",
		"max_replication_slots": "20",
		"max_connections":       "200",
		"fsync":                 "off",
		"jit":                   "off",
	} {
		var got string
		if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestRestartKeepsData(t *testing.T) {
	srv := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restart')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	// A crash must keep committed data too (fsync=off only risks an OS
	// crash, not a PostgreSQL one).
	if err := srv.StopImmediate(ctx); err != nil {
		t.Fatalf("stop immediate: %v", err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("start after stop: %v", err)
	}

	conn = connect(t, dsn)
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "before restart" {
		t.Errorf("after restart got %q", v)
	}
}

func TestReloadAppliesAlterSystem(t *testing.T) {
	srv := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(t, srv.DSN("postgres"))
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET wal_sender_timeout = '17s'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "ALTER SYSTEM RESET wal_sender_timeout")
		_ = srv.Reload(context.Background())
	})
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := connect(t, srv.DSN("postgres"))
	var v string
	if err := fresh.QueryRow(ctx, "SHOW wal_sender_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "17s" {
		t.Errorf("wal_sender_timeout after reload = %q, want 17s", v)
	}
}

func TestDatabaseName(t *testing.T) {
	tests := []struct {
		test, prefix string
	}{
		{"TestFoo", "t_testfoo_"},
		{"TestFoo/sub case#01", "t_testfoo_sub_case_01_"},
		{"Test" + strings.Repeat("x", 100), "t_test" + strings.Repeat("x", 36) + "_"},
	}
	for _, tt := range tests {
		got := pgtest.DatabaseName(tt.test)
		if !strings.HasPrefix(got, tt.prefix) || len(got) != len(tt.prefix)+8 || len(got) > 63 {
			t.Errorf("DatabaseName(%q) = %q, want %q + 8 hex chars", tt.test, got, tt.prefix)
		}
	}
	if pgtest.DatabaseName("TestX") == pgtest.DatabaseName("TestX") {
		t.Error("DatabaseName is not unique across calls")
	}
}

func TestWithDatabase(t *testing.T) {
	tests := []struct{ in string }{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"},
		{"postgresql://u:p@h:1/other?dbname=x&sslmode=disable"},
		{"host=127.0.0.1 port=5432 user=postgres dbname=postgres sslmode=disable"},
		{"host=127.0.0.1 user=postgres"},
	}
	for _, tt := range tests {
		out, err := pgtest.WithDatabase(tt.in, "t_new_db")
		if err != nil {
			t.Errorf("WithDatabase(%q): %v", tt.in, err)
			continue
		}
		cfg, err := pgconn.ParseConfig(out)
		if err != nil {
			t.Errorf("WithDatabase(%q) = %q: %v", tt.in, out, err)
			continue
		}
		if cfg.Database != "t_new_db" {
			t.Errorf("WithDatabase(%q) = %q: database %q", tt.in, out, cfg.Database)
		}
	}
}

// A test that ends while its walsender still streams from a slot must not
// break cleanup: DROP DATABASE refuses databases that have slots.
func TestCleanupDropsActiveSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var repl *pgconn.PgConn
	// The parent closes the walsender connection only after the subtest,
	// whose cleanup drops the database while the slot is still active.
	defer func() {
		if repl != nil {
			repl.Close(context.Background())
		}
	}()
	t.Run("streaming", func(t *testing.T) {
		dsn := pgtest.NewDatabase(t)
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["replication"] = "database"
		if repl, err = pgconn.ConnectConfig(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := pglogrepl.CreateReplicationSlot(ctx, repl, "active_slot", "pgoutput", pglogrepl.CreateReplicationSlotOptions{}); err != nil {
			t.Fatal(err)
		}
		conn := connect(t, dsn)
		if _, err := conn.Exec(ctx, "CREATE PUBLICATION pub FOR ALL TABLES"); err != nil {
			t.Fatal(err)
		}
		if err := pglogrepl.StartReplication(ctx, repl, "active_slot", 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'pub'"},
		}); err != nil {
			t.Fatal(err)
		}
		var active bool
		if err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'active_slot'").Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			t.Fatal("slot is not active")
		}
	})
}
