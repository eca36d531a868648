package trellis_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// End-to-end tests of chains over targets whose own key may be NULL or is
// missing (ADR 0019): aggregates grouped by a nullable column or without
// GROUP BY, row transforms of outer joins. Each such target is keyed by
// the hidden surrogate __id, and its readers key it by that. They run over
// the chain tests' tables and writes (chainSchemaSQL, chainStmt: orders
// with a nullable status) and a labels table joined to a level-1 target:
//
//	sur_status (agg by nullable status)  → sur_status_named (row, LEFT JOIN labels) → sur_summary (agg, no GROUP BY, projected) → sur_summary_copy (row)
//	sur_status, sur_all (no GROUP BY)    → sur_share (row, CROSS JOIN of the two)    → sur_share_by_n (agg by the target's nullable status)
//	sur_cust_orders (row, LEFT JOIN)     → sur_region_status (agg by region, status) → sur_regions (agg by region, HAVING)

// surrogateSchemaSQL adds labels, keyed by status, to the chain tables.
const surrogateSchemaSQL = `
CREATE TABLE labels (status text PRIMARY KEY, label text);
INSERT INTO labels VALUES ('new', 'New'), ('paid', 'Paid');
`

const (
	surStatusQ     = `SELECT status, count(*) AS n, sum(amount) AS total FROM orders GROUP BY status`
	surAllQ        = `SELECT count(*) AS orders, count(status) AS with_status, sum(amount) AS total FROM orders`
	surCustOrdersQ = `SELECT c.id AS customer_id, c.region, o.id AS order_id, o.status, o.amount FROM customers c LEFT JOIN orders o ON o.customer_id = c.id`

	surNamedSel  = `SELECT s.status, s.n, s.total, l.label FROM `
	surNamedJoin = ` s LEFT JOIN labels l ON l.status = s.status`
	surNamedBase = surNamedSel + `(` + surStatusQ + `)` + surNamedJoin

	surShareSel  = `SELECT s.status, s.n, a.orders FROM `
	surShareBase = surShareSel + `(` + surStatusQ + `) s CROSS JOIN (` + surAllQ + `) a`

	surRegionStatusSel  = `SELECT region, status, count(*) AS n, count(order_id) AS orders, sum(amount) AS total FROM `
	surRegionStatusBase = surRegionStatusSel + `(` + surCustOrdersQ + `) co GROUP BY region, status`

	surSummarySel  = `SELECT count(*) AS statuses, sum(n) AS orders, sum(total) AS total, count(label) AS labelled, max(n) - min(n) AS spread FROM `
	surSummaryBase = surSummarySel + `(` + surNamedBase + `) x`

	surShareByNSel = `SELECT status, sum(n) AS n, max(orders) AS orders FROM `
	surRegionsSel  = `SELECT region, count(*) AS statuses, sum(orders) AS orders, sum(total) AS total FROM `
	surRegionsEnd  = ` GROUP BY region HAVING count(*) > 1`
)

// surrogateDefs are the chains; the level-1 aggregates over orders and the
// outer join group or join by status, which random writes set NULL.
var surrogateDefs = []chainDef{
	{name: "sur_status", level: 1, query: surStatusQ},
	{name: "sur_all", level: 1, query: surAllQ},
	{name: "sur_cust_orders", level: 1, query: surCustOrdersQ},
	{name: "sur_status_named", level: 2, query: surNamedSel + `sur_status` + surNamedJoin, base: surNamedBase},
	{name: "sur_share", level: 2, query: surShareSel + `sur_status s CROSS JOIN sur_all a`, base: surShareBase},
	{name: "sur_region_status", level: 2, query: surRegionStatusSel + `sur_cust_orders GROUP BY region, status`, base: surRegionStatusBase},
	{name: "sur_summary", level: 3, query: surSummarySel + `sur_status_named`, base: surSummaryBase},
	{name: "sur_share_by_n", level: 3, query: surShareByNSel + `sur_share GROUP BY status`,
		base: surShareByNSel + `(` + surShareBase + `) sh GROUP BY status`},
	{name: "sur_regions", level: 3, query: surRegionsSel + `sur_region_status` + surRegionsEnd,
		base: surRegionsSel + `(` + surRegionStatusBase + `) rs` + surRegionsEnd},
	{name: "sur_summary_copy", level: 4, query: `SELECT statuses, orders, spread FROM sur_summary`,
		base: `SELECT statuses, orders, spread FROM (` + surSummaryBase + `) y`},
}

// surrogateKeyed are the transforms whose targets get the surrogate: all
// but sur_share, a join of two keyed targets without outer joins, and
// sur_summary_copy, a row target of one table (keyed by its upstream's
// surrogate, in __k___id).
var surrogateKeyed = []string{"sur_status", "sur_all", "sur_cust_orders", "sur_status_named", "sur_region_status",
	"sur_summary", "sur_share_by_n", "sur_regions"}

