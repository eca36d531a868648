package engine

// plan.go owns the Plan: what is decided once at define time and stored as
// JSON in the catalog (Plan, Source, Rel, Col, AggCol, the shapes and the
// aggregate modes), its encoding (Decode, Encode), the DB planning reads
// through, and the plan's query as SQL (selectSQL, QuerySQL). PlanCreate
// (plancreate.go) decides it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Shapes of transforms.
const (
	ShapeRow       = "row"
	ShapeAggregate = "aggregate"
)

// Aggregate maintenance modes.
const (
	// ModeCountStar is count(*): the group's row count.
	ModeCountStar = "count_star"
	// ModeCount is count(x): kept by the delta of non-null values.
	ModeCount = "count"
	// ModeSum is an exact sum kept by deltas plus a non-null count.
	ModeSum = "sum"
	// ModeAvg is an exact average kept as hidden sum and count.
	ModeAvg = "avg"
	// ModeExtreme is min or max: lowered (raised) by the values a batch
	// adds, and recomputed from the ledger only for groups that lost a value
	// at or beyond their current extreme (ADR 0005).
	ModeExtreme = "extreme"
	// ModeRecompute is recomputed for affected groups from the ledger.
	ModeRecompute = "recompute"
	// ModeNumeric is sum or avg over numeric, kept by deltas of its
	// finite part, non-null count, scale histogram and special values, so
	// its display scale and NaN/Infinity are PostgreSQL's (ADR 0024).
	ModeNumeric = "numeric"
)

// Plan is everything the engine needs to build and maintain one transform.
// It is decided once, at define time (after asking PostgreSQL for types),
// and stored as JSON in the catalog so every process applies the same plan.
type Plan struct {
	Shape string `json:"shape"`
	// SearchPath is the search_path the definition was validated under;
	// appliers use it so unqualified functions resolve the same way.
	SearchPath string `json:"search_path"`
	// Settings are the defining session's settings that built-ins read
	// (TimeZone, DateStyle, …; settings.go): every session that evaluates
	// the query applies them, so the target never depends on the runner's
	// or the server's defaults (ADR 0037). Plans stored before have none.
	Settings []Setting `json:"settings,omitempty"`
	// Sources are the FROM tables, one per FROM item (ADR 0010).
	Sources []Source `json:"sources"`
	// From is the FROM clause over the resolved tables when there are
	// several; a single source's FROM item is Sources[0].From.
	From string `json:"from,omitempty"`
	// Outer are the outer joins of From, by Sources index.
	Outer []OuterJoin `json:"outer,omitempty"`
	// Cover are the sources present in every output row: a build
	// enumerates their keys.
	Cover  []int  `json:"cover"`
	Target Rel    `json:"target"`
	Ledger *Rel   `json:"ledger,omitempty"`
	Where  string `json:"where,omitempty"`
	// Visible are the target's user-visible column names in select-list order.
	Visible []string `json:"visible"`

	// Row shape: every target column (visible then hidden identity columns)
	// and the target columns forming the identity: aligned with the one
	// source's key, or every source's lineage (ADR 0010).
	Cols     []Col    `json:"cols,omitempty"`
	Identity []string `json:"identity,omitempty"`

	// Aggregate shape.
	Groups []Col    `json:"groups,omitempty"` // group key columns of the target (Expr over the source)
	Args   []Col    `json:"args,omitempty"`   // ledger argument columns __a<i>
	Aggs   []AggCol `json:"aggs,omitempty"`
	// State, when set, holds the aggregates per group (Groups, Aggs) and
	// the target is its projection through Project and Having: the query
	// has HAVING or expressions over aggregates (ADR 0011).
	State   *Rel   `json:"state,omitempty"`
	Project []Col  `json:"project,omitempty"` // target columns, Expr over __s (the state row)
	Having  string `json:"having,omitempty"`  // over __s
	// Grouping, for GROUPING SETS, ROLLUP and CUBE, says how Groups
	// stand for the sets (ADR 0031); nil for a plain GROUP BY.
	Grouping *PlanGrouping `json:"grouping,omitempty"`

	// Select is the user's query over the resolved sources, as kept: what
	// the target must equal.
	Select string `json:"select,omitempty"`
	// Full, for a query that reads inner levels (ADR 0018), is Select with
	// each level's query in place of its target: the query over the base
	// tables the target equals once its levels and it converged. Checks
	// use Select (QuerySQL): a level's surrogate key, which the owner's
	// stored rows may be keyed by, exists only in the level's target.
	Full string `json:"full,omitempty"`
	// Surrogate names the hidden identity column that keys a target whose
	// own key may be NULL or is missing (an aggregate without GROUP BY or
	// with a nullable group column, a row transform of an outer join), so
	// that a chain can read it (ADR 0018, 0019); "" otherwise, and in
	// plans stored before ADR 0019 for all but inner levels.
	Surrogate string `json:"surrogate,omitempty"`

	// Probes are the lookups through join columns the re-derive makes;
	// IndexGaps reports those no index serves. NoSourceIndex records
	// WITHOUT SOURCE INDEX.
	Probes        []Probe `json:"probes,omitempty"`
	NoSourceIndex bool    `json:"no_source_index,omitempty"`

	// Ordinals are the hidden stored columns (__o<k>) of the FROM items
	// that read no table, functions and VALUES lists: each row's
	// ordinal within its item, part of its identity (ADR 0034). Expr is
	// over the FROM.
	Ordinals []Col `json:"ordinals,omitempty"`

	// Window, for a query with window functions (ADR 0033), says how its
	// rows are re-derived: by partition, the target keyed by lineage as
	// for several sources (Multi).
	Window *PlanWindow `json:"window,omitempty"`

	// Recursive, for an inner level that keeps a recursive CTE (ADR
	// 0035), says how its rows are re-derived: by anchor.
	Recursive *PlanRecursive `json:"recursive,omitempty"`

	// Views are the views the definition read as their definitions then;
	// one replaced or dropped since is drift (views.go).
	Views []ViewDep `json:"views,omitempty"`

	// GroupIndexLater: the ledger's group-key index is not made by Install
	// but by EnsureGroupIndex, after a fresh build has filled the ledger
	// (ADR 0025); false in plans stored before, whose Install made it.
	GroupIndexLater bool `json:"group_index_later,omitempty"`
}

