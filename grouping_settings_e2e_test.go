package trellis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// Issue 24 items 11 and 12 (ADR 0037): grouping as PostgreSQL reads it,
// settings recorded with the plan, refusals naming what reads the clock.

const groupingSchema = `
CREATE TABLE customers (id int PRIMARY KEY, region text, teamid int);
CREATE TABLE products (id int PRIMARY KEY, name text, price int);
CREATE TABLE orders (id int PRIMARY KEY, cid int, pid int, qty int);
INSERT INTO customers SELECT g, (ARRAY['north', 'south', NULL])[1 + g % 3], g % 4 FROM generate_series(1, 30) g;
INSERT INTO products SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'p' || g END, nullif(g % 7, 0) FROM generate_series(1, 12) g;
INSERT INTO orders SELECT g, 1 + g % 31, 1 + g % 14, g % 9 FROM generate_series(1, 120) g;`

// groupingDefs are the grouping forms PostgreSQL accepts that the text of
// the query alone cannot tie to GROUP BY.
var groupingDefs = []levelDef{
	// Qualified in one place, unqualified in the other, over a join.
	{"g_qualified_item", `SELECT c.region, count(*) AS n FROM customers c JOIN orders o ON o.cid = c.id GROUP BY region`},
	{"g_qualified_group", `SELECT teamid, sum(o.qty) AS q FROM customers c JOIN orders o ON o.cid = c.id GROUP BY c.teamid`},
	// Expressions over group columns without an aggregate, NULL groups
	// included.
	{"g_expr", `SELECT region || '!' AS r, count(*) AS n FROM customers GROUP BY region`},
	{"g_upper", `SELECT upper(c.region) AS u, count(o.id) AS n FROM customers c LEFT JOIN orders o ON o.cid = c.id GROUP BY c.region`},
	// Columns functionally dependent on a grouped primary key: p.* of the
	// preserved side of a LEFT JOIN, expressions and HAVING over them, one
	// table, and the NULL-extended side's.
	{"g_star", `SELECT p.*, count(o.id) AS n FROM products p LEFT JOIN orders o ON o.pid = p.id GROUP BY p.id`},
	{"g_dep_expr", `SELECT p.id, upper(p.name) AS uname, p.price * 2 AS dbl, sum(o.qty) AS q FROM products p LEFT JOIN orders o ON o.pid = p.id GROUP BY p.id HAVING p.price IS NULL OR p.price > 1`},
	{"g_dep_one", `SELECT id, name, price FROM products GROUP BY id`},
	{"g_dep_nullable", `SELECT o.id, p.name, p.price, count(*) AS n FROM orders o LEFT JOIN products p ON p.id = o.pid GROUP BY o.id, p.id`},
}

// TestGroupingAsPostgreSQL keeps every grouping form above exact through
// writes that move rows between groups, empty groups, make NULL groups
// and update the dependent columns of a grouped key.
func TestGroupingAsPostgreSQL(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := keepShapes(t, mode, groupingSchema, groupingDefs, []string{
			`UPDATE products SET name = 'renamed ' || id, price = coalesce(price, 0) + 3 WHERE id % 3 = 0`,
			`UPDATE customers SET region = NULL WHERE id % 4 = 0; UPDATE customers SET region = 'east' WHERE id % 5 = 0`,
			`UPDATE orders SET pid = 13 WHERE id % 6 = 0; UPDATE orders SET cid = 2 WHERE id % 7 = 0`,
			`INSERT INTO products VALUES (13, NULL, NULL), (14, 'p14', 4); DELETE FROM products WHERE id IN (2, 4)`,
			`UPDATE products SET name = NULL, price = 1 WHERE id = 1; DELETE FROM orders WHERE id % 5 = 0`,
			`UPDATE customers SET teamid = teamid + 1 WHERE id % 2 = 0; INSERT INTO orders VALUES (500, 1, 1, 5), (501, NULL, NULL, 1)`,
		})
		// What PostgreSQL refuses stays refused, in its own words.
		refuseEach(t, e, []refusal{
			{`SELECT region, teamid, count(*) AS n FROM customers GROUP BY region`, `column "customers.teamid" must appear in the GROUP BY clause or be used in an aggregate function`},
			{`SELECT p.name, count(*) AS n FROM products p JOIN orders o ON o.pid = p.id GROUP BY o.id`, `column "p.name" must appear in the GROUP BY clause`},
			{`SELECT o.id, o.qty, count(*) AS n FROM orders o GROUP BY o.cid`, `column "o.id" must appear in the GROUP BY clause`},
		})
	})
}

const settingsSchema = `
CREATE TABLE events (id int PRIMARY KEY, at timestamptz NOT NULL, note text, iv interval, f float8);
INSERT INTO events VALUES
  (1, '2026-03-01 14:50+00', 'a', '1 hour 30 minutes', 0.1),
  (2, '2026-03-01 15:10+00', 'a', '25 hours', 1.5),
  (3, '2026-03-01 23:59+00', 'b', NULL, NULL),
  (4, '2026-03-02 00:01+00', 'b', '-2 days', 2),
  (5, '2026-03-31 15:30+00', NULL, '10 minutes', 3.25);`

// settingsDefs compute with built-ins that are stable only through a
// setting: their values change with TimeZone across midnight in Tokyo.
var settingsDefs = []levelDef{
	{"s_day", `SELECT at::date AS day, count(*) AS n FROM events GROUP BY 1`},
	{"s_hour", `SELECT to_char(at, 'YYYY-MM-DD HH24') AS h, count(*) AS n FROM events GROUP BY 1`},
	{"s_rows", `SELECT id, date_trunc('day', at) AS d, extract(hour FROM at) AS hr, at::text AS txt, to_char(iv, 'HH24:MI') AS ivs,
		format('%s/%s', id, at) AS fmt, (at AT TIME ZONE 'UTC')::date AS utc_day, to_timestamp(f)::date AS fday, note || at AS cat FROM events WHERE at::date > '2026-01-01'`},
	{"s_last", `SELECT note, to_char(max(at), 'YYYY-MM-DD') AS last_day, count(*) AS n FROM events GROUP BY note HAVING max(at)::date >= '2026-03-01'`},
}