// surrogateStmt is a random write to orders or customers (chainStmt), or
// one time in five to labels: a label set, changed or removed.
func surrogateStmt(rng *rand.Rand) string {
	if rng.Intn(5) > 0 {
		return chainStmt(rng)
	}
	status := []string{"new", "paid", "x", "rare"}[rng.Intn(4)]
	switch rng.Intn(3) {
	case 0:
		return fmt.Sprintf(`DELETE FROM labels WHERE status = '%s'`, status)
	default:
		label := "NULL"
		if rng.Intn(4) > 0 {
			label = fmt.Sprintf("'%s %d'", status, rng.Intn(100))
		}
		return fmt.Sprintf(`INSERT INTO labels VALUES ('%s', %s) ON CONFLICT (status) DO UPDATE SET label = EXCLUDED.label`, status, label)
	}
}

// surrogateBehind names the targets of level 2 and up that differ from
// their query over their upstream targets (chainBehind), leaving out those
// that read labels, which the burst still writes.
func surrogateBehind(e *env) []string {
	var defs []chainDef
	for _, d := range surrogateDefs {
		if !strings.Contains(d.query, "labels") {
			defs = append(defs, d)
		}
	}
	return chainBehind(e, defs)
}

// checkSurrogates fails unless exactly the transforms of want have the
// surrogate in their plan and a primary key on __id (an identity column)
// in their target, and every other target of names has a primary key of
// its own.
func checkSurrogates(e *env, names, want []string) {
	e.t.Helper()
	for _, n := range names {
		var surrogate string
		var pk []string
		var identity bool
		if err := e.conn.QueryRow(context.Background(), `SELECT coalesce(t.plan->>'surrogate', ''),
				(SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
				 WHERE i.indrelid = to_regclass(t.name) AND i.indisprimary),
				EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(t.name) AND attname = '__id' AND attidentity = 'a')
			FROM trellis.transforms t WHERE t.name = $1`, n).Scan(&surrogate, &pk, &identity); err != nil {
			e.t.Fatalf("read the key of %s: %v", n, err)
		}
		keyed := strings.Join(pk, ",") == "__id" && identity && surrogate == "__id"
		wantKeyed := false
		for _, w := range want {
			wantKeyed = wantKeyed || w == n
		}
		switch {
		case wantKeyed && !keyed:
			e.t.Errorf("%s: plan surrogate %q, primary key %v, identity %v; want the surrogate __id as its primary key", n, surrogate, pk, identity)
		case !wantKeyed && (surrogate != "" || len(pk) == 0 || identity):
			e.t.Errorf("%s: plan surrogate %q, primary key %v, identity %v; want a primary key of its own columns", n, surrogate, pk, identity)
		}
	}
	if e.t.Failed() {
		e.t.FailNow()
	}
}

func defNames(defs []chainDef) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.name)
	}
	return out
}

// TestChainNullableKeys keeps three- and four-level chains over targets
// keyed by the surrogate exact through concurrent writes to every base
// table and scripted changes: the NULL group vanishing and coming back, a
// group created, emptied and created again (a new id, read as a delete and
// an insert), a group's values changing (the same id), NULL-extended rows
// appearing, every status set NULL, TRUNCATE of orders and labels.
func TestChainNullableKeys(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testChainNullableKeys)
}

