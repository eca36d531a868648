// Package tpch provides a TPC-H-shaped workload for testing derived tables
// against a realistic multi-table schema: the eight tables, a generator that
// fills them entirely inside PostgreSQL, the two refresh functions, a set of
// updates that touches every table, and the 22 queries.
//
// The data is not the output of the official dbgen. It follows the spec's
// shape (key ranges, value vocabularies, date rules, the orderless third of
// customers, the partsupp/lineitem supplier relation) closely enough that
// the 22 queries return rows with their validation parameters at SF 0.01,
// and it is deterministic: every value is a hash of a row key and a column
// seed, so the same scale factor (or refresh round on the same contents)
// always produces the same rows. Generating in SQL keeps the loader free of
// external tools and loads SF 0.01 in one to two seconds.
//
// Everything takes the schema to work in; the queries are unqualified and
// run with that schema on the search_path.
package tpch

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the refresh functions need: *pgx.Conn, pgx.Tx and
// *pgxpool.Pool all satisfy it. Each function sends exactly one Exec
// without arguments, which pgx sends over the simple protocol; a function
// made of several statements therefore runs as one implicit transaction
// (or inside the caller's, when db is a pgx.Tx), so a change-capture test
// sees every refresh as one atomic transaction.
type DB interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// Counts is the number of rows each table gets at a scale factor, per the
// spec's scaling rules (lineitem varies around 4 per order, so it is not
// here).
type Counts struct {
	// Suppliers, Customers, Parts, PartSupps and Orders are SF times
	// 10,000, 150,000, 200,000, 800,000 and 1,500,000; region and nation
	// always have 5 and 25 rows.
	Suppliers, Customers, Parts, PartSupps, Orders int
}

// CountsFor returns the spec's table cardinalities for sf, rounded to whole
// rows, so that callers and tests can check a load without re-deriving the
// rules.
func CountsFor(sf float64) Counts {
	r := func(x float64) int { return int(math.Round(x * sf)) }
	return Counts{
		Suppliers: r(10_000),
		Customers: r(150_000),
		Parts:     r(200_000),
		PartSupps: 4 * r(200_000),
		Orders:    r(1_500_000),
	}
}

