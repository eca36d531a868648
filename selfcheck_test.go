package trellis_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	trellis "github.com/trellis-repl/trellis-repl"
)

// selfCheckShape is one transform of TestSelfCheck: its definition and
// the hand edits of its target that make exactly one divergence of each
// kind.
type selfCheckShape struct {
	name, def string
	corrupt   string
	// want are the divergences corrupt makes, as short renders them.
	want []string
}

var selfCheckShapes = []selfCheckShape{
	{
		name: "sc_row", // one source, its key not selected: identity __k_id
		def:  `CREATE TRANSFORM sc_row AS SELECT customer, upper(status) AS status, amount * 2 AS amt FROM orders WHERE amount > 3`,
		corrupt: `UPDATE sc_row SET amt = -1 WHERE __k_id = 5; DELETE FROM sc_row WHERE __k_id = 7;
			INSERT INTO sc_row (customer, status, amt, __k_id) VALUES (99, 'X', 1, 1000)`,
		want: []string{"cell [5] amt: -1 -> 10.00", "extra_row [1000] (99,X,1,1000)", "missing_row [7] (2,NEW,14.00,7)"},
	},
	{
		name: "sc_agg", // GROUP BY: identity customer
		def:  `CREATE TRANSFORM sc_agg AS SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer`,
		corrupt: `UPDATE sc_agg SET total = -1 WHERE customer = 1; DELETE FROM sc_agg WHERE customer = 2;
			INSERT INTO sc_agg (customer, n, total, __rows) VALUES (99, 1, 1, 1)`,
		want: []string{"cell [1] total: -1 -> 126.00", "extra_row [99] (99,1,1)", "missing_row [2] (2,7,133.00)"},
	},
	{
		name: "sc_join", // a join: identity the lineage of both sources
		def:  `CREATE TRANSFORM sc_join AS SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer`,
		corrupt: `UPDATE sc_join SET name = 'zz' WHERE id = 5; DELETE FROM sc_join WHERE id = 7;
			INSERT INTO sc_join (id, name, amount, __s0_0, __s1_0) VALUES (1000, 'x', 1, 1000, 1)`,
		want: []string{"cell [5,6] name: zz -> c6", "extra_row [1000,1] (1000,x,1.00,1000,1)", "missing_row [7,2] (7,c2,7.00,7,2)"},
	},
	{
		name: "sc_left", // an outer join: lineage NULL where no order matches
		def: `CREATE TRANSFORM sc_left AS SELECT c.id AS cid, c.name, o.id AS oid
			FROM customers c LEFT JOIN orders o ON o.customer = c.id AND o.amount > 38`,
		corrupt: `UPDATE sc_left SET name = 'zz' WHERE cid = 1; DELETE FROM sc_left WHERE cid = 2;
			INSERT INTO sc_left (cid, name, oid, __s0_0, __s1_0) VALUES (7, 'x', NULL, 7, NULL)`,
		want: []string{"cell [1,NULL] name: zz -> c1", "extra_row [7,NULL] (7,x,,7,)", "missing_row [2,NULL] (2,c2,,2,)"},
	},
	{
		name: "sc_having", // a join aggregate with HAVING: the target projects a state table
		def: `CREATE TRANSFORM sc_having AS SELECT c.region, count(*) AS n, sum(o.amount) AS total
			FROM orders o JOIN customers c ON c.id = o.customer GROUP BY c.region HAVING count(*) > 1`,
		corrupt: `UPDATE sc_having SET n = 0 WHERE region = 'r0'; DELETE FROM sc_having WHERE region = 'r1';
			INSERT INTO sc_having (region, n, total) VALUES ('zz', 5, 5)`,
		want: []string{"cell [r0] n: 0 -> 13", "extra_row [zz] (zz,5,5)", "missing_row [r1] (r1,13,273.00)"},
	},
}

// short renders a divergence for comparison: kind [identity] and the
// cell or the row.
func short(d trellis.Divergence) string {
	var id []string
	for _, v := range d.Identity {
		id = append(id, textOr(v))
	}
	s := d.Kind + " [" + strings.Join(id, ",") + "]"
	switch d.Kind {
	case trellis.DivergenceCell:
		return s + " " + d.Column + ": " + textOr(d.Stored) + " -> " + textOr(d.Recomputed)
	case trellis.DivergenceMissingRow:
		return s + " " + textOr(d.Recomputed)
	}
	return s + " " + textOr(d.Stored)
}

