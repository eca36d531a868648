package generative

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// exprGen draws expressions over one table as a transform reads it: pfx is
// the qualifier column references may use ("" for none).
type exprGen struct {
	r   *rand.Rand
	t   *table
	pfx string
	// fr is the feature stream (features.go): nil draws none. keys are
	// references to columns that identify a row of the FROM, to make the
	// ORDER BY inside an ordered aggregate total; objKey is a text
	// expression unique per row (jsonb_object_agg's key), "" for none.
	fr     *rand.Rand
	keys   []string
	objKey string
}

func (e *exprGen) pick(cs []*column) *column { return cs[e.r.IntN(len(cs))] }

func (e *exprGen) ref(c *column) string {
	if e.pfx != "" && e.r.IntN(2) == 0 {
		return e.pfx + "." + c.name
	}
	return c.name
}

func (e *exprGen) cols(f func(*column) bool) []*column {
	var out []*column
	for _, c := range e.t.cols {
		if f(c) {
			out = append(out, c)
		}
	}
	return out
}

// lit is a literal from c's domain (rarely NULL).
func (e *exprGen) lit(c *column) string {
	if e.r.IntN(30) == 0 {
		return "NULL"
	}
	v := c.domain[e.r.IntN(len(c.domain))]
	if v == longInline || v == longExternal {
		return "'a'"
	}
	return v
}

// numExpr is a numeric expression that cannot overflow or fail.
func (e *exprGen) numExpr() string {
	nums := e.cols(func(c *column) bool { return c.typ.numeric() })
	smallInts := e.cols(func(c *column) bool { return c.typ.integer() && c.small })
	ints := e.cols(func(c *column) bool { return c.typ.integer() })
	decs := e.cols(func(c *column) bool { return c.typ == tNumeric })
	floats := e.cols(func(c *column) bool { return c.typ == tFloat })
	texts := e.cols(func(c *column) bool { return c.typ == tText })
	bools := e.cols(func(c *column) bool { return c.typ == tBool })
	for range 20 {
		switch e.r.IntN(12) {
		case 0, 1, 2, 3:
			if len(nums) > 0 {
				return e.ref(e.pick(nums))
			}
		case 4:
			if len(smallInts) > 0 {
				c := e.ref(e.pick(smallInts))
				return []string{c + " + 1", c + " * 2", c + " % 3", "abs(" + c + ")", "-" + c}[e.r.IntN(5)]
			}
		case 5:
			if len(decs) > 0 {
				c := e.ref(e.pick(decs))
				return []string{c + " * 2", "round(" + c + ", 1)", c + " + 0.5", "-" + c}[e.r.IntN(4)]
			}
		case 6:
			if len(floats) > 0 {
				c := e.ref(e.pick(floats))
				return []string{c + " * 2", "abs(" + c + ")", c + " + 0.5"}[e.r.IntN(3)]
			}
		case 7:
			if len(ints) > 0 {
				return e.ref(e.pick(ints)) + "::numeric + 1"
			}
		case 8:
			if len(texts) > 0 {
				return "length(" + e.ref(e.pick(texts)) + ")"
			}
		case 9:
			if len(nums) > 0 {
				return "CASE WHEN " + e.pred(1) + " THEN " + e.ref(e.pick(nums)) + " ELSE 0 END"
			}
		case 10:
			if len(nums) > 0 {
				return "coalesce(" + e.ref(e.pick(nums)) + ", 0)"
			}
		case 11:
			if len(bools) > 0 {
				return "CASE WHEN " + e.ref(e.pick(bools)) + " THEN 1 ELSE 0 END"
			}
			return "1"
		}
	}
	return "1"
}

