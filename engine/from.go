package engine

// from.go owns the FROM clause: its tree of tables and joins (checkFrom,
// fromItem) with the outer joins, the cover and the column equalities the
// re-derive probes through, the column references of a condition
// (columnNames), and FROM rendered back as SQL over the resolved tables
// (FromSQL, InnerSQL). Derived tables are flattened or made inner levels
// before it runs (flatten.go, level.go).

import (
	"errors"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// checkFrom accepts a FROM clause of plain tables, functions and VALUES
// lists (generated.go) joined by comma, CROSS, INNER, LEFT, RIGHT or FULL
// joins (ON, USING or NATURAL), and records the tables, the generated
// items, the outer joins and the cover in c (ADR 0010, 0034).
func (c *selectChecker) checkFrom(sel *pg_query.SelectStmt) error {
	if len(sel.FromClause) == 0 {
		return c.errf(-1, "FROM: a transform reads source tables; add FROM <table>")
	}
	sel.FromClause = reassociate(sel.FromClause)
	var where []ColumnName
	if sel.WhereClause != nil {
		where = columnNames(sel.WhereClause)
		c.equalities = append(c.equalities, equalities(sel.WhereClause, nil, nil)...)
	}
	for _, item := range sel.FromClause {
		// A function of a comma item filters the items it reads, as WHERE.
		where = append(where, generatedRefs(item)...)
	}
	var cover []int
	for _, item := range sel.FromClause {
		cv, err := c.fromItem(item, where)
		if err != nil {
			return err
		}
		if len(cover) == 0 {
			cover = cv
		}
	}
	if len(cover) == 0 {
		// Only functions and VALUES lists: nothing a change can name.
		return c.errf(-1, noTableRefusal)
	}
	c.cover = cover
	return nil
}

// fromItem validates one FROM item and returns its cover: the tables under
// it that are present in every row it produces. above are the column
// references of the conditions applied to its rows later.
func (c *selectChecker) fromItem(item *pg_query.Node, above []ColumnName) ([]int, error) {
	switch n := item.Node.(type) {
	case *pg_query.Node_RangeVar:
		rv := n.RangeVar
		switch {
		case rv.Catalogname != "":
			return nil, c.errf(rv.Location, "FROM: a three-part table name (database.schema.table) is not supported; write schema.table")
		case rv.Alias != nil && len(rv.Alias.Colnames) > 0:
			return nil, c.errf(rv.Location, "FROM: column aliases on the table (%s(…)) are not supported; rename columns with AS in the select list", rv.Alias.Aliasname)
		}
		t := TableRef{Schema: rv.Schemaname, Name: rv.Relname, Only: !rv.Inh}
		if rv.Alias != nil {
			t.Alias = rv.Alias.Aliasname
		}
		for _, o := range c.tables {
			if o.RefName() == t.RefName() {
				return nil, c.errf(rv.Location, "FROM: the name %s is used by two FROM items; give one of them an alias (FROM %s AS x)", quoteIdents([]string{t.RefName()}), quoteIdents([]string{t.Name}))
			}
		}
		c.tables = append(c.tables, t)
		c.rvs = append(c.rvs, rv)
		return []int{len(c.tables) - 1}, nil
	case *pg_query.Node_JoinExpr:
		j := n.JoinExpr
		if j.Alias != nil {
			return nil, c.errf(-1, "FROM: an alias on a join (… JOIN …) AS %s hides the names of its tables; remove the alias and refer to the tables by their own names", j.Alias.Aliasname)
		}
		// This join's own condition filters the rows of a side it does not
		// preserve.
		var cond []ColumnName
		if j.Quals != nil {
			cond = columnNames(j.Quals)
		}
		for _, u := range j.UsingClause {
			if s := u.GetString_(); s != nil {
				cond = append(cond, ColumnName{Column: s.Sval})
			}
		}
		if j.IsNatural {
			cond = append(cond, ColumnName{Column: "*"})
		}
		if j.Jointype == pg_query.JoinType_JOIN_INNER {
			// A function on either side filters the rows it reads.
			cond = append(append(cond, generatedRefs(j.Larg)...), generatedRefs(j.Rarg)...)
		}
		leftAbove, rightAbove := above, above
		if j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_RIGHT {
			leftAbove = append(append([]ColumnName{}, above...), cond...)
		}
		if j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_LEFT {
			rightAbove = append(append([]ColumnName{}, above...), cond...)
		}
		// The sides as written, for a refusal (their items are given
		// their ordinals as they are checked).
		var ltext, rtext string
		if j.Jointype != pg_query.JoinType_JOIN_INNER && !hasTable(j.Larg) {
			ltext = deparsedItem(j.Larg)
		}
		if j.Jointype != pg_query.JoinType_JOIN_INNER && !hasTable(j.Rarg) {
			rtext = deparsedItem(j.Rarg)
		}
		first, gfirst := len(c.tables), len(c.generated)
		left, err := c.fromItem(j.Larg, leftAbove)
		if err != nil {
			return nil, err
		}
		mid, gmid := len(c.tables), len(c.generated)
		right, err := c.fromItem(j.Rarg, rightAbove)
		if err != nil {
			return nil, err
		}
		gend := len(c.generated)
		lspan, rspan := spanOf(first, mid), spanOf(mid, len(c.tables))
		if j.Quals != nil {
			if text, err := c.deparse(j.Quals, "JOIN … ON"); err == nil {
				c.joinConds = append(c.joinConds, text)
			}
			// Either side of an ON equality may name any table under the join.
			all := spanOf(first, len(c.tables))
			c.equalities = append(c.equalities, equalities(j.Quals, all, all)...)
		}
		for _, u := range j.UsingClause {
			if s := u.GetString_(); s != nil {
				c.equalities = append(c.equalities, Equality{Left: ColumnName{Column: s.Sval}, Right: ColumnName{Column: s.Sval}, LeftIn: lspan, RightIn: rspan})
			}
		}
		if j.Quals != nil {
			if err := c.checkExpr(j.Quals, "JOIN … ON", "aggregate functions are not allowed in JOIN conditions (%s); remove the aggregate"); err != nil {
				return nil, err
			}
		}
		// A preserved side without a table: its NULL-extended rows exist
		// with no source row, so no change could find them (ADR 0034).
		noSource := func(side, kind string) error {
			return c.errf(-1, "FROM: the preserved side of a %s JOIN holds no table, only a function or VALUES list (%s), so its unmatched rows belong to no source row and no change could find them; put the constant rows in a table and join that, or join the function to the table it reads first (FROM t, unnest(t.a) AS u(x) LEFT JOIN …)", kind, side)
		}
		nullable := func(from, to int) {
			for k := from; k < to; k++ {
				c.generated[k].Nullable = true
			}
		}
		switch j.Jointype {
		case pg_query.JoinType_JOIN_INNER:
			if len(left) == 0 {
				return right, nil
			}
			return left, nil
		case pg_query.JoinType_JOIN_LEFT:
			if len(left) == 0 {
				return nil, noSource(ltext, "LEFT")
			}
			nullable(gmid, gend)
			c.outer = append(c.outer, OuterJoin{Kind: "left", Left: lspan, Right: rspan, Above: above, First: first, InnerCover: left, node: j})
			return left, nil
		case pg_query.JoinType_JOIN_RIGHT:
			if len(right) == 0 {
				return nil, noSource(rtext, "RIGHT")
			}
			nullable(gfirst, gmid)
			c.outer = append(c.outer, OuterJoin{Kind: "right", Left: lspan, Right: rspan, Above: above, First: first, InnerCover: left, node: j})
			return right, nil
		case pg_query.JoinType_JOIN_FULL:
			for _, side := range []struct {
				cover []int
				text  string
			}{{left, ltext}, {right, rtext}} {
				if len(side.cover) == 0 {
					return nil, noSource(side.text, "FULL")
				}
			}
			nullable(gfirst, gend)
			c.outer = append(c.outer, OuterJoin{Kind: "full", Left: lspan, Right: rspan, Above: above, First: first, InnerCover: left, node: j})
			return append(append([]int{}, left...), right...), nil
		default:
			return nil, c.errf(-1, "FROM: this kind of join is not supported; write INNER, LEFT, RIGHT, FULL or CROSS JOIN")
		}
	case *pg_query.Node_RangeSubselect:
		if isValues(n.RangeSubselect) {
			return c.generatedItem(item)
		}
		if n.RangeSubselect.Lateral {
			return nil, c.errf(-1, "FROM: LATERAL subqueries are not supported in a transform; join the subquery's tables in the outer FROM and put its conditions in WHERE")
		}
		return nil, c.errf(-1, "FROM: subqueries in FROM are not supported yet; join the subquery's tables in the outer FROM and move its conditions into WHERE")
	case *pg_query.Node_RangeFunction:
		return c.generatedItem(item)
	case *pg_query.Node_RangeTableSample:
		return nil, c.errf(n.RangeTableSample.Location, "FROM: TABLESAMPLE is not supported in a transform; remove it (a transform covers every row)")
	default:
		return nil, c.errf(-1, "FROM: only tables and joins of tables are supported; select from tables")
	}
}

// spanOf lists the table indexes a, …, b-1.
func spanOf(a, b int) []int {
	out := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

// equalities lists the conjuncts of a condition that equate two plain
// columns: the joins the re-derive probes through indexes. left and right
// (nil for WHERE) are the tables each side may name.
func equalities(n *pg_query.Node, left, right []int) []Equality {
	if be := n.GetBoolExpr(); be != nil && be.Boolop == pg_query.BoolExprType_AND_EXPR {
		var out []Equality
		for _, a := range be.Args {
			out = append(out, equalities(a, left, right)...)
		}
		return out
	}
	ae := n.GetAExpr()
	if ae == nil || ae.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(ae.Name) != 1 || ae.Name[0].GetString_().GetSval() != "=" ||
		ae.Lexpr == nil || ae.Rexpr == nil {
		return nil
	}
	l, r := columnNames(ae.Lexpr), columnNames(ae.Rexpr)
	if len(l) != 1 || len(r) != 1 || ae.Lexpr.GetColumnRef() == nil || ae.Rexpr.GetColumnRef() == nil {
		return nil
	}
	return []Equality{{Left: l[0], Right: r[0], LeftIn: left, RightIn: right}}
}

// columnNames lists the column references in an expression.
func columnNames(n *pg_query.Node) []ColumnName {
	var out []ColumnName
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		cr, ok := m.(*pg_query.ColumnRef)
		if !ok {
			return true
		}
		var parts []string
		for _, f := range cr.Fields {
			if s := f.GetString_(); s != nil {
				parts = append(parts, s.Sval)
			} else {
				parts = append(parts, "*")
			}
		}
		switch len(parts) {
		case 1:
			out = append(out, ColumnName{Column: parts[0]})
		case 2:
			out = append(out, ColumnName{Ref: parts[0], Column: parts[1]})
		}
		return false
	})
	return out
}

