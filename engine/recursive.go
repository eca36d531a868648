package engine

// recursive.go owns WITH RECURSIVE (ADR 0035): which recursive CTEs are
// kept — linear recursion, anchor UNION [ALL] step, the step reading the
// CTE once, inner-joined to source tables — and how a reference to one
// reads it: as an inner level keyed by anchor (recursiveplan.go plans it,
// recursivesql.go maintains it, recursivelevel.go parses it), through
// SELECT DISTINCT over it for UNION, whose rows the level keeps per anchor.
//
// A reference becomes, before any other rewrite, a derived table over a
// call of recursiveFunc whose argument is the level's query as text. The
// call survives the text round trips the rewrites make (a derived table
// that becomes a level is parsed again from its deparsed text), and the
// checker that finally reads it in FROM (flattenItem) makes the level.
// No other rewrite looks inside a string, so the recursive query's own
// UNION is never taken for a set operation of the outer query.

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// recursiveFunc is the placeholder call a recursive CTE's reference reads.
const recursiveFunc = "__trellis_recursive"

// keptForm is what every refusal of a recursive CTE says is kept.
const keptForm = "a recursive CTE is kept as <anchor SELECT over tables> UNION [ALL] <SELECT … FROM the CTE JOIN tables ON … WHERE …>, the CTE read once in its recursive term"

// recursiveRef is a kept recursive CTE as its references read it.
type recursiveRef struct {
	name  string
	cols  []string
	text  string // the level's query
	union bool
}

// forwardRefusal refuses CTE k of a WITH RECURSIVE when it reads a CTE
// defined after it: mutual recursion (PostgreSQL refuses it too) or a
// forward reference.
func (c *selectChecker) forwardRefusal(w *pg_query.WithClause, k int) error {
	cte := w.Ctes[k].GetCommonTableExpr()
	for _, later := range w.Ctes[k+1:] {
		if lc := later.GetCommonTableExpr(); lc != nil {
			if refs := tableRefs(cte.Ctequery, lc.Ctename); len(refs) > 0 {
				return c.errf(refs[0].Location, "WITH RECURSIVE %s reads %s, which is defined after it (mutual recursion or a forward reference); %s — order the CTEs so that each reads only itself and the ones before it",
					quoteIdents([]string{cte.Ctename}), quoteIdents([]string{lc.Ctename}), keptForm)
			}
		}
	}
	return nil
}

// withoutName is env without name: a CTE's query does not see an outer
// CTE its own name shadows.
func withoutName(env map[string]*cteDef, name string) map[string]*cteDef {
	if _, ok := env[name]; !ok {
		return env
	}
	out := make(map[string]*cteDef, len(env))
	for k, v := range env {
		if k != name {
			out[k] = v
		}
	}
	return out
}

// tableRefs are the unqualified references to table name in n.
func tableRefs(n *pg_query.Node, name string) []*pg_query.RangeVar {
	var out []*pg_query.RangeVar
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if rv, ok := m.(*pg_query.RangeVar); ok && rv.Relname == name && rv.Schemaname == "" && rv.Catalogname == "" {
			out = append(out, rv)
		}
		return true
	})
	return out
}