// textExpr is a text expression.
func (e *exprGen) textExpr() string {
	texts := e.cols(func(c *column) bool { return c.typ == tText })
	castable := e.cols(func(c *column) bool { return c.typ.integer() || c.typ == tNumeric || c.typ == tBool })
	for range 20 {
		switch e.r.IntN(8) {
		case 0, 1, 2:
			if len(texts) > 0 {
				return e.ref(e.pick(texts))
			}
		case 3:
			if len(texts) > 0 {
				c := e.ref(e.pick(texts))
				return []string{"upper(" + c + ")", "lower(" + c + ")", "coalesce(" + c + ", '-')", c + " || '!'", "substr(" + c + ", 1, 1)"}[e.r.IntN(5)]
			}
		case 4:
			if len(castable) > 0 {
				return e.ref(e.pick(castable)) + "::text"
			}
		case 5:
			return "CASE WHEN " + e.pred(1) + " THEN 'y' ELSE 'n' END"
		}
	}
	return "'k'"
}

func (e *exprGen) dateExpr() string {
	dates := e.cols(func(c *column) bool { return c.typ == tDate })
	if len(dates) == 0 {
		return e.textExpr()
	}
	c := e.ref(e.pick(dates))
	switch e.r.IntN(4) {
	case 0:
		return c + " + 1"
	case 1:
		return "coalesce(" + c + ", '2000-01-01')"
	}
	return c
}

func (e *exprGen) boolExpr() string {
	bools := e.cols(func(c *column) bool { return c.typ == tBool })
	switch e.r.IntN(4) {
	case 0:
		if len(bools) > 0 {
			return e.ref(e.pick(bools))
		}
	case 1:
		if len(bools) > 0 {
			return "NOT " + e.ref(e.pick(bools))
		}
	case 2:
		return e.ref(e.pick(e.t.cols)) + " IS NULL"
	}
	return "(" + e.pred(1) + ")"
}

// ordExpr has min and max.
func (e *exprGen) ordExpr() string {
	switch e.r.IntN(6) {
	case 0, 1:
		return e.numExpr()
	case 2:
		return e.dateExpr()
	case 3:
		// A plain column of any orderable type.
		return e.ref(e.pick(e.cols(func(c *column) bool { return c.typ.orderable() })))
	}
	return e.textExpr()
}

func (e *exprGen) anyExpr() string {
	switch e.r.IntN(8) {
	case 0:
		return e.boolExpr()
	case 1, 2, 3:
		return e.ref(e.pick(e.t.cols))
	}
	return e.ordExpr()
}

// groupExpr is a GROUP BY expression: usually a column.
func (e *exprGen) groupExpr() string {
	{
		// Avoided: a group key too large for a btree entry (an
		// incompressible text of several kB) pauses the transform.
		short := *e
		tt := *e.t
		tt.cols = nil
		for _, c := range e.t.cols {
			if !hasLongExternal(c) {
				tt.cols = append(tt.cols, c)
			}
		}
		short.t = &tt
		e = &short
	}
	if e.r.IntN(3) > 0 {
		return e.ref(e.pick(e.t.cols))
	}
	return e.anyExpr()
}

// mentionsColumn reports whether the expression reads a column.
func (e *exprGen) mentionsColumn(x string) bool {
	for _, c := range e.t.cols {
		if strings.Contains(x, unquote(c.name)) {
			return true
		}
	}
	return false
}

func hasLongExternal(c *column) bool {
	for _, v := range c.domain {
		if v == longExternal {
			return true
		}
	}
	return false
}

var cmpOps = []string{"=", "<>", "<", "<=", ">", ">="}

