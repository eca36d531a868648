package engine

import (
	"fmt"

	"github.com/trellis-repl/trellis-repl/internal/plant"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// flattenDerived pulls subqueries in FROM (derived tables) into the outer
// query: the subquery's tables take its place in the FROM tree, its WHERE
// joins the outer WHERE, and every reference to one of its output columns
// becomes the expression that computes it. A derived table without
// aggregation, DISTINCT, LIMIT, window functions or set operations is a
// pure projection and filter, so the flattened query has the same rows;
// it then reads base tables only, which is what the engine maintains.
// PostgreSQL's planner does the same pull-up. A derived table that
// aggregates becomes an inner level instead (level.go, ADR 0018).
func (c *selectChecker) flattenDerived(sel *pg_query.SelectStmt) error {
	var subs []*derived
	var extraWhere []*pg_query.Node
	var err error
	for i, item := range sel.FromClause {
		if sel.FromClause[i], err = c.flattenItem(item, true, nil, &subs, &extraWhere); err != nil {
			return err
		}
	}
	if len(subs) == 0 {
		return nil
	}
	// Output columns are replaced everywhere the outer query can name them.
	rewrite := func(n *pg_query.Node) *pg_query.Node { return replaceDerivedRefs(n, subs) }
	for _, t := range sel.TargetList {
		rt := t.GetResTarget()
		if rt == nil || rt.Val == nil {
			continue
		}
		name := ""
		if cr := rt.Val.GetColumnRef(); rt.Name == "" && cr != nil {
			if d, _ := derivedRef(cr, subs); d != nil {
				name = figureColname(rt.Val)
			}
		}
		rt.Val = rewrite(rt.Val)
		if name != "" && figureColname(rt.Val) != name {
			// The output keeps the name PostgreSQL gives it before the
			// rewrite (the derived column's name, not its expression's).
			rt.Name = name
		}
	}
	if sel.WhereClause != nil {
		sel.WhereClause = rewrite(sel.WhereClause)
	}
	for i, g := range sel.GroupClause {
		sel.GroupClause[i] = rewrite(g)
	}
	if sel.HavingClause != nil {
		sel.HavingClause = rewrite(sel.HavingClause)
	}
	for _, s := range sel.SortClause {
		if sb := s.GetSortBy(); sb != nil {
			sb.Node = rewrite(sb.Node)
		}
	}
	for _, item := range sel.FromClause {
		walk(item.ProtoReflect(), func(m proto.Message) bool {
			if j, ok := m.(*pg_query.JoinExpr); ok && j.Quals != nil {
				j.Quals = rewrite(j.Quals)
			}
			return true
		})
	}
	for _, w := range extraWhere {
		sel.WhereClause = andOf(sel.WhereClause, w)
	}
	for _, d := range subs {
		for _, name := range d.order {
			if e := d.cols[name]; !d.used[name] && !plainColumn(e) {
				c.unreadOutput(d.alias, name, e)
			}
		}
	}
	return nil
}

// unreadOutput records a computed output of a flattened derived table
// that the outer query never reads. It disappears from the flattened
// query, but PostgreSQL still evaluates it in the query as written: one
// that returns a set multiplies the subquery's rows. The planner probes it
// with the other expressions (checkMutability), so such a call is refused
// rather than silently dropped.
func (c *selectChecker) unreadOutput(alias, name string, e *pg_query.Node) {
	text, err := deparseExpr(e)
	if err != nil {
		return // the probe cannot read it; nothing reads it either
	}
	clause := fmt.Sprintf("FROM: output %s of the subquery %s", quoteIdents([]string{name}), quoteIdents([]string{alias}))
	c.unread = append(c.unread, Unread{Clause: clause, Expr: text})
}

// andOf is a AND b as PostgreSQL's parser builds it: one flat AND over
// the conjuncts of both (a nested AND would not read back as deparsed).
func andOf(a, b *pg_query.Node) *pg_query.Node {
	if a == nil {
		return b
	}
	var args []*pg_query.Node
	for _, n := range []*pg_query.Node{a, b} {
		if be := n.GetBoolExpr(); be != nil && be.Boolop == pg_query.BoolExprType_AND_EXPR {
			args = append(args, be.Args...)
		} else {
			args = append(args, n)
		}
	}
	return &pg_query.Node{Node: &pg_query.Node_BoolExpr{BoolExpr: &pg_query.BoolExpr{
		Boolop: pg_query.BoolExprType_AND_EXPR, Args: args, Location: -1}}}
}

// derived is one flattened subquery: its alias, its output columns (the
// expression each stands for, and their order) and which of them the
// outer query reads.
type derived struct {
	alias string
	cols  map[string]*pg_query.Node
	order []string
	used  map[string]bool
}

// flattenItem flattens the derived tables of one FROM item. top: the item
// is not under the NULL-extended side of an outer join, so its subqueries'
// conditions may move to the outer WHERE. using: the column names of the
// USING clauses of the joins above it.
func (c *selectChecker) flattenItem(item *pg_query.Node, top bool, using []string, subs *[]*derived, where *[]*pg_query.Node) (*pg_query.Node, error) {
	switch n := item.Node.(type) {
	case *pg_query.Node_JoinExpr:
		j := n.JoinExpr
		ltop := top && (j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_LEFT)
		rtop := top && (j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_RIGHT)
		for _, u := range j.UsingClause {
			if s := u.GetString_(); s != nil {
				using = append(using[:len(using):len(using)], s.Sval)
			}
		}
		var err error
		if j.Larg, err = c.flattenItem(j.Larg, ltop, using, subs, where); err != nil {
			return nil, err
		}
		if j.Rarg, err = c.flattenItem(j.Rarg, rtop, using, subs, where); err != nil {
			return nil, err
		}
		return item, nil
	case *pg_query.Node_RangeSubselect:
		rs := n.RangeSubselect
		if isValues(rs) {
			return item, nil // a constant relation: an item of its own (generated.go)
		}
		inner := rs.Subquery.GetSelectStmt()
		alias := ""
		if rs.Alias != nil {
			alias = rs.Alias.Aliasname
		}
		what := fmt.Sprintf("FROM: the subquery %s", quoteIdents([]string{alias}))
		if refused := c.refusedDerived(rs, inner, what); refused != nil {
			if inner == nil {
				return nil, refused
			}
			return nil, joinRefusals(append([]error{refused}, c.innerRefusals(inner, what)...))
		}
		switch {
		case aggregates(inner) || len(inner.WindowClause) > 0 || hasWindow(inner) || needsTopK(inner):
			// Its rows are groups, or carry values over other rows (a
			// window): it is kept as an inner level, a transform of its
			// own the outer query reads (ADR 0018, 0033).
			return c.level(rs, inner, alias, what)
		}
		return c.pullUp(rs, inner, alias, what, top, using, subs, where)
	case *pg_query.Node_RangeFunction:
		if text := recursiveCall(n.RangeFunction); text != "" {
			// A recursive CTE's reference: its level (recursive.go).
			return c.recursiveLevel(n.RangeFunction, text)
		}
	}
	return item, nil
}

// refusedDerived is the reason a derived table cannot be kept at all, or
// nil.
func (c *selectChecker) refusedDerived(rs *pg_query.RangeSubselect, inner *pg_query.SelectStmt, what string) error {
	switch {
	case rs.Lateral:
		return c.errf(-1, "%s is LATERAL; LATERAL subqueries are not supported in a transform — join its tables in the outer FROM and put its conditions in WHERE", what)
	case inner == nil:
		return c.errf(-1, "%s is not a SELECT; only a SELECT can be flattened into the outer query", what)
	case (inner.LimitCount != nil || inner.LimitOffset != nil) && len(inner.SortClause) == 0:
		loc := nodeLocation(inner.LimitCount)
		if inner.LimitCount == nil {
			loc = nodeLocation(inner.LimitOffset)
		}
		return c.errf(loc, "%s uses LIMIT or OFFSET without ORDER BY, which keeps arbitrary rows (in PostgreSQL too); add ORDER BY ending with a key, or remove the LIMIT", what)
	case len(inner.LockingClause) > 0:
		return c.errf(-1, "%s uses FOR UPDATE/FOR SHARE, which is not supported in a transform; remove it (source rows are read without locking them)", what)
	case len(inner.FromClause) == 0:
		return c.errf(-1, "%s reads no table; a transform reads tables", what)
	}
	return nil
}

// pullUp flattens a derived table that only projects and filters into
// the outer query, or keeps it as an inner level (ADR 0018) where pulling
// it up would change the query's rows (levelReason).
//
// The judgement is made on the subquery as it will be pulled up, after
// its own derived tables are flattened into it: an output that reads as a
// plain column of a nested derived table may be computed there, and a
// nested derived table's WHERE becomes this subquery's. Judged on the
// subquery as written, the order in which derived tables are pulled up
// would decide whether a NULL-extended row shows NULL (issue 28, ADR
// 0027). This is the one place a derived table is pulled up, so the rule
// cannot be bypassed by nesting.
func (c *selectChecker) pullUp(rs *pg_query.RangeSubselect, inner *pg_query.SelectStmt, alias, what string, top bool, using []string, subs *[]*derived, where *[]*pg_query.Node) (*pg_query.Node, error) {
	written := proto.Clone(inner).(*pg_query.SelectStmt)
	mark := c.mark()
	if err := c.flattenDerived(inner); err != nil {
		return nil, err
	}
	// Its unqualified columns name its one table: qualified, they
	// stay unambiguous in the outer query's wider scope.
	qualifyColumns(inner)
	// A table it reads by a name another FROM item of the query uses too
	// (a CTE read twice, the same table in two derived tables) gets a
	// name of its own, or the pulled-up references would collide.
	c.renameShared(inner)
	judged := inner
	if plant.Active(plant.FlattenNullableComputed) {
		judged = written // the rule judged before nesting is undone
	}
	if levelReason(rs, judged, top, using) != "" {
		// What flattening the subquery registered is undone: the level
		// parses the subquery as written, as a query of its own.
		c.rollback(mark)
		return c.level(rs, written, alias, what)
	}
	d := &derived{alias: alias, cols: map[string]*pg_query.Node{}, used: map[string]bool{}}
	names := outputNames(rs, inner)
	for i, t := range inner.TargetList {
		rt := t.GetResTarget()
		if rt == nil || rt.Val == nil {
			continue
		}
		if cr := rt.Val.GetColumnRef(); cr != nil && hasStar(cr) {
			return nil, c.errf(rt.Location, "%s selects *; list its columns by name", what)
		}
		d.cols[names[i]] = groupSafe(rt.Val)
		d.order = append(d.order, names[i])
	}
	*subs = append(*subs, d)
	if inner.WhereClause != nil {
		*where = append(*where, inner.WhereClause)
	}
	// The subquery's FROM items join each other as a comma list does.
	out := inner.FromClause[0]
	for _, it := range inner.FromClause[1:] {
		out = &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: &pg_query.JoinExpr{
			Jointype: pg_query.JoinType_JOIN_INNER, Larg: out, Rarg: it}}}
	}
	return out, nil
}