// recursiveCTE checks that a CTE that reads itself is linear recursion
// (keptForm), naming each part that is not, and returns how its
// references read it.
func (c *selectChecker) recursiveCTE(cte *pg_query.CommonTableExpr, env map[string]*cteDef) (*recursiveRef, error) {
	name := quoteIdents([]string{cte.Ctename})
	what := "WITH RECURSIVE " + name
	if cte.SearchClause != nil {
		return nil, c.errf(cte.SearchClause.Location, "%s: SEARCH … SET is not kept (the order it computes is an output of its own); carry a depth or a path column (0, then depth + 1; ARRAY[id], then path || id) and order by it when you read the target", what)
	}
	if cte.CycleClause != nil {
		return nil, c.errf(cte.CycleClause.Location, "%s: CYCLE … SET is not kept; carry the path yourself (ARRAY[id] in the anchor, path || id in the recursive term) and stop with WHERE NOT id = ANY(path), or write UNION instead of UNION ALL, which ends cycles by itself", what)
	}
	body := proto.Clone(cte.Ctequery).(*pg_query.Node).GetSelectStmt()
	if body.Op != pg_query.SetOperation_SETOP_UNION {
		loc := int32(-1)
		if refs := tableRefs(cte.Ctequery, cte.Ctename); len(refs) > 0 {
			loc = refs[0].Location
		}
		return nil, c.errf(loc, "%s reads itself but is not a UNION of an anchor and a recursive term; %s", what, keptForm)
	}
	if len(body.SortClause) > 0 || body.LimitCount != nil || body.LimitOffset != nil {
		return nil, c.errf(cte.Location, "%s: ORDER BY or LIMIT on the whole recursive query is not kept; remove it (order or limit when you read the target)", what)
	}
	anchor, step := body.Larg, body.Rarg
	if anchor.Op != pg_query.SetOperation_SETOP_NONE {
		return nil, c.errf(cte.Location, "%s: its anchor (the part before the last UNION) is itself a set operation; write one SELECT as the anchor — define one recursive CTE per anchor and UNION ALL them in the outer query", what)
	}
	anchorNode := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: anchor}}
	stepNode := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: step}}
	if refs := tableRefs(anchorNode, cte.Ctename); len(refs) > 0 {
		return nil, c.errf(refs[0].Location, "%s: its anchor (the SELECT before UNION) reads %s itself; %s", what, name, keptForm)
	}
	if step.Op != pg_query.SetOperation_SETOP_NONE {
		return nil, c.errf(cte.Location, "%s: its recursive term is a set operation; %s", what, keptForm)
	}
	refs := tableRefs(stepNode, cte.Ctename)
	if len(refs) > 1 {
		return nil, c.errf(refs[1].Location, "%s: its recursive term reads %s %d times; only linear recursion is kept (%s) — a path through two rows of the CTE at once is not", what, name, len(refs), keptForm)
	}
	if !inInnerFrom(step.FromClause, refs[0]) {
		return nil, c.errf(refs[0].Location, "%s: its recursive term reads %s outside its FROM's inner joins (in a subquery, or on a side of an outer join); %s", what, name, keptForm)
	}
	var errs []error
	for _, term := range []struct {
		sel  *pg_query.SelectStmt
		part string
	}{{anchor, "its anchor"}, {step, "its recursive term"}} {
		errs = append(errs, c.termRefusals(term.sel, what+": "+term.part)...)
	}
	if len(anchor.FromClause) == 0 {
		errs = append(errs, c.errf(nodeLocation(anchor.TargetList[0]), "%s: its anchor reads no table; a recursive CTE is kept by anchor row, each found by its source row's key — select the anchor from its table (SELECT id, 0 FROM nodes WHERE id = 1)", what))
	}
	if err := joinRefusals(errs); err != nil {
		return nil, err
	}
	if selectsStar(anchor) || selectsStar(step) {
		if c.qualified {
			return nil, c.errf(cte.Location, "%s selects *; list its columns by name", what)
		}
		// PostgreSQL expands and qualifies the definition; the recursive
		// CTE is read from that text (parseSelect returns at once).
		c.expandRecursive = true
		return &recursiveRef{name: cte.Ctename}, nil
	}
	var cols []string
	for _, cn := range cte.Aliascolnames {
		cols = append(cols, cn.GetString_().GetSval())
	}
	if len(cols) == 0 {
		cols = outputNames(&pg_query.RangeSubselect{}, anchor)
	}
	if len(cols) != len(anchor.TargetList) {
		return nil, c.errf(cte.Location, "%s names %d columns but its anchor selects %d; name as many columns as it selects", what, len(cols), len(anchor.TargetList))
	}
	for i, col := range cols {
		switch {
		case col == "" || col == "?column?":
			return nil, c.errf(cte.Location, "%s: column %d has no name; name the columns (WITH RECURSIVE %s(a, b, …) AS …)", what, i+1, cte.Ctename)
		case strings.HasPrefix(col, "__"):
			return nil, c.errf(cte.Location, "%s: column %s begins with \"__\", which names the engine's hidden columns; rename it", what, quoteIdents([]string{col}))
		}
	}
	// Earlier CTEs the terms read are inlined into them.
	for _, n := range []*pg_query.Node{anchorNode, stepNode} {
		if _, err := c.inlineWith(n, env); err != nil {
			return nil, err
		}
	}
	var colNodes, targets []*pg_query.Node
	for _, col := range cols {
		colNodes = append(colNodes, &pg_query.Node{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: col}}})
		targets = append(targets, named(columnRef(cte.Ctename, col), col))
	}
	level := &pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, TargetList: targets,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{Relname: cte.Ctename, Inh: true, Relpersistence: "p", Location: -1}}}},
		WithClause: &pg_query.WithClause{Recursive: true, Ctes: []*pg_query.Node{{Node: &pg_query.Node_CommonTableExpr{CommonTableExpr: &pg_query.CommonTableExpr{
			Ctename: cte.Ctename, Aliascolnames: colNodes, Ctequery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
				Op: pg_query.SetOperation_SETOP_UNION, All: body.All, Larg: anchorNode.GetSelectStmt(), Rarg: stepNode.GetSelectStmt()}}}}}}}}}
	text, err := deparseSelect(level)
	if err != nil {
		return nil, terr.Wrap(terr.Validation, err, "%s: %s cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", c.label, what, err)
	}
	return &recursiveRef{name: cte.Ctename, cols: cols, text: text, union: !body.All}, nil
}

