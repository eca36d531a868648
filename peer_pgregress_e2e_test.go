package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// A second black-box probe, built from the scenarios of PostgreSQL's own
// regression suite (src/test/regress/sql/aggregates.sql, join.sql and
// select_distinct.sql; grouping sets left out) and of Materialize's SQL
// logic tests (test/sqllogictest/aggregates.slt). The data sets and the
// queries follow theirs where they fall inside docs/sql-support.md; the
// SQL is written for trellis-repl, every table has a primary key, and each
// scenario gets a list of writes to follow (the suites only read).
//
// The shape is TestPeerIVM's, with one difference: the cases come in
// groups, so that a hundred transforms share a few tables and one list of
// writes each, and the test stays within a minute. A group is a schema of
// its own ("@" in its SQL stands for "<group>."), a seed and a list of
// steps; each of its cases is a transform over those tables, named after
// the case, its target in public. Cases that read another case's target
// (chains) name it there.
// The groups' steps run in lockstep under one runner. After the build,
// every target is compared with its query by joinCheck (two-way EXCEPT
// ALL, then the engine's CompareNow); after each step, the targets of the
// groups the step wrote to by selfcheck.Compare; after the last step, all
// of them by joinCheck again.
//
// A refusal the documentation promises that the code does not keep
// carries a finding: it is reported by a subtest that skips with
// "FINDING: …" instead of failing the test. Where a refusal advises a
// rewrite, a case checks that the rewrite is accepted and kept exact.

// pgrCase is one transform of a group.
type pgrCase struct{ name, query string }

// pgrGroup is a schema, its rows and the writes its cases must follow.
type pgrGroup struct {
	name   string // the schema of its tables
	schema string
	seed   string
	steps  []string
	cases  []pgrCase
}

// pgrRefusal is a definition docs/sql-support.md says is refused: Apply
// must refuse it with code and a message containing want.
type pgrRefusal struct {
	name, query, code, want string
	finding                 string
}

// --- aggregates.sql: one wide table, every supported aggregate ---------

// pgrW is a table with a column of each type the aggregates read. The
// enum's declared order differs from its labels' text order, and 'awful'
// (used from step 8 on) sorts first although it was added last. sc is
// compared under an ICU collation, which orders 'a' before 'B' where "C"
// does not.
const pgrW = `CREATE TYPE @mood AS ENUM ('sad', 'meh', 'ok', 'happy');
ALTER TYPE @mood ADD VALUE 'awful' BEFORE 'sad';
CREATE TABLE @w (id int PRIMARY KEY, g int, i2 smallint, i4 int, i8 bigint, n numeric, f float8, iv interval,
  s text, sc text COLLATE "und-x-icu", d date, ts timestamp, u uuid, arr int[], e @mood, b bool, bits int, y bit(4), j jsonb);`

// pgrWSeed: group 1 holds the extremes of each integer type, a huge and a
// tiny numeric, ±Infinity, the empty string and BC/infinite dates; group 2
// NaN, -0 and a 10000-character string; group 3 only NULLs; a NULL group;
// group 4 ±Infinity that cancel to NaN.
const pgrWSeed = `INSERT INTO @w (id, g, i2, i4, i8, n, f, iv, s, sc, d, ts, u, arr, e, b, bits, y, j) VALUES
 (1, 1, 1, 1, 1, 1.5, 1.5, '1 day', 'apple', 'apple', '2020-01-01', '2020-01-01 10:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2}', 'ok', true, 5, B'0101', '{"a": 1}'),
 (2, 1, -32768, -2147483648, -9223372036854775808, -99999999999999999999.99999, -1e150, '-3 hours', '', 'Zebra', '4713-01-01 BC', '-infinity', '00000000-0000-0000-0000-000000000000', '{}', 'sad', false, 12, B'0100', '[]'),
 (3, 1, 32767, 2147483647, 9223372036854775807, 1e100, 'Infinity', '1 mon 2 days', 'Äpfel', 'äpfel', 'infinity', 'infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '{NULL,1}', 'happy', NULL, 0, B'1100', 'null'),
 (4, 2, 0, 0, 0, 0, 0, '0', 'banana', 'Banana', '2000-02-29', '2000-02-29 23:59:59.999999', '11111111-1111-1111-1111-111111111111', '{2}', 'meh', true, -1, B'0000', '{"b": [1, 2]}'),
 (5, 2, NULL, NULL, NULL, 'NaN', 'NaN', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (6, 2, -5, -5, -5, -0.000000000000000000001, '-0', '-1 year', repeat('x', 10000), 'B', '1999-12-31', '1999-12-31 23:59:59', '22222222-2222-2222-2222-222222222222', '{1,2,3}', 'ok', true, 3, B'1111', '"s"'),
 (7, 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (8, 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (9, NULL, 7, 7, 7, 7.000, 2.5, '1 day', 'Apple', 'apple', '2021-06-01', '2021-06-01 00:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,NULL}', 'sad', false, 7, B'0111', '{"a": 2}'),
 (10, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'é', 'é', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (11, 4, 1, 1, 1, 'Infinity', '-Infinity', '1 day', 'cherry', 'Cherry', '2022-01-01', '2022-01-01 00:00', '33333333-3333-3333-3333-333333333333', '{3}', 'happy', true, 1, B'0001', '{"c": 3}'),
 (12, 4, 2, 2, 2, '-Infinity', 'Infinity', '2 days', 'cherry', 'cherry', '2022-01-02', '2022-01-02 00:00', '33333333-3333-3333-3333-333333333333', '{3,1}', 'sad', false, 2, B'0010', '{"c": 4}');`

// pgrWSteps: a second int8 maximum (the sum leaves bigint), the minimum
// of everything deleted, a group key moved, every value of a group
// updated, a group turned all-NULL, a group emptied, the NULL group grown,
// the late enum value and a collation-sensitive string, primary keys
// moved, the table emptied, refilled, truncated and written again.
var pgrWSteps = []string{
	`INSERT INTO @w (id, g, i2, i4, i8, n, f, iv, s, sc, d, ts, u, arr, e, b, bits, y, j) VALUES
		(13, 1, 32767, 2147483647, 9223372036854775807, 0.5, 2.25, '1 day', 'Apple', 'APPLE', '2020-01-01', '2020-01-01 10:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2}', 'ok', true, 5, B'1000', '{"a": 1}')`,
	`DELETE FROM @w WHERE id = 2`,
	`UPDATE @w SET g = 2 WHERE id = 3`,
	`UPDATE @w SET n = n * 2, f = f / 2, i4 = -i4, i8 = -i8, s = upper(s), sc = lower(sc), iv = iv * 2, d = d + 1,
		ts = ts + interval '1 hour', arr = arr || 9, e = 'happy', b = NOT b, bits = bits # 6, y = ~y, j = jsonb_build_array(j) WHERE g = 2`,
	`UPDATE @w SET i2 = NULL, i4 = NULL, i8 = NULL, n = NULL, f = NULL, iv = NULL, s = NULL, sc = NULL, d = NULL, ts = NULL,
		u = NULL, arr = NULL, e = NULL, b = NULL, bits = NULL, y = NULL, j = NULL WHERE g = 1`,
	`DELETE FROM @w WHERE g = 3`,
	`INSERT INTO @w (id, g, s, sc, n, f, i4, e) VALUES (14, NULL, 'aardvark', 'Aardvark', -1, -1, -1, 'meh'); UPDATE @w SET g = NULL WHERE g = 4`,
	`UPDATE @w SET e = 'awful', sc = 'Ábc', s = 'Ábc' WHERE id IN (1, 4, 9); UPDATE @w SET u = '00000000-0000-0000-0000-000000000001' WHERE id = 4`,
	`UPDATE @w SET id = id + 100 WHERE id % 2 = 0`,
	`DELETE FROM @w`,
	pgrWSeed,
	`TRUNCATE @w`,
	`INSERT INTO @w (id, g, i4, s, sc, e, b) VALUES (1, 5, 10, 'solo', 'Solo', 'ok', true), (2, 5, NULL, NULL, NULL, NULL, NULL)`,
}

