package pgtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

// backendKind says where the harness's PostgreSQL comes from.
type backendKind int

const (
	// backendExternal is the server named by TRELLIS_TEST_DSN.
	backendExternal backendKind = iota + 1
	// backendLocal is a throwaway cluster from the machine's binaries.
	backendLocal
	// backendContainer is a throwaway server in a Docker container.
	backendContainer
)

func (k backendKind) String() string {
	switch k {
	case backendExternal:
		return "external server (" + EnvDSN + ")"
	case backendLocal:
		return "local binaries"
	case backendContainer:
		return "Docker container"
	}
	return fmt.Sprintf("backendKind(%d)", int(k))
}

// backend is the harness's choice of server and what it needs to use it.
type backend struct {
	kind   backendKind
	dsn    string // backendExternal: the superuser DSN
	binDir string // backendLocal: where initdb and pg_ctl are
	image  string // backendContainer: the image to run
}

// probes are the detections chooseBackend consults. They are fields rather
// than direct calls so that tests can exercise every branch on a machine
// that has only one of the options.
type probes struct {
	getenv     func(string) string
	findBinDir func() (string, error)
	docker     func(context.Context) error
}

// systemProbes are the real detections.
func systemProbes(getenv func(string) string) probes {
	return probes{
		getenv:     getenv,
		findBinDir: pgserver.FindBinDir,
		docker:     dockerReachable,
	}
}

// errNoServer is wrapped by chooseBackend's error when none of the three
// ways to get a server is available.
var errNoServer = errors.New("pgtest: no PostgreSQL server for the tests")

// chooseBackend picks the server, in this order: TRELLIS_TEST_DSN when set
// (the user asked for it); else the machine's binaries (fastest, no
// daemon); else a Docker container. It only probes Docker when there are
// no binaries, since the probe can take seconds.
func chooseBackend(ctx context.Context, p probes) (backend, error) {
	if dsn := p.getenv(EnvDSN); dsn != "" {
		if _, err := pgconn.ParseConfig(dsn); err != nil {
			return backend{}, fmt.Errorf("pgtest: %s is not a valid connection string: %w", EnvDSN, err)
		}
		return backend{kind: backendExternal, dsn: dsn}, nil
	}
	binDir, binErr := p.findBinDir()
	if binErr == nil {
		return backend{kind: backendLocal, binDir: binDir}, nil
	}
	dockerErr := p.docker(ctx)
	if dockerErr == nil {
		image := p.getenv(EnvImage)
		if image == "" {
			image = DefaultImage
		}
		return backend{kind: backendContainer, image: image}, nil
	}
	return backend{}, fmt.Errorf("%w: no local PostgreSQL binaries (initdb, pg_ctl, postgres on PATH or under /usr/lib/postgresql/*/bin), "+
		"%s is not set, and no Docker engine is reachable (%v).\n"+
		"Do one of: install the PostgreSQL 15 server binaries (e.g. apt-get install postgresql-15); "+
		"set %s to a superuser DSN of a server with wal_level=logical; "+
		"or run a Docker engine (the harness then starts %s, or %s, with testcontainers-go)",
		errNoServer, EnvDSN, dockerErr, EnvDSN, DefaultImage, EnvImage)
}
