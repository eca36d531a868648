package bench

// The tpch scenario (issue 24): for each TPC-H query kept as a transform,
// the time one refresh round (RF1 + RF2, SF*1500 orders inserted and as
// many deleted, 0.1% of orders) takes to be reflected in the target,
// against REFRESH MATERIALIZED VIEW of the same query after the same
// round, measured in the same run. One database holds the data at
// --tpch-sf; one instance and one runner keep one query at a time, so
// that each query's apply has the runner to itself and its time is its
// own. After its rounds a query's target is compared with its query and
// the transform dropped; the next query is defined on the same data.
//
// The REFRESH is timed while the runner idles (every change applied), so
// neither competes with the other. ratio_to_baseline is the median
// REFRESH over the median change-to-converged time: how many times
// cheaper keeping the query is than recomputing it, per round of
// changes. Goals: 10× for every query, 100× for those that read one
// table (Q1 and Q6).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/tpch"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// ScenarioTPCH is the TPC-H refresh scenario.
const ScenarioTPCH = "tpch"

// tpchBenchSchema holds the TPC-H tables; the database's search_path
// names it, as the queries are unqualified.
const tpchBenchSchema = "tpch"

// TPCHConfig configures the tpch scenario.
type TPCHConfig struct {
	// SF is the TPC-H scale factor (default 0.1: 150,000 orders, about
	// 600,000 line items).
	SF float64
	// Queries are the query numbers kept, in order (default all 22).
	Queries []int
	// Rounds is how many refresh rounds are timed per query (default 2);
	// each round's writes are timed against one REFRESH.
	Rounds int
}

func (c *TPCHConfig) defaults() {
	if c.SF <= 0 {
		c.SF = 0.1
	}
	if len(c.Queries) == 0 {
		for _, q := range tpch.Queries() {
			c.Queries = append(c.Queries, q.Num)
		}
	}
	if c.Rounds <= 0 {
		c.Rounds = 2
	}
}

// check refuses query numbers TPC-H does not have.
func (c *TPCHConfig) check() error {
	for _, n := range c.Queries {
		if n < 1 || n > 22 {
			return fmt.Errorf("bench: --tpch-queries: TPC-H has queries 1 to 22, not %d", n)
		}
	}
	return nil
}

// tpchSingleTable are the queries that read one table, whose goal is 100×.
var tpchSingleTable = []int{1, 6}

// tpchGoals are the tpch scenario's goals, one per query.
func tpchGoals() []Goal {
	var out []Goal
	for _, q := range tpch.Queries() {
		g := Goal{Scenario: ScenarioTPCH, Point: tpchPoint(q.Num), Metric: "ratio_to_baseline", Want: 10, Text: "a round ≥ 10× faster than REFRESH"}
		if slices.Contains(tpchSingleTable, q.Num) {
			g.Want, g.Text = 100, "a round ≥ 100× faster than REFRESH (one table)"
		}
		out = append(out, g)
	}
	return out
}

func tpchPoint(num int) string { return fmt.Sprintf("q%d", num) }

// tpch runs the scenario's round: every configured query, each over its
// own refresh rounds.
func (s *suiteRun) tpch(ctx context.Context, round int) (err error) {
	cfg := s.cfg.TPCH
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	// Every later session of the database (the instance's pool and
	// appliers, this connection once reconnected) reads the TPC-H schema
	// first, as the unqualified queries need.
	if err := execAll(ctx, conn, "set the search_path", fmt.Sprintf(
		`DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET search_path = %s', current_database()); END $$`,
		pgx.Identifier{tpchBenchSchema}.Sanitize())); err != nil {
		return err
	}
	if err := conn.Close(ctx); err != nil {
		return fmt.Errorf("bench: reconnect: %w", err)
	}
	if conn, err = pgx.Connect(ctx, dsn); err != nil {
		return fmt.Errorf("bench: reconnect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if err := tpch.Load(ctx, conn, tpchBenchSchema, cfg.SF); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := execAll(ctx, conn, "vacuum", "VACUUM ANALYZE", "CHECKPOINT"); err != nil {
		return err
	}
	s.progressf("tpch round %d: loaded SF %g in %.1fs", round, cfg.SF, time.Since(start).Seconds())

	in, err := openInstance(ctx, s.ec, dsn, fmt.Sprintf("trellis_tpch_%d", round), trellis.CaptureLogical, nil, false)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.close()) }()
	queries := map[int]tpch.Query{}
	for _, q := range tpch.Queries() {
		queries[q.Num] = q
	}
	// The refresh rounds continue across queries: each round number
	// generates fresh keys, so RF1 never inserts an order twice.
	rf := (round - 1) * len(cfg.Queries) * cfg.Rounds
	for _, num := range cfg.Queries {
		q := queries[num]
		if err := s.tpchQuery(ctx, conn, in, round, q, &rf); err != nil {
			return fmt.Errorf("q%d: %w", num, err)
		}
	}
	return nil
}

