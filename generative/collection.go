package generative

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

// The collection table (ADR 0034's functions in FROM): programs the
// function stream picks get one more table, besides the program's, whose
// rows hold an int[] and a text[] (NULL, empty, with duplicates and NULL
// elements), a jsonb array of objects {"a": int, "b": text} (keys missing
// now and then, values NULL) and a jsonb object of a few keys, with a
// small group column and two small integer bounds (lo, hi; NULL, or lo
// above hi, make empty series). Its writes, drawn from the function
// stream after body events, grow, shrink, reorder, empty and NULL the
// arrays and documents, move keys, delete, truncate and bulk-fill, in
// transactions of their own or lanes beside writers of the program's
// tables. It is not among g.tables: the main stream's schema, writes and
// definitions stay what the seed drew.

// collection is the program's collection table.
type collection struct {
	// t is its scalar columns (key, group, bounds) as a table for
	// exprGen; its name is the table's.
	t *table
	// ints, texts: the array columns; doc the jsonb array of objects,
	// attrs the jsonb object.
	ints, texts, doc, attrs *column
	grp, lo, hi             *column
	// fresh numbers bulk rows (keys from 1000 up).
	fresh int
}

// Element domains: what unnest and the jsonb functions yield.
var (
	collIntElems  = []string{"-1", "0", "1", "2", "3"}
	collTextElems = []string{"'a'", "'b'", "''", "'A'", "'a b'", "'x'"}
	collDocAs     = []string{"-1", "0", "1", "2", "3"}
	collDocBs     = []string{"x", "y", "", "x y"}
	collAttrKeys  = []string{"k1", "k2", "k3", "k4"}
)

// newCollection draws the collection table: a key of one int column (two
// one time in three, with a text part), the group, the bounds and the
// four collection columns, their names quoted now and then.
func newCollection(r *rand.Rand) *collection {
	name := []string{"sc", "sc", "sc", `"Coll"`}[r.IntN(4)]
	id := &column{name: "id", typ: tInt, sqlType: "int", notNull: true, small: true}
	for v := 0; v < 8+r.IntN(6); v++ {
		id.domain = append(id.domain, fmt.Sprint(v))
	}
	t := &table{name: name, key: []*column{id}, shiftKey: id}
	t.cols = append(t.cols, id)
	if r.IntN(3) == 0 {
		part := &column{name: "part", typ: tText, sqlType: "text", notNull: true, small: true, domain: []string{"'a'", "'b'"}}
		t.key = append(t.key, part)
		t.cols = append(t.cols, part)
	}
	c := &collection{t: t}
	c.grp = &column{name: "grp", typ: tText, sqlType: "text", small: true, domain: []string{"'a'", "'b'", "''", "'A'"}}
	c.lo = &column{name: "lo", typ: tInt, sqlType: "int", small: true, domain: []string{"-1", "0", "1", "2"}}
	c.hi = &column{name: "hi", typ: tInt, sqlType: "int", small: true, domain: []string{"0", "1", "2", "3", "4"}}
	t.cols = append(t.cols, c.grp, c.lo, c.hi)
	c.ints = &column{name: []string{"n", "n", `"Nums"`}[r.IntN(3)], sqlType: "int[]"}
	c.texts = &column{name: []string{"tags", "tags", `"tag list"`}[r.IntN(3)], sqlType: "text[]"}
	c.doc = &column{name: "doc", sqlType: "jsonb"}
	c.attrs = &column{name: "attrs", sqlType: "jsonb"}
	return c
}

// createSQL is the collection table's CREATE TABLE.
func (c *collection) createSQL() string {
	var parts, keys []string
	for _, col := range c.t.cols {
		parts = append(parts, col.name+" "+col.sqlType)
	}
	for _, col := range []*column{c.ints, c.texts, c.doc, c.attrs} {
		parts = append(parts, col.name+" "+col.sqlType)
	}
	for _, k := range c.t.key {
		keys = append(keys, k.name)
	}
	return "CREATE TABLE " + c.t.name + " (" + strings.Join(append(parts, "PRIMARY KEY ("+strings.Join(keys, ", ")+")"), ", ") + ")"
}