func textOr(p *string) string {
	if p == nil {
		return "NULL"
	}
	return *p
}

// TestSelfCheck runs self-check jobs through a runner on every shape: a
// healthy target converges; hand edits of a cell, a deleted row and an
// extra row are reported as exactly those three divergences, paged three
// rows at a time; --repair fixes them. Then a change in flight (held back
// by a row lock) is a divergence in strict mode only, a transform that
// cannot catch up in time is not_caught_up, a paused one not_live, a key
// held in quarantine is an expected divergence, and bad requests change
// nothing.
func TestSelfCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{Capture: trellis.CaptureLogical})
	// A guard for the whole test, which converges several times.
	ctx, cancel := context.WithTimeout(context.Background(), 2*convergeTimeout)
	defer cancel()
	e.exec(`CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, region text);
		INSERT INTO customers SELECT g, 'c' || g, 'r' || (g % 3) FROM generate_series(1, 6) g;
		CREATE TABLE orders (id bigint PRIMARY KEY, customer int, status text, amount numeric(12,2));
		INSERT INTO orders SELECT g, g % 6 + 1, 'new', g FROM generate_series(1, 40) g`)
	var defs []string
	for _, s := range selfCheckShapes {
		defs = append(defs, s.def)
	}
	e.apply(strings.Join(defs, ";\n"))
	e.start()
	e.converge("after build")

	check := func(t *testing.T, name string, o trellis.SelfCheckOptions) *trellis.SelfCheckReport {
		t.Helper()
		o.Wait = true
		j, err := e.tr.SelfCheck(ctx, name, o)
		if err != nil {
			t.Fatalf("SelfCheck %s: %v", name, err)
		}
		if j.State != trellis.SelfCheckDone || j.Report == nil {
			t.Fatalf("SelfCheck %s: job %+v, want done with a report", name, j)
		}
		if !j.Report.ByRunner {
			t.Errorf("SelfCheck %s: not run by the runner", name)
		}
		return j.Report
	}
	listed := func(r *trellis.SelfCheckReport) []string {
		var out []string
		for _, d := range r.Listed {
			out = append(out, short(d))
		}
		sort.Strings(out)
		return out
	}

	// The shapes at once (atOnce): the runner runs up to four jobs at a
	// time.
	t.Run("shapes", func(t *testing.T) {
		var subs []subtest
		for _, s := range selfCheckShapes {
			subs = append(subs, subtest{s.name, func(t *testing.T) { testSelfCheckShape(t, e, s, check, listed) }})
		}
		atOnce(t, subs...)
	})

	// holdBack locks target row __k_id = id of sc_row (the runner's
	// re-derive of it waits) and changes its source row: a change in
	// flight. The returned function lets the runner go on.
	holdBack := func(t *testing.T, id int) func() {
		t.Helper()
		tx, err := e.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM sc_row WHERE __k_id = $1 FOR UPDATE`, id); err != nil {
			t.Fatal(err)
		}
		other, err := pgx.Connect(ctx, e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, `UPDATE orders SET amount = amount + 100 WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		other.Close(ctx)
		return func() { _ = tx.Rollback(ctx) }
	}
	t.Run("change in flight", func(t *testing.T) {
		for _, strict := range []bool{true, false} {
			id := 10
			if !strict {
				id = 11
			}
			var release func()
			e.tr.SetSelfCheckHook(func(stage string) {
				switch stage {
				case "compare":
					release = holdBack(t, id)
				case "compared":
					release()
				}
			})
			r := check(t, "sc_row", trellis.SelfCheckOptions{Strict: strict})
			e.tr.SetSelfCheckHook(nil)
			want := fmt.Sprintf("[cell [%d] amt: %d.00 -> %d.00]", id, 2*id, 2*(id+100))
			if strict && (r.Outcome != trellis.OutcomeDiverged || fmt.Sprint(listed(r)) != want) {
				t.Errorf("strict: %s %v; want diverged %s", r.Outcome, listed(r), want)
			}
			if !strict && (r.Outcome != trellis.OutcomeConverged || r.InFlight != 1 || r.Divergences != 0) {
				t.Errorf("standard: %s, %d divergences, %d in flight; want converged, 0, 1", r.Outcome, r.Divergences, r.InFlight)
			}
		}
	})

	t.Run("not caught up", func(t *testing.T) {
		release := holdBack(t, 12)
		r := check(t, "sc_row", trellis.SelfCheckOptions{Timeout: 300 * time.Millisecond})
		release()
		if r.Outcome != trellis.OutcomeNotCaughtUp || !strings.Contains(r.Reason, "sc_row") || r.Settled() {
			t.Errorf("%s (%s); want not_caught_up naming sc_row", r.Outcome, r.Reason)
		}
	})

	t.Run("held key", func(t *testing.T) {
		// The target refuses the re-derived row of key 20: it is held, its
		// stored row stays as it was, and that divergence is expected.
		e.exec(`ALTER TABLE sc_row ADD CONSTRAINT small CHECK (amt < 1000)`)
		e.exec(`UPDATE orders SET amount = 600 WHERE id = 20`)
		waitStatus(t, e, "sc_row", "one key held", func(s trellis.TransformStatus) bool { return heldCount(s) == 1 })
		r := check(t, "sc_row", trellis.SelfCheckOptions{})
		if r.Outcome != trellis.OutcomeConverged || r.HeldKeys != 1 || r.HeldDivergences != 1 || r.Divergences != 0 {
			t.Errorf("%+v; want converged with 1 held key and 1 divergence at it", r)
		}
		e.exec(`ALTER TABLE sc_row DROP CONSTRAINT small`)
		if _, err := e.tr.ReleaseAll(ctx, "sc_row"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, e, "sc_row", "no key held", func(s trellis.TransformStatus) bool { return heldCount(s) == 0 })
	})

	t.Run("bad requests change nothing", func(t *testing.T) {
		jobs := func() int64 { return e.queryInt(`SELECT count(*) FROM trellis.selfcheck_jobs`) }
		before := jobs()
		for _, c := range []struct {
			name string
			o    trellis.SelfCheckOptions
			code trellis.ErrorCode
			says string
		}{
			{"nothere", trellis.SelfCheckOptions{}, trellis.CodeNotFound, `transform "nothere" does not exist`},
			{"sc_row", trellis.SelfCheckOptions{Timeout: -time.Second}, trellis.CodeValidation, "timeout -1s is negative"},
			{"sc_row", trellis.SelfCheckOptions{PageSize: -1}, trellis.CodeValidation, "page size -1 is negative"},
		} {
			_, err := e.tr.SelfCheck(ctx, c.name, c.o)
			if trellis.CodeOf(err) != c.code || err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("SelfCheck(%s, %+v) = %v; want %s saying %q", c.name, c.o, err, c.code, c.says)
			}
		}
		if _, err := e.tr.SelfCheckJob(ctx, 999999); trellis.CodeOf(err) != trellis.CodeNotFound || !strings.Contains(err.Error(), "job 999999 does not exist") {
			t.Errorf("SelfCheckJob(999999) = %v; want not_found naming the job", err)
		}
		if n := jobs(); n != before {
			t.Errorf("%d jobs after bad requests, %d before", n, before)
		}
	})

	t.Run("queued job and paused transform", func(t *testing.T) {
		j, err := e.tr.SelfCheck(ctx, "sc_agg", trellis.SelfCheckOptions{})
		if err != nil || j.ID == 0 || j.Options.Timeout != trellis.DefaultSelfCheckTimeout {
			t.Fatalf("SelfCheck without Wait = %+v, %v; want a queued job with the default timeout", j, err)
		}
		if j, err = e.tr.AwaitSelfCheckJob(ctx, j.ID); err != nil || j.Report == nil || j.Report.Outcome != trellis.OutcomeConverged || j.ClaimedBy == nil {
			t.Fatalf("AwaitSelfCheckJob = %+v, %v; want converged, claimed by the runner", j, err)
		}
		e.apply(`PAUSE TRANSFORM sc_agg`)
		r := check(t, "sc_agg", trellis.SelfCheckOptions{})
		if r.Outcome != trellis.OutcomeNotLive || !strings.Contains(r.Reason, "RESUME TRANSFORM sc_agg") {
			t.Errorf("paused: %s (%s); want not_live naming RESUME", r.Outcome, r.Reason)
		}
	})
}

