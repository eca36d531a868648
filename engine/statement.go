package engine

// StatementKind says which definition-language statement was parsed.
type StatementKind int

// The statements of the definition language (DESIGN.md §5).
const (
	CreateTransform StatementKind = iota + 1
	PauseTransform
	ResumeTransform
	DropTransform
)

// Statement is one parsed and syntactically validated statement.
type Statement struct {
	Kind StatementKind
	// Schema is the schema the transform's target lives in ("" = the
	// connection's current schema, resolved at apply time).
	Schema string
	// Name is the transform (and target table) name.
	Name        string
	IfNotExists bool // CREATE TRANSFORM IF NOT EXISTS
	IfExists    bool // DROP TRANSFORM IF EXISTS
	// Query is set for CreateTransform.
	Query *Query
}

// Query is the validated shape of a transform's SELECT. Every expression is
// kept as SQL text deparsed by the real PostgreSQL parser, so PostgreSQL
// itself evaluates it with exact semantics when the engine re-derives keys.
type Query struct {
	// SQL is the whole SELECT, deparsed (canonical form, stored in the catalog).
	SQL string
	// From is the single source table.
	From TableRef
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
}

// TableRef names the FROM table as written.
type TableRef struct {
	Schema string // "" when unqualified
	Name   string
	Alias  string // "" when none
	// SQL is the deparsed FROM item, e.g. `public.orders o`; generated SQL
	// uses it verbatim so that column references resolve exactly as in the
	// user's query.
	SQL string
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
	// to the FROM table, "" otherwise.
	Column string
	// Agg is set when the item is a single aggregate call.
	Agg *Agg
	// Group is the index into Query.GroupBy of the GROUP BY expression this
	// item equals, or -1.
	Group int
}

// Agg is an aggregate call in the select list.
type Agg struct {
	// Func is the lower-case aggregate name: count, sum, avg, min, max.
	Func string
	// Star is true for count(*).
	Star bool
	// Arg is the deparsed argument expression ("" for count(*)).
	Arg string
}