// colNames are every column's name, in table order.
func (c *collection) colNames() []string {
	var out []string
	for _, col := range c.t.cols {
		out = append(out, col.name)
	}
	for _, col := range []*column{c.ints, c.texts, c.doc, c.attrs} {
		out = append(out, col.name)
	}
	return out
}

// intArray is an int[] value: NULL, empty, or 1–5 elements with
// duplicates and NULL elements.
func intArray(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return "NULL"
	case 1:
		return "'{}'::int[]"
	}
	var el []string
	for i := 1 + r.IntN(5); i > 0; i-- {
		if r.IntN(9) == 0 {
			el = append(el, "NULL")
			continue
		}
		el = append(el, collIntElems[r.IntN(len(collIntElems))])
	}
	return "ARRAY[" + strings.Join(el, ", ") + "]::int[]"
}

// textArray is a text[] value, likewise.
func textArray(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return "NULL"
	case 1:
		return "'{}'::text[]"
	}
	var el []string
	for i := 1 + r.IntN(4); i > 0; i-- {
		if r.IntN(9) == 0 {
			el = append(el, "NULL")
			continue
		}
		el = append(el, collTextElems[r.IntN(len(collTextElems))])
	}
	return "ARRAY[" + strings.Join(el, ", ") + "]::text[]"
}

// docObject is one element of doc: {"a": int, "b": text}, either key
// missing or null now and then.
func docObject(r *rand.Rand) string {
	var kv []string
	switch r.IntN(6) {
	case 0:
	case 1:
		kv = append(kv, `"a": null`)
	default:
		kv = append(kv, `"a": `+collDocAs[r.IntN(len(collDocAs))])
	}
	switch r.IntN(5) {
	case 0:
	case 1:
		kv = append(kv, `"b": null`)
	default:
		kv = append(kv, `"b": "`+collDocBs[r.IntN(len(collDocBs))]+`"`)
	}
	return "{" + strings.Join(kv, ", ") + "}"
}

// docValue is a doc value: NULL, [], or 1–4 objects (duplicates now and
// then).
func docValue(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return "NULL"
	case 1:
		return "'[]'::jsonb"
	}
	var el []string
	for i := 1 + r.IntN(4); i > 0; i-- {
		if len(el) > 0 && r.IntN(5) == 0 {
			el = append(el, el[r.IntN(len(el))])
			continue
		}
		el = append(el, docObject(r))
	}
	return "'[" + strings.Join(el, ", ") + "]'::jsonb"
}

// attrsValue is an attrs value: NULL, {}, or some of the keys with an
// int, a text, null or an array.
func attrsValue(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return "NULL"
	case 1:
		return "'{}'::jsonb"
	}
	var kv []string
	for _, i := range r.Perm(len(collAttrKeys))[:1+r.IntN(len(collAttrKeys))] {
		kv = append(kv, `"`+collAttrKeys[i]+`": `+attrScalar(r))
	}
	return "'{" + strings.Join(kv, ", ") + "}'::jsonb"
}

func attrScalar(r *rand.Rand) string {
	return []string{"1", "2", `"x"`, `"y"`, "null", "[1, 2]", "true"}[r.IntN(7)]
}

// row is one row's values, keyed by kv.
func (c *collection) row(r *rand.Rand, kv []string) string {
	vals := map[*column]string{}
	for i, k := range c.t.key {
		vals[k] = kv[i]
	}
	for _, col := range []*column{c.grp, c.lo, c.hi} {
		if r.IntN(7) == 0 {
			vals[col] = "NULL"
		} else {
			vals[col] = col.domain[r.IntN(len(col.domain))]
		}
	}
	var out []string
	for _, col := range c.t.cols {
		out = append(out, vals[col])
	}
	out = append(out, intArray(r), textArray(r), docValue(r), attrsValue(r))
	return "(" + strings.Join(out, ", ") + ")"
}

func (c *collection) keyVals(r *rand.Rand) []string {
	out := make([]string, len(c.t.key))
	for i, k := range c.t.key {
		out[i] = k.domain[r.IntN(len(k.domain))]
	}
	return out
}

