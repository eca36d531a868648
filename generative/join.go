package generative

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Join programs: besides the plain tables, a fact table and one or two
// dimension tables, transforms that join them, and writes aimed at the
// joins (see doc.go, "Joins").

// joinSchema is the fact and dimension tables of a join program.
type joinSchema struct {
	fact *table
	// parent is the fact's column referencing its own first key column
	// (self-joins).
	parent *column
	dims   []*table
	// refs[i] are the fact's (nullable) columns referencing dims[i]'s key,
	// aligned with it and named like it, so USING can join them.
	refs [][]*column
	// chain is a dims[0] column referencing dims[1]'s first key column
	// (nested joins through a dimension); nil with one dimension.
	chain *column
	// reinsert are re-inserts of deleted dimension rows, to come in later
	// transactions.
	reinsert []string
	// dense: bulk facts reference the dimensions as often as other rows
	// (the first facts); otherwise one in eight does.
	dense bool
}

// bulkExpr is the value of fact column c in bulk rows (x as for any table,
// arr its domain). Each bulk fact's parent is the one before it, and only
// one in eight references a dimension (unless dense): were every bulk fact
// a child of the few small keys or a fact of the few dimension rows, every
// change of those would re-derive thousands of rows, and an outer join's
// expansion (ADR 0010) makes that every change of a bulk fact too.
func (js *joinSchema) bulkExpr(c *column, x string, arr []string) string {
	if c == js.parent {
		return "g - 1"
	}
	if js.dense {
		return x
	}
	for _, refs := range js.refs {
		if colIndex(refs, c) >= 0 {
			return fmt.Sprintf("CASE WHEN g %% 8 = 0 THEN (ARRAY[%s])[1 + g / 8 %% %d] END", strings.Join(arr, ", "), len(arr))
		}
	}
	return x
}

// link is a join condition the schema supports: the columns from of table
// src reference the columns to of table dst.
type link struct {
	src  *table
	from []*column
	dst  *table
	to   []*column
}

func (js *joinSchema) links() []link {
	out := []link{{src: js.fact, from: []*column{js.parent}, dst: js.fact, to: js.fact.key[:1]}}
	for i, d := range js.dims {
		out = append(out, link{src: js.fact, from: js.refs[i], dst: d, to: d.key})
	}
	if js.chain != nil {
		out = append(out, link{src: js.dims[0], from: []*column{js.chain}, dst: js.dims[1], to: js.dims[1].key[:1]})
	}
	return out
}

// tables are the join tables, fact first.
func (js *joinSchema) tables() []*table { return append([]*table{js.fact}, js.dims...) }

func copyDomain(c *column) []string { return append([]string(nil), c.domain...) }

// newJoinSchema draws one or two dimensions (with two, the second has a
// composite key; with one, it has one half the time) and a fact table
// referencing them.
func newJoinSchema(r *rand.Rand) *joinSchema {
	js := &joinSchema{}
	nd := 1 + r.IntN(2)
	for i := 0; i < nd; i++ {
		name := fmt.Sprintf("dim%d", i)
		if r.IntN(8) == 0 {
			name = []string{`"Dim 0"`, `"dim-1"`}[i]
		}
		composite := i == 1 || nd == 1 && r.IntN(2) == 0
		js.dims = append(js.dims, newDim(r, name, i, composite))
	}
	if nd == 2 {
		k := js.dims[1].key[0]
		js.chain = &column{name: "d0e", typ: k.typ, sqlType: k.sqlType, small: k.small, domain: copyDomain(k)}
		d0 := js.dims[0]
		d0.cols = append(d0.cols, js.chain)
	}
	name := "fact"
	if r.IntN(8) == 0 {
		name = `"Fact"`
	}
	f := &table{name: name}
	k0 := newColumn(r, "c0", tInt, true)
	f.key = []*column{k0}
	f.cols = []*column{k0}
	ci := 1
	if r.IntN(4) == 0 {
		k1 := newColumn(r, "c1", []typ{tInt, tText, tDate, tBool}[r.IntN(4)], true)
		f.key = append(f.key, k1)
		f.cols = append(f.cols, k1)
		ci++
	}
	for v := 1 + r.IntN(3); v > 0; v-- {
		f.cols = append(f.cols, newColumn(r, fmt.Sprintf("c%d", ci), typ(r.IntN(int(numTypes))), false))
		ci++
	}
	for _, d := range js.dims {
		var refs []*column
		for _, k := range d.key {
			c := &column{name: k.name, typ: k.typ, sqlType: k.sqlType, small: k.small, domain: copyDomain(k)}
			if k.typ == tInt && r.IntN(6) == 0 {
				// A reference of another (comparable) type.
				c.typ, c.sqlType = tBigint, "bigint"
			}
			refs = append(refs, c)
			f.cols = append(f.cols, c)
		}
		js.refs = append(js.refs, refs)
	}
	js.parent = &column{name: "fp", typ: tInt, sqlType: "int", small: true, domain: copyDomain(k0)}
	f.cols = append(f.cols, js.parent)
	if r.IntN(3) == 0 {
		r.Shuffle(len(f.cols), func(i, j int) { f.cols[i], f.cols[j] = f.cols[j], f.cols[i] })
	}
	f.shiftKey = k0
	js.fact = f
	return js
}