// pred is a WHERE predicate of nesting depth at most depth.
func (e *exprGen) pred(depth int) string {
	if depth > 0 && e.r.IntN(3) == 0 {
		switch e.r.IntN(3) {
		case 0:
			return "(" + e.pred(depth-1) + " AND " + e.pred(depth-1) + ")"
		case 1:
			return "(" + e.pred(depth-1) + " OR " + e.pred(depth-1) + ")"
		default:
			return "NOT (" + e.pred(depth-1) + ")"
		}
	}
	c := e.pick(e.t.cols)
	ref := e.ref(c)
	switch e.r.IntN(10) {
	case 0:
		if e.r.IntN(2) == 0 {
			return ref + " IS NULL"
		}
		return ref + " IS NOT NULL"
	case 1:
		return fmt.Sprintf("%s IN (%s, %s)", ref, e.lit(c), e.lit(c))
	case 2:
		return fmt.Sprintf("%s NOT IN (%s, %s)", ref, e.lit(c), e.lit(c))
	case 3:
		if c.typ.orderable() {
			return fmt.Sprintf("%s BETWEEN %s AND %s", ref, e.lit(c), e.lit(c))
		}
	case 4:
		switch c.typ {
		case tText:
			return ref + " LIKE " + []string{"'a%'", "'%b%'", "''", "'_'"}[e.r.IntN(4)]
		case tBool:
			return []string{ref, "NOT " + ref, ref + " IS NOT TRUE"}[e.r.IntN(3)]
		}
	case 5:
		return fmt.Sprintf("%s IS DISTINCT FROM %s", ref, e.lit(c))
	case 6:
		return fmt.Sprintf("coalesce(%s, %s) = %s", ref, e.lit(c), e.lit(c))
	case 7:
		return fmt.Sprintf("%s > %d", e.numExpr(), e.r.IntN(5)-1)
	}
	op := cmpOps[e.r.IntN(len(cmpOps))]
	if c.typ == tBool && op != "=" && op != "<>" {
		op = "="
	}
	return fmt.Sprintf("%s %s %s", ref, op, e.lit(c))
}

// transformDef is a generated CREATE TRANSFORM.
type transformDef struct {
	name  string // as written
	table *table // the table it reads (a join's fact table)
	sql   string // the SELECT
	join  string // the join shape ("" for one table)
	// alterable: ALTER TRANSFORM may edit its computed columns (a
	// single-table row transform as rowSelect drew it; alterops.go).
	alterable bool
}

func (d transformDef) create() string {
	return "CREATE TRANSFORM " + d.name + " AS " + d.sql
}

// fromClause picks how the FROM item is written and the qualifier column
// references may then use.
func fromClause(r *rand.Rand, t *table) (from, pfx string) {
	switch r.IntN(4) {
	case 0:
		return t.name + " AS x", "x"
	case 1:
		return t.name + " x", "x"
	}
	return t.name, t.name
}