var pgrAggCases = []pgrCase{
	// count(*), count(x), count(DISTINCT x) over NULLs, NaN and -0.
	{name: "agg_count", query: `SELECT g, count(*) AS n, count(i4) AS n_i4, count(s) AS n_s, count(DISTINCT s) AS nd_s,
		count(DISTINCT e) AS nd_e, count(DISTINCT f) AS nd_f FROM @w GROUP BY g`},
	{name: "agg_count_all", query: `SELECT count(*) AS n, count(f) AS n_f, count(DISTINCT g) AS nd_g, count(DISTINCT n) AS nd_n,
		count(DISTINCT sc) AS nd_sc FROM @w`},
	// sum and avg over smallint, int and bigint extremes (the bigint sum leaves int64).
	{name: "agg_sum_int", query: `SELECT g, sum(i2) AS s2, sum(i4) AS s4, sum(i8) AS s8, sum(DISTINCT i4) AS sd4 FROM @w GROUP BY g`},
	{name: "agg_avg_int", query: `SELECT g, avg(i2) AS a2, avg(i4) AS a4, avg(i8) AS a8 FROM @w GROUP BY g`},
	// numeric: huge, tiny, NaN, ±Infinity, scales.
	{name: "agg_numeric", query: `SELECT g, sum(n) AS s, avg(n) AS a, count(n) AS c, sum(DISTINCT n) AS sd FROM @w GROUP BY g`},
	// float8: NaN, ±Infinity, -0 (values chosen so the order of addition does not matter).
	{name: "agg_float", query: `SELECT g, sum(f) AS s, avg(f) AS a FROM @w GROUP BY g`},
	{name: "agg_interval", query: `SELECT g, sum(iv) AS s, avg(iv) AS a FROM @w GROUP BY g`},
	// aggregates.sql's statistics, ordered-set and user-defined aggregates (ADR 0031): numeric
	// statistics in any order, floating-point ones ordered inside the call.
	{name: "agg_stat_numeric", query: `SELECT g, var_samp(n) AS vs, stddev_pop(n) AS sp, variance(i4) AS v4 FROM @w GROUP BY g`},
	{name: "agg_stat_float", query: `SELECT g, stddev_pop(f ORDER BY id) AS sp, covar_pop(f, i4 ORDER BY id) AS cp,
		regr_slope(f, i4 ORDER BY id) AS rs FROM @w GROUP BY g`},
	{name: "agg_ordered_set", query: `SELECT g, percentile_cont(0.5) WITHIN GROUP (ORDER BY f) AS pc,
		percentile_disc(0.5) WITHIN GROUP (ORDER BY s) AS pd, mode() WITHIN GROUP (ORDER BY i4) AS m,
		rank(3) WITHIN GROUP (ORDER BY i4) AS r FROM @w GROUP BY g`},
	{name: "agg_user", query: `SELECT g, pgr_sum(i4) AS s FROM @w GROUP BY g`},
	// Every kind of aggregate without GROUP BY: one row, counts 0 and NULLs over no rows.
	{name: "agg_empty_input", query: `SELECT count(*) AS n, sum(i8) AS s8, avg(i4) AS a4, sum(n) AS sn, avg(n) AS an, sum(f) AS sf,
		sum(iv) AS siv, min(s) AS mn, bool_and(b) AS ba, bit_or(bits) AS bo, string_agg(s, ',' ORDER BY id) AS sa,
		array_agg(id ORDER BY id) AS ids, jsonb_agg(j ORDER BY id) AS ja, jsonb_object_agg(id, e) AS jo FROM @w`},
	// min/max over text under the default collation ("C"), then under an
	// ICU collation: a column's own and one written in the call.
	{name: "agg_minmax_text", query: `SELECT g, min(s) AS mn, max(s) AS mx, max(sc COLLATE "C") AS mx_sc_c FROM @w GROUP BY g`},
	{name: "agg_minmax_collation", query: `SELECT g, min(s COLLATE "und-x-icu") AS mn_icu, max(s COLLATE "und-x-icu") AS mx_icu,
		min(sc) AS mn_sc, max(sc) AS mx_sc FROM @w GROUP BY g`},
	{name: "agg_minmax_temporal", query: `SELECT g, min(d) AS mn_d, max(d) AS mx_d, min(ts) AS mn_ts, max(ts) AS mx_ts,
		min(iv) AS mn_iv, max(iv) AS mx_iv FROM @w GROUP BY g`},
	// uuid has no min/max in PostgreSQL 15 (see the refusals): its text form.
	{name: "agg_minmax_other", query: `SELECT g, min(u::text) AS mn_u, max(u::text) AS mx_u, min(arr) AS mn_arr, max(arr) AS mx_arr,
		min(e) AS mn_e, max(e) AS mx_e, min(n) AS mn_n, max(n) AS mx_n, min(f) AS mn_f, max(f) AS mx_f,
		min(i8) AS mn_i8, max(i2) AS mx_i2 FROM @w GROUP BY g`},
	{name: "agg_minmax_all", query: `SELECT min(s) AS mn_s, max(s) AS mx_s, min(e) AS mn_e, max(ts) AS mx_ts, min(arr) AS mn_arr,
		max(n) AS mx_n FROM @w`},
	{name: "agg_bool", query: `SELECT g, bool_and(b) AS ba, bool_or(b) AS bo, every(b) AS ev, bool_and(NOT b) AS nba,
		bool_or(i4 > 0) AS pos, every(s <> '') AS nonempty FROM @w GROUP BY g`},
	{name: "agg_bit", query: `SELECT g, bit_and(bits) AS ba, bit_or(bits) AS bo, bit_xor(bits) AS bx, bit_and(i2) AS ba2,
		bit_or(i8) AS bo8, bit_and(y) AS bay, bit_or(y) AS boy, bit_xor(y) AS bxy FROM @w GROUP BY g`},
	// Ordered aggregates, with DISTINCT and NULLS FIRST/LAST.
	{name: "agg_string_agg", query: `SELECT g, string_agg(s, ',' ORDER BY id) AS sa, string_agg(DISTINCT s, '|' ORDER BY s DESC) AS sd
		FROM @w GROUP BY g`},
	{name: "agg_string_agg_collation", query: `SELECT g, string_agg(sc, '' ORDER BY sc, id) AS ssc FROM @w GROUP BY g`},
	{name: "agg_array_agg", query: `SELECT g, array_agg(i4 ORDER BY id) AS a, array_agg(DISTINCT e ORDER BY e DESC NULLS LAST) AS ad,
		array_agg(s ORDER BY s NULLS FIRST, id) AS sa, array_agg(d ORDER BY d, id) AS da FROM @w GROUP BY g`},
	{name: "agg_jsonb_agg", query: `SELECT g, jsonb_agg(j ORDER BY id) AS ja, jsonb_agg(n ORDER BY id) AS jn,
		jsonb_agg(DISTINCT b ORDER BY b) AS jb FROM @w GROUP BY g`},
	// Unique keys, and repeated keys whose last value by the ORDER BY wins.
	{name: "agg_jsonb_object_agg", query: `SELECT g, jsonb_object_agg(id, i4) AS o,
		jsonb_object_agg(coalesce(s, '<null>'), n ORDER BY id) AS od FROM @w GROUP BY g`},
	// FILTER (WHERE …), including one that guards the argument (aggregates.sql: sum(1/ten) FILTER (WHERE ten > 0)).
	{name: "agg_filter", query: `SELECT g, count(*) FILTER (WHERE i4 > 0) AS pos, sum(n) FILTER (WHERE n < 100) AS small,
		max(s) FILTER (WHERE s <> '') AS mx, min(i8) FILTER (WHERE i8 > 0) AS mn, avg(f) FILTER (WHERE f = f) AS no_nan,
		array_agg(id ORDER BY id) FILTER (WHERE b) AS ids FROM @w GROUP BY g`},
	{name: "agg_filter_guard", query: `SELECT g, sum(1000 / i4) FILTER (WHERE i4 <> 0) AS q, max(100 % i2) FILTER (WHERE i2 <> 0) AS r
		FROM @w GROUP BY g`},
	{name: "agg_filter_all", query: `SELECT count(*) FILTER (WHERE b) AS t, count(*) FILTER (WHERE NOT b) AS f,
		count(*) FILTER (WHERE b IS NULL) AS u, sum(i4) FILTER (WHERE e >= 'ok') AS s_ok FROM @w`},
	// HAVING with and without GROUP BY.
	{name: "agg_having", query: `SELECT g, count(*) AS n, sum(i4) AS s FROM @w GROUP BY g HAVING count(i4) > 1 OR sum(n) IS NULL`},
	{name: "agg_having_all", query: `SELECT count(*) AS n, max(s) AS mx FROM @w HAVING count(*) > 5`},
	{name: "agg_having_bool", query: `SELECT min(i4) AS mn, max(e) AS mx FROM @w HAVING bool_or(b)`},
	// GROUP BY expressions, a constant, an ordinal, a CASE over a group expression.
	{name: "agg_group_expr", query: `SELECT g % 2 AS parity, lower(s) AS ls, count(*) AS n, sum(i4) AS s FROM @w GROUP BY g % 2, lower(s)`},
	{name: "agg_group_const", query: `SELECT 'all' AS k, count(*) AS n, sum(i4) AS s FROM @w GROUP BY k`},
	{name: "agg_const_item", query: `SELECT 'dummy' AS d, g, sum(i4) AS s FROM @w GROUP BY g`},
	{name: "agg_group_ordinal", query: `SELECT 2 * i2 AS dbl, count(*) AS n FROM @w GROUP BY 1`},
	{name: "agg_group_case", query: `SELECT s || 'a' AS sa, CASE s || 'a' WHEN 'applea' THEN 1 ELSE 0 END AS c, count(*) AS n
		FROM @w GROUP BY s || 'a'`},
	// A GROUP BY column that is not selected, under an expression that is not injective.
	{name: "agg_group_hidden_key", query: `SELECT length(s) AS l, count(*) AS n FROM @w GROUP BY s`},
	{name: "agg_group_expr_over_key", query: `SELECT s || '!' AS x, count(*) AS n FROM @w GROUP BY s`},
	// Expressions over aggregates.
	{name: "agg_expr_over_aggs", query: `SELECT g, sum(i4)::numeric / nullif(count(*), 0) AS ratio, max(i8)::numeric - min(i8) AS spread,
		coalesce(string_agg(s, '' ORDER BY id), '<none>') AS cat, count(*) FILTER (WHERE b) * 100 / count(*) AS pct_b FROM @w GROUP BY g`},
	// aggregates.sql: ORDER BY inside min does not make it order-dependent, nor NULL keys strict.
	{name: "agg_min_order_by", query: `SELECT g, min(i4 ORDER BY s) AS mn, max(s ORDER BY i4) AS mx FROM @w GROUP BY g`},
	// The rewrite the refusal of SELECT DISTINCT max(…) advises: the distinct rows of a grouped query.
	{name: "agg_distinct_of_grouped", query: `SELECT DISTINCT x.n FROM (SELECT g, count(*) AS n FROM @w GROUP BY g) AS x`},
	// A chain: an aggregate over agg_count's target (keyed by __id: g is nullable).
	{name: "chain_agg_totals", query: `SELECT count(*) AS groups, sum(n) AS rows, sum(n_i4) AS with_i4, max(nd_s) AS most_distinct,
		count(g) AS keyed FROM agg_count`},
}

// --- join.sql: J1_TBL and J2_TBL, with NULL and repeated keys ----------

const (
	pgrJ = `CREATE TABLE @j1 (id1 int PRIMARY KEY, i int, j int, t text);
CREATE TABLE @j2 (id2 int PRIMARY KEY, i int, k int);
CREATE INDEX ON @j1 (i); CREATE INDEX ON @j1 (j); CREATE INDEX ON @j2 (i); CREATE INDEX ON @j2 (k);`
	pgrJ1Seed = `INSERT INTO @j1 VALUES (1, 1, 4, 'one'), (2, 2, 3, 'two'), (3, 3, 2, 'three'), (4, 4, 1, 'four'), (5, 5, 0, 'five'),
 (6, 6, 6, 'six'), (7, 7, 7, 'seven'), (8, 8, 8, 'eight'), (9, 0, NULL, 'zero'), (10, NULL, NULL, 'null'), (11, NULL, 0, 'zero');`
	pgrJ2Seed = `INSERT INTO @j2 VALUES (1, 1, -1), (2, 2, 2), (3, 3, -3), (4, 2, 4), (5, 5, -5), (6, 5, -5), (7, 0, NULL), (8, NULL, NULL), (9, NULL, 0);`
)

