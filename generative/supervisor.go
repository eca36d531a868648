package generative

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// supervisor keeps one runner going, as a service manager would: it
// restarts a runner that exits on its own (e.g. when PostgreSQL restarts),
// and stops or crashes it on request.
type supervisor struct {
	r *run

	mu       sync.Mutex
	want     bool
	cur      *instance
	loopDone chan struct{}
	panic    string
}

// instance is one runner: an in-process Run or a CLI child process.
type instance struct {
	done chan struct{}
	err  error
	halt func(graceful bool) // returns once the runner has exited
}

func newSupervisor(r *run) *supervisor { return &supervisor{r: r} }

func (s *supervisor) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.want {
		return
	}
	s.want = true
	s.loopDone = make(chan struct{})
	go s.loop(s.loopDone)
}

// ensureRunning starts the runner if no step did (a shrunk program may
// have lost its start step).
func (s *supervisor) ensureRunning() { s.start() }

func (s *supervisor) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil
}

func (s *supervisor) loop(done chan struct{}) {
	defer close(done)
	for {
		s.mu.Lock()
		if !s.want {
			s.mu.Unlock()
			return
		}
		inst := s.launch()
		s.cur = inst
		s.mu.Unlock()
		<-inst.done
		s.mu.Lock()
		want := s.want
		s.cur = nil
		s.mu.Unlock()
		if !want {
			return
		}
		s.r.logf("runner exited on its own: %v; restarting it", inst.err)
		s.r.mu.Lock()
		restarts := s.r.restarts
		s.r.mu.Unlock()
		if restarts == 0 {
			s.r.note("runner exited on its own: %v", inst.err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// stop stops the runner, gracefully or abruptly, and reports whether it
// was running.
func (s *supervisor) stop(graceful bool) bool {
	s.mu.Lock()
	if !s.want {
		s.mu.Unlock()
		return false
	}
	s.want = false
	inst, done := s.cur, s.loopDone
	s.mu.Unlock()
	if inst != nil {
		inst.halt(graceful)
	}
	<-done
	return true
}

// panicked returns the output of a runner that panicked, "" if none did.
func (s *supervisor) panicked() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.panic
}

// launch starts one runner; called with s.mu held.
func (s *supervisor) launch() *instance {
	r := s.r
	if r.p.Config.Runner == RunnerCLI && r.env.CLI != "" {
		return s.launchCLI()
	}
	ctx, cancel := context.WithCancel(context.Background())
	inst := &instance{done: make(chan struct{})}
	inst.halt = func(bool) {
		cancel()
		<-inst.done
	}
	cfg := trellis.Config{
		DSN: r.dsn, DataDir: r.dataDir, Confirm: r.p.Config.Confirm, BatchSize: r.p.Config.Batch, Capture: r.captureMode(),
		ProgressInterval: 100 * time.Millisecond,
		// Short latency budgets: the coalescing window and the deferred,
		// staged store sync still run (ADR 0016), with more batches, more
		// interleavings and less waiting per check than the defaults.
		CoalesceWindow:    5 * time.Millisecond,
		StoreSyncInterval: 5 * time.Millisecond,
		// The fuse is not what programs check: they poison fewer keys than
		// the CLI's default fuse allows (poison.go), and a planted bug that
		// holds too many should show as the wrong keys held.
		QuarantineAfter: 1000,
		Logger:          slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	go func() {
		defer close(inst.done)
		var tr *trellis.Trellis
		for {
			var err error
			tr, err = trellis.Open(ctx, cfg)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				inst.err = err
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		inst.err = tr.Run(ctx)
		tr.Close()
	}()
	return inst
}

func (s *supervisor) launchCLI() *instance {
	r := s.r
	inst := &instance{done: make(chan struct{})}
	out := &capture{log: r.log}
	cmd := exec.Command(r.env.CLI, "run", "--dsn", r.dsn, "--data-dir", r.dataDir, "--confirm", r.p.Config.Confirm,
		"--capture", r.captureMode(), "--log-level", "info")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		inst.err = err
		close(inst.done)
		inst.halt = func(bool) {}
		return inst
	}
	go func() {
		inst.err = cmd.Wait()
		if p := out.panicText(); p != "" {
			s.mu.Lock()
			if s.panic == "" {
				s.panic = p
			}
			s.mu.Unlock()
		}
		close(inst.done)
	}()
	inst.halt = func(graceful bool) {
		if graceful {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-inst.done:
				return
			case <-time.After(30 * time.Second):
				r.logf("runner did not stop within 30s of SIGTERM; killing it")
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-inst.done
	}
	return inst
}

// capture copies a child's output into the run log and keeps it whole to
// look for a panic.
type capture struct {
	log *logBuffer
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.buf.Len() < 8<<20 {
		c.buf.Write(p)
	}
	c.mu.Unlock()
	return c.log.Write(p)
}

func (c *capture) panicText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	for _, marker := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
		if i := strings.Index(s, marker); i >= 0 {
			end := min(len(s), i+3000)
			return fmt.Sprintf("runner output:\n%s", s[i:end])
		}
	}
	return ""
}
