package generative

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Nested derived tables joined by outer joins (issue 28, ADR 0027): a
// transform whose FROM joins one of the program's tables to a derived
// table nested one to three deep — computed, constant and renamed outputs
// at the bottom or in a wrapper, pass-through wrappers written with *,
// w.*, a column list or an alias list, now and then a WHERE inside a
// nested one — placed on either side of a LEFT, RIGHT or FULL join (the
// preserved side or the NULL-extended one), now and then with a derived
// table on both sides. Pulled up past an outer join, an expression would
// be computed over the NULLs of a NULL-extended row and a WHERE would
// filter the joined rows; the engine keeps such a derived table as an
// inner level (ADR 0026, 0027), and the oracle, PostgreSQL running the
// query as written, judges it like any definition.
//
// Drawn from a stream of their own (nestedSalt), after every other stream
// drew the definition it replaces, so that what every other draw of a
// program gives stays as it was.

const (
	// nestedSalt seeds the nested stream. It is chosen so that the fast
	// lane's fixed cases draw a few such definitions (three, in
	// concurrent/7 and join/234), among them one that catches the planted
	// flatten_nullable_computed at its first check (join/234's t1), and
	// still draw every join shape and feature TestJoinPrograms and
	// TestFeaturePrograms require of them (the definitions it replaces
	// drew some of those).
	nestedSalt = 0x6e679b40
	// featNestedPct: a definition is replaced by one joining a nested
	// derived table.
	featNestedPct = 8
)

