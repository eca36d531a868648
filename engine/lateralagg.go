package engine

// lateralagg.go owns LATERAL subqueries that aggregate without GROUP BY
// (ADR 0038 §2). Such a subquery returns exactly one row per outer row —
// count 0, sum NULL, a user aggregate's final value over no rows when
// nothing matches — which no join gives an outer row without a match.
// Each reference to one of its columns is read as the scalar subquery
// that computes it, which PostgreSQL evaluates over the group, empty or
// not, and the LATERAL item leaves the FROM:
//
//	FROM c LEFT JOIN LATERAL (SELECT count(*) AS n, sum(o.amt) AS s
//	                          FROM o WHERE o.cust = c.id) x ON true
//	  → x.n is (SELECT count(*) FROM o WHERE o.cust = c.id),
//	    x.s is (SELECT sum(o.amt) FROM o WHERE o.cust = c.id)
//
// Under LEFT JOIN LATERAL … ON cond a reference reads CASE WHEN cond THEN
// (SELECT …) END; under an inner join, cond joins the WHERE. The scalars
// are subqueries in expressions (sublink.go), whose dependency levels share
// one fingerprint — every aggregate the LATERAL subquery selects — so they
// are one level, joined once. It runs on the qualified text, where every
// reference names its table and every table of every scope has a name of
// its own.

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// lateralAggregate is a LATERAL subquery read as scalar subqueries: its
// columns by output name, the join's condition (nil for ON true) and
// whether the join keeps outer rows the condition fails (LEFT).
type lateralAggregate struct {
	alias string
	cols  map[string]*pg_query.Node
	on    *pg_query.Node
	left  bool
}

// isLateralAggregate reports whether rs is a LATERAL subquery that
// aggregates without GROUP BY and reads the query before it (outer).
func isLateralAggregate(rs *pg_query.RangeSubselect, outer map[string]bool) bool {
	sub := rs.Subquery.GetSelectStmt()
	if !rs.Lateral || sub == nil || isSetOp(sub) || !hasAggregate(sub) || len(sub.GroupClause) > 0 {
		return false
	}
	names := map[string]bool{}
	for k := range outer {
		names[k] = k != rs.Alias.GetAliasname()
	}
	return outerRefs(rs.Subquery, names, scopeNames(sub))
}

// rewriteLateralAggregates reads each LATERAL subquery of sel's FROM that
// aggregates without GROUP BY as scalar subqueries (the file comment).
func (c *selectChecker) rewriteLateralAggregates(sel *pg_query.SelectStmt) error {
	outer := fromNames(sel.FromClause)
	found := false
	for _, it := range sel.FromClause {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.RangeSubselect:
				found = found || isLateralAggregate(x, outer)
				return false
			case *pg_query.SubLink:
				return false
			}
			return !found
		})
	}
	if !found {
		return nil
	}
	lateralCommaJoins(sel)
	var aggs []*lateralAggregate
	var conds []*pg_query.Node
	for i, it := range sel.FromClause {
		n, err := c.dropLateralAggregates(it, false, outer, &aggs, &conds)
		if err != nil {
			return err
		}
		sel.FromClause[i] = n
	}
	byAlias := map[string]*lateralAggregate{}
	for _, a := range aggs {
		byAlias[a.alias] = a
	}
	// Every place the outer query reads: a reference inside a query of its
	// own (a subquery, a derived table) is refused by read.
	var ferr error
	read := func(n *pg_query.Node, clause string) *pg_query.Node {
		out, err := c.readLateralAggregates(n, byAlias, clause)
		if err != nil && ferr == nil {
			ferr = err
		}
		return out
	}
	for _, g := range sel.GroupClause {
		if refersTo(g, byAlias) {
			a := byAlias[refAliases(g, byAlias)[0]]
			return c.errf(nodeLocation(g), "GROUP BY reads a column of the LATERAL subquery %s, which aggregates without GROUP BY and is read as a scalar subquery, which GROUP BY cannot hold; keep this query as a transform without the GROUP BY and group its target in a second transform", quoteIdents([]string{a.alias}))
		}
	}
	names := outputNames(&pg_query.RangeSubselect{}, sel)
	for i, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil {
			if rt.Name == "" {
				rt.Name = names[i] // x.n is still named n
			}
			rt.Val = read(rt.Val, fmt.Sprintf("select list item %d", i+1))
		}
	}
	for _, cd := range conds {
		sel.WhereClause = andOf(sel.WhereClause, cd)
	}
	if sel.WhereClause != nil {
		sel.WhereClause = read(sel.WhereClause, "WHERE")
	}
	if sel.HavingClause != nil {
		sel.HavingClause = read(sel.HavingClause, "HAVING")
	}
	for _, s := range sel.SortClause {
		if sb := s.GetSortBy(); sb != nil {
			sb.Node = read(sb.Node, "ORDER BY")
		}
	}
	for _, it := range sel.FromClause {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.JoinExpr:
				if x.Quals != nil {
					x.Quals = read(x.Quals, "JOIN … ON")
				}
			case *pg_query.RangeSubselect:
				if refersTo(x.Subquery, byAlias) && ferr == nil {
					ferr = c.errf(-1, "FROM: the subquery %s reads a column of the LATERAL subquery %s, which aggregates without GROUP BY; read it in this query's select list, WHERE or ON only (a scalar subquery stands for it there)", aliasOf(x), quoteIdents(refAliases(x.Subquery, byAlias)[:1]))
				}
				return false
			}
			return true
		})
	}
	return ferr
}