// FromSQL renders the FROM clause (without the keyword) with each table's
// schema replaced by schemas[i] (by Tables index), so generated SQL names
// exactly the tables resolved at define time.
func (q *Query) FromSQL(schemas []string) (string, error) {
	return renderFrom(q.from, schemas, 0)
}

// InnerSQL renders an outer join of the query as an inner join of its two
// sides (the same ON or USING): the matches the join makes, which a
// mirror keeps (ADR 0010).
func (q *Query) InnerSQL(oj OuterJoin, schemas []string) (string, error) {
	if oj.node == nil {
		return "", errors.New("render inner join: the join's parse tree is not kept")
	}
	j := proto.Clone(oj.node).(*pg_query.JoinExpr)
	j.Jointype = pg_query.JoinType_JOIN_INNER
	return renderFrom([]*pg_query.Node{{Node: &pg_query.Node_JoinExpr{JoinExpr: j}}}, schemas, oj.First)
}

// renderFrom deparses FROM items whose tables are schemas[first:] in order.
func renderFrom(from []*pg_query.Node, schemas []string, first int) (string, error) {
	items := make([]*pg_query.Node, len(from))
	i := first
	for k, it := range from {
		items[k] = proto.Clone(it).(*pg_query.Node)
		walk(items[k].ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false // a subquery in ON names its own tables
			}
			if rv, ok := m.(*pg_query.RangeVar); ok {
				if i < len(schemas) {
					rv.Schemaname = schemas[i]
				}
				i++
				return false
			}
			return true
		})
	}
	out, err := deparseSelect(&pg_query.SelectStmt{FromClause: items})
	if err != nil {
		return "", fmt.Errorf("deparse FROM: %w", err)
	}
	sql, ok := strings.CutPrefix(out, "SELECT FROM ")
	if !ok {
		return "", fmt.Errorf("deparse FROM: unexpected deparser output %q", out)
	}
	return sql, nil
}

// deparsedItem is a FROM item as SQL, for a sentence.
func deparsedItem(n *pg_query.Node) string {
	out, err := deparseSelect(&pg_query.SelectStmt{FromClause: []*pg_query.Node{n}})
	if err != nil {
		return "a FROM item"
	}
	return strings.TrimPrefix(out, "SELECT FROM ")
}