var pgrJSteps = []string{
	`INSERT INTO @j2 VALUES (10, 4, 40), (11, NULL, 4), (12, 1, 1)`,
	`UPDATE @j1 SET i = 2 WHERE t = 'one'`,
	`DELETE FROM @j2 WHERE i = 5`,
	`UPDATE @j2 SET i = NULL WHERE id2 = 2; UPDATE @j1 SET j = NULL, t = '' WHERE i = 3`,
	`INSERT INTO @j1 VALUES (12, 9, -9, repeat('long', 3000)), (13, NULL, NULL, NULL), (14, 1, 5, 'uno')`,
	`UPDATE @j1 SET i = j, j = i`,
	`UPDATE @j2 SET k = -k, i = i + 1 WHERE i IS NOT NULL`,
	`DELETE FROM @j1 WHERE i IS NULL`,
	`UPDATE @j1 SET id1 = id1 + 100 WHERE id1 < 5; UPDATE @j2 SET id2 = id2 + 100 WHERE id2 % 3 = 0`,
	`TRUNCATE @j2`,
	pgrJ2Seed,
	`TRUNCATE @j1`,
	pgrJ1Seed,
	`WITH d AS (DELETE FROM @j1 WHERE i = 3 RETURNING 0), u AS (UPDATE @j2 SET i = 3 WHERE i = 5 RETURNING 0) SELECT`,
}

var pgrJCases = []pgrCase{
	{name: "j_cross", query: `SELECT j1.i AS i1, j1.j, j1.t, j2.i AS i2, j2.k FROM @j1 j1 CROSS JOIN @j2 j2`},
	{name: "j_cross3", query: `SELECT j1.t, a.k AS ak, b.k AS bk FROM @j1 j1 CROSS JOIN @j2 a CROSS JOIN @j2 b`},
	{name: "j_using", query: `SELECT i, j, t, k FROM @j1 INNER JOIN @j2 USING (i)`},
	// A USING join's alias (PostgreSQL 14) may be written; reading it is a refusal.
	{name: "j_using_alias", query: `SELECT i, j, t, k FROM @j1 JOIN @j2 USING (i) AS x`},
	{name: "j_natural", query: `SELECT * FROM @j1 NATURAL JOIN @j2`},
	{name: "j_on_i_k", query: `SELECT j1.i, j1.j, j1.t, j2.i AS i2, j2.k FROM @j1 j1 JOIN @j2 j2 ON (j1.i = j2.k)`},
	{name: "j_non_equi", query: `SELECT j1.i, j1.j, j1.t, j2.i AS i2, j2.k FROM @j1 j1 JOIN @j2 j2 ON (j1.i <= j2.k)`},
	{name: "j_left_using", query: `SELECT i, j, t, k FROM @j1 LEFT OUTER JOIN @j2 USING (i) ORDER BY i, k, t`},
	{name: "j_right_using", query: `SELECT i, j, t, k FROM @j1 RIGHT OUTER JOIN @j2 USING (i)`},
	{name: "j_full_using", query: `SELECT i, j, t, k FROM @j1 FULL JOIN @j2 USING (i)`},
	{name: "j_left_where_k", query: `SELECT i, j, t, k FROM @j1 LEFT JOIN @j2 USING (i) WHERE (k = 1)`},
	{name: "j_left_where_i", query: `SELECT i, j, t, k FROM @j1 LEFT JOIN @j2 USING (i) WHERE (i = 1)`},
	// IS NOT DISTINCT FROM: NULL keys match.
	{name: "j_indf", query: `SELECT j1.t, j1.i, j2.k FROM @j1 j1 JOIN @j2 j2 ON j1.i IS NOT DISTINCT FROM j2.i`},
	{name: "j_left_indf", query: `SELECT j1.t, j1.i, j2.id2, j2.k FROM @j1 j1 LEFT JOIN @j2 j2 ON j1.i IS NOT DISTINCT FROM j2.i`},
	// An inequality beside the equality, an expression key, self-joins.
	{name: "j_eq_and_lt", query: `SELECT j1.t, j1.j, j2.id2, j2.k FROM @j1 j1 LEFT JOIN @j2 j2 ON j1.i = j2.i AND j1.j < j2.k`},
	{name: "j_expr", query: `SELECT j1.t, j2.k FROM @j1 j1 JOIN @j2 j2 ON j1.i + 1 = j2.i`},
	{name: "j_self", query: `SELECT a.t AS at, b.t AS bt FROM @j1 a JOIN @j1 b ON a.i = b.j`},
	{name: "j_self_left_expr", query: `SELECT a.id1 AS a, b.id1 AS b FROM @j1 a LEFT JOIN @j1 b ON a.j = b.i - 1`},
	// FULL JOIN ON true / ON false (one side may be empty).
	{name: "j_full_true", query: `SELECT a.i AS ai, b.k AS bk FROM @j1 a FULL JOIN @j2 b ON true`},
	{name: "j_full_false", query: `SELECT a.i AS ai, b.k AS bk FROM @j1 a FULL JOIN @j2 b ON false`},
	// Aggregates over outer joins.
	{name: "j_agg_left", query: `SELECT j1.i, count(*) AS n, count(j2.k) AS nk, sum(j2.k) AS sk, min(j2.k) AS mn,
		string_agg(j1.t, ',' ORDER BY j1.id1, j2.id2) AS ts FROM @j1 j1 LEFT JOIN @j2 j2 ON j1.i = j2.i GROUP BY j1.i`},
	{name: "j_agg_full_all", query: `SELECT count(*) AS n, count(j1.id1) AS n1, count(j2.id2) AS n2, sum(j2.k) AS sk
		FROM @j1 j1 FULL JOIN @j2 j2 USING (i)`},
	{name: "j_distinct", query: `SELECT DISTINCT i, k FROM @j1 FULL JOIN @j2 USING (i)`},
	// The rewrites refusals advise: IN (subquery) inside FILTER as a LEFT JOIN to
	// its distinct values; a correlated scalar count and a LATERAL count as a
	// LEFT JOIN to a grouped subquery; ARRAY(SELECT … GROUP BY …) as a CROSS
	// JOIN to an array_agg over a grouped subquery.
	{name: "j_filter_in_rewrite", query: `SELECT sum(j1.j) FILTER (WHERE s.v IS NOT NULL) AS s_in, count(*) AS n
		FROM @j1 j1 LEFT JOIN (SELECT DISTINCT i AS v FROM @j2 WHERE i < 100) AS s ON s.v = j1.i`},
	{name: "j_scalar_rewrite", query: `SELECT j1.id1, coalesce(s.m, 0) AS n FROM @j1 j1 LEFT JOIN (SELECT i, count(*) AS m FROM @j2 GROUP BY i) AS s ON s.i = j1.i`},
	{name: "j_array_rewrite", query: `SELECT j1.id1, s.a FROM @j1 j1 CROSS JOIN
		(SELECT array_agg(x.s ORDER BY x.s) AS a FROM (SELECT sum(i) AS s FROM @j2 GROUP BY k) AS x) AS s`},
	// What those refusals were before ADR 0030, as written: a subquery in
	// FILTER, in an aggregate's argument, and ARRAY(SELECT … GROUP BY …).
	{name: "j_filter_in", query: `SELECT sum(j1.j) FILTER (WHERE j1.i IN (SELECT i FROM @j2 WHERE i < 100)) AS s_in, count(*) AS n FROM @j1 j1`},
	{name: "j_scalar_in_aggregate", query: `SELECT max((SELECT j2.k FROM @j2 j2 WHERE j2.id2 = j1.id1)) AS m FROM @j1 j1`},
	{name: "j_array_subquery", query: `SELECT j1.id1, ARRAY(SELECT sum(i) FROM @j2 GROUP BY k ORDER BY 1) AS a FROM @j1 j1`},
	// A subquery in HAVING reading an aggregate of the outer query.
	{name: "j_exists_in_having", query: `SELECT j1.i, sum(DISTINCT j1.j) AS s FROM @j1 j1 GROUP BY j1.i
		HAVING EXISTS (SELECT 1 FROM @j2 j WHERE sum(DISTINCT j1.j) = j.k)`},
	// Functions in FROM, refused before ADR 0034: a constant series and one
	// bounded by a column (NULL bounds give no rows).
	{name: "j_function_in_from", query: `SELECT j1.id1, g FROM @j1 j1, generate_series(1, 3) g`},
	{name: "j_function_lateral", query: `SELECT j1.id1, g FROM @j1 j1, generate_series(1, j1.j % 4) g`},
	// GROUP BY (), accepted since ADR 0031: one row, as without GROUP BY.
	{name: "j_group_by_empty", query: `SELECT count(*) AS n, sum(k) AS s FROM @j2 GROUP BY ()`},
	// Chains: a join reading an aggregate's target, and an aggregate reading an outer join's.
	{name: "j_keycount", query: `SELECT i, count(*) AS n FROM @j2 GROUP BY i`},
	{name: "chain_j_keys", query: `SELECT j1.t, c.n FROM @j1 j1 LEFT JOIN j_keycount c ON c.i IS NOT DISTINCT FROM j1.i`},
	{name: "chain_j_full", query: `SELECT i, count(*) AS n, count(k) AS nk, count(t) AS nt FROM j_full_using GROUP BY i`},
}

// --- join.sql: the multiway FULL JOIN of t1, t2, t3 and its subqueries --

const (
	pgrM = `CREATE TABLE @t1 (id int PRIMARY KEY, name text, n int);
CREATE TABLE @t2 (id int PRIMARY KEY, name text, n int);
CREATE TABLE @t3 (id int PRIMARY KEY, name text, n int);
CREATE INDEX ON @t1 (name); CREATE INDEX ON @t2 (name); CREATE INDEX ON @t3 (name);`
	pgrMSeed = `INSERT INTO @t1 VALUES (1, 'bb', 11);
INSERT INTO @t2 VALUES (1, 'bb', 12), (2, 'cc', 22), (3, 'ee', 42);
INSERT INTO @t3 VALUES (1, 'bb', 13), (2, 'cc', 23), (3, 'dd', 33);`
)