// Schema returns the DDL of the eight tables in schema (created if
// missing): the spec's columns and types, every column NOT NULL (TPC-H has
// no NULLs), the spec's primary keys and an index on every foreign-key
// column that the primary key does not already cover. The indexes are what
// make the correlated subqueries and key lookups of the queries and of
// incremental maintenance cheap.
func Schema(schema string) string {
	s := pgx.Identifier{schema}.Sanitize()
	return strings.ReplaceAll(`CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE {s}.region (
	r_regionkey integer NOT NULL,
	r_name char(25) NOT NULL,
	r_comment varchar(152) NOT NULL,
	PRIMARY KEY (r_regionkey)
);
CREATE TABLE {s}.nation (
	n_nationkey integer NOT NULL,
	n_name char(25) NOT NULL,
	n_regionkey integer NOT NULL,
	n_comment varchar(152) NOT NULL,
	PRIMARY KEY (n_nationkey)
);
CREATE TABLE {s}.supplier (
	s_suppkey integer NOT NULL,
	s_name char(25) NOT NULL,
	s_address varchar(40) NOT NULL,
	s_nationkey integer NOT NULL,
	s_phone char(15) NOT NULL,
	s_acctbal numeric(15,2) NOT NULL,
	s_comment varchar(101) NOT NULL,
	PRIMARY KEY (s_suppkey)
);
CREATE TABLE {s}.customer (
	c_custkey integer NOT NULL,
	c_name varchar(25) NOT NULL,
	c_address varchar(40) NOT NULL,
	c_nationkey integer NOT NULL,
	c_phone char(15) NOT NULL,
	c_acctbal numeric(15,2) NOT NULL,
	c_mktsegment char(10) NOT NULL,
	c_comment varchar(117) NOT NULL,
	PRIMARY KEY (c_custkey)
);
CREATE TABLE {s}.part (
	p_partkey integer NOT NULL,
	p_name varchar(55) NOT NULL,
	p_mfgr char(25) NOT NULL,
	p_brand char(10) NOT NULL,
	p_type varchar(25) NOT NULL,
	p_size integer NOT NULL,
	p_container char(10) NOT NULL,
	p_retailprice numeric(15,2) NOT NULL,
	p_comment varchar(23) NOT NULL,
	PRIMARY KEY (p_partkey)
);
CREATE TABLE {s}.partsupp (
	ps_partkey integer NOT NULL,
	ps_suppkey integer NOT NULL,
	ps_availqty integer NOT NULL,
	ps_supplycost numeric(15,2) NOT NULL,
	ps_comment varchar(199) NOT NULL,
	PRIMARY KEY (ps_partkey, ps_suppkey)
);
CREATE TABLE {s}.orders (
	o_orderkey integer NOT NULL,
	o_custkey integer NOT NULL,
	o_orderstatus char(1) NOT NULL,
	o_totalprice numeric(15,2) NOT NULL,
	o_orderdate date NOT NULL,
	o_orderpriority char(15) NOT NULL,
	o_clerk char(15) NOT NULL,
	o_shippriority integer NOT NULL,
	o_comment varchar(79) NOT NULL,
	PRIMARY KEY (o_orderkey)
);
CREATE TABLE {s}.lineitem (
	l_orderkey integer NOT NULL,
	l_partkey integer NOT NULL,
	l_suppkey integer NOT NULL,
	l_linenumber integer NOT NULL,
	l_quantity numeric(15,2) NOT NULL,
	l_extendedprice numeric(15,2) NOT NULL,
	l_discount numeric(15,2) NOT NULL,
	l_tax numeric(15,2) NOT NULL,
	l_returnflag char(1) NOT NULL,
	l_linestatus char(1) NOT NULL,
	l_shipdate date NOT NULL,
	l_commitdate date NOT NULL,
	l_receiptdate date NOT NULL,
	l_shipinstruct char(25) NOT NULL,
	l_shipmode char(10) NOT NULL,
	l_comment varchar(44) NOT NULL,
	PRIMARY KEY (l_orderkey, l_linenumber)
);
CREATE INDEX lineitem_l_partkey_idx ON {s}.lineitem (l_partkey);
CREATE INDEX lineitem_l_suppkey_idx ON {s}.lineitem (l_suppkey);
CREATE INDEX lineitem_l_partkey_l_suppkey_idx ON {s}.lineitem (l_partkey, l_suppkey);
CREATE INDEX orders_o_custkey_idx ON {s}.orders (o_custkey);
CREATE INDEX customer_c_nationkey_idx ON {s}.customer (c_nationkey);
CREATE INDEX supplier_s_nationkey_idx ON {s}.supplier (s_nationkey);
CREATE INDEX nation_n_regionkey_idx ON {s}.nation (n_regionkey);
CREATE INDEX partsupp_ps_suppkey_idx ON {s}.partsupp (ps_suppkey);
`, "{s}", s)
}