// rowSelect draws a row transform over t; fr (the feature stream, nil for
// none) now and then makes it a SELECT DISTINCT instead.
func rowSelect(r, fr *rand.Rand, t *table) string {
	from, pfx := fromClause(r, t)
	e := &exprGen{r: r, t: t, pfx: pfx}
	used := map[string]bool{}
	var items []string
	n := 1 + r.IntN(5)
	for i := 0; i < n; i++ {
		if r.IntN(2) == 0 {
			c := e.pick(t.cols)
			if !used[unquote(c.name)] {
				used[unquote(c.name)] = true
				items = append(items, e.ref(c))
				continue
			}
		}
		var x string
		switch r.IntN(5) {
		case 0:
			x = e.numExpr()
		case 1:
			x = e.textExpr()
		case 2:
			x = e.dateExpr()
		case 3:
			x = e.boolExpr()
		default:
			x = e.ref(e.pick(t.cols))
		}
		name := fmt.Sprintf("e%d", i)
		used[name] = true
		items = append(items, x+" AS "+name)
	}
	if r.IntN(8) == 0 {
		items = append(items, "1 AS one")
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from
	if r.IntN(2) == 0 {
		q += " WHERE " + e.pred(2)
	}
	if fr != nil && fr.IntN(100) < featDistinctPct {
		f := &exprGen{r: fr, t: t, pfx: pfx}
		q = "SELECT DISTINCT " + f.distinctList(false) + " FROM " + from
		if fr.IntN(2) == 0 {
			q += " WHERE " + f.pred(2)
		}
	}
	return q
}

// aggSelect draws an aggregate transform over t; fr (the feature stream,
// nil for none) adds the newer aggregates, expressions over aggregates and
// HAVING now and then.
func aggSelect(r, fr *rand.Rand, t *table) string {
	from, pfx := fromClause(r, t)
	e := &exprGen{r: r, t: t, pfx: pfx, fr: fr}
	e.keys, e.objKey = tableKeys(t)
	var items []aggItem
	used := map[string]bool{}
	var groups []string
	ng := []int{0, 1, 1, 1, 2, 2}[r.IntN(6)]
	// Avoided: one GROUP BY expression selected twice (two GROUP BY items
	// naming one column with and without the qualifier) is refused.
	norm := func(x string) string { return strings.ReplaceAll(x, pfx+".", "") }
	for i := 0; i < ng; i++ {
		g := e.groupExpr()
		dup := false
		for _, h := range groups {
			dup = dup || norm(h) == norm(g)
		}
		if dup {
			continue
		}
		groups = append(groups, g)
	}
	groupBy := make([]string, len(groups))
	copy(groupBy, groups)
	for i, g := range groups {
		isCol := false
		for _, c := range t.cols {
			if g == c.name || g == pfx+"."+c.name {
				isCol = !used[unquote(c.name)]
				if isCol {
					used[unquote(c.name)] = true
				}
			}
		}
		if isCol && r.IntN(3) > 0 {
			items = append(items, aggItem{sql: g})
		} else {
			name := fmt.Sprintf("g%d", i)
			used[name] = true
			items = append(items, aggItem{sql: g, name: name})
			if r.IntN(5) == 0 {
				groupBy[i] = name // GROUP BY the output name
			}
		}
	}
	na := 1 + r.IntN(5)
	for i := 0; i < na; i++ {
		a := e.aggCall()
		name := fmt.Sprintf("a%d", i)
		used[name] = true
		items = append(items, aggItem{sql: a, name: name})
	}
	list := aggSelectList(r, e, items, groupBy)
	composed, having := e.aggFeatures(list, len(items), len(groupBy) > 0)
	q := "SELECT " + list + composed + " FROM " + from
	if r.IntN(2) == 0 {
		q += " WHERE " + e.pred(2)
	}
	if len(groupBy) > 0 {
		q += " GROUP BY " + strings.Join(groupBy, ", ")
	}
	return q + having
}

// aggItem is one select-list entry of a drawn aggregate query: its SQL and
// its alias ("" for none).
type aggItem struct{ sql, name string }

// aggCall draws one aggregate call over e's table: now and then (from
// the feature stream) one of the newer aggregates or a FILTER instead.
func (e *exprGen) aggCall() string {
	var a string
	switch e.r.IntN(6) {
	case 0:
		a = "count(*)"
	case 1:
		a = "count(" + e.anyExpr() + ")"
	case 2:
		a = "sum(" + e.numExpr() + ")"
	case 3:
		a = "avg(" + e.numExpr() + ")"
	case 4:
		a = "min(" + e.ordExpr() + ")"
	default:
		a = "max(" + e.ordExpr() + ")"
	}
	if e.fr != nil && e.fr.IntN(100) < featAggPct {
		return e.feat().featAggCall()
	}
	return a
}

// aggSelectList shuffles a drawn aggregate query's items, writes some of
// its GROUP BY entries as ordinals (a constant must be: PostgreSQL reads a
// number in GROUP BY as an ordinal and refuses other constants), and
// renders the select list.
func aggSelectList(r *rand.Rand, e *exprGen, items []aggItem, groupBy []string) string {
	r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	for gi, g := range groupBy {
		for ii, it := range items {
			if it.sql == g && (r.IntN(4) == 0 || !e.mentionsColumn(g)) {
				groupBy[gi] = fmt.Sprint(ii + 1)
			}
		}
	}
	var parts []string
	for _, it := range items {
		if it.name == "" {
			parts = append(parts, it.sql)
		} else {
			parts = append(parts, it.sql+" AS "+it.name)
		}
	}
	return strings.Join(parts, ", ")
}