// newDim draws dimension i: a small key domain (every row is referenced by
// many facts), a text column of a few values (a group key), an integer
// and sometimes one more column.
func newDim(r *rand.Rand, name string, i int, composite bool) *table {
	t := &table{name: name, dim: true}
	keyTypes := []typ{tInt, tInt, tInt, tText, tBigint, tDate, tNumeric, tFloat}
	nk, max := 1, 6
	if composite {
		nk, max = 2, 4
	}
	for j := 0; j < nk; j++ {
		n := fmt.Sprintf("d%dk%d", i, j)
		if !composite && r.IntN(8) == 0 {
			n = fmt.Sprintf(`"D%d Key"`, i)
		}
		c := newColumn(r, n, keyTypes[r.IntN(len(keyTypes))], true)
		r.Shuffle(len(c.domain), func(a, b int) { c.domain[a], c.domain[b] = c.domain[b], c.domain[a] })
		if len(c.domain) > max {
			c.domain = c.domain[:max]
		}
		t.key = append(t.key, c)
		t.cols = append(t.cols, c)
	}
	label := &column{name: fmt.Sprintf("d%dn", i), typ: tText, sqlType: "text", small: true,
		notNull: r.IntN(4) == 0, domain: []string{"'n0'", "'n1'", "'n2'", "''"}}
	t.cols = append(t.cols, label, newColumn(r, fmt.Sprintf("d%dr", i), tInt, false))
	if r.IntN(2) == 0 {
		t.cols = append(t.cols, newColumn(r, fmt.Sprintf("d%dv", i), typ(r.IntN(int(numTypes))), false))
	}
	for _, k := range t.key {
		if k.typ.integer() {
			t.shiftKey = k
			break
		}
	}
	return t
}

// ddl creates the join tables and indexes on the fact's join columns (and
// the chain column), now and then leaving one out.
func (js *joinSchema) ddl(r *rand.Rand) []string {
	var out []string
	for _, t := range js.tables() {
		out = append(out, t.createSQL())
	}
	index := func(t *table, cols []*column) {
		if r.IntN(10) == 0 {
			return
		}
		var names []string
		for _, c := range cols {
			names = append(names, c.name)
		}
		out = append(out, "CREATE INDEX ON "+t.name+" ("+strings.Join(names, ", ")+")")
	}
	for _, refs := range js.refs {
		index(js.fact, refs)
	}
	index(js.fact, []*column{js.parent})
	if js.chain != nil {
		index(js.dims[0], []*column{js.chain})
	}
	return out
}

// dimRow inserts (or refreshes) the dimension row with key kv.
func (o *opGen) dimRow(d *table, kv []string) string {
	r := o.r
	var names, vals, sets, keys []string
	for _, k := range d.key {
		keys = append(keys, k.name)
	}
	for _, c := range d.cols {
		names = append(names, c.name)
		if i := keyIndex(d, c); i >= 0 {
			vals = append(vals, kv[i])
			continue
		}
		vals = append(vals, o.value(c, true))
		sets = append(sets, c.name+" = EXCLUDED."+c.name)
	}
	s := "INSERT INTO " + d.name + " (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ") ON CONFLICT (" + strings.Join(keys, ", ") + ")"
	if r.IntN(2) == 0 {
		return s + " DO UPDATE SET " + strings.Join(sets, ", ")
	}
	return s + " DO NOTHING"
}

func keyIndex(t *table, c *column) int {
	for i, k := range t.key {
		if k == c {
			return i
		}
	}
	return -1
}

