package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/trellistest"
)

// TestService compiles the service, runs it against a throwaway database,
// writes through it, reads the derived table and the metrics it serves,
// and stops it with SIGTERM: it must exit 0, having shut down in order.
func TestService(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "embedded")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dsn := trellistest.Postgres(t)
	addr := freeAddr(t)
	var logs syncBuffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TRELLIS_DATABASE_URL="+dsn, "ADDR="+addr, "DATA_DIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	base := "http://" + addr
	eventually(t, &logs, "the service ready", func() bool { return get(base+"/readyz") == "ready\n" })
	for i, c := range []struct{ customer, amount int }{{1, 10}, {1, 5}, {2, 7}} {
		resp, err := http.Post(fmt.Sprintf("%s/orders?id=%d&customer=%d&amount=%d", base, i+1, c.customer, c.amount), "", nil)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST /orders: %v %v\n%s", resp, err, logs.String())
		}
		resp.Body.Close()
	}
	want := `[{"customer":1,"orders":2,"amount":"15.00"},{"customer":2,"orders":1,"amount":"7.00"}]`
	eventually(t, &logs, "the derived table", func() bool { return compactJSON(get(base+"/totals")) == want })
	if m := get(base + "/metrics"); !strings.Contains(m, `trellis_transform_state`) || !strings.Contains(m, `customer_totals`) {
		t.Fatalf("/metrics lacks the transform's series:\n%s", m)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("still running 2 minutes after SIGTERM\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Fatalf("no clean stop in the log:\n%s", logs.String())
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// get is the body of a GET ("" on any failure).
func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

// eventually polls ok for up to two minutes.
func eventually(t *testing.T, logs *syncBuffer, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 2 minutes\n%s", what, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is the service's output, written by exec's copying
// goroutine while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
