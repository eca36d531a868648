package engine

// sublink.go owns subqueries in expressions — EXISTS, IN, NOT IN, ANY,
// ALL, ARRAY and scalar subqueries in WHERE, the select list and join
// conditions (ADR 0030). They stay in the query as written: the re-derive
// of an outer row runs it, so PostgreSQL evaluates each subquery itself
// (NULLs, a scalar subquery's two rows, any correlated condition). What
// this file adds is which outer rows a change on the subquery's side
// re-derives: each subquery gets a dependency level — an inner level
// grouped by the inner side of its equality correlations, holding a
// fingerprint of what the outer row's answer reads in that group — which
// the outer query LEFT JOINs on those correlations. The join adds no row
// (at most one level row per outer row) and only a lineage, so the
// outer-join expansion (ADR 0010) re-derives exactly the outer rows whose
// level row appeared, went or changed, and a level row changes only when
// its fingerprint does.
//
// Column references must be qualified, as PostgreSQL writes them back: a
// query with a subquery in an expression is expanded by PostgreSQL first
// (Query.Expand, expandStar), whose deparse qualifies every reference and
// gives every table of every scope a name of its own.

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// hasSublinks reports whether a statement holds a subquery in an
// expression anywhere (its derived tables and CTEs included).
func hasSublinks(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.SubLink); ok {
			found = true
		}
		return !found
	})
	return found
}

// foundSublink is a subquery of the outer query and where it was found:
// positive when only AND and OR lie between it and a WHERE or ON (there,
// NULL and false filter alike); filters when it is in a condition (WHERE,
// ON), which may drop an outer row rather than change its values.
type foundSublink struct {
	sl       *pg_query.SubLink
	positive bool
	clause   string
	filters  bool
}

// collectSublinks lists the subqueries of n not inside another subquery.
func collectSublinks(n *pg_query.Node, positive bool, clause string, out *[]foundSublink) {
	if n == nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_SubLink:
		*out = append(*out, foundSublink{sl: x.SubLink, positive: positive, clause: clause, filters: !strings.HasPrefix(clause, "select list")})
		// Its test expression (x IN …) belongs to the outer query.
		collectSublinks(x.SubLink.Testexpr, false, clause, out)
		return
	case *pg_query.Node_BoolExpr:
		keep := positive && x.BoolExpr.Boolop != pg_query.BoolExprType_NOT_EXPR
		for _, a := range x.BoolExpr.Args {
			collectSublinks(a, keep, clause, out)
		}
		return
	}
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if m == proto.Message(n) {
			return true
		}
		if nn, ok := m.(*pg_query.Node); ok {
			if nn.GetSubLink() != nil {
				collectSublinks(nn, false, clause, out)
				return false
			}
		}
		return true
	})
}

