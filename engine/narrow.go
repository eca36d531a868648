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
// and then records the level's row as applied — all in one statement, so
// in one snapshot (the apply runs READ COMMITTED: each statement has its
// own). The batch's later statements read the applied row in the level's
// place (readingApplied), so the rows a batch re-derives read the value it
// recorded, even when the level moved meanwhile; and a row outside the
// range compares the same way with the old and the new value. So after
// every batch each stored row is the query's over its sources and the
// applied value. A level's change always reaches the owner as a changed
// key, so the owner's last batch applies its last value.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
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
	// Uncast is what Expr casts to numeric or double precision
	// (o.qty::numeric > (SELECT avg(…) …)), or "": when it is an integer
	// the cast keeps exactly, the range reads it, which an index on the
	// column serves.
	Uncast string
}

// PlanNarrow is a narrowed scalar: its dependency level Sources[Dep] (one
// row, value column v of type ValueType), the table Applied that holds the
// level's row as the owner last applied with it (its key columns and v,
// named as the level's), and the comparisons whose ranges a move
// re-derives.
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

// bound is r's bound over the column col of the table alias t.
func (r NarrowRange) bound(t, col string) string {
	return "(" + strings.ReplaceAll(r.Bound, narrowBound, t+"."+col) + ")"
}

// narrowSpot is a narrowable scalar in a WHERE conjunct: the table and the
// expression its bound is compared with, and the bound's text.
type narrowSpot struct {
	ref, expr, bound, uncast string
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
			spots[sl] = &narrowSpot{ref: ref, expr: expr, bound: bound, uncast: numberCastArg(e)}
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

// numberCastArg is the text of what e casts to numeric or double
// precision, or "".
func numberCastArg(e *pg_query.Node) string {
	tc := e.GetTypeCast()
	if tc == nil || tc.TypeName == nil || len(tc.TypeName.Names) == 0 {
		return ""
	}
	switch tc.TypeName.Names[len(tc.TypeName.Names)-1].GetString_().GetSval() {
	case "numeric", "float8":
		if text, err := deparseExpr(tc.Arg); err == nil {
			return text
		}
	}
	return ""
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
	c.narrow = append(c.narrow, NarrowSpec{Dep: alias, Ref: spot.ref, Expr: spot.expr, Bound: spot.bound, Uncast: spot.uncast})
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
		uncast := n.Uncast
		if uncast == "" {
			uncast = n.Expr
		}
		types, err := describeStored(ctx, db, "SELECT "+n.Expr+", "+r.bound(ident(n.Dep), narrowValue)+", "+ident(n.Dep)+"."+narrowValue+", "+uncast+" FROM "+p.FromSQL())
		if err != nil {
			return queryError(name, err)
		}
		if exactCast(types[3].name, types[0].name) {
			// An integer the cast keeps exactly: the integers between the
			// bounds rounded outward are the rows in range.
			r.Expr, types[0] = uncast, types[3]
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

// exactCast reports whether every integer of type from keeps its value
// cast to type to: numeric always, double precision below 2^53 (bigint
// may not).
func exactCast(from, to string) bool {
	return integerType(from) && (strings.HasPrefix(to, "numeric") || to == "double precision" && from != "bigint")
}

// integerType and numberType classify a type's name as format_type gives
// it.
func integerType(t string) bool { return t == "smallint" || t == "integer" || t == "bigint" }
func numberType(t string) bool {
	return strings.HasPrefix(t, "numeric") || t == "real" || t == "double precision"
}

// appliedDDL creates the table of each narrowed scalar holding its level's
// row as last applied — its key columns and v, named as the level's, so
// the query reads it in the level's place — empty until the first batch.
func (p *Plan) appliedDDL(id int64) []string {
	var ddl []string
	for k := range p.Narrow {
		n := &p.Narrow[k]
		n.Applied.Name = fmt.Sprintf("applied_%d_%d", id, k)
		var cols []string
		for _, key := range p.Sources[n.Dep].Key {
			cols = append(cols, ident(key.Name)+" "+key.Type)
		}
		cols = append(cols, narrowValue+" "+n.ValueType)
		ddl = append(ddl, "CREATE TABLE "+n.Applied.Ident()+" ("+strings.Join(cols, ", ")+")")
	}
	return ddl
}

// readingApplied is the plan as its batches run it: its FROM (and the
// inner joins its mirrors keep) read each narrowed scalar's applied row in
// place of its level. The apply runs READ COMMITTED, each statement in a
// snapshot of its own, so a level the batch read twice could hold two
// values; the applied row is the one the batch's narrow step recorded,
// which every later statement reads.
func (p *Plan) readingApplied() *Plan {
	if len(p.Narrow) == 0 {
		return p
	}
	out := *p
	out.Outer = slices.Clone(p.Outer)
	for _, n := range p.Narrow {
		// The FROM is deparsed: the level is named there as the deparser
		// names a schema-qualified table, followed by its alias.
		dep := p.Sources[n.Dep]
		level := regexp.MustCompile(`(^|[\s(])` + regexp.QuoteMeta(deparsedTable(dep.Schema, dep.Name)) + `(\s)`)
		applied := "${1}" + strings.ReplaceAll(deparsedTable(n.Applied.Schema, n.Applied.Name), "$", "$$") + "${2}"
		out.From = level.ReplaceAllString(out.From, applied)
		for k := range out.Outer {
			out.Outer[k].Inner = level.ReplaceAllString(out.Outer[k].Inner, applied)
		}
	}
	return &out
}

// deparsedTable is the table schema.name as the deparser writes it in a
// FROM clause.
func deparsedTable(schema, name string) string {
	return deparsedItem(&pg_query.Node{Node: &pg_query.Node_RangeVar{RangeVar: &pg_query.RangeVar{
		Schemaname: schema, Relname: name, Inh: true, Relpersistence: "p", Location: -1}}})
}

// narrowSteps are the statements each batch runs first: one per narrowed
// scalar (the file comment), which reads the level once, in one snapshot
// — its applied row and the level's row side by side (__p) — and
//
//   - when a move may flip every row (the level's row changed identity,
//     appeared or went, or a bound moved to or from NULL): puts the
//     level's keys, old and new, into its scope;
//   - else: puts the keys of the rows in each range into their table's
//     scope, and takes the level's keys out of its own;
//   - records the level's row as applied (when it differs);
//
// and returns the keys it added to the scope, less those it removed. The
// key tables it wrote are then counted again for the re-derive's plan.
func narrowSteps(p *Plan) []Step {
	var steps []Step
	analyze := map[int]bool{}
	for _, n := range p.Narrow {
		dep := p.Sources[n.Dep]
		A, L := n.Applied.Ident(), dep.Ident()
		var keys, ak, lk, cur, eq []string
		for j, key := range dep.Key {
			keys = append(keys, ident(key.Name))
			ak = append(ak, fmt.Sprintf("__a%d", j))
			lk = append(lk, fmt.Sprintf("__l%d", j))
			cur = append(cur, fmt.Sprintf("__c%d", j))
			eq = append(eq, fmt.Sprintf("__y.__k%d = __x.__c%d", j, j))
		}
		// No applied row before the first batch: nothing is stored yet,
		// so nothing can flip.
		pair := "SELECT " + strings.Join(prefixed("__a.", keys), ", ") + ", __a." + narrowValue + ", " + strings.Join(prefixed("__l.", keys), ", ") +
			", __l." + narrowValue + " FROM " + A + " __a LEFT JOIN " + L + " __l ON true"
		cols := slices.Concat(ak, []string{"__av"}, lk, []string{"__lv"})
		same := "ROW(" + strings.Join(prefixed("__p.", ak), ", ") + ") IS NOT DISTINCT FROM ROW(" + strings.Join(prefixed("__p.", lk), ", ") + ")"
		full := "NOT " + same
		for _, r := range n.Ranges {
			was, now := r.bound("__p", "__av"), r.bound("__p", "__lv")
			full += " OR (" + was + " IS DISTINCT FROM " + now + " AND (" + was + " IS NULL OR " + now + " IS NULL))"
		}
		ks := scopeKeysTable(n.Dep)
		ctes := []string{
			"__p (" + strings.Join(cols, ", ") + ") AS MATERIALIZED (" + pair + ")",
			"__full AS (SELECT * FROM __p WHERE " + full + ")",
			"__in AS (INSERT INTO " + ks + " SELECT DISTINCT " + strings.Join(prefixed("__x.", cur), ", ") +
				" FROM (SELECT " + strings.Join(prefixed("__full.", ak), ", ") + " FROM __full UNION ALL SELECT " + strings.Join(prefixed("__full.", lk), ", ") +
				" FROM __full) __x(" + strings.Join(cur, ", ") + ") WHERE __x.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM " + ks +
				" __y WHERE " + strings.Join(eq, " AND ") + ") RETURNING 1)",
			"__out AS (DELETE FROM " + ks + " WHERE NOT EXISTS (SELECT 1 FROM __full) RETURNING 1)",
		}
		counts := "(SELECT count(*) FROM __in) - (SELECT count(*) FROM __out)"
		// The ranges over one table are one INSERT: the statement's parts
		// do not see each other's rows, so two would add a key twice.
		var bySource []int
		ranges := map[int][]string{}
		for _, r := range n.Ranges {
			if ranges[r.Source] == nil {
				bySource = append(bySource, r.Source)
			}
			ranges[r.Source] = append(ranges[r.Source], r.between("__p", "__av", "__lv"))
		}
		for k, i := range bySource {
			refs := sourceKeyRefs(p, i)
			var keq []string
			for j, ref := range refs {
				keq = append(keq, fmt.Sprintf("__y.__k%d = %s", j, ref))
			}
			name := fmt.Sprintf("__r%d", k)
			ctes = append(ctes, name+" AS (INSERT INTO "+scopeKeysTable(i)+" SELECT DISTINCT "+strings.Join(refs, ", ")+
				" FROM "+p.Sources[i].From+", __p WHERE "+same+" AND ("+strings.Join(ranges[i], " OR ")+")"+
				" AND NOT EXISTS (SELECT 1 FROM "+scopeKeysTable(i)+" __y WHERE "+strings.Join(keq, " AND ")+") RETURNING 1)")
			counts += " + (SELECT count(*) FROM " + name + ")"
			analyze[i] = true
		}
		// The level's row now (NULLs when it has none) is what the batch
		// applies.
		now := "SELECT " + strings.Join(prefixed("__l.", keys), ", ") + ", __l." + narrowValue + " FROM (SELECT) __one LEFT JOIN " + L + " __l ON true"
		ctes = append(ctes,
			"__cur AS MATERIALIZED ("+now+")",
			"__gone AS (DELETE FROM "+A+" __a WHERE NOT EXISTS (SELECT 1 FROM __cur WHERE ROW(__cur.*) IS NOT DISTINCT FROM ROW(__a.*)))",
			"__new AS (INSERT INTO "+A+" SELECT * FROM __cur WHERE NOT EXISTS (SELECT 1 FROM "+A+" __a WHERE ROW(__cur.*) IS NOT DISTINCT FROM ROW(__a.*)))")
		steps = append(steps, Step{Role: RoleNarrow, Counted: true, SQL: "WITH " + strings.Join(ctes, ", ") + " SELECT " + counts})
		analyze[n.Dep] = true
	}
	for i := range p.Sources {
		if analyze[i] {
			steps = append(steps, Step{Role: RoleNarrow, SQL: "ANALYZE " + scopeKeysTable(i)})
		}
	}
	return steps
}

// between is the condition that r's expression lies between its bound over
// the values t.was and t.now, the two bounds non-NULL and different.
func (r NarrowRange) between(t, was, now string) string {
	a, b := r.bound(t, was), r.bound(t, now)
	lo, hi := "least("+a+", "+b+")", "greatest("+a+", "+b+")"
	if r.IntBounds {
		lo, hi = "floor("+lo+")::bigint", "ceil("+hi+")::bigint"
	}
	return "(" + a + " <> " + b + " AND " + r.Expr + " BETWEEN " + lo + " AND " + hi + ")"
}
