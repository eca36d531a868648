package engine

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// col is a select item that is a plain column reference (Column set, and
// ColumnRef when expr is qualified).
func col(name, expr, column string, group int) Target {
	ref := ""
	if parts := strings.Split(expr, "."); len(parts) == 2 {
		ref = strings.Trim(parts[0], `"`)
	}
	return Target{Name: name, Expr: expr, Column: column, ColumnRef: ref, Group: group}
}

// ex is a select item that is an expression (no Column).
func ex(name, expr string, group int) Target {
	return Target{Name: name, Expr: expr, Group: group}
}

// ag is a plain aggregate select item: one argument (or *), nothing else
// inside the call.
func ag(name, expr, fn, arg string) Target {
	call := expr[:strings.Index(expr, "(")]
	a := &Agg{Func: fn, Arg: arg, Star: arg == "", Plain: true, Text: expr, Call: call + "(*)"}
	if arg != "" {
		a.Inputs, a.Call = []string{arg}, call+"("+AggInput(0)+")"
	}
	return Target{Name: name, Expr: expr, Group: -1, Agg: a}
}

func create(name string, q *Query) Statement {
	return Statement{Kind: CreateTransform, Name: name, Query: q}
}

type goodCase struct {
	name   string
	script string
	want   []Statement // Query.SQL is checked only when set in want
}

type badCase struct {
	name   string
	script string
	want   string // substring of the error sentence
}

