package engine

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// StatementKind says which definition-language statement was parsed.
type StatementKind int

// The statements of the definition language (docs/sql-support.md).
const (
	CreateTransform StatementKind = iota + 1
	PauseTransform
	ResumeTransform
	DropTransform
	// RequestBackfill is REQUEST BACKFILL OF table: every transform reading
	// the table re-derives all of its keys (ADR 0040). Schema and Name are
	// the table's.
	RequestBackfill
	// AlterTransform is ALTER TRANSFORM name clause, …: computed columns
	// added, dropped or given a new expression (ADR 0041); Alter holds
	// the clauses in order.
	AlterTransform
)

// AlterClause is one clause of ALTER TRANSFORM: Op is "add", "drop" or
// "alter"; Expr, for add and alter, is the expression as written.
type AlterClause struct {
	Op     string
	Column string
	Expr   string
}

// Statement is one parsed and syntactically validated statement.
type Statement struct {
	Kind StatementKind
	// Schema is the schema the transform's target lives in ("" = the
	// connection's current schema, resolved at apply time).
	Schema string
	// Name is the transform (and target table) name.
	Name        string
	IfNotExists bool // CREATE TRANSFORM IF NOT EXISTS
	// OrReplace: CREATE OR REPLACE TRANSFORM, a redefinition when the
	// transform exists.
	OrReplace bool
	// TargetName, when set, is the table the plan builds into instead of
	// Name (a redefinition's shadow table).
	TargetName string
	IfExists   bool // DROP TRANSFORM IF EXISTS
	// All: RESUME TRANSFORM ALL, every transform the system paused or
	// quarantined (Name is empty). ALL is a reserved word, so no transform
	// is named by it unquoted.
	All bool
	// WithoutSourceIndex: CREATE TRANSFORM name WITHOUT SOURCE INDEX AS …,
	// the user's acknowledgement of the source indexes a join lacks.
	WithoutSourceIndex bool
	// Query is set for CreateTransform.
	Query *Query
	// Alter are an AlterTransform's clauses.
	Alter []AlterClause
}

// Query is the validated shape of a transform's SELECT. Every expression is
// kept as SQL text deparsed by the real PostgreSQL parser, so PostgreSQL
// itself evaluates it with exact semantics when the engine re-derives keys.
type Query struct {
	// SQL is the whole SELECT, deparsed (canonical form, stored in the catalog).
	SQL string
	// Rewritten is the SELECT as the engine keeps it: subqueries in FROM
	// flattened, DISTINCT written as GROUP BY.
	Rewritten string
	// Tables are the FROM clause's tables in the order they appear (a table
	// joined to itself appears once per FROM item).
	Tables []TableRef
	// Generated are the FROM items that read no table, functions and
	// VALUES lists, in FROM order; each adds an ordinal to the stored
	// rows' identity (ADR 0034).
	Generated []Generated
	// Outer lists the outer joins of the FROM tree, by Tables index.
	Outer []OuterJoin
	// Cover are the Tables that are present (not NULL-extended) in every
	// output row: the sources a build enumerates (ADR 0010).
	Cover []int
	// from is the FROM clause as parsed; FromSQL renders it.
	from []*pg_query.Node
	// columns are the names of every column reference in the query.
	columns []string
	// joinConds are the joins' ON conditions, deparsed.
	joinConds []string
	// unread are computed outputs of flattened derived tables the query
	// never reads, which PostgreSQL still evaluates (checkMutability).
	unread []Unread
	// Targets are the select-list items in order.
	Targets []Target
	// Where is the deparsed WHERE predicate, "" when absent.
	Where string
	// GroupBy holds the deparsed GROUP BY expressions (ordinals and output
	// aliases already resolved to the select item's expression).
	GroupBy []string
	// GroupByAlias runs parallel to GroupBy: the output-column name a bare
	// GROUP BY name was resolved through, "" otherwise. PostgreSQL prefers
	// an input column of that name, which only the catalog can tell, so the
	// catalog-aware validator must refuse the definition when the FROM table
	// has a column with that name.
	GroupByAlias []string
	// Aggregate is true when the query has GROUP BY or any aggregate call.
	Aggregate bool
	// Aggs are the distinct aggregate calls of the select list and HAVING;
	// Composed and Having name Aggs[k] as __s.__x<k>.
	Aggs []*Agg
	// Having is the HAVING condition over the aggregate state (as
	// Composed), "" when absent; HavingSQL is the condition as written.
	Having    string
	HavingSQL string
	// Equalities are the column equalities of WHERE and the JOIN
	// conditions (ON and USING).
	Equalities []Equality
	// Expand: the query selects * or t.*, or holds subqueries in
	// expressions; only SQL is set, and the planner parses the query again
	// as PostgreSQL expands and qualifies it (expandStar).
	Expand bool
	// OrderBy: the query ends in ORDER BY, which a table cannot keep; it is
	// dropped, and Apply says so.
	OrderBy bool
	// Levels are the derived tables in FROM that aggregate, each kept as a
	// transform of its own whose target the query reads in its place
	// (ADR 0018); BindLevel names their targets.
	Levels []*Level
	// tree is the parse tree as rewritten, which BindLevel renders again.
	tree *pg_query.ParseResult
	// deferred is a refusal the parser could not make without the
	// catalog: a select item or HAVING over ungrouped columns that calls
	// a function, which may be a user-defined aggregate. userAggregates
	// returns it when none is (ADR 0031).
	deferred error
	// Grouping describes GROUPING SETS, ROLLUP and CUBE (ADR 0031); nil
	// for a plain GROUP BY.
	Grouping *GroupingSets
	// Window describes the select list's window calls (window.go); nil
	// when there are none.
	Window *WindowSpec
	// Views are the plain views the definition read, expanded to their
	// definitions (views.go).
	Views []ViewDep
	// Recursive, for the level of a recursive CTE (recursive.go, ADR
	// 0035), is the CTE; Tables are then its terms' source tables.
	Recursive *RecursiveSpec
}