// fill inserts every key of the dimension's domain that is missing.
func (o *opGen) fill(d *table) string {
	combos := [][]string{nil}
	for _, k := range d.key {
		var next [][]string
		for _, c := range combos {
			for _, v := range k.domain {
				next = append(next, append(append([]string(nil), c...), v))
			}
		}
		combos = next
	}
	var names, tuples []string
	for _, c := range d.cols {
		names = append(names, c.name)
	}
	for _, kv := range combos {
		var vals []string
		for _, c := range d.cols {
			if i := keyIndex(d, c); i >= 0 {
				vals = append(vals, kv[i])
			} else {
				vals = append(vals, o.value(c, true))
			}
		}
		tuples = append(tuples, "("+strings.Join(vals, ", ")+")")
	}
	return "INSERT INTO " + d.name + " (" + strings.Join(names, ", ") + ") VALUES " + strings.Join(tuples, ", ") + " ON CONFLICT DO NOTHING"
}

// refMatch is "cols = vals", with IS NULL for NULL values.
func refMatch(cols []*column, vals []string) string {
	var parts []string
	for i, c := range cols {
		if vals[i] == "NULL" {
			parts = append(parts, c.name+" IS NULL")
		} else {
			parts = append(parts, c.name+" = "+vals[i])
		}
	}
	return strings.Join(parts, " AND ")
}

// factsOf matches the facts whose references are vals. Facts referencing
// nothing are only the small ones: most bulk facts reference nothing, and
// moving them all to one dimension row would make every later change of
// that row's facts re-derive them all under an outer join preserving the
// dimension (ADR 0010's expansion).
func (js *joinSchema) factsOf(refs []*column, vals []string) string {
	m := refMatch(refs, vals)
	for _, v := range vals {
		if v == "NULL" {
			return m + " AND " + js.fact.shiftKey.name + " < 1000"
		}
	}
	return m
}

func refSet(cols []*column, vals []string) string {
	var parts []string
	for i, c := range cols {
		parts = append(parts, c.name+" = "+vals[i])
	}
	return strings.Join(parts, ", ")
}