// Load creates the tables in schema (which must not hold them yet) and
// fills them with the data set for scale factor sf, then ANALYZEs them so
// that the queries get sensible plans right away. It runs in one
// transaction: on error nothing is left behind.
//
// sf scales the spec's cardinalities (CountsFor); it must give at least 4
// suppliers (sf >= 0.0004). The queries are known to return rows from SF
// 0.01 up; smaller data sets may leave some of them empty.
func Load(ctx context.Context, conn *pgx.Conn, schema string, sf float64) error {
	c := CountsFor(sf)
	if c.Suppliers < 4 || c.Customers < 3 || c.Orders < 1 {
		return fmt.Errorf("tpch: scale factor %g is too small (needs at least 4 suppliers)", sf)
	}
	if c.Orders > math.MaxInt32/4-1 {
		return fmt.Errorf("tpch: scale factor %g is too large for integer order keys", sf)
	}
	s := pgx.Identifier{schema}.Sanitize()
	prm := fmt.Sprintf("(SELECT %d AS nc, %d AS np, %d AS ns, %d AS nclerk) prm",
		c.Customers, c.Parts, c.Suppliers, max(1, int(math.Round(1000*sf))))
	g := gen{base: loadSeed}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("tpch: load: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	steps := []struct{ what, sql string }{
		// The generators' row estimates are guesses that would trigger
		// JIT compilation, which costs more than the work it speeds up.
		{"disable JIT", "SET LOCAL jit = off"},
		{"create tables", Schema(schema)},
		{"region", regionSQL(s, g)},
		{"nation", nationSQL(s, g)},
		{"supplier", supplierSQL(s, g, prm, "generate_series(1, prm.ns)")},
		{"part", partSQL(s, g, prm, "generate_series(1, prm.np)")},
		{"partsupp", partsuppSQL(s, g, prm)},
		{"customer", customerSQL(s, g, prm, "generate_series(1, prm.nc)")},
		// The spec's sparse order keys: the first 8 of every 32.
		{"orders and lineitem", ordersSQL(s, g, prm, fmt.Sprintf(
			"(SELECT (i - 1) / 8 * 32 + (i - 1) %% 8 + 1 AS ok FROM generate_series(1, %d) i) keys", c.Orders))},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql); err != nil {
			return fmt.Errorf("tpch: load %s: %w", st.what, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("tpch: load: commit: %w", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE "+strings.Join(qualified(s, tables...), ", ")); err != nil {
		return fmt.Errorf("tpch: load: analyze: %w", err)
	}
	return nil
}

// tables lists the eight tables, dimensions first.
var tables = []string{"region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"}

// Tables returns the names of the eight tables, dimensions before the
// tables that reference them, for callers that iterate over all of them
// (publishing, comparing, dropping).
func Tables() []string { return append([]string(nil), tables...) }

func qualified(s string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = s + "." + n
	}
	return out
}

func regionSQL(s string, g gen) string {
	rows := make([]string, len(regions))
	for i, r := range regions {
		rows[i] = fmt.Sprintf("(%d, '%s')", i, r)
	}
	return fmt.Sprintf("INSERT INTO %s.region SELECT k, name, %s FROM (VALUES %s) v(k, name)",
		s, g.text("k", colRegionComment, 31, 115), strings.Join(rows, ", "))
}

func nationSQL(s string, g gen) string {
	rows := make([]string, len(nations))
	for i, n := range nations {
		rows[i] = fmt.Sprintf("(%d, '%s', %d)", i, n.name, n.region)
	}
	return fmt.Sprintf("INSERT INTO %s.nation SELECT k, name, r, %s FROM (VALUES %s) v(k, name, r)",
		s, g.text("k", colNationComment, 31, 114), strings.Join(rows, ", "))
}

// supplierSQL inserts the suppliers whose keys the set-returning
// expression keys yields (as column k). Nations are assigned as a random
// permutation of the 25 within each block of 25 keys rather than
// independently, so that even SF 0.01's 100 suppliers cover every nation
// the queries name.
func supplierSQL(s string, g gen, prm, keys string) string {
	coprime := []string{}
	for a := 1; a < 25; a++ {
		if a%5 != 0 {
			coprime = append(coprime, fmt.Sprint(a))
		}
	}
	nat := fmt.Sprintf("((ARRAY[%s])[1 + %s %% %d] * ((k - 1) %% 25) + %s) %% 25",
		strings.Join(coprime, ","), g.h("(k - 1) / 25", colSuppNationMul), len(coprime), g.rnd("(k - 1) / 25", colSuppNationAdd, 0, 24))
	// About one supplier in a hundred complains or recommends (Q16).
	comment := fmt.Sprintf(`CASE %[1]s
		WHEN 0 THEN left(%[2]s, 40) || ' Customer ' || %[3]s || ' Complaints'
		WHEN 1 THEN left(%[2]s, 40) || ' Customer ' || %[3]s || ' Recommends'
		ELSE %[4]s END`,
		g.rnd("k", colSuppSpecial, 0, 99), g.text("k", colSuppComment, 10, 40), g.pick("k", colSuppSpecialWord, verbs),
		g.text("k", colSuppComment, 25, 100))
	return fmt.Sprintf(`INSERT INTO %[1]s.supplier
SELECT k, 'Supplier#' || lpad(k::text, 9, '0'), %[4]s, nat, %[5]s, %[6]s, %[7]s
FROM (SELECT k, %[3]s AS nat FROM %[2]s, %[8]s k) g`,
		s, prm, nat, g.vstring("k", colSuppAddr, 10, 40), g.phone("nat", "k", colSuppPhone),
		g.money("k", colSuppAcctbal, -99999, 999999), comment, keys)
}

// partSQL inserts the parts whose keys keys yields.
func partSQL(s string, g gen, prm, keys string) string {
	name := fmt.Sprintf(`(SELECT string_agg(c, ' ' ORDER BY r) FROM (
		SELECT c, %s AS r FROM unnest(%s) WITH ORDINALITY u(c, o) ORDER BY r LIMIT 5) five)`,
		g.h("k::bigint * 128 + o", colPartName), arrayLit(colors))
	return fmt.Sprintf(`INSERT INTO %[1]s.part
SELECT k, %[3]s, 'Manufacturer#' || m, 'Brand#' || m || %[4]s, %[5]s || ' ' || %[6]s || ' ' || %[7]s,
	%[8]s, %[9]s || ' ' || %[10]s, %[11]s, %[12]s
FROM (SELECT k, %[13]s AS m FROM %[2]s, %[14]s k) g`,
		s, prm, name, g.rnd("k", colPartBrand, 1, 5),
		g.pick("k", colPartType1, typeSyl1), g.pick("k", colPartType2, typeSyl2), g.pick("k", colPartType3, typeSyl3),
		g.rnd("k", colPartSize, 1, 50), g.pick("k", colPartCont1, contSyl1), g.pick("k", colPartCont2, contSyl2),
		retailPrice("k"), g.text("k", colPartComment, 5, 22), g.rnd("k", colPartMfgr, 1, 5), keys)
}

func partsuppSQL(s string, g gen, prm string) string {
	key := "p::bigint * 4 + i"
	return fmt.Sprintf(`INSERT INTO %[1]s.partsupp
SELECT p, %[3]s, %[4]s, %[5]s, %[6]s
FROM %[2]s, generate_series(1, prm.np) p, generate_series(0, 3) i`,
		s, prm, partSupp("p", "i", "prm.ns"), g.rnd(key, colPSQty, 1, 9999), g.money(key, colPSCost, 100, 100000),
		g.text(key, colPSComment, 49, 198))
}

// customerSQL inserts the customers whose keys keys yields.
func customerSQL(s string, g gen, prm, keys string) string {
	return fmt.Sprintf(`INSERT INTO %[1]s.customer
SELECT k, 'Customer#' || lpad(k::text, 9, '0'), %[3]s, nat, %[4]s, %[5]s, %[6]s, %[7]s
FROM (SELECT k, %[8]s AS nat FROM %[2]s, %[9]s k) g`,
		s, prm, g.vstring("k", colCustAddr, 10, 40), g.phone("nat", "k", colCustPhone),
		g.money("k", colCustAcctbal, -99999, 999999), g.pick("k", colCustSegment, segments),
		g.text("k", colCustComment, 29, 116), g.rnd("k", colCustNation, 0, 24), keys)
}

// ordersSQL inserts one order per key that the from-item keys yields (as
// column ok) and its 1-7 lineitems, in one statement so that o_totalprice
// and o_orderstatus are derived from the lineitems as the spec defines
// them. About one order in 500 is "big": seven lines of 40-50 units, so
// that Q18's sum(l_quantity) > 300 finds orders even at SF 0.01 (with
// uniform quantities fewer than two orders per 15,000 qualify).
func ordersSQL(s string, g gen, prm, keys string) string {
	lk := "o.ok::bigint * 8 + ln" // a lineitem's hash key inside y
	yk := "ok::bigint * 8 + ln"   // and outside it
	return fmt.Sprintf(`WITH o AS MATERIALIZED (
	SELECT ok, cust, od, prio, clerk, cmt, big, CASE WHEN big THEN 7 ELSE nl END AS nl
	FROM (SELECT ok, %[3]s AS cust, %[4]s AS od, %[5]s AS prio,
		'Clerk#' || lpad((1 + %[6]s)::text, 9, '0') AS clerk, %[7]s AS cmt,
		%[8]s = 0 AS big, %[9]s AS nl
		FROM %[2]s, %[10]s) x
), l AS MATERIALIZED (
	SELECT ok, ln, pk, sk, qty, qty * %[11]s AS ep, disc, tax, sd, od + cdo AS cd, sd + rdo AS rd,
		%[12]s AS instr, %[13]s AS smode, %[14]s AS cmt, %[21]s AS flagbit
	FROM (SELECT o.ok, o.od, ln, pk, %[15]s AS sk,
			CASE WHEN o.big THEN %[16]s ELSE %[17]s END::numeric AS qty,
			%[18]s AS disc, %[19]s AS tax, o.od + %[20]s::integer AS sd,
			%[22]s::integer AS cdo, %[23]s::integer AS rdo
		FROM %[2]s, o, generate_series(1, o.nl) ln, LATERAL (SELECT %[24]s AS pk) lp) y
), ins AS (
	INSERT INTO %[1]s.lineitem
	SELECT ok, pk, sk, ln, qty, ep, disc, tax,
		CASE WHEN rd <= date '%[25]s' THEN CASE WHEN flagbit = 0 THEN 'R' ELSE 'A' END ELSE 'N' END,
		%[26]s, sd, cd, rd, instr, smode, cmt
	FROM l
)
INSERT INTO %[1]s.orders
SELECT o.ok, o.cust, a.st, a.tp, o.od, o.prio, o.clerk, 0, o.cmt
FROM o JOIN (
	SELECT ok, CASE WHEN bool_and(sd > date '%[25]s') THEN 'O' WHEN bool_and(sd <= date '%[25]s') THEN 'F' ELSE 'P' END AS st,
		round(sum(ep * (1 + tax) * (1 - disc)), 2) AS tp
	FROM l GROUP BY ok
) a USING (ok)`,
		s, prm,
		g.custForOrder("ok", colOrdCust, "prm.nc"), g.orderDate("ok", colOrdDate), g.pick("ok", colOrdPrio, priorites),
		g.rndN("ok", colOrdClerk, "prm.nclerk"), g.text("ok", colOrdComment, 19, 78),
		g.rnd("ok", colOrdBig, 0, 499), g.rnd("ok", colOrdLines, 1, 7), keys,
		retailPrice("pk"), g.pick(yk, colLineInstruct, instructs), g.pick(yk, colLineMode, shipmodes),
		g.text(yk, colLineComment, 10, 43),
		partSupp("pk", g.rnd(lk, colLineSupp, 0, 3), "prm.ns"),
		g.rnd(lk, colLineBigQty, 40, 50), g.rnd(lk, colLineQty, 1, 50),
		g.money(lk, colLineDisc, 0, 10), g.money(lk, colLineTax, 0, 8), g.rnd(lk, colLineShip, 1, 121),
		g.h(yk, colLineFlag)+" % 2", g.rnd(lk, colLineCommit, 30, 90), g.rnd(lk, colLineReceipt, 1, 30),
		"1 + "+g.rndN(lk, colLinePart, "prm.np"),
		currentDate, lineStatus("sd"))
}
