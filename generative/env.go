package generative

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/clibuild"
	"github.com/trellis-repl/trellis-repl/internal/pgserver"
	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// Env is where programs run: a PostgreSQL server to create a fresh
// database on for every run and, when the suite owns it, to restart and
// reconfigure. Programs run one at a time per Env, since restarts and
// ALTER SYSTEM affect the whole server.
type Env struct {
	// AdminDSN is a superuser connection to an existing database.
	AdminDSN string
	// Server is the suite's own server; nil on an external one, where
	// restart-pg is skipped and held commits run as plain transactions.
	Server *pgserver.Server
	// CLI is a trellis-repl binary for programs with runner=cli; "" runs
	// them in process (no real SIGKILL then).
	CLI string
	// ConvergeTimeout is how long a check waits for convergence with no
	// progress (default 25s; three times that in all): a planted bug that
	// stops convergence must fail within budget.
	ConvergeTimeout time.Duration
	// Logger receives the suite's progress; nil discards it.
	Logger *slog.Logger
	// TempDir holds the runners' checkpoint stores ("" = os.TempDir()).
	TempDir string
	// Trace, when set, receives every run's whole log as it happens.
	Trace io.Writer

	mu sync.Mutex // one program at a time
}

func (e *Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

func (e *Env) convergeTimeout() time.Duration {
	if e.ConvergeTimeout <= 0 {
		return 25 * time.Second
	}
	return e.ConvergeTimeout
}

// createDatabase makes a fresh database and returns its name and DSN.
func (e *Env) createDatabase(ctx context.Context, seed int64) (string, string, error) {
	conn, err := pgx.Connect(ctx, e.AdminDSN)
	if err != nil {
		return "", "", fmt.Errorf("connect to the admin database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := fmt.Sprintf("gen_%d_%d", uint64(seed)%1000000, time.Now().UnixNano()%1000000000)
	if err := pgserver.CreateDatabaseOn(ctx, conn, name); err != nil {
		return "", "", err
	}
	return name, dsnWithDatabase(e.AdminDSN, name), nil
}

// dsnWithDatabase swaps the database of a DSN (URL or key=value).
func dsnWithDatabase(dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		i := strings.Index(dsn, "://")
		rest := dsn[i+3:]
		path := strings.IndexAny(rest, "/?")
		query := ""
		if q := strings.Index(rest, "?"); q >= 0 {
			query = rest[q:]
		}
		host := rest
		if path >= 0 {
			host = rest[:path]
		}
		return dsn[:i+3] + host + "/" + name + query
	}
	return strings.TrimSpace(dsn) + " dbname='" + strings.ReplaceAll(name, "'", `\'`) + "'"
}

func (e *Env) dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := connectRetry(ctx, e.AdminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return pgserver.DropDatabaseOn(ctx, conn, name)
}

// alterSystem runs ALTER SYSTEM statements and reloads the configuration.
func (e *Env) alterSystem(ctx context.Context, stmts ...string) error {
	if e.Server == nil {
		return nil
	}
	conn, err := connectRetry(ctx, e.AdminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return e.Server.Reload(ctx)
}

// connectRetry connects, retrying while the server restarts. Statements
// are not cached: a dropped and re-created target would make a cached
// "SELECT * FROM target" fail with "cached plan must not change result type".
func connectRetry(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ModuleRoot finds the directory holding go.mod, from the working
// directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// BuildCLI compiles cmd/trellis-repl into dir, with the trellisplant tag
// when this build has it (so a planted bug is planted in the child too),
// or returns the binary make test built (clibuild.Prebuilt).
func BuildCLI(ctx context.Context, dir string) (string, error) {
	if bin, err := clibuild.Prebuilt(); bin != "" || err != nil {
		return bin, err
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "trellis-repl")
	args := []string{"build", "-o", bin}
	if plant.Enabled {
		args = append(args, "-tags", "trellisplant")
	}
	args = append(args, "./cmd/trellis-repl")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return bin, nil
}

// ActivePlant is the planted bug of this process, "" when none.
func ActivePlant() string {
	if !plant.Enabled {
		return ""
	}
	return os.Getenv(plant.EnvVar)
}
