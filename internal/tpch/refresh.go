package tpch

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The refresh functions take no scale factor: they derive it from the data
// (SF = max(c_custkey) / 150,000, so SF*1500 orders = max(c_custkey)/100)
// and the generator's key ranges from the current maxima, so that a caller
// needs nothing but the schema and a round number.

// refreshParams is the prm from-item of the generators for data already
// loaded: customer, part and supplier key ranges and the clerk count.
func refreshParams(s string) string {
	return fmt.Sprintf(`(SELECT (SELECT max(c_custkey) FROM %[1]s.customer) AS nc,
	(SELECT max(p_partkey) FROM %[1]s.part) AS np,
	(SELECT max(s_suppkey) FROM %[1]s.supplier) AS ns,
	(SELECT greatest(1, round(max(c_custkey) / 150.0))::integer FROM %[1]s.customer) AS nclerk) prm`, s)
}

// refreshCount is the spec's refresh size, SF*1500 orders.
func refreshCount(s string) string {
	return fmt.Sprintf("(SELECT greatest(1, max(c_custkey) / 100) FROM %s.customer)", s)
}

// execNoJIT runs sql (one or more statements) in one Exec with JIT
// compilation off: the generators' row estimates are guesses that trigger
// it, and compiling costs far more than the work it would speed up (over a
// second for RF1's few dozen rows). The setting is restored at the end, so
// a caller's transaction (db a pgx.Tx) keeps its own.
func execNoJIT(ctx context.Context, db DB, sql string) error {
	_, err := db.Exec(ctx, `SELECT set_config('tpch.saved_jit', current_setting('jit'), true), set_config('jit', 'off', true);
`+sql+`;
SELECT set_config('jit', current_setting('tpch.saved_jit'), true)`)
	return err
}

// roundGen is the generator of one refresh round.
func roundGen(round int) gen { return gen{base: int64(round) * roundSeed} }

// RF1 is the spec's new-sales refresh function: it inserts SF*1500 new
// orders, each with 1-7 lineitems generated like the initial ones, under
// the order keys just above the current maximum. Its rows depend only on
// round and the current contents, so replaying the same rounds on the same
// data reproduces them. It is one INSERT statement (one transaction).
func RF1(ctx context.Context, db DB, schema string, round int) error {
	s := pgx.Identifier{schema}.Sanitize()
	keys := fmt.Sprintf(`(SELECT m.maxo + i AS ok
		FROM (SELECT coalesce(max(o_orderkey), 0) AS maxo FROM %s.orders) m,
			generate_series(1, %s) i) keys`, s, refreshCount(s))
	if err := execNoJIT(ctx, db, ordersSQL(s, roundGen(round), refreshParams(s), keys)); err != nil {
		return fmt.Errorf("tpch: RF1 round %d: %w", round, err)
	}
	return nil
}

// RF2 is the spec's old-sales refresh function: it deletes SF*1500
// existing orders and all their lineitems. The victims are spread over
// the whole key range (ordered by a hash of the key under the round's
// seed) rather than a contiguous block, so that deletes hit old and new
// data alike. It is one DELETE statement (one transaction).
func RF2(ctx context.Context, db DB, schema string, round int) error {
	s := pgx.Identifier{schema}.Sanitize()
	g := roundGen(round)
	sql := fmt.Sprintf(`WITH victims AS MATERIALIZED (
	SELECT o_orderkey FROM %[1]s.orders ORDER BY %[2]s, o_orderkey LIMIT %[3]s
), lines AS (
	DELETE FROM %[1]s.lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM victims)
)
DELETE FROM %[1]s.orders WHERE o_orderkey IN (SELECT o_orderkey FROM victims)`,
		s, g.h("o_orderkey", colUpdate), refreshCount(s))
	if err := execNoJIT(ctx, db, sql); err != nil {
		return fmt.Errorf("tpch: RF2 round %d: %w", round, err)
	}
	return nil
}

// safeNations are the nations that no query names as a parameter, so
// renaming them changes query results (Q5's and Q9's groups, Q10's rows)
// without emptying any.
var safeNations = []int{0, 1, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23, 24}

