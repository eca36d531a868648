package bench

// A trellis-repl runner as a subprocess (the many scenario): what the
// primary and the machine pay for a runner is measured on its own
// process (/proc/<pid>) and its own connections, apart from the bench's.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// manyRunner is a `trellis-repl run` subprocess.
type manyRunner struct {
	cmd *exec.Cmd
	// done receives Wait's error once the process exits.
	done chan error
	// exited is closed when the process has exited.
	exited chan struct{}
	// logPath is the file its stderr (the log) goes to.
	logPath string
	// metricsURL is its /metrics.
	metricsURL string
}

// startManyRunner starts `bin run` on dsn with its data in dir, its log in
// dir/runner.log and /metrics on a free local port; extra are further
// flags. Every other setting is run's default.
func startManyRunner(bin, dsn, dir string, extra ...string) (*manyRunner, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "runner.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("bench: runner log: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"run", "--dsn", dsn, "--data-dir", filepath.Join(dir, "data"), "--metrics-addr", addr}, extra...)
	// Not CommandContext: a cancelled bench stops the runner with SIGTERM
	// in stop, as an operator would, rather than SIGKILL.
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The runner reads TRELLIS_* variables for flags not given: the
	// bench's environment must not change its defaults.
	cmd.Env = withoutTrellisEnv(os.Environ())
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s run: %w", bin, err)
	}
	r := &manyRunner{cmd: cmd, done: make(chan error, 1), exited: make(chan struct{}), logPath: logPath,
		metricsURL: "http://" + addr + "/metrics"}
	go func() {
		err := cmd.Wait()
		close(r.exited)
		r.done <- err
	}()
	return r, nil
}

// withoutTrellisEnv is env without the TRELLIS_ variables.
func withoutTrellisEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "TRELLIS_") {
			out = append(out, e)
		}
	}
	return out
}

// freePort is a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pid is the runner's process id.
func (r *manyRunner) pid() int { return r.cmd.Process.Pid }

// cause is why the runner exited on its own (with its log's tail), or
// nil while it runs.
func (r *manyRunner) cause() error {
	select {
	case <-r.exited:
		return fmt.Errorf("bench: the runner exited on its own; its log ends:\n%s", r.logTail())
	default:
		return nil
	}
}

// stop ends the runner as an operator does (SIGTERM, then SIGKILL after
// 30 s) and returns its error, with its log's tail, if it did not exit
// cleanly.
func (r *manyRunner) stop() error {
	select {
	case <-r.exited:
		err := <-r.done
		r.done <- err // stop may be called again
		if err != nil {
			return fmt.Errorf("bench: the runner exited: %w; its log ends:\n%s", err, r.logTail())
		}
		return nil
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		err = errors.Join(errors.New("did not stop within 30s of SIGTERM"), <-r.done)
	}
	r.done <- err
	if err != nil {
		return fmt.Errorf("bench: stop the runner: %w; its log ends:\n%s", err, r.logTail())
	}
	return nil
}

// logTail is the last lines of the runner's log.
func (r *manyRunner) logTail() string {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// peakRSS is a process's peak resident set size (VmHWM) in bytes.
func peakRSS(pid int) (int64, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n * 1024, err == nil
			}
		}
	}
	return 0, false
}

// withAppName returns dsn (a URL or keyword/value string) with
// application_name set to name.
func withAppName(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("bench: parse DSN: %w", err)
		}
		q := u.Query()
		q.Set("application_name", name)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	out := strings.TrimSpace(dsn) + " application_name='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(name) + "'"
	if _, err := pgconn.ParseConfig(out); err != nil {
		return "", fmt.Errorf("bench: derive DSN: %w", err)
	}
	return out, nil
}

// cliRun runs `bin args…` to completion and returns its wall time and
// standard output; a non-zero exit is an error carrying its stderr.
func cliRun(ctx context.Context, bin string, args ...string) (time.Duration, []byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = withoutTrellisEnv(os.Environ())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return took, out.Bytes(), fmt.Errorf("bench: trellis-repl %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return took, out.Bytes(), nil
}

// watchTimes runs `bin status --watch=interval` (its output a pipe, so it
// prints one frame after another) until it has printed frames frames, and
// returns the time from its start until the first frame began and each
// later frame's refresh time (the gap between frame starts less the
// interval: the status read and the render).
func watchTimes(ctx context.Context, bin string, interval time.Duration, frames int, args ...string) (time.Duration, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"status", "--watch=" + interval.String()}, args...)...)
	cmd.Env = withoutTrellisEnv(os.Environ())
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, fmt.Errorf("bench: status --watch: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("bench: status --watch: %w", err)
	}
	var heads []time.Time
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() && len(heads) < frames {
		line := sc.Text()
		if strings.HasPrefix(line, "--- ") {
			heads = append(heads, time.Now())
		}
		if strings.Contains(line, "(retrying)") {
			cancel()
			_ = cmd.Wait()
			return 0, nil, fmt.Errorf("bench: status --watch: %s", line)
		}
	}
	cancel()
	_ = cmd.Wait()
	if len(heads) < frames {
		return 0, nil, fmt.Errorf("bench: status --watch printed %d frames, want %d: %s", len(heads), frames, strings.TrimSpace(errb.String()))
	}
	var refresh []time.Duration
	for i := 1; i < len(heads); i++ {
		refresh = append(refresh, max(heads[i].Sub(heads[i-1])-interval, 0))
	}
	return heads[0].Sub(start), refresh, nil
}
