package engine

// aggsplit.go owns subqueries read over groups: in HAVING, or in an
// aggregate query's select list outside an aggregate's arguments (ADR
// 0030). PostgreSQL evaluates them once per group, after grouping, so the
// row path of sublink.go (a dependency level joined to source rows) does
// not reach them. The query is read as what it means:
//
//	SELECT k, sum(v) AS s FROM t GROUP BY k HAVING sum(v) > (SELECT …)
//
// becomes
//
//	SELECT __grouped.k, __grouped.s FROM
//	  (SELECT k, sum(v) AS s, sum(v) AS agg_1 FROM t GROUP BY k) AS __grouped
//	WHERE __grouped.agg_1 > (SELECT …)
//
// The grouped query is an inner level like any derived table that
// aggregates (ADR 0018), and its subqueries are the outer query's, over
// the groups' rows, with their dependency levels: a change under a group
// re-derives that group's outer row, a change on the subquery's side the
// groups whose answer reads it.

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// groupedAlias is the name the grouped query gets as a derived table.
const groupedAlias = "__grouped"

// needsAggSplit reports whether sel reads a subquery over its groups.
func needsAggSplit(sel *pg_query.SelectStmt) bool {
	if !aggregates(sel) {
		return false
	}
	if sel.HavingClause != nil && hasSublinks(sel.HavingClause) {
		return true
	}
	if hasWindow(sel) {
		return true // windows over the grouped rows (window.go)
	}
	for _, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil && sublinkOutsideAggregates(rt.Val) {
			return true
		}
	}
	return false
}

