package trellis_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/internal/tpch"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// TPC-H end to end: the 22 queries defined as transforms over a TPC-H data
// set (SF 0.01), built, then kept through the spec's refresh functions and
// an update of every table, each target compared with its query as
// written.

const (
	tpchSchema = "tpch"
	tpchSF     = 0.01
	tpchRounds = 2
	// tpchBuildLimit bounds the builds: a guard against a hang, not a
	// timing (they take seconds on a quiet machine).
	tpchBuildLimit = 5 * time.Minute
)

// tpchUnsupported are the obstacles outside what the engine maintains:
// a query with any of them must be refused at define. None: every query
// is kept as written (top-K since ADR 0033).
var tpchUnsupported = []string{}

// tpchExpectRefused are queries inside the supported obstacles that are
// still refused: none.
var tpchExpectRefused = map[int]bool{}

// tpchWithoutLimit is q with its outer LIMIT removed (the spec puts it on
// the last line) and that LIMIT's row count.
func tpchWithoutLimit(q tpch.Query) (tpch.Query, int64, bool) {
	if !q.Has(tpch.ObstacleLimit) {
		return q, 0, false
	}
	sql := strings.TrimRight(q.SQL, " \n;")
	i := strings.LastIndex(sql, "\n")
	last := strings.ToLower(strings.TrimSpace(sql[i+1:]))
	n, err := strconv.ParseInt(strings.TrimPrefix(last, "limit "), 10, 64)
	if i < 0 || !strings.HasPrefix(last, "limit ") || err != nil {
		return q, 0, false
	}
	q.SQL = sql[:i]
	q.Obstacles = slices.DeleteFunc(slices.Clone(q.Obstacles), func(o string) bool { return o == tpch.ObstacleLimit })
	return q, n, true
}

// tpchLimitCuts reports whether a LIMIT of limit rows leaves rows of the
// query without it (nl) out on the loaded data. Only then does nl kept as
// a transform of its own (qN_all) compare rows the top-K target does not:
// when the whole result fits the LIMIT, qN already holds and compares
// every row of it.
func tpchLimitCuts(ctx context.Context, t *testing.T, conn *pgx.Conn, nl tpch.Query, limit int64) bool {
	t.Helper()
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM ("+nl.SQL+"\n) AS q").Scan(&n); err != nil {
		t.Fatalf("q%d without its LIMIT: count its rows: %v", nl.Num, err)
	}
	if n <= limit {
		t.Logf("q%d: its %d rows fit its LIMIT %d, so q%d compares the whole result; no q%d_all", nl.Num, n, limit, nl.Num, nl.Num)
	}
	return n > limit
}

// tpchCase is one query's record through the test.
type tpchCase struct {
	q        tpch.Query
	name     string
	inSubset bool // no unsupported obstacle
	accepted bool
	refusal  string // the error of a refused definition
	notes    []string
	columns  []string // the target's visible columns
	built    time.Duration
	failed   string   // a build or apply failure (paused by the system)
	rows     []int64  // target rows after the build and after each round
	sums     []string // md5 of the target's sorted rows, at the same checks
	results  []string // "ok" or the differences, after the build and each round
}

func (c *tpchCase) live() bool { return c.accepted && c.failed == "" }

