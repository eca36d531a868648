package engine

// setop.go owns set operations: UNION [ALL], INTERSECT and EXCEPT, at the
// top of a query, in derived tables, CTEs and subqueries, nested (ADR
// 0032). Each is read as a SELECT the engine already keeps: the branches
// are derived tables side by side in a FULL JOIN … ON false, which returns
// every row of every branch once with the other branches NULL-extended,
// and each output column is the coalesce of the branches' columns — for a
// row of one branch, the others are NULL, so the coalesce is that
// branch's value, NULL included. coalesce resolves the branches' types as
// UNION does (PostgreSQL's select_common_type serves both).
//
//	A UNION ALL B          SELECT coalesce(a.c1, b.c1) AS x … FROM (A) a(c1…) FULL JOIN (B) b(c1…) ON false
//	A UNION B              the same, DISTINCT (kept as GROUP BY every column)
//	A INTERSECT B          each branch tagged (1 AS t); GROUP BY every column
//	                       HAVING count(a.t) > 0 AND count(b.t) > 0
//	A EXCEPT B             … HAVING count(a.t) > 0 AND count(b.t) = 0
//
// GROUP BY puts NULLs together, as set operations compare rows (NULL is
// not distinct from NULL). A row of a branch has its own lineage (its
// branch's source keys), so a change re-derives the rows of its branch;
// the join adds nothing to find, since ON false matches nothing. A branch
// on the NULL-extended side with a WHERE or a computed output is an inner
// level (ADR 0027), like any derived table there.
//
// INTERSECT ALL and EXCEPT ALL keep min(m, n) and m − n copies of a row:
// the counts per distinct row (an inner level) expanded by generate_series
// over them, each copy keyed by its group and ordinal (countedCopies, ADR
// 0034).

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// isSetOp reports whether sel combines queries.
func isSetOp(sel *pg_query.SelectStmt) bool {
	return sel != nil && sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED
}

// readsSetOp reports whether sel is a set operation read as the SELECT of
// the file comment: its FROM is the join of the branches.
func readsSetOp(sel *pg_query.SelectStmt) bool {
	if isSetOp(sel) {
		return true
	}
	if len(sel.FromClause) != 1 {
		return false
	}
	found := false
	walk(sel.FromClause[0].ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.RangeSubselect:
			found = found || (x.Alias != nil && strings.HasPrefix(x.Alias.Aliasname, "__set"))
			return false
		case *pg_query.JoinExpr:
			return true
		}
		return !found
	})
	return found
}

// rewriteSetOps reads every set operation in the statement n (its derived
// tables, inlined CTEs and subqueries included) as the SELECT of the file
// comment, in place.
func (c *selectChecker) rewriteSetOps(n *pg_query.Node) error {
	var ferr error
	var visit func(m proto.Message) bool
	visit = func(m proto.Message) bool {
		if ferr != nil {
			return false
		}
		sel, ok := m.(*pg_query.SelectStmt)
		if !ok || !isSetOp(sel) {
			return true
		}
		out, err := c.setOpSelect(sel)
		if err != nil {
			ferr = err
			return false
		}
		proto.Reset(sel)
		proto.Merge(sel, out)
		// The branches, now derived tables, may hold set operations of
		// their own (in their FROM or subqueries).
		for _, item := range sel.FromClause {
			walk(item.ProtoReflect(), visit)
		}
		return false
	}
	walk(n.ProtoReflect(), visit)
	return ferr
}

