package engine

// topksub.go owns subqueries in expressions that limit their rows —
// (SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY
// p.valid_from DESC, p.id LIMIT 1), IN / ARRAY / EXISTS over ORDER BY …
// LIMIT … OFFSET — and their dependency levels (ADR 0038 §1). Like every
// subquery in an expression (sublink.go) it stays in the query as
// written: PostgreSQL evaluates it per outer row, NULL when no row
// matches. The dependency level says which outer rows a change
// re-derives. Correlated by equalities only, an outer row's answer reads
// the first rows of its group in the subquery's order, and the level
// keeps their fingerprint:
//
//	SELECT __ranked.g1, count(*), array_agg(__ranked.__trellis_rn …), array_agg(__ranked.r1 …)
//	FROM (SELECT p.item_id AS g1, p.price AS r1,
//	             rank() OVER (PARTITION BY p.item_id ORDER BY p.valid_from DESC, p.id) AS __trellis_rn
//	      FROM prices p) __ranked
//	WHERE __ranked.__trellis_rn <= 1 AND __ranked.g1 IS NOT NULL GROUP BY __ranked.g1
//
// rank(), not row_number(): the rows ranked within the limit are every
// row PostgreSQL may return, whichever way it orders ties, so a change to
// any of them moves the fingerprint. A subquery whose other conditions or
// ORDER BY read the outer row keeps the fingerprint of all rows of its
// group instead.

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// rankedAlias names the derived table of a limited subquery's ranked rows.
const rankedAlias = "__ranked"

// subLimit is what a subquery's LIMIT and OFFSET keep: the rows at
// positions up to rows in its ORDER BY (-1: every row, past an OFFSET).
type subLimit struct{ rows int64 }

// subqueryLimit reads a subquery's LIMIT and OFFSET: nil when they keep
// every row the answer reads (none; EXISTS (… LIMIT k); an aggregate's one
// row under LIMIT k ≥ 1).
func (c *selectChecker) subqueryLimit(sl *pg_query.SubLink, sub *pg_query.SelectStmt, what string) (*subLimit, error) {
	if sub.LimitCount == nil && sub.LimitOffset == nil {
		return nil, nil
	}
	oneRow := hasAggregate(sub) && len(sub.GroupClause) == 0
	if sub.LimitOffset == nil && positiveConst(sub.LimitCount) && (sl.SubLinkType == pg_query.SubLinkType_EXISTS_SUBLINK || oneRow) {
		return nil, nil
	}
	if len(sub.SortClause) == 0 {
		return nil, c.errf(sl.Location, "%s limits its rows (LIMIT, OFFSET) without ORDER BY, so which rows it returns depends on row order (in PostgreSQL too); add ORDER BY ending with a key, or aggregate (min, max) to pick one value", what)
	}
	if oneRow {
		return nil, c.errf(sl.Location, "%s aggregates to one row, which its OFFSET or LIMIT 0 drops; remove the OFFSET (LIMIT 1 and more keep the row)", what)
	}
	if len(sub.DistinctClause) > 0 {
		return nil, c.errf(sl.Location, "%s limits its DISTINCT rows; write the distinct values as GROUP BY: (SELECT x FROM t GROUP BY x ORDER BY x LIMIT 3)", what)
	}
	count, offset := int64(-1), int64(0)
	for _, l := range []struct {
		n      *pg_query.Node
		clause string
		into   *int64
	}{{sub.LimitCount, "LIMIT", &count}, {sub.LimitOffset, "OFFSET", &offset}} {
		if l.n == nil {
			continue
		}
		v, ok, err := c.limitValue(l.n, l.clause)
		if err != nil {
			return nil, err
		}
		if ok {
			*l.into = v
		}
	}
	rows := int64(-1)
	if count >= 0 {
		rows = offset + count
	}
	return &subLimit{rows: rows}, nil
}