func goodCases() []goodCase {
	return []goodCase{
		{
			name:   "row transform",
			script: "CREATE TRANSFORM active_users AS SELECT id, name FROM users",
			want: []Statement{create("active_users", &Query{
				SQL:    "SELECT id, name FROM users",
				Tables: []TableRef{{Name: "users"}}, Cover: []int{0},
				Targets: []Target{col("id", "id", "id", -1), col("name", "name", "name", -1)},
			})},
		},
		{
			name:   "schema, alias, where, case folding",
			script: "create transform Sales.Daily as select o.id, o.amount * 2 as Double_Amount from PUBLIC.Orders as O where o.amount > 0",
			want: []Statement{{Kind: CreateTransform, Schema: "sales", Name: "daily", Query: &Query{
				SQL:    "SELECT o.id, o.amount * 2 AS double_amount FROM public.orders o WHERE o.amount > 0",
				Tables: []TableRef{{Schema: "public", Name: "orders", Alias: "o"}}, Cover: []int{0},
				Targets: []Target{col("id", "o.id", "id", -1), ex("double_amount", "o.amount * 2", -1)},
				Where:   "o.amount > 0",
			}}},
		},
		{
			name:   "quoted identifiers kept exactly",
			script: `CREATE TRANSFORM "Sales"."Daily ""Totals""" AS SELECT "Id", "T"."Name" AS "Label" FROM "Sch"."Orders" "T"`,
			want: []Statement{{Kind: CreateTransform, Schema: "Sales", Name: `Daily "Totals"`, Query: &Query{
				Tables: []TableRef{{Schema: "Sch", Name: "Orders", Alias: "T"}}, Cover: []int{0},
				Targets: []Target{col("Id", `"Id"`, "Id", -1), col("Label", `"T"."Name"`, "Name", -1)},
			}}},
		},
		{
			name:   "keywords in any case, IF NOT EXISTS, comments inside the header",
			script: "cReAtE /* c */ TrAnSfOrM iF nOt ExIsTs -- line\n x aS sElEcT a FrOm t",
			want: []Statement{{Kind: CreateTransform, Name: "x", IfNotExists: true, Query: &Query{
				SQL:    "SELECT a FROM t",
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets: []Target{col("a", "a", "a", -1)},
			}}},
		},
		{
			name:   "unreserved keyword as a name",
			script: "CREATE TRANSFORM data AS SELECT a FROM t",
			want: []Statement{create("data", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0}, Targets: []Target{col("a", "a", "a", -1)},
			})},
		},
		{
			name:   "parenthesised select",
			script: "CREATE TRANSFORM x AS (SELECT a FROM t WHERE b)",
			want: []Statement{create("x", &Query{
				SQL:    "SELECT a FROM t WHERE b",
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0}, Targets: []Target{col("a", "a", "a", -1)}, Where: "b",
			})},
		},
		{
			name: "default output names follow FigureColname",
			script: `CREATE TRANSFORM x AS SELECT lower(name), amount::numeric(10,2), '1'::int, ` +
				`CASE WHEN flag THEN b ELSE c END, CASE WHEN flag THEN 1 ELSE 0 END, coalesce(d, 0), ` +
				`greatest(e, f), nullif(g, 0), ARRAY[h, i], ROW(j, k), (comp).field, arr[1], title COLLATE "C", ` +
				`'x'::text::varchar, pg_catalog.upper(name) AS up, t.m FROM t`,
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets: []Target{
					ex("lower", "lower(name)", -1),
					ex("amount", "amount::numeric(10, 2)", -1),
					ex("int4", "'1'::int", -1),
					ex("c", "CASE WHEN flag THEN b ELSE c END", -1),
					ex("case", "CASE WHEN flag THEN 1 ELSE 0 END", -1),
					ex("coalesce", "COALESCE(d, 0)", -1),
					ex("greatest", "GREATEST(e, f)", -1),
					ex("nullif", "NULLIF(g, 0)", -1),
					ex("array", "ARRAY[h, i]", -1),
					ex("row", "ROW(j, k)", -1),
					ex("field", "(comp).field", -1),
					ex("arr", "arr[1]", -1),
					ex("title", `title COLLATE "C"`, -1),
					ex("varchar", "'x'::text::varchar", -1),
					ex("up", "pg_catalog.upper(name)", -1),
					col("m", "t.m", "m", -1),
				},
			})},
		},
		{
			name: "immutable expressions in WHERE",
			script: "CREATE TRANSFORM x AS SELECT id FROM t WHERE status IN ('a', 'b') AND name LIKE 'x%' " +
				"AND amount BETWEEN 1 AND 10 AND deleted_at IS NULL AND created_at > '2024-01-01'::date AND t.id <> 0",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets: []Target{col("id", "id", "id", -1)},
				Where:   "status IN ('a', 'b') AND name LIKE 'x%' AND amount BETWEEN 1 AND 10 AND deleted_at IS NULL AND created_at > '2024-01-01'::date AND t.id <> 0",
			})},
		},
		{
			name: "aggregate transform (a per-customer revenue example)",
			script: `CREATE TRANSFORM customer_revenue AS
  SELECT o.customer_id, count(*) AS orders,
         sum(o.amount) AS revenue, max(o.created_at) AS last_order
  FROM orders o
  WHERE o.status <> 'cancelled'
  GROUP BY o.customer_id;`,
			want: []Statement{create("customer_revenue", &Query{
				SQL:    "SELECT o.customer_id, count(*) AS orders, sum(o.amount) AS revenue, max(o.created_at) AS last_order FROM orders o WHERE o.status <> 'cancelled' GROUP BY o.customer_id",
				Tables: []TableRef{{Name: "orders", Alias: "o"}}, Cover: []int{0},
				Targets: []Target{
					col("customer_id", "o.customer_id", "customer_id", 0),
					ag("orders", "count(*)", "count", ""),
					ag("revenue", "sum(o.amount)", "sum", "o.amount"),
					ag("last_order", "max(o.created_at)", "max", "o.created_at"),
				},
				Where:        "o.status <> 'cancelled'",
				GroupBy:      []string{"o.customer_id"},
				GroupByAlias: []string{""},
				Aggregate:    true,
			})},
		},
		{
			name:   "GROUP BY ordinals",
			script: "CREATE TRANSFORM x AS SELECT region, date_trunc('day', created_at) AS day, count(*) AS n FROM orders GROUP BY 2, 1",
			want: []Statement{create("x", &Query{
				SQL:    "SELECT region, date_trunc('day', created_at) AS day, count(*) AS n FROM orders GROUP BY 2, 1",
				Tables: []TableRef{{Name: "orders"}}, Cover: []int{0},
				Targets: []Target{
					col("region", "region", "region", 1),
					ex("day", "date_trunc('day', created_at)", 0),
					ag("n", "count(*)", "count", ""),
				},
				GroupBy:      []string{"date_trunc('day', created_at)", "region"},
				GroupByAlias: []string{"", ""},
				Aggregate:    true,
			})},
		},
		{
			name:   "GROUP BY ordinal of a constant item",
			script: "CREATE TRANSFORM x AS SELECT v, 'k' AS g, count(*) AS n FROM s GROUP BY v, 2",
			want: []Statement{create("x", &Query{
				SQL:    "SELECT v, 'k' AS g, count(*) AS n FROM s GROUP BY v, 2",
				Tables: []TableRef{{Name: "s"}}, Cover: []int{0},
				Targets: []Target{
					col("v", "v", "v", 0),
					ex("g", "'k'", 1),
					ag("n", "count(*)", "count", ""),
				},
				GroupBy:      []string{"v", "COALESCE('k')"},
				GroupByAlias: []string{"", ""},
				Aggregate:    true,
			})},
		},
		{
			name:   "GROUP BY output alias resolves to the select item",
			script: "CREATE TRANSFORM x AS SELECT lower(email) AS email_l, count(*) AS n FROM users GROUP BY email_l",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "users"}}, Cover: []int{0},
				Targets:      []Target{ex("email_l", "lower(email)", 0), ag("n", "count(*)", "count", "")},
				GroupBy:      []string{"lower(email)"},
				GroupByAlias: []string{"email_l"},
				Aggregate:    true,
			})},
		},
		{
			name:   "GROUP BY name of a plain column item is the column",
			script: "CREATE TRANSFORM x AS SELECT o.region, count(*) AS n FROM orders o GROUP BY region",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "orders", Alias: "o"}}, Cover: []int{0},
				Targets:      []Target{col("region", "o.region", "region", 0), ag("n", "count(*)", "count", "")},
				GroupBy:      []string{"region"},
				GroupByAlias: []string{""},
				Aggregate:    true,
			})},
		},
		{
			name:   "qualified GROUP BY matches unqualified select item",
			script: "CREATE TRANSFORM x AS SELECT region, count(*) AS n FROM orders o GROUP BY o.region",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "orders", Alias: "o"}}, Cover: []int{0},
				Targets:      []Target{col("region", "region", "region", 0), ag("n", "count(*)", "count", "")},
				GroupBy:      []string{"o.region"},
				GroupByAlias: []string{""},
				Aggregate:    true,
			})},
		},
		{
			name:   "duplicate GROUP BY entries collapse",
			script: "CREATE TRANSFORM x AS SELECT region, count(*) AS n FROM t GROUP BY region, region, 1, t.region",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets:      []Target{col("region", "region", "region", 0), ag("n", "count(*)", "count", "")},
				GroupBy:      []string{"region"},
				GroupByAlias: []string{""},
				Aggregate:    true,
			})},
		},
		{
			name:   "GROUP BY expression",
			script: "CREATE TRANSFORM x AS SELECT date_trunc('month', created_at) AS month, sum(price * qty) AS revenue FROM orders GROUP BY date_trunc('month', created_at)",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "orders"}}, Cover: []int{0},
				Targets: []Target{
					ex("month", "date_trunc('month', created_at)", 0),
					ag("revenue", "sum(price * qty)", "sum", "price * qty"),
				},
				GroupBy:      []string{"date_trunc('month', created_at)"},
				GroupByAlias: []string{""},
				Aggregate:    true,
			})},
		},
		{
			name:   "one-row aggregate",
			script: "CREATE TRANSFORM totals AS SELECT count(*) AS n, count(x) AS nx, sum(amount) AS total, avg(amount) AS mean, min(x), max(x), pg_catalog.count(y) AS ny FROM t WHERE amount > 0",
			want: []Statement{create("totals", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets: []Target{
					ag("n", "count(*)", "count", ""),
					ag("nx", "count(x)", "count", "x"),
					ag("total", "sum(amount)", "sum", "amount"),
					ag("mean", "avg(amount)", "avg", "amount"),
					ag("min", "min(x)", "min", "x"),
					ag("max", "max(x)", "max", "x"),
					ag("ny", "pg_catalog.count(y)", "count", "y"),
				},
				Where:     "amount > 0",
				Aggregate: true,
			})},
		},
		{
			name:   "aggregate over an immutable expression",
			script: "CREATE TRANSFORM x AS SELECT k, max(lower(name) || '!') AS m FROM t GROUP BY k",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets:      []Target{col("k", "k", "k", 0), ag("m", "max(lower(name) || '!')", "max", "lower(name) || '!'")},
				GroupBy:      []string{"k"},
				GroupByAlias: []string{""},
				Aggregate:    true,
			})},
		},
		{
			name: "script: comments and semicolons in strings, dollar quotes and quoted identifiers",
			script: `-- leading comment; with a semicolon
CREATE TRANSFORM a AS SELECT id, 'x;y' AS s FROM t; /* block ; comment */
PAUSE TRANSFORM a;
RESUME TRANSFORM "we;ird";
CREATE TRANSFORM b AS SELECT id, $$semi;colon$$ AS d, $tag$ $$ ; $tag$ AS e, "col;name" FROM t2 WHERE note <> E'\';' ;;
;
DROP TRANSFORM IF EXISTS a;
drop transform s.b -- trailing comment without a semicolon`,
			want: []Statement{
				create("a", &Query{
					SQL:    "SELECT id, 'x;y' AS s FROM t",
					Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
					Targets: []Target{col("id", "id", "id", -1), ex("s", "'x;y'", -1)},
				}),
				{Kind: PauseTransform, Name: "a"},
				{Kind: ResumeTransform, Name: "we;ird"},
				create("b", &Query{
					Tables: []TableRef{{Name: "t2"}}, Cover: []int{0},
					Targets: []Target{
						col("id", "id", "id", -1), ex("d", "'semi;colon'", -1), ex("e", "' $$ ; '", -1),
						col("col;name", `"col;name"`, "col;name", -1),
					},
					Where: "note <> ''';'",
				}),
				{Kind: DropTransform, Name: "a", IfExists: true},
				{Kind: DropTransform, Schema: "s", Name: "b"},
			},
		},
		{
			name:   "DROP TRANSFORM IF EXISTS named if",
			script: "DROP TRANSFORM IF EXISTS if; DROP TRANSFORM if",
			want:   []Statement{{Kind: DropTransform, Name: "if", IfExists: true}, {Kind: DropTransform, Name: "if"}},
		},
		{
			name:   "RESUME TRANSFORM ALL, and a transform named all quoted",
			script: `RESUME TRANSFORM ALL; resume transform all; RESUME TRANSFORM "all"`,
			want:   []Statement{{Kind: ResumeTransform, All: true}, {Kind: ResumeTransform, All: true}, {Kind: ResumeTransform, Name: "all"}},
		},
		{
			name:   "ALTER TRANSFORM: clauses in order, commas inside calls, COLUMN optional, quoted names",
			script: `ALTER TRANSFORM s.t ADD n AS coalesce(a, 0) + 1, DROP COLUMN "Old", ALTER COLUMN total AS round(price * qty, 2)`,
			want: []Statement{{Kind: AlterTransform, Schema: "s", Name: "t", Alter: []AlterClause{
				{Op: "add", Column: "n", Expr: "coalesce(a, 0) + 1"}, {Op: "drop", Column: "Old"}, {Op: "alter", Column: "total", Expr: "round(price * qty, 2)"}}}},
		},
		{
			name:   "REQUEST BACKFILL OF a table, bare or qualified, named like the reserved prefix",
			script: `REQUEST BACKFILL OF orders; request backfill of "Sales".__raw`,
			want:   []Statement{{Kind: RequestBackfill, Name: "orders"}, {Kind: RequestBackfill, Schema: "Sales", Name: "__raw"}},
		},
		{
			name:   "63-byte name",
			script: "PAUSE TRANSFORM " + strings.Repeat("n", 63),
			want:   []Statement{{Kind: PauseTransform, Name: strings.Repeat("n", 63)}},
		},
		{
			name:   "expression over a group column",
			script: "CREATE TRANSFORM x AS SELECT upper(name) AS u, count(*) AS n FROM t GROUP BY name",
			want: []Statement{create("x", &Query{
				Tables: []TableRef{{Name: "t"}}, Cover: []int{0},
				Targets: []Target{{Name: "u", Expr: "upper(name)", Composed: "upper(__s.__g0)", Group: -1},
					ag("n", "count(*)", "count", "")},
				GroupBy: []string{"name"}, GroupByAlias: []string{""}, Aggregate: true,
			})},
		},
		{
			name:   "non-ASCII names fold ASCII only",
			script: `PAUSE TRANSFORM Ünïcode_X`,
			want:   []Statement{{Kind: PauseTransform, Name: "Ünïcode_x"}},
		},
	}
}