// setOpSelect is the SELECT that set operation sel stands for.
func (c *selectChecker) setOpSelect(sel *pg_query.SelectStmt) (*pg_query.SelectStmt, error) {
	op := strings.TrimPrefix(sel.Op.String(), "SETOP_")
	if sel.IntoClause != nil || len(sel.LockingClause) > 0 {
		return nil, c.errf(-1, "%s with INTO or FOR UPDATE is not supported in a transform; remove it", op)
	}
	// A chain of the same operation is one join of all its branches:
	// (A UNION ALL B) UNION ALL C; under UNION's DISTINCT any UNION below
	// (duplicates go at the top); A INTERSECT B INTERSECT C; and A EXCEPT
	// B EXCEPT C, which is (A EXCEPT B) EXCEPT C: only its left side chains.
	plain := func(s *pg_query.SelectStmt) bool {
		return isSetOp(s) && s.Op == sel.Op && s.SortClause == nil && s.LimitCount == nil && s.LimitOffset == nil && s.WithClause == nil
	}
	chains := func(s *pg_query.SelectStmt) bool {
		switch {
		case !plain(s):
			return false
		case sel.Op == pg_query.SetOperation_SETOP_UNION:
			return !sel.All || s.All
		default:
			return s.All == sel.All
		}
	}
	var branches []*pg_query.SelectStmt
	var gather func(s *pg_query.SelectStmt, right bool)
	gather = func(s *pg_query.SelectStmt, right bool) {
		if chains(s) && !(right && sel.Op == pg_query.SetOperation_SETOP_EXCEPT) {
			gather(s.Larg, false)
			gather(s.Rarg, true)
			return
		}
		branches = append(branches, s)
	}
	gather(sel.Larg, false)
	gather(sel.Rarg, true)
	for i, b := range branches {
		if isSetOp(b) {
			// Another operation below: its own SELECT first.
			out, err := c.setOpSelect(b)
			if err != nil {
				return nil, err
			}
			branches[i] = out
		}
	}
	for _, b := range branches {
		if len(b.ValuesLists) > 0 {
			return nil, c.errf(-1, "VALUES is not supported in a transform, also as a branch of %s; a transform reads source tables (put constant rows in a table)", op)
		}
	}
	names := outputNames(&pg_query.RangeSubselect{}, branches[0])
	for i, b := range branches[1:] {
		if n := len(b.TargetList); n != len(names) {
			return nil, c.errf(-1, "each %s query must have the same number of columns: branch 1 selects %d, branch %d selects %d", op, len(names), i+2, n)
		}
	}
	for i, n := range names {
		if n == "" {
			names[i] = "?column?"
		}
	}
	tagged := sel.Op != pg_query.SetOperation_SETOP_UNION
	c.setOps++
	var from *pg_query.Node
	aliases := make([]string, len(branches))
	for i, b := range branches {
		aliases[i] = fmt.Sprintf("__set%d_%d", c.setOps, i+1)
		alias := &pg_query.Alias{Aliasname: aliases[i]}
		for k := range names {
			alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode(fmt.Sprintf("c%d", k+1)))
		}
		b = proto.Clone(b).(*pg_query.SelectStmt)
		if tagged {
			b.TargetList = append(b.TargetList, named(mustParseExpr("1", nil), "t"))
			alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode("t"))
		}
		item := &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
			Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: b}}, Alias: alias}}}
		if from == nil {
			from = item
			continue
		}
		from = &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: &pg_query.JoinExpr{
			Jointype: pg_query.JoinType_JOIN_FULL, Larg: from, Rarg: item,
			Quals: &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
				Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: false}}, Location: -1}}}}}}
	}
	out := &pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, FromClause: []*pg_query.Node{from}, SortClause: sel.SortClause,
		LimitCount: sel.LimitCount, LimitOffset: sel.LimitOffset, LimitOption: sel.LimitOption}
	for k, n := range names {
		call := &pg_query.CoalesceExpr{Location: -1}
		for _, a := range aliases {
			call.Args = append(call.Args, columnRef(a, fmt.Sprintf("c%d", k+1)))
		}
		out.TargetList = append(out.TargetList, named(&pg_query.Node{Node: &pg_query.Node_CoalesceExpr{CoalesceExpr: call}}, n))
	}
	switch {
	case sel.Op == pg_query.SetOperation_SETOP_UNION && !sel.All:
		out.DistinctClause = []*pg_query.Node{{}}
	case tagged && sel.All:
		return c.countedCopies(sel, out, names, aliases), nil
	case tagged:
		for k := range names {
			out.GroupClause = append(out.GroupClause, &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
				Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(k + 1)}}, Location: -1}}})
		}
		var conds []*pg_query.Node
		for i, a := range aliases {
			cmp := "count(x) > 0" // in this branch (INTERSECT: in every one)
			if sel.Op == pg_query.SetOperation_SETOP_EXCEPT && i > 0 {
				cmp = "count(x) = 0" // EXCEPT: in the first, in no other
			}
			conds = append(conds, mustParseExpr(cmp, columnRef(a, "t")))
		}
		out.HavingClause = andAll(conds)
	}
	return out, nil
}