// insert writes 1–3 rows, as an upsert two times in three.
func (c *collection) insert(r *rand.Rand) string {
	seen := map[string]bool{}
	var rows []string
	for i := 1 + r.IntN(3); i > 0; i-- {
		kv := c.keyVals(r)
		if s := strings.Join(kv, ","); !seen[s] {
			seen[s] = true
			rows = append(rows, c.row(r, kv))
		}
	}
	s := "INSERT INTO " + c.t.name + " (" + strings.Join(c.colNames(), ", ") + ") VALUES " + strings.Join(rows, ", ")
	var keys []string
	for _, k := range c.t.key {
		keys = append(keys, k.name)
	}
	switch r.IntN(3) {
	case 0:
		return s + " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO NOTHING"
	case 1:
		set := []string{}
		for _, col := range []*column{c.ints, c.texts, c.doc, c.attrs, c.lo} {
			if r.IntN(2) == 0 {
				set = append(set, col.name+" = EXCLUDED."+col.name)
			}
		}
		if len(set) == 0 {
			set = append(set, c.ints.name+" = EXCLUDED."+c.ints.name)
		}
		return s + " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ")
	}
	return s + " ON CONFLICT DO NOTHING"
}

// where is a statement's row choice: one key, or a predicate over the
// scalar columns.
func (c *collection) where(r *rand.Rand) string {
	if r.IntN(3) > 0 {
		return keyMatch(c.t, c.keyVals(r), "")
	}
	return (&exprGen{r: r, t: c.t}).pred(1)
}

// grow, shrink and reorder are assignments of a collection column.
func (c *collection) grow(r *rand.Rand) string {
	n, t, d, a := c.ints.name, c.texts.name, c.doc.name, c.attrs.name
	el := collIntElems[r.IntN(len(collIntElems))]
	switch r.IntN(7) {
	case 0:
		return n + " = " + n + " || " + intArray(r)
	case 1:
		return n + " = array_append(" + n + ", " + el + ")"
	case 2:
		return n + " = array_prepend(" + el + ", " + n + ")"
	case 3:
		return t + " = " + t + " || " + t // every element twice
	case 4:
		return t + " = array_append(" + t + ", " + collTextElems[r.IntN(len(collTextElems))] + ")"
	case 5:
		return d + " = " + d + " || '[" + docObject(r) + "]'::jsonb"
	}
	return a + " = " + a + ` || '{"` + collAttrKeys[r.IntN(len(collAttrKeys))] + `": ` + attrScalar(r) + "}'::jsonb"
}

func (c *collection) shrink(r *rand.Rand) string {
	n, t, d, a := c.ints.name, c.texts.name, c.doc.name, c.attrs.name
	switch r.IntN(7) {
	case 0:
		return n + " = " + n + "[2:]"
	case 1:
		return n + " = array_remove(" + n + ", " + collIntElems[r.IntN(len(collIntElems))] + ")"
	case 2:
		return t + " = " + t + "[1:1]"
	case 3:
		return t + " = array_remove(" + t + ", " + collTextElems[r.IntN(len(collTextElems))] + ")"
	case 4:
		return d + " = " + d + " - 0"
	case 5:
		return d + " = " + d + " - -1"
	}
	return a + " = " + a + " - '" + collAttrKeys[r.IntN(len(collAttrKeys))] + "'"
}

func (c *collection) reorder(r *rand.Rand) string {
	n, t, d := c.ints.name, c.texts.name, c.doc.name
	switch r.IntN(4) {
	case 0:
		// Reversed; a NULL array stays NULL.
		return n + " = CASE WHEN " + n + " IS NOT NULL THEN ARRAY(SELECT u.x FROM unnest(" + n + ") WITH ORDINALITY AS u(x, o) ORDER BY u.o DESC) END"
	case 1:
		return t + " = CASE WHEN " + t + " IS NOT NULL THEN ARRAY(SELECT u.x FROM unnest(" + t + ") AS u(x) ORDER BY u.x DESC NULLS LAST) END"
	case 2:
		return n + " = CASE WHEN " + n + " IS NOT NULL THEN ARRAY(SELECT u.x FROM unnest(" + n + ") AS u(x) ORDER BY u.x NULLS FIRST) END"
	}
	return d + " = CASE WHEN jsonb_array_length(" + d + ") > 0 THEN (SELECT jsonb_agg(j.e ORDER BY j.o DESC) FROM jsonb_array_elements(" + d + ") WITH ORDINALITY AS j(e, o)) ELSE " + d + " END"
}

