package generative

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// Functions in FROM, constant relations and the ALL set operations (ADR
// 0034): definitions that expand a source row into rows — unnest of an
// array (one, two zipped, bare or aliased, WITH ORDINALITY),
// jsonb_array_elements[_text], jsonb_each[_text], jsonb_to_recordset,
// generate_series over a row's bounds, ROWS FROM, regexp_split_to_table,
// an array of a row's columns unnested or a LATERAL VALUES list (an
// unpivot) — written after a comma, CROSS JOIN [LATERAL] or LEFT JOIN
// LATERAL … ON true; VALUES lists and constant generate_series joined to
// tables (inner, LEFT, in a CTE); INTERSECT ALL and EXCEPT ALL (and
// UNION ALL) of branches over tables or expanded rows. They are read by
// row queries, DISTINCT, aggregates, joins with a program table on either
// side (the function on the NULL-extended side too), derived tables and
// CTEs holding them (read once or twice, aggregated as inner levels, on
// the NULL-extended side of an outer join, under a window, a top-K or a
// subquery filter), a subquery IN over them, nested up to two levels, and
// as a chain's last level over the level below.
//
// The arrays and documents live in the collection table (collection.go)
// of the programs that have one; the others expand their tables' columns
// (series, unpivots, splits) and join constant relations.
//
// Drawn from a stream of their own (srfSalt), after every other stream
// drew the definition it replaces, and never where the nested or shapes
// stream landed, so every other draw of a program stays as it was.

const (
	// srfSalt seeds the function stream. It is chosen so that the fast
	// lane's fixed cases draw a few such definitions, over a collection
	// table, in cases that catch no planted bug: lifecycle/6 (an
	// INTERSECT ALL of three branches — a program table, unnest of two
	// arrays zipped, jsonb_array_elements — and a window over an inner
	// level counting unnest LEFT JOIN LATERAL's rows) and ddl/6 (the
	// same INTERSECT ALL); concurrent/7 has a collection table too. They
	// still draw everything TestJoinPrograms, TestFeaturePrograms,
	// TestNestedPrograms and TestCapturePrograms require of them.
	srfSalt = 0x73726a56
	// collPct: a program has a collection table; collEventPct: a body
	// event of such a program is followed by a write of it.
	collPct      = 25
	collEventPct = 25
	// featSRFPct: a definition is replaced by one of these shapes, in a
	// program without a collection table (featSRFCollPct with one); a
	// chain's last level twice as often.
	featSRFPct     = 3
	featSRFCollPct = 14
)

// srfPctEnv is TRELLIS_GEN_SRF_PCT (0–100), the chance a definition is
// drawn here whether the program has a collection table or not (a soak
// aimed at them; the fast lane's fixed cases assume the default), or -1
// for the default, srfPct.
func srfPctEnv() int {
	if v, err := strconv.Atoi(os.Getenv("TRELLIS_GEN_SRF_PCT")); err == nil && v >= 0 && v <= 100 {
		return v
	}
	return -1
}

// srfPct is the default chance a definition is drawn here, in a program
// with a collection table (coll) or without.
func srfPct(coll bool) int {
	if coll {
		return featSRFCollPct
	}
	return featSRFPct
}

// srfDraw draws one definition of these shapes: a shapeDraw on the
// function stream whose derived tables and sources hold functions now
// and then.
type srfDraw struct {
	*shapeDraw
	coll *collection
}

func (g *gen) newSRFDraw(r *rand.Rand, feats map[string]bool) *srfDraw {
	s := &srfDraw{shapeDraw: &shapeDraw{g: g, r: r, feats: feats}, coll: g.coll}
	s.shapeDraw.srf = s
	return s
}

// fnItem is a FROM item after the first of a frag: how it is joined
// (",", "CROSS JOIN", "CROSS JOIN LATERAL", "LEFT JOIN LATERAL", "JOIN",
// "LEFT JOIN"), the item, and its ON condition ("" for none).
type fnItem struct{ sep, item, on string }

// frag is a FROM clause that makes many rows of one source row: a table
// and the items after it.
type frag struct {
	src   *rel
	items []fnItem
	// cols are every column as exprGen sees it (qualified, or an
	// expression such as (u.e->>'a')::int); elems the function's or
	// VALUES list's, for joins, groups and set operations.
	cols, elems []*column
	// key: references identifying a row (the source's key and a written
	// ordinal), nil when none is written.
	key []string
	// raw: jsonb expressions a select list may show (not compared in
	// expressions).
	raw []string
}

// from is the frag as written after FROM.
func (f *frag) from() string {
	s := f.src.item
	for _, it := range f.items {
		if it.sep == "," {
			s += ", " + it.item
		} else {
			s += " " + it.sep + " " + it.item
		}
		if it.on != "" {
			s += " ON " + it.on
		}
	}
	return s
}

// tree is the frag as a join tree in parentheses (commas as CROSS JOIN),
// to be joined to another item.
func (f *frag) tree() string {
	s := f.src.item
	for _, it := range f.items {
		sep := it.sep
		if sep == "," {
			sep = "CROSS JOIN"
		}
		s += " " + sep + " " + it.item
		if it.on != "" {
			s += " ON " + it.on
		}
	}
	return "(" + s + ")"
}

func (f *frag) view() *table { return &table{name: "(frag)", cols: f.cols} }

// noFloat are cols without float8 (sums and averages over expanded rows
// read none: their order would show in the last digits).
func noFloat(cols []*column) []*column {
	var out []*column
	for _, c := range cols {
		if c.typ != tFloat {
			out = append(out, c)
		}
	}
	return out
}

// elemCol describes a function's output column: its name as referenced,
// its type and values.
func elemCol(name string, ty typ, domain []string) *column {
	sql := map[typ]string{tInt: "int", tBigint: "bigint", tText: "text", tNumeric: "numeric", tBool: "boolean", tDate: "date", tFloat: "float8"}[ty]
	return &column{name: name, typ: ty, sqlType: sql, small: true, domain: domain}
}

