package engine

// groupingsets.go owns GROUPING SETS, ROLLUP and CUBE, and GROUPING()
// (ADR 0031): the GROUP BY clause expanded to its list of sets as
// PostgreSQL expands it (groupingSets), and the plan's form of it — a
// hidden group column __set holding each set's GROUPING() bitmask over all
// grouping expressions, each grouping expression a group column that is
// NULL where its set groups it out, each GROUPING() call a group column
// computed from __set — which every query that makes ledger rows crosses
// with the sets (setsJoin). The ledger holds one row per source row per
// set, keyed by the source key (or lineage) and __set; from there the
// aggregate steps treat (__set, groups…) as an ordinary group key.

import (
	"fmt"
	"sort"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// GroupingSets is a query's GROUP BY with grouping sets, expanded.
type GroupingSets struct {
	// Raw is how many of Query.GroupBy are grouping expressions; the
	// entries after them stand for the GROUPING() calls, Funcs.
	Raw int
	// Sets are the grouping sets, each the indexes (into GroupBy) of the
	// expressions it groups by, ascending.
	Sets [][]int
	// Funcs are the distinct GROUPING() calls of the select list and
	// HAVING, each the indexes of its arguments.
	Funcs [][]int
	// Clause is the GROUP BY clause as the kept query writes it: the
	// expanded sets.
	Clause string
}

// PlanGrouping is the plan's record of grouping sets (ADR 0031): Groups[0]
// is __set, Groups[1:Raw+1] the grouping expressions (NULL where grouped
// out), the rest the GROUPING() calls.
type PlanGrouping struct {
	// Masks are the sets' __set values: the GROUPING() bitmask of all
	// grouping expressions, bit Raw-1-i set where expression i is grouped
	// out.
	Masks []int64 `json:"masks"`
	// Exprs are the grouping expressions over the source, as written.
	Exprs []string `json:"exprs"`
}

// SetCol names the hidden group column of a grouping-sets plan.
const SetCol = "__set"

// setsRef is the alias of the VALUES list of the sets.
const setsRef = "__gs"

// groupingSetsUsed reports whether GROUP BY has a grouping construct
// (GROUPING SETS, ROLLUP, CUBE, ()) or DISTINCT, or the query calls
// GROUPING().
func groupingSetsUsed(sel *pg_query.SelectStmt) bool {
	if sel.GroupDistinct {
		return true
	}
	for _, g := range sel.GroupClause {
		if g.GetGroupingSet() != nil {
			return true
		}
	}
	return len(groupingFuncs(sel)) > 0
}

// groupingFuncs are the GROUPING() calls of the select list and HAVING.
func groupingFuncs(sel *pg_query.SelectStmt) []*pg_query.GroupingFunc {
	var out []*pg_query.GroupingFunc
	visit := func(n *pg_query.Node) {
		if n == nil {
			return
		}
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false
			}
			if gf, ok := m.(*pg_query.GroupingFunc); ok {
				out = append(out, gf)
			}
			return true
		})
	}
	for _, t := range sel.TargetList {
		visit(t)
	}
	visit(sel.HavingClause)
	return out
}

// maxGroupingExprs bounds the grouping expressions: GROUPING() takes at
// most 31 arguments, and __set is its value over all of them.
const maxGroupingExprs = 31