// TestParseLeavesGroupingToPostgreSQL: a column outside aggregates that
// matches no GROUP BY expression by text is PostgreSQL's to resolve
// (functionally dependent on a grouped primary key, or refused in its own
// words): the definition is expanded and read again as PostgreSQL
// qualifies it (ADR 0037).
func TestParseLeavesGroupingToPostgreSQL(t *testing.T) {
	for _, tc := range []struct{ name, query string }{
		{"ungrouped column", "SELECT region, amount, count(*) AS n FROM t GROUP BY region"},
		{"ungrouped column in one-row aggregate", "SELECT region, count(*) AS n FROM t"},
		{"composed item reads a non-group column", "SELECT k, sum(a) / b AS r FROM t GROUP BY k"},
		{"HAVING reads a non-group column", "SELECT k, count(*) AS n FROM t GROUP BY k HAVING b > 1"},
		{"expression over a group column and another", "SELECT region || city AS r, count(*) AS n FROM t GROUP BY region"},
		{"qualified item, unqualified GROUP BY over a join", "SELECT c.region, count(*) AS n FROM customers c JOIN orders o ON o.cid = c.id GROUP BY region"},
		{"unqualified item, qualified GROUP BY over a join", "SELECT teamid, count(*) AS n FROM customers c JOIN orders o ON o.cid = c.id GROUP BY c.teamid"},
		{"columns of a grouped primary key's table", "SELECT p.id, p.name, count(o.id) AS n FROM products p LEFT JOIN orders o ON o.pid = p.id GROUP BY p.id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sts, err := ParseStatements("CREATE TRANSFORM x AS " + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if q := sts[0].Query; !q.Expand || q.SQL != tc.query {
				t.Errorf("got Expand=%v SQL=%q, want the query left to PostgreSQL", q.Expand, q.SQL)
			}
		})
	}
}

// TestParseDependentColumns reads grouped queries as PostgreSQL writes
// them back (qualified): a column no GROUP BY expression matches is
// functionally dependent on a grouped primary key and becomes a group
// column of its own, visible when selected as itself, hidden when an
// expression or HAVING reads it (ADR 0037).
func TestParseDependentColumns(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		groupBy     []string
		groups      []int // each target's Group
		composed    []string
		having      string
	}{
		{"selected, read by an expression and HAVING",
			"SELECT p.id, p.name, upper(p.name) AS u, count(o.id) AS n FROM products p LEFT JOIN orders o ON o.pid = p.id GROUP BY p.id HAVING p.price > 1",
			[]string{"p.id", "p.name", "p.price"}, []int{0, 1, -1, -1}, []string{"", "", "upper(__s.name)", ""}, "__s.__g2 > 1"},
		{"join, names that match once qualified",
			"SELECT c.region, count(*) AS n FROM customers c JOIN orders o ON o.cid = c.id GROUP BY c.region",
			[]string{"c.region"}, []int{0, -1}, []string{"", ""}, ""},
		{"one table",
			"SELECT t.id, t.name, t.name || '!' AS bang, count(*) AS n FROM t GROUP BY t.id",
			[]string{"t.id", "t.name"}, []int{0, 1, -1, -1}, []string{"", "", "__s.name || '!'", ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseQuery("x", tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(q.GroupBy, tc.groupBy) {
				t.Errorf("GroupBy %q, want %q", q.GroupBy, tc.groupBy)
			}
			for i, tg := range q.Targets {
				if tg.Group != tc.groups[i] || tg.Composed != tc.composed[i] {
					t.Errorf("target %d (%s): Group %d Composed %q, want %d %q", i+1, tg.Name, tg.Group, tg.Composed, tc.groups[i], tc.composed[i])
				}
			}
			if q.Having != tc.having {
				t.Errorf("Having %q, want %q", q.Having, tc.having)
			}
		})
	}
}

func TestParseStatementsGood(t *testing.T) {
	for _, tt := range goodCases() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatements(tt.script)
			if err != nil {
				t.Fatalf("ParseStatements: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d statements, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				if gq, wq := got[i].Query, tt.want[i].Query; gq != nil && wq != nil {
					if gq.SQL == "" {
						t.Errorf("statement %d: empty Query.SQL", i+1)
					}
					if wq.SQL == "" {
						wq.SQL = gq.SQL
					}
					if wq.Rewritten == "" {
						wq.Rewritten = gq.Rewritten
					}
					if wq.Equalities == nil {
						wq.Equalities = gq.Equalities
					}
					if wq.Aggs == nil {
						for _, t := range wq.Targets {
							if t.Agg != nil {
								wq.Aggs = append(wq.Aggs, t.Agg)
							}
						}
					}
				}
				if got[i].Query != nil {
					checkQuery(t, got[i].Query)
					got[i].Query.from = nil // the parse tree; FromSQL is tested apart
					got[i].Query.tree = nil
					got[i].Query.columns = nil
					got[i].Query.joinConds = nil
				}
				if !reflect.DeepEqual(got[i], tt.want[i]) {
					t.Errorf("statement %d:\n got %s\nwant %s", i+1, dump(got[i]), dump(tt.want[i]))
				}
			}
		})
	}
}

func dump(s Statement) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kind=%d schema=%q name=%q ifNotExists=%v ifExists=%v", s.Kind, s.Schema, s.Name, s.IfNotExists, s.IfExists)
	if q := s.Query; q != nil {
		fmt.Fprintf(&b, "\n  SQL=%q\n  Tables=%+v Outer=%+v Cover=%v Where=%q GroupBy=%q GroupByAlias=%q Aggregate=%v", q.SQL, q.Tables, q.Outer, q.Cover, q.Where, q.GroupBy, q.GroupByAlias, q.Aggregate)
		for _, t := range q.Targets {
			fmt.Fprintf(&b, "\n  target %+v", t)
			if t.Agg != nil {
				fmt.Fprintf(&b, " agg %+v", *t.Agg)
			}
		}
	}
	return b.String()
}