// levelReason says why a derived table (its own derived tables already
// flattened into it) must be kept as an inner level rather than pulled
// up, or "" when pulling it up keeps the query's rows. top: it is not on
// the NULL-extended side of an outer join; using: the USING columns of
// the joins above it.
func levelReason(rs *pg_query.RangeSubselect, sel *pg_query.SelectStmt, top bool, using []string) string {
	switch {
	case renamedForUsing(rs, sel, using):
		// USING names the derived table's output; pulled up, the name
		// would be gone (a computed or renamed column).
		return "a USING clause above it names a computed or renamed output"
	case !top && !plainColumns(sel):
		// A NULL-extended row must show NULL in every column, but an
		// expression such as a constant or coalesce(x, 0), pulled up,
		// would compute a value from the NULLs. PostgreSQL's planner
		// wraps such columns in placeholders; here the subquery keeps
		// its own rows as an inner level, whose stored columns the outer
		// join NULL-extends like any table's.
		return "an output computed on the NULL-extended side of an outer join"
	case !top && sel.WhereClause != nil:
		// Its condition filters its rows before the outer join; moved
		// to the outer WHERE it would filter the NULL-extended rows out.
		return "a WHERE on the NULL-extended side of an outer join"
	}
	return ""
}

// checkerMark is what a selectChecker has registered at a point of
// flattening, so that work found unnecessary can be undone.
type checkerMark struct{ levels, unread int }

