package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestEmbeddingCommands: migrate installs the catalog only; apply takes
// --target-schema and ALTER TRANSFORM; backfill names what it re-reads;
// dump prints a script apply -f replays, and --append-to appends the
// restore section to a file (ADR 0040, 0041).
func TestEmbeddingCommands(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA reports; CREATE TABLE items (id int PRIMARY KEY, kind text, price int)`); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := cli("migrate", "--dsn", dsn); code != 0 || !strings.Contains(out, "catalog of instance trellis is current") {
		t.Fatalf("migrate: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, _, stderr := cli("migrate", "--dsn", dsn, "--schema", "public"); code != 1 || !strings.HasPrefix(stderr, "validation: ") {
		t.Fatalf("migrate into public: exit %d, err %q", code, stderr)
	}
	code, out, stderr := cli("apply", "--dsn", dsn, "--target-schema", "reports", "-e",
		"CREATE TRANSFORM cheap AS SELECT id, price FROM items WHERE price < 10; ALTER TRANSFORM cheap ADD kind AS upper(kind)")
	if code != 1 || !strings.HasPrefix(stderr, "conflict: ") {
		// A transform is altered once it is live: not in the script that made it.
		t.Fatalf("ALTER of a transform not built yet: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, out, stderr := cli("apply", "--dsn", dsn, "--target-schema", "reports", "-e", "CREATE TRANSFORM cheap AS SELECT id, price FROM items WHERE price < 10"); code != 0 || !strings.Contains(out, "CREATE TRANSFORM cheap: created") {
		t.Fatalf("apply: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, out, stderr := cli("backfill", "--dsn", dsn, "items"); code != 0 || !strings.Contains(out, "REQUEST BACKFILL \"items\": requested") || !strings.Contains(out, "cheap") {
		t.Fatalf("backfill: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, _, stderr := cli("backfill", "--dsn", dsn, "nothing_here"); code != 1 || !strings.HasPrefix(stderr, "not_found: ") {
		t.Fatalf("backfill of a missing table: exit %d, err %q", code, stderr)
	}
	code, script, stderr := cli("dump", "--dsn", dsn)
	if code != 0 || !strings.Contains(script, `CREATE TRANSFORM "reports"."cheap" AS SELECT id, price FROM items WHERE price < 10;`) {
		t.Fatalf("dump: exit %d, out %q, err %q", code, script, stderr)
	}
	file := filepath.Join(t.TempDir(), "structure.sql")
	if err := os.WriteFile(file, []byte("-- pg_dump output\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("dump", "--dsn", dsn, "--append-to", file); code != 0 {
		t.Fatalf("dump --append-to: exit %d, err %q", code, stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.HasPrefix(s, "-- pg_dump output\n") || !strings.Contains(s, `DROP SCHEMA IF EXISTS "trellis" CASCADE;`) ||
		!strings.Contains(s, `INSERT INTO "trellis"."restore_scripts"`) || !strings.Contains(s, `CREATE TRANSFORM "reports"."cheap"`) {
		t.Fatalf("the appended restore section:\n%s", s)
	}
}