// dropLateralAggregates takes the LATERAL aggregates out of the FROM item
// n, each join with one becoming its left side, and records them with
// the inner joins' conditions the WHERE takes over. nullable: n is on the
// NULL-extended side of an outer join.
func (c *selectChecker) dropLateralAggregates(n *pg_query.Node, nullable bool, outer map[string]bool, aggs *[]*lateralAggregate, conds *[]*pg_query.Node) (*pg_query.Node, error) {
	j := n.GetJoinExpr()
	if j == nil {
		return n, nil
	}
	ln, rn := nullable, nullable
	switch j.Jointype {
	case pg_query.JoinType_JOIN_LEFT:
		rn = true
	case pg_query.JoinType_JOIN_RIGHT:
		ln = true
	case pg_query.JoinType_JOIN_FULL:
		ln, rn = true, true
	}
	var err error
	if j.Larg, err = c.dropLateralAggregates(j.Larg, ln, outer, aggs, conds); err != nil {
		return nil, err
	}
	rs := j.Rarg.GetRangeSubselect()
	if rs == nil || !isLateralAggregate(rs, outer) {
		if j.Rarg, err = c.dropLateralAggregates(j.Rarg, rn, outer, aggs, conds); err != nil {
			return nil, err
		}
		return n, nil
	}
	what := "FROM: the LATERAL subquery " + aliasOf(rs)
	sub := rs.Subquery.GetSelectStmt()
	switch {
	case nullable:
		return nil, c.errf(-1, "%s aggregates without GROUP BY and is on the NULL-extended side of an outer join, where its one row per outer row would have to turn NULL with the row; join it at the top of the FROM, or as a scalar subquery in the select list", what)
	case j.Jointype != pg_query.JoinType_JOIN_INNER && j.Jointype != pg_query.JoinType_JOIN_LEFT:
		return nil, c.errf(-1, "%s is on the right of a RIGHT or FULL JOIN, which PostgreSQL does not allow to read the left side; use JOIN or LEFT JOIN", what)
	case len(j.UsingClause) > 0 || j.IsNatural:
		return nil, c.errf(-1, "%s aggregates without GROUP BY and is joined by USING or NATURAL; join it ON its columns", what)
	case sub.HavingClause != nil:
		return nil, c.errf(-1, "%s aggregates without GROUP BY and filters its one row with HAVING; move the condition to the join's ON, reading its columns (LEFT JOIN LATERAL (…) %s ON %s.n > 0 keeps the outer row as HAVING does)", what, aliasOf(rs), aliasOf(rs))
	case sub.LimitOffset != nil || sub.LimitCount != nil && !positiveConst(sub.LimitCount):
		return nil, c.errf(-1, "%s aggregates without GROUP BY and its OFFSET or LIMIT drops its one row; remove the OFFSET (LIMIT 1 and more keep the row)", what)
	case hasWindow(sub):
		return nil, c.errf(-1, "%s aggregates without GROUP BY and calls a window function; select the aggregates only", what)
	}
	inner := scopeNames(sub)
	names := map[string]bool{}
	for k := range outer {
		names[k] = k != rs.Alias.GetAliasname()
	}
	if part := outerPart([]clausePart{{sub.TargetList, "its select list"}, {sub.FromClause, "its FROM"}, {sub.SortClause, "its ORDER BY"}, {sub.DistinctClause, "its DISTINCT"}}, names, inner); part != "" {
		return nil, c.errf(-1, "%s refers to the outer query in %s; a LATERAL subquery that aggregates without GROUP BY may refer to the items before it in its WHERE only", what, part)
	}
	a := &lateralAggregate{alias: rs.Alias.GetAliasname(), cols: map[string]*pg_query.Node{}, left: j.Jointype == pg_query.JoinType_JOIN_LEFT}
	if j.Quals != nil && !isTrueConst(j.Quals) {
		if a.left {
			a.on = j.Quals
		} else {
			*conds = append(*conds, j.Quals)
		}
	}
	// Each column is its scalar subquery (an aggregate's) or, read from no
	// row of the subquery's tables, its expression; the scalars'
	// dependency levels share every aggregate as their fingerprint.
	var shared []*pg_query.Node
	for _, t := range sub.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil && hasAggCall(rt.Val) {
			shared = append(shared, rt.Val)
		}
	}
	for i, name := range outputNames(rs, sub) {
		rt := sub.TargetList[i].GetResTarget()
		if rt == nil || rt.Val == nil || name == "" {
			return nil, c.errf(-1, "%s: select list item %d cannot be read; name it", what, i+1)
		}
		if !hasAggCall(rt.Val) {
			a.cols[name] = rt.Val
			continue
		}
		scalar := &pg_query.SelectStmt{TargetList: []*pg_query.Node{named(rt.Val, "")}, FromClause: cloneNodes(sub.FromClause),
			Op: pg_query.SetOperation_SETOP_NONE, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
		if sub.WhereClause != nil {
			scalar.WhereClause = proto.Clone(sub.WhereClause).(*pg_query.Node)
		}
		sl := &pg_query.SubLink{SubLinkType: pg_query.SubLinkType_EXPR_SUBLINK, Location: -1,
			Subselect: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: scalar}}}
		if text, err := deparseSelect(scalar); err == nil {
			c.sharedValues[text] = shared
		}
		a.cols[name] = &pg_query.Node{Node: &pg_query.Node_SubLink{SubLink: sl}}
	}
	*aggs = append(*aggs, a)
	return j.Larg, nil
}

