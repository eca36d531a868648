package engine

// topk.go owns top-K and DISTINCT ON (ADR 0033): both keep, per group or
// over all rows, the first rows in an order, which is a window and a
// filter on it:
//
//	SELECT a, b FROM t ORDER BY b DESC LIMIT 5 OFFSET 2
//	  → SELECT __topk.a, __topk.b FROM (SELECT a, b,
//	        row_number() OVER (ORDER BY b DESC) AS __trellis_rn FROM t) __topk
//	    WHERE __topk.__trellis_rn > 2 AND __topk.__trellis_rn <= 7
//	… FETCH FIRST 5 ROWS WITH TIES   → rank() … <= 5
//	SELECT DISTINCT ON (g) g, x FROM t ORDER BY g, x DESC
//	  → row_number() OVER (PARTITION BY g ORDER BY g, x DESC) … = 1
//
// The derived table is a window query, kept as a level (window.go) and
// re-derived by partition; the outer query filters its target. The rows
// an ORDER BY leaves tied at the boundary are PostgreSQL's to pick in any
// order; the engine's window breaks such ties by the sources' keys
// (WindowUse.TieBreak), so the target holds one of the answers the query
// may give, and exactly the answer when the order has no ties there.

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// topKAlias names the derived table of a top-K rewrite; rankItem its
// window's output.
const (
	topKAlias = "__topk"
	rankItem  = "__trellis_rn"
)

// needsTopK reports whether sel keeps the first rows of an order: LIMIT
// or OFFSET with ORDER BY, or DISTINCT ON.
func needsTopK(sel *pg_query.SelectStmt) bool {
	return (distinctOn(sel) || sel.LimitCount != nil || sel.LimitOffset != nil) && len(sel.SortClause) > 0
}

// distinctOn reports whether sel is SELECT DISTINCT ON (…).
func distinctOn(sel *pg_query.SelectStmt) bool {
	return len(sel.DistinctClause) > 0 && sel.DistinctClause[0].GetNode() != nil
}

// rewriteTopK rewrites sel in place as the file comment says. partition
// names output columns the window is partitioned by besides DISTINCT ON's
// (a LATERAL subquery's correlation, lateral.go).
func (c *selectChecker) rewriteTopK(sel *pg_query.SelectStmt, partition []string) error {
	on := distinctOn(sel)
	limited := sel.LimitCount != nil || sel.LimitOffset != nil
	if on && limited {
		return c.distinctOnLimited(sel, partition)
	}
	if on && len(sel.SortClause) == 0 {
		return c.errf(-1, "DISTINCT ON without ORDER BY keeps an arbitrary row of each group (in PostgreSQL too); add ORDER BY starting with the DISTINCT ON expressions and ending with a key")
	}
	count, offset := int64(-1), int64(0)
	if sel.LimitCount != nil {
		n, ok, err := c.limitValue(sel.LimitCount, "LIMIT")
		if err != nil {
			return err
		}
		if ok {
			count = n
		}
	}
	if sel.LimitOffset != nil {
		n, ok, err := c.limitValue(sel.LimitOffset, "OFFSET")
		if err != nil {
			return err
		}
		if ok {
			offset = n
		}
	}
	ties := sel.LimitOption == pg_query.LimitOption_LIMIT_OPTION_WITH_TIES
	if ties && offset > 0 {
		return c.errf(nodeLocation(sel.LimitOffset), "FETCH … WITH TIES together with OFFSET is not supported; which rows OFFSET skips among tied ones is arbitrary — drop OFFSET, or order by a key and drop WITH TIES")
	}
	names := outputNames(&pg_query.RangeSubselect{}, sel)
	// ORDER BY an output name or ordinal means that item's expression,
	// which a window's ORDER BY must spell out.
	var order []*pg_query.Node
	for _, s := range sel.SortClause {
		sb := proto.Clone(s).(*pg_query.Node)
		if b := sb.GetSortBy(); b != nil {
			b.Node = outputExpr(sel, names, b.Node)
		}
		order = append(order, sb)
	}
	fn := "row_number"
	if ties {
		fn = "rank"
	}
	wd := &pg_query.WindowDef{OrderClause: order, FrameOptions: 0x00002 | 0x00020 | 0x00400, Location: -1}
	for _, p := range partition {
		wd.PartitionClause = append(wd.PartitionClause, outputExpr(sel, names, columnRef(p)))
	}
	if on {
		for _, d := range sel.DistinctClause {
			wd.PartitionClause = append(wd.PartitionClause, outputExpr(sel, names, proto.Clone(d).(*pg_query.Node)))
		}
	}
	call := &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
		Funcname: []*pg_query.Node{pg_query.MakeStrNode(fn)}, Over: wd, Location: -1}}}
	inner := proto.Clone(sel).(*pg_query.SelectStmt)
	inner.SortClause, inner.LimitCount, inner.LimitOffset = nil, nil, nil
	inner.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	if on {
		inner.DistinctClause = nil
	}
	for i, rt := range inner.TargetList {
		if r := rt.GetResTarget(); r != nil && r.Name == "" && names[i] != "" {
			r.Name = names[i] // the outer query reads it by this name
		}
	}
	inner.TargetList = append(inner.TargetList, named(call, rankItem))
	var conds []*pg_query.Node
	rn := columnRef(topKAlias, rankItem)
	switch {
	case on:
		conds = append(conds, mustParseExpr("x = 1", rn))
	default:
		if offset > 0 {
			conds = append(conds, mustParseExpr(fmt.Sprintf("x > %d", offset), rn))
		}
		if count >= 0 {
			conds = append(conds, mustParseExpr(fmt.Sprintf("x <= %d", offset+count), proto.Clone(rn).(*pg_query.Node)))
		}
	}
	var targets []*pg_query.Node
	for _, n := range names {
		targets = append(targets, named(columnRef(topKAlias, n), n))
	}
	*sel = pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, TargetList: targets,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
			Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}},
			Alias:    &pg_query.Alias{Aliasname: topKAlias}}}}}}
	if len(conds) > 0 {
		sel.WhereClause = andAll(conds)
	}
	return nil
}

