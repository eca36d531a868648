package tpch

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

const testSF = 0.01

func connect(t *testing.T) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, conn
}

func scalar[T any](t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// rowCounts returns every table's row count.
func rowCounts(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, tb := range Tables() {
		out[tb] = scalar[int](t, ctx, conn, fmt.Sprintf("SELECT count(*) FROM %s.%s", pgx.Identifier{schema}.Sanitize(), tb))
	}
	return out
}

// checksums returns a digest of every table's contents.
func checksums(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, tb := range Tables() {
		out[tb] = scalar[string](t, ctx, conn, fmt.Sprintf(
			"SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM %s.%s t",
			pgx.Identifier{schema}.Sanitize(), tb))
	}
	return out
}

// checkShape asserts the spec's invariants that every load and refresh
// must keep; each query counts violations.
func checkShape(t *testing.T, ctx context.Context, conn *pgx.Conn, schema, when string) {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	checks := map[string]string{
		"orders of customers with custkey % 3 = 0": "SELECT count(*) FROM {s}.orders WHERE o_custkey % 3 = 0",
		"orders without a customer":                "SELECT count(*) FROM {s}.orders WHERE NOT EXISTS (SELECT FROM {s}.customer WHERE c_custkey = o_custkey)",
		"orders without lineitems":                 "SELECT count(*) FROM {s}.orders WHERE NOT EXISTS (SELECT FROM {s}.lineitem WHERE l_orderkey = o_orderkey)",
		"lineitems without an order":               "SELECT count(*) FROM {s}.lineitem WHERE NOT EXISTS (SELECT FROM {s}.orders WHERE o_orderkey = l_orderkey)",
		"lineitems without a partsupp":             "SELECT count(*) FROM {s}.lineitem WHERE NOT EXISTS (SELECT FROM {s}.partsupp WHERE ps_partkey = l_partkey AND ps_suppkey = l_suppkey)",
		"partsupps without a part":                 "SELECT count(*) FROM {s}.partsupp WHERE NOT EXISTS (SELECT FROM {s}.part WHERE p_partkey = ps_partkey)",
		"partsupps without a supplier":             "SELECT count(*) FROM {s}.partsupp WHERE NOT EXISTS (SELECT FROM {s}.supplier WHERE s_suppkey = ps_suppkey)",
		"nations without a region":                 "SELECT count(*) FROM {s}.nation WHERE NOT EXISTS (SELECT FROM {s}.region WHERE r_regionkey = n_regionkey)",
		"parts without 4 suppliers":                "SELECT count(*) FROM (SELECT ps_partkey FROM {s}.partsupp GROUP BY 1 HAVING count(*) <> 4) x",
		"order dates out of range":                 "SELECT count(*) FROM {s}.orders WHERE o_orderdate NOT BETWEEN date '1992-01-01' AND date '1998-08-02'",
		"ship dates not after order dates":         "SELECT count(*) FROM {s}.lineitem JOIN {s}.orders ON o_orderkey = l_orderkey WHERE l_shipdate - o_orderdate NOT BETWEEN 1 AND 124",
		"receipt dates not 1-30 days after ship":   "SELECT count(*) FROM {s}.lineitem WHERE l_receiptdate - l_shipdate NOT BETWEEN 1 AND 30",
		"line status against ship date":            "SELECT count(*) FROM {s}.lineitem WHERE l_linestatus <> CASE WHEN l_shipdate > date '1995-06-17' THEN 'O' ELSE 'F' END",
		"return flags against receipt date":        "SELECT count(*) FROM {s}.lineitem WHERE (l_returnflag = 'N') <> (l_receiptdate > date '1995-06-17')",
		"extended price not quantity * retail":     "SELECT count(*) FROM {s}.lineitem WHERE l_extendedprice <> l_quantity * (90000 + (l_partkey / 10) % 20001 + 100 * (l_partkey % 1000))::numeric / 100",
		"phone codes not nation + 10": `SELECT (SELECT count(*) FROM {s}.customer WHERE substr(c_phone, 1, 2)::int <> c_nationkey + 10)
			+ (SELECT count(*) FROM {s}.supplier WHERE substr(s_phone, 1, 2)::int <> s_nationkey + 10)`,
		"values outside the spec's domains": `SELECT count(*) FROM {s}.lineitem WHERE l_quantity NOT BETWEEN 1 AND 50
			OR l_discount NOT BETWEEN 0 AND 0.10 OR l_tax NOT BETWEEN 0 AND 0.08
			OR l_shipmode NOT IN ('REG AIR', 'AIR', 'RAIL', 'SHIP', 'TRUCK', 'MAIL', 'FOB')
			OR l_shipinstruct NOT IN ('DELIVER IN PERSON', 'COLLECT COD', 'NONE', 'TAKE BACK RETURN')`,
		"order status or total not derived from lines": `SELECT count(*) FROM {s}.orders JOIN (
				SELECT l_orderkey, CASE WHEN bool_and(l_linestatus = 'O') THEN 'O' WHEN bool_and(l_linestatus = 'F') THEN 'F' ELSE 'P' END AS st,
					round(sum(l_extendedprice * (1 + l_tax) * (1 - l_discount)), 2) AS tp
				FROM {s}.lineitem GROUP BY 1) a ON a.l_orderkey = o_orderkey
			WHERE o_orderstatus <> a.st OR o_totalprice <> a.tp`,
	}
	names := make([]string, 0, len(checks))
	for n := range checks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if v := scalar[int](t, ctx, conn, strings.ReplaceAll(checks[n], "{s}", s)); v != 0 {
			t.Errorf("%s: %d %s", when, v, n)
		}
	}
}