// tpchApply applies one definition, turning a panic into a recorded error
// so that a crash in the parser or planner is reported, not fatal.
func tpchApply(ctx context.Context, tr *trellis.Trellis, script string) (res []trellis.Result, crash string, err error) {
	defer func() {
		if r := recover(); r != nil {
			crash = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	res, err = tr.Apply(ctx, script)
	return res, "", err
}

// TestTPCH keeps the queries in both capture modes, each run by a
// `trellis-repl run` child process that is killed with SIGKILL and
// restarted on the same data directory once while the builds run and
// twice in every round (see tpchRound), then converged and compared.
func TestTPCH(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	eachModeParallel(t, func(t *testing.T, mode string) { tpchRun(t, bin, mode) })
}

// tpchRun is TestTPCH in one capture mode: trigger capture on a server
// with wal_level=replica (as newEnv gives it), where the runner's
// --capture auto must choose triggers.
func tpchRun(t *testing.T, bin, mode string) {
	ctx := context.Background()
	began := time.Now()
	var dsn string
	if mode == trellis.CaptureTrigger {
		dsn = pgtest.NewDatabaseOn(t, replicaServer(t))
	} else {
		dsn = pgtest.NewDatabase(t)
	}

	// The queries are unqualified: every session of this database gets the
	// TPC-H schema as its search_path, so the user's connection, the
	// pool's Apply (which resolves names and places targets by
	// current_schema()) and the appliers (which pin the definition's
	// search_path) all read the same tables.
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET search_path = %s', current_database()); END $$`,
		pgx.Identifier{tpchSchema}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	loadStart := time.Now()
	if err := tpch.Load(ctx, conn, tpchSchema, tpchSF); err != nil {
		t.Fatal(err)
	}
	loadTime := time.Since(loadStart)
	var cur *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&cur); err != nil || cur == nil || *cur != tpchSchema {
		t.Fatalf("current_schema() = %v (err %v), want %s: the database-level search_path did not apply", cur, err, tpchSchema)
	}

	cfg := trellis.Config{DSN: dsn, DataDir: t.TempDir(), ProgressInterval: 100 * time.Millisecond, CallTimeout: convergeTimeout}
	if os.Getenv("TRELLIS_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e := &env{t: t, dsn: dsn, conn: conn, cfg: cfg}
	e.open()

	// Define every query, one script each, so that a refusal rolls back
	// only its own statement.
	var cases []*tpchCase
	var queries []tpch.Query
	var names []string
	for _, q := range tpch.Queries() {
		queries, names = append(queries, q), append(names, fmt.Sprintf("q%d", q.Num))
		if nl, limit, ok := tpchWithoutLimit(q); ok && tpchLimitCuts(ctx, t, conn, nl, limit) {
			// Without its LIMIT, the whole ordered result is kept too.
			queries, names = append(queries, nl), append(names, fmt.Sprintf("q%d_all", q.Num))
		}
	}
	for i, q := range queries {
		c := &tpchCase{q: q, name: names[i], inSubset: !slices.ContainsFunc(tpchUnsupported, q.Has)}
		cases = append(cases, c)
		res, crash, err := tpchApply(ctx, e.tr, "CREATE TRANSFORM "+c.name+" AS "+q.SQL)
		switch {
		case crash != "":
			c.refusal = crash
			t.Errorf("%s: defining it crashed: %s", c.name, crash)
		case err != nil:
			c.refusal = err.Error()
			if code := trellis.CodeOf(err); code != trellis.CodeValidation {
				t.Errorf("%s: refused with code %s, want a validation error: %v", c.name, code, err)
			}
			if c.inSubset && !tpchExpectRefused[q.Num] {
				t.Errorf("%s: has no unsupported obstacle (%v) but was refused: %v", c.name, q.Obstacles, err)
			}
		default:
			c.accepted = true
			for _, r := range res {
				c.notes = append(c.notes, r.Notes...)
			}
			if !c.inSubset {
				t.Logf("%s: accepted although it has obstacles %v; it must build and stay exact like the others", c.name, q.Obstacles)
			}
			if tpchExpectRefused[q.Num] {
				t.Logf("%s: accepted although it was expected to be refused; it must build and stay exact like the others", c.name)
			}
		}
	}
	// A refused definition leaves nothing behind.
	for _, c := range cases {
		if c.accepted {
			continue
		}
		var gone bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, tpchSchema+"."+c.name).Scan(&gone); err != nil {
			t.Fatal(err)
		}
		if !gone {
			t.Errorf("%s: refused, but its target table exists", c.name)
		}
	}
	defs, err := e.tr.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, d := range defs {
			if d.Name == c.name {
				c.columns = d.Columns
				if d.Schema != tpchSchema {
					t.Errorf("%s: target in schema %s, want %s", c.name, d.Schema, tpchSchema)
				}
			}
		}
		if c.accepted && c.columns == nil {
			t.Errorf("%s: accepted but not in the catalog", c.name)
			c.failed = "not in the catalog"
		}
	}

	// Build: record when each transform goes live; one the system pauses
	// failed to build, and is dropped so that the others go on. The
	// runner is killed once while some are live and others still build.
	var (
		buildTime time.Duration
		rounds    []tpchRoundTimes
	)
	defer func() { tpchSummary(t, cases, loadTime, buildTime, rounds, began) }()
	k := &tpchKiller{t: t, bin: bin, args: []string{"run", "--dsn", dsn, "--data-dir", t.TempDir()}}
	defer k.stop()
	runStart := time.Now()
	k.start()
	tpchAwaitBuilt(t, e, cases, runStart, func(waiting []string) {
		k.kill("during the build", func() string { return fmt.Sprintf("%d still building: %v", len(waiting), waiting) })
		k.start()
	})
	buildTime = time.Since(runStart)
	tpchCaptureIs(t, e, mode)
	tpchCheckAll(t, e, cases, "build")

	for round := 1; round <= tpchRounds; round++ {
		rounds = append(rounds, tpchRound(t, e, k, cases, round))
	}
}