// PlanWindow is how a window query's rows are re-derived: the partitions
// of the changed rows, before and after, again in whole.
type PlanWindow struct {
	// Partition are the hidden target columns (__w<i>) holding each row's
	// PARTITION BY values, Expr over the FROM; none: one partition, the
	// whole target re-derived by every change.
	Partition []Col `json:"partition,omitempty"`
}

// Source describes one FROM table.
type Source struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	OID    uint32 `json:"oid"`
	// From is the FROM item as used in generated SQL: schema-qualified and
	// aliased with Ref, so the user's column references resolve as written.
	From string `json:"from"`
	Ref  string `json:"ref"`
	Key  []Col  `json:"key"`
	// Lineage are the stored columns (target or ledger) that hold this
	// source's key in plans of several sources, aligned with Key.
	Lineage []string `json:"lineage,omitempty"`
	// Nullable: an outer join may NULL-extend this source, so its lineage
	// may be NULL.
	Nullable bool `json:"nullable,omitempty"`
}

// Ident is the source table's quoted, schema-qualified name.
func (s Source) Ident() string { return pgx.Identifier{s.Schema, s.Name}.Sanitize() }

// Multi reports whether the plan re-derives through lineage scopes (ADR
// 0010): it reads several sources, has windows (ADR 0033), functions or
// VALUES lists in FROM, whose rows share a lineage (ADR 0034), or keeps a
// recursive CTE (ADR 0035).
func (p *Plan) Multi() bool {
	return len(p.Sources) > 1 || p.Window != nil || len(p.Ordinals) > 0 || p.Recursive != nil
}

// FromSQL is the FROM clause of the plan's query.
func (p *Plan) FromSQL() string {
	if p.Multi() {
		return p.From
	}
	return p.Sources[0].From
}

// SourcesOf are the indexes of the sources that read the table oid (two
// or more for a self-join).
func (p *Plan) SourcesOf(oid uint32) []int {
	var out []int
	for i, s := range p.Sources {
		if s.OID == oid {
			out = append(out, i)
		}
	}
	return out
}

// Tables are the distinct source tables, in Sources order.
func (p *Plan) Tables() []Source {
	var out []Source
	seen := map[uint32]bool{}
	for _, s := range p.Sources {
		if !seen[s.OID] {
			seen[s.OID] = true
			out = append(out, s)
		}
	}
	return out
}

// Rel is a schema-qualified table.
type Rel struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// Ident returns the quoted name.
func (r Rel) Ident() string { return pgx.Identifier{r.Schema, r.Name}.Sanitize() }

// Col is a column with its SQL type and the expression that computes it.
type Col struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Collation is the expression's collation when it is not the
	// database's default (quoted, as pg_collation_for gives it): stored
	// columns carry it, so that min, max and ORDER BY over them compare
	// as the query does.
	Collation string `json:"collation,omitempty"`
	Expr      string `json:"expr,omitempty"`
	NotNull   bool   `json:"not_null,omitempty"`
	// TextCmp: the type has no default equality, so changes are detected on
	// its text form.
	TextCmp bool `json:"text_cmp,omitempty"`
}