// runQueries runs all 22 queries with schema on the search_path and
// returns their row counts; every query must return a row, and with
// noNulls no row may hold a NULL (an aggregate over nothing).
func runQueries(t *testing.T, ctx context.Context, conn *pgx.Conn, schema, when string, noNulls bool) []int {
	t.Helper()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET search_path") //nolint:errcheck
	counts := make([]int, 0, 22)
	for _, q := range Queries() {
		rows, err := conn.Query(ctx, q.SQL)
		if err != nil {
			t.Fatalf("%s: Q%d: %v", when, q.Num, err)
		}
		n, nulls := 0, 0
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("%s: Q%d: %v", when, q.Num, err)
			}
			for _, v := range vals {
				if v == nil {
					nulls++
				}
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: Q%d: %v", when, q.Num, err)
		}
		if n == 0 {
			t.Errorf("%s: Q%d (%s) returned no rows", when, q.Num, q.Name)
		}
		if noNulls && nulls > 0 {
			t.Errorf("%s: Q%d (%s) returned %d NULLs", when, q.Num, q.Name, nulls)
		}
		counts = append(counts, n)
	}
	return counts
}

func formatCounts(counts []int) string {
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = fmt.Sprintf("Q%d=%d", i+1, n)
	}
	return strings.Join(parts, " ")
}