var ordDomain = []string{"1", "2", "3"}

// sep draws how a function item follows the table: a comma, CROSS JOIN
// [LATERAL], LATERAL after a comma, or LEFT JOIN LATERAL … ON true,
// which keeps a row whose function makes none.
func (sd *srfDraw) sep() fnItem {
	switch sd.r.IntN(7) {
	case 0, 1:
		return fnItem{sep: ","}
	case 2:
		sd.feats["CROSS JOIN function"] = true
		return fnItem{sep: "CROSS JOIN"}
	case 3:
		sd.feats["CROSS JOIN function"] = true
		return fnItem{sep: "CROSS JOIN LATERAL"}
	case 4:
		return fnItem{sep: ",", item: "LATERAL "}
	}
	sd.feats["LEFT JOIN LATERAL"] = true
	return fnItem{sep: "LEFT JOIN LATERAL", on: "true"}
}

// ordinality draws WITH ORDINALITY now and then: the clause and the
// ordinal's column name ("" for none).
func (sd *srfDraw) ordinality(u string) (string, string) {
	if sd.r.IntN(3) > 0 {
		return "", ""
	}
	sd.feats["WITH ORDINALITY"] = true
	return " WITH ORDINALITY", u + ".o"
}

// frag draws a frag: over the collection table four times in five when
// there is one, else over a program table.
func (sd *srfDraw) frag() *frag {
	if sd.coll != nil && sd.r.IntN(5) > 0 {
		return sd.collFrag()
	}
	for range 4 {
		if f := sd.tableFrag(sd.anyTable()); f != nil {
			return f
		}
	}
	return sd.valuesFrag(sd.anyTable())
}

// fragOver is frag with t as the program table it reads when it reads
// one.
func (sd *srfDraw) fragOver(t *table) *frag {
	if sd.coll != nil && sd.r.IntN(5) > 0 {
		return sd.collFrag()
	}
	if f := sd.tableFrag(t); f != nil {
		return f
	}
	return sd.valuesFrag(t)
}

// newFrag starts a frag over t (aliased, or under its own name in a CTE
// read twice).
func (sd *srfDraw) newFrag(t *table) *frag {
	src := sd.table(t)
	f := &frag{src: src}
	for _, c := range src.cols {
		cc := *c
		cc.name = src.q(c)
		f.cols = append(f.cols, &cc)
	}
	f.key = src.keyRefs()
	return f
}

// add appends a function item named u with output columns cols; ord is
// the ordinal's reference ("" for none).
func (f *frag) add(it fnItem, item string, cols []*column, ord string) {
	it.item += item
	f.items = append(f.items, it)
	for _, c := range cols {
		cc := *c
		cc.notNull = false
		f.cols = append(f.cols, &cc)
		f.elems = append(f.elems, &cc)
	}
	if ord != "" {
		o := elemCol(ord, tBigint, ordDomain)
		f.cols = append(f.cols, o)
		if f.key != nil {
			f.key = append(f.key, ord)
		}
	} else {
		f.key = nil // the function's rows of one source row are not told apart
	}
}

// collFrag expands one of the collection table's columns.
func (sd *srfDraw) collFrag() *frag {
	r, c := sd.r, sd.coll
	f := sd.newFrag(c.t)
	if r.IntN(5) == 0 {
		// The functions read a derived table over the collection table
		// (flattened: its columns in their arguments become the table's).
		sd.collDerived(f)
	}
	q := func(col *column) string { return f.src.ref + "." + col.name }
	u := sd.alias("u")
	it := sd.sep()
	ordSQL, ord := sd.ordinality(u)
	intEl := func(n string) *column { return elemCol(n, tInt, collIntElems) }
	textEl := func(n string) *column { return elemCol(n, tText, collTextElems) }
	switch x := r.IntN(12); {
	case x < 3:
		if r.IntN(2) == 0 && ordSQL == "" {
			// Bare: the alias names the column too.
			sd.feats["unnest bare"] = true
			f.add(it, "unnest("+q(c.ints)+") "+u, []*column{intEl(u)}, "")
			break
		}
		sd.feats["unnest"] = true
		f.add(it, "unnest("+q(c.ints)+")"+ordSQL+" AS "+u+"(x"+ordName(ord)+")", []*column{intEl(u + ".x")}, ord)
	case x < 5:
		sd.feats["unnest"] = true
		f.add(it, "unnest("+q(c.texts)+")"+ordSQL+" "+u+"(x"+ordName(ord)+")", []*column{textEl(u + ".x")}, ord)
	case x < 6:
		sd.feats["unnest two arrays"] = true
		f.add(it, "unnest("+q(c.ints)+", "+q(c.texts)+")"+ordSQL+" AS "+u+"(x, y"+ordName(ord)+")", []*column{intEl(u + ".x"), textEl(u + ".y")}, ord)
	case x < 8:
		sd.feats["jsonb_array_elements"] = true
		f.add(it, "jsonb_array_elements("+q(c.doc)+")"+ordSQL+" AS "+u+"(e"+ordName(ord)+")",
			[]*column{elemCol("("+u+".e->>'a')::int", tInt, collDocAs), elemCol(u+".e->>'b'", tText, []string{"'x'", "'y'", "''"})}, ord)
		f.raw = append(f.raw, u+".e")
	case x < 9:
		if r.IntN(2) == 0 {
			sd.feats["jsonb_each"] = true
			f.add(it, "jsonb_each("+q(c.attrs)+")"+ordSQL+" AS "+u+"(k, v"+ordName(ord)+")", []*column{elemCol(u+".k", tText, []string{"'k1'", "'k2'", "'k3'"})}, ord)
			f.raw = append(f.raw, u+".v")
		} else {
			sd.feats["jsonb_each_text"] = true
			f.add(it, "jsonb_each_text("+q(c.attrs)+")"+ordSQL+" AS "+u+"(k, v"+ordName(ord)+")",
				[]*column{elemCol(u+".k", tText, []string{"'k1'", "'k2'", "'k3'"}), elemCol(u+".v", tText, []string{"'1'", "'x'", "'true'"})}, ord)
		}
	case x < 10:
		if ordSQL != "" {
			// A column definition list takes no WITH ORDINALITY: ROWS
			// FROM does.
			sd.feats["ROWS FROM"] = true
			f.add(it, "ROWS FROM (jsonb_to_recordset("+q(c.doc)+") AS (a int, b text)) WITH ORDINALITY AS "+u+"(a, b, o)",
				[]*column{elemCol(u+".a", tInt, collDocAs), elemCol(u+".b", tText, []string{"'x'", "'y'", "''"})}, ord)
			break
		}
		sd.feats["jsonb_to_recordset"] = true
		f.add(it, "jsonb_to_recordset("+q(c.doc)+") AS "+u+"(a int, b text)",
			[]*column{elemCol(u+".a", tInt, collDocAs), elemCol(u+".b", tText, []string{"'x'", "'y'", "''"})}, "")
	case x < 11:
		sd.feats["generate_series over columns"] = true
		f.add(it, "generate_series("+q(c.lo)+", "+q(c.hi)+")"+ordSQL+" AS "+u+"(i"+ordName(ord)+")", []*column{intEl(u + ".i")}, ord)
	default:
		if r.IntN(2) == 0 {
			sd.feats["ROWS FROM"] = true
			f.add(it, "ROWS FROM (unnest("+q(c.ints)+"), generate_series("+q(c.lo)+", "+q(c.hi)+"))"+ordSQL+" AS "+u+"(x, i"+ordName(ord)+")",
				[]*column{intEl(u + ".x"), intEl(u + ".i")}, ord)
			break
		}
		sd.feats["jsonb_array_elements_text"] = true
		f.add(it, "jsonb_array_elements_text("+q(c.doc)+")"+ordSQL+" AS "+u+"(e"+ordName(ord)+")", []*column{textEl(u + ".e")}, ord)
	}
	return f
}

