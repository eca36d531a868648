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
// The server comes from, in this order: TRELLIS_TEST_DSN when set (a
// superuser connection string to a server with wal_level=logical; no server
// is started and databases are created on that one); else a throwaway
// cluster from the machine's PostgreSQL binaries; else, when a Docker engine
// is reachable, a throwaway postgres:15 container (TRELLIS_TEST_IMAGE
// overrides the image) started with testcontainers-go. Tests that need to
// control the server itself (Server) run only on the local cluster and are
// skipped otherwise.
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
	"sync"
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
	kind     backendKind
	server   *pgserver.Server // set only for backendLocal
	adminDSN string           // superuser DSN of an existing database
	binDir   string           // backendLocal: the binaries extra servers use

	mu     sync.Mutex
	extras map[string]*pgserver.Server // ExtraServer's, by name
}

var current *harness

// Main starts one throwaway server for the test binary (or uses
// TRELLIS_TEST_DSN; see the package documentation for the order), runs the
// tests, stops the server, and exits with the tests' status. Call it from
// TestMain.
//
// A test that panics or times out kills the binary before Main can stop
// the server; a detached watchdog (pgserver.Options.ReapOnExit) stops a
// local one and removes its files within a second or so, and
// testcontainers' reaper (ryuk) removes a container.
//
// The after functions run once the tests are done (and the server is
// stopped): they remove what a package's tests share, such as a binary
// built once for all of them.
func Main(m *testing.M, after ...func()) {
	os.Exit(run(m, after))
}

func run(m *testing.M, after []func()) int {
	defer func() {
		for _, f := range after {
			f()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	b, err := chooseBackend(ctx, systemProbes(os.Getenv))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if b.kind == backendExternal {
		current = &harness{kind: b.kind, adminDSN: b.dsn}
		return m.Run()
	}

	h, stopServer, err := startBackend(b)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n(install postgresql-15, set %s to a superuser DSN of a server with wal_level=logical, or run a Docker engine)\n", err, EnvDSN)
		return 2
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := stopServer(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: stop PostgreSQL: %v\n", err)
			}
		})
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

	current = h
	return m.Run()
}

// startBackend starts the throwaway server b names (local cluster or
// container) and returns the harness for it and a function that stops it.
func startBackend(b backend) (*harness, func(context.Context) error, error) {
	switch b.kind {
	case backendLocal:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: b.binDir, ReapOnExit: true, Settings: serverSettings(nil)})
		if err != nil {
			return nil, nil, fmt.Errorf("pgtest: start PostgreSQL: %w", err)
		}
		h := &harness{kind: b.kind, server: srv, adminDSN: srv.DSN("postgres"), binDir: b.binDir}
		return h, func(ctx context.Context) error {
			err := srv.Stop(ctx)
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, x := range h.extras {
				if xerr := x.Stop(ctx); xerr != nil && err == nil {
					err = xerr
				}
			}
			return err
		}, nil
	case backendContainer:
		// Pulling the image on first use can take minutes.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		dsn, stop, err := startContainer(ctx, b.image)
		if err != nil {
			return nil, nil, err
		}
		return &harness{kind: b.kind, adminDSN: dsn}, stop, nil
	}
	return nil, nil, fmt.Errorf("pgtest: cannot start a %v", b.kind)
}

// harnessSettings are what the harness's own servers (the local cluster,
// extra servers, the container) set beyond pgserver's portable settings.
//
// jit=off: the tests' tables are small and mostly never analyzed, so the
// planner's default estimates (thousands of rows a table) make a join of
// several tables or a two-way EXCEPT ALL comparison look expensive enough to
// JIT-compile, and LLVM then spends seconds on a query that runs in a
// millisecond: TestPeerIVM's server spent 61 of its 108 s compiling
// (pg_stat_statements), most of it on one four-way FULL JOIN compared 33
// times at 1.6 s each (0.3 ms to execute). JIT changes how PostgreSQL
// evaluates expressions, never a result. An external server
// (TRELLIS_TEST_DSN) keeps its own setting.
func harnessSettings() [][2]string { return [][2]string{{"jit", "off"}} }