func (c *selectChecker) mark() checkerMark {
	return checkerMark{levels: len(c.levels), unread: len(c.unread)}
}

func (c *selectChecker) rollback(m checkerMark) {
	c.levels, c.unread = c.levels[:m.levels], c.unread[:m.unread]
}

// plainColumns reports whether every output of a subquery is a column
// reference (or a cast of one): such outputs are NULL in a NULL-extended
// row whether computed before or after the join.
func plainColumns(sel *pg_query.SelectStmt) bool {
	for _, t := range sel.TargetList {
		if !plainColumn(t.GetResTarget().GetVal()) {
			return false
		}
	}
	return true
}

// plainColumn reports whether an expression is a column reference or a
// cast of one.
func plainColumn(v *pg_query.Node) bool {
	for v.GetTypeCast() != nil {
		v = v.GetTypeCast().Arg
	}
	return v.GetColumnRef() != nil
}

// renamedForUsing reports whether a USING clause above a derived table
// names one of its outputs that is not a column of that same name.
func renamedForUsing(rs *pg_query.RangeSubselect, sel *pg_query.SelectStmt, using []string) bool {
	if len(using) == 0 {
		return false
	}
	names := outputNames(rs, sel)
	for i, t := range sel.TargetList {
		rt := t.GetResTarget()
		if rt == nil || rt.Val == nil {
			continue
		}
		name := names[i]
		if !contains(using, name) {
			continue
		}
		cr := rt.Val.GetColumnRef()
		if cr == nil || len(cr.Fields) == 0 || cr.Fields[len(cr.Fields)-1].GetString_().GetSval() != name {
			return true
		}
	}
	return false
}