// AggCol is one aggregate output column of an aggregate transform.
type AggCol struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Collation is as Col's: min(s) over a collated s keeps it.
	Collation string `json:"collation,omitempty"`
	Func      string `json:"func"`
	Mode      string `json:"mode"`
	// Arg indexes Plan.Args; -1 for count(*).
	Arg int `json:"arg"`
	// Call recomputes the aggregate over a group's ledger rows __l (its
	// inputs are ledger columns), for ModeRecompute.
	Call string `json:"call,omitempty"`
}

// SumCol is the hidden exact-sum column of an avg (of a numeric sum or
// avg: the sum of its finite values).
func (a AggCol) SumCol() string { return "__sum_" + a.Name }

// ScalesCol is a numeric sum's hidden scale histogram (ADR 0024).
func (a AggCol) ScalesCol() string { return "__scales_" + a.Name }

// SpecialCol is a numeric sum's hidden count of NaN and infinities.
func (a AggCol) SpecialCol() string { return "__special_" + a.Name }

// NNCol is the hidden non-null-count column of a sum or avg.
func (a AggCol) NNCol() string { return "__nn_" + a.Name }

// RowsCol is the hidden per-group row count of an aggregate target.
const RowsCol = "__rows"

// Decode parses a stored plan. Plans stored before ADR 0010 name their one
// table as "source"; they read as a plan of that one source.
func Decode(raw []byte) (*Plan, error) {
	var p struct {
		Plan
		Legacy *Source `json:"source"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	if len(p.Sources) == 0 && p.Legacy != nil {
		p.Sources = []Source{*p.Legacy}
	}
	if len(p.Sources) == 0 {
		return nil, errors.New("decode plan: it names no source table")
	}
	if len(p.Cover) == 0 {
		p.Cover = []int{0}
	}
	return &p.Plan, nil
}

// Encode serialises the plan.
func (p *Plan) Encode() (json.RawMessage, error) { return json.Marshal(p) }

// DB is what planning needs: queries and statement description in one
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Conn() *pgx.Conn
}

// selectSQL is the user's query with the FROM item schema-qualified.
func (p *Plan) selectSQL(q *Query) string { return p.selectFrom(q, p.FromSQL()) }

// selectFrom is the user's query over the FROM clause from.
func (p *Plan) selectFrom(q *Query, from string) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, t := range q.Targets {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.Expr)
		b.WriteString(" AS ")
		b.WriteString(pgx.Identifier{t.Name}.Sanitize())
	}
	b.WriteString(" FROM ")
	b.WriteString(from)
	if q.Where != "" {
		b.WriteString(" WHERE ")
		b.WriteString(q.Where)
	}
	if q.Grouping != nil {
		b.WriteString(" GROUP BY ")
		b.WriteString(q.Grouping.Clause)
	} else if len(q.GroupBy) > 0 {
		b.WriteString(" GROUP BY ")
		b.WriteString(strings.Join(q.GroupBy, ", "))
	}
	if q.HavingSQL != "" {
		b.WriteString(" HAVING ")
		b.WriteString(q.HavingSQL)
	}
	return b.String()
}

// QuerySQL is the transform's defining query over the resolved source, with
// visible columns in order: what the target must equal.
func (p *Plan) QuerySQL() string {
	if p.Select != "" {
		return p.Select
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	if p.Shape == ShapeRow {
		for i, c := range p.Cols[:len(p.Visible)] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s AS %s", c.Expr, pgx.Identifier{c.Name}.Sanitize())
		}
	} else {
		for i, name := range p.Visible {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.visibleAggExpr(name))
			b.WriteString(" AS ")
			b.WriteString(pgx.Identifier{name}.Sanitize())
		}
	}
	b.WriteString(" FROM " + p.FromSQL())
	if p.Where != "" {
		b.WriteString(" WHERE " + p.Where)
	}
	if p.Shape == ShapeAggregate && len(p.Groups) > 0 {
		b.WriteString(" GROUP BY ")
		for i, g := range p.Groups {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(g.Expr)
		}
	}
	return b.String()
}

func (p *Plan) visibleAggExpr(name string) string {
	for _, g := range p.Groups {
		if g.Name == name {
			return g.Expr
		}
	}
	for _, a := range p.Aggs {
		if a.Name != name {
			continue
		}
		if a.Arg < 0 {
			return "count(*)"
		}
		return a.Func + "(" + p.Args[a.Arg].Expr + ")"
	}
	return "NULL"
}
