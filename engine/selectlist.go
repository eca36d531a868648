package engine

// selectlist.go owns the select list: each item's validation, whether it is
// a plain expression, an aggregate call or an expression over aggregates,
// and its output name.

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// selectItem is a select-list entry while the query is being validated.
type selectItem struct {
	t        Target
	composed bool           // an expression over aggregates (Target.Composed)
	grouped  bool           // composed of GROUP BY expressions only, no aggregate
	node     *pg_query.Node // the expression
	key      string         // comparison key (see compareKey)
	loc      int32
}

// selectList validates the select items and works out their names.
func (c *selectChecker) selectList(sel *pg_query.SelectStmt) ([]*selectItem, error) {
	if len(sel.TargetList) == 0 {
		return nil, c.errf(-1, "the select list is empty; select at least one expression")
	}
	var items []*selectItem
	var errs []error
	seen := map[string]int{}
	for i, n := range sel.TargetList {
		it, err := c.selectItem(i, n, seen)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		items = append(items, it)
	}
	return items, joinRefusals(errs)
}

// selectItem validates select item i and works out its name; seen maps
// the names of the items before it to their 1-based positions.
func (c *selectChecker) selectItem(i int, n *pg_query.Node, seen map[string]int) (*selectItem, error) {
	rt := n.GetResTarget()
	if rt == nil || rt.Val == nil {
		return nil, c.errf(-1, "select list item %d: unexpected entry", i+1)
	}
	if cr := rt.Val.GetColumnRef(); cr != nil && hasStar(cr) {
		return nil, c.errf(rt.Location, "select list item %d: * could not be expanded; list the columns you need by name", i+1)
	}
	clause := fmt.Sprintf("select list item %d", i+1)
	// An expression the deparser cannot render is refused by c.deparse
	// below, after the checks that name what is wrong more precisely.
	expr, err := deparseExpr(rt.Val)
	if err == nil {
		clause = fmt.Sprintf("select list item %d (%s)", i+1, expr)
	}
	it := &selectItem{node: rt.Val, loc: rt.Location, t: Target{Expr: expr, Group: -1}}
	if fc := aggCall(rt.Val); fc != nil {
		if it.t.Agg, err = c.checkAgg(fc, clause); err != nil {
			return nil, err
		}
	} else if hasAggCall(rt.Val) {
		it.composed = true // checked by composedItems, once GROUP BY is known
	} else {
		if err := c.checkExpr(rt.Val, clause, "%s() is an aggregate inside an expression; expressions over aggregates are not supported yet, select each aggregate as its own item and combine them when you read the target"); err != nil {
			return nil, err
		}
		it.t.Column, it.t.ColumnRef = c.plainColumn(rt.Val)
	}
	it.t.Name = rt.Name
	if it.t.Name == "" {
		it.t.Name = figureColname(rt.Val)
	}
	switch {
	case it.t.Name == "?column?":
		return nil, c.errf(rt.Location, "%s: PostgreSQL would name it \"?column?\"; give the expression an alias with AS", clause)
	case strings.HasPrefix(it.t.Name, reservedPrefix) && !(it.t.Name == rankItem && hasWindowCall(rt.Val)) && !strings.HasPrefix(it.t.Name, latPrefix) && !strings.HasPrefix(it.t.Name, orderItem):
		return nil, c.errf(rt.Location, "%s: output name %q begins with %q, which is reserved for trellis's hidden columns; give it another alias with AS", clause, it.t.Name, reservedPrefix)
	}
	if prev, ok := seen[it.t.Name]; ok {
		return nil, c.errf(rt.Location, "%s: output name %q is already used by select list item %d; give one of them another alias with AS", clause, it.t.Name, prev)
	}
	seen[it.t.Name] = i + 1
	if _, err := c.deparse(rt.Val, clause); err != nil {
		return nil, err
	}
	if it.key, err = c.compareKey(rt.Val, clause); err != nil {
		return nil, err
	}
	return it, nil
}