func badCases() []badCase {
	tests := []badCase{
		// Script and statement prefixes.
		{"empty script", "", "script: no statement found"},
		{"invalid UTF-8", "PAUSE TRANSFORM a;\nCREATE TRANSFORM A AS SELECT \xaf", "script: invalid UTF-8 at byte 48 (line 2, column 30)"},
		{"comments only", "-- x;\n/* y; */ ; ;", "script: no statement found"},
		{"plain SELECT", "SELECT 1", "statement 1: expected CREATE TRANSFORM, ALTER TRANSFORM, PAUSE TRANSFORM, RESUME TRANSFORM, DROP TRANSFORM or REQUEST BACKFILL, found \"SELECT\" (line 1, column 1)"},
		{"ALTER without TRANSFORM", "ALTER TABLE t ADD x int", `expected TRANSFORM after ALTER, found "TABLE"`},
		{"ALTER without a clause", "ALTER TRANSFORM t", "expected ADD, DROP or ALTER, found the end of the statement"},
		{"ALTER of the key space", "ALTER TRANSFORM t SET WHERE x", `expected ADD, DROP or ALTER, found "SET"; ALTER TRANSFORM edits computed columns only`},
		{"ALTER ADD without AS", "ALTER TRANSFORM t ADD x", "expected AS after ADD x, found the end of the statement"},
		{"ALTER ADD of two expressions", "ALTER TRANSFORM t ADD x AS a b c", `ADD x AS a b c: syntax error`},
		{"ALTER ADD of a query", "ALTER TRANSFORM t ADD x AS 1 FROM u", "not one expression"},
		{"ALTER ADD without an expression", "ALTER TRANSFORM t ADD x AS , DROP y", "the expression is missing"},
		{"ALTER clauses without a comma", "ALTER TRANSFORM t DROP x DROP y", `expected ',' or the end of the statement, found "DROP"`},
		{"REQUEST without BACKFILL", "REQUEST orders", `expected BACKFILL after REQUEST, found "orders" (line 1, column 9); write REQUEST BACKFILL OF table`},
		{"REQUEST BACKFILL without OF", "REQUEST BACKFILL orders", `expected OF after REQUEST BACKFILL, found "orders"`},
		{"REQUEST BACKFILL of nothing", "REQUEST BACKFILL OF", "expected a table name, found the end of the statement"},
		{"REQUEST BACKFILL of three parts", "REQUEST BACKFILL OF a.b.c", "a table name has at most two parts (schema.name)"},
		{"REQUEST BACKFILL of two tables", "REQUEST BACKFILL OF a, b", `table "a": unexpected ","`},
		{"second statement unknown", "PAUSE TRANSFORM a;\n  VACUUM", "statement 2: expected CREATE TRANSFORM"},
		{"CREATE TABLE", "CREATE TABLE t (a int)", "expected TRANSFORM after CREATE, found \"TABLE\""},
		{"OR REPLACE with IF NOT EXISTS", "CREATE OR REPLACE TRANSFORM IF NOT EXISTS x AS SELECT a FROM t", `transform "x": CREATE OR REPLACE and IF NOT EXISTS contradict each other`},
		{"OR without REPLACE", "CREATE OR TRANSFORM x AS SELECT a FROM t", "expected REPLACE after CREATE OR"},
		{"WITHOUT SOURCE without INDEX", "CREATE TRANSFORM x WITHOUT SOURCE AS SELECT a FROM t", `write WITHOUT SOURCE INDEX`},
		{"missing AS", "CREATE TRANSFORM x SELECT a FROM t", `transform "x": expected AS after the transform name, found "SELECT"`},
		{"nothing after AS", "CREATE TRANSFORM x AS -- nothing\n;", `transform "x": expected a SELECT after AS`},
		{"missing name", "CREATE TRANSFORM", "expected a transform name, found the end of the statement"},
		{"three-part name", "CREATE TRANSFORM a.b.c AS SELECT a FROM t", "at most two parts"},
		{"reserved word name", "CREATE TRANSFORM select AS SELECT a FROM t", `"select" is a reserved word`},
		{"reserved prefix", "CREATE TRANSFORM __x AS SELECT a FROM t", `transform "__x": names beginning with "__" are reserved`},
		{"quoted reserved prefix", `DROP TRANSFORM s."__x"`, `names beginning with "__" are reserved`},
		{"64-byte name", "PAUSE TRANSFORM " + strings.Repeat("n", 64), "limited to 63 bytes"},
		{"64-byte schema", "PAUSE TRANSFORM " + strings.Repeat("s", 64) + ".x", "limited to 63 bytes"},
		{"unicode escape name", `CREATE TRANSFORM U&"d\0061t" AS SELECT a FROM t`, "Unicode-escaped names"},
		{"string as name", `PAUSE TRANSFORM 'x'`, `expected a transform name, found "'x'"`},
		{"extra tokens", "PAUSE TRANSFORM x y", `transform "x": unexpected "y" after the transform name`},
		{"PAUSE without TRANSFORM", "PAUSE x", `expected TRANSFORM after PAUSE, found "x"`},
		{"RESUME without name", "RESUME TRANSFORM;", "expected a transform name"},
		{"PAUSE TRANSFORM ALL", "PAUSE TRANSFORM ALL", "PAUSE TRANSFORM ALL is not supported; pause each transform by name"},
		{"RESUME TRANSFORM ALL with more", "RESUME TRANSFORM ALL x", `RESUME TRANSFORM ALL: unexpected "x" after RESUME TRANSFORM ALL`},
		{"RESUME TRANSFORM ALL.x", "RESUME TRANSFORM all.x", `unexpected "." after RESUME TRANSFORM ALL`},
		{"DROP TABLE", "DROP TABLE x", "expected TRANSFORM after DROP"},
		{"IF NOT without EXISTS", "CREATE TRANSFORM IF NOT x AS SELECT a FROM t", `expected EXISTS after IF NOT, found "x"`},
		{"unterminated string", "CREATE TRANSFORM x AS SELECT 'abc FROM t", "unterminated quoted string"},
		{"unterminated comment", "PAUSE TRANSFORM x; /* abc", "unterminated /* comment"},
		{"unterminated dollar quote", "CREATE TRANSFORM x AS SELECT $a$ abc FROM t", "unterminated dollar-quoted string"},
		{"syntax error at end", "CREATE TRANSFORM x AS SELECT a FROM t WHERE", `transform "x": syntax error at end of input (line 1, column 44)`},
		{"syntax error position", "PAUSE TRANSFORM y;\nCREATE TRANSFORM x AS\n  SELECT a\n  FROM t wher a", `transform "x": syntax error at or near "a" (line 4, column 15)`},
		{"syntax error after multibyte", "CREATE TRANSFORM x AS SELECT 'ééé' AS e FROM t WHERE WHERE", `syntax error at or near "WHERE" (line 1, column 54)`},
		{"not a SELECT", "CREATE TRANSFORM x AS DELETE FROM t", `transform "x": the query after AS must be a SELECT`},

		// Statement-level clauses.
		// WITH RECURSIVE: only linear recursion (ADR 0035); each refusal
		// names the part, its position and the form that is kept.
		{"recursive anchor without table", "CREATE TRANSFORM x AS WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT a FROM t",
			`WITH RECURSIVE c: its anchor reads no table; a recursive CTE is kept by anchor row, each found by its source row's key — select the anchor from its table (SELECT id, 0 FROM nodes WHERE id = 1) (line 1, column 54)`},
		{"recursive term reads the CTE twice", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION SELECT r1.a FROM r r1 JOIN r r2 ON r2.a = r1.a) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term reads r 2 times; only linear recursion is kept (a recursive CTE is kept as <anchor SELECT over tables> UNION [ALL] <SELECT … FROM the CTE JOIN tables ON … WHERE …>, the CTE read once in its recursive term) — a path through two rows of the CTE at once is not (line 1, column 96)`},
		{"mutual recursion", "CREATE TRANSFORM x AS WITH RECURSIVE p(a) AS (SELECT a FROM t UNION ALL SELECT q.a FROM q), q(a) AS (SELECT a FROM p) SELECT a FROM p",
			`WITH RECURSIVE p reads q, which is defined after it (mutual recursion or a forward reference); a recursive CTE is kept as`},
		{"recursive aggregate", "CREATE TRANSFORM x AS WITH RECURSIVE r(a, n) AS (SELECT a, 1 FROM t UNION ALL SELECT u.b, count(*) FROM r JOIN u ON u.a = r.a GROUP BY u.b) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term: GROUP BY is not kept in a recursive CTE; aggregate over the CTE in the outer query (SELECT part, sum(qty) FROM bom GROUP BY part)`},
		{"recursive window", "CREATE TRANSFORM x AS WITH RECURSIVE r(a, n) AS (SELECT a, 1 FROM t UNION ALL SELECT u.b, row_number() OVER (ORDER BY u.b) FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term: a window function is not kept in a recursive CTE; compute it in the outer query over the CTE (line 1, column 91)`},
		{"recursive LIMIT", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL (SELECT u.b FROM r JOIN u ON u.a = r.a ORDER BY u.b LIMIT 5)) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term: ORDER BY or LIMIT is not kept in a recursive CTE; remove it; bound the recursion with a condition (WHERE depth < 10) (line 1, column 121)`},
		{"recursive outer join", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM r, u LEFT JOIN t ON t.a = u.b WHERE u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term: an outer join is not kept in a recursive CTE; join with INNER JOIN`},
		{"recursive reference under an outer join", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM u LEFT JOIN r ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term reads r outside its FROM's inner joins (in a subquery, or on a side of an outer join); a recursive CTE is kept as <anchor SELECT over tables> UNION [ALL] <SELECT … FROM the CTE JOIN tables ON … WHERE …>, the CTE read once in its recursive term (line 1, column 101)`},
		{"recursive reference in a subquery", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM u WHERE u.a IN (SELECT a FROM r)) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term reads r outside its FROM's inner joins (in a subquery, or on a side of an outer join); a recursive CTE is kept as`},
		{"recursive subquery", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM r JOIN u ON u.a = r.a WHERE EXISTS (SELECT 1 FROM t WHERE t.a = u.b)) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term: a subquery in an expression is not kept in a recursive CTE; join its table in FROM instead (line 1, column 117)`},
		{"recursive DISTINCT", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT DISTINCT u.b FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term: DISTINCT is not kept in a recursive CTE; write UNION instead of UNION ALL, which keeps distinct rows (line 1, column 89)`},
		{"recursive INTERSECT", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t INTERSECT SELECT u.b FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r reads itself but is not a UNION of an anchor and a recursive term; a recursive CTE is kept as`},
		{"recursive anchor reads itself", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM r UNION ALL SELECT u.b FROM u) SELECT a FROM r",
			`WITH RECURSIVE r: its anchor (the SELECT before UNION) reads r itself; a recursive CTE is kept as`},
		{"recursive anchor set operation", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION SELECT b FROM u UNION ALL SELECT u.b FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: its anchor (the part before the last UNION) is itself a set operation; write one SELECT as the anchor — define one recursive CTE per anchor and UNION ALL them in the outer query`},
		{"recursive CYCLE clause", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM r JOIN u ON u.a = r.a) CYCLE a SET is_cycle USING path SELECT a FROM r",
			`WITH RECURSIVE r: CYCLE … SET is not kept; carry the path yourself (ARRAY[id] in the anchor, path || id in the recursive term) and stop with WHERE NOT id = ANY(path), or write UNION instead of UNION ALL, which ends cycles by itself`},
		{"recursive SEARCH clause", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM r JOIN u ON u.a = r.a) SEARCH DEPTH FIRST BY a SET ord SELECT a FROM r",
			`WITH RECURSIVE r: SEARCH … SET is not kept`},
		{"recursive unnamed column", "CREATE TRANSFORM x AS WITH RECURSIVE r AS (SELECT a, 0 FROM t UNION ALL SELECT u.b, 1 FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: column 2 has no name; name the columns (WITH RECURSIVE r(a, b, …) AS …)`},
		{"recursive hidden column name", "CREATE TRANSFORM x AS WITH RECURSIVE r(a, __d) AS (SELECT a, 0 FROM t UNION ALL SELECT u.b, 1 FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: column __d begins with "__", which names the engine's hidden columns; rename it`},
		{"recursive ORDER BY on the whole", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT u.b FROM r JOIN u ON u.a = r.a ORDER BY 1) SELECT a FROM r",
			`WITH RECURSIVE r: ORDER BY or LIMIT on the whole recursive query is not kept`},
		{"recursive anchor aggregates", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT max(a) FROM t UNION ALL SELECT u.b FROM r JOIN u ON u.a = r.a) SELECT a FROM r",
			`WITH RECURSIVE r: its anchor: an aggregate (GROUP BY, HAVING or an aggregate call) is not kept in a recursive CTE`},
		{"recursive function in FROM", "CREATE TRANSFORM x AS WITH RECURSIVE r(a) AS (SELECT a FROM t UNION ALL SELECT g FROM r, generate_series(1, r.a) g) SELECT a FROM r",
			`WITH RECURSIVE r: its recursive term reads a function or VALUES list in FROM`},
		{"data-modifying WITH", "CREATE TRANSFORM x AS WITH d AS (DELETE FROM u RETURNING b) SELECT a FROM t", `WITH d holds a data-modifying statement (INSERT, UPDATE, DELETE or MERGE); a transform's query only reads, so remove it`},
		{"set operation column count", "CREATE TRANSFORM x AS SELECT a, b FROM t UNION SELECT a FROM u", "each UNION query must have the same number of columns: branch 1 selects 2, branch 2 selects 1"},
		{"VALUES branch", "CREATE TRANSFORM x AS SELECT a FROM t UNION ALL VALUES (1)", "VALUES is not supported in a transform, also as a branch of UNION"},
		{"VALUES", "CREATE TRANSFORM x AS VALUES (1), (2)", "VALUES is not supported"},
		{"INTO", "CREATE TRANSFORM x AS SELECT a INTO y FROM t", "SELECT INTO is not supported"},
		{"DISTINCT ON", "CREATE TRANSFORM x AS SELECT DISTINCT ON (a) a, b FROM t", "DISTINCT ON without ORDER BY keeps an arbitrary row"},
		{"aggregating subquery in FROM with too many column names", "CREATE TRANSFORM x AS SELECT n FROM (SELECT count(*) AS n FROM t) s(a, b)", `FROM: the subquery s has 1 columns but its alias names 2; name at most as many columns as the subquery selects`},
		{"aggregating subquery in FROM that the subset refuses", "CREATE TRANSFORM x AS SELECT n FROM (SELECT a, string_agg(b, ',') AS n FROM t GROUP BY a) s",
			`transform "x": FROM: the subquery s: select list item 2 (string_agg(b, ',')): string_agg without ORDER BY inside the call has no defined order`},
		{"DISTINCT ON subquery in FROM", "CREATE TRANSFORM x AS SELECT a FROM (SELECT DISTINCT ON (a) a, b FROM t) s", `DISTINCT ON without ORDER BY keeps an arbitrary row of each group`},
		{"LIMIT subquery in FROM", "CREATE TRANSFORM x AS SELECT a FROM (SELECT a FROM t LIMIT 3) s", `FROM: the subquery s uses LIMIT or OFFSET`},
		{"LIMIT", "CREATE TRANSFORM x AS SELECT a FROM t LIMIT 10", "LIMIT without ORDER BY keeps arbitrary rows"},
		{"OFFSET", "CREATE TRANSFORM x AS SELECT a FROM t OFFSET 10", "LIMIT without ORDER BY keeps arbitrary rows"},
		{"FETCH", "CREATE TRANSFORM x AS SELECT a FROM t FETCH FIRST 3 ROWS ONLY", "LIMIT without ORDER BY keeps arbitrary rows"},
		{"FOR UPDATE", "CREATE TRANSFORM x AS SELECT a FROM t FOR UPDATE", "FOR UPDATE/FOR SHARE is not supported"},
		{"FOR SHARE", "CREATE TRANSFORM x AS SELECT a FROM t FOR SHARE SKIP LOCKED", "FOR UPDATE/FOR SHARE is not supported"},

		// FROM.
		{"no FROM", "CREATE TRANSFORM x AS SELECT 1 AS one", "FROM: a transform reads source tables; add FROM <table>"},
		{"join alias", "CREATE TRANSFORM x AS SELECT a FROM (t JOIN u USING (id)) AS j", "FROM: an alias on a join (… JOIN …) AS j hides the names of its tables"},
		{"same name twice", "CREATE TRANSFORM x AS SELECT t.a FROM t JOIN t ON true", `FROM: the name t is used by two FROM items; give one of them an alias`},
		{"unknown qualifier in a join", "CREATE TRANSFORM x AS SELECT v.a FROM t JOIN u ON true", `column reference v.a names v, which is not a FROM table; the FROM tables are referred to as t, u`},
		{"aggregate in ON", "CREATE TRANSFORM x AS SELECT t.a FROM t JOIN u ON count(*) > 0", "aggregate functions are not allowed in JOIN conditions"},
		{"function in FROM alone", "CREATE TRANSFORM x AS SELECT g FROM generate_series(1, 3) g", "FROM: the query reads no table, only functions or VALUES lists"},
		{"VALUES in FROM alone", "CREATE TRANSFORM x AS SELECT v.a FROM (SELECT w.a FROM (VALUES (1), (2)) w(a)) v", "FROM: the query reads no table"},
		{"TABLESAMPLE", "CREATE TRANSFORM x AS SELECT a FROM t TABLESAMPLE SYSTEM (10)", "FROM: TABLESAMPLE is not supported"},
		{"three-part table", "CREATE TRANSFORM x AS SELECT a FROM db.s.t", "FROM: a three-part table name"},
		{"column aliases on table", "CREATE TRANSFORM x AS SELECT a FROM t AS z(a, b)", "FROM: column aliases on the table"},
		{"XMLTABLE", "CREATE TRANSFORM x AS SELECT a FROM XMLTABLE('/r' PASSING '<r/>' COLUMNS a int) x", "FROM: only tables and joins of tables are supported"},

		// Select list.
		{"empty select list", "CREATE TRANSFORM x AS SELECT FROM t", "the select list is empty"},
		{"star in indirection", "CREATE TRANSFORM x AS SELECT (c).* FROM t", "* is not supported"},
		{"star inside a call", "CREATE TRANSFORM x AS SELECT row_to_json(t.*) AS j FROM t", "* is not supported"},
		{"FOR UPDATE in a subquery in FROM", "CREATE TRANSFORM x AS SELECT a FROM (SELECT a FROM t FOR UPDATE) s", "FROM: the subquery s uses FOR UPDATE/FOR SHARE, which is not supported in a transform; remove it"},
		{"window function without OVER", "CREATE TRANSFORM x AS SELECT rank() AS r FROM t", "rank() is a window function"},
		{"window in WHERE", "CREATE TRANSFORM x AS SELECT a FROM t WHERE lag(a) OVER () > 1", "WHERE: window functions"},
		{"CURRENT_DATE", "CREATE TRANSFORM x AS SELECT a, CURRENT_DATE AS d FROM t", "select list item 2 (current_date): CURRENT_DATE is not immutable"},
		{"CURRENT_TIMESTAMP in WHERE", "CREATE TRANSFORM x AS SELECT a FROM t WHERE ts > CURRENT_TIMESTAMP(3)", "WHERE: CURRENT_TIMESTAMP is not immutable"},
		{"CURRENT_USER", "CREATE TRANSFORM x AS SELECT a FROM t WHERE owner = CURRENT_USER", "CURRENT_USER is not immutable"},
		{"LOCALTIME", "CREATE TRANSFORM x AS SELECT LOCALTIME AS lt FROM t", "LOCALTIME is not immutable"},
		{"'now' literal", "CREATE TRANSFORM x AS SELECT a FROM t WHERE ts > 'now'::timestamptz", "the literal 'now' is read when the query runs"},
		{"'today' literal", "CREATE TRANSFORM x AS SELECT a FROM t WHERE d = DATE 'Today'", "the literal 'today'"},
		{"qualified now", "CREATE TRANSFORM x AS SELECT pg_catalog.now() AS n FROM t", "now() is not immutable"},
		{"expression as type modifier", "CREATE TRANSFORM x AS SELECT a::numeric(!0) AS n FROM t", "type modifiers must be simple constants"},
		{"field of a constant", "CREATE TRANSFORM x AS SELECT (0).d AS n FROM t", "a field selection or subscript needs a typed value"},
		{"subscript of a constant", "CREATE TRANSFORM x AS SELECT ('{1,2}')[1] AS n FROM t", "a field selection or subscript needs a typed value"},
		{"parameter", "CREATE TRANSFORM x AS SELECT a FROM t WHERE a = $1", "WHERE: parameters ($1) are not supported"},
		{"three-part column", "CREATE TRANSFORM x AS SELECT public.t.a FROM public.t", "column reference public.t.a has 3 parts; refer to columns as t.column or just column"},
		{"other table qualifier", "CREATE TRANSFORM x AS SELECT u.a FROM t", "column reference u.a names u, which is not the FROM table"},
		{"table name behind an alias", "CREATE TRANSFORM x AS SELECT o.id FROM orders o WHERE orders.id > 1", "WHERE: column reference orders.id names orders, which is not the FROM table; the FROM table is referred to as o, write o.id or just id"},
		{"unnamed expression", "CREATE TRANSFORM x AS SELECT a + 1 FROM t", `select list item 1 (a + 1): PostgreSQL would name it "?column?"; give the expression an alias with AS`},
		{"unnamed constant", "CREATE TRANSFORM x AS SELECT a, 42 FROM t", `"?column?"`},
		{"duplicate names", "CREATE TRANSFORM x AS SELECT a, b AS a FROM t", `select list item 2 (b): output name "a" is already used by select list item 1`},
		{"duplicate default names", "CREATE TRANSFORM x AS SELECT t.a, lower(a), upper(b) AS lower FROM t", `output name "lower" is already used by select list item 2`},
		{"reserved output alias", "CREATE TRANSFORM x AS SELECT a AS __a FROM t", `output name "__a" begins with "__"`},
		{"reserved output column", "CREATE TRANSFORM x AS SELECT __ledger FROM t", `output name "__ledger" begins with "__"`},

		// Aggregates and GROUP BY.
		{"string_agg without ORDER BY", "CREATE TRANSFORM x AS SELECT k, string_agg(a, ',') AS s FROM t GROUP BY k", "string_agg without ORDER BY inside the call has no defined order (in PostgreSQL either)"},
		{"DISTINCT with GROUP BY", "CREATE TRANSFORM x AS SELECT DISTINCT k, count(*) AS n FROM t GROUP BY k", "DISTINCT together with GROUP BY or aggregates is not supported yet"},
		{"every unsupported part at once", "CREATE TRANSFORM x AS SELECT a, random() AS r\nFROM t WHERE b IN (SELECT 1 FROM u WHERE u.c = now())\nLIMIT 3",
			`transform "x": the query has 3 unsupported parts: (1) LIMIT without ORDER BY keeps arbitrary rows (in PostgreSQL too), so the target could not be kept equal to the query; add ORDER BY ending with a key, or remove LIMIT/OFFSET/FETCH and limit rows when you read the target (line 3, column 7); (2) WHERE: now() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it (line 2, column 48); (3) select list item 2 (random()): random() is not immutable`},
		{"JSON_ARRAYAGG", "CREATE TRANSFORM x AS SELECT JSON_ARRAYAGG(a) AS j FROM t", "JSON_ARRAYAGG is not supported"},
		{"nested aggregate", "CREATE TRANSFORM x AS SELECT max(count(*)) AS m FROM t", "aggregate calls cannot be nested (count inside max)"},
		{"sum star", "CREATE TRANSFORM x AS SELECT sum(*) AS s FROM t", "only count accepts *"},
		{"count no argument", "CREATE TRANSFORM x AS SELECT count() AS n FROM t", "count() needs an argument; write count(*)"},
		{"VARIADIC", "CREATE TRANSFORM x AS SELECT max(VARIADIC a) AS s FROM t", "VARIADIC is not supported"},
		{"volatile in aggregate argument", "CREATE TRANSFORM x AS SELECT sum(random()) AS s FROM t", "select list item 1 (sum(random())): random() is not immutable"},
		{"aggregate in WHERE", "CREATE TRANSFORM x AS SELECT a FROM t WHERE count(*) > 1", "WHERE: aggregate functions are not allowed in WHERE (count)"},
		{"aggregate in GROUP BY", "CREATE TRANSFORM x AS SELECT a FROM t GROUP BY a, count(*)", "GROUP BY item 2 (count(*)): aggregate functions are not allowed in GROUP BY"},
		{"ordinal to aggregate", "CREATE TRANSFORM x AS SELECT count(*) AS n FROM t GROUP BY 1", "GROUP BY item 1 (1): aggregate functions are not allowed in GROUP BY"},
		{"alias to aggregate", "CREATE TRANSFORM x AS SELECT k, count(*) AS n FROM t GROUP BY k, n", "GROUP BY item 2 (n): aggregate functions are not allowed in GROUP BY"},
		{"ordinal out of range", "CREATE TRANSFORM x AS SELECT a, count(*) AS n FROM t GROUP BY 3", "GROUP BY item 1 (3): GROUP BY position 3 is not in select list; the select list has 2 items"},
		{"ordinal zero", "CREATE TRANSFORM x AS SELECT a, count(*) AS n FROM t GROUP BY 0", "GROUP BY position 0 is not in select list"},
		{"unsupported aggregate", "CREATE TRANSFORM x AS SELECT k, json_agg(a ORDER BY a) AS s FROM t GROUP BY k", "aggregate json_agg is not supported yet"},
		{"ordered-set direct argument", "CREATE TRANSFORM x AS SELECT k, percentile_cont(k / 10.0) WITHIN GROUP (ORDER BY a) AS p FROM t GROUP BY k", "the direct argument of percentile_cont reads a column; in a transform it must be a constant"},
		{"repeated grouping set", "CREATE TRANSFORM x AS SELECT a, count(*) AS n FROM t GROUP BY GROUPING SETS ((a), (a))", "PostgreSQL returns each of its groups twice"},
		{"subquery in GROUP BY", "CREATE TRANSFORM x AS SELECT count(*) AS n FROM t GROUP BY (SELECT 1)", "GROUP BY: a subquery in GROUP BY is not supported; compute it in a subquery in FROM and group by its column"},
		{"volatile in GROUP BY", "CREATE TRANSFORM x AS SELECT count(*) AS n FROM t GROUP BY random()", "GROUP BY item 1 (random()): random() is not immutable"},
	}
	for _, fn := range []string{"now", "random", "clock_timestamp", "statement_timestamp", "transaction_timestamp",
		"timeofday", "nextval", "currval", "setval", "gen_random_uuid", "txid_current", "pg_current_xact_id",
		"current_setting", "set_config"} {
		tests = append(tests,
			badCase{"volatile " + fn + " in select list", "CREATE TRANSFORM x AS SELECT a, " + fn + "() AS v FROM t", "select list item 2 (" + fn + "()): " + fn + "() is not immutable"},
			badCase{"volatile " + fn + " in WHERE", "CREATE TRANSFORM x AS SELECT a FROM t WHERE b = " + fn + "('s')", "WHERE: " + fn + "() is not immutable"},
		)
	}
	return tests
}

