package scaletest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/clibuild"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// memLargeEnv sets the rows of TestMemoryBounded's large transaction:
// 500,000 by default (ADR 0029's figure), more for a wider margin over
// memSlack.
const memLargeEnv = "TRELLIS_TEST_MEM_LARGE_ROWS"

// memLarge is the rows of TestMemoryBounded's large transaction.
func memLarge(t *testing.T) int {
	v := os.Getenv(memLargeEnv)
	if v == "" {
		return 500_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= memSmall {
		t.Fatalf("%s=%q: want more rows than the small transaction's %d", memLargeEnv, v, memSmall)
	}
	return n
}

// The reduced scale of TestMemoryBounded: a transaction of memSmall rows,
// then one of memLarge, one row in memFailEvery failing a transform.
const (
	memSmall     = 100_000
	memFailEvery = 1_000
	// memSlack is how much more live heap the large transaction may
	// take than the small one. Keeping anything per row of the
	// transaction (the store's watch of a bisecting transform, as before
	// ADR 0029, kept ~100 bytes per key of each transform) adds about
	// 40 MiB at 500,000 rows. What is bounded by a constant rather than by
	// the transaction still varies between two samples of the peak: the
	// store's mirrors and watches fill up to their budget (131,072
	// entries, about 13 MiB) and are dropped past it, a trigger drain
	// holds up to BatchRows keys, batches are queued and chunks spilled at
	// the machine's pace. Up to 20.6 MiB more was seen at 300,000 rows on a
	// loaded machine (before a drain was bounded by BatchRows over the
	// whole ring rather than per partition), 11 MiB after.
	memSlack = 24 << 20
	// memPeakRSS is the bound of docs/architecture.md (§3.15a).
	memPeakRSS = 256 << 20
)

// TestMemoryBounded: the runner's memory does not grow with the size of a
// transaction on the fault path (ADR 0029), in both capture modes. One
// runner (a child process, as in production) maintains two tables, each
// read by a row transform, an aggregate and a transform whose expression
// divides by zero for one row in memFailEvery. A transaction inserts
// memSmall rows into the first: the failing transform bisects its
// batches, retries and holds keys until its fuse quarantines it while the
// transaction is still being recorded; then one inserts memLarge rows into
// the second, the same again; then the second is truncated (every stored
// identity re-derived). The runner's live heap (sampled after a forced
// collection) on the large transaction and the truncate may exceed its
// peak on the small one by memSlack only, and its resident memory stays
// under memPeakRSS.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	bin := buildRunner(t)
	for _, mode := range []string{trellis.CaptureLogical, trellis.CaptureTrigger} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testMemoryBounded(t, bin, mode)
		})
	}
}