func TestLoadQueriesAndRefresh(t *testing.T) {
	ctx, conn := connect(t)

	start := time.Now()
	if err := Load(ctx, conn, "tpch", testSF); err != nil {
		t.Fatal(err)
	}
	t.Logf("load SF %g: %v", testSF, time.Since(start).Round(time.Millisecond))

	want := CountsFor(testSF)
	got := rowCounts(t, ctx, conn, "tpch")
	t.Logf("rows: %v", got)
	exact := map[string]int{"region": 5, "nation": 25, "supplier": want.Suppliers, "customer": want.Customers,
		"part": want.Parts, "partsupp": want.PartSupps, "orders": want.Orders}
	if want != (Counts{Suppliers: 100, Customers: 1500, Parts: 2000, PartSupps: 8000, Orders: 15000}) {
		t.Errorf("CountsFor(%g) = %+v", testSF, want)
	}
	for tb, n := range exact {
		if got[tb] != n {
			t.Errorf("%s has %d rows, want %d", tb, got[tb], n)
		}
	}
	// 1-7 lines per order, 4 on average (plus the few big orders' extra).
	if l := got["lineitem"]; l < want.Orders*37/10 || l > want.Orders*43/10 {
		t.Errorf("lineitem has %d rows, want about %d", l, 4*want.Orders)
	}
	if n := scalar[int](t, ctx, conn, "SELECT count(DISTINCT o_custkey) FROM tpch.orders"); n < want.Customers*6/10 {
		t.Errorf("only %d customers have orders", n)
	}
	checkShape(t, ctx, conn, "tpch", "after load")
	t.Logf("query rows after load: %s", formatCounts(runQueries(t, ctx, conn, "tpch", "after load", true)))
	// Q8's CASE has both branches taken: Brazil has a share in both years.
	if _, err := conn.Exec(ctx, "SET search_path TO tpch"); err != nil {
		t.Fatal(err)
	}
	if n := scalar[int](t, ctx, conn, "SELECT count(*) FROM ("+Queries()[7].SQL+") q8 WHERE mkt_share > 0"); n != 2 {
		t.Errorf("Q8: Brazil has a market share in %d years, want 2", n)
	}
	if _, err := conn.Exec(ctx, "RESET search_path"); err != nil {
		t.Fatal(err)
	}

	// The same scale factor gives the same data, whatever the schema.
	if err := Load(ctx, conn, "tpch again", testSF); err != nil {
		t.Fatal(err)
	}
	if a, b := checksums(t, ctx, conn, "tpch"), checksums(t, ctx, conn, "tpch again"); !mapsEqual(a, b) {
		t.Fatalf("two loads differ:\n%v\n%v", a, b)
	}

	for round := 1; round <= 2; round++ {
		for _, schema := range []string{"tpch", "tpch again"} {
			before := rowCounts(t, ctx, conn, schema)
			s := pgx.Identifier{schema}.Sanitize()
			maxKey := scalar[int](t, ctx, conn, "SELECT max(o_orderkey) FROM "+s+".orders")
			n := want.Orders / 1000 // SF*1500

			if err := RF1(ctx, conn, schema, round); err != nil {
				t.Fatal(err)
			}
			after := rowCounts(t, ctx, conn, schema)
			newLines := after["lineitem"] - before["lineitem"]
			if after["orders"] != before["orders"]+n || newLines < n || newLines > 7*n {
				t.Errorf("round %d RF1: orders %d -> %d, lineitems +%d; want +%d orders, +%d..%d lines",
					round, before["orders"], after["orders"], newLines, n, n, 7*n)
			}
			if k := scalar[int](t, ctx, conn, fmt.Sprintf("SELECT count(*) FROM %s.orders WHERE o_orderkey > %d", s, maxKey)); k != n {
				t.Errorf("round %d RF1: %d orders above the old maximum key, want %d", round, k, n)
			}
			checkShape(t, ctx, conn, schema, fmt.Sprintf("round %d after RF1", round))

			before = after
			if err := RF2(ctx, conn, schema, round); err != nil {
				t.Fatal(err)
			}
			after = rowCounts(t, ctx, conn, schema)
			if after["orders"] != before["orders"]-n || after["lineitem"] >= before["lineitem"]-n+1 {
				t.Errorf("round %d RF2: orders %d -> %d, lineitems %d -> %d; want -%d orders and their lines",
					round, before["orders"], after["orders"], before["lineitem"], after["lineitem"], n)
			}
			checkShape(t, ctx, conn, schema, fmt.Sprintf("round %d after RF2", round))

			before = after
			sumsBefore := checksums(t, ctx, conn, schema)
			keysBefore := scalar[string](t, ctx, conn, "SELECT md5(string_agg(l_orderkey || ',' || l_linenumber, ' ' ORDER BY 1)) FROM "+s+".lineitem")
			if err := UpdateAll(ctx, conn, schema, round); err != nil {
				t.Fatal(err)
			}
			if after = rowCounts(t, ctx, conn, schema); !mapsEqual(after, before) {
				t.Errorf("round %d UpdateAll changed row counts: %v -> %v", round, before, after)
			}
			sumsAfter := checksums(t, ctx, conn, schema)
			for _, tb := range Tables() {
				if sumsAfter[tb] == sumsBefore[tb] {
					t.Errorf("round %d UpdateAll left %s unchanged", round, tb)
				}
			}
			if k := scalar[string](t, ctx, conn, "SELECT md5(string_agg(l_orderkey || ',' || l_linenumber, ' ' ORDER BY 1)) FROM "+s+".lineitem"); k == keysBefore {
				t.Errorf("round %d UpdateAll changed no lineitem primary key", round)
			}
			checkShape(t, ctx, conn, schema, fmt.Sprintf("round %d after UpdateAll", round))
		}
		t.Logf("round %d: rows %v", round, rowCounts(t, ctx, conn, "tpch"))
		t.Logf("query rows after round %d: %s", round, formatCounts(runQueries(t, ctx, conn, "tpch", fmt.Sprintf("round %d", round), false)))
	}

	// The refreshes are deterministic too: the same rounds on the same
	// data leave the same data.
	if a, b := checksums(t, ctx, conn, "tpch"), checksums(t, ctx, conn, "tpch again"); !mapsEqual(a, b) {
		t.Fatalf("the same rounds on two loads differ:\n%v\n%v", a, b)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestSchemaQuotesTheSchema(t *testing.T) {
	ctx, conn := connect(t)
	const schema = `Odd "name"; x`
	if _, err := conn.Exec(ctx, Schema(schema)); err != nil {
		t.Fatal(err)
	}
	tables := scalar[int](t, ctx, conn, fmt.Sprintf(
		"SELECT count(*) FROM pg_tables WHERE schemaname = '%s'", strings.ReplaceAll(schema, "'", "''")))
	indexes := scalar[int](t, ctx, conn, fmt.Sprintf(
		"SELECT count(*) FROM pg_indexes WHERE schemaname = '%s'", strings.ReplaceAll(schema, "'", "''")))
	if tables != 8 || indexes != 8+8 {
		t.Errorf("schema %q has %d tables and %d indexes, want 8 and 16 (8 primary keys)", schema, tables, indexes)
	}
}

func TestLoadRejectsTinyScaleFactors(t *testing.T) {
	ctx, conn := connect(t)
	if err := Load(ctx, conn, "tpch", 0.0001); err == nil {
		t.Fatal("Load at SF 0.0001 (1 supplier) succeeded")
	}
	if n := scalar[int](t, ctx, conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'tpch'"); n != 0 {
		t.Errorf("a rejected load left its schema behind")
	}
}

func TestQueriesAreTheStandardTwentyTwo(t *testing.T) {
	known := []string{ObstacleSubquery, ObstacleExists, ObstacleNotExists, ObstacleInSubquery, ObstacleScalarSubquery,
		ObstacleCorrelated, ObstacleLimit, ObstacleView, ObstacleCountDistinct, ObstacleOuterJoin, ObstacleCase, ObstacleLike}
	subqueryKinds := []string{ObstacleExists, ObstacleNotExists, ObstacleInSubquery, ObstacleScalarSubquery, ObstacleCorrelated}
	limits := map[int]string{2: "100", 3: "10", 10: "20", 18: "100", 21: "100"}
	limitRE := regexp.MustCompile(`(?i)\blimit\s+(\d+)\s*$`)

	qs := Queries()
	if len(qs) != 22 {
		t.Fatalf("%d queries, want 22", len(qs))
	}
	var plain []int
	for i, q := range qs {
		if q.Num != i+1 || q.Name == "" || q.SQL == "" {
			t.Errorf("query %d: Num %d, Name %q", i+1, q.Num, q.Name)
		}
		for _, o := range q.Obstacles {
			if !slices.Contains(known, o) {
				t.Errorf("Q%d: unknown obstacle %q", q.Num, o)
			}
			if slices.Contains(subqueryKinds, o) && !q.Has(ObstacleSubquery) {
				t.Errorf("Q%d: %s without %s", q.Num, o, ObstacleSubquery)
			}
		}
		m := limitRE.FindStringSubmatch(q.SQL)
		if got := ""; m != nil {
			got = m[1]
			if got != limits[q.Num] {
				t.Errorf("Q%d: LIMIT %s, want %q", q.Num, got, limits[q.Num])
			}
		} else if limits[q.Num] != "" {
			t.Errorf("Q%d: no LIMIT %s", q.Num, limits[q.Num])
		}
		if q.Has(ObstacleLimit) != (m != nil) {
			t.Errorf("Q%d: obstacle %s disagrees with the text", q.Num, ObstacleLimit)
		}
		lower := strings.ToLower(q.SQL)
		if q.Has(ObstacleLike) != strings.Contains(lower, " like ") {
			t.Errorf("Q%d: obstacle %s disagrees with the text", q.Num, ObstacleLike)
		}
		if q.Has(ObstacleCase) != strings.Contains(lower, "case\n") {
			t.Errorf("Q%d: obstacle %s disagrees with the text", q.Num, ObstacleCase)
		}
		// Every select beyond the first and the derived tables' is a
		// subquery.
		derived := map[int]int{7: 1, 8: 1, 9: 1, 13: 1, 22: 1}[q.Num]
		if q.Has(ObstacleSubquery) != (strings.Count(lower, "select") > 1+derived) {
			t.Errorf("Q%d: obstacle %s disagrees with the text", q.Num, ObstacleSubquery)
		}
		if !q.Has(ObstacleSubquery) && !q.Has(ObstacleLimit) && !q.Has(ObstacleView) {
			plain = append(plain, q.Num)
		}
	}
	if want := []int{1, 5, 6, 7, 8, 9, 12, 13, 14, 19}; !slices.Equal(plain, want) {
		t.Errorf("queries without subquery, limit or view: %v, want %v", plain, want)
	}
	// Queries returns copies.
	qs[0].Obstacles = append(qs[0].Obstacles, "x")
	qs[1].SQL = ""
	if again := Queries(); len(again[0].Obstacles) != 0 || again[1].SQL == "" {
		t.Error("Queries shares its slices with callers")
	}
}