// testSelfCheckShape checks one shape: healthy, hand-edited, repaired.
func testSelfCheckShape(t *testing.T, e *env, s selfCheckShape, check func(*testing.T, string, trellis.SelfCheckOptions) *trellis.SelfCheckReport,
	listed func(*trellis.SelfCheckReport) []string) {
	r := check(t, s.name, trellis.SelfCheckOptions{PageSize: 3})
	if r.Outcome != trellis.OutcomeConverged || r.Divergences != 0 || r.Pages < 2 || r.RowsTarget != r.RowsQuery || r.RowsTarget == 0 {
		t.Fatalf("healthy: %+v; want converged over several pages", r)
	}
	// Its own session: the shapes run in parallel.
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), s.corrupt); err != nil {
		t.Fatalf("%s: %v", s.corrupt, err)
	}
	// Strict: hand edits need no re-check, and each wait for
	// convergence of an idle slot costs about a second.
	r = check(t, s.name, trellis.SelfCheckOptions{PageSize: 3, Strict: true})
	got := listed(r)
	if r.Outcome != trellis.OutcomeDiverged || r.Divergences != 3 || fmt.Sprint(got) != fmt.Sprint(s.want) {
		t.Fatalf("after hand edits: outcome %s, %d divergences %v (reason %q); want diverged, %v", r.Outcome, r.Divergences, got, r.Reason, s.want)
	}
	for _, k := range []string{trellis.DivergenceCell, trellis.DivergenceMissingRow, trellis.DivergenceExtraRow} {
		if r.ByKind[k] != 1 {
			t.Errorf("by kind %v; want one of each", r.ByKind)
		}
	}
	// One shape repairs in standard mode (a re-check, and a wait
	// before comparing the repaired rows), the others strictly.
	r = check(t, s.name, trellis.SelfCheckOptions{PageSize: 3, Repair: true, Strict: s.name != "sc_row"})
	if r.Repair == nil || r.Repair.Fixed != 3 || r.Repair.Remaining != 0 || r.Repair.Note != "" || !r.Settled() {
		t.Fatalf("repair: %+v (report %+v); want 3 fixed, none remaining", r.Repair, r)
	}
	if r := check(t, s.name, trellis.SelfCheckOptions{}); r.Outcome != trellis.OutcomeConverged {
		t.Fatalf("after repair: %+v; want converged", r)
	}
}

