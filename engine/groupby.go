package engine

// groupby.go owns GROUP BY: ordinals and output names resolved to
// expressions, each select item tied to its group expression (groupBy),
// columns functionally dependent on a grouped primary key kept as group
// columns of their own (dependentKey, ADR 0037), and the catalog check that
// a name resolved through an output alias does not also name a source
// column (checkGroupAliases).

import (
	"context"
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// groupBy resolves and validates GROUP BY, then ties every select item to
// its group expression or aggregate.
func (c *selectChecker) groupBy(sel *pg_query.SelectStmt, items []*selectItem, q *Query) error {
	if groupingSetsUsed(sel) {
		if err := c.groupingSets(sel, items, q); err != nil {
			return err
		}
		return c.tieItems(sel, items, q)
	}
	var keys []string
	for j, g := range sel.GroupClause {
		key, deparsed, alias, err := c.groupItem(j, g, items)
		if err != nil {
			return err
		}
		if contains(keys, key) {
			continue // GROUP BY a, a groups like GROUP BY a
		}
		keys = append(keys, key)
		q.GroupBy = append(q.GroupBy, deparsed)
		q.GroupByAlias = append(q.GroupByAlias, alias)
	}
	c.groupKeys = keys
	return c.tieItems(sel, items, q)
}

// groupItem resolves GROUP BY item j (an ordinal, an output name or an
// expression; also an element of a grouping set) and checks it: its
// comparison key, its deparsed expression and the output name it was
// resolved through ("" for none).
func (c *selectChecker) groupItem(j int, g *pg_query.Node, items []*selectItem) (key, deparsed, alias string, err error) {
	text, err := c.deparse(g, fmt.Sprintf("GROUP BY item %d", j+1))
	if err != nil {
		return "", "", "", err
	}
	clause := fmt.Sprintf("GROUP BY item %d (%s)", j+1, text)
	expr := g
	if ac := g.GetAConst(); ac != nil && ac.GetIval() != nil {
		k := ac.GetIval().Ival
		if k < 1 || int(k) > len(items) {
			return "", "", "", c.errf(ac.Location, "%s: GROUP BY position %d is not in select list; the select list has %d items", clause, k, len(items))
		}
		expr = items[k-1].node
	} else if name := bareName(g); name != "" {
		for _, it := range items {
			if it.t.Name == name && it.t.Column != name {
				expr, alias = it.node, name
				break
			}
		}
	}
	if err := c.checkExpr(expr, clause, "aggregate functions are not allowed in GROUP BY (%s); group by plain expressions and select the aggregate as its own item"); err != nil {
		return "", "", "", err
	}
	if key, err = c.compareKey(expr, clause); err != nil {
		return "", "", "", err
	}
	if deparsed, err = c.deparse(expr, clause); err != nil {
		return "", "", "", err
	}
	if expr.GetAConst() != nil {
		// An ordinal naming a constant select item: PostgreSQL reads a
		// bare constant in GROUP BY as an ordinal (or refuses it), so the
		// grouping is written as a call that keeps the constant's type.
		deparsed = "COALESCE(" + deparsed + ")"
	}
	return key, deparsed, alias, nil
}

// tieItems marks the query aggregating and ties every select item to its
// group expression (c.groupKeys) or aggregate.
func (c *selectChecker) tieItems(sel *pg_query.SelectStmt, items []*selectItem, q *Query) error {
	keys := c.groupKeys
	// GROUP BY () groups too: one row, however many the source has.
	q.Aggregate = len(sel.GroupClause) > 0 || sel.HavingClause != nil
	for _, it := range items {
		q.Aggregate = q.Aggregate || it.t.Agg != nil || it.composed
	}
	if !q.Aggregate {
		return nil
	}
	for _, it := range items {
		if it.t.Agg != nil || it.composed {
			continue
		}
		for k, key := range keys {
			if key == it.key {
				it.t.Group = k
				break
			}
		}
		if it.t.Group < 0 && it.t.Column != "" && c.qualified && q.Grouping == nil {
			// PostgreSQL accepted the qualified text, so the column is
			// functionally dependent on a grouped primary key (ADR 0037).
			k, err := c.dependentKey(it.node, fmt.Sprintf("select list item %s", it.t.Expr), q)
			if err != nil {
				return err
			}
			it.t.Group = k
			keys = c.groupKeys
		}
		if it.t.Group < 0 {
			// An expression over GROUP BY expressions (region || '!'): kept
			// as a projection of the group's state, as PostgreSQL computes
			// it per group; composedItems refuses a column outside them.
			it.composed, it.grouped = true, true
		}
	}
	// A GROUP BY expression the select list does not name is kept in a
	// hidden column of the target: it is part of the target's key.
	return nil
}

// dependentKey makes column reference n, which no GROUP BY expression
// matches, a group key of its own and returns its index. It is called only
// on text PostgreSQL analysed and wrote back (c.qualified), where such a
// column can only be functionally dependent on a grouped primary key:
// grouping by the key and the columns that depend on it makes the same
// groups, so the target stays exact (ADR 0037).
func (c *selectChecker) dependentKey(n *pg_query.Node, clause string, q *Query) (int, error) {
	key, err := c.compareKey(n, clause)
	if err != nil {
		return 0, err
	}
	for k, g := range c.groupKeys {
		if g == key {
			return k, nil
		}
	}
	deparsed, err := c.deparse(n, clause)
	if err != nil {
		return 0, err
	}
	c.groupKeys = append(c.groupKeys, key)
	q.GroupBy = append(q.GroupBy, deparsed)
	q.GroupByAlias = append(q.GroupByAlias, "")
	return len(c.groupKeys) - 1, nil
}

// checkGroupAliases refuses a GROUP BY name that the parser resolved to an
// output alias when a source also has a column of that name: PostgreSQL
// would group by the column, so the definition would not mean what it says.
func checkGroupAliases(ctx context.Context, db DB, name string, sources []Source, q *Query) error {
	for _, alias := range q.GroupByAlias {
		if alias == "" {
			continue
		}
		for _, src := range sources {
			col, err := sourceColumn(ctx, db, src, alias)
			if err != nil {
				return err
			}
			if col.found {
				return terr.New(terr.Validation, "transform %q: GROUP BY %s is ambiguous: it names both a column of FROM table %s and an output column; PostgreSQL groups by the table column — write the expression itself in GROUP BY, or rename the output column",
					name, alias, src.Ident())
			}
		}
	}
	return nil
}