// dependOnSublinks gives each subquery of sel's WHERE, select list and
// join conditions its dependency levels and LEFT JOINs them to sel's FROM.
// Subqueries in GROUP BY are refused; those in HAVING and over an
// aggregate query's groups were moved over its grouped rows
// (splitAggregate) before this runs.
func (c *selectChecker) dependOnSublinks(sel *pg_query.SelectStmt) error {
	if err := c.sublinkPlaces(sel); err != nil {
		return err
	}
	var found []foundSublink
	collectSublinks(sel.WhereClause, true, "WHERE", &found)
	for _, item := range sel.FromClause {
		walk(item.ProtoReflect(), func(m proto.Message) bool {
			if j, ok := m.(*pg_query.JoinExpr); ok {
				collectSublinks(j.Quals, true, "JOIN … ON", &found)
			}
			_, sub := m.(*pg_query.RangeSubselect)
			return !sub
		})
	}
	for i, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil {
			collectSublinks(rt.Val, false, fmt.Sprintf("select list item %d", i+1), &found)
		}
	}
	if !c.qualified {
		// Unqualified, the query is only checked — its limits here, where
		// positions are the user's: its expansion by PostgreSQL is parsed
		// again, and kept then.
		var errs []error
		for _, f := range found {
			if sub := f.sl.Subselect.GetSelectStmt(); sub != nil {
				if _, err := c.subqueryLimit(f.sl, sub, f.clause+": the subquery"); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return joinRefusals(errs)
	}
	if len(found) == 0 {
		return nil
	}
	outer := fromNames(sel.FromClause)
	from := joinItems(sel.FromClause)
	if j := from.GetJoinExpr(); j != nil && len(sel.FromClause) > 1 {
		// The comma join's conditions become its ON: a dependency join in a
		// condition is mirrored (below), and the mirror is made from the
		// join below it without WHERE, which would be the comma items'
		// cross product. Inner, the ON filters as WHERE did.
		var moved, kept []*pg_query.Node
		for _, cj := range conjuncts(sel.WhereClause) {
			if hasSublinks(cj) {
				kept = append(kept, cj)
			} else {
				moved = append(moved, cj)
			}
		}
		if len(moved) > 0 {
			j.Quals, sel.WhereClause = andAll(moved), andAll(kept)
		}
	}
	// A scalar compared with one table's expression in WHERE may be read
	// as its level's value, its moves narrowed (narrow.go): when every
	// use of its level is such a comparison.
	spots := narrowSpots(sel)
	type use struct {
		f foundSublink
		d dependencyJoin
	}
	var uses []use
	narrowed := map[string]bool{} // by dependencyJoin.key
	for _, f := range found {
		c.sublinks[f.sl.Location] = true
		deps, err := c.dependency(f, outer)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if _, seen := narrowed[d.key]; !seen {
				narrowed[d.key] = true
			}
			narrowed[d.key] = narrowed[d.key] && spots[f.sl] != nil
			uses = append(uses, use{f: f, d: d})
		}
	}
	joined := map[string]*pg_query.JoinExpr{} // by dependencyJoin.key
	for _, u := range uses {
		f, d := u.f, u.d
		notExists := f.sl.SubLinkType == pg_query.SubLinkType_EXISTS_SUBLINK && !f.positive
		// An outer row the condition drops leaves no stored row whose
		// lineage shows the level row it matched: the join's matches are
		// mirrored (ADR 0010), as for any condition above an outer join
		// that reads its NULL-extended side — unless its moves are
		// narrowed, which find those rows by their values.
		mirrored := f.filters && !narrowed[d.key] && !(notExists && plant.Active(plant.ExistsMissesLastDelete))
		j, ok := joined[d.key]
		if !ok {
			// The same level on the same correlation is joined once.
			j = &pg_query.JoinExpr{Jointype: pg_query.JoinType_JOIN_LEFT, Larg: from, Rarg: d.level, Quals: d.on}
			joined[d.key] = j
			from = &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: j}}
			if narrowed[d.key] {
				c.narrowedDeps[j] = true
			}
		}
		if mirrored {
			c.filteringDeps[j] = true
		}
		if narrowed[d.key] {
			c.narrowAt(sel, f.sl, spots[f.sl], j)
		}
	}
	sel.FromClause = []*pg_query.Node{from}
	return nil
}

// sublinkPlaces refuses subqueries in GROUP BY: a group key read from
// another table. Those in HAVING and over an aggregate query's groups are
// read over the grouped rows (aggsplit.go) before this runs.
func (c *selectChecker) sublinkPlaces(sel *pg_query.SelectStmt) error {
	var errs []error
	for _, g := range sel.GroupClause {
		if hasSublinks(g) {
			errs = append(errs, c.errf(nodeLocation(g), "GROUP BY: a subquery in GROUP BY is not supported; compute it in a subquery in FROM and group by its column"))
		}
	}
	return joinRefusals(errs)
}

// sublinkOutsideAggregates reports whether an expression holds a subquery
// that is not inside an aggregate call's arguments.
func sublinkOutsideAggregates(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.FuncCall:
			if x.Over == nil && isAggregate(x) {
				return false
			}
		case *pg_query.SubLink:
			found = true
		}
		return !found
	})
	return found
}

// joinItems is a FROM list as one item: its items cross-joined.
func joinItems(items []*pg_query.Node) *pg_query.Node {
	out := items[0]
	for _, it := range items[1:] {
		out = &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: &pg_query.JoinExpr{
			Jointype: pg_query.JoinType_JOIN_INNER, Larg: out, Rarg: it}}}
	}
	return out
}

// fromNames are the names a FROM list's items are referred to by, in its
// own scope (not inside its derived tables).
func fromNames(items []*pg_query.Node) map[string]bool { return itemNames(items, false) }

// rangeVarNames are the names of the tables of a FROM list (not of its
// joins or derived tables).
func rangeVarNames(items []*pg_query.Node) map[string]bool { return itemNames(items, true) }