func TestParseStatementsBad(t *testing.T) {
	for _, tt := range badCases() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatements(tt.script)
			if err == nil {
				t.Fatalf("ParseStatements succeeded: %s", dumpAll(got))
			}
			var te *terr.Error
			if !errors.As(err, &te) {
				t.Fatalf("error %v (%T) is not a *terr.Error", err, err)
			}
			if te.Code != terr.Validation {
				t.Errorf("code = %s, want %s (%v)", te.Code, terr.Validation, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n  %v\ndoes not contain\n  %s", err, tt.want)
			}
		})
	}
}

// TestRefusalNamesNoFollowOn: a column qualified by a FROM item that was
// refused (or that the check never reached after it) is not a mistake of
// its own; the refusal names the FROM item alone.
func TestRefusalNamesNoFollowOn(t *testing.T) {
	for _, script := range []string{
		"CREATE TRANSFORM x AS SELECT t.a, u.b FROM t TABLESAMPLE SYSTEM (5), u",
	} {
		_, err := ParseStatements(script)
		if err == nil || strings.Contains(err.Error(), "not a FROM table") || strings.Contains(err.Error(), "unsupported parts") {
			t.Errorf("%s:\n  %v\nwant one refusal of the FROM item alone", script, err)
		}
	}
}

func dumpAll(stmts []Statement) string {
	var out []string
	for _, s := range stmts {
		out = append(out, dump(s))
	}
	return strings.Join(out, "\n")
}