// groupingSets expands GROUP BY into its sets and records the GROUPING()
// calls, setting c.groupKeys and q.GroupBy (grouping expressions, then one
// entry per GROUPING() call) and q.Grouping.
func (c *selectChecker) groupingSets(sel *pg_query.SelectStmt, items []*selectItem, q *Query) error {
	var keys []string
	index := func(j int, n *pg_query.Node) (int, error) {
		key, deparsed, alias, err := c.groupItem(j, n, items)
		if err != nil {
			return 0, err
		}
		for i, k := range keys {
			if k == key {
				return i, nil
			}
		}
		keys = append(keys, key)
		q.GroupBy = append(q.GroupBy, deparsed)
		q.GroupByAlias = append(q.GroupByAlias, alias)
		return len(keys) - 1, nil
	}
	// expand gives the sets one element of GROUP BY stands for.
	var expand func(j int, n *pg_query.Node) ([][]int, error)
	// list is a sub-list (a, b) of a construct: one set of all of them.
	list := func(j int, n *pg_query.Node) ([]int, error) {
		var elems []*pg_query.Node
		switch {
		case n.GetRowExpr() != nil:
			elems = n.GetRowExpr().Args
		case n.GetGroupingSet() != nil && n.GetGroupingSet().Kind == pg_query.GroupingSetKind_GROUPING_SET_EMPTY:
		case n.GetGroupingSet() != nil && n.GetGroupingSet().Kind == pg_query.GroupingSetKind_GROUPING_SET_SIMPLE:
			elems = n.GetGroupingSet().Content
		default:
			elems = []*pg_query.Node{n}
		}
		var set []int
		for _, e := range elems {
			i, err := index(j, e)
			if err != nil {
				return nil, err
			}
			set = append(set, i)
		}
		return set, nil
	}
	expand = func(j int, n *pg_query.Node) ([][]int, error) {
		gs := n.GetGroupingSet()
		if gs == nil || gs.Kind == pg_query.GroupingSetKind_GROUPING_SET_SIMPLE || gs.Kind == pg_query.GroupingSetKind_GROUPING_SET_EMPTY {
			set, err := list(j, n)
			return [][]int{set}, err
		}
		var parts [][]int
		for _, e := range gs.Content {
			if gs.Kind == pg_query.GroupingSetKind_GROUPING_SET_SETS {
				sub, err := expand(j, e)
				if err != nil {
					return nil, err
				}
				parts = append(parts, sub...)
				continue
			}
			set, err := list(j, e)
			if err != nil {
				return nil, err
			}
			parts = append(parts, set)
		}
		switch gs.Kind {
		case pg_query.GroupingSetKind_GROUPING_SET_ROLLUP:
			// ROLLUP (a, b, c): (a, b, c), (a, b), (a), ().
			var out [][]int
			for k := len(parts); k >= 0; k-- {
				var set []int
				for _, p := range parts[:k] {
					set = append(set, p...)
				}
				out = append(out, set)
			}
			return out, nil
		case pg_query.GroupingSetKind_GROUPING_SET_CUBE:
			if len(parts) > 12 {
				return nil, c.errf(gs.Location, "GROUP BY item %d: CUBE of %d elements makes %d grouping sets; a transform keeps a ledger row per source row per set, so CUBE takes at most 12 elements — group by fewer, or define one transform per part", j+1, len(parts), 1<<len(parts))
			}
			// CUBE (a, b): every subset, in PostgreSQL's order.
			var out [][]int
			for m := (1 << len(parts)) - 1; m >= 0; m-- {
				var set []int
				for k, p := range parts {
					if m&(1<<(len(parts)-1-k)) != 0 {
						set = append(set, p...)
					}
				}
				out = append(out, set)
			}
			return out, nil
		}
		return parts, nil // GROUPING SETS: each element's sets
	}
	sets := [][]int{{}}
	for j, g := range sel.GroupClause {
		sub, err := expand(j, g)
		if err != nil {
			return err
		}
		// GROUP BY a, ROLLUP (b): every combination of one set of each.
		var next [][]int
		for _, s := range sets {
			for _, t := range sub {
				next = append(next, append(append([]int{}, s...), t...))
			}
		}
		sets = next
	}
	seen := map[string]int{}
	var kept [][]int
	for k, s := range sets {
		s = distinctInts(s)
		id := fmt.Sprint(s)
		if first, dup := seen[id]; dup {
			if sel.GroupDistinct {
				continue
			}
			return c.errf(-1, "GROUP BY: grouping sets %d and %d are the same set (%s), so PostgreSQL returns each of its groups twice, which a target keyed by its groups cannot hold; write GROUP BY DISTINCT to keep each set once, or remove the repeated set", first+1, k+1, setText(q.GroupBy, s))
		}
		seen[id] = k
		kept = append(kept, s)
	}
	if len(keys) > maxGroupingExprs {
		return c.errf(-1, "GROUP BY: %d grouping expressions; with grouping sets a transform takes at most %d (GROUPING() of all of them keys the target)", len(keys), maxGroupingExprs)
	}
	raw := len(keys)
	g := &GroupingSets{Raw: raw, Sets: kept}
	var clause []string
	for _, s := range kept {
		clause = append(clause, "("+setText(q.GroupBy, s)+")")
	}
	g.Clause = "GROUPING SETS (" + strings.Join(clause, ", ") + ")"
	// GROUPING() calls: group columns of their own, computed from __set;
	// a select item or HAVING names them by their comparison key.
	for _, gf := range groupingFuncs(sel) {
		n := &pg_query.Node{Node: &pg_query.Node_GroupingFunc{GroupingFunc: gf}}
		key, err := c.compareKey(n, "GROUPING()")
		if err != nil {
			return err
		}
		if contains(keys, key) {
			continue
		}
		var args []int
		for _, a := range gf.Args {
			ak, err := c.compareKey(a, "GROUPING()")
			if err != nil {
				return err
			}
			found := -1
			for i, k := range keys[:raw] {
				if k == ak {
					found = i
				}
			}
			if found < 0 {
				return c.errf(gf.Location, "%s: arguments to GROUPING must be grouping expressions of the query (PostgreSQL refuses it too); name GROUP BY expressions", key)
			}
			args = append(args, found)
		}
		keys = append(keys, key)
		g.Funcs = append(g.Funcs, args)
		q.GroupBy = append(q.GroupBy, key)
		q.GroupByAlias = append(q.GroupByAlias, "")
	}
	c.groupKeys = keys
	if raw == 0 {
		// GROUP BY () alone: the one row an aggregate without GROUP BY
		// has.
		q.GroupBy, q.GroupByAlias = nil, nil
		return nil
	}
	if len(kept) == 1 && len(kept[0]) == raw && len(g.Funcs) == 0 {
		return nil // one set of every expression: a plain GROUP BY
	}
	q.Grouping = g
	return nil
}