// TestSelfCheckAudit: with SelfCheckEvery the runner compares a sample of
// every live target and exposes the divergences it found as a gauge.
func TestSelfCheckAudit(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, trellis.Config{Capture: trellis.CaptureLogical, SelfCheckEvery: 100 * time.Millisecond, SelfCheckSample: 0.5,
		Metrics: trellis.NewMetrics(reg)})
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, v int);
		INSERT INTO items SELECT g, g FROM generate_series(1, 20) g`)
	e.apply(`CREATE TRANSFORM audited AS SELECT id, v * 2 AS v2 FROM items`)
	e.start()
	e.converge("after build")
	value := func(name string, labels map[string]string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				have := map[string]string{}
				for _, l := range m.GetLabel() {
					have[l.GetName()] = l.GetValue()
				}
				for k, v := range labels {
					if have[k] != v {
						continue metric
					}
				}
				if m.Gauge != nil {
					return m.Gauge.GetValue(), true
				}
				return m.Counter.GetValue(), true
			}
		}
		return 0, false
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(waitTimeout); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	until("a converged audit", func() bool {
		n, ok := value("trellis_selfcheck_runs_total", map[string]string{"outcome": "converged"})
		g, gok := value("trellis_selfcheck_divergences", map[string]string{"transform": "audited"})
		return ok && n >= 1 && gok && g == 0
	})
	// Every row wrong: a sample of half the rows finds about half of them.
	e.exec(`UPDATE audited SET v2 = -v2`)
	until("a diverged audit", func() bool {
		n, ok := value("trellis_selfcheck_runs_total", map[string]string{"outcome": "diverged"})
		return ok && n >= 1
	})
	g, _ := value("trellis_selfcheck_divergences", map[string]string{"transform": "audited"})
	if g < 10 || g >= 20 {
		t.Errorf("trellis_selfcheck_divergences = %v; want a sample of the 20 divergent rows (10 to 19)", g)
	}
}