var pgrMSteps = []string{
	`INSERT INTO @t1 VALUES (2, 'cc', 21), (3, 'dd', 31)`,
	`UPDATE @t1 SET n = 2 WHERE name = 'bb'`,
	`DELETE FROM @t3 WHERE name = 'cc'`,
	`UPDATE @t2 SET name = NULL WHERE name = 'cc'`,
	`INSERT INTO @t3 VALUES (4, NULL, 0), (5, 'ee', 43), (6, '', NULL)`,
	`UPDATE @t3 SET name = 'bb' WHERE name = 'dd'`,
	`INSERT INTO @t2 VALUES (4, '', -1)`,
	`DELETE FROM @t1`,
	`INSERT INTO @t1 VALUES (1, 'bb', 11), (4, 'ee', 2)`,
	`TRUNCATE @t2`,
	`INSERT INTO @t2 VALUES (1, 'bb', 12), (2, 'cc', 22), (3, 'ee', 42)`,
	`UPDATE @t1 SET name = upper(name)`,
	`TRUNCATE @t1, @t3`,
}

var pgrMCases = []pgrCase{
	{name: "m_full3", query: `SELECT name, t1.n AS n1, t2.n AS n2, t3.n AS n3 FROM @t1 t1 FULL JOIN @t2 t2 USING (name) FULL JOIN @t3 t3 USING (name)`},
	{name: "m_sub_inner", query: `SELECT name, s2.n AS n2, s3.n AS n3 FROM (SELECT * FROM @t2) AS s2 INNER JOIN (SELECT * FROM @t3) s3 USING (name)`},
	{name: "m_sub_left", query: `SELECT name, s2.n AS n2, s3.n AS n3 FROM (SELECT * FROM @t2) AS s2 LEFT JOIN (SELECT * FROM @t3) s3 USING (name)`},
	{name: "m_sub_full", query: `SELECT name, s2.n AS n2, s3.n AS n3 FROM (SELECT * FROM @t2) AS s2 FULL JOIN (SELECT * FROM @t3) s3 USING (name)`},
	// Constants in a subquery on the NULL-extended side must go NULL.
	{name: "m_natural_inner", query: `SELECT * FROM (SELECT name, n AS s2_n, 2 AS s2_2 FROM @t2) AS s2
		NATURAL INNER JOIN (SELECT name, n AS s3_n, 3 AS s3_2 FROM @t3) s3`},
	{name: "m_natural_left", query: `SELECT * FROM (SELECT name, n AS s2_n, 2 AS s2_2 FROM @t2) AS s2
		NATURAL LEFT JOIN (SELECT name, n AS s3_n, 3 AS s3_2 FROM @t3) s3`},
	{name: "m_natural_full", query: `SELECT * FROM (SELECT name, n AS s2_n, 2 AS s2_2 FROM @t2) AS s2
		NATURAL FULL JOIN (SELECT name, n AS s3_n, 3 AS s3_2 FROM @t3) s3`},
	{name: "m_natural_full3", query: `SELECT * FROM (SELECT name, n AS s1_n, 1 AS s1_1 FROM @t1) AS s1
		NATURAL FULL JOIN (SELECT name, n AS s2_n, 2 AS s2_2 FROM @t2) AS s2
		NATURAL FULL JOIN (SELECT name, n AS s3_n, 3 AS s3_2 FROM @t3) s3`},
	{name: "m_natural_nested", query: `SELECT * FROM (SELECT name, n AS s1_n FROM @t1) AS s1
		NATURAL FULL JOIN (SELECT * FROM (SELECT name, n AS s2_n, 2 AS s2_2 FROM @t2) AS s2
		                   NATURAL FULL JOIN (SELECT name, n AS s3_n FROM @t3) AS s3) ss2`},
	// A constant as a join key.
	{name: "m_const_key", query: `SELECT s1.name AS name1, s1_n, s2.name AS name2, s2_n FROM (SELECT name, n AS s1_n FROM @t1) AS s1
		FULL JOIN (SELECT name, 2 AS s2_n FROM @t2) AS s2 ON (s1_n = s2_n)`},
	// The same with the subqueries' columns qualified.
	{name: "m_const_key_qualified", query: `SELECT s1.name AS name1, s1_n, s2.name AS name2, s2_n FROM (SELECT t1.name, t1.n AS s1_n FROM @t1 t1) AS s1
		FULL JOIN (SELECT t2.name, 2 AS s2_n FROM @t2 t2) AS s2 ON (s1_n = s2_n)`},
}

// --- join.sql: x and y, nullability propagated into sub-joins ----------

const (
	pgrXY     = `CREATE TABLE @x (x1 int PRIMARY KEY, x2 int); CREATE TABLE @y (y1 int PRIMARY KEY, y2 int);`
	pgrXSeed  = `INSERT INTO @x VALUES (1, 11), (2, 22), (3, NULL), (4, 44), (5, NULL);`
	pgrYSeed  = `INSERT INTO @y VALUES (1, 111), (2, 222), (3, 333), (4, NULL);`
	pgrXYBase = `SELECT x.x1, x.x2, y.y1, y.y2, xx.x1 AS xx1, xx.x2 AS xx2 FROM (@x x LEFT JOIN @y y ON (x.x1 = y.y1)) LEFT JOIN @x xx `
)

var pgrXYSteps = []string{
	`UPDATE @x SET x2 = 33 WHERE x1 = 3`,
	`UPDATE @y SET y2 = NULL WHERE y1 = 2`,
	`INSERT INTO @y VALUES (5, 555)`,
	`DELETE FROM @y WHERE y1 = 1`,
	`UPDATE @x SET x2 = NULL WHERE x1 IN (1, 4)`,
	`UPDATE @y SET y1 = 6 WHERE y1 = 3; INSERT INTO @x VALUES (6, 66)`,
	`UPDATE @x SET x1 = x1 + 10 WHERE x1 % 2 = 0`,
	`TRUNCATE @y`,
	pgrYSeed,
	`DELETE FROM @x WHERE x2 IS NULL`,
}

var pgrXYCases = []pgrCase{
	{name: "xy_left_x2", query: `SELECT x.x1, x.x2, y.y1, y.y2 FROM @x x LEFT JOIN @y y ON (x1 = y1 AND x2 IS NOT NULL)`},
	{name: "xy_left_y2", query: `SELECT x.x1, x.x2, y.y1, y.y2 FROM @x x LEFT JOIN @y y ON (x1 = y1 AND y2 IS NOT NULL)`},
	{name: "xy_3_on", query: pgrXYBase + `ON (x.x1 = xx.x1)`},
	{name: "xy_3_on_x2", query: pgrXYBase + `ON (x.x1 = xx.x1 AND x.x2 IS NOT NULL)`},
	{name: "xy_3_on_y2", query: pgrXYBase + `ON (x.x1 = xx.x1 AND y.y2 IS NOT NULL)`},
	{name: "xy_3_on_xx2", query: pgrXYBase + `ON (x.x1 = xx.x1 AND xx.x2 IS NOT NULL)`},
	// The same conditions in WHERE filter after the joins: other rows.
	{name: "xy_3_where_x2", query: pgrXYBase + `ON (x.x1 = xx.x1) WHERE (x.x2 IS NOT NULL)`},
	{name: "xy_3_where_y2", query: pgrXYBase + `ON (x.x1 = xx.x1) WHERE (y.y2 IS NOT NULL)`},
	{name: "xy_3_where_xx2", query: pgrXYBase + `ON (x.x1 = xx.x1) WHERE (xx.x2 IS NOT NULL)`},
}

// --- join.sql: smaller regression scenarios -----------------------------

const (
	pgrTT = `CREATE TABLE @tt1 (tt1_id int PRIMARY KEY, joincol int); CREATE TABLE @tt2 (tt2_id int PRIMARY KEY, joincol int);
CREATE TABLE @tt5 (id int PRIMARY KEY, f1 int, f2 int); CREATE TABLE @tt6 (id int PRIMARY KEY, f1 int, f2 int);`
	pgrTT2Seed = `INSERT INTO @tt2 VALUES (21, 11), (22, 11);`
	pgrTT6Seed = `INSERT INTO @tt6 VALUES (1, 1, 9), (2, 1, 2), (3, 2, 9);`
	pgrTTSeed  = `INSERT INTO @tt1 VALUES (1, 11), (2, NULL); INSERT INTO @tt5 VALUES (1, 1, 10), (2, 1, 11);` + pgrTT2Seed + pgrTT6Seed
)

var pgrTTSteps = []string{
	`INSERT INTO @tt2 VALUES (23, NULL), (24, 12); INSERT INTO @tt6 VALUES (4, 1, 10)`,
	`UPDATE @tt1 SET joincol = 12 WHERE tt1_id = 2; UPDATE @tt5 SET f2 = 3 WHERE id = 1`,
	`DELETE FROM @tt2 WHERE tt2_id = 21; UPDATE @tt6 SET f1 = 2 WHERE id = 2`,
	`UPDATE @tt2 SET joincol = NULL; INSERT INTO @tt5 VALUES (3, 2, 11)`,
	`INSERT INTO @tt1 VALUES (3, 11), (4, NULL); UPDATE @tt2 SET joincol = 11 WHERE tt2_id = 22`,
	`DELETE FROM @tt1 WHERE joincol IS NULL; DELETE FROM @tt6 WHERE f2 = 9`,
	`TRUNCATE @tt2, @tt6`,
	pgrTT2Seed + pgrTT6Seed,
}

var pgrTTCases = []pgrCase{
	// A LEFT JOIN and the RIGHT JOIN written the other way round give the same rows.
	{name: "tt_left", query: `SELECT tt1.tt1_id, tt1.joincol AS j1, tt2.tt2_id, tt2.joincol AS j2 FROM @tt1 tt1 LEFT JOIN @tt2 tt2 ON tt1.joincol = tt2.joincol`},
	{name: "tt_right", query: `SELECT tt1.tt1_id, tt1.joincol AS j1, tt2.tt2_id, tt2.joincol AS j2 FROM @tt2 tt2 RIGHT JOIN @tt1 tt1 ON tt1.joincol = tt2.joincol`},
	{name: "tt_full", query: `SELECT tt1.tt1_id, tt2.tt2_id FROM @tt2 tt2 FULL JOIN @tt1 tt1 ON tt1.joincol = tt2.joincol`},
	// An equality beside an expression over both sides.
	{name: "tt56", query: `SELECT tt5.f1, tt5.f2, tt6.f1 AS f1b, tt6.f2 AS f2b FROM @tt5 tt5, @tt6 tt6 WHERE tt5.f1 = tt6.f1 AND tt5.f1 = tt5.f2 - tt6.f2`},
}