// itemNames are the names of a FROM list's items in its own scope: of
// its tables only, or of its joins and derived tables too.
func itemNames(items []*pg_query.Node, tablesOnly bool) map[string]bool {
	names := map[string]bool{}
	add := func(a *pg_query.Alias) {
		if a != nil && !tablesOnly {
			names[a.Aliasname] = true
		}
	}
	for _, it := range items {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.SubLink:
				return false
			case *pg_query.RangeVar:
				if x.Alias != nil {
					names[x.Alias.Aliasname] = true
				} else {
					names[x.Relname] = true
				}
			case *pg_query.RangeSubselect:
				add(x.Alias)
				return false
			case *pg_query.RangeFunction:
				add(x.Alias)
				return false
			case *pg_query.JoinExpr:
				add(x.Alias)
			}
			return true
		})
	}
	return names
}

// clausePart is a clause of a subquery, named for a sentence.
type clausePart struct {
	n    []*pg_query.Node
	name string
}

// outerPart is the name of the first of parts that refers to the outer
// query (outer, as seen from inner), or "".
func outerPart(parts []clausePart, outer, inner map[string]bool) string {
	for _, part := range parts {
		for _, n := range part.n {
			if outerRefs(n, outer, inner) {
				return part.name
			}
		}
	}
	return ""
}

// scopeNames are the names of the FROM items of sel and of every query
// inside it (derived tables, subqueries): what a reference inside sel may
// name without reaching out of it.
func scopeNames(sel *pg_query.SelectStmt) map[string]bool {
	names := map[string]bool{}
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		if s, ok := m.(*pg_query.SelectStmt); ok {
			for k := range fromNames(s.FromClause) {
				names[k] = true
			}
		}
		return true
	})
	return names
}

// outerRefs reports whether n references a table of the outer query
// (outer) that no scope inside the subquery (inner) names.
func outerRefs(n *pg_query.Node, outer, inner map[string]bool) bool {
	if n == nil {
		return false
	}
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) >= 2 {
			q := cr.Fields[len(cr.Fields)-2].GetString_().GetSval()
			if outer[q] && !inner[q] {
				found = true
			}
		}
		return !found
	})
	return found
}

// dependencyJoin is a dependency level as the outer query reads it: the
// level's placeholder table and the join condition; key is the level's
// query and the condition, whatever the level's alias, for joining the
// same one once.
type dependencyJoin struct {
	level, on *pg_query.Node
	key       string
}

// correlation is one equality between the subquery and the outer query:
// inner = outer.
type correlation struct {
	inner, outer *pg_query.Node
}