// joinStmts draws a change aimed at the joins: dimension rows deleted
// (and re-inserted later), their keys and values changed, facts moved
// from one dimension row to another, all facts of one dimension row
// deleted (emptying its groups), self-references changed.
func (o *opGen) joinStmts() []string {
	r, js := o.r, o.js
	if len(js.reinsert) > 0 && r.IntN(2) == 0 {
		s := js.reinsert[0]
		js.reinsert = js.reinsert[1:]
		return []string{s}
	}
	di := r.IntN(len(js.dims))
	d, refs, f := js.dims[di], js.refs[di], js.fact
	refVals := func() []string {
		if r.IntN(5) == 0 {
			out := make([]string, len(refs))
			for i := range out {
				out[i] = "NULL"
			}
			return out
		}
		return o.keyVals(d)
	}
	switch x := r.IntN(100); {
	case x < 14:
		// A dimension row many facts reference goes; it comes back later.
		kv := o.keyVals(d)
		js.reinsert = append(js.reinsert, o.dimRow(d, kv))
		return []string{"DELETE FROM " + d.name + " WHERE " + keyMatch(d, kv, "")}
	case x < 19:
		kv := o.keyVals(d)
		return []string{"DELETE FROM " + d.name + " WHERE " + keyMatch(d, kv, ""), o.dimRow(d, kv)}
	case x < 30:
		// A dimension row's primary key changes.
		k := d.key[r.IntN(len(d.key))]
		nv := o.value(k, false)
		s := "UPDATE " + d.name + " SET " + k.name + " = " + nv + " WHERE " + keyMatch(d, o.keyVals(d), "")
		if r.IntN(4) > 0 {
			s += " AND NOT EXISTS (SELECT 1 FROM " + d.name + " AS o WHERE " + sameKeyExcept(d, k, nv) + ")"
		}
		return []string{s}
	case x < 42:
		// Every fact of one dimension row moves to another (or to NULL).
		return []string{"UPDATE " + f.name + " SET " + refSet(refs, refVals()) + " WHERE " + js.factsOf(refs, refVals())}
	case x < 52:
		return []string{"UPDATE " + f.name + " SET " + refSet(refs, refVals()) + " WHERE " + keyMatch(f, o.keyVals(f), "")}
	case x < 60:
		// Every fact of one dimension row goes: its groups empty.
		return []string{"DELETE FROM " + f.name + " WHERE " + js.factsOf(refs, refVals())}
	case x < 68:
		// A dimension value many facts see (a group key of theirs).
		nonKey := d.nonKey()
		c := nonKey[r.IntN(len(nonKey))]
		if r.IntN(2) == 0 {
			return []string{"UPDATE " + d.name + " SET " + c.name + " = " + o.value(c, true) + " WHERE " + keyMatch(d, o.keyVals(d), "")}
		}
		return []string{"UPDATE " + d.name + " SET " + c.name + " = " + o.value(c, true) + " WHERE " + refMatch([]*column{c}, []string{o.value(c, true)})}
	case x < 76:
		p := js.parent
		if r.IntN(2) == 0 {
			return []string{"UPDATE " + f.name + " SET fp = " + o.value(p, true) + " WHERE " + keyMatch(f, o.keyVals(f), "")}
		}
		return []string{"UPDATE " + f.name + " SET fp = " + o.value(p, true) + " WHERE " + refMatch([]*column{p}, []string{o.value(p, true)})}
	case x < 82:
		if c := js.chain; c != nil {
			d0 := js.dims[0]
			return []string{"UPDATE " + d0.name + " SET " + c.name + " = " + o.value(c, true) + " WHERE " + keyMatch(d0, o.keyVals(d0), "")}
		}
	case x < 90:
		return []string{o.fill(d)}
	}
	// New facts of one dimension row.
	kv := o.keyVals(d)
	var names []string
	for _, c := range f.cols {
		names = append(names, c.name)
	}
	seen := map[string]bool{}
	var tuples []string
	for i := 2 + r.IntN(4); i > 0; i-- {
		fk := o.keyVals(f)
		if seen[strings.Join(fk, ",")] {
			continue
		}
		seen[strings.Join(fk, ",")] = true
		var vals []string
		for _, c := range f.cols {
			switch {
			case keyIndex(f, c) >= 0:
				vals = append(vals, fk[keyIndex(f, c)])
			case colIndex(refs, c) >= 0:
				vals = append(vals, kv[colIndex(refs, c)])
			default:
				vals = append(vals, o.value(c, true))
			}
		}
		tuples = append(tuples, "("+strings.Join(vals, ", ")+")")
	}
	return []string{"INSERT INTO " + f.name + " (" + strings.Join(names, ", ") + ") VALUES " + strings.Join(tuples, ", ") + " ON CONFLICT DO NOTHING"}
}

func colIndex(cs []*column, c *column) int {
	for i, x := range cs {
		if x == c {
			return i
		}
	}
	return -1
}

// The join shapes a join transform takes.
var joinShapes = []string{"inner", "comma", "left", "right", "full", "cross", "self", "nested"}

// jsrc is one FROM item of a join: a table, its FROM text and the
// qualifier its columns are referred to by.
type jsrc struct {
	t    *table
	item string
	ref  string
	// linked: a dimension already joined to a fact. A second fact joined
	// to it would multiply the facts by each other (a dimension's facts
	// squared); facts meet each other only through the parent link.
	linked bool
}

// jnode is a FROM tree: a table (src) or a join of two trees.
type jnode struct {
	src  *jsrc
	kind string // JOIN, LEFT JOIN, RIGHT JOIN, FULL JOIN, CROSS JOIN
	l, r *jnode
	cond string // "ON …" or "USING (…)"
}

func (n *jnode) leaves() []*jsrc {
	if n.src != nil {
		return []*jsrc{n.src}
	}
	return append(n.l.leaves(), n.r.leaves()...)
}

// nulled are the tables an outer join inside n may NULL-extend.
func (n *jnode) nulled() map[*jsrc]bool {
	out := map[*jsrc]bool{}
	if n.src != nil {
		return out
	}
	for s := range n.l.nulled() {
		out[s] = true
	}
	for s := range n.r.nulled() {
		out[s] = true
	}
	var ext []*jsrc
	switch n.kind {
	case "LEFT JOIN":
		ext = n.r.leaves()
	case "RIGHT JOIN":
		ext = n.l.leaves()
	case "FULL JOIN":
		ext = n.leaves()
	}
	for _, s := range ext {
		out[s] = true
	}
	return out
}