// tpchRound is one round: the refresh functions, an update of every table
// and the predicate touches, with the runner killed at rest before RF1
// (the kill between rounds: RF1 is written while it is down) and again
// while it applies RF1 and RF2 (UpdateAll is written while it is down);
// each restart catches up while the next step writes. Then every target
// is converged and compared.
func tpchRound(t *testing.T, e *env, k *tpchKiller, cases []*tpchCase, round int) tpchRoundTimes {
	ctx := context.Background()
	var rt tpchRoundTimes
	start := time.Now()
	step := func(name string, fn func(context.Context, tpch.DB, string, int) error) {
		if err := fn(ctx, e.conn, tpchSchema, round); err != nil {
			t.Fatalf("round %d %s: %v", round, name, err)
		}
	}
	k.kill(fmt.Sprintf("round %d: at rest, before RF1", round), nil)
	step("RF1", tpch.RF1)
	k.start()
	step("RF2", tpch.RF2)
	tok, err := e.tr.WatermarkToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(rand.Intn(300)) * time.Millisecond)
	k.kill(fmt.Sprintf("round %d: after RF2", round), func() string { return tpchBehind(e, tok) })
	step("UpdateAll", tpch.UpdateAll)
	k.start()
	step("touch predicates", tpchTouchPredicates)
	rt.write = time.Since(start)
	start = time.Now()
	tpchConverge(t, e, fmt.Sprintf("round %d", round))
	rt.converge = time.Since(start)
	start = time.Now()
	tpchCheckAll(t, e, cases, fmt.Sprintf("round %d", round))
	rt.compare = time.Since(start)
	return rt
}

// tpchKiller is the test's `trellis-repl run` child process, killed with
// SIGKILL and restarted on the same data directory.
type tpchKiller struct {
	t       *testing.T
	bin     string
	args    []string
	r       *runner   // the live runner, nil while it is down
	runners []*runner // every runner started, for the panic check
}

func (k *tpchKiller) start() {
	k.r = startCLI(k.t, k.bin, k.args...)
	k.runners = append(k.runners, k.r)
}

// kill SIGKILLs the runner and logs where, with what state (when given)
// says it left behind, read once the kill has settled.
func (k *tpchKiller) kill(where string, state func() string) {
	k.r.kill()
	k.r = nil
	msg := "killed " + where
	if state != nil {
		msg += ": " + state()
	}
	k.t.Log(msg)
}

// stop kills the last runner and fails the test if any runner panicked.
func (k *tpchKiller) stop() {
	if k.r != nil {
		k.r.kill()
	}
	for _, r := range k.runners {
		if strings.Contains(r.out.String(), "panic") {
			k.t.Errorf("runner panicked:\n%s", r.out)
		}
	}
}

// tpchBehind says whether the transforms had applied everything up to
// tok when the runner died: with no runner, a short wait only reads the
// catalog's progress (a timeout names those behind).
func tpchBehind(e *env, tok trellis.Token) string {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.tr.AwaitConverged(ctx, tok); err != nil {
		return "mid-apply (" + tpchOneLine(err.Error(), 200) + ")"
	}
	return "every transform had applied RF1 and RF2"
}

// tpchCaptureIs fails the test unless every transform is captured in
// mode: the runner's --capture auto chose it.
func tpchCaptureIs(t *testing.T, e *env, mode string) {
	t.Helper()
	st, err := e.tr.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.CaptureMode == nil || *s.CaptureMode != mode {
			t.Fatalf("%s: capture mode %v, want %s", s.Name, s.CaptureMode, mode)
		}
	}
}

// tpchRoundTimes is how long a round's writes, convergence and
// comparisons took.
type tpchRoundTimes struct{ write, converge, compare time.Duration }