// reset sets a collection column to a fresh value, NULL or empty.
func (c *collection) reset(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return c.ints.name + " = " + intArray(r)
	case 1:
		return c.texts.name + " = " + textArray(r)
	case 2:
		return c.doc.name + " = " + docValue(r)
	}
	return c.attrs.name + " = " + attrsValue(r)
}

// scalars changes the group or the bounds (swapped: lo above hi).
func (c *collection) scalars(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return c.grp.name + " = " + c.grp.domain[r.IntN(len(c.grp.domain))]
	case 1:
		return c.lo.name + " = " + c.hi.name + ", " + c.hi.name + " = " + c.lo.name
	case 2:
		return c.hi.name + " = " + c.hi.name + " + 1"
	}
	return c.lo.name + " = " + []string{"NULL", "0", "2"}[r.IntN(3)]
}

// stmt draws one write of the collection table.
func (c *collection) stmt(r *rand.Rand) string {
	name := c.t.name
	id := c.t.key[0].name
	switch x := r.IntN(100); {
	case x < 20:
		return c.insert(r)
	case x < 34:
		return "UPDATE " + name + " SET " + c.grow(r) + " WHERE " + c.where(r)
	case x < 46:
		return "UPDATE " + name + " SET " + c.shrink(r) + " WHERE " + c.where(r)
	case x < 54:
		return "UPDATE " + name + " SET " + c.reorder(r) + " WHERE " + c.where(r)
	case x < 64:
		return "UPDATE " + name + " SET " + c.reset(r) + " WHERE " + c.where(r)
	case x < 72:
		return "UPDATE " + name + " SET " + c.scalars(r) + " WHERE " + c.where(r)
	case x < 78:
		// A key moved out of the domain, or back.
		if r.IntN(2) == 0 {
			return fmt.Sprintf("UPDATE %s SET %s = %s + 100 WHERE %s AND NOT EXISTS (SELECT 1 FROM %s AS o WHERE %s)",
				name, id, id, keyMatch(c.t, c.keyVals(r), ""), name, sameKeyExcept(c.t, c.t.key[0], name+"."+id+" + 100"))
		}
		return fmt.Sprintf("UPDATE %s SET %s = %s - 100 WHERE %s >= 100 AND %s < 1000 AND NOT EXISTS (SELECT 1 FROM %s AS o WHERE %s)",
			name, id, id, id, id, name, sameKeyExcept(c.t, c.t.key[0], name+"."+id+" - 100"))
	case x < 88:
		return "DELETE FROM " + name + " WHERE " + c.where(r)
	case x < 90:
		return "TRUNCATE " + name
	case x < 96:
		return c.bulk(r)
	}
	return fmt.Sprintf("DELETE FROM %s WHERE %s >= 1000 AND %s %% %d = 0", name, id, id, 2+r.IntN(2))
}