// distinctInts sorts s and drops repeats: GROUP BY a, ROLLUP (a) groups
// by a once.
func distinctInts(s []int) []int {
	out := append([]int{}, s...)
	sort.Ints(out)
	var d []int
	for i, v := range out {
		if i == 0 || v != out[i-1] {
			d = append(d, v)
		}
	}
	return d
}

// setText is a grouping set's expressions, comma-separated.
func setText(exprs []string, set []int) string {
	var out []string
	for _, i := range set {
		out = append(out, exprs[i])
	}
	return strings.Join(out, ", ")
}

// mask is a set's __set value: bit raw-1-i set where expression i is
// grouped out, as GROUPING() of all grouping expressions gives it.
func (g *GroupingSets) mask(set []int) int64 {
	m := int64(1)<<g.Raw - 1
	for _, i := range set {
		m &^= 1 << (g.Raw - 1 - i)
	}
	return m
}

// groupingPlan turns the plan's groups (one per Query.GroupBy entry) into
// the grouping-sets form: __set first, each grouping expression NULL
// where its set groups it out, each GROUPING() call computed from __set.
func (p *Plan) groupingPlan(g *GroupingSets) {
	pg := &PlanGrouping{}
	for _, s := range g.Sets {
		pg.Masks = append(pg.Masks, g.mask(s))
	}
	set := setsRef + "." + ident(SetCol)
	groups := []Col{{Name: SetCol, Type: "integer", Expr: set, NotNull: true}}
	for i, c := range p.Groups[:g.Raw] {
		pg.Exprs = append(pg.Exprs, c.Expr)
		bit := int64(1) << (g.Raw - 1 - i)
		always := true
		for _, m := range pg.Masks {
			always = always && m&bit == 0
		}
		if !always {
			c.Expr = fmt.Sprintf("CASE WHEN %s & %d = 0 THEN (%s) END", set, bit, c.Expr)
			c.NotNull = false
		}
		groups = append(groups, c)
	}
	for f, args := range g.Funcs {
		c := p.Groups[g.Raw+f]
		var bits []string
		for k, a := range args {
			bits = append(bits, fmt.Sprintf("((%s >> %d) & 1) << %d", set, g.Raw-1-a, len(args)-1-k))
		}
		c.Expr, c.Type, c.NotNull = strings.Join(bits, " | "), "integer", true
		groups = append(groups, c)
	}
	p.Groups = groups
	p.Grouping = pg
}

// setsJoin is the VALUES list of the sets joined to a FROM clause, so that
// each source row makes one ledger row per set ("" without grouping sets).
func (p *Plan) setsJoin() string {
	if p.Grouping == nil {
		return ""
	}
	var rows []string
	for _, m := range p.Grouping.Masks {
		rows = append(rows, fmt.Sprintf("(%d)", m))
	}
	return " CROSS JOIN (VALUES " + strings.Join(rows, ", ") + ") AS " + setsRef + "(" + ident(SetCol) + ")"
}

// emptySet is the __set value of the empty grouping set, whose one row
// always exists (PostgreSQL returns it over no rows too); ok is false when
// there is none.
func (p *Plan) emptySet() (int64, bool) {
	if p.Grouping == nil {
		return 0, false
	}
	all := int64(1)<<len(p.Grouping.Exprs) - 1
	for _, m := range p.Grouping.Masks {
		if m == all {
			return m, true
		}
	}
	return 0, false
}

// keepEmptySet is the condition " AND col is not the empty set's" that
// keeps the empty set's row when its row count reaches zero ("" when the
// plan has no empty set).
func (p *Plan) keepEmptySet(col string) string {
	if m, ok := p.emptySet(); ok {
		return fmt.Sprintf(" AND %s IS DISTINCT FROM %d", col, m)
	}
	return ""
}

// checkExpr is a group column's expression in the defining query, for
// the self-check: __set is GROUPING() of all grouping expressions, a
// grouping expression itself (NULL where grouped out, as the query shows
// it).
func (p *Plan) checkGroupExpr(i int) string {
	if p.Grouping == nil {
		return p.Groups[i].Expr
	}
	switch {
	case i == 0:
		return "GROUPING(" + strings.Join(p.Grouping.Exprs, ", ") + ")"
	case i <= len(p.Grouping.Exprs):
		return p.Grouping.Exprs[i-1]
	}
	return p.Groups[i].Expr // a GROUPING() call: always selected
}
