package generative

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// SQL shapes (issue 24): definitions that use what the engine keeps
// through dependency levels, set operations, windows and top-K (ADR 0030,
// 0032, 0033) — subqueries in expressions (EXISTS and NOT EXISTS
// correlated on an equality, IN and NOT IN of a subquery, NOT IN over a
// column that may be NULL, an uncorrelated scalar aggregate in WHERE, a
// correlated scalar aggregate in the select list), UNION ALL, UNION,
// INTERSECT and EXCEPT of two or three branches, window functions
// (rank, dense_rank, row_number, lag, lead, first_value, ntile, sum,
// count and max OVER, a ROWS frame) and a filter on a window's result in
// an outer query, top-K (ORDER BY … LIMIT [OFFSET]) and DISTINCT ON, and
// WITH, its CTE read once or twice. A shape reads the program's tables
// or, nested (up to two levels), a derived table or CTE that is itself a
// shape: a set operation, a window, an aggregate, a subquery filter. The
// last level of a chain may be one too, over the level below.
//
// Determinism: a window call whose value depends on the order of tied
// rows (row_number, lag, lead, first_value, ntile, a ROWS frame) orders
// by every source's key, as the engine requires (windowKeys); a top-K's
// ORDER BY ends with the key (or, over a set operation, names every
// output, so tied rows are equal rows), and DISTINCT ON's ORDER BY ends
// with the key; sums over windows read no float8 (its sums depend on the
// order of the rows). So the oracle's EXCEPT ALL comparison has one
// answer to compare with.
//
// Drawn from a stream of their own (shapesSalt), after every other stream
// drew the definition it replaces (a definition the nested stream
// replaced stays that), so every other draw of a program stays as it was.

const (
	// shapesSalt seeds the shapes stream. It is chosen so that the fast
	// lane's fixed cases draw few shapes (four: restart/5, held/13 and two
	// in poison/214), which catch the planted exists_misses_last_delete
	// (held/13), window_partition_stale and topk_no_refill (poison/214);
	// stale_scalar is not caught yet (restart/5's scalar does not move a
	// row across its comparison).
	shapesSalt = 0x73716da1
	// featShapesPct: a definition is replaced by a shape; in a chain, the
	// last level is, twice as often.
	featShapesPct = 8
)

// shapesPct is featShapesPct, or TRELLIS_GEN_SHAPES_PCT (0–100) to draw
// more or fewer of them (a soak aimed at them; the fast lane's fixed cases
// assume the default).
func shapesPct() int {
	if v, err := strconv.Atoi(os.Getenv("TRELLIS_GEN_SHAPES_PCT")); err == nil && v >= 0 && v <= 100 {
		return v
	}
	return featShapesPct
}

// shapeDef is a definition the shapes stream drew, and what it drew
// (TestShapePrograms).
type shapeDef struct {
	sql   string
	feats map[string]bool
}

// rel is a FROM item a shape reads: a table, or a derived table or CTE.
type rel struct {
	item string    // as written in FROM, with its alias
	ref  string    // its alias
	cols []*column // its columns, names unqualified
	// key: columns that identify a row (nil: none known); allCols: the
	// rows are distinct over all columns (a UNION, INTERSECT, EXCEPT).
	key     []*column
	allCols bool
	// big: reads a table that gets bulk rows (a window over all of it
	// re-derives thousands of rows per batch).
	big bool
	// t: the program table it is (nil for a derived table or CTE).
	t *table
}

// view is r's columns qualified by its alias, for exprGen.
func (r *rel) view() *table {
	v := &table{name: "(" + r.ref + ")"}
	for _, c := range r.cols {
		cc := *c
		cc.name = r.ref + "." + c.name
		v.cols = append(v.cols, &cc)
	}
	return v
}

func (r *rel) q(c *column) string { return r.ref + "." + c.name }

func (r *rel) keyRefs() []string {
	var out []string
	for _, k := range r.key {
		out = append(out, r.q(k))
	}
	return out
}

// shapeDraw draws one shape.
type shapeDraw struct {
	g     *gen
	r     *rand.Rand
	feats map[string]bool
	// n numbers aliases and CTE names, unique across the query.
	n int
	// ctes are the WITH clause's entries drawn so far.
	ctes []string
	// bare: the tables of a CTE read twice are written unaliased. Pulled
	// up twice, an aliased table's copies would share its alias, which the
	// engine refuses ("the name … is used by two FROM items"; it renames
	// only unaliased ones, renameShared), though PostgreSQL accepts it.
	bare bool
	// srf: the draw is the function stream's (srfshapes.go), whose
	// sources and derived tables hold functions in FROM now and then; nil
	// on the shapes stream, which then draws what it always drew.
	srf *srfDraw
}

func (sd *shapeDraw) alias(p string) string {
	sd.n++
	return fmt.Sprintf("%s%d", p, sd.n)
}

func (sd *shapeDraw) exprs(r *rel) *exprGen { return &exprGen{r: sd.r, t: r.view()} }

// big: t gets bulk rows while small apply batches re-derive them a few
// keys at a time.
func (sd *shapeDraw) big(t *table) bool {
	return sd.g.smallBatch && t.shiftKey != nil && !t.dim
}