// collDerived makes f's source a derived table over the collection table
// selecting every column under its own name, now and then filtered.
func (sd *srfDraw) collDerived(f *frag) {
	c := sd.coll
	a := sd.aliased(c.t)
	var items []string
	for _, col := range append(append([]*column{}, c.t.cols...), c.ints, c.texts, c.doc, c.attrs) {
		items = append(items, a.q(col))
	}
	body := "SELECT " + strings.Join(items, ", ") + " FROM " + a.item
	if sd.r.IntN(2) == 0 {
		body += " WHERE " + sd.exprs(a).pred(1)
	}
	d := sd.alias("d")
	f.src = &rel{item: "(" + body + ") " + d, ref: d, cols: c.t.cols, key: c.t.key, t: c.t}
	f.cols = nil
	for _, col := range c.t.cols {
		cc := *col
		cc.name = f.src.q(col)
		f.cols = append(f.cols, &cc)
	}
	f.key = f.src.keyRefs()
	sd.feats["function over a derived table"] = true
}

// ordName is the ordinal's name in an alias list (", o"), "" for none.
func ordName(ord string) string {
	if ord == "" {
		return ""
	}
	return ", o"
}

// tableFrag expands a program table's row: a series between two of its
// small integers, an array of two or three of its columns of one type
// class unnested, a LATERAL VALUES list of them, a text split; nil when
// t has none of those.
func (sd *srfDraw) tableFrag(t *table) *frag {
	r := sd.r
	f := sd.newFrag(t)
	u := sd.alias("u")
	smalls := colsOf(f.cols[:len(t.cols)], func(c *column) bool { return c.typ.integer() && c.small })
	switch x := r.IntN(8); {
	case x < 2 && len(smalls) > 0:
		it := sd.sep()
		ordSQL, ord := sd.ordinality(u)
		// Bounded by construction: a key moved by 100, a bulk row's key
		// or a fact's parent (the previous bulk key) is a small column
		// too, and a series up to one of those would be thousands of
		// rows per row.
		a := smalls[r.IntN(len(smalls))]
		lo, hi := a.name, "least("+smalls[r.IntN(len(smalls))].name+", "+a.name+" + 3)"
		switch r.IntN(3) {
		case 0:
			lo, hi = "0", "least("+a.name+", 3)"
		case 1:
			lo, hi = a.name, a.name+" + 2"
		}
		sd.feats["generate_series over columns"] = true
		f.add(it, "generate_series("+lo+", "+hi+")"+ordSQL+" AS "+u+"(i"+ordName(ord)+")", []*column{elemCol(u+".i", tInt, []string{"-1", "0", "1", "2", "3"})}, ord)
		return f
	case x < 5:
		// An unpivot: an array of columns of one class, or LATERAL VALUES.
		cl, cols := sd.classCols(f.cols[:len(t.cols)])
		if len(cols) < 2 {
			return nil
		}
		el := mergedCol(u+".v", cl, cols)
		if r.IntN(3) == 0 {
			var rows []string
			for i, c := range cols {
				rows = append(rows, fmt.Sprintf("('c%d', %s)", i, c.name))
			}
			sd.feats["LATERAL VALUES"] = true
			f.add(fnItem{sep: ",", item: "LATERAL "}, "(VALUES "+strings.Join(rows, ", ")+") "+u+"(side, v)",
				[]*column{elemCol(u+".side", tText, []string{"'c0'", "'c1'"}), el}, "")
			return f
		}
		var refs []string
		for _, c := range cols {
			refs = append(refs, c.name)
		}
		it := sd.sep()
		ordSQL, ord := sd.ordinality(u)
		sd.feats["unnest of an array of columns"] = true
		f.add(it, "unnest(ARRAY["+strings.Join(refs, ", ")+"])"+ordSQL+" AS "+u+"(v"+ordName(ord)+")", []*column{el}, ord)
		return f
	case x < 6:
		texts := colsOf(f.cols[:len(t.cols)], func(c *column) bool { return c.typ == tText })
		if len(texts) == 0 {
			return nil
		}
		c := texts[r.IntN(len(texts))]
		it := sd.sep()
		sd.feats["regexp_split_to_table"] = true
		el := elemCol(u+".part", tText, append([]string{"'a'", "'b'", "''"}, longOnes(c)...))
		f.add(it, "regexp_split_to_table("+c.name+", "+[]string{"','", "' '"}[r.IntN(2)]+") AS "+u+"(part)", []*column{el}, "")
		return f
	}
	return sd.valuesFrag(t)
}

