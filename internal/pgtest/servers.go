package pgtest

// Servers of a test's own, for tests that stop, promote or restore them
// (a failover to a standby, a point-in-time restore; ADR 0039), and the
// harness's client programs (pg_dump, pg_restore, psql).

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

// NewServer starts a server for this test alone (settings over the
// defaults; archive: WAL archived into its ArchiveDir), stopped and
// removed when the test ends. It skips the test when the harness has no
// local binaries.
func NewServer(t testing.TB, settings map[string]string, archive bool) *pgserver.Server {
	t.Helper()
	h := localHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: h.binDir, ReapOnExit: true, Settings: settings, Archive: archive})
	if err != nil {
		t.Fatalf("pgtest: start a server: %v", err)
	}
	stopAtEnd(t, srv)
	return srv
}

// Backup takes a base backup of srv (a standby of it with standby) as a
// server of its own, not started, stopped and removed when the test ends.
func Backup(t testing.TB, srv *pgserver.Server, standby bool) *pgserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := srv.Backup(ctx, pgserver.BackupOptions{Standby: standby, ReapOnExit: true})
	if err != nil {
		t.Fatalf("pgtest: back up a server: %v", err)
	}
	stopAtEnd(t, b)
	return b
}

// Tool is the path of one of the harness's PostgreSQL programs (pg_dump,
// pg_restore, psql, …). It skips the test when the harness has no local
// binaries.
func Tool(t testing.TB, name string) string {
	t.Helper()
	h := localHarness(t)
	p := pgserver.Tool(h.binDir, name)
	if _, err := exec.LookPath(p); err != nil {
		t.Skipf("pgtest: %s is not installed beside the server (%v)", name, err)
	}
	return p
}

// localHarness is the harness when it runs local binaries; it skips the
// test otherwise.
func localHarness(t testing.TB) *harness {
	t.Helper()
	h := mustHarness(t)
	if h.kind != backendLocal {
		t.Skipf("pgtest: test needs servers of its own; skipped with the %v", h.kind)
	}
	return h
}

func stopAtEnd(t testing.TB, srv *pgserver.Server) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("pgtest: stop a server: %v", err)
		}
	})
}