const (
	pgrZT     = `CREATE TABLE @zt1 (f1 int PRIMARY KEY); CREATE TABLE @zt2 (f2 int PRIMARY KEY); CREATE TABLE @zt3 (f3 int PRIMARY KEY);`
	pgrZTSeed = `INSERT INTO @zt1 VALUES (53); INSERT INTO @zt2 VALUES (53);`
)

var pgrZTSteps = []string{
	`INSERT INTO @zt3 VALUES (53)`,
	`INSERT INTO @zt2 VALUES (54); INSERT INTO @zt3 VALUES (54)`,
	`DELETE FROM @zt1`,
	`UPDATE @zt3 SET f3 = 55 WHERE f3 = 53; INSERT INTO @zt1 VALUES (55), (54)`,
	`UPDATE @zt2 SET f2 = 55 WHERE f2 = 53`,
	`UPDATE @zt2 SET f2 = 53 WHERE f2 = 55; UPDATE @zt3 SET f3 = 53 WHERE f3 = 55; INSERT INTO @zt1 VALUES (53)`,
	`TRUNCATE @zt3`,
}

var pgrZTCases = []pgrCase{
	// A filter on the preserved side above two LEFT JOINs.
	{name: "zt_where", query: `SELECT zt2.f2, zt3.f3, zt1.f1 FROM @zt2 zt2 LEFT JOIN @zt3 zt3 ON (f2 = f3) LEFT JOIN @zt1 zt1 ON (f3 = f1) WHERE f2 = 53`},
	{name: "zt_all", query: `SELECT zt2.f2, zt3.f3, zt1.f1 FROM @zt2 zt2 LEFT JOIN @zt3 zt3 ON (f2 = f3) LEFT JOIN @zt1 zt1 ON (f3 = f1)`},
}

// a, b, c: a subquery with a COALESCE and a constant, under a LEFT JOIN.
const (
	pgrABC = `CREATE TABLE @a (code char PRIMARY KEY); CREATE TABLE @b (a char, num int, PRIMARY KEY (a, num));
CREATE TABLE @c (name char PRIMARY KEY, a char);`
	pgrABCSeed = `INSERT INTO @a VALUES ('p'), ('q'); INSERT INTO @b VALUES ('p', 1), ('p', 2); INSERT INTO @c VALUES ('A', 'p'), ('B', 'q'), ('C', NULL);`
	pgrABCSS   = `(SELECT a.code, coalesce(b_grp.cnt, 0) AS b_cnt, -1 AS const FROM @a a LEFT JOIN
		(SELECT count(1) AS cnt, b.a FROM @b b GROUP BY b.a) AS b_grp ON a.code = b_grp.a) AS ss ON (c.a = ss.code)`
)

var pgrABCSteps = []string{
	`INSERT INTO @b VALUES ('q', 1)`,
	`DELETE FROM @b WHERE a = 'p' AND num = 1`,
	`UPDATE @c SET a = 'q' WHERE name = 'C'`,
	`INSERT INTO @a VALUES ('r'); INSERT INTO @c VALUES ('D', 'r'), ('E', 'z')`,
	`DELETE FROM @a WHERE code = 'p'`,
	`UPDATE @b SET a = 'r'`,
	`DELETE FROM @b`,
	`INSERT INTO @a VALUES ('p'); INSERT INTO @b VALUES ('p', 1), ('p', 2)`,
	`UPDATE @c SET a = NULL WHERE name IN ('A', 'B')`,
	`TRUNCATE @a`,
}

var pgrABCCases = []pgrCase{
	{name: "abc_nulled", query: `SELECT c.name, ss.code, ss.b_cnt, ss.const FROM @c c LEFT JOIN ` + pgrABCSS},
	{name: "abc_nulled_agg", query: `SELECT ss.const, count(*) AS n, sum(ss.b_cnt) AS s, count(ss.code) AS codes FROM @c c LEFT JOIN ` + pgrABCSS + ` GROUP BY ss.const`},
}

// nt1, nt2, nt3: boolean expressions of subqueries nested under LEFT JOINs
// (without their foreign keys, so that rows may dangle).
const (
	pgrNT = `CREATE TABLE @nt1 (id int PRIMARY KEY, a1 boolean, a2 boolean);
CREATE TABLE @nt2 (id int PRIMARY KEY, nt1_id int, b1 boolean, b2 boolean);
CREATE TABLE @nt3 (id int PRIMARY KEY, nt2_id int, c1 boolean);`
	pgrNT1Seed = `INSERT INTO @nt1 VALUES (1, true, true), (2, true, false), (3, false, false);`
	pgrNTSeed  = pgrNT1Seed + `
INSERT INTO @nt2 VALUES (1, 1, true, true), (2, 2, true, false), (3, 3, false, false);
INSERT INTO @nt3 VALUES (1, 1, true), (2, 2, false), (3, 3, true);`
	pgrNTSS2 = `(SELECT nt2.*, (nt2.b1 AND ss1.a3) AS b3 FROM @nt2 nt2 LEFT JOIN
		(SELECT nt1.*, (nt1.id IS NOT NULL) AS a3 FROM @nt1 nt1) AS ss1 ON ss1.id = nt2.nt1_id) AS ss2 ON ss2.id = nt3.nt2_id`
)

var pgrNTSteps = []string{
	`UPDATE @nt2 SET nt1_id = 9 WHERE id = 1`,
	`UPDATE @nt2 SET b1 = false WHERE id = 1`,
	`DELETE FROM @nt1 WHERE id = 2`,
	`INSERT INTO @nt1 VALUES (9, NULL, NULL)`,
	`UPDATE @nt3 SET nt2_id = 7 WHERE id = 3; INSERT INTO @nt3 VALUES (4, NULL, NULL)`,
	`UPDATE @nt1 SET id = 4 WHERE id = 3`,
	`INSERT INTO @nt2 VALUES (7, NULL, true, NULL)`,
	`TRUNCATE @nt1`,
	`DELETE FROM @nt2 WHERE id <= 2`,
	pgrNT1Seed,
}

var pgrNTCases = []pgrCase{
	{name: "nt_phv", query: `SELECT nt3.id, ss2.b3, ss2.b1 FROM @nt3 nt3 LEFT JOIN ` + pgrNTSS2},
	{name: "nt_phv_where", query: `SELECT nt3.id FROM @nt3 nt3 LEFT JOIN ` + pgrNTSS2 + ` WHERE ss2.b3`},
	{name: "nt_phv_direct", query: `SELECT nt2.id, ss1.a3, ss1.a1c FROM @nt2 nt2 LEFT JOIN
		(SELECT nt1.id, (nt1.id IS NOT NULL) AS a3, coalesce(nt1.a1, false) AS a1c FROM @nt1 nt1) AS ss1 ON ss1.id = nt2.nt1_id`},
}

// yy, xx: a join on coalesce() of a NULL-extended column.
// join.sql filters yya in a subquery (refused on a NULL-extended side, see
// the refusals); here the condition sits in the join's ON, as the refusal
// advises.
const (
	pgrYY     = `CREATE TABLE @xx (pkxx int PRIMARY KEY); CREATE TABLE @yy (pkyy int PRIMARY KEY, pkxx int); CREATE INDEX ON @yy (pkxx);`
	pgrXXSeed = `INSERT INTO @xx VALUES (1), (2), (3);`
	pgrYYSeed = pgrXXSeed + ` INSERT INTO @yy VALUES (101, 1), (201, 2), (301, NULL);`
	pgrYYTail = ` ON yy.pkyy = yya.pkyy AND yya.pkyy = 101 LEFT JOIN @xx xxa ON yya.pkxx = xxa.pkxx
		LEFT JOIN @xx xxb ON coalesce(xxa.pkxx, 1) = xxb.pkxx`
	pgrYYCols = `SELECT yy.pkyy AS yy_pkyy, yy.pkxx AS yy_pkxx, yya.pkyy AS yya_pkyy, xxa.pkxx AS xxa_pkxx, xxb.pkxx AS xxb_pkxx FROM @yy yy LEFT JOIN `
)

var pgrYYSteps = []string{
	`DELETE FROM @xx WHERE pkxx = 1`,
	`INSERT INTO @xx VALUES (1), (4); UPDATE @yy SET pkxx = 4 WHERE pkyy = 101`,
	`UPDATE @yy SET pkyy = 102 WHERE pkyy = 101`,
	`INSERT INTO @yy VALUES (101, NULL)`,
	`UPDATE @yy SET pkxx = 3 WHERE pkyy = 101; DELETE FROM @xx WHERE pkxx = 3`,
	`TRUNCATE @xx`,
	pgrXXSeed,
}

var pgrYYCases = []pgrCase{
	{name: "yy_coalesce_join", query: pgrYYCols + `@yy yya` + pgrYYTail},
	{name: "yy_subquery_on", query: pgrYYCols + `(SELECT * FROM @yy) AS yya` + pgrYYTail},
	// join.sql's own form: the condition inside the derived table on the
	// NULL-extended side (a level since issue 28; refused before).
	{name: "yy_subquery_where", query: `SELECT yy.pkyy AS yy_pkyy, yy.pkxx AS yy_pkxx, yya.pkyy AS yya_pkyy, xxa.pkxx AS xxa_pkxx FROM @yy yy
		LEFT JOIN (SELECT * FROM @yy WHERE pkyy = 101) AS yya ON yy.pkyy = yya.pkyy LEFT JOIN @xx xxa ON yya.pkxx = xxa.pkxx`},
}

// int8_tbl, and a tenk1 stand-in: PlaceHolderVars and whole-row counts.
const (
	pgrI8 = `CREATE TABLE @i8 (id int PRIMARY KEY, q1 bigint, q2 bigint); CREATE TABLE @tk (unique2 int PRIMARY KEY, unique1 int);
CREATE INDEX ON @i8 (q1); CREATE INDEX ON @i8 (q2);`
	pgrI8Rows = `INSERT INTO @i8 VALUES (1, 123, 456), (2, 123, 4567890123456789), (3, 4567890123456789, 123),
 (4, 4567890123456789, 4567890123456789), (5, 4567890123456789, -4567890123456789);`
	pgrI8Seed = pgrI8Rows + ` INSERT INTO @tk VALUES (0, 10), (-1, 11), (123, 12), (456, 13), (1, 14);`
)

