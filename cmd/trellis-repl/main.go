// Command trellis-repl keeps derived tables inside PostgreSQL equal to SQL
// queries. It is a thin layer over the trellis package:
//
//	trellis-repl apply  --dsn URL (-f FILE | -e SQL) [--target-schema NAME]
//	trellis-repl migrate --dsn URL [--schema NAME]
//	trellis-repl backfill --dsn URL TABLE
//	trellis-repl dump   --dsn URL [--append-to FILE]
//	trellis-repl run    --dsn URL [--data-dir DIR] [--capture auto|logical|trigger]
//	                    [--confirm local|applied] [--metrics-addr HOST:PORT]
//	                    [--on-disruption pause|repair]
//	trellis-repl status --dsn URL [--json | --check [--max-lag D] | --watch[=INTERVAL]] [NAME...]
//	trellis-repl definitions --dsn URL [--json] [NAME...]
//	trellis-repl await  --dsn URL [--timeout D] [NAME...]
//	trellis-repl doctor --dsn URL [--json]
//	trellis-repl held   --dsn URL [--since TIME] [--json] | TRANSFORM [--limit N] [--after CURSOR]
//	trellis-repl release --dsn URL TRANSFORM TABLE KEY... | --all TRANSFORM
//	trellis-repl quarantine --dsn URL [--json] [TRANSFORM]
//	trellis-repl self-check --dsn URL [--wait] [--strict] [--repair] [--json] TRANSFORM | --job ID
//	trellis-repl version
//
// --dsn defaults to TRELLIS_DATABASE_URL, then the libpq PG* variables;
// every other flag can be set as TRELLIS_<FLAG> (flags.go). Exit codes: 0
// ok, 1 failed, 2 bad usage, 3 behind or unhealthy (status --check, await).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/redact"
)