// donAlias names the derived table of DISTINCT ON rows a limit reads;
// orderItem prefixes its hidden ORDER BY columns.
const (
	donAlias  = "__don"
	orderItem = "__trellis_o"
)

// distinctOnLimited rewrites SELECT DISTINCT ON (d) … ORDER BY d, o LIMIT
// k OFFSET m as top-K over the DISTINCT ON rows (ADR 0038 §3):
//
//	SELECT __don.a, … FROM (SELECT DISTINCT ON (d) a, …, d AS __trellis_o1,
//	    o AS __trellis_o2 FROM t ORDER BY d, o) __don
//	ORDER BY __don.__trellis_o1, __don.__trellis_o2 LIMIT k OFFSET m
//
// and that query as top-K in turn. The ORDER BY starts with every
// DISTINCT ON expression (PostgreSQL requires it) and each distinct row has
// its own values of them, so the order of the distinct rows is total.
func (c *selectChecker) distinctOnLimited(sel *pg_query.SelectStmt, partition []string) error {
	if len(sel.SortClause) == 0 {
		return c.errf(-1, "DISTINCT ON without ORDER BY keeps an arbitrary row of each group (in PostgreSQL too); add ORDER BY starting with the DISTINCT ON expressions and ending with a key")
	}
	names := outputNames(&pg_query.RangeSubselect{}, sel)
	inner := proto.Clone(sel).(*pg_query.SelectStmt)
	inner.LimitCount, inner.LimitOffset = nil, nil
	inner.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	for i, rt := range inner.TargetList {
		if r := rt.GetResTarget(); r != nil && r.Name == "" && names[i] != "" {
			r.Name = names[i] // the outer query reads it by this name
		}
	}
	var order []*pg_query.Node
	for i, s := range sel.SortClause {
		sb := s.GetSortBy()
		if sb == nil {
			return c.errf(-1, "ORDER BY item %d cannot be read", i+1)
		}
		col := fmt.Sprintf("%s%d", orderItem, i+1)
		inner.TargetList = append(inner.TargetList, named(outputExpr(sel, names, sb.Node), col))
		out := proto.Clone(sb).(*pg_query.SortBy)
		out.Node = columnRef(donAlias, col)
		order = append(order, &pg_query.Node{Node: &pg_query.Node_SortBy{SortBy: out}})
	}
	var targets []*pg_query.Node
	for _, n := range names {
		targets = append(targets, named(columnRef(donAlias, n), n))
	}
	*sel = pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, TargetList: targets,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
			Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}},
			Alias:    &pg_query.Alias{Aliasname: donAlias}}}}},
		SortClause: order, LimitCount: sel.LimitCount, LimitOffset: sel.LimitOffset, LimitOption: sel.LimitOption}
	return c.rewriteTopK(sel, partition)
}

// limitValue is a LIMIT or OFFSET count: ok false for LIMIT ALL or NULL.
func (c *selectChecker) limitValue(n *pg_query.Node, clause string) (v int64, ok bool, err error) {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.Arg // FETCH FIRST 3 ROWS: a cast to bigint
	}
	ac := n.GetAConst()
	switch {
	case ac == nil:
		return 0, false, c.errf(nodeLocation(n), "%s takes a constant here; write the number of rows", clause)
	case ac.Isnull:
		return 0, false, nil
	case ac.GetIval() != nil:
		if v := int64(ac.GetIval().Ival); v >= 0 {
			return v, true, nil
		}
	}
	return 0, false, c.errf(nodeLocation(n), "%s takes a non-negative whole number here", clause)
}

// outputExpr is n, or the expression of the select item n names: an
// ordinal, or a bare name that is an output column's (PostgreSQL's ORDER
// BY reads output names first).
func outputExpr(sel *pg_query.SelectStmt, names []string, n *pg_query.Node) *pg_query.Node {
	if ac := n.GetAConst(); ac != nil && ac.GetIval() != nil {
		if i := int(ac.GetIval().Ival); i >= 1 && i <= len(sel.TargetList) {
			return proto.Clone(sel.TargetList[i-1].GetResTarget().Val).(*pg_query.Node)
		}
	}
	if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_() != nil {
		name := cr.Fields[0].GetString_().Sval
		for i, nm := range names {
			if nm == name {
				return proto.Clone(sel.TargetList[i].GetResTarget().Val).(*pg_query.Node)
			}
		}
	}
	return n
}

// rewritesQualified reports whether any SELECT in n (its derived tables,
// CTEs and subqueries included) is rewritten over its qualified text —
// top-K, LATERAL, a subquery or window over groups (aggsplit.go) — so the
// whole definition is read as PostgreSQL qualifies it (Query.Expand): a
// derived table's level is parsed as qualified as its owner.
func rewritesQualified(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if sel, ok := m.(*pg_query.SelectStmt); ok && (needsTopK(sel) || hasLateral(sel) || needsAggSplit(sel) || readsGenerated(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}})) {
			found = true
		}
		return !found
	})
	return found
}
