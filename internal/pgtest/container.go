package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

// EnvImage names the environment variable that overrides the PostgreSQL
// image the harness runs when it falls back to a Docker container.
const EnvImage = "TRELLIS_TEST_IMAGE"

// DefaultImage is the image the container fallback runs unless EnvImage is
// set. It is the oldest major version trellis-repl supports.
const DefaultImage = "postgres:15"

// containerSettings are the server settings of the container, passed as
// `-c name=value` arguments: pgserver's portable ones and the harness's, so
// that the fallback behaves as a local cluster does; the image listens on
// 5432 in its own network namespace, so nothing places it.
func containerSettings() [][2]string {
	return append(pgserver.PortableSettings(), harnessSettings()...)
}

// containerCmd is the container's command line: the image's entrypoint runs
// it after initialising the cluster.
func containerCmd() []string {
	cmd := []string{"postgres"}
	for _, kv := range containerSettings() {
		cmd = append(cmd, "-c", kv[0]+"="+kv[1])
	}
	return cmd
}

// dockerReachable reports (as a nil error) whether testcontainers-go can
// reach a Docker engine, using its own host discovery (DOCKER_HOST,
// ~/.testcontainers.properties, the default and rootless sockets). It gives
// up after a few seconds so that a machine without Docker fails fast.
func dockerReachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	// NewDockerClientWithOpts falls back to a client from the environment
	// without checking it, so only a ping proves an engine answers.
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("docker ping: %w", err)
	}
	return nil
}

// startContainer runs image with testcontainers-go and waits until
// PostgreSQL accepts connections. It returns a superuser DSN for the
// postgres database and a function that terminates the container.
//
// The stop function is the normal path; when the test binary is killed
// before it runs, testcontainers' reaper (ryuk, which it starts beside the
// first container unless TESTCONTAINERS_RYUK_DISABLED is set) removes the
// container once the binary's connection to it drops.
func startContainer(ctx context.Context, image string) (adminDSN string, stop func(context.Context) error, err error) {
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	password := hex.EncodeToString(pw[:])

	const port = "5432/tcp"
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithEnv(map[string]string{
			"POSTGRES_USER":     "postgres",
			"POSTGRES_PASSWORD": password,
			"POSTGRES_DB":       "postgres",
			// Same encoding and collation as pgserver's initdb, so
			// that ordering and text behave alike in both harnesses.
			"POSTGRES_INITDB_ARGS": "--encoding=UTF8 --locale=C --no-sync",
		}),
		testcontainers.WithCmd(containerCmd()...),
		testcontainers.WithExposedPorts(port),
		// The entrypoint starts a temporary server to initialise the
		// cluster, stops it and starts the real one: the second "ready"
		// line is the real server. The port check covers the mapping.
		testcontainers.WithWaitStrategyAndDeadline(2*time.Minute,
			wait.ForLog("database system is ready to accept connections").
				WithOccurrence(2).
				WithStartupTimeout(2*time.Minute),
			wait.ForListeningPort(port).WithStartupTimeout(2*time.Minute),
		),
	)
	terminate := func(ctx context.Context) error {
		if err := testcontainers.TerminateContainer(ctr, testcontainers.StopContext(ctx)); err != nil {
			return fmt.Errorf("pgtest: terminate container: %w", err)
		}
		return nil
	}
	if err != nil {
		// A container that was created but never became ready still
		// has to go.
		_ = terminate(context.WithoutCancel(ctx))
		return "", nil, fmt.Errorf("pgtest: start container %s: %w", image, err)
	}

	host, err := ctr.Host(ctx)
	if err != nil {
		_ = terminate(context.WithoutCancel(ctx))
		return "", nil, fmt.Errorf("pgtest: container host: %w", err)
	}
	mapped, err := ctr.MappedPort(ctx, port)
	if err != nil {
		_ = terminate(context.WithoutCancel(ctx))
		return "", nil, fmt.Errorf("pgtest: container port: %w", err)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", password),
		Host:     net.JoinHostPort(host, mapped.Port()),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	return u.String(), terminate, nil
}
