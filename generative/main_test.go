package generative

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, shared.remove) }

// laneCount is how many programs run at once: each on a server of its own,
// since a program restarts and reconfigures (ALTER SYSTEM) its server; a
// program mostly waits (on its runner, its checks, restarts), so two
// overlap well on two cores.
const laneCount = 2

// suite is the test binary's shared environment: one CLI build, and an Env
// per lane (the first on the harness's server, the others on extra
// servers; one lane on an external server, which the suite must not
// disturb with a second).
type suite struct {
	once  sync.Once
	env   *Env
	err   error
	dir   string
	extra sync.Once
	envs  []*Env
}

// get returns the Env on the harness's server, building the CLI once.
func (s *suite) get(t *testing.T) *Env {
	t.Helper()
	s.once.Do(func() {
		env := newEnv(1)
		if dsn := os.Getenv(pgtest.EnvDSN); dsn != "" {
			env.AdminDSN = dsn
		} else {
			srv := pgtest.Server(t)
			env.Server = srv
			env.AdminDSN = srv.DSN("postgres")
		}
		dir, err := os.MkdirTemp("", "trellis-gen-cli-")
		if err != nil {
			s.err = err
			return
		}
		s.dir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		env.CLI, s.err = BuildCLI(ctx, dir)
		s.env = env
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.env
}

// lanes returns the Env of every lane, starting the extra servers on the
// first call for more than one program (one runs on the first lane).
func (s *suite) lanes(t *testing.T, programs int) []*Env {
	t.Helper()
	first := s.get(t)
	if programs <= 1 {
		return []*Env{first}
	}
	s.extra.Do(func() {
		s.envs = []*Env{first}
		if first.Server == nil {
			return
		}
		for i := 2; i <= laneCount; i++ {
			srv := pgtest.ExtraServer(t, fmt.Sprintf("generative lane %d", i), nil)
			env := newEnv(i)
			env.Server, env.AdminDSN, env.CLI = srv, srv.DSN("postgres"), first.CLI
			s.envs = append(s.envs, env)
		}
	})
	return s.envs
}

// newEnv is a lane's Env with the suite's settings, its log lines naming
// the lane.
func newEnv(lane int) *Env {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	env := &Env{ConvergeTimeout: 25 * time.Second, Logger: log.With("lane", lane)}
	if d, err := time.ParseDuration(os.Getenv("TRELLIS_GEN_CONVERGE_TIMEOUT")); err == nil {
		env.ConvergeTimeout = d
	}
	if os.Getenv("TRELLIS_GEN_TRACE") != "" {
		env.Trace = os.Stderr
	}
	return env
}

// remove deletes the CLI build's directory (TestMain, after the tests).
func (s *suite) remove() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