// TestSettingsRecorded defines transforms under TimeZone 'Asia/Tokyo' and
// runs the runner where every session defaults to UTC: each target must
// equal its query evaluated under Tokyo, after the build and every write,
// and not the query under UTC.
func TestSettingsRecorded(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		ctx := context.Background()
		e := newEnv(t, trellis.Config{Capture: mode})
		var db string
		if err := e.conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
			t.Fatal(err)
		}
		zone := func(tz string) {
			// New sessions of the database (the instance's pool is opened
			// again) default to tz.
			e.exec(`ALTER DATABASE ` + pgx.Identifier{db}.Sanitize() + ` SET timezone TO '` + tz + `'`)
			e.tr.Close()
			e.open()
		}
		zone("Asia/Tokyo")
		e.exec(settingsSchema)
		var b strings.Builder
		for _, d := range settingsDefs {
			b.WriteString("CREATE TRANSFORM " + d.name + " AS " + d.query + ";\n")
		}
		e.apply(b.String())
		defs, err := e.tr.Definitions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range defs {
			if !contains(d.Settings, "TimeZone = 'Asia/Tokyo'") {
				t.Errorf("%s: recorded settings %v, want TimeZone = 'Asia/Tokyo'", d.Name, d.Settings)
			}
		}
		zone("UTC")
		fresh, err := pgx.Connect(ctx, e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		var tz string
		err = fresh.QueryRow(ctx, `SELECT current_setting('TimeZone')`).Scan(&tz)
		fresh.Close(ctx)
		if err != nil || tz != "UTC" {
			t.Fatalf("a new session's TimeZone is %q (%v), want UTC", tz, err)
		}
		e.start()
		// The query as written, read under the defining session's zone;
		// CompareNow (status) applies the recorded settings itself.
		e.exec(`SET TimeZone = 'Asia/Tokyo'`)
		check := func(when string) {
			t.Helper()
			levelConverge(e, settingsDefs, when)
			e.converge(when)
		}
		check("after the build")
		for i, w := range []string{
			`INSERT INTO events VALUES (6, '2026-03-02 14:59:59+00', 'c', '3 days', 0.3), (7, '2026-03-02 15:00+00', 'c', '1 second', 7)`,
			`UPDATE events SET at = at + interval '20 minutes' WHERE id IN (1, 6)`,
			`UPDATE events SET note = 'b', at = '2026-04-01 15:05+00' WHERE id = 2; DELETE FROM events WHERE id = 4`,
		} {
			e.exec(w)
			check("write " + string(rune('1'+i)))
		}
		// Under UTC the same query gives other rows near midnight: the
		// targets are Tokyo's, not the runner's.
		e.exec(`SET TimeZone = 'UTC'`)
		diff, err := selfcheck.Compare(ctx, e.conn, pgx.Identifier{"public", "s_day"}, []string{"day", "n"}, settingsDefs[0].query)
		if err != nil {
			t.Fatal(err)
		}
		if diff.Equal() {
			t.Error("s_day equals its query under UTC too: the data does not tell the zones apart")
		}
	})
}

// TestClockReadersRefused: functions that read the clock or the database
// stay refused, each named, whatever settings the transform records.
func TestClockReadersRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(settingsSchema + `; CREATE SEQUENCE seq; CREATE FUNCTION stab(int) RETURNS int STABLE LANGUAGE plpgsql AS 'BEGIN RETURN $1; END'`)
	refuseEach(t, e, []refusal{
		{`SELECT id, now() AS n FROM events`, `now() is not immutable`},
		{`SELECT id FROM events WHERE at < current_date`, `CURRENT_DATE is not immutable`},
		{`SELECT id, current_timestamp AS ts FROM events`, `CURRENT_TIMESTAMP is not immutable`},
		{`SELECT id, random() AS r FROM events`, `random() is not immutable`},
		{`SELECT id, nextval('seq') AS s FROM events`, `nextval() is not immutable`},
		{`SELECT id, clock_timestamp() AS c FROM events`, `clock_timestamp() is not immutable`},
		{`SELECT id, current_user AS u FROM events`, `CURRENT_USER is not immutable`},
		{`SELECT id, txid_current() AS x FROM events`, `txid_current() is not immutable`},
		{`SELECT id, age(at) AS a FROM events`, `calls age(timestamp with time zone) (stable), which reads more than the session settings recorded with the transform`},
		{`SELECT id, to_regclass(note) AS r FROM events`, `calls to_regclass(text) (stable)`},
		{`SELECT id FROM events WHERE at > pg_postmaster_start_time()`, `calls pg_postmaster_start_time() (stable)`},
		{`SELECT id, note::date AS d FROM events`, `calls date_in(cstring) (stable)`},
		{`SELECT id, stab(id) AS s FROM events`, `calls stab(integer) (stable)`},
		{`SELECT note, age(max(at)) AS a, count(*) AS n FROM events GROUP BY note`, `select list item 2 (age(max(at))) calls age(timestamp with time zone) (stable)`},
		{`SELECT id, age(at) AS a, to_regclass(note) AS r FROM events WHERE at > pg_postmaster_start_time()`,
			`the query has 3 unsupported parts: (1) WHERE (at > pg_postmaster_start_time()) calls pg_postmaster_start_time() (stable)`},
	})
}