// The outer join kinds a nested derived table is joined by (INNER now and
// then, for the pull-up of a derived table no join NULL-extends).
var nestedKinds = []string{"LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "JOIN"}

// dcol is one output column of a derived table as the query above it
// sees it.
type dcol struct {
	name string  // as written (quoted when needed)
	col  *column // its type and values, for expressions over it
	// computed: an expression somewhere below, not a column of the base
	// table (a constant, coalesce, IS NOT NULL, CASE…).
	computed bool
	// nonStrict: computed, and not NULL over NULLs (a constant,
	// coalesce, IS [NOT] NULL, CASE, or an expression over such an
	// output): pulled up past an outer join, it would show a value in a
	// NULL-extended row.
	nonStrict bool
	// link: the index of the join column it carries, -1 for none.
	link int
}

// nestDraw draws one transform's nested derived tables.
type nestDraw struct {
	r *rand.Rand
	// wrappers numbers the aliases of wrapped derived tables (w1, w2, …)
	// and tables the aliases of the base tables read inside (x1, x2, …),
	// unique across the query, so that nothing clashes once flattened.
	wrappers, tables int
	// bare: tables read without an alias (once each: flattened, two
	// would clash).
	bare map[*table]bool
	// feats names what was drawn (TestNestedPrograms).
	feats map[string]bool
}

// boolCol, textCol, numCol and intCol describe computed outputs (their
// type and some values), for the expressions and predicates drawn over
// them above.
func boolCol() *column {
	return &column{typ: tBool, sqlType: "boolean", small: true, domain: []string{"true", "false"}}
}

func textCol() *column {
	return &column{typ: tText, sqlType: "text", small: true, domain: []string{"'a'", "''", "'y'", "'n'", "'A'", "'k'"}}
}

func numCol() *column {
	return &column{typ: tNumeric, sqlType: "numeric", small: true, domain: []string{"0", "1", "1.5", "-1", "10"}}
}

func intCol() *column {
	return &column{typ: tInt, sqlType: "int", small: true, domain: []string{"0", "1", "2", "-1"}}
}

// asView is cols as a table whose column names are qualified by q ("" for
// none), for exprGen.
func asView(q string, cols []dcol) *table {
	v := &table{name: "(derived)"}
	for _, c := range cols {
		cc := *c.col
		cc.name = c.name
		if q != "" {
			cc.name = q + "." + c.name
		}
		v.cols = append(v.cols, &cc)
	}
	return v
}

// nonStrictExpr reports whether x, an output drawn by computedOutput,
// may be other than NULL when every column it reads is NULL.
func nonStrictExpr(x string) bool {
	switch x {
	case "1", "'c'::text", "true", "2.5":
		return true
	}
	for _, s := range []string{"coalesce(", "CASE ", " IS "} {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// computedOutput draws an expression over e's table that is not a plain
// column: a constant, coalesce, IS [NOT] NULL, CASE, arithmetic; and the
// column describing its values.
func (nd *nestDraw) computedOutput(e *exprGen) (string, *column) {
	r := nd.r
	c := e.pick(e.t.cols)
	ref := e.ref(c)
	switch r.IntN(11) {
	case 0:
		nd.feats["constant"] = true
		switch r.IntN(4) {
		case 0:
			return "1", intCol()
		case 1:
			return "'c'::text", textCol()
		case 2:
			return "true", boolCol()
		}
		return "2.5", numCol()
	case 1:
		nd.feats["coalesce"] = true
		l := c.domain[r.IntN(len(c.domain))]
		if l == longInline || l == longExternal {
			l = "'a'"
		}
		cc := *c
		return "coalesce(" + ref + ", " + l + ")", &cc
	case 2:
		nd.feats["IS NOT NULL"] = true
		return ref + []string{" IS NOT NULL", " IS NULL"}[r.IntN(2)], boolCol()
	case 3:
		nd.feats["CASE"] = true
		return "CASE WHEN " + e.pred(1) + " THEN 'y' ELSE 'n' END", textCol()
	case 4:
		nd.feats["coalesce"] = true
		return "coalesce(" + e.pred(0) + ", false)", boolCol()
	case 5:
		nd.feats["arithmetic"] = true
		return "(" + e.numExpr() + ")::numeric + 1", numCol()
	case 6:
		nd.feats["CASE"] = true
		if c.typ != tBool {
			// No ELSE: NULL where the condition fails.
			cc := *c
			return "CASE WHEN " + e.pred(1) + " THEN " + ref + " END", &cc
		}
	case 7:
		x := e.textExpr()
		cc := textCol()
		for _, src := range e.t.cols {
			// Over a long text it may be long too.
			if hasLongExternal(src) && strings.Contains(x, src.name) {
				cc.domain = append(cc.domain, longExternal)
			}
		}
		return x, cc
	case 8:
		return e.boolExpr(), boolCol()
	}
	return "(" + e.numExpr() + ")::numeric", numCol()
}

// base draws the innermost derived table's SELECT over t: the columns
// link (plain, maybe renamed), maybe more of t's columns, one to three
// computed outputs, maybe a WHERE.
func (nd *nestDraw) base(t *table, link []*column) (string, []dcol, bool) {
	r := nd.r
	nd.tables++
	var from, pfx string
	alias := fmt.Sprintf("x%d", nd.tables)
	switch x := r.IntN(3); {
	case x == 2 && !nd.bare[t]:
		// Unaliased: the outer query's uses of t all have aliases.
		nd.bare[t] = true
		from, pfx = t.name, t.name
	case x == 0:
		from, pfx = t.name+" "+alias, alias
	default:
		from, pfx = t.name+" AS "+alias, alias
	}
	e := &exprGen{r: r, t: t, pfx: pfx}
	var items []string
	var cols []dcol
	used := map[*column]bool{}
	add := func(x, name string, c *column, computed bool, link int) {
		item := x
		if name != "" {
			item += " AS " + name
		} else {
			name = c.name
		}
		items = append(items, item)
		cols = append(cols, dcol{name: name, col: c, computed: computed, link: link})
	}
	for i, c := range link {
		used[c] = true
		name := ""
		if r.IntN(4) == 0 {
			name = fmt.Sprintf("l%d", i)
			nd.feats["renamed"] = true
		}
		add(e.ref(c), name, c, false, i)
	}
	for i, n := 0, 1+r.IntN(3); i < n; i++ {
		if r.IntN(4) == 0 {
			// A plain column (renamed now and then, or cast).
			c := e.pick(t.cols)
			if used[c] {
				continue
			}
			used[c] = true
			switch r.IntN(4) {
			case 0:
				nd.feats["renamed"] = true
				add(e.ref(c), fmt.Sprintf("p%d", i), c, false, -1)
			case 1:
				if c.typ.integer() {
					cc := *c
					cc.typ, cc.sqlType = tBigint, "bigint"
					add(e.ref(c)+"::bigint", fmt.Sprintf("p%d", i), &cc, false, -1)
					break
				}
				fallthrough
			default:
				add(e.ref(c), "", c, false, -1)
			}
			continue
		}
		x, c := nd.computedOutput(e)
		add(x, fmt.Sprintf("v%d", i), c, true, -1)
		cols[len(cols)-1].nonStrict = nonStrictExpr(x)
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from
	where := r.IntN(3) == 0
	if where {
		q += " WHERE " + e.pred(1)
	}
	return q, cols, where
}

// wrap draws a derived table over the SELECT inner (whose outputs are
// cols): the SELECT that reads it as alias w, written with *, w.*, a
// column list or a computed output besides w.*, the derived table
// maybe with an alias list, maybe with a WHERE.
func (nd *nestDraw) wrap(inner string, cols []dcol) (q string, out []dcol, where, plain bool) {
	r := nd.r
	nd.wrappers++
	w := fmt.Sprintf("w%d", nd.wrappers)
	item := "(" + inner + ") " + []string{"", "AS "}[r.IntN(2)] + w
	if r.IntN(4) == 0 {
		// An alias list naming the first columns.
		nd.feats["alias list"] = true
		n := 1 + r.IntN(len(cols))
		var names []string
		cols = append([]dcol(nil), cols...)
		for i := 0; i < n; i++ {
			cols[i].name = fmt.Sprintf("a%d_%d", nd.wrappers, i)
			names = append(names, cols[i].name)
		}
		item += "(" + strings.Join(names, ", ") + ")"
	}
	e := &exprGen{r: r, t: asView("", cols), pfx: w}
	var list string
	plain = true
	switch r.IntN(6) {
	case 0, 1:
		nd.feats["*"] = true
		list, out = "*", cols
	case 2:
		nd.feats["w.*"] = true
		list, out = w+".*", cols
	case 3, 4:
		// A column list: every join column, the others maybe dropped,
		// maybe renamed, in any order.
		nd.feats["column list"] = true
		var items []string
		for j, i := range r.Perm(len(cols)) {
			c := cols[i]
			if c.link < 0 && r.IntN(4) == 0 {
				continue
			}
			ref := c.name
			if r.IntN(2) == 0 {
				ref = w + "." + c.name
			}
			if r.IntN(4) == 0 {
				c.name = fmt.Sprintf("r%d_%d", nd.wrappers, j)
				ref += " AS " + c.name
			}
			items = append(items, ref)
			out = append(out, c)
		}
		list = strings.Join(items, ", ")
	default:
		// A computed output over the wrapped one's.
		nd.feats["computed in a wrapper"] = true
		plain = false
		x, c := nd.computedOutput(e)
		name := fmt.Sprintf("wc%d", nd.wrappers)
		list = w + ".*, " + x + " AS " + name
		ns := nonStrictExpr(x)
		for _, c := range cols {
			ns = ns || c.nonStrict && strings.Contains(x, c.name)
		}
		out = append(append([]dcol(nil), cols...), dcol{name: name, col: c, computed: true, nonStrict: ns, link: -1})
	}
	q = "SELECT " + list + " FROM " + item
	where = r.IntN(6) == 0
	if where {
		q += " WHERE " + e.pred(1)
	}
	return q, out, where, plain && !where
}

// derived draws a derived table over t nested depth deep (1–3), whose
// outputs carry the columns link, as the FROM item alias; its outputs as
// the outer query reads them, whether one is computed, and whether a
// WHERE is inside.
//
// hidden: what makes pulling it up past an outer join wrong (a computed
// output, a WHERE) lies below a pass-through wrapper: the derived table
// as written selects only columns and has no WHERE (ADR 0027).
func (nd *nestDraw) derived(t *table, link []*column, depth int, alias string) (item string, cols []dcol, computed, where, hidden bool) {
	q, cols, where := nd.base(t, link)
	plain := true
	for i := 1; i < depth; i++ {
		var w bool
		below := where
		for _, c := range cols {
			below = below || c.computed
		}
		q, cols, w, plain = nd.wrap(q, cols)
		hidden = below && plain
		where = where || w
		if i > 1 {
			nd.feats["3 deep"] = true
		} else {
			nd.feats["2 deep"] = true
		}
	}
	if where {
		nd.feats["WHERE inside"] = true
	}
	item = "(" + q + ") " + []string{"", "AS "}[nd.r.IntN(2)] + alias
	if nd.r.IntN(5) == 0 {
		nd.feats["alias list"] = true
		cols = append([]dcol(nil), cols...)
		var names []string
		for i := range cols {
			cols[i].name = fmt.Sprintf("%s%d", alias, i)
			names = append(names, cols[i].name)
		}
		item += "(" + strings.Join(names, ", ") + ")"
	}
	for _, c := range cols {
		computed = computed || c.computed
	}
	return item, cols, computed, where, hidden && plain
}

// nestedSide is one side of the join: a table or a derived table.
type nestedSide struct {
	item, ref string
	cols      []dcol // as the outer query reads them (unqualified names)
	derived   bool
	computed  bool // a derived table with a computed output
	where     bool // a derived table with a WHERE inside
	hidden    bool // … below a pass-through wrapper (nestDraw.derived)
}

// linkCols are the side's join columns, in link order.
func (s *nestedSide) linkCols() []dcol {
	var out []dcol
	for i := 0; ; i++ {
		found := false
		for _, c := range s.cols {
			if c.link == i {
				out = append(out, c)
				found = true
				break
			}
		}
		if !found {
			return out
		}
	}
}

// nestedDef is a definition nestedSelect drew, and what it drew
// (TestNestedPrograms).
type nestedDef struct {
	sql   string
	feats map[string]bool
}

// nestedSelect draws a transform joining a nested derived table to one of
// the program's tables (see nestDraw).
func (g *gen) nestedSelect(r *rand.Rand) nestedDef {
	nd := &nestDraw{r: r, feats: map[string]bool{}, bare: map[*table]bool{}}
	// The join: a link of the join schema (a fact's reference to a
	// dimension, its parent, a dimension's to the other) with the derived
	// table at either end, or a table joined to itself by its key.
	var dt, tt *table
	var dlink, tlink []*column
	if g.join && r.IntN(3) > 0 {
		lks := g.js.links()
		lk := lks[r.IntN(len(lks))]
		dt, dlink, tt, tlink = lk.dst, lk.to, lk.src, lk.from
		if r.IntN(2) == 0 {
			dt, dlink, tt, tlink = tt, tlink, dt, dlink
		}
		nd.feats["link"] = true
	} else {
		dt = g.tables[r.IntN(len(g.tables))]
		tt, dlink, tlink = dt, dt.key, dt.key
		nd.feats["self"] = true
	}
	depth := []int{1, 2, 2, 2, 3, 3}[r.IntN(6)]
	dside := &nestedSide{ref: "q", derived: true}
	dside.item, dside.cols, dside.computed, dside.where, dside.hidden = nd.derived(dt, dlink, depth, "q")
	tside := &nestedSide{ref: "a"}
	if r.IntN(5) == 0 {
		// A derived table on both sides.
		tside.derived = true
		tside.item, tside.cols, tside.computed, tside.where, tside.hidden = nd.derived(tt, tlink, 1+r.IntN(2), "a")
		nd.feats["both sides"] = true
	} else {
		tside.item = tt.name + []string{" AS a", " a"}[r.IntN(2)]
		for _, c := range tt.cols {
			tside.cols = append(tside.cols, dcol{name: c.name, col: c, link: colIndex(tlink, c)})
		}
	}
	kind := nestedKinds[r.IntN(len(nestedKinds))]
	left, right := dside, tside
	if r.IntN(2) == 0 {
		left, right = tside, dside
	}
	// The preserved sides, and the NULL-extended ones.
	var kept, nulled []*nestedSide
	switch kind {
	case "LEFT JOIN":
		kept, nulled = []*nestedSide{left}, []*nestedSide{right}
	case "RIGHT JOIN":
		kept, nulled = []*nestedSide{right}, []*nestedSide{left}
	case "FULL JOIN":
		nulled = []*nestedSide{left, right}
	default:
		kept = []*nestedSide{left, right}
	}
	for _, s := range nulled {
		if s.derived {
			nd.feats["NULL-extended "+kind] = true
			if s.computed {
				nd.feats["NULL-extended computed"] = true
			}
			if s.where {
				nd.feats["NULL-extended WHERE"] = true
			}
			if s.hidden {
				nd.feats["NULL-extended below a pass-through wrapper"] = true
			}
		}
	}
	for _, s := range kept {
		if s.derived && kind != "JOIN" {
			nd.feats["preserved "+kind] = true
		}
	}
	// The condition: the link's equalities, or USING when both sides
	// name the columns alike, now and then with a predicate.
	lc, rc := left.linkCols(), right.linkCols()
	same := len(lc) == len(rc)
	var eqs, names []string
	for i := range lc {
		same = same && lc[i].name == rc[i].name
		names = append(names, lc[i].name)
		x, y := left.ref+"."+lc[i].name, right.ref+"."+rc[i].name
		if r.IntN(2) == 0 {
			x, y = y, x
		}
		eqs = append(eqs, x+" = "+y)
	}
	var cond string
	var merged []string
	if same && r.IntN(2) == 0 {
		cond = "USING (" + strings.Join(names, ", ") + ")"
		merged = names
		nd.feats["USING"] = true
	} else {
		cond = "ON " + strings.Join(eqs, " AND ")
		// A join by key of a table to itself matches every row: a
		// predicate in ON makes NULL-extended rows.
		pct := 30
		if tt == dt && !dside.where {
			pct = 75
		}
		if r.IntN(100) < pct {
			s := []*nestedSide{left, right}[r.IntN(2)]
			e := &exprGen{r: r, t: asView(s.ref, s.cols)}
			cond += " AND " + e.pred(1)
		}
	}
	from := left.item + " " + kind + " " + right.item + " " + cond
	// What the outer query reads: both sides' columns, qualified.
	all := append(asView(left.ref, left.cols).cols, asView(right.ref, right.cols).cols...)
	v := &table{name: "(join)", cols: all}
	dv := asView(dside.ref, dside.cols)
	var where string
	switch x := r.IntN(6); {
	case x < 2 && len(kept) > 0:
		s := kept[r.IntN(len(kept))]
		e := &exprGen{r: r, t: asView(s.ref, s.cols)}
		where = " WHERE " + e.pred(1)
	case x == 2:
		// A filter after the join on its NULL-extended side (an anti-join
		// now and then): the engine keeps the join's matches in a mirror.
		c := dside.cols[r.IntN(len(dside.cols))]
		where = " WHERE " + dside.ref + "." + c.name + []string{" IS NULL", " IS NOT NULL"}[r.IntN(2)]
		nd.feats["filter above"] = true
	}
	var sql string
	if r.IntN(3) == 0 {
		nd.feats["aggregate"] = true
		sql = nestedAgg(r, dv, tside, from, where)
	} else {
		sql = nestedRow(r, v, dside, tside, merged, from, where)
	}
	// Whether the query reads, outside the derived table, an output that
	// is not NULL over NULLs: pulled up past the outer join, it would
	// show a value where the NULL-extended row shows NULL.
	outside := strings.Replace(sql, dside.item, "", 1)
	for _, s := range nulled {
		if s != dside {
			continue
		}
		for _, c := range dside.cols {
			if c.nonStrict && reads(outside, dside.ref+"."+c.name) {
				nd.feats["NULL-extended non-strict output read"] = true
				if dside.hidden {
					nd.feats["NULL-extended non-strict output read below a pass-through wrapper"] = true
				}
			}
		}
	}
	return nestedDef{sql: sql, feats: nd.feats}
}

// reads reports whether text names the qualified column ref (not as the
// start of a longer name).
func reads(text, ref string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], ref)
		if j < 0 {
			return false
		}
		end := i + j + len(ref)
		if end == len(text) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789_", rune(text[end])) {
			return true
		}
		i = end
	}
}