// onReadable are the tables join n's own condition may read: not those an
// outer join inside a side it filters NULL-extends (the engine refuses
// those, ADR 0010), so an inner join filters neither side's outer joins,
// a LEFT JOIN not its right side's, a RIGHT JOIN not its left side's.
func (n *jnode) onReadable() []*jsrc {
	ex := map[*jsrc]bool{}
	add := func(m map[*jsrc]bool) {
		for s := range m {
			ex[s] = true
		}
	}
	switch n.kind {
	case "JOIN":
		add(n.l.nulled())
		add(n.r.nulled())
	case "LEFT JOIN":
		add(n.r.nulled())
	case "RIGHT JOIN":
		add(n.l.nulled())
	}
	var out []*jsrc
	for _, s := range n.leaves() {
		if !ex[s] {
			out = append(out, s)
		}
	}
	return out
}

func (n *jnode) sql() string {
	if n.src != nil {
		return n.src.item
	}
	right := n.r.sql()
	if n.r.src == nil {
		right = "(" + right + ")"
	}
	s := n.l.sql() + " " + n.kind + " " + right
	if n.cond != "" {
		s += " " + n.cond
	}
	return s
}

// view is the columns of the given tables as one table whose column names
// are qualified, for exprGen.
func view(srcs []*jsrc) *table {
	v := &table{name: "(join)"}
	for _, s := range srcs {
		for _, c := range s.t.cols {
			cc := *c
			cc.name = s.ref + "." + c.name
			v.cols = append(v.cols, &cc)
		}
	}
	return v
}

// joinGen draws one join transform's FROM and WHERE.
type joinGen struct {
	r     *rand.Rand
	js    *joinSchema
	srcs  []*jsrc
	where []string // conjuncts of WHERE (comma joins)
	items []*jnode // FROM items (several for a comma join)
	// merged are the columns a USING join merged, as they may be
	// referred to unqualified.
	merged []string
	// filterAbove: conditions after an outer join (WHERE, the ON of a join
	// above it) may read its NULL-extended side too, anti-joins included:
	// the engine keeps such a join's matches in a mirror (ADR 0010).
	filterAbove bool
}

func (j *joinGen) leaf(t *table, alias string) *jnode {
	s := &jsrc{t: t}
	used := false
	for _, o := range j.srcs {
		used = used || o.t == t
	}
	switch x := j.r.IntN(4); {
	case x == 0 && !used:
		s.item, s.ref = t.name, t.name
	case x == 1:
		s.item, s.ref = t.name+" "+alias, alias
	default:
		s.item, s.ref = t.name+" AS "+alias, alias
	}
	j.srcs = append(j.srcs, s)
	return &jnode{src: s}
}

func (j *joinGen) dim() *table { return j.js.dims[j.r.IntN(len(j.js.dims))] }

// join makes a join of l and r of the kind and gives it a condition; false
// when no link between the two may be read there.
func (j *joinGen) join(kind string, l, r *jnode) (*jnode, bool) {
	n := &jnode{kind: kind, l: l, r: r}
	if kind == "CROSS JOIN" {
		return n, true
	}
	readable := map[*jsrc]bool{}
	rs := n.onReadable()
	if j.filterAbove {
		rs = n.leaves()
	}
	for _, s := range rs {
		readable[s] = true
	}
	cond, ok := j.linkCond(l.leaves(), r.leaves(), readable)
	if !ok {
		return nil, false
	}
	if l.src != nil && r.src != nil && j.r.IntN(3) == 0 {
		if u := j.using(l.src, r.src); u != "" {
			n.cond = u
			return n, true
		}
	}
	if j.r.IntN(3) == 0 {
		var rs []*jsrc
		for _, s := range n.leaves() {
			if readable[s] {
				rs = append(rs, s)
			}
		}
		e := &exprGen{r: j.r, t: view(rs)}
		cond += " AND " + e.pred(1)
	}
	n.cond = "ON " + cond
	return n, true
}

// linkCond is the equality of a link between a table of as and one of bs,
// both readable.
func (j *joinGen) linkCond(as, bs []*jsrc, readable map[*jsrc]bool) (string, bool) {
	type cand struct {
		a, b *jsrc
		l    link
	}
	var cands []cand
	for _, lk := range j.js.links() {
		for _, a := range as {
			for _, b := range bs {
				if !readable[a] || !readable[b] {
					continue
				}
				fanOut := func(dst *jsrc) bool { return lk.src == j.js.fact && lk.dst != j.js.fact && dst.linked }
				if a.t == lk.src && b.t == lk.dst && !fanOut(b) {
					cands = append(cands, cand{a, b, lk})
				}
				if b.t == lk.src && a.t == lk.dst && !fanOut(a) {
					cands = append(cands, cand{b, a, lk})
				}
			}
		}
	}
	if len(cands) == 0 {
		return "", false
	}
	c := cands[j.r.IntN(len(cands))]
	if c.l.src == j.js.fact && c.l.dst != j.js.fact {
		c.b.linked = true
	}
	return j.eqs(c.a, c.l.from, c.b, c.l.to), true
}