var pgrI8Steps = []string{
	`INSERT INTO @i8 VALUES (6, NULL, 123), (7, 456, NULL)`,
	`UPDATE @i8 SET q1 = NULL WHERE id = 1`,
	`DELETE FROM @tk WHERE unique2 = 0`,
	`UPDATE @i8 SET q2 = NULL WHERE q2 = 123`,
	`DELETE FROM @i8 WHERE q1 = 4567890123456789 AND q2 < 0`,
	`UPDATE @tk SET unique1 = unique1 * 10; INSERT INTO @tk VALUES (0, 20)`,
	`TRUNCATE @i8`,
	pgrI8Rows,
	`UPDATE @i8 SET q1 = q2, q2 = q1`,
}

var pgrI8Cases = []pgrCase{
	// USING over COALESCE()d subquery columns under a FULL JOIN, then an inner join on the merged column.
	{name: "i8_phv_using", query: `SELECT qq, c.unique1 FROM (SELECT COALESCE(q1, 0) AS qq FROM @i8 a) AS ss1
		FULL OUTER JOIN (SELECT COALESCE(q2, -1) AS qq FROM @i8 b) AS ss2 USING (qq) INNER JOIN @tk c ON qq = c.unique2`},
	// The same join written with ON and the merged column spelled out.
	{name: "i8_phv_on", query: `SELECT coalesce(ss1.qq, ss2.qq) AS qq, c.unique1 FROM (SELECT COALESCE(a.q1, 0) AS qq FROM @i8 a) AS ss1
		FULL OUTER JOIN (SELECT COALESCE(b.q2, -1) AS qq FROM @i8 b) AS ss2 ON ss1.qq = ss2.qq INNER JOIN @tk c ON coalesce(ss1.qq, ss2.qq) = c.unique2`},
	// join.sql's count(t2.*) (a whole-row reference is refused; the key column counts the same rows).
	{name: "i8_left_count", query: `SELECT t1.q2, count(t2.id) AS n FROM @i8 t1 LEFT JOIN @i8 t2 ON (t1.q2 = t2.q1) GROUP BY t1.q2`},
	// A non-strict expression of a subquery on the NULL-extended side.
	{name: "i8_left_nonstrict", query: `SELECT t1.q2, count(t2.q2) AS n, sum(t2.q2) AS s FROM @i8 t1
		LEFT JOIN (SELECT q1, coalesce(q2, 0) AS q2 FROM @i8) t2 ON (t1.q2 = t2.q1) GROUP BY t1.q2`},
	{name: "i8_left_nonstrict_qualified", query: `SELECT t1.q2, count(t2.q2) AS n, sum(t2.q2) AS s FROM @i8 t1
		LEFT JOIN (SELECT i.q1, coalesce(i.q2, 0) AS q2 FROM @i8 i) t2 ON (t1.q2 = t2.q1) GROUP BY t1.q2`},
}

// int4_tbl: FULL JOIN ON true and ON false, and a non-equi self-join.
const (
	pgrI4     = `CREATE TABLE @i4 (f1 int PRIMARY KEY);`
	pgrI4Seed = `INSERT INTO @i4 VALUES (0), (123456), (-123456), (2147483647), (-2147483647);`
)

var pgrI4Steps = []string{
	`INSERT INTO @i4 VALUES (1)`,
	`DELETE FROM @i4 WHERE f1 = 0`,
	`UPDATE @i4 SET f1 = f1 + 1 WHERE f1 = 123456`,
	`TRUNCATE @i4`,
	pgrI4Seed,
	`DELETE FROM @i4 WHERE f1 < 0`,
}

var pgrI4Cases = []pgrCase{
	{name: "i4_full_true", query: `SELECT a.f1 AS a, b.f1 AS b FROM @i4 a FULL JOIN @i4 b ON true`},
	{name: "i4_full_false", query: `SELECT a.f1 AS a, b.f1 AS b FROM @i4 a FULL JOIN @i4 b ON false`},
	{name: "i4_less_count", query: `SELECT a.f1, count(b.f1) AS n, min(b.f1) AS next FROM @i4 a LEFT JOIN @i4 b ON a.f1 < b.f1 GROUP BY a.f1`},
}

// --- multi-column join keys and IS NOT DISTINCT FROM --------------------

const (
	pgrMK = `CREATE TABLE @p (id int PRIMARY KEY, a int, b text, v int); CREATE TABLE @q (id int PRIMARY KEY, a int, b text, w int);
CREATE INDEX ON @p (a, b); CREATE INDEX ON @q (a, b);`
	pgrQSeed  = `INSERT INTO @q VALUES (1, 1, 'x', 100), (2, 1, 'x', 101), (3, 2, NULL, 102), (4, NULL, 'x', 103), (5, NULL, NULL, 104), (6, 3, 'z', 105);`
	pgrMKSeed = `INSERT INTO @p VALUES (1, 1, 'x', 10), (2, 1, 'y', 20), (3, 2, 'x', 30), (4, NULL, 'x', 40), (5, 1, NULL, 50), (6, NULL, NULL, 60);` + pgrQSeed
)

var pgrMKSteps = []string{
	`UPDATE @q SET b = 'y' WHERE id = 2`,
	`INSERT INTO @p VALUES (7, 3, 'z', 70), (8, NULL, NULL, 80)`,
	`UPDATE @p SET a = NULL WHERE id = 1`,
	`DELETE FROM @q WHERE a IS NULL AND b IS NULL`,
	`UPDATE @q SET a = 1, b = NULL WHERE id = 3`,
	`UPDATE @p SET v = v * 100`,
	`UPDATE @q SET id = id + 10`,
	`DELETE FROM @p WHERE b = 'x'`,
	`TRUNCATE @q`,
	pgrQSeed,
	`UPDATE @p SET b = '' WHERE b IS NULL; INSERT INTO @q VALUES (20, 1, '', 1), (21, NULL, '', 2)`,
}

var pgrMKCases = []pgrCase{
	{name: "mk_using2", query: `SELECT a, b, v, w FROM @p JOIN @q USING (a, b)`},
	{name: "mk_left2", query: `SELECT p.id AS pid, q.id AS qid, p.a, q.b FROM @p p LEFT JOIN @q q ON p.a = q.a AND p.b = q.b`},
	{name: "mk_full_using2", query: `SELECT a, b, p.id AS pid, q.id AS qid FROM @p p FULL JOIN @q q USING (a, b)`},
	{name: "mk_indf", query: `SELECT p.id AS pid, q.id AS qid FROM @p p JOIN @q q ON p.a IS NOT DISTINCT FROM q.a AND p.b IS NOT DISTINCT FROM q.b`},
	{name: "mk_eq_nonequi", query: `SELECT p.id AS pid, q.id AS qid, p.v, q.w FROM @p p LEFT JOIN @q q ON p.a = q.a AND q.w > p.v * 5`},
	{name: "mk_agg_using", query: `SELECT p.a, p.b, count(q.id) AS n, sum(q.w) AS sw FROM @p p LEFT JOIN @q q USING (a, b) GROUP BY p.a, p.b`},
	{name: "mk_natural", query: `SELECT id, a, b, v, w FROM @p NATURAL JOIN @q`},
	{name: "mk_expr_join", query: `SELECT p.id AS pid, q.id AS qid FROM @p p JOIN @q q ON coalesce(p.b, '?') = coalesce(q.b, '?') AND p.a + 1 = q.a + 1`},
	{name: "chain_mk", query: `SELECT count(*) AS n, count(pid) AS np, count(qid) AS nq, sum(a) AS sa FROM mk_full_using2`},
}

// --- select_distinct.sql ------------------------------------------------

const (
	pgrD     = `CREATE TABLE @tmp (id int PRIMARY KEY, two int, ten int, string4 text, f1 int, fl float8, n numeric);`
	pgrDSeed = `INSERT INTO @tmp SELECT g, g % 2, g % 10, (ARRAY['AAAA', 'HHHH', 'OOOO', 'VVVV'])[g % 4 + 1], nullif(g % 4, 3),
  (ARRAY['0', '-0', 'NaN', 'Infinity', NULL]::float8[])[g % 5 + 1], (ARRAY[1.0, 1.00, NULL]::numeric[])[g % 3 + 1] FROM generate_series(1, 40) g;
INSERT INTO @tmp VALUES (41, NULL, NULL, NULL, NULL, NULL, NULL), (42, NULL, NULL, '', NULL, NULL, NULL);`
)

var pgrDSteps = []string{
	`UPDATE @tmp SET two = 2 WHERE id = 1`,
	`UPDATE @tmp SET f1 = NULL WHERE f1 = 2`,
	`DELETE FROM @tmp WHERE ten = 9`,
	`UPDATE @tmp SET string4 = lower(string4) WHERE id % 7 = 0`,
	`INSERT INTO @tmp VALUES (43, 1, 11, 'ZZZZ', 7, '-Infinity', 'NaN')`,
	`DELETE FROM @tmp WHERE f1 IS NULL`,
	`UPDATE @tmp SET fl = '-0' WHERE fl = 0; UPDATE @tmp SET n = 1.000 WHERE n IS NOT NULL AND id % 2 = 0`,
	`UPDATE @tmp SET id = id + 1000 WHERE two = 0`,
	`TRUNCATE @tmp`,
	pgrDSeed,
	`DELETE FROM @tmp WHERE two = 1`,
}

var pgrDCases = []pgrCase{
	{name: "d_two", query: `SELECT DISTINCT two FROM @tmp`},
	{name: "d_three", query: `SELECT DISTINCT two, string4, ten FROM @tmp ORDER BY two, string4, ten`},
	{name: "d_nulls", query: `SELECT DISTINCT f1 FROM @tmp`},
	{name: "d_is_distinct", query: `SELECT DISTINCT f1, f1 IS DISTINCT FROM 2 AS not_2, f1 IS DISTINCT FROM NULL AS not_null,
		f1 IS DISTINCT FROM f1 + 1 AS not_next FROM @tmp`},
	{name: "d_exprs", query: `SELECT DISTINCT lower(string4) AS s4, ten % 3 AS t3, coalesce(f1, -1) AS f1c FROM @tmp`},
	// -0 and 0, NaN, 1.0 and 1.00 are equal for DISTINCT.
	{name: "d_float_numeric", query: `SELECT DISTINCT fl, n FROM @tmp`},
	{name: "d_derived", query: `SELECT t.two, count(*) AS n FROM (SELECT DISTINCT two, ten FROM @tmp) t GROUP BY t.two`},
	// Three levels: DISTINCT, an aggregate over it, a row transform over that.
	{name: "chain_d_count", query: `SELECT count(*) AS n, count(f1) AS nn, min(f1) AS mn FROM d_nulls`},
	{name: "chain_d_top", query: `SELECT n * 10 AS n10, nn FROM chain_d_count`},
}