// serverSettings is the harness's settings with extra (a server's own,
// e.g. wal_level=replica) over them.
func serverSettings(extra map[string]string) map[string]string {
	out := map[string]string{}
	for _, kv := range harnessSettings() {
		out[kv[0]] = kv[1]
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// Server returns the harness's own server, for tests that restart
// PostgreSQL or change its settings. It skips the test when the harness
// uses an external server (TRELLIS_TEST_DSN), which tests must not disturb,
// or a container, which pgserver cannot restart or reconfigure.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	h := mustHarness(t)
	switch {
	case h.kind == backendExternal:
		t.Skipf("pgtest: test controls the server; skipped when %s is set", EnvDSN)
	case h.kind == backendContainer:
		t.Skip("pgtest: test controls the server; skipped when the harness runs PostgreSQL in a Docker container (no local binaries)")
	case h.server == nil:
		t.Fatalf("pgtest: the harness (%v) has no server to control", h.kind)
	}
	return h.server
}

// ExtraServer returns a second throwaway server with settings over the
// harness's (for example wal_level=replica), started on the first call with
// that name and stopped when Main ends. It skips the test when the harness
// has no local binaries (an external server or a container).
func ExtraServer(t testing.TB, name string, settings map[string]string) *pgserver.Server {
	t.Helper()
	h := mustHarness(t)
	if h.kind != backendLocal {
		t.Skipf("pgtest: test needs a server of its own (%s); skipped with the %v", name, h.kind)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.extras[name]; s != nil {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: h.binDir, ReapOnExit: true, Settings: serverSettings(settings)})
	if err != nil {
		t.Fatalf("pgtest: start server %s: %v", name, err)
	}
	if h.extras == nil {
		h.extras = map[string]*pgserver.Server{}
	}
	h.extras[name] = srv
	return srv
}

// NewDatabaseOn is NewDatabase on srv (an ExtraServer).
func NewDatabaseOn(t testing.TB, srv *pgserver.Server) string {
	t.Helper()
	return newDatabase(t, srv.DSN("postgres"))
}

// NewDatabase creates a fresh, empty database for this test and returns its
// DSN. The database (and any replication slot on it) is dropped when the
// test ends. The server has wal_level=logical.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, mustHarness(t).adminDSN)
}

func newDatabase(t testing.TB, adminDSN string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, drop, err := CreateDatabase(ctx, adminDSN, t.Name())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return dsn
}

// CreateDatabase creates a fresh, empty database on adminDSN's server,
// named after testName (DatabaseName), and returns its DSN and a function
// that drops it (and any replication slot on it).
func CreateDatabase(ctx context.Context, adminDSN, testName string) (string, func(context.Context) error, error) {
	name := DatabaseName(testName)
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", nil, fmt.Errorf("connect to the test server: %w", err)
	}
	defer conn.Close(ctx)
	if err := pgserver.CreateDatabaseOn(ctx, conn, name); err != nil {
		return "", nil, err
	}
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		return "", nil, err
	}
	drop := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, adminDSN)
		if err != nil {
			return fmt.Errorf("drop database %s: connect: %w", name, err)
		}
		defer conn.Close(ctx)
		return pgserver.DropDatabaseOn(ctx, conn, name)
	}
	return dsn, drop, nil
}

// lazy is the harness AdminDSN starts in a process whose tests do not
// run Main (the users of a test-support package). Like current it is
// package state because nothing else outlives a test; it is set once.
var lazy struct {
	once sync.Once
	h    *harness
	err  error
}

// AdminDSN returns a superuser DSN of this process's throwaway server:
// Main's when it runs; else one started on first use, chosen as Main
// chooses (TRELLIS_TEST_DSN, the machine's binaries, a container), and
// kept until the process exits, when pgserver's watchdog (or the
// container reaper) removes it.
func AdminDSN() (string, error) {
	if current != nil {
		return current.adminDSN, nil
	}
	lazy.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := chooseBackend(ctx, systemProbes(os.Getenv))
		cancel()
		if err != nil {
			lazy.err = err
			return
		}
		if b.kind == backendExternal {
			lazy.h = &harness{kind: b.kind, adminDSN: b.dsn}
			return
		}
		// Never stopped from here: the process ends first, and the
		// watchdog or reaper cleans up after it.
		h, _, err := startBackend(b)
		lazy.h, lazy.err = h, err
	})
	if lazy.err != nil {
		return "", lazy.err
	}
	return lazy.h.adminDSN, nil
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