func (j *joinGen) eqs(a *jsrc, from []*column, b *jsrc, to []*column) string {
	var parts []string
	for i := range from {
		x, y := a.ref+"."+from[i].name, b.ref+"."+to[i].name
		if j.r.IntN(2) == 0 {
			x, y = y, x
		}
		parts = append(parts, x+" = "+y)
	}
	return strings.Join(parts, " AND ")
}

// using joins a fact and a dimension by the columns both name alike.
func (j *joinGen) using(a, b *jsrc) string {
	f, d := a, b
	if f.t != j.js.fact {
		f, d = b, a
	}
	if f.t != j.js.fact || d.t == j.js.fact {
		return ""
	}
	for i, dt := range j.js.dims {
		if dt == d.t {
			var names []string
			for _, c := range j.js.refs[i] {
				names = append(names, c.name)
			}
			j.merged = append(j.merged, names...)
			return "USING (" + strings.Join(names, ", ") + ")"
		}
	}
	return ""
}

// from draws the FROM of the shape; false when the draw found no valid
// conditions (the caller draws again).
func (j *joinGen) from(shape string) bool {
	r, js := j.r, j.js
	f := js.fact
	two := func(kind string, swap bool, a, b *jnode) bool {
		if swap {
			a, b = b, a
		}
		n, ok := j.join(kind, a, b)
		j.items = []*jnode{n}
		return ok
	}
	switch shape {
	case "inner":
		return two("JOIN", r.IntN(4) == 0, j.leaf(f, "f"), j.leaf(j.dim(), "d"))
	case "left":
		return two("LEFT JOIN", r.IntN(5) == 0, j.leaf(f, "f"), j.leaf(j.dim(), "d"))
	case "right":
		return two("RIGHT JOIN", r.IntN(2) == 0, j.leaf(f, "f"), j.leaf(j.dim(), "d"))
	case "full":
		return two("FULL JOIN", r.IntN(3) == 0, j.leaf(f, "f"), j.leaf(j.dim(), "d"))
	case "cross":
		a := j.leaf(js.dims[0], "d")
		var b *jnode
		if len(js.dims) > 1 && r.IntN(3) > 0 {
			b = j.leaf(js.dims[1], "e")
		} else {
			b = j.leaf(js.dims[0], "d2")
		}
		if r.IntN(3) == 0 {
			j.items = []*jnode{a, b} // FROM a, b with no condition
			return true
		}
		return two("CROSS JOIN", false, a, b)
	case "self":
		kind := []string{"JOIN", "LEFT JOIN"}[r.IntN(2)]
		ok := two(kind, false, j.leaf(f, "f"), j.leaf(f, "p"))
		if ok && r.IntN(3) == 0 {
			n, ok2 := j.join([]string{"JOIN", "LEFT JOIN"}[r.IntN(2)], j.items[0], j.leaf(j.dim(), "d"))
			if ok2 {
				j.items[0] = n
			}
			return ok2
		}
		return ok
	case "comma":
		a, b := j.leaf(f, "f"), j.leaf(j.dim(), "d")
		j.items = []*jnode{a, b}
		all := map[*jsrc]bool{a.src: true, b.src: true}
		c, ok := j.linkCond([]*jsrc{a.src}, []*jsrc{b.src}, all)
		if !ok {
			return false
		}
		j.where = append(j.where, c)
		if len(js.dims) > 1 && r.IntN(2) == 0 {
			e := j.leaf(js.dims[1], "e")
			j.items = append(j.items, e)
			all[e.src] = true
			c, ok := j.linkCond([]*jsrc{a.src, b.src}, []*jsrc{e.src}, all)
			if !ok {
				return false
			}
			j.where = append(j.where, c)
		}
		if r.IntN(2) == 0 {
			r.Shuffle(len(j.items), func(x, y int) { j.items[x], j.items[y] = j.items[y], j.items[x] })
		}
		return true
	case "nested":
		kinds := []string{"LEFT JOIN", "LEFT JOIN", "LEFT JOIN", "JOIN", "RIGHT JOIN", "FULL JOIN"}
		k1, k2 := kinds[r.IntN(len(kinds))], kinds[r.IntN(len(kinds))]
		if r.IntN(2) == 0 {
			k1, k2 = "LEFT JOIN", "LEFT JOIN"
		}
		a, b := j.leaf(f, "f"), j.leaf(js.dims[0], "d")
		var c *jnode
		if len(js.dims) > 1 && r.IntN(4) > 0 {
			c = j.leaf(js.dims[1], "e")
		} else {
			c = j.leaf(f, "p")
		}
		if c.src.t != f && r.IntN(3) == 0 {
			// a k2 (b k1 c)
			inner, ok := j.join(k1, b, c)
			if !ok {
				return false
			}
			n, ok := j.join(k2, a, inner)
			j.items = []*jnode{n}
			return ok
		}
		inner, ok := j.join(k1, a, b)
		if !ok {
			return false
		}
		n, ok := j.join(k2, inner, c)
		j.items = []*jnode{n}
		return ok
	}
	return false
}