// dependency makes the dependency levels of one subquery (ADR 0030).
func (c *selectChecker) dependency(f foundSublink, outer map[string]bool) ([]dependencyJoin, error) {
	sl := f.sl
	what := fmt.Sprintf("%s: the subquery", f.clause)
	sub := sl.Subselect.GetSelectStmt()
	if sub == nil {
		return nil, c.errf(sl.Location, "%s is not a SELECT", what)
	}
	inner := scopeNames(sub)
	correlated := outerRefs(sl.Subselect, outer, inner)
	if !correlated {
		return c.uncorrelatedDependency(f, sub, what)
	}
	if readsSetOp(sub) {
		return nil, c.errf(sl.Location, "%s combines queries (UNION, INTERSECT or EXCEPT) and refers to the outer query; set operations in a correlated subquery arrive in a later version — move the correlation out: WHERE o.k IN (SELECT k FROM a UNION SELECT k FROM b)", what)
	}
	if part := outerPart([]clausePart{{sub.TargetList, "its select list"}, {sub.GroupClause, "its GROUP BY"}, {sub.FromClause, "its FROM"}, {sub.DistinctClause, "its DISTINCT"}}, outer, inner); part != "" {
		return nil, c.errf(sl.Location, "%s refers to the outer query in %s; a subquery may refer to the outer query in its WHERE only (an equality such as s.a = t.b, or any other condition)", what, part)
	}
	if outerRefs(sub.HavingClause, outer, inner) {
		return nil, c.errf(sl.Location, "%s refers to the outer query in its HAVING; move the condition into its WHERE", what)
	}
	if len(sub.GroupClause) > 0 || sub.HavingClause != nil || len(sub.DistinctClause) > 0 {
		return nil, c.errf(sl.Location, "%s groups its rows (GROUP BY, HAVING or DISTINCT) and refers to the outer query; a correlated subquery that groups arrives in a later version — join the grouped rows as a subquery in FROM", what)
	}
	lim, err := c.subqueryLimit(sl, sub, what)
	if err != nil {
		return nil, err
	}
	// The WHERE's conjuncts: uncorrelated ones filter the level's rows,
	// equalities with the outer query group it, others read columns its
	// fingerprint must hold.
	var keep []*pg_query.Node
	var corr []correlation
	var reads []*pg_query.Node
	for _, cj := range conjuncts(sub.WhereClause) {
		if !outerRefs(cj, outer, inner) {
			keep = append(keep, cj)
			continue
		}
		if hasSublinks(cj) {
			return nil, c.errf(sl.Location, "%s holds a subquery that refers to the query two levels out; refer to the nearest query only", what)
		}
		if ae := cj.GetAExpr(); ae != nil && isEqualsOp(ae.Name) && ae.Kind == pg_query.A_Expr_Kind_AEXPR_OP && ae.Lexpr != nil && ae.Rexpr != nil {
			l, r := outerRefs(ae.Lexpr, outer, inner), outerRefs(ae.Rexpr, outer, inner)
			lInner, rInner := innerOnly(ae.Lexpr, outer, inner), innerOnly(ae.Rexpr, outer, inner)
			switch {
			case !l && r && lInner:
				corr = append(corr, correlation{inner: ae.Lexpr, outer: ae.Rexpr})
				continue
			case l && !r && rInner:
				corr = append(corr, correlation{inner: ae.Rexpr, outer: ae.Lexpr})
				continue
			}
		}
		reads = append(reads, innerColumns(cj, outer, inner)...)
	}
	if lim != nil {
		// The first rows of an order (topksub.go).
		orderOuter := false
		for _, sb := range sub.SortClause {
			orderOuter = orderOuter || outerRefs(sb, outer, inner)
		}
		return c.limitedDependency(sl, sub, keep, corr, reads, orderOuter, lim, outer, inner, what)
	}
	aggregate := hasAggregate(sub)
	var fingerprint []*pg_query.Node // level outputs besides the groups
	var split bool                   // NOT IN and friends: a second level
	switch sl.SubLinkType {
	case pg_query.SubLinkType_EXISTS_SUBLINK:
		if aggregate {
			// EXISTS over an aggregate without GROUP BY is always true.
			reads = nil
		}
	case pg_query.SubLinkType_ANY_SUBLINK, pg_query.SubLinkType_ALL_SUBLINK:
		target := singleTarget(sub)
		if target == nil || aggregate {
			return nil, c.errf(sl.Location, "%s must select one column that is not an aggregate", what)
		}
		eq := isEqualsOp(sl.OperName) && sl.SubLinkType == pg_query.SubLinkType_ANY_SUBLINK
		ne := len(sl.OperName) == 1 && sl.OperName[0].GetString_().GetSval() == "<>" && sl.SubLinkType == pg_query.SubLinkType_ALL_SUBLINK
		switch {
		case eq && f.positive && len(reads) == 0:
			// x IN (…) where NULL and false filter alike: the group of x.
			corr = append(corr, correlation{inner: target, outer: sl.Testexpr})
		case (eq || ne) && len(reads) == 0:
			// NOT IN, <> ALL, IN read as a value: whether x is among the
			// values (a level keyed by them), and whether the group is
			// empty or holds a NULL (a second level).
			split = true
		default:
			reads = append(reads, target)
		}
	case pg_query.SubLinkType_EXPR_SUBLINK:
		target := singleTarget(sub)
		if target == nil {
			return nil, c.errf(sl.Location, "%s must select one column", what)
		}
		values := []*pg_query.Node{target}
		if text, err := deparseSelect(sub); err == nil && c.sharedValues[text] != nil {
			values = c.sharedValues[text] // a LATERAL aggregate's columns share one level
		}
		switch {
		case aggregate && len(reads) == 0 && !plant.Active(plant.StaleScalar):
			// Its value is the answer: the level keeps it.
			if len(values) == 1 {
				fingerprint = append(fingerprint, named(target, "v"))
				break
			}
			for i, v := range values {
				fingerprint = append(fingerprint, named(v, fmt.Sprintf("v%d", i+1)))
			}
		case aggregate && len(reads) == 0:
		case aggregate:
			// Over the rows its other conditions pick: the columns its
			// aggregates read, with theirs, decide it.
			for _, v := range values {
				reads = append(reads, innerColumns(v, outer, inner)...)
			}
		default:
			reads = append(reads, target)
		}
	default:
		// ARRAY (…): its values, in the order its ORDER BY reads.
		reads = append(reads, targetValues(sub)...)
		for _, sb := range sub.SortClause {
			if x := sb.GetSortBy(); x != nil {
				reads = append(reads, x.Node)
			}
		}
	}
	if len(reads) > 0 {
		fingerprint = append(fingerprint, rowsFingerprint(reads)...)
	}
	base := &pg_query.SelectStmt{FromClause: sub.FromClause, WhereClause: andAll(keep)}
	if split {
		target := singleTarget(sub)
		values := append(slices.Clone(corr), correlation{inner: target, outer: sl.Testexpr})
		first, err := c.dependencyLevel(base, values, nil, what)
		if err != nil {
			return nil, err
		}
		flags := []*pg_query.Node{named(mustParseExpr("bool_or(x IS NULL)", target), "has_null")}
		second, err := c.dependencyLevel(base, corr, flags, what)
		if err != nil {
			return nil, err
		}
		return []dependencyJoin{first, second}, nil
	}
	d, err := c.dependencyLevel(base, corr, fingerprint, what)
	if err != nil {
		return nil, err
	}
	return []dependencyJoin{d}, nil
}