func TestDeparseExpr(t *testing.T) {
	tree, err := parseOne("SELECT a + b * 2, CAST(x AS text), 'it''s', f(VARIADIC arr)")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a + (b * 2)", "x::text", "'it''s'", "f(VARIADIC arr)"}
	for i, n := range tree {
		got, err := deparseExpr(n)
		if err != nil {
			t.Fatalf("deparseExpr: %v", err)
		}
		if got != want[i] {
			t.Errorf("deparseExpr #%d = %q, want %q", i, got, want[i])
		}
	}
}

// parseOne returns the select-list expressions of one SELECT.
func parseOne(sql string) ([]*pg_query.Node, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, err
	}
	var out []*pg_query.Node
	for _, n := range tree.Stmts[0].Stmt.GetSelectStmt().TargetList {
		out = append(out, n.GetResTarget().Val)
	}
	return out, nil
}

// FuzzParseStatements checks that no input panics, that every error is a
// *terr.Error, and that accepted queries are internally consistent and
// survive a round trip through their deparsed SQL. Run it with
// `go test ./engine -run '^$' -fuzz FuzzParseStatements -fuzztime 30s`.
func FuzzParseStatements(f *testing.F) {
	for _, tt := range goodCases() {
		f.Add(tt.script)
	}
	for _, tt := range badCases() {
		f.Add(tt.script)
	}
	f.Fuzz(func(t *testing.T, script string) {
		watchdog := time.AfterFunc(5*time.Second, func() { panic(fmt.Sprintf("ParseStatements(%q) is still running after 5s", script)) })
		defer watchdog.Stop()
		stmts, err := ParseStatements(script)
		if err != nil {
			var te *terr.Error
			if !errors.As(err, &te) {
				t.Fatalf("error %v (%T) is not a *terr.Error", err, err)
			}
			if te.Code != terr.Validation {
				t.Fatalf("code %s for %q: %v", te.Code, script, err)
			}
			return
		}
		if len(stmts) == 0 {
			t.Fatal("no statements and no error")
		}
		for _, st := range stmts {
			if st.Name == "" && !st.All || len(st.Name) > maxIdentLen || len(st.Schema) > maxIdentLen || strings.HasPrefix(st.Name, reservedPrefix) && st.Kind != RequestBackfill {
				t.Fatalf("bad name %q.%q", st.Schema, st.Name)
			}
			if (st.Kind == CreateTransform) != (st.Query != nil) {
				t.Fatalf("kind %d with query %v", st.Kind, st.Query)
			}
			if st.Query != nil {
				checkQuery(t, st.Query)
			}
		}
	})
}