// mergedCol is a column merged by USING that no other table of the FROM
// has, so that it may be referred to unqualified ("" if none).
func (j *joinGen) mergedCol() string {
	for _, m := range j.merged {
		n := 0
		for _, s := range j.srcs {
			for _, c := range s.t.cols {
				if c.name == m {
					n++
				}
			}
		}
		if n == 2 {
			return m
		}
	}
	return ""
}

func (j *joinGen) fromSQL() string {
	var parts []string
	for _, it := range j.items {
		parts = append(parts, it.sql())
	}
	return strings.Join(parts, ", ")
}

// nulled are the tables an outer join of the FROM may NULL-extend.
func (j *joinGen) nulled() map[*jsrc]bool {
	ex := map[*jsrc]bool{}
	for _, it := range j.items {
		for s := range it.nulled() {
			ex[s] = true
		}
	}
	return ex
}

// whereReadable are the tables WHERE may read: none an outer join
// NULL-extends (unless filterAbove).
func (j *joinGen) whereReadable() []*jsrc {
	ex := j.nulled()
	if j.filterAbove {
		ex = nil
	}
	var out []*jsrc
	for _, it := range j.items {
		for _, s := range it.leaves() {
			if !ex[s] {
				out = append(out, s)
			}
		}
	}
	return out
}

// newJoinDraw draws a FROM of the shape, falling back to a plain LEFT JOIN
// when the shape finds no valid condition in a few draws.
func newJoinDraw(r *rand.Rand, js *joinSchema, shape string) *joinGen {
	filterAbove := r.IntN(4) == 0
	for range 10 {
		j := &joinGen{r: r, js: js, filterAbove: filterAbove}
		if j.from(shape) {
			return j
		}
	}
	j := &joinGen{r: r, js: js}
	j.from("left")
	return j
}