// limitedDependency is the dependency level of a subquery that limits its
// rows (the file comment): keep are its uncorrelated conditions, corr its
// equality correlations, reads the columns its other correlated
// conditions read; orderOuter: its ORDER BY reads the outer query.
func (c *selectChecker) limitedDependency(sl *pg_query.SubLink, sub *pg_query.SelectStmt, keep []*pg_query.Node, corr []correlation, reads []*pg_query.Node, orderOuter bool, lim *subLimit, outer, inner map[string]bool, what string) ([]dependencyJoin, error) {
	values := sl.SubLinkType != pg_query.SubLinkType_EXISTS_SUBLINK
	if values && sl.SubLinkType != pg_query.SubLinkType_ARRAY_SUBLINK && singleTarget(sub) == nil {
		return nil, c.errf(sl.Location, "%s must select one column", what)
	}
	if len(reads) > 0 || orderOuter {
		// No order per group to precompute: every row of the group, over
		// every column the answer reads (the count is always kept: it
		// says how many rows an OFFSET skips).
		if values {
			reads = append(reads, targetValues(sub)...)
		}
		names := outputNames(&pg_query.RangeSubselect{}, sub)
		for _, s := range sub.SortClause {
			if sb := s.GetSortBy(); sb != nil {
				reads = append(reads, innerColumns(outputExpr(sub, names, sb.Node), outer, inner)...)
			}
		}
		base := &pg_query.SelectStmt{FromClause: sub.FromClause, WhereClause: andAll(keep)}
		d, err := c.dependencyLevel(base, corr, rowsFingerprint(reads), what)
		return []dependencyJoin{d}, err
	}
	base, rcorr, rreads := rankedRows(sub, keep, corr, lim, values)
	d, err := c.dependencyLevel(base, rcorr, rowsFingerprint(rreads), what)
	return []dependencyJoin{d}, err
}

// rankedRows is a limited subquery's rows ranked in its order within each
// group of its correlations, those within the limit kept: the base of its
// dependency level, a derived table over a window (a level of its own).
// It returns the base, the correlations over the derived table's columns
// and what the fingerprint reads: each row's rank and, with values, what
// the subquery selects.
func rankedRows(sub *pg_query.SelectStmt, keep []*pg_query.Node, corr []correlation, lim *subLimit, values bool) (*pg_query.SelectStmt, []correlation, []*pg_query.Node) {
	inner := proto.Clone(sub).(*pg_query.SelectStmt)
	inner.SortClause, inner.LimitCount, inner.LimitOffset = nil, nil, nil
	inner.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	inner.WhereClause = andAll(cloneNodes(keep))
	inner.TargetList = nil
	wd := &pg_query.WindowDef{FrameOptions: 0x00002 | 0x00020 | 0x00400, Location: -1}
	var rcorr []correlation
	for i, k := range corr {
		name := fmt.Sprintf("g%d", i+1)
		inner.TargetList = append(inner.TargetList, named(k.inner, name))
		wd.PartitionClause = append(wd.PartitionClause, proto.Clone(k.inner).(*pg_query.Node))
		rcorr = append(rcorr, correlation{inner: columnRef(rankedAlias, name), outer: k.outer})
	}
	reads := []*pg_query.Node{columnRef(rankedAlias, rankItem)}
	if values {
		for j, v := range targetValues(sub) {
			name := fmt.Sprintf("r%d", j+1)
			inner.TargetList = append(inner.TargetList, named(v, name))
			reads = append(reads, columnRef(rankedAlias, name))
		}
	}
	names := outputNames(&pg_query.RangeSubselect{}, sub)
	for _, s := range sub.SortClause {
		sb := proto.Clone(s).(*pg_query.Node)
		if b := sb.GetSortBy(); b != nil {
			b.Node = outputExpr(sub, names, b.Node)
		}
		wd.OrderClause = append(wd.OrderClause, sb)
	}
	rank := &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
		Funcname: []*pg_query.Node{pg_query.MakeStrNode("rank")}, Over: wd, Location: -1}}}
	inner.TargetList = append(inner.TargetList, named(rank, rankItem))
	base := &pg_query.SelectStmt{FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}},
		Alias:    &pg_query.Alias{Aliasname: rankedAlias}}}}}}
	if lim.rows >= 0 {
		base.WhereClause = mustParseExpr(fmt.Sprintf("x <= %d", lim.rows), columnRef(rankedAlias, rankItem))
	}
	return base, rcorr, reads
}