// checkQuery asserts the invariants of a validated query.
func checkQuery(t *testing.T, q *Query) {
	t.Helper()
	if q.SQL == "" || len(q.Tables) == 0 || q.Tables[0].Name == "" || len(q.Targets) == 0 {
		t.Fatalf("incomplete query %+v", q)
	}
	if len(q.GroupByAlias) != len(q.GroupBy) || (len(q.GroupBy) > 0 && !q.Aggregate) {
		t.Fatalf("inconsistent GROUP BY %+v", q)
	}
	names := map[string]bool{}
	for _, tg := range q.Targets {
		if tg.Name == "" || tg.Name == "?column?" || names[tg.Name] || strings.HasPrefix(tg.Name, reservedPrefix) || tg.Expr == "" {
			t.Fatalf("bad target %+v", tg)
		}
		names[tg.Name] = true
		switch {
		case tg.Agg != nil && tg.Group != -1,
			tg.Agg == nil && tg.Composed == "" && q.Aggregate && (tg.Group < 0 || tg.Group >= len(q.GroupBy)),
			!q.Aggregate && (tg.Agg != nil || tg.Group != -1 || tg.Composed != ""):
			t.Fatalf("bad target %+v in %+v", tg, q)
		}
	}
	again, err := ParseStatements("CREATE TRANSFORM x AS " + q.SQL)
	if err != nil {
		t.Fatalf("deparsed query %q does not parse again: %v", q.SQL, err)
	}
	q2 := again[0].Query
	if q2.SQL != q.SQL || !reflect.DeepEqual(q2.Targets, q.Targets) || !reflect.DeepEqual(q2.Tables, q.Tables) || q2.Where != q.Where || !reflect.DeepEqual(q2.GroupBy, q.GroupBy) {
		t.Fatalf("round trip changed the query:\n%+v\n%+v", q, q2)
	}
}