// countedCopies is INTERSECT ALL or EXCEPT ALL over the join of the
// branches out (ADR 0034): the rows counted per branch in a derived table
// that groups by every column (an inner level), each distinct row made
// as many times as the operation keeps by generate_series over its
// counts — min(m, n) for INTERSECT ALL, m − n for EXCEPT ALL, none when
// that is not positive. Each copy's identity is its group's and its
// ordinal.
//
//	SELECT x.c1 AS k … FROM (SELECT coalesce(a.c1, b.c1) AS c1, …, count(a.t) AS n1,
//	    count(b.t) AS n2 FROM … GROUP BY 1, …) x(c1, …, n1, n2)
//	  CROSS JOIN generate_series(1, least(x.n1, x.n2)) g(copy)
func (c *selectChecker) countedCopies(sel, out *pg_query.SelectStmt, names, aliases []string) *pg_query.SelectStmt {
	counts := &pg_query.Alias{Aliasname: fmt.Sprintf("__set%d", c.setOps)}
	for k := range names {
		out.GroupClause = append(out.GroupClause, &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
			Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(k + 1)}}, Location: -1}}})
		out.TargetList[k].GetResTarget().Name = fmt.Sprintf("c%d", k+1)
		counts.Colnames = append(counts.Colnames, pg_query.MakeStrNode(fmt.Sprintf("c%d", k+1)))
	}
	var bound []*pg_query.Node
	for i, a := range aliases {
		n := fmt.Sprintf("n%d", i+1)
		out.TargetList = append(out.TargetList, named(mustParseExpr("count(x)", columnRef(a, "t")), n))
		counts.Colnames = append(counts.Colnames, pg_query.MakeStrNode(n))
		bound = append(bound, columnRef(counts.Aliasname, n))
	}
	var last *pg_query.Node
	if sel.Op == pg_query.SetOperation_SETOP_INTERSECT {
		last = &pg_query.Node{Node: &pg_query.Node_MinMaxExpr{MinMaxExpr: &pg_query.MinMaxExpr{Op: pg_query.MinMaxOp_IS_LEAST, Args: bound, Location: -1}}}
	} else {
		last = bound[0]
		for _, b := range bound[1:] {
			d := mustParseExpr("x - y", nil)
			ae := d.GetAExpr()
			ae.Lexpr, ae.Rexpr = last, b
			last = d
		}
	}
	series := &pg_query.FuncCall{Funcname: []*pg_query.Node{pg_query.MakeStrNode("generate_series")}, Location: -1,
		Args: []*pg_query.Node{mustParseExpr("1", nil), last}, Funcformat: pg_query.CoercionForm_COERCE_EXPLICIT_CALL}
	copies := &pg_query.Node{Node: &pg_query.Node_RangeFunction{RangeFunction: &pg_query.RangeFunction{
		Functions: []*pg_query.Node{{Node: &pg_query.Node_List{List: &pg_query.List{Items: []*pg_query.Node{{Node: &pg_query.Node_FuncCall{FuncCall: series}}, {}}}}}},
		Alias:     &pg_query.Alias{Aliasname: counts.Aliasname + "_copies", Colnames: []*pg_query.Node{pg_query.MakeStrNode("copy")}}}}}
	grouped := &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: &pg_query.SelectStmt{
			Op: pg_query.SetOperation_SETOP_NONE, TargetList: out.TargetList, FromClause: out.FromClause, GroupClause: out.GroupClause}}},
		Alias: counts}}}
	res := &pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, FromClause: []*pg_query.Node{crossJoin(grouped, copies)},
		SortClause: out.SortClause, LimitCount: out.LimitCount, LimitOffset: out.LimitOffset, LimitOption: out.LimitOption}
	for k, n := range names {
		res.TargetList = append(res.TargetList, named(columnRef(counts.Aliasname, fmt.Sprintf("c%d", k+1)), n))
	}
	return res
}
