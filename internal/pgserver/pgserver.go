// Package pgserver runs a throwaway PostgreSQL cluster in a temporary
// directory, for tests, `make demo` and the benchmark.
//
// The cluster is configured for logical replication (wal_level=logical) and
// for speed over durability (fsync=off). It listens on a free loopback TCP
// port and on a unix socket inside its temporary directory. When the calling
// process runs as root, PostgreSQL (which refuses to run as root) is run as
// the "postgres" OS user.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configures Start.
type Options struct {
	// Settings are extra postgresql.conf settings, applied after (and so
	// overriding) the defaults. Values are written verbatim, so string
	// values that need quoting must carry their own single quotes.
	Settings map[string]string
	// BinDir, when set, is the directory holding initdb, pg_ctl and
	// postgres; otherwise they are looked up on PATH, then under
	// /usr/lib/postgresql/*/bin (highest version).
	BinDir string
	// Logger receives lifecycle messages; nil discards them.
	Logger *slog.Logger
	// ReapOnExit starts a detached watchdog that stops the server and
	// removes its directory if this process exits without calling Stop —
	// as a test binary does when a test panics or times out.
	ReapOnExit bool
	// Archive archives every completed WAL file into ArchiveDir
	// (archive_mode = on), for point-in-time restores of the server's
	// backups (Backup, Recover).
	Archive bool
}

// Server is a running (or stopped) throwaway cluster. Its methods are safe
// for concurrent use.
type Server struct {
	binDir  string
	dir     string // temporary root: data/, sock/, postgres.log
	dataDir string
	sockDir string
	logPath string
	port    int
	cred    *syscall.Credential // nil when not running as root
	logger  *slog.Logger

	mu      sync.Mutex
	running bool
	removed bool

	reaper     *os.Process   // see startReaper; nil when not requested
	reaperDone chan struct{} // closed when the reaper has exited
}

// PortableSettings are the settings the tests rely on whatever runs the
// server: logical decoding, enough slots, senders and connections, no fsync,
// quiet logs. They leave out where the server listens (listen_addresses,
// port, unix_socket_directories), which only a local cluster decides, so
// that another host of the server (pgtest's Docker fallback, listening on
// 5432 in its own network namespace) applies exactly the same behaviour
// from this one list. Each call returns a new slice, in a fixed order.
//
// synchronous_commit=local matters: tests set synchronous_standby_names to a
// standby that does not exist, to hold one session's commit in flight, and
// every other session must not wait for it.
func PortableSettings() [][2]string {
	return [][2]string{
		{"wal_level", "logical"},
		{"max_replication_slots", "20"},
		{"max_wal_senders", "20"},
		{"fsync", "off"},
		{"synchronous_commit", "local"},
		{"max_connections", "200"},
		{"shared_buffers", "128MB"},
		{"log_min_messages", "warning"},
		{"logging_collector", "off"},
	}
}

// defaultSettings are the settings every throwaway cluster gets: the
// portable ones and where this cluster listens. They are written to
// postgresql.conf so that they survive restarts.
func defaultSettings(sockDir string, port int) [][2]string {
	return append(PortableSettings(),
		[2]string{"listen_addresses", quote("127.0.0.1")},
		[2]string{"port", strconv.Itoa(port)},
		[2]string{"unix_socket_directories", quote(sockDir)},
	)
}

// Start initialises a new cluster in a fresh temporary directory and starts
// it. The caller must Stop it to remove the directory.
func Start(ctx context.Context, opts Options) (*Server, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}

	cred, err := runAsCredential()
	if err != nil {
		return nil, err
	}

	// The directory lives directly under os.TempDir() so that the unix
	// socket path stays short (sun_path is ~107 bytes) and so that, when we
	// hand it to the postgres user, that user can traverse to it.
	dir, err := os.MkdirTemp(os.TempDir(), "pgserver-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: create temp dir: %w", err)
	}
	s := &Server{
		binDir:  binDir,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		cred:    cred,
		logger:  logger,
	}
	settings := opts.Settings
	if opts.Archive {
		settings = map[string]string{}
		for k, v := range opts.Settings {
			settings[k] = v
		}
		settings["archive_mode"] = "on"
		settings["archive_command"] = quote("cp %p " + s.ArchiveDir() + "/%f")
	}
	if err := s.init(ctx, settings); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if opts.ReapOnExit {
		if err := s.startReaper(); err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return s, nil
}

