// Package pgtest is the test harness for code that needs a real PostgreSQL:
// one throwaway server per test binary, and a fresh database per test.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtest.NewDatabase(t)
//		...
//	}
//
// When TRELLIS_TEST_DSN is set (a superuser connection string to a server
// with wal_level=logical), no server is started: databases are created on
// that server instead, and tests that need to control the server itself
// (Server) are skipped.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

// EnvDSN names the environment variable that points the harness at an
// existing server instead of starting one.
const EnvDSN = "TRELLIS_TEST_DSN"

// harness is what Main sets up for the test binary. It is package state
// because testing.M offers no other way to hand it to the tests; it is
// written once, before m.Run, and only read afterwards.
type harness struct {
	server   *pgserver.Server // nil when external
	adminDSN string           // superuser DSN of an existing database
}

var current *harness

// Main starts one throwaway server for the test binary (or uses
// TRELLIS_TEST_DSN), runs the tests, stops the server, and exits with the
// tests' status. Call it from TestMain.
//
// A test that panics or times out kills the binary before Main can stop
// the server; a detached watchdog (pgserver.Options.ReapOnExit) stops it
// and removes its files within a second or so.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		if _, err := pgconn.ParseConfig(dsn); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %s is not a valid connection string: %v\n", EnvDSN, err)
			return 2
		}
		current = &harness{adminDSN: dsn}
		return m.Run()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	// TODO(testcontainers): when no local binaries exist but Docker is
	// reachable, start PostgreSQL with testcontainers-go. It is not a
	// dependency yet, and the development machines have local binaries.
	srv, err := pgserver.Start(ctx, pgserver.Options{ReapOnExit: true})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: start PostgreSQL: %v\n(install postgresql-15 or set %s to a superuser DSN of a server with wal_level=logical)\n", err, EnvDSN)
		return 2
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop PostgreSQL: %v\n", err)
		}
	}
	defer stop()

	// An interrupted `go test` (Ctrl-C, CI cancel) should not leave the
	// server behind either.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			stop()
			os.Exit(130)
		}
	}()

	current = &harness{server: srv, adminDSN: srv.DSN("postgres")}
	return m.Run()
}

// Server returns the harness's own server, for tests that restart
// PostgreSQL or change its settings. It skips the test when the harness
// uses an external server (TRELLIS_TEST_DSN), which tests must not disturb.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	h := mustHarness(t)
	if h.server == nil {
		t.Skipf("pgtest: test controls the server; skipped when %s is set", EnvDSN)
	}
	return h.server
}

// NewDatabase creates a fresh, empty database for this test and returns its
// DSN. The database (and any replication slot on it) is dropped when the
// test ends. The server has wal_level=logical.
func NewDatabase(t testing.TB) string {
	t.Helper()
	h := mustHarness(t)
	name := DatabaseName(t.Name())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, h.adminDSN)
	if err != nil {
		t.Fatalf("pgtest: connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if err := pgserver.CreateDatabaseOn(ctx, conn, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dsn, err := withDatabase(h.adminDSN, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, h.adminDSN)
		if err != nil {
			t.Errorf("pgtest: drop database %s: connect: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if err := pgserver.DropDatabaseOn(ctx, conn, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return dsn
}

func mustHarness(t testing.TB) *harness {
	t.Helper()
	if current == nil {
		t.Fatal("pgtest: the harness is not running; add `func TestMain(m *testing.M) { pgtest.Main(m) }` to the package's tests")
	}
	return current
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// DatabaseName derives a database name from a test name: lower case,
// [a-z0-9_] only, short enough for PostgreSQL's 63-byte limit, with a random
// suffix so that repeated and parallel runs never collide.
func DatabaseName(testName string) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(testName), "_")
	base = strings.Trim(base, "_")
	if len(base) > 40 {
		base = base[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t_" + base + "_" + hex.EncodeToString(b[:])
}

// withDatabase returns dsn with its database replaced by dbname. dsn may be
// a URL or a keyword/value string.
func withDatabase(dsn, dbname string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse %s: %w", EnvDSN, err)
		}
		u.Path = "/" + dbname
		u.RawPath = ""
		q := u.Query()
		q.Del("dbname") // a query parameter would override the path
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In keyword/value form a later keyword overrides an earlier one.
	escaped := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(dbname)
	out := strings.TrimSpace(dsn) + " dbname='" + escaped + "'"
	if _, err := pgconn.ParseConfig(out); err != nil {
		return "", fmt.Errorf("derive test DSN: %w", err)
	}
	return out, nil
}