// tpchQuery keeps q as a transform and as a materialized view, times its
// refresh rounds, compares the target with the query and drops both.
func (s *suiteRun) tpchQuery(ctx context.Context, conn *pgx.Conn, in *instance, round int, q tpch.Query, rf *int) error {
	cfg := s.cfg.TPCH
	name := tpchPoint(q.Num)
	mv := pgx.Identifier{tpchBenchSchema, "mv_" + name}
	if err := execAll(ctx, conn, "create the materialized view", "CREATE MATERIALIZED VIEW "+mv.Sanitize()+" AS "+q.SQL); err != nil {
		return err
	}
	start := time.Now()
	res, err := in.tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM %s AS %s", pgx.Identifier{name}.Sanitize(), q.SQL))
	if err != nil {
		return fmt.Errorf("bench: define: %w", err)
	}
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: build: %w", err)
	}
	build := time.Since(start)
	var changes, refreshes, applying []time.Duration
	var applies []float64
	for range cfg.Rounds {
		*rf++
		// The instance keeps this query alone: every apply transaction in
		// the round is its own or one of its levels'.
		before := applyByTransform(in.reg)
		if err := tpch.RF1(ctx, conn, tpchBenchSchema, *rf); err != nil {
			return fmt.Errorf("bench: RF1: %w", err)
		}
		if err := tpch.RF2(ctx, conn, tpchBenchSchema, *rf); err != nil {
			return fmt.Errorf("bench: RF2: %w", err)
		}
		written := time.Now()
		if err := in.run.converge(ctx, s.ec); err != nil {
			return fmt.Errorf("bench: converge after refresh round %d: %w", *rf, err)
		}
		changes = append(changes, time.Since(written))
		after := applyByTransform(in.reg)
		var secs float64
		var n uint64
		for tr, st := range after {
			secs += st.seconds - before[tr].seconds
			n += st.count - before[tr].count
		}
		applying = append(applying, time.Duration(secs*float64(time.Second)))
		applies = append(applies, float64(n))
		s.progressf("tpch %s round %d: applying by transform: %s", name, *rf, applyShares(before, after))
		start := time.Now()
		if err := execAll(ctx, conn, "refresh the materialized view", "REFRESH MATERIALIZED VIEW "+mv.Sanitize()); err != nil {
			return err
		}
		refreshes = append(refreshes, time.Since(start))
	}
	verdict, err := s.tpchVerify(ctx, conn, in, name, q.SQL)
	if err != nil {
		return err
	}
	notes := 0
	for _, r := range res {
		notes += len(r.Notes)
	}
	change, refresh, apply := percentile(changes, 0.5), percentile(refreshes, 0.5), percentile(applying, 0.5)
	slices.Sort(applies)
	pt := Point{Scenario: ScenarioTPCH, Point: name, Round: round, Metrics: map[string]float64{
		"sf": cfg.SF, "rounds": float64(cfg.Rounds), "build_seconds": build.Seconds(),
		"round_ms": ms(change), "round_max_ms": ms(percentile(changes, 1)), "refresh_ms": ms(refresh),
		"apply_ms": ms(apply), "applies": applies[len(applies)/2]},
		Labels: map[string]string{"verified": verdict, "query": q.Name}, Ratio: ratio(float64(refresh) / float64(change))}
	if apply > 0 {
		// A round that applied nothing (the refresh does not touch the
		// query's tables) has no work to compare.
		pt.Metrics["apply_ratio"] = float64(refresh) / float64(apply)
	}
	s.emit(pt)
	s.progressf("tpch round %d %-3s: build %.1fs; refresh round -> converged median %.0f ms (%.0f ms in %.0f apply transactions), REFRESH MATERIALIZED VIEW median %.0f ms (%.1f×)",
		round, name, build.Seconds(), ms(change), ms(apply), applies[len(applies)/2], ms(refresh), float64(refresh)/float64(change))
	if _, err := in.tr.Apply(ctx, "DROP TRANSFORM "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("bench: drop the transform: %w", err)
	}
	return execAll(ctx, conn, "drop the materialized view", "DROP MATERIALIZED VIEW "+mv.Sanitize())
}

// applyShares lists, largest first, each transform's apply time between
// two readings (the query's own and its levels').
func applyShares(before, after map[string]applyStats) string {
	type share struct {
		name string
		ms   float64
	}
	var shares []share
	for n, st := range after {
		if d := (st.seconds - before[n].seconds) * 1000; d > 0 {
			shares = append(shares, share{n, d})
		}
	}
	slices.SortFunc(shares, func(a, b share) int { return cmp.Compare(b.ms, a.ms) })
	var parts []string
	for _, sh := range shares {
		parts = append(parts, fmt.Sprintf("%s %.0f ms", sh.name, sh.ms))
	}
	return strings.Join(parts, ", ")
}

// tpchVerify compares the target of transform name with query; like
// verify, any verdict but "ok" is an error.
func (s *suiteRun) tpchVerify(ctx context.Context, conn *pgx.Conn, in *instance, name, query string) (string, error) {
	defs, err := in.tr.Definitions(ctx)
	if err != nil {
		return "", fmt.Errorf("bench: definitions: %w", err)
	}
	for _, d := range defs {
		if d.Name != name {
			continue
		}
		diff, err := selfcheck.Compare(ctx, conn, pgx.Identifier{d.Schema, d.Name}, d.Columns, query)
		if err != nil {
			return "", fmt.Errorf("bench: %s self-check: %w", name, err)
		}
		if !diff.Equal() {
			v := fmt.Sprintf("DIFFERS at convergence: %d missing %v, %d extra %v", diff.Missing, diff.MissingSample, diff.Extra, diff.ExtraSample)
			return v, fmt.Errorf("bench: target %s differs from its query: %s", name, v)
		}
		return "ok", nil
	}
	return "", fmt.Errorf("bench: transform %s is not in the catalog", name)
}