// table is a program table as a rel under a fresh alias (bare: under
// its own name).
func (sd *shapeDraw) table(t *table) *rel {
	if sd.bare {
		return &rel{item: t.name, ref: t.name, cols: t.cols, key: t.key, big: sd.big(t), t: t}
	}
	return sd.aliased(t)
}

// aliased is table, always under an alias (a subquery's table, which
// an outer reference must not be confused with).
func (sd *shapeDraw) aliased(t *table) *rel {
	a := sd.alias("a")
	item := t.name + []string{" AS ", " "}[sd.r.IntN(2)] + a
	return &rel{item: item, ref: a, cols: t.cols, key: t.key, big: sd.big(t), t: t}
}

func (sd *shapeDraw) anyTable() *table { return sd.g.tables[sd.r.IntN(len(sd.g.tables))] }

// short are cols without incompressible long texts (a group or
// DISTINCT key must fit a btree entry).
func short(cols []*column) []*column {
	var out []*column
	for _, c := range cols {
		if !hasLongExternal(c) {
			out = append(out, c)
		}
	}
	return out
}

// comparable: a = b is an operator PostgreSQL has.
func comparable(a, b *column) bool {
	return a.typ == b.typ || a.typ.numeric() && b.typ.numeric()
}

// pair draws columns of a and b that compare: a link of the join schema
// when a and b are its tables, else columns of comparable types.
func (sd *shapeDraw) pair(a, b *rel, at, bt *table) (*column, *column, bool) {
	r := sd.r
	if js := sd.g.js; js != nil && at != nil && bt != nil && r.IntN(3) > 0 {
		var cands [][2]*column
		for _, lk := range js.links() {
			if lk.src == at && lk.dst == bt {
				cands = append(cands, [2]*column{lk.from[0], lk.to[0]})
			}
			if lk.src == bt && lk.dst == at {
				cands = append(cands, [2]*column{lk.to[0], lk.from[0]})
			}
		}
		if len(cands) > 0 {
			c := cands[r.IntN(len(cands))]
			return c[0], c[1], true
		}
	}
	var cands [][2]*column
	for _, x := range short(a.cols) {
		for _, y := range short(b.cols) {
			if comparable(x, y) && x.typ != tFloat && y.typ != tFloat {
				cands = append(cands, [2]*column{x, y})
			}
		}
	}
	if len(cands) == 0 {
		return nil, nil, false
	}
	// Key columns first: their small domains make matches.
	c := cands[r.IntN(len(cands))]
	for i := 0; i < 2; i++ {
		d := cands[r.IntN(len(cands))]
		if b.isKeyCol(d[1]) || a.isKeyCol(d[0]) {
			c = d
		}
	}
	return c[0], c[1], true
}

func (r *rel) isKeyCol(c *column) bool { return colIndex(r.key, c) >= 0 }

// shapeSelect draws a definition of one of the shapes.
func (g *gen) shapeSelect(r *rand.Rand) shapeDef {
	sd := &shapeDraw{g: g, r: r, feats: map[string]bool{}}
	var q string
	switch x := r.IntN(20); {
	case x < 6:
		q = sd.sublinkQuery(1)
	case x < 9:
		q = sd.setopQuery(1)
	case x < 13:
		q = sd.windowQuery(1)
	case x < 17:
		q = sd.topKQuery(1)
	default:
		q = sd.withQuery(1)
	}
	return shapeDef{sql: sd.withClause() + q, feats: sd.feats}
}

// withClause is the WITH clause of the CTEs drawn ("" for none).
func (sd *shapeDraw) withClause() string {
	if len(sd.ctes) == 0 {
		return ""
	}
	return "WITH " + strings.Join(sd.ctes, ", ") + " "
}

// source is what a shape at depth reads: a table or, below the second
// level now and then, a derived table or CTE that is a shape itself.
func (sd *shapeDraw) source(depth int, needKey bool) *rel {
	if sd.srf != nil && depth < 2 && sd.r.IntN(2) == 0 {
		return sd.srf.rel(depth, needKey)
	}
	if depth < 2 && sd.r.IntN(4) == 0 {
		if d := sd.derived(depth+1, needKey); d != nil {
			return d
		}
	}
	return sd.table(sd.anyTable())
}