// groupExprs are the GROUP BY expressions over the source: GroupBy less
// the GROUPING() calls a grouping-sets query lists after them.
func (q *Query) groupExprs() []string {
	if q.Grouping != nil {
		return q.GroupBy[:q.Grouping.Raw]
	}
	return q.GroupBy
}

// Unread is a computed output of a flattened derived table that the outer
// query never reads: Clause names it for an error sentence, Expr is its
// expression over the pulled-up tables.
type Unread struct {
	Clause, Expr string
}

// OuterJoin is one LEFT, RIGHT or FULL join of the FROM tree: the tables
// under each of its sides, by Query.Tables index.
type OuterJoin struct {
	Kind        string `json:"kind"` // "left", "right" or "full"
	Left, Right []int
	// Above are the column references of the conditions that filter the
	// join's rows after it (WHERE, and the ON and USING of the joins above
	// it); Column "*" stands for the columns a NATURAL join compares.
	Above []ColumnName `json:"-"`
	// First is the Tables index of the join's first table; InnerCover the
	// tables present in every match it makes (its left side's cover).
	First      int   `json:"first"`
	InnerCover []int `json:"inner_cover,omitempty"`
	// Inner and Mirror are set by the planner when a condition after the
	// join reads its NULL-extended side: the join as an inner join over
	// the resolved tables, and the table that keeps its matches.
	Inner  string `json:"inner,omitempty"`
	Mirror *Rel   `json:"mirror,omitempty"`

	node *pg_query.JoinExpr // the parsed join, for InnerSQL
}

// Equality is a condition col = col of WHERE or a join (USING (c) is
// c = c). LeftIn and RightIn, when set, are the tables each side of a
// JOIN's condition may name.
type Equality struct {
	Left, Right     ColumnName
	LeftIn, RightIn []int
}

// ColumnName is a column reference: its qualifier ("" when unqualified)
// and its name.
type ColumnName struct {
	Ref, Column string
}

// Sides pairs the join's preserved side with its nullable side: a change to
// a table of the nullable side ([1]) can add or remove NULL-extended rows of
// the preserved side ([0]). A FULL join gives both pairs.
func (j OuterJoin) Sides() (pairs [][2][]int) {
	switch j.Kind {
	case "left":
		return [][2][]int{{j.Left, j.Right}}
	case "right":
		return [][2][]int{{j.Right, j.Left}}
	}
	return [][2][]int{{j.Left, j.Right}, {j.Right, j.Left}}
}

// TableRef names a FROM table as written.
type TableRef struct {
	Schema string // "" when unqualified
	Name   string
	Alias  string // "" when none
	// Only: written FROM ONLY (the table's own rows, not its children's).
	Only bool
}

// RefName is the name column references use for the table: its alias if any,
// else its name.
func (t TableRef) RefName() string {
	if t.Alias != "" {
		return t.Alias
	}
	return t.Name
}

// Target is one select-list item.
type Target struct {
	// Name is the output column name: the alias, or PostgreSQL's default
	// (column name for a column reference, function name for a call).
	Name string
	// Expr is the deparsed expression (for an aggregate, the whole call).
	Expr string
	// Column is the source column name when Expr is a plain column reference
	// ("col" or "ref.col"), "" otherwise; ColumnRef is its qualifier, "" when
	// unqualified.
	Column    string
	ColumnRef string
	// Agg is set when the item is a single aggregate call.
	Agg *Agg
	// Composed is set when the item is an expression over aggregates and
	// group keys: its text over the columns of the aggregate state (__s.__x<k>
	// for Query.Aggs[k], __s.<name> for a group key selected as name).
	Composed string
	// Group is the index into Query.GroupBy of the GROUP BY expression this
	// item equals, or -1.
	Group int
}

// Agg is an aggregate call of the select list or HAVING.
type Agg struct {
	// Func is the lower-case aggregate name.
	Func string
	// Star is true for count(*).
	Star bool
	// Arg is the deparsed first argument ("" for count(*)).
	Arg string
	// Plain: one argument (or *) and no DISTINCT, FILTER or ORDER BY, so
	// the delta modes of count, sum and avg apply.
	Plain bool
	// Inputs are the expressions the call reads (its arguments, its ORDER
	// BY keys, its FILTER condition), deparsed; Call is the call with each
	// input i replaced by AggInput(i), for recomputing it over stored inputs.
	Inputs []string
	Call   string
	// Text is the call as written, deparsed: two equal calls are one.
	Text string
	// User: a user-defined or extension aggregate (ADR 0031), always
	// recomputed. Ordered: the call has ORDER BY inside it. OrderHint is
	// the call ordered by orderHintKey, the advice of an order-sensitive
	// statistic written without ORDER BY (orderSensitive).
	User, Ordered bool
	OrderHint     string
}

// AggInput is the placeholder of input i in Agg.Call.
func AggInput(i int) string { return fmt.Sprintf("__trellis_in_%d", i) }