// bulk inserts 20–200 rows with fresh keys, their collections cycling
// through NULL, empty and small arrays with duplicates.
func (c *collection) bulk(r *rand.Rand) string {
	n := 20 + r.IntN(180)
	start := 1000 + c.fresh
	c.fresh += n
	var exprs []string
	for _, col := range c.t.cols {
		switch col {
		case c.t.key[0]:
			exprs = append(exprs, "g")
		case c.grp:
			exprs = append(exprs, "(ARRAY['a', 'b', '', NULL])[1 + g % 4]")
		case c.lo:
			exprs = append(exprs, "CASE WHEN g % 9 = 0 THEN NULL ELSE g % 3 - 1 END")
		case c.hi:
			exprs = append(exprs, "g % 4")
		default:
			exprs = append(exprs, "'a'") // the key's text part
		}
	}
	exprs = append(exprs,
		"CASE WHEN g % 7 = 0 THEN NULL WHEN g % 5 = 0 THEN '{}' ELSE ARRAY[g % 3, g % 4, g % 3] END",
		"CASE WHEN g % 6 = 0 THEN NULL ELSE ARRAY['t' || g % 3, 'a', 't' || g % 2] END",
		`CASE WHEN g % 8 = 0 THEN NULL ELSE jsonb_build_array(jsonb_build_object('a', g % 4, 'b', 'x'), jsonb_build_object('a', g % 3)) END`,
		`CASE WHEN g % 5 = 0 THEN '{}' ELSE jsonb_build_object('k' || (1 + g % 4), g % 3, 'k1', 'x') END`)
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM generate_series(%d, %d) g ON CONFLICT DO NOTHING",
		c.t.name, strings.Join(c.colNames(), ", "), strings.Join(exprs, ", "), start, start+n-1)
}

// fill is the rows the collection table starts with: every key of the
// domain (one text part each), then a few more.
func (c *collection) fill(r *rand.Rand) Step {
	s := Step{Kind: StepTxn}
	var rows []string
	for _, v := range c.t.key[0].domain {
		kv := []string{v}
		if len(c.t.key) > 1 {
			kv = append(kv, c.t.key[1].domain[r.IntN(2)])
		}
		rows = append(rows, c.row(r, kv))
	}
	s.Stmts = append(s.Stmts, "INSERT INTO "+c.t.name+" ("+strings.Join(c.colNames(), ", ")+") VALUES "+strings.Join(rows, ", "))
	if r.IntN(2) == 0 {
		s.Stmts = append(s.Stmts, c.bulk(r))
	}
	return s
}

// txn is one transaction of 1–4 writes of the collection table (rolled
// back now and then).
func (c *collection) txn(r *rand.Rand) Step {
	s := Step{Kind: StepTxn, Rollback: r.IntN(20) == 0}
	for i := 1 + r.IntN(4); i > 0; i-- {
		s.Stmts = append(s.Stmts, c.stmt(r))
	}
	return s
}

// drawCollection decides (from the function stream) whether the program
// has a collection table, and returns the steps creating and filling it
// (none without); it resolves the function stream's share of definitions.
func (g *gen) drawCollection() []Step {
	var out []Step
	if g.srfPct != 0 && g.gr.IntN(100) < collPct {
		g.coll = newCollection(g.gr)
		out = append(out, Step{Kind: StepSQL, Stmts: []string{g.coll.createSQL()}}, g.coll.fill(g.gr))
	}
	if g.srfPct < 0 {
		g.srfPct = srfPct(g.coll != nil)
	}
	return out
}

// collectionEvent is what follows a body event of a program with a
// collection table now and then: a transaction writing it, maybe with a
// check right after, or lanes of them beside writers of the program's
// tables.
func (g *gen) collectionEvent() []Step {
	r, c := g.gr, g.coll
	switch x := r.IntN(10); {
	case x < 6:
		return []Step{c.txn(r)}
	case x < 8:
		return []Step{c.txn(r), c.txn(r), {Kind: StepCheck}}
	}
	s := Step{Kind: StepConcurrent}
	for i := 1 + r.IntN(2); i > 0; i-- {
		var lane []Step
		for j := 2 + r.IntN(4); j > 0; j-- {
			lane = append(lane, c.txn(r))
		}
		s.Lanes = append(s.Lanes, lane)
	}
	// Writers of the program's tables, drawn from this stream by a copy
	// of the program's statement generator: what it records (tables with
	// bulk rows, dimension rows to re-insert) is the main stream's, whose
	// later statements read it.
	o := *g.ops
	o.r, o.bulk = r, maps.Clone(g.ops.bulk)
	if g.ops.js != nil {
		js := *g.ops.js
		js.reinsert = slices.Clone(js.reinsert)
		o.js = &js
	}
	var w []Step
	for j := 2 + r.IntN(4); j > 0; j-- {
		w = append(w, o.txn())
	}
	s.Lanes = append(s.Lanes, w)
	return []Step{s}
}