// --- Materialize's aggregates.slt ---------------------------------------

const (
	pgrMZ = `CREATE TABLE @t (id int PRIMARY KEY, a int, b int); CREATE TABLE @tb (id int PRIMARY KEY, a bigint, b bigint);
CREATE TABLE @ft (id int PRIMARY KEY, k int, v int, mark bool); CREATE TABLE @v (id int PRIMARY KEY, a text, b int);`
	pgrMZSeed = `INSERT INTO @t VALUES (1, 1, 1), (2, 1, 2), (3, 2, 3), (4, 3, 1);
INSERT INTO @tb VALUES (1, 1, 1), (2, 1, 2), (3, 2, 9223372036854775807), (4, 2, 9223372036854775807), (5, 3, -9223372036854775808), (6, 3, -9223372036854775808);
INSERT INTO @ft VALUES (1, 1, 2, false), (2, 3, 4, true), (3, 5, NULL, true), (4, 6, 2, true), (5, 7, 2, true), (6, 8, 4, true), (7, NULL, 4, true);
INSERT INTO @v VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 0), (4, 'd', 2), (5, 'e', NULL);`
)

var pgrMZSteps = []string{
	`INSERT INTO @t VALUES (5, 1, 0); INSERT INTO @tb VALUES (7, 1, 9223372036854775807); INSERT INTO @ft VALUES (8, 9, 2, false); INSERT INTO @v VALUES (6, 'f', 2)`,
	`UPDATE @t SET b = 3 WHERE id = 4; UPDATE @tb SET b = -b WHERE a = 2; UPDATE @ft SET k = NULL WHERE id = 4; UPDATE @v SET b = 0 WHERE a = 'a'`,
	`DELETE FROM @t WHERE a = 2; DELETE FROM @tb WHERE id = 5; DELETE FROM @ft WHERE k IS NULL; UPDATE @v SET b = NULL WHERE a = 'd'`,
	`UPDATE @t SET a = 2; UPDATE @tb SET a = 3; UPDATE @ft SET mark = NOT mark; UPDATE @v SET a = upper(a) WHERE b = 2`,
	`TRUNCATE @t, @tb, @ft, @v`,
	pgrMZSeed,
}

var pgrMZCases = []pgrCase{
	{name: "mz_having", query: `SELECT a FROM @t GROUP BY a HAVING sum(b) = 3`},
	{name: "mz_having_expr", query: `SELECT a + 1 AS a1 FROM @t GROUP BY a + 1 HAVING sum(b) = 3`},
	{name: "mz_const_item", query: `SELECT 'dummy' AS d, a AS c, sum(b) AS s FROM @t GROUP BY c`},
	{name: "mz_multi", query: `SELECT a, count(b) AS c, min(b) AS mn, sum(b) AS s, max(b) AS mx FROM @t GROUP BY a`},
	{name: "mz_literal", query: `SELECT 1 AS literal, sum(a) AS sum_a, sum(b) AS sum_b, avg(a) AS avg_a FROM @t`},
	// int8 sums beyond int64 in both directions.
	{name: "mz_sum_bigint", query: `SELECT a, sum(b) AS s, avg(b) AS av FROM @tb GROUP BY a`},
	{name: "mz_filter", query: `SELECT v, count(*) FILTER (WHERE k > 5) AS n FROM @ft GROUP BY v`},
	{name: "mz_filter_multi", query: `SELECT v, mark, count(*) FILTER (WHERE k > 5) AS n5, count(*) AS n, max(k) FILTER (WHERE k < 8) AS mk,
		avg(k) FILTER (WHERE k > 5) AS ak FROM @ft GROUP BY v, mark`},
	// Ordered aggregates; ties on b are broken by a, and jsonb_object_agg's repeated keys by its ORDER BY.
	{name: "mz_ordered", query: `SELECT array_agg(a ORDER BY a DESC) AS a_desc, array_agg(a ORDER BY b, a) AS b_a_asc,
		array_agg(a ORDER BY b, a DESC) AS b_a_desc, array_agg(a ORDER BY b NULLS FIRST, a DESC) AS b_nf,
		string_agg(a, '-' ORDER BY b, a) AS sa, jsonb_agg(a ORDER BY b DESC NULLS LAST, a) AS ja,
		jsonb_object_agg(b, a ORDER BY a DESC) FILTER (WHERE b IS NOT NULL) AS jo FROM @v`},
}

func pgrGroups() []pgrGroup {
	return []pgrGroup{
		{name: "pgr_agg", schema: pgrW, seed: pgrWSeed, steps: pgrWSteps, cases: pgrAggCases},
		{name: "pgr_j", schema: pgrJ, seed: pgrJ1Seed + pgrJ2Seed, steps: pgrJSteps, cases: pgrJCases},
		{name: "pgr_m", schema: pgrM, seed: pgrMSeed, steps: pgrMSteps, cases: pgrMCases},
		{name: "pgr_xy", schema: pgrXY, seed: pgrXSeed + pgrYSeed, steps: pgrXYSteps, cases: pgrXYCases},
		{name: "pgr_tt", schema: pgrTT, seed: pgrTTSeed, steps: pgrTTSteps, cases: pgrTTCases},
		{name: "pgr_zt", schema: pgrZT, seed: pgrZTSeed, steps: pgrZTSteps, cases: pgrZTCases},
		{name: "pgr_abc", schema: pgrABC, seed: pgrABCSeed, steps: pgrABCSteps, cases: pgrABCCases},
		{name: "pgr_nt", schema: pgrNT, seed: pgrNTSeed, steps: pgrNTSteps, cases: pgrNTCases},
		{name: "pgr_yy", schema: pgrYY, seed: pgrYYSeed, steps: pgrYYSteps, cases: pgrYYCases},
		{name: "pgr_i8", schema: pgrI8, seed: pgrI8Seed, steps: pgrI8Steps, cases: pgrI8Cases},
		{name: "pgr_i4", schema: pgrI4, seed: pgrI4Seed, steps: pgrI4Steps, cases: pgrI4Cases},
		{name: "pgr_mk", schema: pgrMK, seed: pgrMKSeed, steps: pgrMKSteps, cases: pgrMKCases},
		{name: "pgr_d", schema: pgrD, seed: pgrDSeed, steps: pgrDSteps, cases: pgrDCases},
		{name: "pgr_mz", schema: pgrMZ, seed: pgrMZSeed, steps: pgrMZSteps, cases: pgrMZCases},
	}
}

// pgrRefuseSetup is what the refused definitions read.
const pgrRefuseSetup = `CREATE SCHEMA pgr_refuse;
CREATE TABLE pgr_refuse.t (id int PRIMARY KEY, a int, b int, s text, u uuid, x float8);
CREATE TABLE pgr_refuse.j1 (id1 int PRIMARY KEY, i int, j int, t text);
CREATE TABLE pgr_refuse.j2 (id2 int PRIMARY KEY, i int, k int);
CREATE TABLE pgr_refuse.xx (pkxx int PRIMARY KEY);
CREATE TABLE pgr_refuse.yy (pkyy int PRIMARY KEY, pkxx int);
INSERT INTO pgr_refuse.t VALUES (1, 1, 1, 'a', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 1.5);`

// pgrUserAggregate is aggregates.sql's user-defined sum (in public, so
// that a definition can call it unqualified: agg_user).
const pgrUserAggregate = `CREATE AGGREGATE public.pgr_sum(int4) (stype = int8, sfunc = int4_sum);`