// whereSQL is the WHERE clause: the comma join's conditions and, half the
// time, a predicate over the tables WHERE may read; under filterAbove,
// often an anti-join (a NULL-extended table's key IS NULL) or its
// opposite.
func (j *joinGen) whereSQL() string {
	conds := append([]string(nil), j.where...)
	var nulled []*jsrc
	for _, s := range j.srcs {
		if j.nulled()[s] {
			nulled = append(nulled, s)
		}
	}
	if j.filterAbove && len(nulled) > 0 && j.r.IntN(3) > 0 {
		s := nulled[j.r.IntN(len(nulled))]
		conds = append(conds, s.ref+"."+s.t.key[0].name+[]string{" IS NULL", " IS NULL", " IS NOT NULL"}[j.r.IntN(3)])
	}
	if rs := j.whereReadable(); len(rs) > 0 && j.r.IntN(2) == 0 {
		e := &exprGen{r: j.r, t: view(rs)}
		conds = append(conds, e.pred(2))
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// bareName is the output name PostgreSQL gives a qualified column
// reference: the column's name.
func bareName(qualified string) string {
	i := topLevelIndex(qualified, ".")
	if i < 0 {
		return unquote(qualified)
	}
	return unquote(qualified[i+1:])
}

// joinRowSelect draws a row transform over a join of the shape; fr (the
// feature stream, nil for none) now and then makes it a SELECT DISTINCT.
func joinRowSelect(r, fr *rand.Rand, js *joinSchema, shape string) string {
	j := newJoinDraw(r, js, shape)
	v := view(j.srcs)
	e := &exprGen{r: r, t: v}
	used := map[string]bool{}
	var items []string
	n := 1 + r.IntN(5)
	for i := 0; i < n; i++ {
		if r.IntN(2) == 0 {
			c := e.pick(v.cols)
			if b := bareName(c.name); !used[b] {
				used[b] = true
				items = append(items, c.name)
				continue
			}
		}
		var x string
		switch r.IntN(6) {
		case 0:
			x = e.numExpr()
		case 1:
			x = e.textExpr()
		case 2:
			x = e.dateExpr()
		case 3:
			x = e.boolExpr()
		default:
			x = e.pick(v.cols).name
		}
		name := fmt.Sprintf("e%d", i)
		used[name] = true
		items = append(items, x+" AS "+name)
	}
	if m := j.mergedCol(); m != "" && r.IntN(2) == 0 {
		// USING's merged column (in a FULL JOIN, the coalesce of both).
		if used[unquote(m)] {
			items = append(items, m+" AS um")
		} else {
			items = append(items, m)
		}
	}
	where := j.whereSQL()
	if fr != nil && fr.IntN(100) < featDistinctPct {
		f := &exprGen{r: fr, t: v}
		return "SELECT DISTINCT " + f.distinctList(true) + " FROM " + j.fromSQL() + where
	}
	return "SELECT " + strings.Join(items, ", ") + " FROM " + j.fromSQL() + where
}

// joinAggSelect draws an aggregate transform over a join of the shape:
// often grouped by a dimension's column.
func joinAggSelect(r, fr *rand.Rand, js *joinSchema, shape string) string {
	j := newJoinDraw(r, js, shape)
	v := view(j.srcs)
	e := &exprGen{r: r, t: v, fr: fr, keys: j.keyRefs()}
	var items []aggItem
	used := map[string]bool{}
	var groups []string
	var dimCols []*column
	for _, s := range j.srcs {
		if s.t.dim {
			for _, c := range s.t.cols {
				if !hasLongExternal(c) {
					dimCols = append(dimCols, &column{name: s.ref + "." + c.name})
				}
			}
		}
	}
	ng := []int{0, 1, 1, 1, 2, 2}[r.IntN(6)]
	for i := 0; i < ng; i++ {
		var g string
		m := j.mergedCol()
		switch {
		case i == 0 && m != "" && r.IntN(3) == 0:
			g = m // USING's merged column
		case i == 0 && len(dimCols) > 0 && r.IntN(3) > 0:
			g = dimCols[r.IntN(len(dimCols))].name // a group key from a dimension
		default:
			g = e.groupExpr()
		}
		dup := false
		for _, h := range groups {
			dup = dup || h == g
		}
		if !dup {
			groups = append(groups, g)
		}
	}
	groupBy := append([]string(nil), groups...)
	for i, g := range groups {
		isCol := false
		for _, c := range v.cols {
			if g == c.name && !used[bareName(g)] {
				isCol = true
				used[bareName(g)] = true
			}
		}
		if g == j.mergedCol() && !used[unquote(g)] {
			isCol = true
			used[unquote(g)] = true
		}
		if isCol && r.IntN(3) > 0 {
			items = append(items, aggItem{sql: g})
		} else {
			name := fmt.Sprintf("g%d", i)
			used[name] = true
			items = append(items, aggItem{sql: g, name: name})
			if r.IntN(5) == 0 {
				groupBy[i] = name
			}
		}
	}
	for i := 1 + r.IntN(4); i > 0; i-- {
		name := fmt.Sprintf("a%d", len(items))
		used[name] = true
		items = append(items, aggItem{sql: e.aggCall(), name: name})
	}
	list := aggSelectList(r, e, items, groupBy)
	composed, having := e.aggFeatures(list, len(items), len(groupBy) > 0)
	q := "SELECT " + list + composed + " FROM " + j.fromSQL() + j.whereSQL()
	if len(groupBy) > 0 {
		q += " GROUP BY " + strings.Join(groupBy, ", ")
	}
	return q + having
}

// keyRefs are the key columns of every FROM item, qualified: together
// they identify a joined row (a NULL-extended side's are NULL).
func (j *joinGen) keyRefs() []string {
	var out []string
	for _, s := range j.srcs {
		for _, k := range s.t.key {
			out = append(out, s.ref+"."+k.name)
		}
	}
	return out
}
