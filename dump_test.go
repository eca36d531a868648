package trellis_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// dumpSchemaSQL are the source tables of TestDump.
const dumpSchemaSQL = `CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount int);
CREATE TABLE customers (id int PRIMARY KEY, name text)`

// TestDump: Dump writes the definitions in dependency order (a chain after
// what it reads, its upstream as redefined), replayed by
// Apply on a fresh database; and a pg_dump --schema-only file with the
// restore section appended restores, through psql alone, a database whose
// first Open recreates every transform, which then build and converge
// (ADR 0040).
func TestDump(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	ctx := context.Background()
	e.exec(dumpSchemaSQL)
	e.exec(`INSERT INTO orders SELECT g, g % 5, g FROM generate_series(1, 100) g; INSERT INTO customers SELECT g, 'c' || g FROM generate_series(0, 4) g`)
	e.apply(`
CREATE TRANSFORM named AS SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer;
CREATE TRANSFORM idle AS SELECT id FROM customers`)
	e.start()
	e.converge("after the build")
	// Redefined, then read by a chain: the dump keeps the new text and
	// puts the chain after it.
	e.apply(`CREATE OR REPLACE TRANSFORM named AS SELECT o.id, upper(c.name) AS name, o.amount FROM orders o JOIN customers c ON c.id = o.customer`)
	e.converge("after the redefinition")
	e.apply(`CREATE TRANSFORM per_name AS SELECT name, sum(amount) AS amount, count(*) AS n FROM named GROUP BY name;
CREATE TRANSFORM top_names AS SELECT name FROM per_name WHERE n > 10;
PAUSE TRANSFORM idle`)
	e.converge("after the chain's build")
	script, err := e.tr.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pos := func(name string) int {
		i := strings.Index(script, `CREATE TRANSFORM "public"."`+name+`"`)
		if i < 0 {
			t.Fatalf("the dump lacks %s:\n%s", name, script)
		}
		return i
	}
	if !(pos("named") < pos("per_name") && pos("per_name") < pos("top_names")) || !strings.Contains(script, `upper(c.name)`) ||
		!strings.Contains(script, `PAUSE TRANSFORM "public"."idle";`) {
		t.Fatalf("the dump is not in dependency order, lacks the redefinition or the pause:\n%s", script)
	}
	want := definitionsOf(t, e.tr)

	// Replayed by Apply on a fresh database with the same tables.
	fresh := newEnvOn(t, pgtest.NewDatabase(t), trellis.Config{})
	fresh.exec(dumpSchemaSQL)
	fresh.apply(script)
	if got := definitionsOf(t, fresh.tr); !slices.Equal(got, want) {
		t.Fatalf("replayed definitions differ:\n%v\nwant\n%v", got, want)
	}

	// pg_dump --schema-only plus the restore section, restored by psql.
	pgDump, psql := pgTool(t, "pg_dump"), pgTool(t, "psql")
	file := filepath.Join(t.TempDir(), "structure.sql")
	if out, err := exec.Command(pgDump, "--schema-only", "--no-owner", "-f", file, e.dsn).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	section, err := e.tr.RestoreSQL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(section); err != nil {
		t.Fatal(err)
	}
	f.Close()
	restoredDSN := pgtest.NewDatabase(t)
	if out, err := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", file, restoredDSN).CombinedOutput(); err != nil {
		t.Fatalf("psql -f structure.sql: %v\n%s", err, out)
	}
	conn, err := pgx.Connect(ctx, restoredDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO orders SELECT g, g % 5, g FROM generate_series(1, 300) g; INSERT INTO customers SELECT g, 'c' || g FROM generate_series(0, 4) g`); err != nil {
		t.Fatal(err)
	}
	restored := newEnvOn(t, restoredDSN, trellis.Config{})
	if got := definitionsOf(t, restored.tr); !slices.Equal(got, want) {
		t.Fatalf("restored definitions differ:\n%v\nwant\n%v", got, want)
	}
	restored.apply(`RESUME TRANSFORM idle`)
	restored.start()
	restored.converge("the restored instance, after its build")
	restored.exec(`UPDATE orders SET customer = 1 WHERE id < 40; DELETE FROM customers WHERE id = 4`)
	restored.converge("the restored instance, after writes")
	if n := restored.queryInt(`SELECT count(*) FROM trellis.restore_scripts`); n != 0 {
		t.Fatalf("%d restore scripts still queued after the first Open", n)
	}
}

// definitionsOf is each definition's statement, and whether it is
// paused (the other states are how far each got building).
func definitionsOf(t *testing.T, h *trellis.Trellis) []string {
	t.Helper()
	defs, err := h.Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range defs {
		out = append(out, fmt.Sprintf("%s (paused: %t)", d.SQL, d.State == "paused"))
	}
	slices.Sort(out)
	return out
}

// pgTool finds a PostgreSQL client program of the server's version: beside
// the server's binaries (where a link to them leads), else on the PATH.
func pgTool(t *testing.T, name string) string {
	t.Helper()
	if bin, err := pgserver.FindBinDir(); err == nil {
		for _, dir := range []string{bin, realDir(filepath.Join(bin, "pg_ctl"))} {
			if p := filepath.Join(dir, name); dir != "" && isFile(p) {
				return p
			}
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s on this machine: %v", name, err)
	}
	return p
}

// realDir is the directory a link at path leads to ("" when none).
func realDir(path string) string {
	r, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	return filepath.Dir(r)
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
