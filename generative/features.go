package generative

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Features drawn from their own stream (gen.fr, seeded apart from the
// program's): the newer aggregates, FILTER, expressions over aggregates,
// HAVING, SELECT DISTINCT, derived tables in FROM and chains of transforms
// (doc.go, "Aggregates, DISTINCT, derived tables and chains"). The main
// stream draws exactly what it drew before they existed; a feature only
// replaces what it lands on, so the rest of a program stays as it was.

// Chances, in percent, of each feature where it may land.
const (
	// featAggPct: an aggregate call is one of the newer ones (or has a
	// FILTER).
	featAggPct = 30
	// featComposedPct: an aggregate query gets expressions over its
	// aggregates; featHavingPct: a HAVING.
	featComposedPct = 30
	featHavingPct   = 25
	// featDistinctPct: a row transform is a SELECT DISTINCT instead.
	featDistinctPct = 12
	// featDerivedPct: a transform reads a derived table instead;
	// featLevelPct of those (from the level stream) a derived table that
	// aggregates, which the engine keeps as an inner level.
	featDerivedPct = 12
	featLevelPct   = 25
	// featChainPct: a program defines a chain of transforms during its
	// body (a second one, a quarter of those).
	featChainPct = 25
	// featChainEventPct: a body event of a program with a chain is
	// followed by a lifecycle action on a level of it.
	featChainEventPct = 4
	// nullChainPct: a chain (from the nullable-chain stream) has a level
	// a further level reads keyed by columns that may be NULL (chains.go).
	nullChainPct = 40
)

// nullChainSalt seeds the nullable-chain stream, which only chains draw
// from (after the feature stream drew them as before), so that every other
// draw of a program is what it was before chain levels could have a
// nullable key.
const nullChainSalt = 0x6e756e14

// levelSalt seeds the level stream, which only a derived table draws
// from, so that every other draw of a program is what it was before
// derived tables could aggregate. It is chosen so that the fast lane's
// fixed cases draw no level: a level is a chain, whose every check waits
// one more convergence round (about 3 s more for restart/seed=5 with the
// first salt tried); random cases and the soak draw them (program_test.go
// laneExempt).
const levelSalt = 0x6c766c58

// feat is e drawing from the feature stream.
func (e *exprGen) feat() *exprGen {
	f := *e
	f.r = e.fr
	return &f
}

// tableKeys are a table's key columns as a single-table transform may
// refer to them unqualified, and a text unique per row (jsonb_object_agg's
// key; "" when a key is a date).
func tableKeys(t *table) ([]string, string) {
	var keys, texts []string
	for _, k := range t.key {
		keys = append(keys, k.name)
		texts = append(texts, k.name+"::text")
	}
	for _, k := range t.key {
		if k.typ == tDate {
			// date::text depends on DateStyle: not immutable.
			return keys, ""
		}
	}
	return keys, strings.Join(texts, " || ',' || ")
}

// intExpr is an integer expression (bit_and and friends).
func (e *exprGen) intExpr() string {
	ints := e.cols(func(c *column) bool { return c.typ.integer() })
	small := e.cols(func(c *column) bool { return c.typ.integer() && c.small })
	texts := e.cols(func(c *column) bool { return c.typ == tText })
	switch x := e.r.IntN(5); {
	case x < 2 && len(ints) > 0:
		return e.ref(e.pick(ints))
	case x < 4 && len(small) > 0:
		c := e.ref(e.pick(small))
		return []string{c + " % 3", c + " + 1", "abs(" + c + ")"}[e.r.IntN(3)]
	case x == 4 && len(texts) > 0:
		return "length(" + e.ref(e.pick(texts)) + ")"
	}
	return "CASE WHEN " + e.pred(1) + " THEN 1 ELSE 0 END"
}

// orderBy is the ORDER BY inside an ordered aggregate of x: x, then the
// FROM's key columns so that the order is total (tied rows with different
// values would otherwise come out in either order, in PostgreSQL too).
// Without keys the call is written DISTINCT, which merges the ties.
func (e *exprGen) ordered(fn, x, extra string) string {
	dir := []string{"", "", " DESC", " NULLS FIRST"}[e.r.IntN(4)]
	if len(e.keys) == 0 || e.r.IntN(5) == 0 {
		return fn + "(DISTINCT " + x + extra + " ORDER BY " + x + dir + ")"
	}
	return fn + "(" + x + extra + " ORDER BY " + x + dir + ", " + strings.Join(e.keys, ", ") + ")"
}

// featAggCall draws one of the newer aggregate calls: DISTINCT inside
// count, sum and avg; bool_and, bool_or, every; bit_and, bit_or, bit_xor;
// string_agg, array_agg and jsonb_agg with a total ORDER BY;
// jsonb_object_agg keyed by something unique per row; any of them, or a
// plain one, with a FILTER.
func (e *exprGen) featAggCall() string {
	var a string
	switch e.r.IntN(13) {
	case 0:
		a = "count(DISTINCT " + e.anyExpr() + ")"
	case 1:
		a = []string{"sum", "avg"}[e.r.IntN(2)] + "(DISTINCT " + e.numExpr() + ")"
	case 2, 3:
		a = []string{"bool_and", "bool_or", "every"}[e.r.IntN(3)] + "(" + e.boolExpr() + ")"
	case 4, 5:
		a = []string{"bit_and", "bit_or", "bit_xor"}[e.r.IntN(3)] + "(" + e.intExpr() + ")"
	case 6, 7:
		a = e.ordered("string_agg", e.textExpr(), ", "+[]string{"','", "'|'"}[e.r.IntN(2)])
	case 8:
		a = e.ordered("array_agg", e.anyExpr(), "")
	case 9:
		a = e.ordered("jsonb_agg", e.anyExpr(), "")
	case 10:
		if e.objKey != "" {
			a = "jsonb_object_agg(" + e.objKey + ", " + e.anyExpr() + ")"
			break
		}
		fallthrough
	default:
		a = []string{"count(*)", "count(" + e.anyExpr() + ")", "sum(" + e.numExpr() + ")", "max(" + e.ordExpr() + ")"}[e.r.IntN(4)]
		return a + " FILTER (WHERE " + e.pred(1) + ")"
	}
	if e.r.IntN(5) == 0 {
		a += " FILTER (WHERE " + e.pred(1) + ")"
	}
	return a
}

// composedAgg is an expression over aggregates (never over a column
// outside one): ratios guarded by nullif, differences, CASE on a count.
func (e *exprGen) composedAgg() string {
	n := e.numExpr()
	switch e.r.IntN(7) {
	case 0:
		return "sum(" + n + ") / nullif(count(*), 0)"
	case 1:
		return "100.00 * sum(CASE WHEN " + e.pred(1) + " THEN " + n + " ELSE 0 END) / nullif(sum(" + n + "), 0)"
	case 2:
		return "count(*) - count(" + e.anyExpr() + ")"
	case 3:
		return "coalesce(sum(" + n + "), 0) + count(*)"
	case 4:
		return "round(avg(" + n + ")::numeric, 2)"
	case 5:
		return fmt.Sprintf("CASE WHEN count(*) > %d THEN 'many' ELSE 'few' END", e.r.IntN(4))
	}
	o := e.ordExpr()
	return "max(" + o + ") IS DISTINCT FROM min(" + o + ")"
}

// havingCond is a HAVING condition over aggregates.
func (e *exprGen) havingCond() string {
	switch e.r.IntN(7) {
	case 0, 1:
		return fmt.Sprintf("count(*) > %d", e.r.IntN(4))
	case 2:
		return "sum(" + e.numExpr() + ") IS NOT NULL"
	case 3:
		return "count(" + e.anyExpr() + ") >= 1"
	case 4:
		return "max(" + e.ordExpr() + ") IS NOT NULL"
	case 5:
		return "bool_or(" + e.boolExpr() + ")"
	}
	return "(" + e.havingCond() + []string{" AND ", " OR "}[e.r.IntN(2)] + e.havingCond() + ")"
}

// aggFeatures draws, from the feature stream, expressions over aggregates
// to append to the select list list of n items (", x AS q0, …") and a
// HAVING clause (" HAVING …"); both "" when none. grouped: the query has
// a GROUP BY.
func (e *exprGen) aggFeatures(list string, n int, grouped bool) (composed, having string) {
	if e.fr == nil {
		return "", ""
	}
	f := e.feat()
	if f.r.IntN(100) < featComposedPct {
		for i := 1 + f.r.IntN(2); i > 0; i-- {
			composed += fmt.Sprintf(", %s AS q%d", f.composedAgg(), n)
			n++
		}
	}
	if f.r.IntN(100) < featHavingPct {
		having = " HAVING " + f.havingCond()
	}
	return composed, having
}

// distinctList draws the select list of a SELECT DISTINCT (kept as GROUP
// BY every item): 1–3 items over columns, no long texts (a group key must
// fit a btree entry), each expression once, each output name once;
// qualified (a join) aliases every item, as two tables' columns may share
// a name.
func (e *exprGen) distinctList(qualified bool) string {
	var items []string
	seen, names := map[string]bool{}, map[string]bool{}
	norm := func(x string) string {
		if e.pfx == "" {
			return x
		}
		return strings.ReplaceAll(x, e.pfx+".", "")
	}
	for i, n := 0, 1+e.r.IntN(3); i < n; i++ {
		x := e.groupExpr()
		if seen[norm(x)] || !e.mentionsColumn(x) {
			continue
		}
		seen[norm(x)] = true
		plain := false
		for _, c := range e.t.cols {
			plain = plain || norm(x) == c.name
		}
		if plain && !qualified && !names[unquote(norm(x))] {
			names[unquote(norm(x))] = true
			items = append(items, x)
			continue
		}
		items = append(items, fmt.Sprintf("%s AS e%d", x, i))
	}
	if len(items) == 0 {
		for _, c := range e.t.cols {
			if !hasLongExternal(c) {
				return c.name + " AS e0"
			}
		}
		return e.t.cols[0].name + " IS NULL AS e0"
	}
	return strings.Join(items, ", ")
}

// derivedSelect draws a transform over a derived table the engine
// flattens: a subquery in FROM that only projects and filters (one table,
// or a join of the program's join tables), its key columns among its
// items, read by a row or an aggregate query.
func (g *gen) derivedSelect(r *rand.Rand) string {
	var inner []string // the subquery's items, unaliased
	var from, where string
	var srcCols []*column // the column behind each plain item (nil: an expression)
	var ie *exprGen
	nkeys := 0
	if g.join && r.IntN(3) > 0 {
		j := newJoinDraw(r, g.js, joinShapes[r.IntN(len(joinShapes))])
		ie = &exprGen{r: r, t: view(j.srcs)}
		for _, s := range j.srcs {
			for _, k := range s.t.key {
				inner = append(inner, s.ref+"."+k.name)
				srcCols = append(srcCols, viewCol(ie.t, s.ref+"."+k.name))
			}
		}
		from, where = j.fromSQL(), j.whereSQL()
	} else {
		t := g.tables[r.IntN(len(g.tables))]
		var pfx string
		from, pfx = fromClause(r, t)
		ie = &exprGen{r: r, t: t, pfx: pfx}
		for _, k := range t.key {
			inner = append(inner, ie.ref(k))
			srcCols = append(srcCols, k)
		}
		if r.IntN(2) == 0 {
			where = " WHERE " + ie.pred(2)
		}
	}
	nkeys = len(inner)
	for i := 1 + r.IntN(3); i > 0; i-- {
		switch r.IntN(5) {
		case 0:
			inner = append(inner, "("+ie.numExpr()+")::numeric")
			srcCols = append(srcCols, &column{typ: tNumeric, sqlType: "numeric", domain: []string{"0", "1.5", "-1", "10"}})
		case 1:
			x := ie.textExpr()
			c := &column{typ: tText, sqlType: "text", small: true, domain: []string{"'a'", "''", "'y'", "'n'", "'A'"}}
			for _, src := range ie.t.cols {
				// Over a long text it may be long too: no group key then.
				if hasLongExternal(src) && strings.Contains(x, ie.ref(src)) {
					c.domain = append(c.domain, longExternal)
				}
			}
			inner = append(inner, x)
			srcCols = append(srcCols, c)
		default:
			// Each column once: two outputs of one column would be one
			// expression twice once flattened (refused in GROUP BY).
			c := ie.pick(ie.t.cols)
			if colIndex(srcCols, c) >= 0 {
				continue
			}
			inner = append(inner, c.name)
			srcCols = append(srcCols, c)
		}
	}
	// The derived table as the outer query sees it.
	dt := &table{name: "s"}
	names := make([]string, len(inner))
	for i, src := range srcCols {
		c := *src
		c.name = fmt.Sprintf("v%d", i)
		if i < nkeys {
			c.name = fmt.Sprintf("k%d", i)
		}
		c.notNull = false
		names[i] = c.name
		dt.cols = append(dt.cols, &c)
		if i < nkeys {
			dt.key = append(dt.key, &c)
		}
	}
	var sub string
	if r.IntN(5) == 0 {
		// Column aliases on the derived table: AS s(k0, …).
		sub = "(SELECT " + strings.Join(inner, ", ") + " FROM " + from + where + ") AS s(" + strings.Join(names, ", ") + ")"
	} else {
		var items []string
		for i, x := range inner {
			items = append(items, x+" AS "+names[i])
		}
		sub = "(SELECT " + strings.Join(items, ", ") + " FROM " + from + where + ") " + []string{"AS s", "s"}[r.IntN(2)]
	}
	e := &exprGen{r: r, t: dt, pfx: "s", fr: r}
	depth := 2
	var q string
	if r.IntN(2) == 0 {
		q = derivedRow(e, sub, depth)
	} else {
		e.keys = names[:nkeys]
		q = derivedAgg(e, sub, depth)
	}
	if g.lr.IntN(100) < featLevelPct {
		// The draws above stay as they were, so the feature stream goes
		// on unchanged; the level stream draws what replaces them.
		return levelSelect(g.lr, from, where, inner, srcCols)
	}
	return q
}

// levelSelect draws a transform over a derived table that aggregates (as
// TPC-H Q13 does): the subquery groups the rows of from by one or two of
// the items inner (whose columns are srcCols), or by none (a total), and
// counts them and takes a max, and a row or an aggregate query reads it.
// The engine keeps it as an inner level (ADR 0018); a group key that may
// be NULL gets a surrogate key.
func levelSelect(r *rand.Rand, from, where string, inner []string, srcCols []*column) string {
	ng := 1 + r.IntN(2)
	if r.IntN(5) == 0 {
		ng = 0
	}
	// A group key must fit a btree entry: an incompressible text of
	// several kB as the level's key is refused by its target (held), as
	// groupExpr avoids for every other GROUP BY.
	var keyable []int
	for i := range inner {
		if !hasLongExternal(srcCols[i]) {
			keyable = append(keyable, i)
		}
	}
	ng = min(ng, len(keyable))
	dt := &table{name: "s"}
	var items, names []string
	for j, p := range r.Perm(len(keyable))[:ng] {
		i := keyable[p]
		c := *srcCols[i]
		c.name, c.notNull = fmt.Sprintf("k%d", j), false
		dt.cols, dt.key = append(dt.cols, &c), append(dt.key, &c)
		items, names = append(items, inner[i]), append(names, c.name)
	}
	groups := make([]string, ng)
	for j := range groups {
		groups[j] = fmt.Sprint(j + 1)
	}
	items, names = append(items, "count(*)"), append(names, "n")
	dt.cols = append(dt.cols, &column{name: "n", typ: tBigint, sqlType: "bigint", small: true, domain: []string{"0", "1", "2", "5"}})
	for _, i := range r.Perm(len(inner)) {
		// max keeps its argument's type, and is exact (a float sum is not).
		if t := srcCols[i].typ; t == tInt || t == tBigint || t == tNumeric || t == tText || t == tDate {
			c := *srcCols[i]
			c.name, c.notNull = "m", false
			dt.cols = append(dt.cols, &c)
			items, names = append(items, "max("+inner[i]+")"), append(names, "m")
			break
		}
	}
	sub := "(SELECT "
	if r.IntN(3) == 0 {
		// Column aliases on the derived table name its outputs.
		sub += strings.Join(items, ", ") + " FROM " + from + where
	} else {
		for i := range items {
			items[i] += " AS " + names[i]
		}
		sub += strings.Join(items, ", ") + " FROM " + from + where
		names = nil
	}
	if ng > 0 {
		sub += " GROUP BY " + strings.Join(groups, ", ")
	}
	sub += ") AS s"
	if names != nil {
		sub += "(" + strings.Join(names, ", ") + ")"
	}
	e := &exprGen{r: r, t: dt, pfx: "s", fr: r}
	if ng == 0 || r.IntN(2) == 0 {
		return derivedRow(e, sub, 2)
	}
	for _, c := range dt.key {
		e.keys = append(e.keys, c.name) // the groups: one row each
	}
	return derivedAgg(e, sub, 2)
}

// derivedRow is a row query over the derived table sub.
func derivedRow(e *exprGen, sub string, depth int) string {
	r := e.r
	var items []string
	used := map[string]bool{}
	for i, n := 0, 1+r.IntN(4); i < n; i++ {
		c := e.pick(e.t.cols)
		if !used[c.name] && r.IntN(2) == 0 {
			used[c.name] = true
			items = append(items, e.ref(c))
			continue
		}
		items = append(items, fmt.Sprintf("%s AS e%d", []func() string{e.numExpr, e.textExpr, e.boolExpr, e.anyExpr}[r.IntN(4)](), i))
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + sub
	if r.IntN(2) == 0 {
		q += " WHERE " + e.pred(depth)
	}
	return q
}

// derivedAgg is an aggregate query over the derived table sub (as TPC-H
// Q7, Q8 and Q9 aggregate theirs).
func derivedAgg(e *exprGen, sub string, depth int) string {
	r := e.r
	var items, groups []string
	for i, n := 0, r.IntN(3); i < n; i++ {
		g := e.groupExpr()
		dup := false
		for _, h := range groups {
			dup = dup || strings.ReplaceAll(h, "s.", "") == strings.ReplaceAll(g, "s.", "")
		}
		if dup || !e.mentionsColumn(g) {
			continue
		}
		groups = append(groups, g)
		items = append(items, fmt.Sprintf("%s AS g%d", g, i))
	}
	for i := 1 + r.IntN(3); i > 0; i-- {
		items = append(items, fmt.Sprintf("%s AS a%d", e.aggCall(), len(items)))
	}
	composed, having := e.aggFeatures(strings.Join(items, ", "), len(items), len(groups) > 0)
	q := "SELECT " + strings.Join(items, ", ") + composed + " FROM " + sub
	if r.IntN(2) == 0 {
		q += " WHERE " + e.pred(depth)
	}
	if len(groups) > 0 {
		q += " GROUP BY " + strings.Join(groups, ", ")
	}
	return q + having
}