// longOnes are the long texts of c's domain (a value computed from one
// may be long too).
func longOnes(c *column) []string {
	if hasLongExternal(c) {
		return []string{longExternal}
	}
	return nil
}

func colsOf(cols []*column, f func(*column) bool) []*column {
	var out []*column
	for _, c := range cols {
		if f(c) {
			out = append(out, c)
		}
	}
	return out
}

// classCols draws a type class and two or three of cols in it (an int
// class takes bigint too, a numeric one integers).
func (sd *srfDraw) classCols(cols []*column) (typ, []*column) {
	r := sd.r
	classes := []typ{tInt, tText, tNumeric, tBool, tDate}
	for _, i := range r.Perm(len(classes)) {
		cl := classes[i]
		in := colsOf(cols, func(c *column) bool {
			switch cl {
			case tInt:
				return c.typ.integer()
			case tNumeric:
				return c.typ == tNumeric || c.typ.integer() && r.IntN(2) == 0
			}
			return c.typ == cl
		})
		if len(in) >= 2 {
			r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			return cl, in[:min(len(in), 2+r.IntN(2))]
		}
	}
	return tInt, nil
}

// mergedCol describes the elements of an array of cols: their class and
// every value any of them takes.
func mergedCol(name string, cl typ, cols []*column) *column {
	c := elemCol(name, cl, nil)
	for _, s := range cols {
		c.domain = append(c.domain, s.domain...)
		c.small = c.small && s.small
		if s.typ == tBigint && cl == tInt {
			c.typ, c.sqlType = tBigint, "bigint"
		}
	}
	return c
}

// valuesFrag joins t to a constant relation: a VALUES list keyed by
// values of one of t's columns (a key repeated, a NULL), inner or LEFT
// (t preserved), or a constant series crossed with it.
func (sd *srfDraw) valuesFrag(t *table) *frag {
	r := sd.r
	f := sd.newFrag(t)
	v := sd.alias("v")
	cands := colsOf(f.cols[:len(t.cols)], func(c *column) bool {
		return (c.typ.integer() || c.typ == tText || c.typ == tBool) && !hasLongExternal(c)
	})
	if len(cands) == 0 || r.IntN(4) == 0 {
		sd.feats["constant generate_series"] = true
		f.add(fnItem{sep: "CROSS JOIN"}, fmt.Sprintf("generate_series(1, %d) %s(n)", 1+r.IntN(3), v), []*column{elemCol(v+".n", tInt, []string{"1", "2", "3"})}, "")
		return f
	}
	c := cands[r.IntN(len(cands))]
	var rows []string
	names := []string{"'one'", "'two'", "'uno'", "NULL", "''"}
	for i := 0; i < 2+r.IntN(3); i++ {
		val := c.domain[r.IntN(len(c.domain))]
		if i == 0 {
			val = "(" + val + ")::" + c.sqlType
		}
		rows = append(rows, "("+val+", "+names[r.IntN(len(names))]+")")
	}
	if r.IntN(3) == 0 {
		rows = append(rows, rows[0]) // a key twice
	}
	it := fnItem{sep: "JOIN", on: v + ".k = " + c.name}
	if r.IntN(2) == 0 {
		it.sep = "LEFT JOIN"
		sd.feats["LEFT JOIN VALUES"] = true
	}
	sd.feats["VALUES"] = true
	cc := *c
	cc.name = v + ".k"
	f.add(it, "(VALUES "+strings.Join(rows, ", ")+") "+v+"(k, name)", []*column{&cc, elemCol(v+".name", tText, []string{"'one'", "'two'", "''"})}, "")
	return f
}

// ---- queries over a frag ----