// nestedRow is a row query over the join from: the derived table's
// computed outputs first (the columns a NULL-extended row must show NULL
// in), then columns of either side and expressions over them.
func nestedRow(r *rand.Rand, v *table, dside, tside *nestedSide, merged []string, from, where string) string {
	var items []string
	used := map[string]bool{}
	plain := func(ref string) {
		if b := bareName(ref); !used[b] {
			used[b] = true
			items = append(items, ref)
			return
		}
		name := fmt.Sprintf("o%d", len(items))
		used[name] = true
		items = append(items, ref+" AS "+name)
	}
	for _, c := range dside.cols {
		if c.computed && r.IntN(4) > 0 {
			plain(dside.ref + "." + c.name)
		}
	}
	if len(items) == 0 {
		c := dside.cols[r.IntN(len(dside.cols))]
		plain(dside.ref + "." + c.name)
	}
	if r.IntN(2) == 0 {
		// A column identifying the other side's rows (NULL where it is
		// NULL-extended).
		c := tside.cols[r.IntN(len(tside.cols))]
		for _, k := range tside.linkCols() {
			c = k
		}
		plain(tside.ref + "." + c.name)
	}
	e := &exprGen{r: r, t: v}
	for i := r.IntN(4); i > 0; i-- {
		if r.IntN(2) == 0 {
			plain(e.pick(v.cols).name)
			continue
		}
		x := []func() string{e.numExpr, e.textExpr, e.boolExpr, e.anyExpr}[r.IntN(4)]()
		name := fmt.Sprintf("o%d", len(items))
		used[name] = true
		items = append(items, x+" AS "+name)
	}
	if len(merged) > 0 && r.IntN(2) == 0 {
		// USING's merged column (in a FULL JOIN, the coalesce of both).
		m := merged[r.IntN(len(merged))]
		name := fmt.Sprintf("o%d", len(items))
		items = append(items, m+" AS "+name)
	}
	return "SELECT " + strings.Join(items, ", ") + " FROM " + from + where
}

// nestedAgg is an aggregate query over the join from, grouped by none or
// one of the other side's columns, aggregating the derived table's
// outputs (dv: its columns, qualified).
func nestedAgg(r *rand.Rand, dv *table, tside *nestedSide, from, where string) string {
	var items, groups []string
	if r.IntN(3) > 0 {
		var cands []string
		for _, c := range tside.cols {
			if !hasLongExternal(c.col) {
				cands = append(cands, tside.ref+"."+c.name)
			}
		}
		if len(cands) > 0 {
			g := cands[r.IntN(len(cands))]
			groups = append(groups, g)
			items = append(items, g+" AS g0")
		}
	}
	e := &exprGen{r: r, t: dv}
	items = append(items, fmt.Sprintf("count(%s) AS a%d", e.pick(dv.cols).name, len(items)))
	for i := 1 + r.IntN(3); i > 0; i-- {
		items = append(items, fmt.Sprintf("%s AS a%d", e.aggCall(), len(items)))
	}
	if r.IntN(3) == 0 {
		items = append(items, fmt.Sprintf("count(*) AS a%d", len(items)))
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from + where
	if len(groups) > 0 {
		q += " GROUP BY " + strings.Join(groups, ", ")
	}
	return q
}