// TestGeneratedItems: functions and VALUES lists in FROM, as PostgreSQL
// writes a definition back (ADR 0034), get their ordinal — WITH
// ORDINALITY added under a hidden name, the user's own kept, a column
// definition list moved into ROWS FROM, a VALUES row's position — and are
// never in the cover; INTERSECT ALL and EXCEPT ALL are counts expanded by
// generate_series; what cannot be kept is refused with its rewrite.
func TestGeneratedItems(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		want      []string // parts of the rewritten text (and its levels')
		gens      []Generated
		cover     []int
		outer     int
		err       string
	}{
		{name: "implicit LATERAL unnest",
			sql:  `SELECT p.id, t.tag FROM p, LATERAL unnest(p.tags) t(tag)`,
			want: []string{`unnest(p.tags) WITH ORDINALITY t(tag, __trellis_o)`},
			gens: []Generated{{Ref: "t", Column: ordinalColumn}}, cover: []int{0}},
		{name: "the user's ordinality",
			sql:  `SELECT p.id, t.tag, t.n FROM p CROSS JOIN LATERAL unnest(p.tags) WITH ORDINALITY t(tag, n)`,
			want: []string{`unnest(p.tags) WITH ORDINALITY t(tag, n)`},
			gens: []Generated{{Ref: "t", Column: "n"}}, cover: []int{0}},
		{name: "column definition list",
			sql:  `SELECT p.id, x.a FROM p, LATERAL jsonb_to_recordset((p.doc -> 'items'::text)) x(a integer, b text)`,
			want: []string{`ROWS FROM (jsonb_to_recordset(p.doc -> 'items'::text) AS (a int, b text)) WITH ORDINALITY x(a, b, __trellis_o)`},
			gens: []Generated{{Ref: "x", Column: ordinalColumn}}, cover: []int{0}},
		{name: "VALUES joined",
			sql:  `SELECT p.id, v.name FROM (p JOIN ( VALUES (1,'a'::text), (2,'b'::text)) v(id, name) ON ((v.id = p.id)))`,
			want: []string{`(VALUES (1, 'a'::text, 1), (2, 'b'::text, 2)) v(id, name, __trellis_o)`},
			gens: []Generated{{Ref: "v", Column: ordinalColumn}}, cover: []int{0}},
		{name: "VALUES first, unnamed columns",
			sql:  `SELECT v.column1, p.id FROM (( VALUES (1), (2)) v JOIN p ON ((p.id = v.column1)))`,
			want: []string{`v(column1, __trellis_o)`},
			gens: []Generated{{Ref: "v", Column: ordinalColumn}}, cover: []int{0}},
		{name: "LEFT JOIN LATERAL: nullable",
			sql:  `SELECT p.id, t.tag FROM (p LEFT JOIN LATERAL unnest(p.tags) t(tag) ON (true))`,
			gens: []Generated{{Ref: "t", Column: ordinalColumn, Nullable: true}}, cover: []int{0}, outer: 1},
		{name: "a function heading an outer join is re-associated",
			sql:  `SELECT p.id, s.label FROM p, (LATERAL unnest(p.tags) t(tag) LEFT JOIN s ON ((s.tag = t.tag)))`,
			want: []string{`FROM p CROSS JOIN LATERAL unnest(p.tags) WITH ORDINALITY t(tag, __trellis_o) LEFT JOIN s ON s.tag = t.tag`},
			gens: []Generated{{Ref: "t", Column: ordinalColumn}}, cover: []int{0}, outer: 1},
		{name: "INTERSECT ALL",
			sql:  `SELECT t.a FROM t INTERSECT ALL SELECT u.a FROM u`,
			want: []string{`generate_series(1, LEAST(__set1.n1, __set1.n2)) WITH ORDINALITY __set1_copies(copy, __trellis_o)`, `count(__set1_1.t) AS n1`},
			gens: []Generated{{Ref: "__set1_copies", Column: ordinalColumn}}, cover: []int{0}},
		{name: "EXCEPT ALL chain",
			sql:  `SELECT t.a FROM t EXCEPT ALL SELECT u.a FROM u EXCEPT ALL SELECT t.b FROM t`,
			want: []string{`generate_series(1, (__set1.n1 - __set1.n2) - __set1.n3)`},
			gens: []Generated{{Ref: "__set1_copies", Column: ordinalColumn}}, cover: []int{0}},
		{name: "VALUES on the preserved side",
			sql: `SELECT v.a, t.b FROM (( VALUES (1), (2)) v(a) LEFT JOIN t ON ((t.a = v.a)))`,
			err: "the preserved side of a LEFT JOIN holds no table, only a function or VALUES list ((VALUES (1), (2)) v(a)), so its unmatched rows belong to no source row and no change could find them; put the constant rows in a table"},
		{name: "a constant side of FULL JOIN",
			sql: `SELECT g.n, t.b FROM (t FULL JOIN generate_series(1, 3) g(n) ON ((g.n = t.a)))`,
			err: "the preserved side of a FULL JOIN holds no table"},
		{name: "subquery in the arguments",
			sql: `SELECT p.id, x.a FROM p, LATERAL unnest(ARRAY( SELECT u.a FROM u)) x(a)`,
			err: `FROM: the function x reads a subquery`},
		{name: "volatile argument",
			sql: `SELECT p.id, g.n FROM p, LATERAL generate_series(1, ((random() * (3)::double precision))::integer) g(n)`,
			err: `FROM: the function g: random() is not immutable`},
		{name: "no table",
			sql: `SELECT g.n FROM generate_series(1, 3) g(n)`,
			err: "FROM: the query reads no table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseQuery("x", tc.sql)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || terr.CodeOf(err) != terr.Validation {
					t.Fatalf("err = %v, want a validation error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			text := q.Rewritten
			for _, l := range q.Levels {
				text += "\n" + l.text
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("rewritten\n  %s\nlacks\n  %s", text, w)
				}
			}
			if !reflect.DeepEqual(q.Generated, tc.gens) || !reflect.DeepEqual(q.Cover, tc.cover) || len(q.Outer) != tc.outer {
				t.Errorf("generated %+v cover %v outer joins %d, want %+v %v %d", q.Generated, q.Cover, len(q.Outer), tc.gens, tc.cover, tc.outer)
			}
		})
	}
}