const usage = `usage:
  trellis-repl apply  --dsn URL (-f FILE | -e SQL) [--schema NAME] [--target-schema NAME]
  trellis-repl run    --dsn URL [--data-dir DIR] [--capture auto|logical|trigger] [--target-schema NAME]
                      [--confirm local|applied] [--metrics-addr HOST:PORT] [--schema NAME]
                      [--max-retained-wal SIZE] [--publication NAME] [--quarantine-after N]
                      [--self-check-every D] [--self-check-sample FRACTION]
                      [--on-disruption pause|repair]
  trellis-repl migrate --dsn URL [--schema NAME] [--target-schema NAME]   install or upgrade the catalog only
  trellis-repl backfill --dsn URL TABLE       re-derive every transform reading TABLE (after a load capture missed)
  trellis-repl dump --dsn URL [--append-to FILE]   definitions as a script apply -f replays; or append a
                      restore section to a pg_dump --schema-only FILE
  trellis-repl status --dsn URL [--json | --check [--max-lag D] | --watch[=INTERVAL]] [--schema NAME] [NAME...]
  trellis-repl definitions --dsn URL [--json] [NAME...]        each definition with its sources and state
  trellis-repl await  --dsn URL [--timeout D] [NAME...]       wait until every write so far is in the targets
  trellis-repl doctor --dsn URL [--json] [--schema NAME]
  trellis-repl held   --dsn URL [--json] [--since TIME]      keys held in quarantine, every transform's
  trellis-repl held   --dsn URL [--json] [--limit N] [--after CURSOR] TRANSFORM
  trellis-repl release --dsn URL TRANSFORM TABLE KEY...      re-derive one held key (a value per key column)
  trellis-repl release --dsn URL --all TRANSFORM
  trellis-repl quarantine --dsn URL [--json] [TRANSFORM]     quarantined transforms, or one's state
  trellis-repl self-check --dsn URL [--wait] [--strict] [--repair] [--timeout D] [--json] TRANSFORM
                      compare a target with a fresh run of its query (a job; exit 3 when it differs)
  trellis-repl self-check --dsn URL [--wait] [--json] --job ID   read (or wait for) a self-check job
  trellis-repl bench  [--quick] [--dsn URL] [--scenarios LIST] [--json-out FILE] [--markdown FILE] [--plot DIR]
                      benchmark suite (see docs/performance.md; bench --help for the size flags)
  trellis-repl version
'trellis-repl CMD --help' prints a command's flags. --dsn defaults to TRELLIS_DATABASE_URL, then
the libpq PG* variables; every other flag can be set as TRELLIS_<FLAG> (--max-lag: TRELLIS_MAX_LAG).
Exit codes: 0 ok, 1 failed, 2 bad usage, 3 behind or unhealthy (status --check, await).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runWithContext(ctx, args, stdout, stderr)
}

// runWithContext runs one command until it finishes or ctx ends and
// returns the exit code: 0 ok, 1 failed (code and sentence on stderr),
// 2 bad usage, 3 behind or unhealthy (status --check, await).
func runWithContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "validation: no command given; use apply, migrate, backfill, run, status, definitions, await, doctor, held, release, quarantine, bench or version")
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	// No password reaches stderr, in logs or errors.
	mask := maskerFor(args[1:])
	var err error
	switch args[0] {
	case "apply":
		err = cmdApply(ctx, args[1:], stdout)
	case "migrate":
		err = cmdMigrate(ctx, args[1:], stdout)
	case "backfill":
		err = cmdBackfill(ctx, args[1:], stdout)
	case "dump":
		err = cmdDump(ctx, args[1:], stdout)
	case "run":
		err = cmdRun(ctx, args[1:], stderr, mask)
	case "status":
		err = cmdStatus(ctx, args[1:], stdout)
	case "definitions":
		err = cmdDefinitions(ctx, args[1:], stdout)
	case "await":
		err = cmdAwait(ctx, args[1:], stdout)
	case "version", "--version":
		err = cmdVersion(args[1:], stdout)
	case "doctor":
		err = cmdDoctor(ctx, args[1:], stdout)
	case "held":
		err = cmdHeld(ctx, args[1:], stdout)
	case "release":
		err = cmdRelease(ctx, args[1:], stdout)
	case "quarantine":
		err = cmdQuarantine(ctx, args[1:], stdout)
	case "self-check":
		err = cmdSelfCheck(ctx, args[1:], stdout)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "validation: unknown command %q; run 'trellis-repl --help' for usage\n", args[0])
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	var help helpRequested
	if errors.As(err, &help) {
		fmt.Fprint(stdout, help.text)
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "validation: %s; run 'trellis-repl %s --help' for usage\n", mask.String(ue.msg), args[0])
		return exitUsage
	}
	code := exitFailed
	var ew exitWith
	if errors.As(err, &ew) {
		code = ew.code
		if ew.err == nil {
			return code
		}
		err = ew.err
	}
	var te *trellis.Error
	if errors.As(err, &te) {
		fmt.Fprintf(stderr, "%s: %s\n", te.Code, mask.String(oneLine(te.Msg)))
	} else {
		fmt.Fprintf(stderr, "internal: %s\n", mask.String(oneLine(err.Error())))
	}
	return code
}

// oneLine keeps an error on one line so scripts can read the last line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// flagsFirst moves flags given after positional arguments before them
// (`held NAME --limit 4`), as the flag package stops at the first
// positional one; everything after "--" stays positional.
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !(ok && b.IsBoolFlag()) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), pos...)
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type common struct {
	dsn    string
	schema string
}

// targetSchemaFlag registers --target-schema (Config.TargetSchema).
func targetSchemaFlag(fs *flag.FlagSet) *string {
	return fs.String("target-schema", "", "schema a transform named without one is created and looked up in (default: the connection's current schema)")
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.dsn, "dsn", "", "PostgreSQL connection string (default TRELLIS_DATABASE_URL, then PG* variables)")
	fs.StringVar(&c.schema, "schema", "trellis", "instance schema holding trellis-repl's catalog")
}

func cmdApply(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	var c common
	c.register(fs)
	target := targetSchemaFlag(fs)
	file := fs.String("f", "", "file with definition statements (- for standard input)")
	expr := fs.String("e", "", "definition statements")
	if err := parse(fs, args); err != nil {
		return err
	}
	if (*file == "") == (*expr == "") || fs.NArg() > 0 {
		return usageError{"apply needs exactly one of -f FILE or -e SQL"}
	}
	script := *expr
	if *file != "" {
		var b []byte
		var err error
		if *file == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(*file)
		}
		if err != nil {
			return &trellis.Error{Code: trellis.CodeNotFound, Msg: fmt.Sprintf("cannot read %s: %v", *file, err)}
		}
		script = string(b)
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, TargetSchema: *target})
	if err != nil {
		return err
	}
	defer t.Close()
	res, err := t.Apply(ctx, script)
	if err != nil {
		return err
	}
	printResults(stdout, res)
	return nil
}

// printResults prints what each statement did, with its notes.
func printResults(stdout io.Writer, res []trellis.Result) {
	for _, r := range res {
		fmt.Fprintf(stdout, "%s %s: %s\n", r.Statement, r.Name, r.Action)
		for _, n := range r.Notes {
			fmt.Fprintf(stdout, "  note: %s\n", n)
		}
	}
}

// cmdMigrate installs or upgrades the instance's catalog and nothing
// else (trellis.Migrate), for deployments whose services open with
// Config.NoInstall.
func cmdMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	var c common
	c.register(fs)
	target := targetSchemaFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"migrate takes no arguments"}
	}
	if err := trellis.Migrate(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, TargetSchema: *target}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "catalog of instance %s is current\n", c.schema)
	return nil
}

// cmdBackfill requests a backfill of a table (REQUEST BACKFILL OF).
func cmdBackfill(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("backfill", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"backfill takes one table: backfill [schema.]table"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, NoInstall: true})
	if err != nil {
		return err
	}
	defer t.Close()
	r, err := t.RequestBackfill(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	printResults(stdout, []trellis.Result{r})
	return nil
}

// cmdDump prints the definitions as a script `apply -f` replays, or
// appends to a pg_dump --schema-only file the section that restores the
// instance with it (trellis.Dump, trellis.RestoreSQL). It only reads.
func cmdDump(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	var c common
	c.register(fs)
	appendTo := fs.String("append-to", "", "append the restore section to this pg_dump --schema-only file instead of printing the script")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"dump takes no arguments"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, ReadOnly: true, MaxConnections: 1})
	if err != nil {
		return err
	}
	defer t.Close()
	if *appendTo == "" {
		script, err := t.Dump(ctx)
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, script)
		return err
	}
	section, err := t.RestoreSQL(ctx)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*appendTo, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return &trellis.Error{Code: trellis.CodeNotFound, Msg: fmt.Sprintf("cannot append to %s: %v; give the file pg_dump --schema-only wrote", *appendTo, err)}
	}
	if _, err := io.WriteString(f, section); err != nil {
		f.Close()
		return &trellis.Error{Code: trellis.CodeUnavailable, Msg: fmt.Sprintf("append to %s: %v", *appendTo, err)}
	}
	if err := f.Close(); err != nil {
		return &trellis.Error{Code: trellis.CodeUnavailable, Msg: fmt.Sprintf("append to %s: %v", *appendTo, err)}
	}
	fmt.Fprintf(stdout, "appended the restore section of instance %s to %s\n", c.schema, *appendTo)
	return nil
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer, mask *redact.Masker) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var c common
	c.register(fs)
	target := targetSchemaFlag(fs)
	dataDir := fs.String("data-dir", "", "local checkpoint store directory")
	capture := fs.String("capture", trellis.CaptureAuto, "capture mode: auto, logical or trigger")
	confirm := fs.String("confirm", trellis.ConfirmLocal, "confirm mode: local or applied")
	onDisruption := fs.String("on-disruption", trellis.OnDisruptionPause, "when continuity is lost (a slot or store lost, a failover, a point-in-time restore, a copy of the database): pause each affected transform until RESUME TRANSFORM (or RESUME TRANSFORM ALL), or repair: rebuild each in place at once (docs/operations.md)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics on HOST:PORT (/metrics)")
	perTransform := fs.Bool("metrics-per-transform", true, "export each transform's series on /metrics (about 47 each); false: only the instance's totals (docs/metrics.md)")
	var logs logFlags
	logs.register(fs)
	publication := fs.String("publication", "", "read this publication, created and managed by the source tables' owner (never altered); default: the instance's own <schema>_pub")
	maxRetained := fs.String("max-retained-wal", "", "warn above this much WAL retained by the slot (e.g. 10GB); with --capture auto, switch to triggers")
	quarantineAfter := fs.Int("quarantine-after", 5, "quarantine a transform once it holds this many keys whose re-derive fails on row data")
	batchSize := fs.Int("batch-size", 10000, "most keys re-derived in one apply transaction")
	coalesce := fs.Duration("coalesce-window", trellis.DefaultCoalesceWindow, "latency budget of a live transform's batches: at most one batch per window while the backlog is under --coalesce-keys (0s: none)")
	coalesceKeys := fs.Int("coalesce-keys", 1000, "a backlog this large (or one that fills --batch-size) is taken at once, without waiting for the window")
	syncEvery := fs.Duration("store-sync-interval", trellis.DefaultStoreSyncInterval, "fsync the local store's recorded changes at most this often (0s: every group commit); bounds how far the slot's confirmed position trails")
	triggerPoll := fs.Duration("trigger-poll-interval", trellis.DefaultTriggerPollInterval, "trigger capture: how long the drain waits after a drain that moved rows (longer: fewer drain transactions on a busy primary, that much more latency)")
	progressEvery := fs.Duration("progress-interval", time.Second, "how often an idle transform records its applied position (what status and self-check wait for)")
	maxConns := fs.Int("max-connections", trellis.DefaultMaxConnections, "every connection the runner opens, whatever the number of transforms: 1 lock, 1 capture, a control pool, and applier sessions the transforms share (at least 4)")
	poolSize := fs.Int("pool-size", 0, "the control pool's share of --max-connections (catalog, status, capture control; 0: a quarter of what lock and capture leave, 1 to 4)")
	selfChecks := selfCheckRunFlags(fs)
	pprofOn := fs.Bool("pprof", false, "also serve Go's profiler at /debug/pprof/ on --metrics-addr (for tuning; see docs/tuning.md)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var maxRetainedBytes int64
	if *maxRetained != "" {
		n, err := parseSize(*maxRetained)
		if err != nil {
			return usageError{"--max-retained-wal: " + err.Error()}
		}
		maxRetainedBytes = n
	}
	if fs.NArg() > 0 {
		return usageError{"run takes no arguments"}
	}
	log, err := logs.logger(stderr, mask)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	m := trellis.NewMetrics(reg)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--coalesce-window", *coalesce}, {"--store-sync-interval", *syncEvery}, {"--progress-interval", *progressEvery}} {
		if d.v < 0 {
			return usageError{d.name + " must not be negative"}
		}
	}
	if *batchSize < 1 || *coalesceKeys < 1 || *poolSize < 0 || *triggerPoll <= 0 {
		return usageError{"--batch-size and --coalesce-keys must be at least 1, --pool-size at least 0, --trigger-poll-interval more than 0s"}
	}
	if *maxConns < trellis.MinRunnerConnections {
		return usageError{fmt.Sprintf("--max-connections must be at least %d (1 lock session, 1 capture, 1 control, 1 applier session)", trellis.MinRunnerConnections)}
	}
	cfg := trellis.Config{DSN: c.dsn, Schema: c.schema, TargetSchema: *target, DataDir: *dataDir, Capture: *capture,
		Confirm: *confirm, Logger: log, Metrics: m, MaxRetainedWAL: maxRetainedBytes, Publication: *publication, QuarantineAfter: *quarantineAfter,
		BatchSize: *batchSize, CoalesceWindow: orNone(*coalesce), CoalesceKeys: *coalesceKeys, StoreSyncInterval: orNone(*syncEvery),
		ProgressInterval: *progressEvery, MaxConnections: *maxConns, PoolSize: *poolSize, TriggerPollInterval: *triggerPoll,
		InstanceMetricsOnly: !*perTransform, OnDisruption: *onDisruption}
	if err := selfChecks.apply(&cfg); err != nil {
		return err
	}
	t, err := openRunner(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer t.Close()
	if *metricsAddr != "" {
		stop, err := serve(*metricsAddr, newMux(reg, t, *pprofOn), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("trellis-repl running", "schema", t.Schema(), "capture", *capture, "confirm", *confirm, "on_disruption", *onDisruption)
	return t.Run(ctx)
}

// orNone maps a flag's 0 ("none") to Config's negative duration (0 there
// means the default).
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// openRunner opens the instance for run. A server that is starting up or
// shutting down, that has no connection slot free (SQLSTATE 53300), or
// that dropped the connection is waited for with backoff, logged once: a
// runner started beside a restarting or crowded primary comes up when it
// can rather than exiting. Anything else (a wrong address or password, a
// missing database) fails at once.
func openRunner(ctx context.Context, cfg trellis.Config, log *slog.Logger) (*trellis.Trellis, error) {
	backoff := 100 * time.Millisecond
	warned := false
	for {
		t, err := trellis.Open(ctx, cfg)
		if err == nil || !fault.TransientConnect(err) || ctx.Err() != nil {
			if err == nil && warned {
				log.Info("connected to PostgreSQL")
			}
			return t, err
		}
		if !warned {
			log.Warn("PostgreSQL is not accepting the runner yet; retrying", "err", err, "retry_in", backoff)
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// cmdDoctor prints each capture check, the mode --capture=auto would pick
// and why, and what to change to get logical replication.
func cmdDoctor(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	var c common
	c.register(fs)
	asJSON := fs.Bool("json", false, "print a JSON object")
	maxConns := fs.Int("max-connections", trellis.DefaultMaxConnections, "the runner's connection budget to compare with the server's max_connections")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"doctor takes no arguments"}
	}
	if *maxConns < trellis.MinRunnerConnections {
		return usageError{fmt.Sprintf("--max-connections must be at least %d", trellis.MinRunnerConnections)}
	}
	r, err := trellis.Doctor(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, MaxConnections: *maxConns})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tFOUND")
	for _, f := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Check, f.Result, oneLine(f.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Privileges) > 0 {
		fmt.Fprintln(stdout, "\nPrivileges on the source tables:")
		for _, f := range r.Privileges {
			fmt.Fprintf(stdout, "  %s: %s (%s)\n", f.Check, f.Result, f.Detail)
			if f.Fix != "" {
				fmt.Fprintf(stdout, "    fix: %s\n", f.Fix)
			}
		}
	}
	fmt.Fprintf(stdout, "\nConnections: %s (%s)\n", r.Connections.Result, r.Connections.Detail)
	if r.Connections.Fix != "" {
		fmt.Fprintf(stdout, "  fix: %s\n", r.Connections.Fix)
	}
	fmt.Fprintf(stdout, "\n--capture=auto would use: %s (%s)\n", r.AutoMode, r.Reason)
	if len(r.ToGetLogical) > 0 {
		fmt.Fprintln(stdout, "\nTo get logical replication:")
		for _, f := range r.ToGetLogical {
			fmt.Fprintf(stdout, "  - %s\n", f)
		}
	}
	return nil
}

// parseSize reads a size as PostgreSQL writes them: a number with an
// optional unit B, kB, MB, GB or TB (case does not matter; 1kB = 1024 B).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a size; write it like 10GB or 512MB", s)
	}
	var n int64
	if _, err := fmt.Sscan(t[:i], &n); err != nil {
		return 0, fmt.Errorf("%q is not a size; write it like 10GB or 512MB", s)
	}
	mult := map[string]int64{"": 1, "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
	m, ok := mult[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok || n <= 0 {
		return 0, fmt.Errorf("%q is not a size; write it like 10GB or 512MB (units B, kB, MB, GB, TB)", s)
	}
	return n * m, nil
}