func testChainNullableKeys(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	e.exec(chainSchemaSQL)
	e.exec(chainSeedSQL)
	e.exec(surrogateSchemaSQL)
	e.apply(chainScript(surrogateDefs))
	checkSurrogates(e, defNames(surrogateDefs), surrogateKeyed)
	e.start()
	chainConverge(e, surrogateDefs, "after the build over existing data")
	if n := e.queryInt(`SELECT count(*) FROM sur_status WHERE status IS NULL`); n != 1 {
		t.Fatalf("sur_status has %d NULL groups after the build, want 1 (the data no longer exercises it)", n)
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	idOf := func(status string) int64 {
		return e.queryInt(`SELECT coalesce((SELECT __id FROM sur_status WHERE status IS NOT DISTINCT FROM $1::text), 0)`, status)
	}
	nullGroups := func(want int64) func(string) {
		return func(when string) {
			if n := e.queryInt(`SELECT (SELECT count(*) FROM sur_status WHERE status IS NULL) + (SELECT count(*) FROM sur_status_named WHERE status IS NULL)
				+ (SELECT count(*) FROM sur_share_by_n WHERE status IS NULL)`); n != want {
				t.Fatalf("%s: %d NULL status rows at levels 1 to 3, want %d", when, n, want)
			}
		}
	}
	var newID, rareID int64
	phases := []struct {
		name  string
		write func(t *testing.T)
		check func(when string)
	}{
		{name: "concurrent writes to every table (2 writers)", write: func(t *testing.T) {
			n, err := burstOf(e.dsn, seed, 2, 1500*time.Millisecond, surrogateStmt)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("burst: %d transactions", n)
		}},
		{name: "no NULL status left (the NULL groups empty at every level)",
			write: func(t *testing.T) {
				e.exec(`UPDATE orders SET status = 'paid' WHERE status IS NULL`)
			}, check: nullGroups(0)},
		{name: "NULL statuses again (the NULL groups come back); the values of group new change",
			write: func(t *testing.T) {
				if newID = idOf("new"); newID == 0 {
					t.Fatal("no group new in sur_status")
				}
				e.exec(`UPDATE orders SET status = NULL WHERE id % 5 = 0`)
				e.exec(`UPDATE orders SET amount = coalesce(amount, 0) + 1 WHERE status = 'new'`)
			}, check: func(when string) {
				nullGroups(3)(when)
				if id := idOf("new"); id != newID {
					t.Fatalf("%s: group new has id %d, had %d: a group keeps its id while it exists", when, id, newID)
				}
			}},
		{name: "a group rare with a label, in its own customer's orders",
			write: func(t *testing.T) {
				e.exec(`INSERT INTO orders VALUES (5001, 99, 10, 'rare'), (5002, 99, NULL, 'rare'); INSERT INTO labels VALUES ('rare', 'Rare')
					ON CONFLICT (status) DO UPDATE SET label = 'Rare'`)
			}, check: func(when string) {
				if rareID = idOf("rare"); rareID == 0 {
					t.Fatalf("%s: no group rare in sur_status", when)
				}
			}},
		{name: "group rare emptied",
			write: func(t *testing.T) { e.exec(`DELETE FROM orders WHERE status = 'rare'`) },
			check: func(when string) {
				if id := idOf("rare"); id != 0 {
					t.Fatalf("%s: group rare still has id %d", when, id)
				}
			}},
		{name: "group rare back (a new id); customer 99 without orders and a new customer without any (NULL-extended rows)",
			write: func(t *testing.T) {
				e.exec(`DELETE FROM orders WHERE customer_id = 99; INSERT INTO orders VALUES (5003, 7, 3, 'rare');
					INSERT INTO customers VALUES (98, 'solo') ON CONFLICT (id) DO UPDATE SET region = 'solo'`)
			}, check: func(when string) {
				if id := idOf("rare"); id == 0 || id == rareID {
					t.Fatalf("%s: group rare has id %d, had %d before it emptied: want a new one", when, id, rareID)
				}
				if n := e.queryInt(`SELECT count(*) FROM sur_region_status WHERE region = 'solo' AND status IS NULL AND orders = 0`); n != 1 {
					t.Fatalf("%s: sur_region_status has %d (solo, NULL) groups without orders, want 1", when, n)
				}
			}},
		{name: "every status NULL in one transaction, then TRUNCATE labels",
			write: func(t *testing.T) {
				e.exec(`UPDATE orders SET status = NULL`)
				e.exec(`TRUNCATE labels`)
			}, check: func(when string) {
				if n := e.queryInt(`SELECT count(*) FROM sur_status`); n != 1 {
					t.Fatalf("%s: sur_status has %d groups, want 1 (NULL)", when, n)
				}
			}},
		{name: "TRUNCATE orders and fill it again in one transaction, labels again; concurrent writes",
			write: func(t *testing.T) {
				e.exec(`BEGIN; TRUNCATE orders; INSERT INTO orders SELECT g, g % 31 + 1, (g * 53 % 9000) / 100.0,
					(ARRAY['new', 'paid', 'x', NULL, 'rare'])[g % 5 + 1] FROM generate_series(1, 200) g; COMMIT`)
				e.exec(`INSERT INTO labels VALUES ('new', 'New'), ('x', NULL)`)
				if _, err := burstOf(e.dsn, seed+100, 2, 700*time.Millisecond, surrogateStmt); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for i, ph := range phases {
		ph.write(t)
		when := fmt.Sprintf("phase %d (%s)", i+1, ph.name)
		chainConverge(e, surrogateDefs, when)
		if ph.check != nil {
			ph.check(when)
		}
	}
}

// TestChainNullableKeysSurviveKill is TestChainSurvivesKill over the
// surrogate-keyed chains: SIGKILLs of a `trellis-repl run` process at
// random moments of write bursts to every base table, restarts on the same
// data directory, every level checked exactly after every second kill.
func TestChainNullableKeysSurviveKill(t *testing.T) {
	t.Parallel()
	chainKills(t, func(e *env) {
		e.exec(chainSchemaSQL)
		e.exec(chainSeedSQL)
		e.exec(surrogateSchemaSQL)
		e.apply(chainScript(surrogateDefs))
	}, surrogateDefs, surrogateStmt, surrogateBehind)
}

// TestChainLegacyRekeyed follows the advice of the refusal of a reader of
// a target made before ADR 0019 (chainLegacy): the CREATE OR REPLACE the
// message spells out builds the same query into a target keyed by the
// surrogate; while it builds, a reader is refused naming it; once it has
// swapped in, the readers the old targets refused are accepted and kept
// exact.
func TestChainLegacyRekeyed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, trellis.Config{})
	e.exec(chainSchemaSQL)
	e.exec(chainSeedSQL)
	upstream := []chainDef{
		{name: "old_total", level: 1, query: `SELECT count(*) AS n, sum(amount) AS total FROM orders`},
		{name: "old_by_status", level: 1, query: `SELECT status, count(*) AS n FROM orders GROUP BY status`},
		{name: "old_left", level: 1, query: `SELECT c.id, c.region, o.id AS order_id, o.status FROM customers c LEFT JOIN orders o ON o.customer_id = c.id`},
	}
	readers := []chainDef{
		{name: "new_total", level: 2, query: `SELECT o.status, t.n FROM old_by_status o CROSS JOIN old_total t`,
			base: `SELECT o.status, t.n FROM (` + upstream[1].query + `) o CROSS JOIN (` + upstream[0].query + `) t`},
		{name: "new_left", level: 2, query: `SELECT region, status, count(order_id) AS n FROM old_left GROUP BY region, status`,
			base: `SELECT region, status, count(order_id) AS n FROM (` + upstream[2].query + `) l GROUP BY region, status`},
	}
	e.apply(chainScript(upstream))
	chainLegacy(e, defNames(upstream)...)
	e.start()
	chainConverge(e, upstream, "the old-style transforms built")

	// Each reader is refused; its message says what to run.
	advice := map[string]string{}
	for _, r := range readers {
		_, err := e.tr.Apply(ctx, chainScript([]chainDef{r}))
		if err == nil || trellis.CodeOf(err) != trellis.CodeValidation {
			t.Fatalf("%s over old-style targets: %v, want a validation refusal", r.name, err)
		}
		msg := err.Error()
		_, rest, ok := strings.Cut(msg, "redefining it with the same query, ")
		stmt, _, ok2 := strings.Cut(rest, ", then create transform")
		if !ok || !ok2 || !strings.HasPrefix(stmt, "CREATE OR REPLACE TRANSFORM ") {
			t.Fatalf("%s: the refusal gives no CREATE OR REPLACE to run: %v", r.name, err)
		}
		name := stmt[len("CREATE OR REPLACE TRANSFORM "):strings.Index(stmt, " AS ")]
		advice[name] = stmt
	}
	if len(advice) != 2 {
		t.Fatalf("the refusals advise %d redefinitions (%v), want 2 (the first one each reader reads)", len(advice), advice)
	}
	// Follow the advice for every old-style transform (a reader's second
	// upstream is refused only once its first is rekeyed).
	var script strings.Builder
	for _, u := range upstream {
		fmt.Fprintf(&script, "CREATE OR REPLACE TRANSFORM %s AS %s;\n", pgx.Identifier{"public", u.name}.Sanitize(),
			e.queryText(`SELECT definition FROM trellis.transforms WHERE name = $1`, u.name))
	}
	for name, stmt := range advice {
		if !strings.Contains(script.String(), stmt+";") {
			t.Fatalf("the advice for %s, %q, is not the transform's definition", name, stmt)
		}
	}
	e.apply(script.String())
	// While the redefinitions build, the refusal names them.
	if _, err := e.tr.Apply(ctx, chainScript(readers[:1])); err == nil || !strings.Contains(err.Error(), "its redefinition (CREATE OR REPLACE TRANSFORM, building as") {
		t.Fatalf("a reader while its upstream's redefinition builds: %v, want a refusal naming the redefinition", err)
	}
	chainConverge(e, upstream, "after the redefinitions swapped in")
	checkSurrogates(e, defNames(upstream), defNames(upstream))

	e.apply(chainScript(readers))
	all := append(append([]chainDef{}, upstream...), readers...)
	chainConverge(e, all, "the readers built")
	for i := 0; i < 3; i++ {
		if _, err := burstOf(e.dsn, int64(i), 2, 500*time.Millisecond, chainStmt); err != nil {
			t.Fatal(err)
		}
		e.exec(`UPDATE orders SET status = CASE WHEN status IS NULL THEN 'new' END WHERE id % 3 = $1`, i)
		chainConverge(e, all, fmt.Sprintf("round %d of writes", i))
	}
}