// outputNames are a derived table's output column names, by select-list
// position: the alias's column list where it names one, else the item's
// own name as PostgreSQL gives it ("" for an entry that is not a value).
func outputNames(rs *pg_query.RangeSubselect, sel *pg_query.SelectStmt) []string {
	names := make([]string, len(sel.TargetList))
	for i, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil {
			names[i] = rt.Name
			if names[i] == "" {
				names[i] = figureColname(rt.Val)
			}
		}
	}
	if rs.Alias != nil {
		k := 0
		for _, cn := range rs.Alias.Colnames {
			if s := cn.GetString_(); s != nil && k < len(names) {
				names[k] = s.Sval
				k++
			}
		}
	}
	return names
}

// qualifyColumns qualifies the one-part column references of a subquery
// with one table (its select list and WHERE, the parts that move into the
// outer query) by that table's name in the subquery.
func qualifyColumns(sel *pg_query.SelectStmt) {
	if len(sel.FromClause) != 1 || sel.FromClause[0].GetRangeVar() == nil {
		return
	}
	rv := sel.FromClause[0].GetRangeVar()
	ref := rv.Relname
	if rv.Alias != nil {
		ref = rv.Alias.Aliasname
	}
	qualify := func(n *pg_query.Node) *pg_query.Node {
		cr := n.GetColumnRef()
		if cr == nil || len(cr.Fields) != 1 || cr.Fields[0].GetString_() == nil {
			return nil
		}
		q := proto.Clone(cr).(*pg_query.ColumnRef)
		q.Fields = append([]*pg_query.Node{pg_query.MakeStrNode(ref)}, q.Fields...)
		return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: q}}
	}
	for _, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil {
			rt.Val = replaceNodes(rt.Val, qualify)
		}
	}
	if sel.WhereClause != nil {
		sel.WhereClause = replaceNodes(sel.WhereClause, qualify)
	}
}