// derived draws a derived table (or, one time in three, a CTE) whose
// body is a projection with the key, an aggregate, a set operation or a
// window query; nil when none fits (needKey: it must have a key).
func (sd *shapeDraw) derived(depth int, needKey bool) *rel {
	r := sd.r
	if sd.srf != nil && r.IntN(2) == 0 {
		return sd.srf.rel(depth, needKey)
	}
	t := sd.anyTable()
	src := sd.table(t)
	e := sd.exprs(src)
	var body string
	out := &rel{big: src.big}
	switch x := r.IntN(8); {
	case x < 3:
		// A projection (flattened): the key, a few columns, a computed
		// output, a filter; now and then a subquery filter too.
		var items []string
		for i, k := range t.key {
			c := descCol(k, fmt.Sprintf("k%d", i), true)
			items = append(items, src.q(k)+" AS "+c.name)
			out.cols, out.key = append(out.cols, c), append(out.key, c)
		}
		for i, c := range r.Perm(len(t.cols))[:min(len(t.cols), 1+r.IntN(2))] {
			cc := descCol(t.cols[c], fmt.Sprintf("v%d", i), false)
			items = append(items, src.q(t.cols[c])+" AS "+cc.name)
			out.cols = append(out.cols, cc)
		}
		if r.IntN(3) == 0 {
			items = append(items, "("+e.numExpr()+")::numeric AS x0")
			out.cols = append(out.cols, &column{name: "x0", typ: tNumeric, sqlType: "numeric", domain: []string{"0", "1", "1.5", "-1"}})
		}
		body = "SELECT " + strings.Join(items, ", ") + " FROM " + src.item
		var conds []string
		if r.IntN(2) == 0 {
			conds = append(conds, e.pred(1))
		}
		if depth < 2 && r.IntN(3) == 0 {
			if c := sd.sublinkCond(src, depth+1); c != "" {
				conds = append(conds, c)
				sd.feats["nested"] = true
			}
		}
		if len(conds) > 0 {
			body += " WHERE " + strings.Join(conds, " AND ")
		}
		sd.feats["derived projection"] = true
	case x < 5:
		// An aggregate (an inner level): grouped by one column.
		gs := short(t.cols)
		gc := gs[r.IntN(len(gs))]
		g := descCol(gc, "g0", gc.notNull)
		items := []string{src.q(gc) + " AS g0", "count(*) AS n"}
		out.cols = append(out.cols, g, &column{name: "n", typ: tBigint, sqlType: "bigint", small: true, domain: []string{"0", "1", "2", "3"}})
		if ms := e.cols(func(c *column) bool { return c.typ.orderable() && !hasLongExternal(c) }); len(ms) > 0 {
			m := e.pick(ms)
			items = append(items, "max("+m.name+") AS m")
			out.cols = append(out.cols, descCol(m, "m", false))
		}
		out.key = []*column{g}
		body = "SELECT " + strings.Join(items, ", ") + " FROM " + src.item + " GROUP BY 1"
		sd.feats["derived aggregate"] = true
	case x < 7:
		if needKey {
			return nil
		}
		q, cols := sd.setop(depth)
		body, out.cols, out.allCols = q, cols, true
		sd.feats["set operation in FROM"] = true
	default:
		// A window query (a level): the key, a column, a window value.
		if sd.big(t) {
			return nil
		}
		var items []string
		for i, k := range t.key {
			c := descCol(k, fmt.Sprintf("k%d", i), true)
			items = append(items, src.q(k)+" AS "+c.name)
			out.cols, out.key = append(out.cols, c), append(out.key, c)
		}
		call, col := sd.windowCall(src, t, sd.partition(src, t))
		col.name = "w0"
		items = append(items, call+" AS w0")
		out.cols = append(out.cols, col)
		body = "SELECT " + strings.Join(items, ", ") + " FROM " + src.item
		sd.feats["window in FROM"] = true
	}
	if depth > 1 {
		sd.feats["nested"] = true
	}
	if r.IntN(3) == 0 {
		// A CTE.
		name := sd.alias("c")
		sd.ctes = append(sd.ctes, name+" AS ("+body+")")
		out.ref = sd.alias("r")
		out.item = name + " " + out.ref
		sd.feats["WITH once"] = true
		return out
	}
	out.ref = sd.alias("d")
	out.item = "(" + body + ") " + []string{"", "AS "}[r.IntN(2)] + out.ref
	return out
}

// outputs draws 1–3 select items over src (its key first when keyed):
// columns and expressions, named o<i>.
func (sd *shapeDraw) outputs(src *rel, withKey bool) []string {
	r := sd.r
	e := sd.exprs(src)
	var items []string
	if withKey {
		for _, k := range src.keyRefs() {
			items = append(items, fmt.Sprintf("%s AS o%d", k, len(items)))
		}
	}
	for i := 1 + r.IntN(2); i > 0; i-- {
		var x string
		switch r.IntN(4) {
		case 0:
			x = e.numExpr()
		case 1:
			x = e.textExpr()
		default:
			x = e.pick(e.t.cols).name
		}
		items = append(items, fmt.Sprintf("%s AS o%d", x, len(items)))
	}
	return items
}

// ---- subqueries in expressions ----