func testMemoryBounded(t *testing.T, bin, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	run := func(q string) {
		t.Helper()
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var defs strings.Builder
	for _, s := range []string{"small", "large"} {
		run(fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, g int NOT NULL, v int NOT NULL, d int NOT NULL)`, s))
		fmt.Fprintf(&defs, `CREATE TRANSFORM %[1]s_rows AS SELECT id, g, v * 2 AS v2 FROM %[1]s;
			CREATE TRANSFORM %[1]s_agg AS SELECT g, count(*) AS n, sum(v) AS s FROM %[1]s GROUP BY g;
			CREATE TRANSFORM %[1]s_div AS SELECT id, 1000 / d AS r FROM %[1]s;
`, s)
	}
	tr, err := trellis.Open(ctx, trellis.Config{DSN: dsn, MaxConnections: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Apply(ctx, defs.String()); err != nil {
		t.Fatal(err)
	}
	// The walsender streams a transaction past 1 MB of decoded changes,
	// as it does past its default 64 MB at the sizes of the bench: a
	// transaction it does not stream is held whole until its commit, a
	// bound the server's setting sets (docs/architecture.md §3.15a).
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery += "&options=-c%20logical_decoding_work_mem%3D1MB"
	r := startRunner(t, bin, "run", "--dsn", u.String(), "--data-dir", t.TempDir(), "--capture", mode,
		"--quarantine-after", "5", "--log-level", "warn", "--progress-interval", "100ms")

	converge := func(when string, names ...string) {
		t.Helper()
		tok, err := tr.WatermarkToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.AwaitTransforms(ctx, tok, names...); err != nil {
			t.Fatalf("%s: %v\nrunner log:\n%s", when, err, r.log())
		}
	}
	quarantined := func(name string) {
		t.Helper()
		for {
			st, err := tr.Status(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if st[0].State == "quarantined" {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never quarantined (state %s, held %v)\nrunner log:\n%s", name, st[0].State, st[0].HeldKeys, r.log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	converge("built")
	insert := func(table string, rows int) int64 {
		t.Helper()
		r.resetPeak()
		run(fmt.Sprintf(`INSERT INTO %s SELECT i, i %% 1000, i %% 997, i %% %d FROM generate_series(1, %d) i`, table, memFailEvery, rows))
		converge("after the insert into "+table, table+"_rows", table+"_agg")
		quarantined(table + "_div")
		return r.peak()
	}
	small := insert("small", memSmall)
	large := insert("large", memLarge(t))
	r.resetPeak()
	run(`TRUNCATE large`)
	converge("after the truncate", "large_rows", "large_agg")
	truncated := r.peak()
	rss := r.peakRSS()
	t.Logf("%s: peak live heap %.1f MiB on %d rows, %.1f MiB on %d rows, %.1f MiB on a truncate of them; runner peak RSS %d MiB",
		mode, mib(small), memSmall, mib(large), memLarge(t), mib(truncated), rss>>20)
	for _, c := range []struct {
		what string
		peak int64
	}{{"the large transaction", large}, {"the truncate", truncated}} {
		if c.peak > small+memSlack {
			t.Errorf("%s: the runner's live heap grew to %.1f MiB on %s, against %.1f MiB on %d rows: more than %d MiB for %d rows more",
				mode, mib(c.peak), c.what, mib(small), memSmall, memSlack>>20, memLarge(t)-memSmall)
		}
	}
	if rss > memPeakRSS {
		t.Errorf("%s: the runner's peak resident memory was %d MiB, over %d MiB", mode, rss>>20, memPeakRSS>>20)
	}
	// The healthy transforms are exact.
	for _, q := range []string{
		`SELECT count(*) FROM ((SELECT id, g, v * 2 FROM small EXCEPT ALL SELECT id, g, v2 FROM small_rows) UNION ALL (SELECT id, g, v2 FROM small_rows EXCEPT ALL SELECT id, g, v * 2 FROM small)) x`,
		`SELECT count(*) FROM ((SELECT g, count(*), sum(v) FROM small GROUP BY g EXCEPT ALL SELECT g, n, s FROM small_agg) UNION ALL (SELECT g, n, s FROM small_agg EXCEPT ALL SELECT g, count(*), sum(v) FROM small GROUP BY g)) x`,
		`SELECT (SELECT count(*) FROM large_rows) + (SELECT count(*) FROM large_agg)`,
	} {
		var n int64
		if err := admin.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%s: %d rows differ: %s", mode, n, q)
		}
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// buildRunner builds the CLI the tests run as a child process, or returns
// make test's (TRELLIS_TEST_CLI).
func buildRunner(t *testing.T) string {
	t.Helper()
	bin, err := clibuild.Build(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("build the CLI: %v", err)
	}
	return bin
}

// memRunner is a `trellis-repl run` child process whose live heap is
// sampled: every 50 ms its profiler forces a collection and reports the
// heap that is left.
type memRunner struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	addr string

	mu      sync.Mutex
	maxHeap int64
	stop    chan struct{}
	done    chan struct{}
}

func startRunner(t *testing.T, bin string, args ...string) *memRunner {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := &memRunner{out: &lockedBuffer{}, addr: addr, stop: make(chan struct{}), done: make(chan struct{})}
	r.cmd = exec.Command(bin, append(args, "--metrics-addr", addr, "--pprof")...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	// The runner's defaults, not the test process's settings.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go r.sample()
	t.Cleanup(func() {
		close(r.stop)
		<-r.done
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		waited := make(chan error, 1)
		go func() { waited <- r.cmd.Wait() }()
		select {
		case <-waited:
		case <-time.After(30 * time.Second):
			_ = r.cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("runner log:\n%s", r.log())
		}
	})
	return r
}

// sample keeps the largest live heap seen since the last resetPeak.
func (r *memRunner) sample() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
		live, err := liveHeap("http://" + r.addr + "/debug/pprof/heap?gc=1&debug=1")
		if err != nil {
			continue // not serving yet
		}
		r.mu.Lock()
		r.maxHeap = max(r.maxHeap, live)
		r.mu.Unlock()
	}
}

func (r *memRunner) resetPeak() {
	r.mu.Lock()
	r.maxHeap = 0
	r.mu.Unlock()
}

func (r *memRunner) peak() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxHeap
}

// peakRSS is the runner's peak resident memory (VmHWM).
func (r *memRunner) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (r *memRunner) log() string { return r.out.String() }

// liveHeap reads HeapAlloc from a heap profile's text form taken right
// after a collection: the bytes of live objects.
func liveHeap(url string) (int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, io.ErrUnexpectedEOF
}

// lockedBuffer is a bytes.Buffer the child's output and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
