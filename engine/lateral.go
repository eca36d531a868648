package engine

// lateral.go owns LATERAL subqueries in FROM (ADR 0033). A LATERAL
// subquery correlated with the items before it by equalities in its WHERE
// is a derived table joined on those equalities: its rows for one outer
// row are its rows whose inner side equals that row's outer side.
//
//	FROM c LEFT JOIN LATERAL (SELECT o.id, o.amt FROM o WHERE o.cust = c.id
//	                          ORDER BY o.amt DESC, o.id LIMIT 2) t ON true
//	  → FROM c LEFT JOIN (SELECT o.id, o.amt, o.cust AS __trellis_lat1,
//	        row_number() OVER (PARTITION BY o.cust ORDER BY o.amt DESC, o.id) AS __trellis_rn
//	        FROM o) t ON t.__trellis_lat1 = c.id AND t.__trellis_rn <= 2
//
// ORDER BY … LIMIT becomes a window partitioned by the correlation, as
// top-K does (topk.go); GROUP BY and DISTINCT group by the correlation
// too. An aggregate without GROUP BY returns one row for every outer row,
// matched or not (count 0), which a join cannot give: it was read as
// scalar subqueries before (lateralagg.go). It runs on the qualified text,
// where every reference names its table.

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// latPrefix names the correlation columns a rewritten LATERAL subquery
// adds.
const latPrefix = "__trellis_lat"

// hasLateral reports whether sel's FROM holds a LATERAL subquery.
func hasLateral(sel *pg_query.SelectStmt) bool {
	found := false
	for _, it := range sel.FromClause {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.RangeSubselect:
				found = found || x.Lateral && !isValues(x)
				return false // its own FROM is its own query's
			case *pg_query.SubLink:
				return false
			}
			return !found
		})
	}
	return found
}

// rewriteLateral reads sel's LATERAL subqueries as derived tables joined
// on their correlations (the file comment), in place.
func (c *selectChecker) rewriteLateral(sel *pg_query.SelectStmt) error {
	outer := fromNames(sel.FromClause)
	lateralCommaJoins(sel)
	var ferr error
	for _, it := range sel.FromClause {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			if ferr != nil {
				return false
			}
			switch x := m.(type) {
			case *pg_query.RangeSubselect:
				// First in its join: there is nothing before it to read.
				// (A VALUES list reading the items before it stays
				// LATERAL: a generated item, generated.go.)
				x.Lateral = x.Lateral && isValues(x)
				return false
			case *pg_query.JoinExpr:
				if rs := x.Rarg.GetRangeSubselect(); rs != nil && rs.Lateral && !isValues(rs) {
					ferr = c.lateralJoin(x, rs, outer)
				}
			case *pg_query.SubLink:
				return false
			}
			return true
		})
	}
	return ferr
}

// lateralCommaJoins makes each LATERAL item of sel's comma list the right
// side of a join whose left side is the items before it, which it reads.
func lateralCommaJoins(sel *pg_query.SelectStmt) {
	for i := 1; i < len(sel.FromClause); i++ {
		rs := sel.FromClause[i].GetRangeSubselect()
		if rs == nil || !rs.Lateral || isValues(rs) {
			continue
		}
		left := sel.FromClause[0]
		for _, it := range sel.FromClause[1:i] {
			left = &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: &pg_query.JoinExpr{Jointype: pg_query.JoinType_JOIN_INNER, Larg: left, Rarg: it}}}
		}
		j := &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: &pg_query.JoinExpr{Jointype: pg_query.JoinType_JOIN_INNER, Larg: left, Rarg: sel.FromClause[i]}}}
		sel.FromClause = append([]*pg_query.Node{j}, sel.FromClause[i+1:]...)
		i = 0
	}
}

// aliasOf is a derived table's name, quoted, for a sentence.
func aliasOf(rs *pg_query.RangeSubselect) string {
	if rs.Alias == nil {
		return `""`
	}
	return quoteIdents([]string{rs.Alias.Aliasname})
}