func pgrRefusals() []pgrRefusal {
	const v = "validation"
	unsupported := func(fn string) string {
		return "aggregate " + fn + " is not supported yet; supported aggregates are count, sum, avg"
	}
	return []pgrRefusal{
		// aggregates.sql: PostgreSQL's other aggregates.
		// Floating-point statistics depend on the order rows are added in (ADR 0031).
		{name: "stddev_pop", query: `SELECT stddev_pop(x) AS s FROM pgr_refuse.t`, code: v, want: "stddev_pop(x) depends on the order rows are aggregated in"},
		{name: "regr_slope", query: `SELECT regr_slope(x, a) AS s FROM pgr_refuse.t`, code: v, want: "regr_slope(x, a) depends on the order rows are aggregated in"},
		{name: "covar_pop", query: `SELECT covar_pop(x, a) AS s FROM pgr_refuse.t`, code: v, want: "covar_pop(x, a) depends on the order rows are aggregated in"},
		{name: "json_agg", query: `SELECT json_agg(a ORDER BY a) AS j FROM pgr_refuse.t`, code: v, want: unsupported("json_agg")},
		// PostgreSQL cannot plan this FULL JOIN (IS NOT DISTINCT FROM is neither merge- nor hash-joinable).
		{name: "full_join_indf", query: `SELECT x.a AS xa, y.a AS ya FROM pgr_refuse.t x FULL JOIN pgr_refuse.t y ON x.a IS NOT DISTINCT FROM y.a`, code: v,
			want: "FULL JOIN is only supported with merge-joinable or hash-joinable join conditions"},
		{name: "nested_aggregate", query: `SELECT max(min(a)) AS m FROM pgr_refuse.t`, code: v, want: "aggregate calls cannot be nested (min inside max)"},
		// aggregates.sql: "select distinct max(unique2) from tenk1".
		{name: "distinct_aggregate", query: `SELECT DISTINCT max(a) AS m FROM pgr_refuse.t`, code: v,
			want: "DISTINCT together with GROUP BY or aggregates is not supported yet; remove DISTINCT"},
		// Ordered aggregates without ORDER BY, and PostgreSQL's DISTINCT/ORDER BY rule.
		{name: "string_agg_unordered", query: `SELECT string_agg(s, ',') AS s FROM pgr_refuse.t`, code: v,
			want: "string_agg without ORDER BY inside the call has no defined order"},
		{name: "array_agg_distinct_unordered", query: `SELECT array_agg(DISTINCT a) AS a FROM pgr_refuse.t`, code: v,
			want: "array_agg without ORDER BY inside the call has no defined order"},
		{name: "distinct_order_mismatch", query: `SELECT string_agg(DISTINCT s, ',' ORDER BY a) AS s FROM pgr_refuse.t`, code: v,
			want: "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list"},
		// LATERAL.
		// (An aggregate without GROUP BY in a LATERAL subquery is kept as
		// scalar subqueries, ADR 0038; a correlation that is not an
		// equality is not.)
		{name: "lateral", query: `SELECT t.id, s.i FROM pgr_refuse.t t, LATERAL (SELECT j.i FROM pgr_refuse.j1 j WHERE j.i > t.a) s`, code: v,
			want: "not an equality between its own columns and the outer query's"},
		// join.sql shapes outside the subset.
		{name: "join_alias", query: `SELECT x.i FROM (pgr_refuse.j1 JOIN pgr_refuse.j2 USING (i)) AS x`, code: v, want: "an alias on a join"},
		{name: "table_column_aliases", query: `SELECT t1.a, t2.e FROM pgr_refuse.j1 t1 (a, b, c), pgr_refuse.j2 t2 (d, e) WHERE t1.a = t2.d`, code: v,
			want: "column aliases on the table"},
		{name: "whole_row_count", query: `SELECT t1.i, count(t2.*) AS n FROM pgr_refuse.j1 t1 LEFT JOIN pgr_refuse.j2 t2 ON (t1.i = t2.i) GROUP BY t1.i`, code: v,
			want: "* is not supported in a transform"},
		{name: "row_to_json_star", query: `SELECT row_to_json(j1.*) AS j FROM pgr_refuse.j1 JOIN pgr_refuse.j2 USING (i)`, code: v, want: "* is not supported in a transform"},
		{name: "star_shared_column", query: `SELECT * FROM pgr_refuse.j1 CROSS JOIN pgr_refuse.j2`, code: v, want: `column "i" specified more than once`},
		// Materialize's aggregates.slt: output names.
		{name: "duplicate_output_name", query: `SELECT a, sum(b) AS a FROM pgr_refuse.t GROUP BY a`, code: v, want: `output name "a" is already used`},
		{name: "ambiguous_group_name", query: `SELECT a AS c, sum(b) AS c FROM pgr_refuse.t GROUP BY c`, code: v, want: `"c"`},
		{name: "sum_star", query: `SELECT sum(*) AS s FROM pgr_refuse.t`, code: v, want: "only count accepts *"},
		{name: "count_empty", query: `SELECT count() AS n FROM pgr_refuse.t`, code: v, want: "write count(*)"},
		// Set-returning calls (docs: refused).
		{name: "srf_row", query: `SELECT id, generate_series(1, 3) AS g FROM pgr_refuse.t`, code: v, want: "returns a set of rows"},
		// aggregates.sql: max(unique2), generate_series(1,3) — refused as
		// the docs say since composed items are tested too (ADR 0037).
		{name: "srf_beside_aggregate", query: `SELECT max(a) AS m, generate_series(1, 3) AS g FROM pgr_refuse.t`, code: v, want: "select list item 2 (generate_series(1, 3)) returns a set of rows"},
		// min/max(uuid) does not exist in PostgreSQL 15.
		{name: "max_uuid", query: `SELECT max(u) AS m FROM pgr_refuse.t`, code: v, want: "function max(uuid) does not exist"},
		// count(DISTINCT (a, b)): PostgreSQL accepts a row value here.
		{name: "count_distinct_row", query: `SELECT count(DISTINCT (a, b)) AS n FROM pgr_refuse.t`, code: v, want: `transform "refused_count_distinct_row": the aggregate input (a, b) is a row value, which the ledger cannot store`},
		// A USING join's alias is accepted unread; reading it through the alias is refused.
		{name: "using_alias_read", query: `SELECT x.i, j, t, k FROM pgr_refuse.j1 JOIN pgr_refuse.j2 USING (i) AS x`, code: v,
			want: "column reference x.i names x, which is not a FROM table"},
	}
}

// pgrFinding is a refusal not kept, reported at the end as a skipped
// subtest.
type pgrFinding struct{ name, line, detail string }

func TestPeerPGRegress(t *testing.T) {
	t.Parallel()
	var findings []pgrFinding
	t.Run("refusals", func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, trellis.Config{})
		// Nothing is defined yet, so a refusal that changed anything
		// shows.
		e.exec(pgrRefuseSetup)
		for _, r := range pgrRefusals() {
			name := "refused_" + r.name
			res, err := e.tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM %s AS %s", name, r.query))
			var problem string
			switch {
			case err == nil:
				problem = fmt.Sprintf("accepted (%+v), want %s refused", res, r.code)
				if _, err := e.tr.Apply(ctx, "DROP TRANSFORM "+name); err != nil {
					t.Fatalf("drop %s: %v", name, err)
				}
			case string(trellis.CodeOf(err)) != r.code || !strings.Contains(err.Error(), r.want):
				problem = fmt.Sprintf("got %v (code %s), want code %s containing %q", err, trellis.CodeOf(err), r.code, r.want)
			default:
				t.Logf("refusal %s: %v", r.name, err)
				continue
			}
			if r.finding != "" {
				findings = append(findings, pgrFinding{"refusal_" + r.name, r.finding, r.query + "\n" + problem})
				continue
			}
			t.Errorf("refusal %s:\n  %s\n %s", r.name, r.query, problem)
		}
		if n := e.queryInt(`SELECT count(*) FROM trellis.transforms`); n != 0 {
			t.Fatalf("refused definitions left %d transforms", n)
		}
	})
	inParts(t, splitBy(pgrGroups(), peerParts, func(g pgrGroup) int { return len(g.cases) * (1 + len(g.steps)) }), testPGRegressGroups)

	for _, f := range findings {
		t.Run("FINDING_"+f.name, func(t *testing.T) {
			t.Log(f.detail)
			t.Skip("FINDING: " + f.line)
		})
	}
}

// testPGRegressGroups keeps the cases of groups with one runner: built,
// then the groups' steps in lockstep (step k of every group that has one),
// each case compared with its query after the build, after each of its
// group's steps and at the end.
func testPGRegressGroups(t *testing.T, groups []pgrGroup) {
	ctx := context.Background()
	e := newEnv(t, trellis.Config{})
	t00 := time.Now()
	e.exec(pgrUserAggregate)
	type member struct {
		g pgrGroup
		c pgrCase
	}
	var defs []joinDef
	byName := map[string]member{}
	maxSteps := 0
	for _, g := range groups {
		sub := func(sql string) string { return strings.ReplaceAll(sql, "@", g.name+".") }
		e.exec(fmt.Sprintf("CREATE SCHEMA %s;\n%s\n%s", g.name, sub(g.schema), sub(g.seed)))
		maxSteps = max(maxSteps, len(g.steps))
		for _, c := range g.cases {
			res, err := e.tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM %s AS %s", c.name, sub(c.query)))
			if err != nil {
				t.Errorf("%s: refused, want accepted: %v\n  %s", c.name, err, sub(c.query))
				continue
			}
			for _, r := range res {
				for _, n := range r.Notes {
					t.Logf("%s: note: %s", c.name, n)
				}
			}
			defs = append(defs, joinDef{c.name, sub(c.query)})
			byName[c.name] = member{g, c}
		}
	}
	e.start()

	all, err := e.tr.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	definition := map[string]trellis.Definition{}
	for _, d := range all {
		definition[d.Name] = d
	}
	// compare is the two-way EXCEPT ALL of a target and the test's query.
	compare := func(d joinDef) selfcheck.Diff {
		def := definition[d.name]
		diff, err := selfcheck.Compare(ctx, e.conn, pgx.Identifier{def.Schema, d.name}, def.Columns, d.query)
		if err != nil {
			t.Fatalf("compare %s: %v", d.name, err)
		}
		return diff
	}
	describe := func(d joinDef, diff selfcheck.Diff) string {
		return fmt.Sprintf("transform %s differs from its query (target columns %v)\n  query: %s\n  missing from the target (%d): %v\n  extra in the target (%d): %v",
			d.name, definition[d.name].Columns, d.query, diff.Missing, diff.MissingSample, diff.Extra, diff.ExtraSample)
	}
	// A diverged case's schema, rows and the steps that led to it.
	reproduce := func(m member, when string, k int) string {
		sub := func(sql string) string { return strings.ReplaceAll(sql, "@", m.g.name+".") }
		var b strings.Builder
		fmt.Fprintf(&b, "schema:\n%s\nseed:\n%s\nquery: %s", sub(m.g.schema), sub(m.g.seed), sub(m.c.query))
		if k > 0 {
			b.WriteString("\nsteps:")
			for i := 0; i < k && i < len(m.g.steps); i++ {
				fmt.Fprintf(&b, "\n  %d: %s", i+1, sub(m.g.steps[i]))
			}
		}
		return b.String()
	}
	// The build: the test's query and the engine's own (CompareNow).
	check := newJoinCheck(e, defs)
	check.converge("built")
	t.Logf("built %d transforms in %v", len(defs), time.Since(t00))
	reported := map[string]bool{}
	report := func() {
		for name, when := range check.broken {
			if reported[name] {
				continue
			}
			reported[name] = true
			k := 0
			fmt.Sscanf(when, "step %d", &k)
			t.Logf("%s diverged (%s); %s", name, when, reproduce(byName[name], when, k))
		}
	}
	report()

	// The steps, in lockstep; after each, the cases of the groups it wrote to.
	for k := 0; k < maxSteps; k++ {
		stepped := map[string]bool{}
		for _, g := range groups {
			if k < len(g.steps) {
				e.exec(strings.ReplaceAll(g.steps[k], "@", g.name+"."))
				for _, c := range g.cases {
					stepped[c.name] = true
				}
			}
		}
		when := fmt.Sprintf("step %d", k+1)
		e.await(when)
		for _, d := range defs {
			if _, ok := check.broken[d.name]; ok || !stepped[d.name] {
				continue
			}
			if diff := compare(d); !diff.Equal() {
				check.broken[d.name] = when
				t.Errorf("%s: %s", when, describe(d, diff))
			}
		}
		report()
	}
	check.converge("after every step")
	report()
	t.Logf("done in %v", time.Since(t00))
}
