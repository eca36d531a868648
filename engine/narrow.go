package engine

// narrow.go owns scalar moves narrowed to the rows they can flip (ADR 0038
// §4). An uncorrelated aggregate scalar subquery has one dependency level
// row (sublink.go); when its value moves, every outer row would be
// re-derived. But where the query compares it, in a conjunct of WHERE,
// with an expression over one table —
//
//	WHERE o.amount > (SELECT avg(amount) FROM orders)
//	WHERE o.placed BETWEEN (SELECT min(day) FROM open_days) AND '2026-12-31'
//
// — a move from a to b flips only the rows whose expression lies between a
// and b. Such a scalar is read as its level's value (__dep1.v), so the
// owner's rows are a function of its sources and the level as a chain's
// are, and the owner keeps, in a table of its own (applied), the level's
// row as it last applied with it. Every batch first compares that row
// with the level's row in its snapshot:
//
//   - the same row, the value moved between two non-NULL values: the keys
//     of the rows whose expression lies between them (an index on the
//     expression finds them) join the scope, and the level's keys leave it;
//   - the row changed identity, appeared, went, or the value moved to or
//     from NULL: every row may flip, and the level's keys (old and new)
//     stay in the scope, which re-derives every row as before;
//   - the same row and value: the level's keys leave the scope;
//
// and then records the level's row as applied. The rows a batch re-derives
// read the level in the same snapshot, and a row outside the range
// compares the same way with the old and the new value, so after every
// batch each stored row is the query's over its sources and the applied
// value. A level's change always reaches the owner as a changed key, so
// the owner's last batch applies its last value.

import (
	"context"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/plant"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// narrowValue is the value column of a one-row scalar's dependency level.
const narrowValue = "v"

// NarrowSpec is a WHERE comparison of an expression with a bound that
// reads an uncorrelated one-row scalar, the scalar read as the value of
// its dependency level Dep (an alias of the query): Expr is the
// expression, over the table Ref; Bound the bound, with narrowBound
// standing for the scalar's value.
type NarrowSpec struct {
	Dep, Ref, Expr, Bound string
}

// PlanNarrow is a narrowed scalar: its dependency level Sources[Dep] (one
// row, value column v of type ValueType), the table Applied that holds the
// level's row as the owner last applied with it (its key __k<i>, and v),
// and the comparisons whose ranges a move re-derives.
type PlanNarrow struct {
	Dep       int           `json:"dep"`
	Applied   Rel           `json:"applied"`
	ValueType string        `json:"value_type"`
	Ranges    []NarrowRange `json:"ranges"`
}

// NarrowRange is an expression compared with a bound over the scalar:
// Expr over Sources[Source], Bound with narrowBound for the value.
// IntBounds: the expression is an integer and the bound is not, so the
// range's ends are rounded outward to integers, which an index on the
// expression compares without a cast.
type NarrowRange struct {
	Source    int    `json:"source"`
	Expr      string `json:"expr"`
	Bound     string `json:"bound"`
	IntBounds bool   `json:"int_bounds,omitempty"`
}

// narrowBound stands for the scalar's value in a NarrowSpec's Bound.
const narrowBound = "__narrow.v"

// bound is r's bound over the value column of the table alias t.
func (r NarrowRange) bound(t string) string {
	return "(" + strings.ReplaceAll(r.Bound, narrowBound, t+"."+narrowValue) + ")"
}

// narrowSpot is a narrowable scalar in a WHERE conjunct: the table and the
// expression its bound is compared with, and the bound's text.
type narrowSpot struct {
	ref, expr, bound string
}

// narrowSpots finds the uncorrelated one-row scalars that a conjunct of
// sel's WHERE compares (<, <=, >, >=, =, <>, BETWEEN), alone or in an
// expression of constants (a bound), with an expression over one FROM
// table.
func narrowSpots(sel *pg_query.SelectStmt) map[*pg_query.SubLink]*narrowSpot {
	if plant.Active(plant.StaleScalar) {
		return nil // planted: the scalar's level never changes
	}
	tables := rangeVarNames(sel.FromClause)
	outer := fromNames(sel.FromClause)
	spots := map[*pg_query.SubLink]*narrowSpot{}
	add := func(g, e *pg_query.Node) {
		sl, bound := scalarBound(g, outer)
		if sl == nil {
			return
		}
		if ref, expr, ok := oneTableExpr(e, tables); ok {
			spots[sl] = &narrowSpot{ref: ref, expr: expr, bound: bound}
		}
	}
	for _, cj := range conjuncts(sel.WhereClause) {
		ae := cj.GetAExpr()
		if ae == nil || ae.Lexpr == nil || ae.Rexpr == nil {
			continue
		}
		switch ae.Kind {
		case pg_query.A_Expr_Kind_AEXPR_OP:
			if isComparison(ae.Name) {
				add(ae.Rexpr, ae.Lexpr)
				add(ae.Lexpr, ae.Rexpr)
			}
		case pg_query.A_Expr_Kind_AEXPR_BETWEEN, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN,
			pg_query.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
			for _, b := range ae.Rexpr.GetList().GetItems() {
				add(b, ae.Lexpr)
			}
		}
	}
	return spots
}

// scalarBound is the one-row scalar a bound g reads, when g reads it once
// and otherwise only constants, and g's text with narrowBound for it.
func scalarBound(g *pg_query.Node, outer map[string]bool) (*pg_query.SubLink, string) {
	var sl *pg_query.SubLink
	ok := true
	walk(g.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SubLink:
			ok = ok && sl == nil && oneRowScalar(x, outer)
			sl = x
			return false
		case *pg_query.ColumnRef:
			ok = false
		case *pg_query.FuncCall:
			ok = ok && x.Over == nil && !isAggregate(x)
		}
		return ok
	})
	if !ok || sl == nil {
		return nil, ""
	}
	marked := replaceNodes(proto.Clone(g).(*pg_query.Node), func(n *pg_query.Node) *pg_query.Node {
		if n.GetSubLink() != nil {
			return columnRef("__narrow", narrowValue)
		}
		return nil
	})
	text, err := deparseExpr(marked)
	if err != nil {
		return nil, ""
	}
	return sl, text
}