// renameShared gives each table of a subquery about to be pulled up that
// it reads under a name the statement uses for another FROM item too an
// alias of its own, and rewrites the subquery's references to it (select
// list, WHERE, join conditions).
func (c *selectChecker) renameShared(sel *pg_query.SelectStmt) {
	renames := map[string]string{}
	for _, item := range sel.FromClause {
		walk(item.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.RangeSubselect, *pg_query.SubLink:
				return false // its own scope
			case *pg_query.RangeVar:
				// Its name: the alias it has (a CTE's body that aliases
				// its table, read twice), or the table's.
				name := x.Relname
				if x.Alias != nil {
					name = x.Alias.Aliasname
				}
				if c.refNameUses[name] < 2 {
					return true
				}
				c.renamed++
				alias := fmt.Sprintf("%s_%d", name, c.renamed)
				for c.refNameUses[alias] > 0 {
					c.renamed++
					alias = fmt.Sprintf("%s_%d", name, c.renamed)
				}
				c.refNameUses[alias]++
				if x.Alias == nil {
					x.Alias = &pg_query.Alias{}
				}
				x.Alias.Aliasname = alias
				renames[name] = alias
			}
			return true
		})
	}
	if len(renames) == 0 {
		return
	}
	rename := func(n *pg_query.Node) *pg_query.Node {
		cr := n.GetColumnRef()
		if cr == nil || len(cr.Fields) < 2 {
			return nil
		}
		k := len(cr.Fields) - 2 // the table part of [schema.]table.column
		alias, ok := renames[cr.Fields[k].GetString_().GetSval()]
		if !ok {
			return nil
		}
		q := proto.Clone(cr).(*pg_query.ColumnRef)
		q.Fields = append([]*pg_query.Node{pg_query.MakeStrNode(alias)}, q.Fields[k+1:]...)
		return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: q}}
	}
	for _, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Val != nil {
			rt.Val = replaceNodes(rt.Val, rename)
		}
	}
	if sel.WhereClause != nil {
		sel.WhereClause = replaceNodes(sel.WhereClause, rename)
	}
	for _, item := range sel.FromClause {
		walk(item.ProtoReflect(), func(m proto.Message) bool {
			if j, ok := m.(*pg_query.JoinExpr); ok && j.Quals != nil {
				j.Quals = replaceNodes(j.Quals, rename)
			}
			_, sub := m.(*pg_query.RangeSubselect)
			return !sub
		})
	}
}

// refNameUses counts the names FROM items of stmt are referred to by, in
// every scope: a table's alias, else its name.
func refNameUses(stmt *pg_query.Node) map[string]int {
	uses := map[string]int{}
	walk(stmt.ProtoReflect(), func(m proto.Message) bool {
		if rv, ok := m.(*pg_query.RangeVar); ok {
			if rv.Alias != nil {
				uses[rv.Alias.Aliasname]++
			} else {
				uses[rv.Relname]++
			}
		}
		if rf, ok := m.(*pg_query.RangeFunction); ok && rf.Alias != nil {
			// A recursive CTE's level (recursive.go).
			uses[rf.Alias.Aliasname]++
		}
		return true
	})
	return uses
}

// groupSafe is a subquery output's expression as it may be pulled up: an
// integer constant is cast, since in the outer GROUP BY a bare one would
// be read as a select-list position.
func groupSafe(n *pg_query.Node) *pg_query.Node {
	if c := n.GetAConst(); c != nil && c.GetIval() != nil {
		return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{
			Arg: n, TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("int4")}, Typemod: -1, Location: -1}, Location: -1}}}
	}
	return n
}