// readLateralAggregates replaces, in n, each reference to a LATERAL
// aggregate's column by what computes it (the file comment).
func (c *selectChecker) readLateralAggregates(n *pg_query.Node, aggs map[string]*lateralAggregate, clause string) (*pg_query.Node, error) {
	var ferr error
	out := replaceNodes(n, func(x *pg_query.Node) *pg_query.Node {
		if ferr != nil {
			return x
		}
		switch {
		case x.GetSubLink() != nil || x.GetSelectStmt() != nil:
			if refersTo(x, aggs) {
				ferr = c.errf(nodeLocation(x), "%s: a subquery reads a column of the LATERAL subquery %s, which aggregates without GROUP BY; read it in this query's select list, WHERE or ON only (a scalar subquery stands for it there)", clause, quoteIdents(refAliases(x, aggs)[:1]))
			}
			return x
		case x.GetColumnRef() != nil:
			cr := x.GetColumnRef()
			if len(cr.Fields) != 2 || cr.Fields[0].GetString_() == nil {
				return nil
			}
			a := aggs[cr.Fields[0].GetString_().Sval]
			if a == nil {
				return nil
			}
			if hasStar(cr) {
				ferr = c.errf(cr.Location, "%s reads %s.*, a LATERAL subquery that aggregates without GROUP BY; name its columns", clause, quoteIdents([]string{a.alias}))
				return x
			}
			col := a.cols[cr.Fields[1].GetString_().GetSval()]
			if col == nil {
				ferr = c.errf(cr.Location, "%s reads a column the LATERAL subquery %s does not select", clause, quoteIdents([]string{a.alias}))
				return x
			}
			v := proto.Clone(col).(*pg_query.Node)
			if a.on == nil {
				return v
			}
			// LEFT JOIN … ON cond: the row's values where cond holds.
			cond, err := c.readLateralAggregates(proto.Clone(a.on).(*pg_query.Node), map[string]*lateralAggregate{a.alias: {alias: a.alias, cols: a.cols}}, clause)
			if err != nil {
				ferr = err
				return x
			}
			return &pg_query.Node{Node: &pg_query.Node_CaseExpr{CaseExpr: &pg_query.CaseExpr{Location: -1,
				Args: []*pg_query.Node{{Node: &pg_query.Node_CaseWhen{CaseWhen: &pg_query.CaseWhen{Expr: cond, Result: v, Location: -1}}}}}}}
		}
		return nil
	})
	return out, ferr
}

// refersTo reports whether n references a column of one of aggs.
func refersTo(n *pg_query.Node, aggs map[string]*lateralAggregate) bool {
	return len(refAliases(n, aggs)) > 0
}

// refAliases are the aliases of aggs that n references, in order.
func refAliases(n *pg_query.Node, aggs map[string]*lateralAggregate) []string {
	var out []string
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) >= 2 {
			if s := cr.Fields[0].GetString_(); s != nil && aggs[s.Sval] != nil {
				out = append(out, s.Sval)
			}
		}
		return true
	})
	return out
}

// isTrueConst reports whether n is the constant true (ON true).
func isTrueConst(n *pg_query.Node) bool {
	ac := n.GetAConst()
	return ac != nil && ac.GetBoolval() != nil && ac.GetBoolval().Boolval
}