// isComparison reports whether an operator name is a comparison whose
// result, for a row, changes only when the value crosses the row's.
func isComparison(names []*pg_query.Node) bool {
	if len(names) != 1 {
		return false
	}
	switch names[0].GetString_().GetSval() {
	case "<", "<=", ">", ">=", "=", "<>", "!=":
		return true
	}
	return false
}

// oneRowScalar reports whether sl is a scalar subquery that reads nothing
// of the outer query and aggregates without grouping: one row, whose
// value is its dependency level's v (uncorrelatedDependency).
func oneRowScalar(sl *pg_query.SubLink, outer map[string]bool) bool {
	sub := sl.Subselect.GetSelectStmt()
	return sl.SubLinkType == pg_query.SubLinkType_EXPR_SUBLINK && sub != nil && !isSetOp(sub) && singleTarget(sub) != nil &&
		hasAggregate(sub) && len(sub.GroupClause) == 0 && sub.HavingClause == nil && len(sub.DistinctClause) == 0 &&
		sub.LimitOffset == nil && (sub.LimitCount == nil || positiveConst(sub.LimitCount)) &&
		!outerRefs(sl.Subselect, outer, scopeNames(sub))
}

// oneTableExpr reports whether e reads columns of one table of tables
// only, through its name, and no subquery, aggregate or window: its
// table's name and its text.
func oneTableExpr(e *pg_query.Node, tables map[string]bool) (ref, text string, ok bool) {
	ok = true
	walk(e.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SubLink:
			ok = false
		case *pg_query.FuncCall:
			ok = ok && x.Over == nil && !isAggregate(x)
		case *pg_query.ColumnRef:
			q := ""
			if len(x.Fields) == 2 {
				q = x.Fields[0].GetString_().GetSval()
			}
			if q == "" || !tables[q] || ref != "" && ref != q || hasStar(x) {
				ok = false
			}
			ref = q
		}
		return ok
	})
	if !ok || ref == "" {
		return "", "", false
	}
	text, err := deparseExpr(e)
	return ref, text, err == nil
}