// UpdateAll makes a small, deterministic (given round and the current
// contents) set of changes to every table, the kind of traffic that
// exercises incremental maintenance beyond RF1/RF2's inserts and deletes:
//
//   - region, nation: a name and comments change (only names no query
//     uses as a parameter, so results change but stay non-empty), one
//     comment becomes empty;
//   - supplier: one moves to another nation (with its phone's country
//     code), a twentieth get new balances, one a zero balance, one a
//     Customer Complaints/Recommends comment (Q16);
//   - customer: one moves nation (and phone code, Q22), a hundredth get
//     new balances, a few a new market segment, one an empty comment;
//   - part: a few get new type, manufacturer/brand, size and container,
//     and one is deleted and re-inserted with newly generated attributes;
//   - partsupp: a two-hundredth get new supply costs and quantities, one a
//     zero quantity;
//   - orders: a few get a new priority, a few an earlier date;
//   - lineitem, in a few orders: new quantity (and extended price), new
//     and zero discounts, new ship/receipt dates (with status and flag
//     rederived), swapped return flags, and one line renumbered, which
//     changes its primary key; in one more order every open line is
//     marked shipped;
//   - orders of the changed lineitems get their status and total price
//     rederived.
//
// Every value stays NOT NULL and within the column types. The statements
// go in one Exec (simple protocol), so they commit as one transaction.
func UpdateAll(ctx context.Context, db DB, schema string, round int) error {
	if round < 0 {
		return fmt.Errorf("tpch: UpdateAll round %d: must not be negative", round)
	}
	s := pgx.Identifier{schema}.Sanitize()
	g := roundGen(round)
	col := colUpdate
	next := func() int { col += 100; return col }
	// pick is a key in [1, max(key)-1] (1 when max is 1): never the
	// maximum, so that deleting and re-inserting it cannot move the max
	// that the next statement's pick is computed from.
	pick := func(table, key string) string {
		return fmt.Sprintf("(1 + %s)", g.rndN(fmt.Sprint(round), next(),
			fmt.Sprintf("(SELECT greatest(1, max(%s) - 1) FROM %s.%s)", key, s, table)))
	}
	// orders is n order keys chosen by hash; the expression gives the
	// same set in every statement because no statement changes o_orderkey.
	orders := func(n int) string {
		return fmt.Sprintf("(SELECT o_orderkey FROM %s.orders ORDER BY %s, o_orderkey LIMIT %d)", s, g.h("o_orderkey", next()), n)
	}
	renamed := func(name string) string {
		return fmt.Sprintf("regexp_replace(rtrim(%s), ' #[0-9]+$', '') || ' #' || %d", name, round%1000)
	}
	shiftedNation := func(n string) string { return fmt.Sprintf("((%s) + %d) %% 25", n, 1+round%24) }

	lines := orders(6) // the orders whose lineitems change
	shipped := next()  // seed of picking the order whose open lines ship
	var b strings.Builder
	add := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteString(";\n")
	}

	// region
	add("UPDATE %s.region SET r_comment = %s WHERE r_regionkey = %d", s, g.text("r_regionkey", next(), 31, 115), round%5)
	add("UPDATE %s.region SET r_name = %s WHERE r_regionkey = %d", s, renamed("r_name"), []int{0, 4}[round%2])

	// nation
	add("UPDATE %s.nation SET n_name = %s, n_comment = %s WHERE n_nationkey = %d",
		s, renamed("n_name"), g.text("n_nationkey", next(), 31, 114), safeNations[round%len(safeNations)])
	add("UPDATE %s.nation SET n_comment = '' WHERE n_nationkey = %d", s, safeNations[(round+7)%len(safeNations)])

	// supplier; a supplier moves only when its nation keeps two others,
	// so that no queried nation runs out of suppliers over many rounds.
	add(`UPDATE %[1]s.supplier SET s_nationkey = %[2]s, s_phone = (%[2]s + 10)::text || substr(s_phone, 3)
	WHERE s_suppkey = %[3]s
	AND (SELECT count(*) FROM %[1]s.supplier x WHERE x.s_nationkey = supplier.s_nationkey) > 2`,
		s, shiftedNation("s_nationkey"), pick("supplier", "s_suppkey"))
	add("UPDATE %s.supplier SET s_acctbal = %s WHERE s_suppkey %% 20 = %d",
		s, g.money("s_suppkey", next(), -99999, 999999), round%20)
	add("UPDATE %s.supplier SET s_acctbal = 0.00 WHERE s_suppkey = %s", s, pick("supplier", "s_suppkey"))
	add("UPDATE %s.supplier SET s_comment = rtrim(left(s_comment, 40)) || ' Customer ' || %s || ' %s' WHERE s_suppkey = %s",
		s, g.pick("s_suppkey", next(), verbs), []string{"Recommends", "Complaints"}[round%2], pick("supplier", "s_suppkey"))

	// customer
	add("UPDATE %[1]s.customer SET c_nationkey = %[2]s, c_phone = (%[2]s + 10)::text || substr(c_phone, 3) WHERE c_custkey = %[3]s",
		s, shiftedNation("c_nationkey"), pick("customer", "c_custkey"))
	add("UPDATE %s.customer SET c_acctbal = %s WHERE c_custkey %% 100 = %d",
		s, g.money("c_custkey", next(), -99999, 999999), round%100)
	add("UPDATE %s.customer SET c_mktsegment = %s WHERE c_custkey %% 250 = %d",
		s, g.pick("c_custkey", next(), segments), (round*7)%250)
	add("UPDATE %s.customer SET c_comment = '' WHERE c_custkey = %s", s, pick("customer", "c_custkey"))

	// part
	add(`UPDATE %[1]s.part SET p_type = %[2]s || ' ' || %[3]s || ' ' || %[4]s,
		p_mfgr = 'Manufacturer#' || v.m, p_brand = 'Brand#' || v.m || %[5]s,
		p_size = %[6]s, p_container = %[7]s || ' ' || %[8]s
	FROM (SELECT p_partkey AS k, %[9]s AS m FROM %[1]s.part WHERE p_partkey %% 500 = %[10]d) v
	WHERE p_partkey = v.k`,
		s, g.pick("p_partkey", next(), typeSyl1), g.pick("p_partkey", next(), typeSyl2), g.pick("p_partkey", next(), typeSyl3),
		g.rnd("p_partkey", next(), 1, 5), g.rnd("p_partkey", next(), 1, 50),
		g.pick("p_partkey", next(), contSyl1), g.pick("p_partkey", next(), contSyl2),
		g.rnd("p_partkey", next(), 1, 5), round%500)
	reborn := pick("part", "p_partkey")
	add("DELETE FROM %s.part WHERE p_partkey = %s", s, reborn)
	b.WriteString(partSQL(s, gen{base: g.base + int64(next())}, refreshParams(s), fmt.Sprintf("generate_series(%[1]s, %[1]s)", reborn)))
	b.WriteString(";\n")

	// partsupp
	add("UPDATE %s.partsupp SET ps_supplycost = %s, ps_availqty = %s WHERE ps_partkey %% 200 = %d",
		s, g.money("ps_partkey::bigint * 4 + ps_suppkey", next(), 100, 100000),
		g.rnd("ps_partkey::bigint * 4 + ps_suppkey", next(), 1, 9999), round%200)
	add(`UPDATE %[1]s.partsupp SET ps_availqty = 0 WHERE ps_partkey = %[2]s
	AND ps_suppkey = (SELECT min(ps_suppkey) FROM %[1]s.partsupp x WHERE x.ps_partkey = partsupp.ps_partkey)`,
		s, pick("part", "p_partkey"))

	// orders; dates only move earlier, so every l_shipdate stays after
	// its o_orderdate.
	add("UPDATE %s.orders SET o_orderpriority = %s WHERE o_orderkey IN %s",
		s, g.pick("o_orderkey", next(), priorites), orders(5))
	add("UPDATE %s.orders SET o_orderdate = greatest(date '%s', o_orderdate - %s::integer) WHERE o_orderkey IN %s",
		s, startDate, g.rnd("o_orderkey", next(), 1, 3), orders(3))

	// lineitem, in the orders of lines
	lk := "l_orderkey::bigint * 8 + l_linenumber"
	q := g.rnd(lk, next(), 1, 50)
	add("UPDATE %s.lineitem SET l_quantity = %s, l_extendedprice = %s * %s WHERE l_orderkey IN %s AND l_linenumber = 1",
		s, q, q, retailPrice("l_partkey"), lines)
	add("UPDATE %s.lineitem SET l_discount = %s WHERE l_orderkey IN %s AND l_linenumber = 2",
		s, g.money(lk, next(), 0, 10), lines)
	add("UPDATE %s.lineitem SET l_discount = 0.00 WHERE l_orderkey IN %s AND l_linenumber = 3", s, lines)
	add(`UPDATE %[1]s.lineitem l SET l_shipdate = v.sd, l_receiptdate = v.rd, l_linestatus = %[2]s, l_returnflag = %[3]s
	FROM (SELECT l_orderkey AS k, l_linenumber AS n, o_orderdate + %[4]s::integer AS sd,
			o_orderdate + %[4]s::integer + (l_receiptdate - l_shipdate) AS rd
		FROM %[1]s.lineitem JOIN %[1]s.orders ON o_orderkey = l_orderkey
		WHERE l_orderkey IN %[5]s AND l_linenumber = 1) v
	WHERE l.l_orderkey = v.k AND l.l_linenumber = v.n`,
		s, lineStatus("v.sd"), g.returnFlag("v.rd", "v.k::bigint * 8 + v.n", next()), g.rnd(lk, next(), 1, 121), lines)
	add(`UPDATE %s.lineitem SET l_returnflag = CASE l_returnflag WHEN 'R' THEN 'A' WHEN 'A' THEN 'R' ELSE l_returnflag END
	WHERE l_orderkey IN %s AND l_linenumber = 2`, s, lines)
	add(`UPDATE %[1]s.lineitem SET l_linenumber = l_linenumber + 1
	WHERE l_orderkey = (SELECT min(o_orderkey) FROM %[2]s o)
	AND l_linenumber = (SELECT max(x.l_linenumber) FROM %[1]s.lineitem x WHERE x.l_orderkey = lineitem.l_orderkey)`, s, lines)
	// One unfinished order placed shortly before CURRENTDATE ships all its
	// open lines, so line and order statuses change too.
	const window = "o_orderdate BETWEEN date '1995-03-01' AND date '1995-06-15'"
	add(`UPDATE %[1]s.lineitem SET l_shipdate = date '%[2]s', l_receiptdate = date '%[2]s' + (l_receiptdate - l_shipdate),
		l_linestatus = 'F', l_returnflag = 'N'
	WHERE l_orderkey = (SELECT o_orderkey FROM %[1]s.orders WHERE %[3]s AND o_orderstatus <> 'F' ORDER BY %[4]s, o_orderkey LIMIT 1)
	AND l_linestatus = 'O'`, s, currentDate, window, g.h("o_orderkey", shipped))

	// Rederive the orders of the changed lines: those of lines and, as
	// the shipped order is no longer identifiable by its status, every
	// order in its window whose stored values disagree.
	add(`UPDATE %[1]s.orders SET o_orderstatus = a.st, o_totalprice = a.tp
	FROM (SELECT l_orderkey AS k,
			CASE WHEN bool_and(l_linestatus = 'O') THEN 'O' WHEN bool_and(l_linestatus = 'F') THEN 'F' ELSE 'P' END AS st,
			round(sum(l_extendedprice * (1 + l_tax) * (1 - l_discount)), 2) AS tp
		FROM %[1]s.lineitem
		WHERE l_orderkey IN %[2]s OR l_orderkey IN (SELECT o_orderkey FROM %[1]s.orders WHERE %[3]s)
		GROUP BY l_orderkey) a
	WHERE o_orderkey = a.k AND (o_orderstatus, o_totalprice) IS DISTINCT FROM (a.st, a.tp)`, s, lines, window)

	if err := execNoJIT(ctx, db, strings.TrimSuffix(b.String(), ";\n")); err != nil {
		return fmt.Errorf("tpch: UpdateAll round %d: %w", round, err)
	}
	return nil
}
