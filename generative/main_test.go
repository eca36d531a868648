package generative

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, shared.remove) }

// suite is the test binary's shared environment: one CLI build, one Env.
type suite struct {
	once sync.Once
	env  *Env
	err  error
	dir  string
}

// testEnv returns the Env on the harness's server, building the CLI once.
func (s *suite) get(t *testing.T) *Env {
	t.Helper()
	s.once.Do(func() {
		env := &Env{ConvergeTimeout: 25 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
		if dsn := os.Getenv(pgtest.EnvDSN); dsn != "" {
			env.AdminDSN = dsn
		} else {
			srv := pgtest.Server(t)
			env.Server = srv
			env.AdminDSN = srv.DSN("postgres")
		}
		if d, err := time.ParseDuration(os.Getenv("TRELLIS_GEN_CONVERGE_TIMEOUT")); err == nil {
			env.ConvergeTimeout = d
		}
		if os.Getenv("TRELLIS_GEN_TRACE") != "" {
			env.Trace = os.Stderr
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

// remove deletes the CLI build's directory (TestMain, after the tests).
func (s *suite) remove() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
