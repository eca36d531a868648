package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pgbenchBin is the pgbench binary on PATH.
func pgbenchBin() (string, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		return "", fmt.Errorf("bench: pgbench is not on PATH (install postgresql-client): %w", err)
	}
	return bin, nil
}

// pgbenchInit loads pgbench's tables at scale into the database dsn names
// (`pgbench -i -s scale`: tables, data, vacuum, primary keys).
func pgbenchInit(ctx context.Context, dsn string, scale int) error {
	bin, err := pgbenchBin()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "-i", "-q", "-s", strconv.Itoa(scale), dsn)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: pgbench -i -s %d: %w: %s", scale, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pgbenchResult is what one pgbench run measured.
type pgbenchResult struct {
	// Transactions is pgbench's "number of transactions actually
	// processed".
	Transactions int64
	TPS          float64
	// LatencyAvg is pgbench's own average; the percentiles are computed
	// from its per-transaction log (-l).
	LatencyAvg time.Duration
	P50, P99   time.Duration
	Max        time.Duration
}

// pgbenchLoad is what a pgbench run runs: Clients clients on Threads
// threads, each running Script (a custom script's text) or, when it is
// empty, the built-in TPC-B-like script.
type pgbenchLoad struct {
	Clients, Threads int
	Script           string
}

// pgbenchRun runs load without vacuum (-n) for d (whole seconds, at least
// 1), logging every transaction, and parses the summary and the logs.
func pgbenchRun(ctx context.Context, dsn string, load pgbenchLoad, d time.Duration) (pgbenchResult, error) {
	clients, threads := load.Clients, load.Threads
	var r pgbenchResult
	bin, err := pgbenchBin()
	if err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "trellis-pgbench-")
	if err != nil {
		return r, fmt.Errorf("bench: pgbench log dir: %w", err)
	}
	defer os.RemoveAll(dir)
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	args := []string{"-n", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(secs), "-l", "--log-prefix", filepath.Join(dir, "txn")}
	if load.Script != "" {
		script := filepath.Join(dir, "script.sql")
		if err := os.WriteFile(script, []byte(load.Script), 0o644); err != nil {
			return r, fmt.Errorf("bench: pgbench script: %w", err)
		}
		args = append(args, "-f", script)
	}
	cmd := exec.CommandContext(ctx, bin, append(args, dsn)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("bench: pgbench -c %d -j %d -T %d: %w: %s", clients, threads, secs, err, strings.TrimSpace(out.String()))
	}
	if r, err = parsePgbenchSummary(out.String()); err != nil {
		return r, err
	}
	lat, err := readPgbenchLogs(dir)
	if err != nil {
		return r, err
	}
	if len(lat) == 0 {
		return r, fmt.Errorf("bench: pgbench logged no transaction:\n%s", out.String())
	}
	r.P50, r.P99, r.Max = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 1)
	return r, nil
}

var (
	pgbenchTxnsRE = regexp.MustCompile(`(?m)^number of transactions actually processed: (\d+)`)
	pgbenchTPSRE  = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbenchLatRE  = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
)

// parsePgbenchSummary reads pgbench's closing summary.
func parsePgbenchSummary(out string) (pgbenchResult, error) {
	var r pgbenchResult
	m1, m2, m3 := pgbenchTxnsRE.FindStringSubmatch(out), pgbenchTPSRE.FindStringSubmatch(out), pgbenchLatRE.FindStringSubmatch(out)
	if m1 == nil || m2 == nil || m3 == nil {
		return r, fmt.Errorf("bench: cannot read pgbench's summary:\n%s", out)
	}
	r.Transactions, _ = strconv.ParseInt(m1[1], 10, 64)
	r.TPS, _ = strconv.ParseFloat(m2[1], 64)
	ms, _ := strconv.ParseFloat(m3[1], 64)
	r.LatencyAvg = time.Duration(ms * float64(time.Millisecond))
	return r, nil
}

// readPgbenchLogs reads the per-transaction logs in dir (one file per
// thread: client_id transaction_no time_us script_no epoch epoch_us …)
// and returns every transaction's latency. Lines whose time is not a
// number (skipped or failed transactions) are left out.
func readPgbenchLogs(dir string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "txn*"))
	if err != nil {
		return nil, fmt.Errorf("bench: pgbench logs: %w", err)
	}
	var out []time.Duration
	for _, f := range files {
		lat, err := readPgbenchLog(f)
		if err != nil {
			return nil, err
		}
		out = append(out, lat...)
	}
	return out, nil
}

func readPgbenchLog(path string) ([]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: pgbench log: %w", err)
	}
	defer f.Close()
	var out []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue
		}
		us, err := strconv.ParseInt(fs[2], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: read pgbench log %s: %w", path, err)
	}
	return out, nil
}