// lateralJoin rewrites join j, whose right side is the LATERAL subquery
// rs, as the file comment says.
func (c *selectChecker) lateralJoin(j *pg_query.JoinExpr, rs *pg_query.RangeSubselect, outer map[string]bool) error {
	what := "FROM: the LATERAL subquery " + aliasOf(rs)
	if j.Jointype != pg_query.JoinType_JOIN_INNER && j.Jointype != pg_query.JoinType_JOIN_LEFT {
		return c.errf(-1, "%s is on the right of a RIGHT or FULL JOIN, which PostgreSQL does not allow to read the left side; use JOIN or LEFT JOIN", what)
	}
	sub := rs.Subquery.GetSelectStmt()
	if sub == nil || isSetOp(sub) || readsSetOp(sub) {
		return c.errf(-1, "%s combines queries or is not a SELECT; a LATERAL subquery that reads the outer query must be one SELECT", what)
	}
	inner := scopeNames(sub)
	delete(outer, rs.Alias.GetAliasname())
	defer func() { outer[rs.Alias.GetAliasname()] = true }()
	if part := outerPart([]clausePart{{sub.TargetList, "its select list"}, {sub.GroupClause, "its GROUP BY"}, {sub.FromClause, "its FROM"}, {sub.DistinctClause, "its DISTINCT ON"},
		{sub.SortClause, "its ORDER BY"}, {[]*pg_query.Node{sub.HavingClause, sub.LimitCount, sub.LimitOffset}, "its HAVING or LIMIT"}}, outer, inner); part != "" {
		return c.errf(-1, "%s refers to the outer query in %s; a LATERAL subquery may refer to the items before it only by equalities in its WHERE (s.a = t.b)", what, part)
	}
	var keep []*pg_query.Node
	var corr []correlation
	for _, cj := range conjuncts(sub.WhereClause) {
		if !outerRefs(cj, outer, inner) {
			keep = append(keep, cj)
			continue
		}
		if ae := cj.GetAExpr(); ae != nil && isEqualsOp(ae.Name) && ae.Kind == pg_query.A_Expr_Kind_AEXPR_OP && ae.Lexpr != nil && ae.Rexpr != nil && !hasSublinks(cj) {
			l, r := outerRefs(ae.Lexpr, outer, inner), outerRefs(ae.Rexpr, outer, inner)
			switch {
			case !l && r && innerOnly(ae.Lexpr, outer, inner):
				corr = append(corr, correlation{inner: ae.Lexpr, outer: ae.Rexpr})
				continue
			case l && !r && innerOnly(ae.Rexpr, outer, inner):
				corr = append(corr, correlation{inner: ae.Rexpr, outer: ae.Lexpr})
				continue
			}
		}
		return c.errf(-1, "%s refers to the outer query in a condition that is not an equality between its own columns and the outer query's; a LATERAL subquery is kept when it correlates by equalities (s.a = t.b) — move the other conditions to the join's ON", what)
	}
	if len(corr) == 0 {
		rs.Lateral = false // it reads nothing of the outer query: a derived table
		return nil
	}
	if (sub.LimitCount != nil || sub.LimitOffset != nil) && len(sub.SortClause) == 0 {
		return c.errf(-1, "%s uses LIMIT without ORDER BY, which keeps arbitrary rows (in PostgreSQL too); add ORDER BY ending with a key", what)
	}
	out := proto.Clone(sub).(*pg_query.SelectStmt)
	out.WhereClause = andAll(keep)
	names := outputNames(&pg_query.RangeSubselect{}, sub)
	for i, rt := range out.TargetList {
		if r := rt.GetResTarget(); r != nil && r.Name == "" && names[i] != "" {
			r.Name = names[i]
		}
	}
	var on []*pg_query.Node
	var parts []*pg_query.Node
	var cols []string
	for k, cr := range corr {
		col := fmt.Sprintf("%s%d", latPrefix, k+1)
		cols = append(cols, col)
		out.TargetList = append(out.TargetList, named(proto.Clone(cr.inner).(*pg_query.Node), col))
		parts = append(parts, proto.Clone(cr.inner).(*pg_query.Node))
		eq := mustParseExpr("x = y", nil)
		ae := eq.GetAExpr()
		ae.Lexpr, ae.Rexpr = columnRef(rs.Alias.GetAliasname(), col), cr.outer
		on = append(on, eq)
		if len(out.GroupClause) > 0 {
			out.GroupClause = append(out.GroupClause, proto.Clone(cr.inner).(*pg_query.Node))
		}
	}
	if distinctOn(out) {
		// The first row of each group per outer row.
		out.DistinctClause = append(parts, out.DistinctClause...)
		var sorts []*pg_query.Node
		for _, p := range parts {
			sorts = append(sorts, &pg_query.Node{Node: &pg_query.Node_SortBy{SortBy: &pg_query.SortBy{Node: proto.Clone(p).(*pg_query.Node), Location: -1}}})
		}
		out.SortClause = append(sorts, out.SortClause...)
	}
	if out.LimitCount != nil || out.LimitOffset != nil {
		// Top-K per outer row: a window partitioned by the correlation.
		if err := c.rewriteTopK(out, cols); err != nil {
			return err
		}
	}
	rs.Subquery = &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: out}}
	rs.Lateral = false
	if j.Quals != nil {
		on = append([]*pg_query.Node{j.Quals}, on...)
	}
	j.Quals = andAll(on)
	return nil
}