// uncorrelatedDependency is the dependency of a subquery that does not
// refer to the outer query: one level over it as a derived table, with
// one row when its answer is the same for every outer row.
func (c *selectChecker) uncorrelatedDependency(f foundSublink, sub *pg_query.SelectStmt, what string) ([]dependencyJoin, error) {
	sl := f.sl
	lim, err := c.subqueryLimit(sl, sub, what)
	if err != nil {
		return nil, err
	}
	if lim != nil {
		// The first rows of an order, over all rows (topksub.go).
		return c.limitedDependency(sl, sub, conjuncts(sub.WhereClause), nil, nil, false, lim, nil, nil, what)
	}
	// Its columns are named c1, c2, … as the level reads them.
	alias := &pg_query.Alias{Aliasname: "sq"}
	var cols []*pg_query.Node
	for i := range outputNames(&pg_query.RangeSubselect{}, sub) {
		n := fmt.Sprintf("c%d", i+1)
		alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode(n))
		cols = append(cols, pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode("sq"), pg_query.MakeStrNode(n)}, -1))
	}
	sq := &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Subquery: proto.Clone(sl.Subselect).(*pg_query.Node), Alias: alias}}}
	base := &pg_query.SelectStmt{FromClause: []*pg_query.Node{sq}}
	switch sl.SubLinkType {
	case pg_query.SubLinkType_EXISTS_SUBLINK:
		d, err := c.dependencyLevel(base, nil, []*pg_query.Node{named(mustParseExpr("count(*) > 0", nil), "nonempty")}, what)
		return []dependencyJoin{d}, err
	case pg_query.SubLinkType_ANY_SUBLINK, pg_query.SubLinkType_ALL_SUBLINK:
		if len(cols) != 1 {
			return nil, c.errf(sl.Location, "%s must select one column", what)
		}
		eq := isEqualsOp(sl.OperName) && sl.SubLinkType == pg_query.SubLinkType_ANY_SUBLINK
		ne := len(sl.OperName) == 1 && sl.OperName[0].GetString_().GetSval() == "<>" && sl.SubLinkType == pg_query.SubLinkType_ALL_SUBLINK
		if !eq && !ne {
			d, err := c.dependencyLevel(base, nil, rowsFingerprint(cols), what)
			return []dependencyJoin{d}, err
		}
		first, err := c.dependencyLevel(base, []correlation{{inner: cols[0], outer: sl.Testexpr}}, nil, what)
		if err != nil || eq && f.positive {
			return []dependencyJoin{first}, err
		}
		second, err := c.dependencyLevel(base, nil, []*pg_query.Node{named(mustParseExpr("count(*) > 0", nil), "nonempty"),
			named(mustParseExpr("bool_or(x IS NULL)", cols[0]), "has_null")}, what)
		return []dependencyJoin{first, second}, err
	case pg_query.SubLinkType_EXPR_SUBLINK:
		if len(cols) != 1 {
			return nil, c.errf(sl.Location, "%s must select one column", what)
		}
		if hasAggregate(sub) && len(sub.GroupClause) == 0 && sub.HavingClause == nil && len(sub.DistinctClause) == 0 {
			// One row, whose value is the answer: the subquery itself (a
			// LIMIT here keeps its one row: subqueryLimit).
			sel := proto.Clone(sub).(*pg_query.SelectStmt)
			sel.SortClause, sel.LimitCount = nil, nil
			sel.TargetList[0].GetResTarget().Name = "v"
			if plant.Active(plant.StaleScalar) {
				// Planted: one row that never changes.
				sel.TargetList[0].GetResTarget().Val = mustParseExpr("count(*) >= 0", nil)
				sel.WhereClause = mustParseExpr("false", nil)
			}
			c.dependencies++
			d, err := c.joinLevel(sel, fmt.Sprintf("__dep%d", c.dependencies), nil, what)
			return []dependencyJoin{d}, err
		}
	}
	d, err := c.dependencyLevel(base, nil, rowsFingerprint(cols), what)
	return []dependencyJoin{d}, err
}