// init runs initdb and writes the configuration.
func (s *Server) init(ctx context.Context, extra map[string]string) error {
	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		return fmt.Errorf("pgserver: create socket dir: %w", err)
	}
	if err := os.Mkdir(s.ArchiveDir(), 0o700); err != nil {
		return fmt.Errorf("pgserver: create archive dir: %w", err)
	}
	if s.cred != nil {
		if err := chownTree(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	if _, err := s.run(ctx, "initdb",
		"-D", s.dataDir,
		"-A", "trust",
		"-U", "postgres",
		"--no-sync",
		"-E", "UTF8",
		"--locale=C",
	); err != nil {
		return err
	}

	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port

	var conf strings.Builder
	conf.WriteString("\n# pgserver settings\n")
	for _, kv := range defaultSettings(s.sockDir, port) {
		fmt.Fprintf(&conf, "%s = %s\n", kv[0], kv[1])
	}
	for _, k := range sortedKeys(extra) {
		fmt.Fprintf(&conf, "%s = %s\n", k, extra[k])
	}
	f, err := os.OpenFile(filepath.Join(s.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgserver: open postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(conf.String()); err != nil {
		f.Close()
		return fmt.Errorf("pgserver: write postgresql.conf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pgserver: write postgresql.conf: %w", err)
	}
	// The log file is created by pg_ctl running as the postgres user, in a
	// directory that user owns; nothing to prepare.
	return nil
}

// Start starts a stopped server again, on the same port and data directory.
// Starting a running server is a no-op.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return errors.New("pgserver: server was stopped and its data removed")
	}
	if s.running {
		return nil
	}
	if _, err := s.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", s.dataDir, "-l", s.logPath); err != nil {
		return s.withLogTail(err)
	}
	s.running = true
	s.logger.Info("postgres started", "port", s.port, "data_dir", s.dataDir)
	return nil
}

// Stop shuts the server down (fast mode: sessions are disconnected) and
// removes its temporary directory. It is safe to call more than once.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return nil
	}
	var stopErr error
	if s.running {
		if _, err := s.run(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", s.dataDir); err != nil {
			stopErr = err
		} else {
			s.running = false
		}
	}
	if stopErr != nil {
		// Never remove the data of a server that may still be running:
		// it would keep its files open and its port bound.
		return stopErr
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("pgserver: remove %s: %w", s.dir, err)
	}
	s.removed = true
	if s.reaper != nil {
		// Waiting for it here, rather than letting it notice the missing
		// directory, leaves no orphan for init to reap.
		_ = s.reaper.Kill()
		<-s.reaperDone
	}
	s.logger.Info("postgres stopped and removed", "port", s.port)
	return nil
}

// StopImmediate stops the server the way a crash would (immediate mode: no
// shutdown checkpoint) and keeps its data, so Start recovers from the WAL.
func (s *Server) StopImmediate(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	if _, err := s.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", s.dataDir); err != nil {
		return err
	}
	s.running = false
	s.logger.Info("postgres stopped (immediate)", "port", s.port)
	return nil
}

// Restart stops the server (fast mode) and starts it again, keeping its data
// and port.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return errors.New("pgserver: server was stopped and its data removed")
	}
	if _, err := s.run(ctx, "pg_ctl", "restart", "-w", "-t", "60", "-m", "fast", "-D", s.dataDir, "-l", s.logPath); err != nil {
		return s.withLogTail(err)
	}
	s.running = true
	s.logger.Info("postgres restarted", "port", s.port)
	return nil
}

// Reload makes the server re-read its configuration (for settings changed
// with ALTER SYSTEM) and returns once new sessions see the new
// configuration. Sessions already open pick it up at their next command
// boundary, as PostgreSQL does.
func (s *Server) Reload(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: reload: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var before time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&before); err != nil {
		return fmt.Errorf("pgserver: reload: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_reload_conf()").Scan(new(bool)); err != nil {
		return fmt.Errorf("pgserver: reload: %w", err)
	}
	// pg_reload_conf only signals the postmaster. A backend forked after
	// the postmaster re-read its files inherits a later load time, so poll
	// fresh sessions until one shows it.
	for {
		after, err := s.confLoadTime(ctx)
		if err != nil {
			return fmt.Errorf("pgserver: reload: %w", err)
		}
		if after.After(before) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: reload: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Server) confLoadTime(ctx context.Context) (time.Time, error) {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var t time.Time
	err = conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&t)
	return t, err
}

// DSN returns a URL connection string for database dbname over loopback
// TCP, as the postgres superuser.
func (s *Server) DSN(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the loopback TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// SocketDir returns the directory holding the server's unix socket.
func (s *Server) SocketDir() string { return s.sockDir }

// DataDir returns the cluster's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// ArchiveDir is where the server archives its WAL files (with
// Options.Archive; empty otherwise).
func (s *Server) ArchiveDir() string { return filepath.Join(s.dir, "archive") }

// LogPath returns the file the server logs to.
func (s *Server) LogPath() string { return s.logPath }

// CreateDatabase creates an empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgserver: create database %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := CreateDatabaseOn(ctx, conn, name); err != nil {
		return "", err
	}
	return s.DSN(name), nil
}

// DropDatabase drops a database (see DropDatabaseOn). A database that does
// not exist is not an error.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: drop database %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return DropDatabaseOn(ctx, conn, name)
}

// CreateDatabaseOn creates an empty database through conn, a superuser
// session on another database of the same server.
func CreateDatabaseOn(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgserver: create database %q: %w", name, err)
	}
	return nil
}