// derivedRef is the flattened subquery a column reference names and the
// output's name, or nil.
func derivedRef(cr *pg_query.ColumnRef, subs []*derived) (*derived, string) {
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return nil, ""
		}
		parts = append(parts, s.Sval)
	}
	switch len(parts) {
	case 2:
		for _, d := range subs {
			if _, ok := d.cols[parts[1]]; ok && d.alias == parts[0] {
				return d, parts[1]
			}
		}
	case 1:
		var found *derived
		for _, d := range subs {
			if _, ok := d.cols[parts[0]]; ok {
				if found != nil {
					return nil, "" // ambiguous: PostgreSQL refuses it
				}
				found = d
			}
		}
		if found != nil {
			return found, parts[0]
		}
	}
	return nil, ""
}

// replaceDerivedRefs returns n with every reference to a flattened
// subquery's output column replaced by (a copy of) its expression, and
// marks the output read.
func replaceDerivedRefs(n *pg_query.Node, subs []*derived) *pg_query.Node {
	return replaceNodes(n, func(n *pg_query.Node) *pg_query.Node {
		if cr := n.GetColumnRef(); cr != nil {
			if d, name := derivedRef(cr, subs); d != nil {
				d.used[name] = true
				return proto.Clone(d.cols[name]).(*pg_query.Node)
			}
		}
		return nil
	})
}

// hasAggregate reports whether a SELECT's list calls an aggregate.
func hasAggregate(sel *pg_query.SelectStmt) bool {
	found := false
	for _, t := range sel.TargetList {
		walk(t.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false // a subquery's aggregates are its own
			}
			if fc, ok := m.(*pg_query.FuncCall); ok && fc.Over == nil && isAggregate(fc) {
				found = true
			}
			return !found
		})
	}
	return found
}

// hasWindow reports whether a SELECT's list calls a window function.
func hasWindow(sel *pg_query.SelectStmt) bool {
	for _, t := range sel.TargetList {
		if hasWindowCall(t) {
			return true
		}
	}
	return false
}

// hasWindowCall reports whether n calls a window function outside a
// subquery.
func hasWindowCall(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if _, ok := m.(*pg_query.SubLink); ok {
			return false
		}
		if fc, ok := m.(*pg_query.FuncCall); ok && fc.Over != nil {
			found = true
		}
		return !found
	})
	return found
}

// replaceNodes returns n with each node for which f returns a
// replacement replaced by it; f is not asked about nodes below a
// replacement, and its replacements are not walked.
func replaceNodes(n *pg_query.Node, f func(*pg_query.Node) *pg_query.Node) *pg_query.Node {
	if n == nil {
		return nil
	}
	if r := f(n); r != nil {
		return r
	}
	replaceIn(n.ProtoReflect(), f)
	return n
}

// replaceIn applies f below m. Replacements of a message's fields are
// collected during its walk and set after it (protoreflect does not
// promise that setting a field during Range is safe).
func replaceIn(m protoreflect.Message, f func(*pg_query.Node) *pg_query.Node) {
	type set struct {
		fd protoreflect.FieldDescriptor
		v  protoreflect.Value
	}
	var sets []set
	swap := func(v protoreflect.Message) (protoreflect.Value, bool) {
		if node, ok := v.Interface().(*pg_query.Node); ok {
			if r := f(node); r != nil {
				return protoreflect.ValueOfMessage(r.ProtoReflect()), true
			}
		}
		replaceIn(v, f)
		return protoreflect.Value{}, false
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() || fd.Message() == nil:
		case fd.IsList():
			list := v.List()
			for i := 0; i < list.Len(); i++ {
				if r, ok := swap(list.Get(i).Message()); ok {
					list.Set(i, r)
				}
			}
		default:
			if r, ok := swap(v.Message()); ok {
				sets = append(sets, set{fd, r})
			}
		}
		return true
	})
	for _, s := range sets {
		m.Set(s.fd, s.v)
	}
}
