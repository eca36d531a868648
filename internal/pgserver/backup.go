package pgserver

// Backups of a throwaway server, for tests of what happens when the
// primary itself changes (ADR 0039): a streaming standby made with
// pg_basebackup -R and promoted, and a point-in-time restore of a base
// backup from the primary's WAL archive.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// BackupOptions configures Backup.
type BackupOptions struct {
	// Standby makes the copy a streaming standby of the server
	// (pg_basebackup -R: standby.signal and primary_conninfo).
	Standby bool
	// ReapOnExit is as Options.ReapOnExit.
	ReapOnExit bool
}

// Backup takes a base backup of s with pg_basebackup (its WAL streamed
// alongside, a fast checkpoint) into a new temporary directory, and returns
// it as a server of its own, not started: its own port and socket, and
// archiving into its own ArchiveDir. Start it as it is (a copy of s at the
// backup's end), as a standby (Standby), or after Recover (a point-in-time
// restore from s's archive). The caller must Stop it.
func (s *Server) Backup(ctx context.Context, o BackupOptions) (*Server, error) {
	dir, err := os.MkdirTemp(os.TempDir(), "pgserver-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: create temp dir: %w", err)
	}
	b := &Server{binDir: s.binDir, dir: dir, dataDir: filepath.Join(dir, "data"), sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"), cred: s.cred, logger: s.logger}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for _, d := range []string{b.sockDir, b.ArchiveDir()} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fail(fmt.Errorf("pgserver: create %s: %w", d, err))
		}
	}
	if s.cred != nil {
		if err := chownTree(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fail(err)
		}
	}
	args := []string{"-D", b.dataDir, "-d", s.DSN("postgres"), "-X", "stream", "-c", "fast", "--no-sync"}
	if o.Standby {
		args = append(args, "-R")
	}
	if _, err := b.run(ctx, "pg_basebackup", args...); err != nil {
		return fail(err)
	}
	if b.port, err = freePort(); err != nil {
		return fail(err)
	}
	// The copied postgresql.conf says where s listens and archives: the
	// copy's own settings come after, and win.
	if err := b.appendConf(map[string]string{
		"port": fmt.Sprint(b.port), "unix_socket_directories": quote(b.sockDir),
		"archive_command": quote("cp %p " + b.ArchiveDir() + "/%f"),
	}); err != nil {
		return fail(err)
	}
	if o.ReapOnExit {
		if err := b.startReaper(); err != nil {
			return fail(err)
		}
	}
	return b, nil
}

// Recover makes a backup (not started) a point-in-time restore: at its
// next Start it replays WAL from archive (a directory of WAL files, such
// as the primary's ArchiveDir) up to and including targetLSN, then
// promotes itself to a new timeline. AwaitPrimary waits for that.
func (s *Server) Recover(archive, targetLSN string) error {
	if err := s.appendConf(map[string]string{
		"restore_command":        quote("cp " + archive + "/%f %p"),
		"recovery_target_lsn":    quote(targetLSN),
		"recovery_target_action": quote("promote"),
	}); err != nil {
		return err
	}
	return s.writeOwned(filepath.Join(s.dataDir, "recovery.signal"), nil, os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
}

// Promote ends a standby's recovery (pg_ctl promote): it becomes a primary
// on a new timeline. It returns once the server accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	if _, err := s.run(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", s.dataDir); err != nil {
		return s.withLogTail(err)
	}
	return s.AwaitPrimary(ctx)
}

// AwaitPrimary waits until the server is out of recovery (a promotion
// done, or a point-in-time restore promoted at its target).
func (s *Server) AwaitPrimary(ctx context.Context) error {
	for {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			var rec bool
			err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&rec)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil && !rec {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return s.withLogTail(fmt.Errorf("pgserver: wait for the server to leave recovery: %w", ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// appendConf appends settings to postgresql.conf (later lines win).
func (s *Server) appendConf(settings map[string]string) error {
	var b strings.Builder
	b.WriteString("\n# pgserver settings of this copy\n")
	for _, k := range sortedKeys(settings) {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	return s.writeOwned(filepath.Join(s.dataDir, "postgresql.conf"), []byte(b.String()), os.O_APPEND|os.O_WRONLY)
}

// writeOwned writes data to path (opened with flag), owned by the
// server's OS user.
func (s *Server) writeOwned(path string, data []byte, flag int) error {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return fmt.Errorf("pgserver: open %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pgserver: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pgserver: write %s: %w", path, err)
	}
	if s.cred != nil {
		if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: chown %s: %w", path, err)
		}
	}
	return nil
}