// DropDatabaseOn drops database name through conn, a superuser session on
// another database of the same server. Replication slots on the database
// would make DROP DATABASE fail, so they are dropped first, after
// terminating the walsenders holding them; other sessions are disconnected
// by WITH (FORCE). A database that does not exist is not an error.
func DropDatabaseOn(ctx context.Context, conn *pgx.Conn, name string) error {
	if err := dropSlots(ctx, conn, name); err != nil {
		return fmt.Errorf("pgserver: drop replication slots of database %q: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgserver: drop database %q: %w", name, err)
	}
	return nil
}

// dropSlots drops every replication slot of database name. An active slot
// is released by terminating its walsender, which takes effect
// asynchronously, so it loops until none is left or ctx ends.
func dropSlots(ctx context.Context, conn *pgx.Conn, name string) error {
	type slot struct {
		name string
		pid  *int32
	}
	for {
		rows, err := conn.Query(ctx,
			"SELECT slot_name::text, active_pid FROM pg_replication_slots WHERE database = $1", name)
		if err != nil {
			return err
		}
		slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (slot, error) {
			var s slot
			err := r.Scan(&s.name, &s.pid)
			return s, err
		})
		if err != nil {
			return err
		}
		if len(slots) == 0 {
			return nil
		}
		for _, sl := range slots {
			if sl.pid != nil {
				_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", *sl.pid)
				continue
			}
			// Errors here are races (the slot became active or was
			// dropped meanwhile); the next round sees the outcome.
			_, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", sl.name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startReaper launches a shell, detached from our session and stdio, that
// polls until this process is gone and then stops the server and removes its
// directory. It exits by itself once Stop has removed the directory. It runs
// as the server's OS user, which pg_ctl requires and which owns the
// directory; it checks /proc rather than kill -0 because that user may not
// signal us.
func (s *Server) startReaper() error {
	const script = `while [ -d "/proc/$1" ] && [ -d "$2" ]; do sleep 1; done
if [ -d "$2" ]; then "$3" stop -m immediate -D "$4" >/dev/null 2>&1; rm -rf "$2"; fi`
	cmd := exec.Command("/bin/sh", "-c", script, "pgserver-reaper",
		strconv.Itoa(os.Getpid()), s.dir, filepath.Join(s.binDir, "pg_ctl"), s.dataDir)
	cmd.Dir = "/"
	// Stdio stays nil (/dev/null) so that `go test` does not wait on our
	// pipes; Setsid keeps a terminal's Ctrl-C from killing the reaper first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start reaper: %w", err)
	}
	s.reaper = cmd.Process
	s.reaperDone = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(s.reaperDone)
	}()
	return nil
}

// run executes one of the PostgreSQL binaries, as the postgres user when we
// are root, and returns its combined output.
func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, Tool(s.binDir, name), args...)
	cmd.Dir = s.dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		cmd.Env = append(cmd.Env, "HOME="+s.dir, "USER=postgres", "LOGNAME=postgres")
	}
	// pg_ctl start leaves postgres running with our pipes unless its output
	// is redirected; -l does that, and WaitDelay guards against the rest.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("pgserver: %s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// withLogTail appends the end of the server log to err, since pg_ctl's own
// message ("could not start server") rarely says why.
func (s *Server) withLogTail(err error) error {
	b, rerr := os.ReadFile(s.logPath)
	if rerr != nil || len(b) == 0 {
		return err
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return fmt.Errorf("%w\nserver log (%s):\n%s", err, s.logPath, strings.TrimSpace(string(b)))
}

// runAsCredential returns the postgres user's credential when we run as
// root, and nil otherwise.
func runAsCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root, and PostgreSQL refuses to run as root, but there is no \"postgres\" OS user to run it as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgserver: postgres gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: false}, nil
}

func chownTree(root string, uid, gid int) error {
	return filepath.Walk(root, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("pgserver: chown %s: %w", path, err)
		}
		return nil
	})
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before PostgreSQL binds it; that race is accepted for a test
// harness and surfaces as a start failure.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL binaries found (initdb, pg_ctl, postgres); install postgresql-15 or set TRELLIS_TEST_DSN")

// FindBinDir returns the directory holding initdb, pg_ctl and postgres:
// pg_ctl's directory on PATH (symlinks resolved) if initdb sits beside it,
// else the highest-versioned /usr/lib/postgresql/*/bin.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		for _, cand := range []string{p, resolve(p)} {
			if d := filepath.Dir(cand); hasBinaries(d) {
				return d, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		return versionOf(dirs[i]) > versionOf(dirs[j])
	})
	for _, d := range dirs {
		if hasBinaries(d) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

// Tool is the path of the PostgreSQL program name of the installation
// binDir belongs to: in binDir, else beside the program pg_ctl in binDir
// links to (a PATH directory may hold links to the server's binaries
// only, not to pg_basebackup or pg_dump).
func Tool(binDir, name string) string {
	p := filepath.Join(binDir, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if alt := filepath.Join(filepath.Dir(resolve(filepath.Join(binDir, "pg_ctl"))), name); alt != p {
		if _, err := os.Stat(alt); err == nil {
			return alt
		}
	}
	return p
}

func resolve(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return p
	}
	return r
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionOf extracts the major version from /usr/lib/postgresql/<v>/bin.
func versionOf(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

// sortedKeys are m's keys in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// quote renders a postgresql.conf string value.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