// dependencyLevel makes one dependency level over base (its FROM and
// WHERE): grouped by the inner side of corr (non-NULL: a NULL never
// equals), with the outputs out, joined to the outer query on corr's
// equalities (on true when there are none).
func (c *selectChecker) dependencyLevel(base *pg_query.SelectStmt, corr []correlation, out []*pg_query.Node, what string) (dependencyJoin, error) {
	sel := &pg_query.SelectStmt{FromClause: cloneNodes(base.FromClause)}
	var where []*pg_query.Node
	if base.WhereClause != nil {
		where = append(where, proto.Clone(base.WhereClause).(*pg_query.Node))
	}
	c.dependencies++
	alias := fmt.Sprintf("__dep%d", c.dependencies)
	var on []*pg_query.Node
	for i, k := range corr {
		name := fmt.Sprintf("g%d", i+1)
		g := proto.Clone(k.inner).(*pg_query.Node)
		sel.TargetList = append(sel.TargetList, named(g, name))
		sel.GroupClause = append(sel.GroupClause, proto.Clone(k.inner).(*pg_query.Node))
		where = append(where, &pg_query.Node{Node: &pg_query.Node_NullTest{NullTest: &pg_query.NullTest{
			Arg: proto.Clone(k.inner).(*pg_query.Node), Nulltesttype: pg_query.NullTestType_IS_NOT_NULL, Location: -1}}})
		on = append(on, &pg_query.Node{Node: &pg_query.Node_AExpr{AExpr: &pg_query.A_Expr{
			Kind: pg_query.A_Expr_Kind_AEXPR_OP, Name: []*pg_query.Node{pg_query.MakeStrNode("=")},
			Lexpr: pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(alias), pg_query.MakeStrNode(name)}, -1),
			Rexpr: proto.Clone(k.outer).(*pg_query.Node), Location: -1}}})
	}
	sel.TargetList = append(sel.TargetList, out...)
	if len(sel.TargetList) == 0 {
		// Neither a group nor a fingerprint: whether there are rows.
		sel.TargetList = append(sel.TargetList, named(mustParseExpr("count(*) > 0", nil), "nonempty"))
	}
	sel.WhereClause = andAll(where)
	return c.joinLevel(sel, alias, andAll(on), what)
}

// joinLevel makes sel an inner level under alias and returns it with the
// condition the outer query joins it on (nil: on true).
func (c *selectChecker) joinLevel(sel *pg_query.SelectStmt, alias string, on *pg_query.Node, what string) (dependencyJoin, error) {
	rs := &pg_query.RangeSubselect{Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}, Alias: &pg_query.Alias{Aliasname: alias}}
	level, err := c.level(rs, sel, alias, what)
	if err != nil {
		return dependencyJoin{}, err
	}
	c.levels[len(c.levels)-1].Dependency = true
	if on == nil {
		on = &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: true}}, Location: -1}}}
	}
	text, err := deparseSelect(sel)
	if err != nil {
		return dependencyJoin{}, c.errf(-1, "%s cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", what, err)
	}
	cond, err := deparseExpr(on)
	if err != nil {
		return dependencyJoin{}, c.errf(-1, "%s cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", what, err)
	}
	return dependencyJoin{level: level, on: on, key: text + " ON " + strings.ReplaceAll(cond, alias+".", ".")}, nil
}