// splitAggregate rewrites sel, whose HAVING or select list reads a
// subquery over its groups, into a query over its grouped rows (the file
// comment). It runs on the qualified text only, where every column
// reference names its table and every table of every scope has a name of
// its own, so a reference's qualifier says which query it belongs to.
func (c *selectChecker) splitAggregate(sel *pg_query.SelectStmt) error {
	if len(sel.DistinctClause) > 0 {
		return c.errf(-1, "DISTINCT together with GROUP BY or aggregates is not supported yet; take the distinct rows of the grouped query: SELECT DISTINCT … FROM (SELECT … GROUP BY …) AS g")
	}
	outer := fromNames(sel.FromClause)
	names := outputNames(&pg_query.RangeSubselect{}, sel)
	taken := map[string]bool{}
	for _, n := range names {
		taken[n] = true
	}
	fresh := func(prefix string) string {
		for i := 1; ; i++ {
			if n := fmt.Sprintf("%s_%d", prefix, i); !taken[n] {
				taken[n] = true
				return n
			}
		}
	}
	// The GROUP BY expressions, as text, each with the name of the
	// grouped query's column that holds it once one is needed.
	var ferr error
	groupText := map[string]string{}
	var groupExprs []*pg_query.Node
	var collect func(n *pg_query.Node)
	collect = func(n *pg_query.Node) {
		if gs := n.GetGroupingSet(); gs != nil {
			for _, x := range gs.Content {
				collect(x)
			}
			return
		}
		if ic := n.GetAConst().GetIval(); ic != nil && ic.Ival >= 1 && int(ic.Ival) <= len(sel.TargetList) {
			n = sel.TargetList[ic.Ival-1].GetResTarget().Val // an ordinal
		}
		if hasSublinks(n) && ferr == nil {
			ferr = c.errf(nodeLocation(n), "GROUP BY: a subquery in GROUP BY (or under SELECT DISTINCT) is not supported; compute it in a subquery in FROM and group by its column")
		}
		if s, err := deparseExpr(n); err == nil {
			if _, ok := groupText[s]; !ok {
				groupText[s] = ""
				groupExprs = append(groupExprs, n)
			}
		}
	}
	for _, g := range sel.GroupClause {
		collect(g)
	}
	if ferr != nil {
		return ferr
	}
	// A GROUP BY expression the select list already computes (outside a
	// subquery) is read through that item's column: the grouped query
	// selects each group key once.
	for i, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil && !sublinkOutsideAggregates(rt.Val) && !hasWindowCall(rt.Val) {
			if s, err := deparseExpr(rt.Val); err == nil {
				if name, ok := groupText[s]; ok && name == "" {
					groupText[s] = names[i]
				}
			}
		}
	}
	inner := &pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, FromClause: sel.FromClause, WhereClause: sel.WhereClause, GroupClause: sel.GroupClause,
		GroupDistinct: sel.GroupDistinct}
	extra := map[string]string{} // an aggregate or GROUPING() call's text → its column
	// over rewrites an expression of the outer query over the grouped rows.
	var over func(n *pg_query.Node, clause string) *pg_query.Node
	over = func(n *pg_query.Node, clause string) *pg_query.Node {
		return replaceNodes(n, func(x *pg_query.Node) *pg_query.Node {
			if ferr != nil {
				return x
			}
			if sl := x.GetSubLink(); sl != nil {
				// Inside, only what belongs to the outer query moves: its
				// aggregates and its grouped columns.
				if sl.Testexpr != nil {
					sl.Testexpr = over(sl.Testexpr, clause)
				}
				sl.Subselect = replaceNodes(sl.Subselect, func(y *pg_query.Node) *pg_query.Node {
					if ferr != nil || !refersOnlyTo(y, outer) {
						return nil
					}
					return over(y, clause)
				})
				return x
			}
			if fc := x.GetFuncCall(); (fc != nil && fc.Over == nil && isAggregate(fc)) || x.GetGroupingFunc() != nil {
				s, err := deparseExpr(x)
				if err != nil {
					ferr = c.errf(nodeLocation(x), "%s: this expression cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", clause, err)
					return x
				}
				name, ok := extra[s]
				if !ok {
					name = fresh("agg")
					extra[s] = name
					inner.TargetList = append(inner.TargetList, named(x, name))
				}
				return columnRef(groupedAlias, name)
			}
			if cr := x.GetColumnRef(); cr != nil || len(columnNames(x)) > 0 {
				s, err := deparseExpr(x)
				if err == nil {
					if name, ok := groupText[s]; ok {
						if name == "" {
							name = fresh("grp")
							groupText[s] = name
							for _, g := range groupExprs {
								if gs, _ := deparseExpr(g); gs == s {
									inner.TargetList = append(inner.TargetList, named(g, name))
								}
							}
						}
						return columnRef(groupedAlias, name)
					}
				}
				if cr != nil {
					ferr = c.errf(cr.Location, "%s reads a column outside an aggregate that is not a GROUP BY expression (PostgreSQL: it must appear in the GROUP BY clause or be used in an aggregate function); add it to GROUP BY or wrap it in an aggregate", clause)
					return x
				}
			}
			return nil
		})
	}
	var targets []*pg_query.Node
	for i, t := range sel.TargetList {
		rt := t.GetResTarget()
		name := names[i]
		if rt == nil || rt.Val == nil || name == "" {
			return c.errf(-1, "select list item %d cannot be read", i+1)
		}
		if !sublinkOutsideAggregates(rt.Val) && !hasWindowCall(rt.Val) {
			// Computed by the grouped query, read by name.
			inner.TargetList = append(inner.TargetList, named(rt.Val, name))
			targets = append(targets, named(columnRef(groupedAlias, name), name))
			continue
		}
		clause := fmt.Sprintf("select list item %d", i+1)
		if s, err := deparseExpr(rt.Val); err == nil {
			clause += " (" + s + ")"
		}
		targets = append(targets, named(over(proto.Clone(rt.Val).(*pg_query.Node), clause), name))
	}
	var where *pg_query.Node
	if sel.HavingClause != nil {
		clause := "HAVING"
		if s, err := deparseExpr(sel.HavingClause); err == nil {
			clause += " (" + strings.TrimSpace(s) + ")"
		}
		where = over(sel.HavingClause, clause)
	}
	if ferr != nil {
		return ferr
	}
	if len(inner.TargetList) == 0 {
		// Every item is over a subquery and reads no group or aggregate:
		// the grouped query still needs a column.
		inner.TargetList = append(inner.TargetList, named(mustParseExpr("count(*)", nil), fresh("agg")))
	}
	c.droppedOrder = c.droppedOrder || len(sel.SortClause) > 0
	*sel = pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE,
		TargetList: targets,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
			Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}},
			Alias:    &pg_query.Alias{Aliasname: groupedAlias}}}}},
		WhereClause: where,
	}
	return nil
}

// refersOnlyTo reports whether n reads columns and all of them through a
// qualifier in names (the outer query's tables, seen from a subquery).
func refersOnlyTo(n *pg_query.Node, names map[string]bool) bool {
	any, all := false, true
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SubLink, *pg_query.SelectStmt:
			all = false // a query of its own
		case *pg_query.ColumnRef:
			any = true
			if len(x.Fields) < 2 || x.Fields[0].GetString_() == nil || !names[x.Fields[0].GetString_().Sval] {
				all = false
			}
		}
		return all
	})
	return any && all
}