// tpchSummary logs one line per query and the timings. Every line has
// every cell (tabwriter aligns a column only over consecutive lines that
// have it); the definition's outcome, the longest cell, comes last.
func tpchSummary(t *testing.T, cases []*tpchCase, loadTime, buildTime time.Duration, rounds []tpchRoundTimes, began time.Time) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	hdr := "query\tobstacles\tbuilt after\trows build"
	for r := 1; r <= tpchRounds; r++ {
		hdr += fmt.Sprintf(",r%d", r)
	}
	hdr += "\tafter build"
	for r := 1; r <= tpchRounds; r++ {
		hdr += fmt.Sprintf("\tround %d", r)
	}
	fmt.Fprintln(tw, hdr+"\tdefinition")
	for _, c := range cases {
		obst := strings.Join(c.q.Obstacles, ",")
		if obst == "" {
			obst = "-"
		}
		built, rows := "-", "-"
		results := make([]string, 1+tpchRounds)
		for i := range results {
			results[i] = "-"
			if i < len(c.results) {
				results[i] = c.results[i]
			}
		}
		def := "REFUSED: " + tpchOneLine(c.refusal, 130)
		if c.accepted {
			def = "accepted"
			for _, n := range c.notes {
				if strings.HasPrefix(n, "ORDER BY dropped") {
					def += ", ORDER BY dropped (noted)"
				} else {
					def += "; note: " + n
				}
			}
			if c.failed != "" {
				def += "; FAILED: " + tpchOneLine(c.failed, 130)
			} else if c.built > 0 {
				built = c.built.Round(time.Millisecond).String()
			}
			r := make([]string, len(c.rows))
			for i, n := range c.rows {
				r[i] = fmt.Sprint(n)
			}
			rows = strings.Join(r, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.name, obst, built, rows, strings.Join(results, "\t"), def)
	}
	tw.Flush()
	fmt.Fprintf(&b, "load SF %g: %v; all built: %v", tpchSF, loadTime.Round(time.Millisecond), buildTime.Round(time.Millisecond))
	for i, rt := range rounds {
		fmt.Fprintf(&b, "; round %d: write %v, converge %v, compare %v", i+1,
			rt.write.Round(time.Millisecond), rt.converge.Round(time.Millisecond), rt.compare.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "; total %v", time.Since(began).Round(time.Millisecond))
	fmt.Fprintf(&b, "\n(a round's \"changed\": the target's rows differ from the previous check, so the refreshes reached it)")
	t.Logf("TPC-H summary:\n%s", b.String())
	for _, c := range cases {
		if !c.accepted {
			t.Logf("%s refused: %s", c.name, c.refusal)
		}
	}
}

// tpchAwaitBuilt waits until every accepted transform is live, recording
// the time from start; a transform the system pauses is recorded as failed
// and dropped. midBuild is called once, the first time some transforms
// are live while others (waiting) still build.
func tpchAwaitBuilt(t *testing.T, e *env, cases []*tpchCase, start time.Time, midBuild func(waiting []string)) {
	t.Helper()
	ctx := context.Background()
	byName := map[string]*tpchCase{}
	for _, c := range cases {
		if c.live() {
			byName[c.name] = c
		}
	}
	deadline := start.Add(tpchBuildLimit)
	for {
		st, err := e.tr.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waiting := []string{}
		for _, s := range st {
			c := byName[s.Name]
			if c == nil || c.built > 0 {
				continue
			}
			switch {
			case s.State == "live":
				c.built = time.Since(start)
			case s.State == "paused":
				c.failed = "paused"
				if s.CaptureFailure != nil {
					c.failed = s.CaptureFailure.Kind + ": " + s.CaptureFailure.Error
				}
				t.Errorf("%s: accepted but failed to build: %s", c.name, c.failed)
				if _, err := e.tr.Apply(ctx, "DROP TRANSFORM "+c.name); err != nil {
					t.Fatalf("drop %s after its failed build: %v", c.name, err)
				}
				delete(byName, c.name)
			default:
				waiting = append(waiting, s.Name+" "+s.State)
			}
		}
		if len(waiting) == 0 {
			break
		}
		if midBuild != nil && slices.ContainsFunc(cases, func(c *tpchCase) bool { return c.built > 0 }) {
			midBuild(waiting)
			midBuild = nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("builds not finished after %s: %v", tpchBuildLimit, waiting)
		}
		time.Sleep(25 * time.Millisecond)
	}
	tpchConverge(t, e, "build")
}

// tpchConverge waits until every transform applied every write so far.
func tpchConverge(t *testing.T, e *env, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	tok, err := e.tr.WatermarkToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.tr.AwaitConverged(ctx, tok); err != nil {
		t.Fatalf("%s: transforms did not converge: %v", when, err)
	}
}

// tpchCheckAll compares every live target with its query: the TPC-H text
// as written (the oracle; ORDER BY inside the compared subquery changes no
// multiset) and, as a second opinion, the engine's own CompareNow over its
// deparsed query. A difference fails the test after every target was
// checked.
func tpchCheckAll(t *testing.T, e *env, cases []*tpchCase, when string) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		if !c.live() {
			continue
		}
		diff, err := selfcheck.Compare(ctx, e.conn, pgx.Identifier{tpchSchema, c.name}, c.columns, c.q.SQL)
		if err != nil {
			t.Fatalf("%s: compare %s: %v", when, c.name, err)
		}
		r, err := e.tr.CompareNow(ctx, c.name)
		if err != nil {
			t.Fatalf("%s: CompareNow %s: %v", when, c.name, err)
		}
		c.rows = append(c.rows, r.Rows)
		sum := tpchFingerprint(t, e, c)
		res := "ok"
		if n := len(c.sums); n > 0 {
			if c.sums[n-1] == sum {
				res += " (same)"
			} else {
				res += " (changed)"
			}
		}
		c.sums = append(c.sums, sum)
		if !diff.Equal() {
			res = fmt.Sprintf("DIFF missing %d extra %d", diff.Missing, diff.Extra)
			t.Errorf("%s: %s differs from its query (target columns %v)\n  missing from the target (%d): %v\n  extra in the target (%d): %v",
				when, c.name, c.columns, diff.Missing, diff.MissingSample, diff.Extra, diff.ExtraSample)
		}
		if !r.Equal() {
			res += fmt.Sprintf(" (self-check missing %d extra %d)", r.Missing, r.Extra)
			t.Errorf("%s: %s differs from the engine's own query: missing %d %v extra %d %v",
				when, c.name, r.Missing, r.MissingSample, r.Extra, r.ExtraSample)
		}
		c.results = append(c.results, res)
	}
}

