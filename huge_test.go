package trellis_test

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// hugeRows is the size of the huge transactions: TRELLIS_HUGE_ROWS, or
// 100,000 (5,000,000 is the figure in docs/architecture.md §3.15).
func hugeRows(t *testing.T) int {
	if s := os.Getenv("TRELLIS_HUGE_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("TRELLIS_HUGE_ROWS=%q: %v", s, err)
		}
		return n
	}
	return 100_000
}

// peakRSS is the peak resident memory of process pid (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read the runner's memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// TestHugeTransactions: one transaction inserting N rows, one updating all
// of them, one deleting them, an aborted transaction of N rows and a
// transaction whose big subtransaction rolled back are captured and
// applied with the runner's resident memory bounded (≤ 256 MiB), streamed
// (protocol 2, a small logical_decoding_work_mem) and spilled to the
// store; the aborted rows leave nothing behind.
func TestHugeTransactions(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testHugeTransactions)
}

func testHugeTransactions(t *testing.T, mode string) {
	bin := buildCLI(t)
	n := hugeRows(t)
	e := newEnv(t, trellis.Config{Capture: mode})
	e.exec(schemaSQL)
	e.apply(`CREATE TRANSFORM big_orders AS SELECT o.id, o.customer, upper(o.status) AS status, o.amount * o.qty AS total FROM orders o WHERE o.amount > 10;
		CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n, sum(amount) AS revenue FROM orders GROUP BY customer`)
	// The walsender streams a transaction past 1 MB of decoded changes.
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	// %20, not the '+' url.Values writes: libpq's URI rules.
	u.RawQuery += "&options=-c%20logical_decoding_work_mem%3D1MB"
	args := []string{"run", "--dsn", u.String(), "--data-dir", t.TempDir(), "--log-level", "warn"}
	if mode == trellis.CaptureTrigger {
		args = append(args, "--capture", "trigger")
	}
	r := startCLI(t, bin, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner output:\n%s", r.out)
		}
	})
	e.converge("empty")
	// Catch-up of N keys per transaction: allow a millisecond a key.
	settle := func(when string) {
		t.Helper()
		e.awaitWithin(when, max(convergeTimeout, time.Duration(n)*time.Millisecond))
	}
	start := time.Now()
	e.exec(fmt.Sprintf(`INSERT INTO orders SELECT g, g %% 100, 'new', g %% 50, g %% 4, NULL FROM generate_series(1, %d) g`, n))
	settle("after the huge insert")
	e.converge("after the huge insert")
	e.exec(`UPDATE orders SET amount = amount + 1, status = 'paid'`)
	settle("after the huge update")
	e.converge("after the huge update")
	e.exec(fmt.Sprintf(`BEGIN; INSERT INTO orders SELECT g, 1, 'x', 99, 1, NULL FROM generate_series(%d, %d) g; ROLLBACK`, n+1, 2*n))
	e.exec(fmt.Sprintf(`BEGIN; INSERT INTO orders VALUES (%d, 1, 'kept', 20, 1, NULL); SAVEPOINT s;
		INSERT INTO orders SELECT g, 2, 'x', 99, 1, NULL FROM generate_series(%d, %d) g; ROLLBACK TO s; COMMIT`, 3*n, n+1, 2*n))
	settle("after the aborted transactions")
	e.converge("after the aborted transactions")
	e.exec(`DELETE FROM orders`)
	settle("after the huge delete")
	e.converge("after the huge delete")
	peak := peakRSS(t, r.cmd.Process.Pid)
	t.Logf("%s: %d rows inserted, updated and deleted in one transaction each, in %s; runner peak RSS %d MiB", mode, n, time.Since(start).Round(time.Second), peak>>20)
	if peak > 256<<20 {
		t.Fatalf("the runner's peak resident memory was %d MiB, over 256 MiB", peak>>20)
	}
	r.kill()
	if strings.Contains(r.out.String(), "panic") {
		t.Fatalf("runner panicked:\n%s", r.out)
	}
}