// termRefusals are the parts of a recursive CTE's term that are not
// kept: anything but a SELECT of expressions over inner-joined tables.
func (c *selectChecker) termRefusals(sel *pg_query.SelectStmt, what string) []error {
	var errs []error
	add := func(loc int32, part, fix string) {
		errs = append(errs, c.errf(loc, "%s: %s is not kept in a recursive CTE; %s", what, part, fix))
	}
	linear := "the recursion is kept by anchor row (" + keptForm + ")"
	termNode := &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}
	switch {
	case len(sel.GroupClause) > 0:
		add(nodeLocation(sel.GroupClause[0]), "GROUP BY", "aggregate over the CTE in the outer query (SELECT part, sum(qty) FROM bom GROUP BY part), "+linear)
	case sel.HavingClause != nil || hasAggregate(sel):
		add(firstLocation(termNode, func(m proto.Message) bool {
			fc, ok := m.(*pg_query.FuncCall)
			return ok && fc.Over == nil && hasAggCall(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: fc}})
		}), "an aggregate (GROUP BY, HAVING or an aggregate call)", "aggregate over the CTE in the outer query (SELECT part, sum(qty) FROM bom GROUP BY part), "+linear)
	case len(sel.DistinctClause) > 0:
		add(nodeLocation(sel.TargetList[0]), "DISTINCT", "write UNION instead of UNION ALL, which keeps distinct rows")
	}
	if len(sel.WindowClause) > 0 || hasWindow(sel) {
		add(firstLocation(termNode, func(m proto.Message) bool {
			fc, ok := m.(*pg_query.FuncCall)
			return ok && fc.Over != nil
		}), "a window function", "compute it in the outer query over the CTE")
	}
	if len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil {
		loc := nodeLocation(sel.LimitCount)
		if len(sel.SortClause) > 0 {
			loc = nodeLocation(sel.SortClause[0].GetSortBy().GetNode())
		}
		add(loc, "ORDER BY or LIMIT", "remove it; bound the recursion with a condition (WHERE depth < 10)")
	}
	if len(sel.ValuesLists) > 0 {
		add(-1, "VALUES", "select the anchor rows from a table")
	}
	if sel.WithClause != nil && sel.WithClause.Recursive {
		add(sel.WithClause.Location, "a nested WITH RECURSIVE", "define it beside this one, in the same WITH")
	}
	if hasSublinks(termNode) {
		add(firstLocation(termNode, func(m proto.Message) bool { _, ok := m.(*pg_query.SubLink); return ok }),
			"a subquery in an expression", "join its table in FROM instead")
	}
	for _, item := range sel.FromClause {
		walk(item.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.JoinExpr:
				if x.Jointype != pg_query.JoinType_JOIN_INNER {
					add(nodeLocation(x.Rarg), "an outer join", "join with INNER JOIN (a row that finds no match derives nothing further); "+linear)
					return false
				}
			case *pg_query.RangeSubselect, *pg_query.SubLink:
				return false
			}
			return true
		})
	}
	return errs
}

// firstLocation is the location of the first message below n for which
// is holds, or -1.
func firstLocation(n *pg_query.Node, is func(proto.Message) bool) int32 {
	loc := int32(-1)
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if loc >= 0 {
			return false
		}
		if is(m) {
			if f := m.ProtoReflect().Descriptor().Fields().ByName("location"); f != nil {
				loc = int32(m.ProtoReflect().Get(f).Int())
			}
			return false
		}
		return true
	})
	return loc
}

// inInnerFrom reports whether rv is an item of from, or under its inner
// joins.
func inInnerFrom(from []*pg_query.Node, rv *pg_query.RangeVar) bool {
	var in func(n *pg_query.Node) bool
	in = func(n *pg_query.Node) bool {
		switch x := n.Node.(type) {
		case *pg_query.Node_RangeVar:
			return x.RangeVar == rv
		case *pg_query.Node_JoinExpr:
			return x.JoinExpr.Jointype == pg_query.JoinType_JOIN_INNER && (in(x.JoinExpr.Larg) || in(x.JoinExpr.Rarg))
		}
		return false
	}
	for _, n := range from {
		if in(n) {
			return true
		}
	}
	return false
}

// reference is the derived table that takes the place of rv, a reference
// to the CTE: the level's columns, distinct for UNION, under rv's name.
// It is parsed from text, so that it reads back as PostgreSQL's parser
// makes it (expression checks compare a deparsed expression with its
// parse).
func (r *recursiveRef) reference(rv *pg_query.RangeVar) *pg_query.Node {
	name := ident(r.name)
	var targets []string
	for _, col := range r.cols {
		targets = append(targets, name+"."+ident(col)+" AS "+ident(col))
	}
	distinct := ""
	if r.union {
		// Each anchor's rows are a set; across anchors, distinct as UNION.
		distinct = "DISTINCT "
	}
	sql := "SELECT " + distinct + strings.Join(targets, ", ") + " FROM " + recursiveFunc + "(" + quoteLiteral(r.text) + ") AS " +
		name + "(" + strings.Join(identsOf(r.cols), ", ") + ")"
	tree, err := pg_query.Parse(sql)
	if err != nil || len(r.cols) == 0 {
		// A * the expansion replaces (recursiveCTE): nothing reads it.
		return &pg_query.Node{Node: &pg_query.Node_RangeVar{RangeVar: rv}}
	}
	sel := tree.Stmts[0].Stmt
	clearLocations(sel.ProtoReflect())
	alias := &pg_query.Alias{Aliasname: rv.Relname}
	if rv.Alias != nil {
		alias = proto.Clone(rv.Alias).(*pg_query.Alias)
	}
	return &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{Subquery: sel, Alias: alias}}}
}
