package engine

// select.go owns the SELECT checker's core: selectChecker, the state one
// transform's query is validated in, and parseSelect (ParseQuery), which runs
// the checks clause by clause — refuse.go, flatten.go and level.go, from.go,
// expr.go, selectlist.go, groupby.go, aggparse.go — and gathers what they
// refuse into one error.

import (
	"fmt"
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// selectChecker validates one transform's SELECT against the supported
// subset. Node locations are byte offsets into the SELECT's text, which
// starts at byte base of script.
type selectChecker struct {
	label  string
	script string
	base   int
	tables []TableRef
	// generated are the FROM items that read no table (generated.go).
	generated []Generated
	outer     []OuterJoin
	cover     []int
	// groupKeys are the GROUP BY expressions' comparison keys.
	groupKeys []string
	// equalities are the column equalities of WHERE and the joins.
	equalities []Equality
	// joinConds are the joins' ON conditions, deparsed.
	joinConds []string
	// levels are the derived tables kept as inner levels (ADR 0018); rvs
	// the parsed table of each entry of tables, to find the placeholders.
	levels []*Level
	rvs    []*pg_query.RangeVar
	// unread are the computed outputs of flattened derived tables that
	// the outer query never reads (unreadOutput).
	unread []Unread
	// refNameUses counts the statement's FROM item names, renamed the
	// aliases renameShared gave: a pulled-up table must not collide.
	refNameUses map[string]int
	renamed     int
	// qualified: the text was written back by PostgreSQL (expanded), so
	// every column reference names its table; subqueries in expressions
	// are kept only then (sublink.go). dependencies numbers their levels;
	// sublinks are the subqueries kept, whose insides the expression
	// checks leave to their levels.
	qualified    bool
	dependencies int
	sublinks     map[int32]bool // by location: checks may see a clone
	// filteringDeps are the dependency joins of subqueries in conditions,
	// whose matches are mirrored.
	filteringDeps map[*pg_query.JoinExpr]bool
	// rankLimits are, by derived table and column, the most rank the
	// query keeps of it (ranklimit.go).
	rankLimits map[string]map[string]int64
	// narrowedDeps are the dependency joins of scalars whose moves are
	// narrowed, narrow their comparisons (narrow.go).
	narrowedDeps map[*pg_query.JoinExpr]bool
	narrow       []NarrowSpec
	// sharedValues are, by a scalar subquery's text, the values its
	// dependency level fingerprints in place of its own: every aggregate
	// of the LATERAL subquery it stands for (lateralagg.go).
	sharedValues map[string][]*pg_query.Node
	// droppedOrder: a rewrite dropped the query's ORDER BY (aggsplit.go).
	droppedOrder bool
	// setOps numbers the set operations read as joins (setop.go).
	setOps int
	// windows: window calls are accepted in the select list (window.go).
	windows bool
	// expandRecursive: a recursive CTE's term selects *, which
	// PostgreSQL expands (recursive.go).
	expandRecursive bool
	// needsCatalog: a column outside aggregates matches no GROUP BY
	// expression by text; PostgreSQL resolves and checks it when the
	// definition is expanded (ADR 0037).
	needsCatalog bool
	// fromRefused: a FROM item was refused, so tables lists only part of
	// FROM and a qualifier it lacks may name a table it never reached —
	// not a mistake of its own to report.
	fromRefused bool
}

// single: the query reads one table, so an unqualified column and one
// qualified by the table's name are the same column.
func (c *selectChecker) single() bool { return len(c.tables) == 1 }

// refNames are the names FROM tables are referred to by.
func (c *selectChecker) refNames() []string {
	out := make([]string, len(c.tables))
	for i, t := range c.tables {
		out[i] = t.RefName()
	}
	return out
}

// errf builds a validation error; loc < 0 means no position is known.
func (c *selectChecker) errf(loc int32, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if loc >= 0 {
		msg += " (" + position(c.script, c.base+int(loc)) + ")"
	}
	return terr.New(terr.Validation, "%s: %s", c.label, msg)
}

// parseSelect validates the SELECT at script[base:end]. qualified: the
// text was written back by PostgreSQL (an expanded definition, or a level
// of one), so its subqueries in expressions can be kept (sublink.go).
func parseSelect(label, script string, base, end int, qualified bool) (*Query, error) {
	src := script[base:end]
	tree, err := pg_query.Parse(src)
	if err != nil {
		return nil, pgError(label, script, base, src, err)
	}
	c := &selectChecker{label: label, script: script, base: base, qualified: qualified, sublinks: map[int32]bool{},
		filteringDeps: map[*pg_query.JoinExpr]bool{}, narrowedDeps: map[*pg_query.JoinExpr]bool{}, rankLimits: map[string]map[string]int64{}, sharedValues: map[string][]*pg_query.Node{}}
	if len(tree.Stmts) != 1 {
		return nil, c.errf(0, "expected a single SELECT after AS")
	}
	sel := tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil {
		return nil, c.errf(0, "the query after AS must be a SELECT")
	}
	atTimeZoneAsCalls(tree.Stmts[0].Stmt)
	// The definition as written is what the catalog shows; the rewrites
	// below only change how it is kept.
	// A query the deparser cannot write back as it reads is refused once
	// the checks below have had their say (they name the part more
	// precisely when they refuse it too).
	original, unrenderable := deparse(tree)
	if unrenderable != nil {
		unrenderable = terr.Wrap(terr.Validation, unrenderable, "%s: %v; write that part another way (a function call for an operator, a CAST for ::)", label, unrenderable)
	}
	// Every unsupported part is found before refusing, so one error names
	// them all; checks that depend on an earlier part only run when it
	// passed, and a part that stops the checks is refused with those
	// found before it.
	var errs []error
	keep := func(err error) bool {
		errs = append(errs, err)
		return err == nil
	}
	expand := func() (*Query, error) {
		if err := joinRefusals(errs); err != nil {
			return nil, err
		}
		if unrenderable != nil {
			return nil, unrenderable
		}
		return &Query{SQL: original, Expand: true}, nil
	}
	// A data-modifying CTE is refused and left out, so the rest is
	// checked; then WITH: its CTEs become derived tables where they are
	// read.
	keep(c.dropModifyingCTEs(tree.Stmts[0].Stmt))
	if _, err := c.inlineWith(tree.Stmts[0].Stmt, nil); err != nil {
		return nil, joinRefusals(append(errs, err))
	}
	if c.expandRecursive && !qualified {
		return expand()
	}
	// Set operations next: each is a SELECT over its branches (setop.go).
	if err := c.rewriteSetOps(tree.Stmts[0].Stmt); err != nil {
		return nil, joinRefusals(append(errs, err))
	}
	if readsNoTable(sel) {
		return nil, joinRefusals(append(errs, c.errf(-1, noTableRefusal)))
	}
	if c.setOps > 0 && !qualified || !qualified && rewritesQualified(tree.Stmts[0].Stmt) {
		// PostgreSQL validates the set operation as written (its own
		// sentence names UNION, not the join it becomes) and qualifies
		// every reference in the branches; the expanded query is kept.
		return expand()
	}
	// Named windows are written into their calls (window.go).
	if err := c.inlineWindows(sel); err != nil {
		return nil, joinRefusals(append(errs, err))
	}
	c.refNameUses = refNameUses(tree.Stmts[0].Stmt)
	if selectsStar(sel) {
		// * and t.* name the columns the tables have when the definition
		// is applied, and a subquery's column references are resolved by
		// scope: PostgreSQL expands and qualifies them (ExpandStar) and the
		// expanded query is validated then. Its clauses are checked now (a
		// plain DISTINCT is rewritten after the expansion).
		distinct := sel.DistinctClause
		if len(distinct) == 1 && distinct[0].GetNode() == nil {
			sel.DistinctClause = nil
		}
		err := c.checkClauses(sel)
		sel.DistinctClause = distinct
		if err != nil {
			return nil, joinRefusals(append(errs, err))
		}
		return expand()
	}
	if needsTopK(sel) {
		// The first rows of an order: a window and a filter on it
		// (topk.go), over the qualified text, where ORDER BY names no
		// output alias a window could not read.
		if !qualified {
			return expand()
		}
		if err := c.rewriteTopK(sel, nil); err != nil {
			return nil, joinRefusals(append(errs, err))
		}
	}
	if hasLateral(sel) {
		// A LATERAL subquery that aggregates without GROUP BY is read as
		// scalar subqueries (lateralagg.go), once every reference is
		// qualified.
		if !qualified {
			return expand()
		}
		if err := c.rewriteLateralAggregates(sel); err != nil {
			return nil, joinRefusals(append(errs, err))
		}
	}
	distinctOverWindows(sel)
	if err := c.distinctAsGroupBy(sel); err != nil {
		return nil, joinRefusals(append(errs, err))
	}
	if !keep(c.checkClauses(sel)) && (len(sel.FromClause) == 0 || sel.Larg != nil) {
		return nil, joinRefusals(errs)
	}
	if needsAggSplit(sel) && joinRefusals(errs) == nil {
		// A subquery read over groups (aggsplit.go): the query over its
		// grouped rows, once PostgreSQL has qualified every reference.
		if !qualified {
			return expand()
		}
		if err := c.splitAggregate(sel); err != nil {
			return nil, joinRefusals(append(errs, err))
		}
	}
	if hasLateral(sel) && joinRefusals(errs) == nil {
		// LATERAL subqueries as derived tables joined on their
		// correlations (lateral.go), once every reference is qualified.
		if !qualified {
			return expand()
		}
		if err := c.rewriteLateral(sel); err != nil {
			return nil, joinRefusals(append(errs, err))
		}
	}
	c.windows = hasWindow(sel) && !aggregates(sel)
	fromOK := keep(c.flattenDerived(sel)) && keep(c.dependOnSublinks(sel)) && keep(c.checkFrom(sel))
	c.fromRefused = !fromOK
	// What is left of recursive CTEs is in subqueries PostgreSQL
	// evaluates (recursive.go).
	realizeRecursive(tree.Stmts[0].Stmt)
	for i, oj := range c.outer {
		if c.filteringDeps[oj.node] {
			c.outer[i].Above = append(oj.Above, ColumnName{Column: "*"})
		}
		c.outer[i].Narrowed = c.narrowedDeps[oj.node]
		// A narrowed scalar's value is the same for every row: a condition
		// reading it and the preserved side drops a matched row and its
		// NULL-extended row alike, and needs no mirror (narrow.go).
		c.outer[i].Above = slices.DeleteFunc(c.outer[i].Above, func(cn ColumnName) bool { return c.narrowedAlias(cn.Ref) })
	}
	q := &Query{Tables: c.tables, Generated: c.generated, Outer: c.outer, Cover: c.cover, from: sel.FromClause, OrderBy: len(sel.SortClause) > 0 || c.droppedOrder, Equalities: c.equalities, joinConds: c.joinConds, unread: c.unread, tree: tree,
		Narrow: c.narrow}
	for _, l := range c.levels {
		for i, rv := range c.rvs {
			if rv == l.rv {
				l.Table = i
				q.Levels = append(q.Levels, l)
			}
		}
	}
	if sel.WhereClause != nil {
		if keep(c.checkExpr(sel.WhereClause, "WHERE", "aggregate functions are not allowed in WHERE (%s); WHERE filters source rows before grouping, remove the aggregate")) {
			if q.Where, err = c.deparse(sel.WhereClause, "WHERE"); err != nil {
				return nil, joinRefusals(append(errs, err))
			}
		}
	}
	items, err := c.selectList(sel)
	if keep(err) && fromOK && joinRefusals(errs) == nil {
		if keep(c.groupBy(sel, items, q)) && q.Aggregate {
			keep(c.composedItems(sel, items, q))
		}
	}
	if err := joinRefusals(errs); err != nil {
		return nil, err
	}
	if c.needsCatalog {
		return expand()
	}
	for _, it := range items {
		q.Targets = append(q.Targets, it.t)
	}
	if c.windows {
		if q.Window, err = c.windowSpec(sel, items); err != nil {
			return nil, joinRefusals(append(errs, err))
		}
	}
	for _, cn := range columnNames(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}) {
		q.columns = append(q.columns, cn.Column)
	}
	if unrenderable != nil {
		return nil, unrenderable
	}
	q.SQL = original
	if !qualified && hasSublinks(tree.Stmts[0].Stmt) {
		// Checked; kept once PostgreSQL has qualified its references.
		return expand()
	}
	if q.Rewritten, err = deparse(tree); err != nil {
		return nil, terr.Wrap(terr.Internal, err, "%s: deparse the query: %v", label, err)
	}
	return q, nil
}

// ParseQuery parses and validates one SELECT, as the query of CREATE
// TRANSFORM name AS …, as PostgreSQL writes it back (the expanded form of
// a definition with * or subqueries in expressions).
func ParseQuery(name, sql string) (*Query, error) {
	return parseSelect(fmt.Sprintf("transform %q", name), sql, 0, len(sql), true)
}