// tpchFingerprint is an md5 of the target's visible rows in text order:
// equal fingerprints at two checks mean the rounds between left it alone.
func tpchFingerprint(t *testing.T, e *env, c *tpchCase) string {
	t.Helper()
	cols := make([]string, len(c.columns))
	for i, col := range c.columns {
		cols[i] = pgx.Identifier{col}.Sanitize()
	}
	var sum string
	sql := fmt.Sprintf(`SELECT md5(coalesce(string_agg(r, E'\n' ORDER BY r), '')) FROM (SELECT (%s)::text AS r FROM %s) s`,
		"ROW("+strings.Join(cols, ", ")+")", pgx.Identifier{tpchSchema, c.name}.Sanitize())
	if err := e.conn.QueryRow(context.Background(), sql).Scan(&sum); err != nil {
		t.Fatalf("fingerprint %s: %v", c.name, err)
	}
	return sum
}

// tpchOneLine squeezes an error onto one line of at most n bytes.
func tpchOneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// tpchTouchPredicates moves rows into and out of the predicates of the
// queries the refresh functions leave alone at this size (Q7's nations,
// Q8's part type, Q12's ship modes, Q19's brands and containers), so every
// maintained query changes in every round.
func tpchTouchPredicates(ctx context.Context, db tpch.DB, schema string, round int) error {
	_, err := db.Exec(ctx, fmt.Sprintf(`
		UPDATE supplier SET s_nationkey = CASE WHEN s_nationkey = 6 THEN 7 ELSE 6 END WHERE s_suppkey %% 17 = %[1]d;
		UPDATE customer SET c_nationkey = CASE WHEN c_nationkey = 7 THEN 6 ELSE 7 END WHERE c_custkey %% 97 = %[1]d;
		UPDATE part SET p_type = CASE WHEN p_type = 'ECONOMY ANODIZED STEEL' THEN 'PROMO ANODIZED STEEL' ELSE 'ECONOMY ANODIZED STEEL' END
			WHERE p_partkey %% 41 = %[1]d;
		UPDATE lineitem SET l_shipmode = CASE WHEN l_shipmode = 'MAIL' THEN 'SHIP' ELSE 'MAIL' END WHERE l_orderkey %% 61 = %[1]d;
		UPDATE part SET p_brand = 'Brand#12', p_container = 'SM CASE', p_size = 3 WHERE p_partkey %% 37 = %[1]d;
		UPDATE lineitem SET l_quantity = 5, l_shipmode = 'AIR', l_shipinstruct = 'DELIVER IN PERSON' WHERE l_partkey %% 37 = %[1]d`,
		round%17))
	return err
}