// items draws 1–3 select items over f (its key first when keyed and
// withKey; a jsonb output now and then), named o<i>.
func (sd *srfDraw) items(f *frag, withKey bool) []string {
	r := sd.r
	e := &exprGen{r: r, t: f.view()}
	var items []string
	if withKey && f.key != nil {
		for _, k := range f.key {
			items = append(items, fmt.Sprintf("%s AS o%d", k, len(items)))
		}
	}
	if len(f.elems) > 0 {
		items = append(items, fmt.Sprintf("%s AS o%d", f.elems[r.IntN(len(f.elems))].name, len(items)))
	}
	if len(f.raw) > 0 && r.IntN(2) == 0 {
		items = append(items, fmt.Sprintf("%s AS o%d", f.raw[r.IntN(len(f.raw))], len(items)))
		sd.feats["jsonb output"] = true
	}
	for i := r.IntN(3); i > 0; i-- {
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

// where draws a WHERE over f half the time ("" or " WHERE …").
func (sd *srfDraw) where(f *frag) string {
	if sd.r.IntN(2) == 0 {
		return ""
	}
	return " WHERE " + (&exprGen{r: sd.r, t: f.view()}).pred(1)
}

// fragRows is a row query over a frag, now and then DISTINCT.
func (sd *srfDraw) fragRows(f *frag) string {
	if sd.r.IntN(5) == 0 {
		// Distinct items: one expression twice is refused.
		cols := short(f.cols)
		var items []string
		for _, i := range sd.r.Perm(len(cols))[:min(len(cols), 1+sd.r.IntN(2))] {
			items = append(items, fmt.Sprintf("%s AS o%d", cols[i].name, len(items)))
		}
		sd.feats["DISTINCT over a function"] = true
		return "SELECT DISTINCT " + strings.Join(items, ", ") + " FROM " + f.from() + sd.where(f)
	}
	sd.feats["rows of a function"] = true
	return "SELECT " + strings.Join(sd.items(f, sd.r.IntN(2) == 0), ", ") + " FROM " + f.from() + sd.where(f)
}

// aggList draws an aggregate query's select list over cols: one or two
// groups (an element first, usually), count(*) and one or two of count,
// sum, min, max, count(DISTINCT), bool_or; its GROUP BY ("" for a
// total).
func (sd *srfDraw) aggList(cols, elems []*column) ([]string, string) {
	r := sd.r
	e := &exprGen{r: r, t: &table{cols: noFloat(cols)}}
	var items, gb []string
	groups := short(elems)
	if len(groups) == 0 || r.IntN(4) == 0 {
		groups = short(cols)
	}
	// Distinct groups: one expression grouped twice is refused.
	for _, i := range r.Perm(len(groups))[:min(len(groups), []int{0, 1, 1, 1, 2}[r.IntN(5)])] {
		items = append(items, fmt.Sprintf("%s AS g%d", groups[i].name, len(items)))
		gb = append(gb, fmt.Sprint(len(items)))
	}
	items = append(items, "count(*) AS n")
	for i := 1 + r.IntN(2); i > 0; i-- {
		var a string
		switch r.IntN(6) {
		case 0:
			a = "count(" + e.pick(e.t.cols).name + ")"
		case 1:
			a = "sum(" + e.numExpr() + ")"
		case 2:
			if ords := short(colsOf(e.t.cols, func(c *column) bool { return c.typ.orderable() })); len(ords) > 0 {
				a = []string{"min(", "max("}[r.IntN(2)] + e.pick(ords).name + ")"
				break
			}
			a = "count(*)"
		case 3:
			a = "count(DISTINCT " + e.pick(short(e.t.cols)).name + ")"
		case 4:
			a = "bool_or(" + e.pred(0) + ")"
		default:
			a = "max(" + e.numExpr() + ")"
		}
		items = append(items, fmt.Sprintf("%s AS a%d", a, len(items)))
	}
	if len(gb) == 0 {
		return items, ""
	}
	return items, " GROUP BY " + strings.Join(gb, ", ")
}

// fragAgg is an aggregate over a frag, grouped by an element usually.
func (sd *srfDraw) fragAgg(f *frag) string {
	items, gb := sd.aggList(f.cols, f.elems)
	sd.feats["aggregate over a function"] = true
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + f.from() + sd.where(f) + gb
	if gb != "" && sd.r.IntN(4) == 0 {
		q += " HAVING count(*) > 1"
	}
	return q
}

// fragJoin joins a frag and a program table on an element: the frag
// first (the table after it, INNER or LEFT, read after a comma as the
// function's outer join), or the table first with the frag in
// parentheses on either side of a LEFT, RIGHT or inner join.
func (sd *srfDraw) fragJoin(f *frag) string {
	r := sd.r
	t := sd.anyTable()
	o := sd.aliased(t)
	var x, y *column
	for _, el := range r.Perm(len(f.elems)) {
		cands := colsOf(short(t.cols), func(c *column) bool { return comparable(c, f.elems[el]) && c.typ != tFloat })
		if len(cands) > 0 {
			x, y = f.elems[el], cands[r.IntN(len(cands))]
			for _, k := range t.key {
				if comparable(k, x) && r.IntN(2) == 0 {
					y = k
				}
			}
			break
		}
	}
	if x == nil || sd.g.smallBatch && (f.src.big || o.big) {
		// (In tiny batches, a join of two tables one of which gets bulk
		// rows would read the whole query for each of their changes: a
		// change on the side joined to a function's output finds its
		// rows by expanding every source row.)
		return sd.fragRows(f)
	}
	on := o.q(y) + " = " + x.name
	var from string
	switch k := r.IntN(6); {
	case k < 2:
		kind := []string{"JOIN", "LEFT JOIN"}[r.IntN(2)]
		from = f.from() + " " + kind + " " + o.item + " ON " + on
		sd.feats["function then a join"] = true
	case k < 4:
		from = o.item + " LEFT JOIN " + f.tree() + " ON " + on
		sd.feats["function on the NULL-extended side"] = true
	case k < 5:
		from = f.tree() + " RIGHT JOIN " + o.item + " ON " + on
		sd.feats["function on the NULL-extended side"] = true
	default:
		from = o.item + " JOIN " + f.tree() + " ON " + on
		sd.feats["function joined to a table"] = true
	}
	cols := append(append([]*column{}, f.cols...), o.view().cols...)
	if r.IntN(3) == 0 {
		items, gb := sd.aggList(cols, append(append([]*column{}, f.elems...), o.view().cols...))
		sd.feats["aggregate over a function"] = true
		return "SELECT " + strings.Join(items, ", ") + " FROM " + from + gb
	}
	e := &exprGen{r: r, t: &table{cols: cols}}
	items := sd.items(f, r.IntN(2) == 0)
	items = append(items, fmt.Sprintf("%s AS o%d", e.pick(o.view().cols).name, len(items)))
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from
	if r.IntN(3) == 0 {
		// A predicate on the preserved side only: o's columns, read
		// after the join.
		q += " WHERE " + (&exprGen{r: r, t: o.view()}).pred(1)
	}
	return q
}

// ---- derived tables and CTEs holding a function ----

// rel draws a derived table (or, one time in three, a CTE) holding a
// function: a projection of a frag (keyed by the source's key and a
// written ordinal), an aggregate of one (an inner level, keyed by its
// group), an ALL set operation (not when needKey), or — below the second
// level — a projection or aggregate of another such rel.
func (sd *srfDraw) rel(depth int, needKey bool) *rel {
	r := sd.r
	out := &rel{}
	var body string
	var f *frag
	if depth < 2 && r.IntN(4) == 0 {
		inner := sd.rel(depth+1, false)
		f = &frag{src: inner, cols: inner.view().cols, elems: inner.view().cols}
		if inner.key != nil {
			f.key = inner.keyRefs()
		}
		sd.feats["nested function"] = true
	} else {
		f = sd.frag()
	}
	out.big = f.src.big
	kind := r.IntN(8)
	switch {
	case needKey && f.key == nil && kind < 4, needKey && kind == 7:
		kind = 4 // an aggregate is keyed by its group
	}
	switch {
	case kind < 4:
		var items []string
		for i, k := range f.key {
			kc := descCol(viewColOf(f.cols, k), fmt.Sprintf("k%d", i), false)
			items = append(items, k+" AS "+kc.name)
			out.cols, out.key = append(out.cols, kc), append(out.key, kc)
		}
		for i, el := range f.elems[:min(len(f.elems), 2)] {
			ec := descCol(el, fmt.Sprintf("e%d", i), false)
			items = append(items, el.name+" AS "+ec.name)
			out.cols = append(out.cols, ec)
		}
		if others := colsOf(f.cols, func(c *column) bool { return !strings.Contains(c.name, "(") }); len(others) > 0 && (len(items) == 0 || r.IntN(2) == 0) {
			c := others[r.IntN(len(others))]
			items = append(items, c.name+" AS v0")
			out.cols = append(out.cols, descCol(c, "v0", false))
		}
		body = "SELECT " + strings.Join(items, ", ") + " FROM " + f.from() + sd.where(f)
		sd.feats["derived table holding a function"] = true
	case kind < 7:
		groups := short(f.elems)
		if len(groups) == 0 {
			groups = short(f.cols)
		}
		gc := groups[r.IntN(len(groups))]
		g := descCol(gc, "g0", false)
		items := []string{gc.name + " AS g0", "count(*) AS n"}
		out.cols = append(out.cols, g, &column{name: "n", typ: tBigint, sqlType: "bigint", small: true, domain: []string{"1", "2", "3"}})
		if nums := noFloat(colsOf(f.cols, func(c *column) bool { return c.typ.numeric() })); len(nums) > 0 && r.IntN(2) == 0 {
			items = append(items, "sum("+nums[r.IntN(len(nums))].name+") AS s")
			out.cols = append(out.cols, &column{name: "s", typ: tNumeric, sqlType: "numeric", domain: []string{"0", "1", "2"}})
		}
		out.key = []*column{g}
		body = "SELECT " + strings.Join(items, ", ") + " FROM " + f.from() + sd.where(f) + " GROUP BY 1"
		sd.feats["aggregate of a function in FROM"] = true
	default:
		q, cols := sd.setopAll(depth)
		body, out.cols = q, cols
		sd.feats["ALL set operation in FROM"] = true
	}
	if depth > 1 {
		sd.feats["nested"] = true
	}
	if r.IntN(3) == 0 {
		name := sd.alias("c")
		sd.ctes = append(sd.ctes, name+" AS ("+body+")")
		out.ref = sd.alias("r")
		out.item = name + " " + out.ref
		sd.feats["CTE holding a function"] = true
		return out
	}
	out.ref = sd.alias("d")
	out.item = "(" + body + ") " + []string{"", "AS "}[r.IntN(2)] + out.ref
	return out
}

// viewColOf is the column of cols named name.
func viewColOf(cols []*column, name string) *column {
	for _, c := range cols {
		if c.name == name {
			return c
		}
	}
	return elemCol(name, tBigint, ordDomain)
}

// ---- set operations ----

// setopAll is a set operation of two or three branches, each over a
// program table or a frag, with at least one INTERSECT ALL or EXCEPT
// ALL: its SQL and output columns (u0, u1).
func (sd *srfDraw) setopAll(depth int) (string, []*column) {
	r := sd.r
	ops := []string{"INTERSECT ALL", "EXCEPT ALL", "INTERSECT ALL", "EXCEPT ALL", "UNION ALL", "UNION", "EXCEPT"}
	op := ops[r.IntN(4)]
	nb := 2
	if r.IntN(3) == 0 {
		nb = 3
		sd.feats["three branches"] = true
	}
	classes := []typ{tInt, tText, tInt, tBool}
	var sig []typ
	for i := 1 + r.IntN(2); i > 0; i-- {
		sig = append(sig, classes[r.IntN(len(classes))])
	}
	var outCols []*column
	var branches []string
	// In a program with tiny apply batches a branch reads no table that
	// gets bulk rows: a change re-derives the counts of its group and
	// every copy of it, so each of a thousand bulk rows, one batch each,
	// would re-derive thousands of copies. With no other table, the
	// operation is a UNION ALL, which keeps no counts.
	quiet := func() *table { return sd.anyTable() }
	if sd.g.smallBatch {
		quiet = func() *table {
			for range 8 {
				if t := sd.anyTable(); !sd.big(t) {
					return t
				}
			}
			return nil
		}
	}
	for b := 0; b < nb; b++ {
		var from, where string
		var e *exprGen
		t := quiet()
		if t == nil {
			op, nb = "UNION ALL", 2
			t = sd.anyTable()
		}
		if r.IntN(2) == 0 {
			f := sd.fragOver(t)
			e = &exprGen{r: r, t: &table{cols: append(append([]*column{}, f.elems...), f.cols...)}}
			from, where = f.from(), sd.where(f)
			sd.feats["function in a set operation"] = true
		} else {
			s := sd.table(t)
			e = sd.exprs(s)
			from = s.item
			if r.IntN(2) == 0 {
				where = " WHERE " + e.pred(1)
			}
		}
		var items []string
		for i, cl := range sig {
			x, c := sd.elemOfClass(e, cl)
			if b == 0 {
				cc := *c
				cc.name, cc.notNull = fmt.Sprintf("u%d", i), false
				outCols = append(outCols, &cc)
				x += " AS " + cc.name
			}
			items = append(items, x)
		}
		branches = append(branches, "SELECT "+strings.Join(items, ", ")+" FROM "+from+where)
	}
	sd.feats[op] = true
	q := branches[0] + " " + op + " " + branches[1]
	if nb == 3 {
		op2 := ops[r.IntN(len(ops))]
		sd.feats[op2] = true
		if op2 != op && r.IntN(2) == 0 {
			q = branches[0] + " " + op + " (" + branches[1] + " " + op2 + " " + branches[2] + ")"
			sd.feats["nested set operation"] = true
		} else {
			q += " " + op2 + " " + branches[2]
		}
	}
	return q, outCols
}

// elemOfClass is an expression of e's columns of class cl: a column
// (the first columns, a frag's elements, twice as likely), or a constant
// or expression of it.
func (sd *srfDraw) elemOfClass(e *exprGen, cl typ) (string, *column) {
	in := colsOf(short(e.t.cols), func(c *column) bool {
		return c.typ == cl || cl == tInt && c.typ == tBigint
	})
	if len(in) > 0 && sd.r.IntN(5) > 0 {
		c := in[sd.r.IntN(min(len(in), 2))]
		if sd.r.IntN(2) == 0 {
			c = in[sd.r.IntN(len(in))]
		}
		if cl == tInt && c.typ == tBigint || cl == tInt && c.typ == tInt {
			// int and bigint branches meet as bigint.
			cc := *c
			cc.typ, cc.sqlType = tBigint, "bigint"
			return c.name + "::bigint", &cc
		}
		return c.name, c
	}
	x, c := sd.classExpr(e, cl, true)
	if cl == tInt {
		cc := *c
		cc.typ, cc.sqlType = tBigint, "bigint"
		return "(" + x + ")::bigint", &cc
	}
	return x, c
}

// ---- the queries ----

// srfSelect draws a definition of these shapes.
func (g *gen) srfSelect(r *rand.Rand) shapeDef {
	sd := g.newSRFDraw(r, map[string]bool{})
	var q string
	switch x := r.IntN(20); {
	case x < 4:
		q = sd.fragRows(sd.frag())
	case x < 7:
		q = sd.fragAgg(sd.frag())
	case x < 10:
		q = sd.fragJoin(sd.frag())
	case x < 12:
		q = sd.setopQueryAll()
	case x < 13:
		q = sd.withQuery(1)
	case x < 14:
		q = sd.withTwice()
	case x < 18:
		q = sd.overRel()
	default:
		q = sd.valuesQuery()
	}
	return shapeDef{sql: sd.withClause() + q, feats: sd.feats}
}

// setopQueryAll is an ALL set operation at the top, under an aggregate
// or in a CTE.
func (sd *srfDraw) setopQueryAll() string {
	r := sd.r
	q, cols := sd.setopAll(1)
	switch r.IntN(3) {
	case 0:
		u := sd.alias("u")
		sd.feats["aggregate over an ALL set operation"] = true
		return "SELECT " + u + "." + cols[0].name + " AS g0, count(*) AS n FROM (" + q + ") " + u + " GROUP BY 1"
	case 1:
		name := sd.alias("c")
		sd.ctes = append(sd.ctes, name+" AS ("+q+")")
		sd.feats["ALL set operation in a CTE"] = true
		return "SELECT * FROM " + name
	}
	return q
}

// overRel reads a derived table or CTE holding a function: rows, an
// aggregate, a subquery filter (the shapes' sublinkQuery), a window, a
// top-K, or joined to a program table (on the NULL-extended side or the
// preserved one).
func (sd *srfDraw) overRel() string {
	r := sd.r
	x := r.IntN(10)
	if x < 3 {
		return sd.sublinkQuery(1) // its source a rel holding a function half the time
	}
	d := sd.rel(1, x == 5)
	if d.big && x < 6 {
		// A window or a top-K over rows that bulk rows reach in tiny
		// batches would re-derive thousands of rows per batch.
		x = 9
	}
	switch {
	case x < 5:
		call, _ := sd.windowCall(d, nil, sd.partition(d, nil))
		sd.feats["window over a function"] = true
		return "SELECT " + strings.Join(append(sd.outputs(d, false), call+" AS w"), ", ") + " FROM " + d.item
	case x == 5:
		o := d.keyRefs()[0]
		if ords := colsOf(short(d.cols), func(c *column) bool { return c.typ.orderable() }); len(ords) > 0 {
			o = d.q(ords[r.IntN(len(ords))])
		}
		sd.feats["top-K over a function"] = true
		return "SELECT " + strings.Join(sd.outputs(d, true), ", ") + " FROM " + d.item + " ORDER BY " +
			strings.Join(append([]string{o + []string{"", " DESC"}[r.IntN(2)]}, d.keyRefs()...), ", ") +
			fmt.Sprintf(" LIMIT %d", 1+r.IntN(3))
	case x < 8:
		t := sd.anyTable()
		o := sd.aliased(t)
		x, y, ok := sd.pair(o, d, t, nil)
		if !ok || sd.g.smallBatch && (d.big || o.big) {
			break
		}
		kind := []string{"LEFT JOIN", "LEFT JOIN", "JOIN", "FULL JOIN"}[r.IntN(4)]
		from := o.item + " " + kind + " " + d.item + " ON " + d.q(y) + " = " + o.q(x)
		if r.IntN(3) == 0 {
			from = d.item + " " + kind + " " + o.item + " ON " + d.q(y) + " = " + o.q(x)
		}
		sd.feats["derived function joined"] = true
		items := append(sd.outputs(d, false), fmt.Sprintf("%s AS p0", o.q(o.cols[r.IntN(len(o.cols))])))
		return "SELECT " + strings.Join(items, ", ") + " FROM " + from
	}
	if gs := short(d.cols); len(gs) > 0 && r.IntN(2) == 0 {
		sd.feats["aggregate over a derived function"] = true
		return "SELECT " + d.q(gs[r.IntN(len(gs))]) + " AS g0, count(*) AS n FROM " + d.item + " GROUP BY 1"
	}
	return "SELECT " + strings.Join(sd.outputs(d, d.key != nil), ", ") + " FROM " + d.item
}

// withTwice reads a CTE holding a function twice, each copy pulled up
// into the query: joined to itself on its key (the source's and a written
// ordinal) or on the source's key and an element, or filtered by IN over
// itself.
func (sd *srfDraw) withTwice() string {
	r := sd.r
	f := sd.frag()
	var items, names []string
	for i, k := range f.src.keyRefs() {
		items, names = append(items, fmt.Sprintf("%s AS k%d", k, i)), append(names, fmt.Sprintf("k%d", i))
	}
	nk := len(names)
	ordKey := f.key != nil
	if ordKey {
		ord := f.key[len(f.key)-1]
		items, names = append(items, ord+" AS o"), append(names, "o")
	}
	for i, el := range f.elems[:min(len(f.elems), 2)] {
		n := fmt.Sprintf("e%d", i)
		items, names = append(items, el.name+" AS "+n), append(names, n)
	}
	name := sd.alias("c")
	sd.ctes = append(sd.ctes, name+" AS (SELECT "+strings.Join(items, ", ")+" FROM "+f.from()+sd.where(f)+")")
	sd.feats["WITH twice"] = true
	sd.feats["CTE holding a function"] = true
	a, b := sd.alias("a"), sd.alias("b")
	last := names[len(names)-1]
	if r.IntN(3) == 0 {
		return "SELECT " + a + "." + names[0] + ", " + a + "." + last + " FROM " + name + " " + a + " WHERE " + a + "." + last +
			" IN (SELECT " + b + "." + last + " FROM " + name + " " + b + ")"
	}
	var on []string
	for _, n := range names[:nk] {
		on = append(on, b+"."+n+" = "+a+"."+n)
	}
	if ordKey && r.IntN(3) > 0 {
		on = append(on, b+".o = "+a+".o")
	} else {
		on = append(on, b+"."+last+" = "+a+"."+last)
	}
	kind := []string{" JOIN ", " LEFT JOIN "}[r.IntN(2)]
	return "SELECT " + a + "." + names[0] + ", " + a + "." + last + ", " + b + "." + last + " AS b" + last + " FROM " + name + " " + a + kind + name + " " + b + " ON " + strings.Join(on, " AND ")
}

// valuesQuery joins a program table to a constant relation: a VALUES
// frag read by rows or an aggregate, or a CTE holding a VALUES list.
func (sd *srfDraw) valuesQuery() string {
	r := sd.r
	t := sd.anyTable()
	if r.IntN(3) > 0 {
		f := sd.valuesFrag(t)
		if r.IntN(2) == 0 {
			return sd.fragAgg(f)
		}
		return sd.fragRows(f)
	}
	s := sd.aliased(t)
	cands := colsOf(short(t.cols), func(c *column) bool { return c.typ.integer() || c.typ == tText })
	if len(cands) == 0 {
		return sd.fragRows(sd.valuesFrag(t))
	}
	c := cands[r.IntN(len(cands))]
	var rows []string
	for i := 0; i < 2+r.IntN(3); i++ {
		rows = append(rows, fmt.Sprintf("(%s, %d)", c.domain[r.IntN(len(c.domain))], 10*(i+1)))
	}
	name := sd.alias("c")
	sd.ctes = append(sd.ctes, name+"(k, w) AS (VALUES "+strings.Join(rows, ", ")+")")
	sd.feats["CTE holding VALUES"] = true
	kind := []string{" JOIN ", " LEFT JOIN "}[r.IntN(2)]
	return "SELECT " + s.q(c) + " AS g0, sum(" + name + ".w) AS w, count(*) AS n FROM " + s.item + kind + name + " ON " + name + ".k = " + s.q(c) + " GROUP BY 1"
}

// ---- chains ----

// srfOverLevel draws a chain's last level expanding the level below (up):
// an array of its columns unnested, a series over one of its counts, a
// VALUES list joined to it, an ALL set operation of it and a program
// table, or the collection table's expanded rows joined to it.
func (g *gen) srfOverLevel(r *rand.Rand, up *chainLevel) shapeDef {
	sd := g.newSRFDraw(r, map[string]bool{"in a chain": true})
	t := up.desc
	var q string
	switch x := r.IntN(6); {
	case x < 2:
		if f := sd.tableFrag(t); f != nil {
			q = sd.fragRows(f)
			break
		}
		q = sd.fragRows(sd.valuesFrag(t))
	case x < 3:
		q = sd.fragAgg(sd.valuesFrag(t))
	case x < 4 && !g.smallBatch:
		// (Not in tiny batches: the level's rows come from bulk rows, and
		// a change re-derives every copy of its group.)
		src := sd.table(t)
		e := sd.exprs(src)
		x, _ := sd.elemOfClass(e, tInt)
		o := sd.aliased(sd.anyTable())
		y, _ := sd.elemOfClass(sd.exprs(o), tInt)
		op := []string{" INTERSECT ALL ", " EXCEPT ALL "}[r.IntN(2)]
		sd.feats[strings.TrimSpace(op)] = true
		q = "SELECT " + x + " AS u0 FROM " + src.item + op + "SELECT " + y + " FROM " + o.item
	default:
		if g.coll == nil {
			q = sd.fragRows(sd.valuesFrag(t))
			break
		}
		f := sd.collFrag()
		src := sd.table(t)
		ints := colsOf(short(t.cols), func(c *column) bool { return c.typ.integer() || c.typ == tText })
		var on string
		for _, el := range f.elems {
			for _, c := range ints {
				if comparable(c, el) && on == "" {
					on = el.name + " = " + src.q(c)
				}
			}
		}
		if on == "" {
			q = sd.fragRows(f)
			break
		}
		sd.feats["function joined to a level"] = true
		items := sd.items(f, false)
		items = append(items, fmt.Sprintf("%s AS p%d", src.q(t.cols[r.IntN(len(t.cols))]), len(items)))
		q = "SELECT " + strings.Join(items, ", ") + " FROM " + src.item + " " + []string{"JOIN", "LEFT JOIN"}[r.IntN(2)] + " " + f.tree() + " ON " + on
	}
	return shapeDef{sql: sd.withClause() + q, feats: sd.feats}
}