// narrowAt reads the scalar sl of sel's WHERE as the value of the
// dependency level that join j reads, and records its comparison.
func (c *selectChecker) narrowAt(sel *pg_query.SelectStmt, sl *pg_query.SubLink, spot *narrowSpot, j *pg_query.JoinExpr) {
	alias := j.Rarg.GetRangeVar().GetAlias().GetAliasname()
	sel.WhereClause = replaceNodes(sel.WhereClause, func(n *pg_query.Node) *pg_query.Node {
		if n.GetSubLink() == sl {
			return columnRef(alias, narrowValue)
		}
		return nil
	})
	c.narrow = append(c.narrow, NarrowSpec{Dep: alias, Ref: spot.ref, Expr: spot.expr, Bound: spot.bound})
}

// narrowedAlias reports whether ref names a narrowed scalar's level.
func (c *selectChecker) narrowedAlias(ref string) bool {
	for _, n := range c.narrow {
		if n.Dep == ref {
			return true
		}
	}
	return false
}

// planNarrow plans the query's narrowed scalars (q.Narrow) over the
// plan's resolved sources.
func (p *Plan) planNarrow(ctx context.Context, db DB, instanceSchema, name string, q *Query) error {
	for _, n := range q.Narrow {
		d, i := p.sourceByRef(n.Dep), p.sourceByRef(n.Ref)
		if d < 0 || i < 0 {
			return terr.New(terr.Internal, "transform %q: the narrowed comparison %s reads no source of the plan", name, n.Expr)
		}
		r := NarrowRange{Source: i, Expr: n.Expr, Bound: n.Bound}
		types, err := describeStored(ctx, db, "SELECT "+n.Expr+", "+r.bound(ident(n.Dep))+", "+ident(n.Dep)+"."+narrowValue+" FROM "+p.FromSQL())
		if err != nil {
			return queryError(name, err)
		}
		k := -1
		for j := range p.Narrow {
			if p.Narrow[j].Dep == d {
				k = j
			}
		}
		if k < 0 {
			k = len(p.Narrow)
			p.Narrow = append(p.Narrow, PlanNarrow{Dep: d, Applied: Rel{Schema: instanceSchema, Name: fmt.Sprintf("applied_%d", k)}, ValueType: types[2].name})
		}
		r.IntBounds = integerType(types[0].name) && !integerType(types[1].name) && numberType(types[1].name)
		p.Narrow[k].Ranges = append(p.Narrow[k].Ranges, r)
	}
	return nil
}

// sourceByRef is the index of the source FROM names ref, or -1.
func (p *Plan) sourceByRef(ref string) int {
	for i, src := range p.Sources {
		if src.Ref == ref {
			return i
		}
	}
	return -1
}

// integerType and numberType classify a type's name as format_type gives
// it.
func integerType(t string) bool { return t == "smallint" || t == "integer" || t == "bigint" }
func numberType(t string) bool {
	return strings.HasPrefix(t, "numeric") || t == "real" || t == "double precision"
}

// appliedDDL creates the table of each narrowed scalar holding its level's
// row as last applied: empty until the first batch.
func (p *Plan) appliedDDL(id int64) []string {
	var ddl []string
	for k := range p.Narrow {
		n := &p.Narrow[k]
		n.Applied.Name = fmt.Sprintf("applied_%d_%d", id, k)
		var cols []string
		for j, key := range p.Sources[n.Dep].Key {
			cols = append(cols, fmt.Sprintf("__k%d %s", j, key.Type))
		}
		cols = append(cols, narrowValue+" "+n.ValueType)
		ddl = append(ddl, "CREATE TABLE "+n.Applied.Ident()+" ("+strings.Join(cols, ", ")+")")
	}
	return ddl
}