// sublinkCond draws a condition of outer (a table t, or a derived table
// when t is nil) holding a subquery: [NOT] EXISTS correlated on an
// equality, [NOT] IN, or an uncorrelated scalar aggregate compared.
func (sd *shapeDraw) sublinkCond(outer *rel, depth int) string {
	r := sd.r
	t := outer.t
	bt := sd.anyTable()
	inner := sd.aliased(bt)
	ie := sd.exprs(inner)
	filter := func() string {
		if r.IntN(2) == 0 {
			return " AND " + ie.pred(1)
		}
		return ""
	}
	x, y, ok := sd.pair(outer, inner, t, bt)
	switch k := r.IntN(10); {
	case k < 4 && ok:
		not := r.IntN(2) == 0
		if not {
			sd.feats["NOT EXISTS"] = true
		} else {
			sd.feats["EXISTS"] = true
		}
		return []string{"", "NOT "}[b2i(not)] + "EXISTS (SELECT 1 FROM " + inner.item + " WHERE " + inner.q(y) + " = " + outer.q(x) + filter() + ")"
	case k < 7 && ok:
		not := r.IntN(2) == 0
		sub := "SELECT " + inner.q(y) + " FROM " + inner.item
		if f := filter(); f != "" {
			sub += " WHERE" + strings.TrimPrefix(f, " AND")
		}
		if depth < 2 && r.IntN(4) == 0 {
			// The subquery a set operation: the values of two tables.
			if u := sd.valuesUnion(y); u != "" {
				sub = "SELECT " + inner.q(y) + " FROM " + inner.item + " UNION " + u
				sd.feats["set operation in IN"] = true
				sd.feats["nested"] = true
			}
		}
		if not {
			sd.feats["NOT IN"] = true
			if !y.notNull {
				sd.feats["NOT IN nullable"] = true
			}
		} else {
			sd.feats["IN"] = true
		}
		return outer.q(x) + []string{" IN (", " NOT IN ("}[b2i(not)] + sub + ")"
	}
	// An uncorrelated scalar aggregate compared with a column.
	ons := sd.exprs(outer).cols(func(c *column) bool { return c.typ.numeric() && c.typ != tFloat })
	ins := ie.cols(func(c *column) bool { return c.typ.numeric() && c.typ != tFloat })
	if len(ons) == 0 || len(ins) == 0 {
		if ok {
			sd.feats["EXISTS"] = true
			return "EXISTS (SELECT 1 FROM " + inner.item + " WHERE " + inner.q(y) + " = " + outer.q(x) + ")"
		}
		return ""
	}
	o, m := ons[r.IntN(len(ons))], ins[r.IntN(len(ins))]
	agg := []string{"avg(", "min(", "max(", "sum("}[r.IntN(4)] + m.name + ")"
	where := ""
	if r.IntN(2) == 0 {
		where = " WHERE " + ie.pred(1)
	}
	sd.feats["scalar in WHERE"] = true
	return o.name + " " + []string{">", "<", ">=", "<="}[r.IntN(4)] + " (SELECT " + agg + " FROM " + inner.item + where + ")"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// valuesUnion is a SELECT of a column comparable with y from some table
// ("" when none has one), for a set operation inside IN.
func (sd *shapeDraw) valuesUnion(y *column) string {
	for range 4 {
		t := sd.anyTable()
		s := sd.aliased(t)
		var cs []*column
		for _, c := range short(t.cols) {
			if comparable(c, y) && c.typ != tFloat {
				cs = append(cs, c)
			}
		}
		if len(cs) > 0 {
			q := "SELECT " + s.q(cs[sd.r.IntN(len(cs))]) + " FROM " + s.item
			if sd.r.IntN(2) == 0 {
				q += " WHERE " + sd.exprs(s).pred(1)
			}
			return q
		}
	}
	return ""
}

// scalarItem is a correlated scalar aggregate of the select list over
// outer ("" when no pair of columns compares).
func (sd *shapeDraw) scalarItem(outer *rel) string {
	r := sd.r
	t := outer.t
	bt := sd.anyTable()
	inner := sd.aliased(bt)
	x, y, ok := sd.pair(outer, inner, t, bt)
	if !ok {
		return ""
	}
	ie := sd.exprs(inner)
	agg := "count(*)"
	nums := ie.cols(func(c *column) bool { return c.typ.numeric() && c.typ != tFloat })
	ords := ie.cols(func(c *column) bool { return c.typ.orderable() && !hasLongExternal(c) })
	switch r.IntN(4) {
	case 1:
		if len(nums) > 0 {
			agg = "sum(" + ie.pick(nums).name + ")"
		}
	case 2:
		if len(ords) > 0 {
			agg = []string{"max(", "min("}[r.IntN(2)] + ie.pick(ords).name + ")"
		}
	}
	where := ""
	if r.IntN(3) == 0 {
		where = " AND " + ie.pred(1)
	}
	sd.feats["scalar in select list"] = true
	return "(SELECT " + agg + " FROM " + inner.item + " WHERE " + inner.q(y) + " = " + outer.q(x) + where + ")"
}

// sublinkQuery is a query of one table (or a derived table) filtered by a
// subquery, or selecting a correlated scalar aggregate: a row query, or
// now and then an aggregate of the rows that pass.
func (sd *shapeDraw) sublinkQuery(depth int) string {
	r := sd.r
	src := sd.source(depth, false)
	e := sd.exprs(src)
	items := sd.outputs(src, src.key != nil && r.IntN(2) == 0)
	scalar := false
	if r.IntN(4) == 0 {
		if s := sd.scalarItem(src); s != "" {
			items = append(items, fmt.Sprintf("%s AS o%d", s, len(items)))
			scalar = true
		}
	}
	cond := ""
	if !scalar || r.IntN(2) == 0 {
		cond = sd.sublinkCond(src, depth)
	}
	if cond == "" && !scalar {
		if s := sd.scalarItem(src); s != "" {
			items = append(items, fmt.Sprintf("%s AS o%d", s, len(items)))
			scalar = true
		}
	}
	where := ""
	if cond != "" {
		switch r.IntN(5) {
		case 0:
			where = " WHERE (" + cond + " OR " + e.pred(1) + ")"
			sd.feats["subquery under OR"] = true
		case 1:
			where = " WHERE " + e.pred(1) + " AND " + cond
		default:
			where = " WHERE " + cond
		}
	}
	if !scalar && len(short(src.cols)) > 0 && r.IntN(4) == 0 {
		// An aggregate of the rows that pass.
		gs := short(src.cols)
		g := src.q(gs[r.IntN(len(gs))])
		sd.feats["aggregate over a subquery filter"] = true
		return "SELECT " + g + " AS g0, count(*) AS n FROM " + src.item + where + " GROUP BY 1"
	}
	return "SELECT " + strings.Join(items, ", ") + " FROM " + src.item + where
}

// ---- set operations ----

// setop draws a set operation of two or three branches over the
// program's tables: each branch selects columns (or expressions) of the
// same classes, named u0, u1 by the first; its output columns.
func (sd *shapeDraw) setop(depth int) (string, []*column) {
	r := sd.r
	ops := []string{"UNION ALL", "UNION", "INTERSECT", "EXCEPT"}
	op := ops[r.IntN(len(ops))]
	nb := 2
	if r.IntN(3) == 0 {
		nb = 3
		sd.feats["three branches"] = true
	}
	ncols := 1 + r.IntN(2)
	classes := []typ{tInt, tText, tBool, tNumeric, tDate}
	var sig []typ
	for i := 0; i < ncols; i++ {
		sig = append(sig, classes[r.IntN(len(classes))])
	}
	var outCols []*column
	var branches []string
	for b := 0; b < nb; b++ {
		t := sd.anyTable()
		s := sd.table(t)
		e := sd.exprs(s)
		var items []string
		for i, cl := range sig {
			x, c := sd.classExpr(e, cl, op != "UNION ALL")
			if b == 0 {
				cc := *c
				cc.name, cc.notNull = fmt.Sprintf("u%d", i), false
				outCols = append(outCols, &cc)
				x += " AS " + cc.name
			}
			items = append(items, x)
		}
		q := "SELECT " + strings.Join(items, ", ") + " FROM " + s.item
		if r.IntN(2) == 0 {
			q += " WHERE " + e.pred(1)
		} else if depth < 2 && r.IntN(5) == 0 {
			if c := sd.sublinkCond(s, depth+1); c != "" {
				q += " WHERE " + c
				sd.feats["nested"] = true
			}
		}
		branches = append(branches, q)
	}
	thisOp := op
	q := branches[0] + " " + op + " " + branches[1]
	if nb == 3 {
		op2 := op
		if r.IntN(3) == 0 {
			op2 = ops[r.IntN(len(ops))]
		}
		switch {
		case op2 != op && r.IntN(2) == 0:
			q = branches[0] + " " + op + " (" + branches[1] + " " + op2 + " " + branches[2] + ")"
			sd.feats["nested set operation"] = true
		default:
			q += " " + op2 + " " + branches[2]
		}
		if op2 != op {
			sd.feats[op2] = true
		}
	}
	sd.feats[thisOp] = true
	return q, outCols
}

// classExpr is an expression of e's table of the type class cl: a column
// of that class, or an expression or constant of it; distinct: no long
// texts (the rows are grouped).
func (sd *shapeDraw) classExpr(e *exprGen, cl typ, distinct bool) (string, *column) {
	r := sd.r
	var cs []*column
	for _, c := range e.t.cols {
		if distinct && hasLongExternal(c) {
			continue
		}
		if c.typ == cl || cl == tInt && c.typ == tBigint || cl == tNumeric && (c.typ == tInt || c.typ == tNumeric) {
			cs = append(cs, c)
		}
	}
	if len(cs) > 0 && r.IntN(4) > 0 {
		c := cs[r.IntN(len(cs))]
		return c.name, c
	}
	switch cl {
	case tInt:
		if ts := e.cols(func(c *column) bool { return c.typ == tText && !hasLongExternal(c) }); len(ts) > 0 && r.IntN(2) == 0 {
			return "length(" + e.pick(ts).name + ")", intCol()
		}
		return "CASE WHEN " + e.pred(1) + " THEN 1 ELSE 0 END", intCol()
	case tText:
		return "CASE WHEN " + e.pred(1) + " THEN 'y' ELSE 'n' END", textCol()
	case tBool:
		return "(" + e.pred(1) + ")", boolCol()
	case tNumeric:
		return "2.5", numCol()
	}
	return "NULL::date", &column{typ: tDate, sqlType: "date", domain: []string{"'2000-01-01'"}}
}

// setopQuery is a set operation, at the top or as a derived table an
// aggregate or a row query reads.
func (sd *shapeDraw) setopQuery(depth int) string {
	r := sd.r
	q, cols := sd.setop(depth)
	switch r.IntN(4) {
	case 0:
		u := sd.alias("u")
		sd.feats["set operation in FROM"] = true
		g := u + "." + cols[0].name
		aggs := "count(*) AS n"
		if len(cols) > 1 && cols[1].typ.orderable() {
			aggs += ", max(" + u + "." + cols[1].name + ") AS m"
		}
		return "SELECT " + g + " AS g0, " + aggs + " FROM (" + q + ") " + u + " GROUP BY 1"
	case 1:
		// In a CTE.
		name := sd.alias("c")
		sd.ctes = append(sd.ctes, name+" AS ("+q+")")
		sd.feats["WITH once"] = true
		return "SELECT * FROM " + name
	}
	return q
}

// ---- windows ----

// partition draws the PARTITION BY of src's windows: none, or one or two
// columns; when src is big, its key column that bulk rows vary in.
func (sd *shapeDraw) partition(src *rel, t *table) []string {
	r := sd.r
	if t != nil && sd.big(t) {
		return []string{src.q(t.shiftKey)}
	}
	if !src.big && r.IntN(6) == 0 {
		sd.feats["window over all rows"] = true
		return nil
	}
	cs := short(src.cols)
	var out []string
	for _, i := range r.Perm(len(cs))[:min(len(cs), 1+r.IntN(2))] {
		out = append(out, src.q(cs[i]))
	}
	return out
}

// over is a window definition: PARTITION BY parts, ORDER BY order.
func over(parts, order []string, frame string) string {
	var w []string
	if len(parts) > 0 {
		w = append(w, "PARTITION BY "+strings.Join(parts, ", "))
	}
	if len(order) > 0 {
		w = append(w, "ORDER BY "+strings.Join(order, ", "))
	}
	if frame != "" {
		w = append(w, frame)
	}
	return "OVER (" + strings.Join(w, " ") + ")"
}

// windowCall draws one window call over src partitioned by parts, and
// the column describing its values. Calls whose value depends on the
// order of tied rows order by the key (src must have one).
func (sd *shapeDraw) windowCall(src *rel, t *table, parts []string) (string, *column) {
	r := sd.r
	e := sd.exprs(src)
	ords := e.cols(func(c *column) bool { return c.typ.orderable() && !hasLongExternal(c) })
	if len(ords) == 0 {
		ords = e.t.cols
	}
	o := e.pick(ords).name + []string{"", " DESC", " NULLS FIRST", " DESC NULLS LAST"}[r.IntN(4)]
	keyed := append([]string{o}, src.keyRefs()...)
	ordered := src.key != nil && t != nil
	nums := e.cols(func(c *column) bool { return (c.typ.integer() || c.typ == tNumeric) && !hasLongExternal(c) })
	bigint := &column{typ: tBigint, sqlType: "bigint", small: true, domain: []string{"1", "2", "3"}}
	switch x := r.IntN(11); {
	case x == 0 && ordered:
		sd.feats["row_number"] = true
		return "row_number() " + over(parts, keyed, ""), bigint
	case x == 1 && ordered:
		sd.feats["lag"] = true
		c := e.pick(e.t.cols)
		cc := *c
		return "lag(" + c.name + ") " + over(parts, keyed, ""), &cc
	case x == 2 && ordered:
		sd.feats["lead"] = true
		c := e.pick(e.t.cols)
		cc := *c
		return "lead(" + c.name + ", 2) " + over(parts, keyed, ""), &cc
	case x == 3 && ordered:
		sd.feats["first_value"] = true
		c := e.pick(e.t.cols)
		cc := *c
		return "first_value(" + c.name + ") " + over(parts, keyed, ""), &cc
	case x == 4 && ordered:
		sd.feats["ntile"] = true
		return "ntile(3) " + over(parts, keyed, ""), intCol()
	case x == 5 && ordered && len(nums) > 0:
		sd.feats["ROWS frame"] = true
		return "sum(" + e.pick(nums).name + ") " + over(parts, src.keyRefs(), "ROWS BETWEEN 1 PRECEDING AND CURRENT ROW"), numCol()
	case x == 6:
		sd.feats["dense_rank"] = true
		return "dense_rank() " + over(parts, []string{o}, ""), bigint
	case x == 7 && len(nums) > 0:
		sd.feats["sum OVER"] = true
		return "sum(" + e.pick(nums).name + ") " + over(parts, []string{o}, ""), numCol()
	case x == 8:
		sd.feats["count OVER"] = true
		return "count(*) " + over(parts, nil, ""), bigint
	case x == 9 && len(ords) > 0:
		sd.feats["max OVER"] = true
		c := e.pick(ords)
		cc := *c
		return "max(" + c.name + ") " + over(parts, nil, ""), &cc
	}
	sd.feats["rank"] = true
	return "rank() " + over(parts, []string{o}, ""), bigint
}

// windowQuery is a query of one table (or, in join programs now and then,
// the fact inner joined to a dimension) with one to three window calls
// sharing a PARTITION BY, or a filter on a window's result in an outer
// query.
func (sd *shapeDraw) windowQuery(depth int) string {
	r := sd.r
	t := sd.anyTable()
	src := sd.table(t)
	if sd.big(t) && r.IntN(2) == 0 {
		// Over a table without bulk rows, where there is one.
		for _, u := range sd.g.tables {
			if !sd.big(u) {
				t, src = u, sd.table(u)
				break
			}
		}
	}
	parts := sd.partition(src, t)
	if r.IntN(3) == 0 {
		return sd.windowFilter(src, t, parts)
	}
	items := sd.outputs(src, r.IntN(3) > 0)
	for i := 1 + r.IntN(3); i > 0; i-- {
		call, _ := sd.windowCall(src, t, parts)
		items = append(items, fmt.Sprintf("%s AS o%d", call, len(items)))
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + src.item
	if r.IntN(3) == 0 {
		q += " WHERE " + sd.exprs(src).pred(1)
	}
	return q
}

// windowFilter is an outer query keeping the rows of src whose
// row_number (or rank) within its partition is small.
func (sd *shapeDraw) windowFilter(src *rel, t *table, parts []string) string {
	r := sd.r
	e := sd.exprs(src)
	var items, outer []string
	for i, k := range src.keyRefs() {
		items = append(items, fmt.Sprintf("%s AS k%d", k, i))
		outer = append(outer, fmt.Sprintf("k%d", i))
	}
	c := e.pick(e.t.cols)
	items = append(items, c.name+" AS v0")
	outer = append(outer, "v0")
	ords := e.cols(func(c *column) bool { return c.typ.orderable() && !hasLongExternal(c) })
	if len(ords) == 0 {
		ords = e.t.cols
	}
	o := e.pick(ords).name + []string{"", " DESC"}[r.IntN(2)]
	fn, cond := "row_number()", []string{" <= 2", " = 1", " <= 1", " < 3"}[r.IntN(4)]
	order := append([]string{o}, src.keyRefs()...)
	if r.IntN(3) == 0 {
		fn, order = "rank()", []string{o}
		sd.feats["rank"] = true
	} else {
		sd.feats["row_number"] = true
	}
	items = append(items, fn+" "+over(parts, order, "")+" AS rn")
	s := sd.alias("s")
	q := "SELECT " + strings.Join(outer, ", ") + " FROM (SELECT " + strings.Join(items, ", ") + " FROM " + src.item
	if r.IntN(3) == 0 {
		q += " WHERE " + e.pred(1)
	}
	sd.feats["window filter"] = true
	return q + ") " + s + " WHERE " + s + ".rn" + cond
}

// ---- top-K ----

// topKQuery is ORDER BY … LIMIT n [OFFSET m] ending with the key, a
// DISTINCT ON (g) … ORDER BY g, …, key, a top-K over an aggregate's
// groups, or over a set operation ordered by every output.
func (sd *shapeDraw) topKQuery(depth int) string {
	r := sd.r
	limit := func() string {
		s := fmt.Sprintf(" LIMIT %d", 1+r.IntN(4))
		if r.IntN(3) == 0 {
			s += fmt.Sprintf(" OFFSET %d", 1+r.IntN(2))
			sd.feats["OFFSET"] = true
		}
		return s
	}
	var t *table
	for range 6 {
		t = sd.anyTable()
		if !sd.big(t) {
			break
		}
	}
	if sd.big(t) {
		return sd.windowQuery(depth)
	}
	src := sd.table(t)
	e := sd.exprs(src)
	ords := e.cols(func(c *column) bool { return c.typ.orderable() && !hasLongExternal(c) })
	if len(ords) == 0 {
		ords = e.t.cols
	}
	o := e.pick(ords).name + []string{"", " DESC", " DESC NULLS LAST", " NULLS FIRST"}[r.IntN(4)]
	where := ""
	if r.IntN(3) == 0 {
		where = " WHERE " + e.pred(1)
	}
	switch x := r.IntN(10); {
	case x < 2:
		// DISTINCT ON (g): the first row of each group.
		gs := short(src.cols)
		g := src.q(gs[r.IntN(len(gs))])
		items := append([]string{g + " AS g0"}, sd.outputs(src, r.IntN(2) == 0)...)
		sd.feats["DISTINCT ON"] = true
		return "SELECT DISTINCT ON (" + g + ") " + strings.Join(items, ", ") + " FROM " + src.item + where +
			" ORDER BY " + strings.Join(append([]string{g, o}, src.keyRefs()...), ", ")
	case x < 4:
		// The first groups of an aggregate by a value.
		gs := short(src.cols)
		g := src.q(gs[r.IntN(len(gs))])
		agg := "count(*)"
		if nums := e.cols(func(c *column) bool { return (c.typ.integer() || c.typ == tNumeric) && !hasLongExternal(c) }); len(nums) > 0 && r.IntN(2) == 0 {
			agg = "sum(" + e.pick(nums).name + ")"
		}
		sd.feats["top-K over groups"] = true
		return "SELECT " + g + " AS g0, " + agg + " AS s FROM " + src.item + where + " GROUP BY 1 ORDER BY s" +
			[]string{"", " DESC"}[r.IntN(2)] + ", g0" + limit()
	case x == 4 && depth < 2:
		// Over a set operation, ordered by every output.
		q, cols := sd.setop(depth + 1)
		u := sd.alias("u")
		var order []string
		for _, c := range cols {
			order = append(order, u+"."+c.name+[]string{"", " DESC"}[r.IntN(2)])
		}
		sd.feats["top-K over a set operation"] = true
		sd.feats["nested"] = true
		sd.feats["top-K"] = true
		return "SELECT * FROM (" + q + ") " + u + " ORDER BY " + strings.Join(order, ", ") + limit()
	}
	items := sd.outputs(src, r.IntN(2) == 0)
	sd.feats["top-K"] = true
	return "SELECT " + strings.Join(items, ", ") + " FROM " + src.item + where +
		" ORDER BY " + strings.Join(append([]string{o}, src.keyRefs()...), ", ") + limit()
}

// ---- WITH ----

// withQuery reads a CTE once or twice: its rows, an aggregate of them,
// the CTE joined to itself on its key, or filtered by a subquery over
// itself.
func (sd *shapeDraw) withQuery(depth int) string {
	r := sd.r
	var c *rel
	twice := r.IntN(2) == 0
	for range 4 {
		sd.bare = twice
		c = sd.derived(depth+1, r.IntN(2) == 0)
		sd.bare = false
		if c != nil {
			break
		}
	}
	if c == nil {
		return sd.sublinkQuery(depth)
	}
	if strings.HasPrefix(c.item, "(") {
		// Make the derived table a CTE.
		name := sd.alias("c")
		body := c.item[1:strings.LastIndex(c.item, ")")]
		sd.ctes = append(sd.ctes, name+" AS ("+body+")")
		c.item = name + " " + c.ref
	}
	name := strings.Fields(c.item)[0]
	e := sd.exprs(c)
	switch x := r.IntN(2); {
	case twice && x == 0 && c.key != nil:
		// Read twice: joined to itself on its key.
		sd.feats["WITH twice"] = true
		b := sd.alias("b")
		other := &rel{ref: b, cols: c.cols, key: c.key}
		var on []string
		for _, k := range c.key {
			on = append(on, other.q(k)+" = "+c.q(k))
		}
		kind := []string{" JOIN ", " LEFT JOIN "}[r.IntN(2)]
		v := c.cols[r.IntN(len(c.cols))]
		items := append(c.keyRefs(), other.q(v)+" AS bv")
		return "SELECT " + strings.Join(items, ", ") + " FROM " + c.item + kind + name + " " + b + " ON " + strings.Join(on, " AND ")
	case twice && len(short(c.cols)) > 0:
		// Read twice: filtered by IN over itself.
		sd.feats["WITH twice"] = true
		b := sd.alias("b")
		v := short(c.cols)[r.IntN(len(short(c.cols)))]
		other := &rel{ref: b, cols: c.cols}
		sub := "SELECT " + other.q(v) + " FROM " + name + " " + b
		if r.IntN(2) == 0 {
			sub += " WHERE " + sd.exprs(other).pred(1)
		}
		return "SELECT " + strings.Join(sd.outputs(c, false), ", ") + " FROM " + c.item + " WHERE " + c.q(v) + " IN (" + sub + ")"
	}
	sd.feats["WITH once"] = true
	if gs := short(c.cols); len(gs) > 0 && r.IntN(2) == 0 {
		return "SELECT " + c.q(gs[r.IntN(len(gs))]) + " AS g0, count(*) AS n FROM " + c.item + " GROUP BY 1"
	}
	q := "SELECT " + strings.Join(sd.outputs(c, c.key != nil), ", ") + " FROM " + c.item
	if r.IntN(2) == 0 {
		q += " WHERE " + e.pred(1)
	}
	return q
}

// ---- chains ----

// shapeOverLevel draws a chain's last level as a shape over the level
// below (up, keyed by desc.key, pk when NOT NULL): a window over its rows
// (ordered ones only over a NOT NULL key, which the engine knows), a
// top-K, a filter by a subquery over a program table, a set operation
// with a program table, or a CTE of it read twice.
func (g *gen) shapeOverLevel(r *rand.Rand, up *chainLevel) shapeDef {
	sd := &shapeDraw{g: g, r: r, feats: map[string]bool{"in a chain": true}}
	t := up.desc
	src := sd.table(t)
	src.big = g.smallBatch
	if !up.pk {
		src.key = nil
	}
	var q string
	switch x := r.IntN(5); {
	case x == 0 && src.key != nil:
		e := sd.exprs(src)
		o := e.pick(e.t.cols).name + []string{"", " DESC"}[r.IntN(2)]
		sd.feats["top-K"] = true
		q = "SELECT " + strings.Join(sd.outputs(src, true), ", ") + " FROM " + src.item + " ORDER BY " +
			strings.Join(append([]string{o}, src.keyRefs()...), ", ") + fmt.Sprintf(" LIMIT %d", 1+r.IntN(3))
	case x == 1:
		if c := sd.sublinkCond(src, 2); c != "" {
			q = "SELECT " + strings.Join(sd.outputs(src, src.key != nil), ", ") + " FROM " + src.item + " WHERE " + c
			break
		}
		fallthrough
	case x == 2:
		items := sd.outputs(src, src.key != nil)
		call, _ := sd.windowCall(src, src.t, sd.partition(src, nil))
		q = "SELECT " + strings.Join(append(items, fmt.Sprintf("%s AS o%d", call, len(items))), ", ") + " FROM " + src.item
	default:
		if s := sd.scalarItem(src); s != "" {
			q = "SELECT " + strings.Join(append(sd.outputs(src, src.key != nil), s+" AS sc"), ", ") + " FROM " + src.item
			break
		}
		q = "SELECT " + strings.Join(sd.outputs(src, src.key != nil), ", ") + " FROM " + src.item
	}
	return shapeDef{sql: q, feats: sd.feats}
}

// shapesSeed spreads the program's seed (consecutive seeds' first draws of
// PCG streams seeded by them alike are alike, and the shapes stream draws
// few times per program).
func shapesSeed(seed int64) uint64 {
	x := uint64(seed) + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