// rowsFingerprint are the level outputs that change whenever the multiset
// of the rows of values exprs take over a group does: their count, and
// each value's array over the rows sorted by all of them (together the
// sorted rows). Exact for any answer those values decide, whatever the
// predicate; and immutable, unlike a row's text.
func rowsFingerprint(exprs []*pg_query.Node) []*pg_query.Node {
	var uniq []*pg_query.Node
	var texts []string
	for _, e := range exprs {
		text, err := deparseExpr(e)
		if err != nil || slices.Contains(texts, text) {
			continue
		}
		uniq, texts = append(uniq, e), append(texts, text)
	}
	order := strings.Join(texts, ", ")
	out := []*pg_query.Node{named(mustParseExpr("count(*)", nil), "n")}
	for i, e := range uniq {
		out = append(out, named(mustParseExpr("array_agg(x ORDER BY "+order+")", e), fmt.Sprintf("a%d", i+1)))
	}
	return out
}

// mustParseExpr parses an expression the engine writes; x, when set,
// stands for the identifier x in it.
func mustParseExpr(text string, x *pg_query.Node) *pg_query.Node {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil {
		panic(fmt.Sprintf("engine: parse %q: %v", text, err))
	}
	e := tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
	if x == nil {
		return e
	}
	return replaceNodes(e, func(n *pg_query.Node) *pg_query.Node {
		if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_().GetSval() == "x" {
			return proto.Clone(x).(*pg_query.Node)
		}
		return nil
	})
}

// positiveConst reports whether n is an integer constant above 0.
func positiveConst(n *pg_query.Node) bool {
	c := n.GetAConst()
	return c != nil && c.GetIval() != nil && c.GetIval().Ival > 0
}

// named is a select-list entry e AS name.
func named(e *pg_query.Node, name string) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{
		Name: name, Val: proto.Clone(e).(*pg_query.Node), Location: -1}}}
}

// conjuncts are the AND-ed parts of a condition.
func conjuncts(n *pg_query.Node) []*pg_query.Node {
	if n == nil {
		return nil
	}
	if be := n.GetBoolExpr(); be != nil && be.Boolop == pg_query.BoolExprType_AND_EXPR {
		var out []*pg_query.Node
		for _, a := range be.Args {
			out = append(out, conjuncts(a)...)
		}
		return out
	}
	return []*pg_query.Node{n}
}

// andAll is the conjunction of conds (nil for none).
func andAll(conds []*pg_query.Node) *pg_query.Node {
	var out *pg_query.Node
	for _, c := range conds {
		out = andOf(out, c)
	}
	return out
}

// innerOnly reports whether n reads no table of the outer query (it reads
// the subquery's tables, or none).
func innerOnly(n *pg_query.Node, outer, inner map[string]bool) bool {
	return !outerRefs(n, outer, inner)
}

// innerColumns are the references of n to the subquery's own tables.
func innerColumns(n *pg_query.Node, outer, inner map[string]bool) []*pg_query.Node {
	var out []*pg_query.Node
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) >= 2 {
			q := cr.Fields[len(cr.Fields)-2].GetString_().GetSval()
			if !(outer[q] && !inner[q]) && !hasStar(cr) {
				out = append(out, &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: proto.Clone(cr).(*pg_query.ColumnRef)}})
			}
		}
		return true
	})
	return out
}

// singleTarget is the one expression a subquery selects, or nil.
func singleTarget(sub *pg_query.SelectStmt) *pg_query.Node {
	if len(sub.TargetList) != 1 {
		return nil
	}
	rt := sub.TargetList[0].GetResTarget()
	if rt == nil || rt.Val == nil {
		return nil
	}
	if cr := rt.Val.GetColumnRef(); cr != nil && hasStar(cr) {
		return nil
	}
	return rt.Val
}

// targetValues are the expressions a subquery selects.
func targetValues(sub *pg_query.SelectStmt) []*pg_query.Node {
	var out []*pg_query.Node
	for _, t := range sub.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil {
			out = append(out, rt.Val)
		}
	}
	return out
}

// cloneNodes is a deep copy of ns.
func cloneNodes(ns []*pg_query.Node) []*pg_query.Node {
	out := make([]*pg_query.Node, len(ns))
	for i, n := range ns {
		out[i] = proto.Clone(n).(*pg_query.Node)
	}
	return out
}