// narrowSteps are the statements each batch runs first for the plan's
// narrowed scalars (the file comment), in order: the level's keys of a
// move that may flip every row, the keys of the rows in each range, the
// level's keys out of the scope otherwise, the applied row recorded, and
// the key tables counted again.
func narrowSteps(p *Plan) []Step {
	var steps []Step
	analyze := map[int]bool{}
	for _, n := range p.Narrow {
		dep := p.Sources[n.Dep]
		A, L := n.Applied.Ident(), dep.Ident()
		var ak, lk, kcols, eq, cur []string
		for j, key := range dep.Key {
			ak = append(ak, fmt.Sprintf("__a.__k%d", j))
			lk = append(lk, "__l."+ident(key.Name))
			kcols = append(kcols, fmt.Sprintf("__k%d", j))
			eq = append(eq, fmt.Sprintf("__y.__k%d = __x.__c%d", j, j))
			cur = append(cur, fmt.Sprintf("__c%d", j))
		}
		same := "ROW(" + strings.Join(ak, ", ") + ") IS NOT DISTINCT FROM ROW(" + strings.Join(lk, ", ") + ")"
		// Every row may flip when the level's row changed identity, or a
		// bound moved to or from NULL.
		full := "NOT " + same
		for _, r := range n.Ranges {
			was, now := r.bound("__a"), r.bound("__l")
			full += " OR (" + was + " IS DISTINCT FROM " + now + " AND (" + was + " IS NULL OR " + now + " IS NULL))"
		}
		full = "(" + full + ")"
		pair := A + " __a LEFT JOIN " + L + " __l ON true"
		steps = append(steps,
			Step{Role: RoleNarrow, Scope: 1, SQL: "INSERT INTO " + scopeKeysTable(n.Dep) + " (" + strings.Join(kcols, ", ") + ") SELECT DISTINCT " +
				strings.Join(prefixed("__x.", cur), ", ") + " FROM (SELECT " + strings.Join(ak, ", ") + " FROM " + pair + " WHERE " + full +
				" UNION ALL SELECT " + strings.Join(lk, ", ") + " FROM " + pair + " WHERE " + full + ") __x(" + strings.Join(cur, ", ") + ")" +
				" WHERE __x.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM " + scopeKeysTable(n.Dep) + " __y WHERE " + strings.Join(eq, " AND ") + ")"})
		for _, r := range n.Ranges {
			was, now := r.bound("__a"), r.bound("__l")
			lo, hi := "least("+was+", "+now+")", "greatest("+was+", "+now+")"
			if r.IntBounds {
				lo, hi = "floor("+lo+")::bigint", "ceil("+hi+")::bigint"
			}
			var keq []string
			for j, ref := range sourceKeyRefs(p, r.Source) {
				keq = append(keq, fmt.Sprintf("__y.__k%d = %s", j, ref))
			}
			steps = append(steps, Step{Role: RoleNarrow, Scope: 1, SQL: "INSERT INTO " + scopeKeysTable(r.Source) + " SELECT DISTINCT " +
				strings.Join(sourceKeyRefs(p, r.Source), ", ") + " FROM " + p.Sources[r.Source].From + ", " + A + " __a, " + L + " __l WHERE " + same +
				" AND " + was + " <> " + now + " AND " + r.Expr + " BETWEEN " + lo + " AND " + hi +
				" AND NOT EXISTS (SELECT 1 FROM " + scopeKeysTable(r.Source) + " __y WHERE " + strings.Join(keq, " AND ") + ")"})
			analyze[r.Source] = true
		}
		steps = append(steps,
			Step{Role: RoleNarrow, Scope: -1, SQL: "DELETE FROM " + scopeKeysTable(n.Dep) + " WHERE NOT EXISTS (SELECT 1 FROM " + pair + " WHERE " + full + ")"},
			Step{Role: RoleNarrow, SQL: "WITH __cur (" + strings.Join(append(kcols, "v"), ", ") + ") AS (SELECT " + strings.Join(lk, ", ") + ", __l.v FROM (SELECT) __one LEFT JOIN " + L + " __l ON true)," +
				" __gone AS (DELETE FROM " + A + " __a WHERE NOT EXISTS (SELECT 1 FROM __cur WHERE ROW(__cur.*) IS NOT DISTINCT FROM ROW(__a.*)))" +
				" INSERT INTO " + A + " SELECT * FROM __cur WHERE NOT EXISTS (SELECT 1 FROM " + A + " __a WHERE ROW(__cur.*) IS NOT DISTINCT FROM ROW(__a.*))"})
		analyze[n.Dep] = true
	}
	for i := range p.Sources {
		if analyze[i] {
			steps = append(steps, Step{Role: RoleNarrow, SQL: "ANALYZE " + scopeKeysTable(i)})
		}
	}
	return steps
}
