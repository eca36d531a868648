package generative

import (
	"fmt"
	"sort"
	"strings"
)

// Chains: transforms reading other transforms' targets, two or three
// levels deep, drawn from the feature stream (features.go). A level a
// further level reads is keyed by NOT NULL columns, as the engine requires
// (a row transform of one table or of an inner join, an aggregate grouped
// by plain NOT NULL columns); the last level is anything the generators
// draw over the level below. Levels are applied one after another, with
// writes and a kill of the runner between them so that a crash lands while
// the lower levels are behind. Chain levels are not in gen.defs: the
// program's DROP and redefinition never pick them (the engine refuses to
// drop or redefine a target another transform reads); their own lifecycle
// actions pause and resume any level and redefine only the last.

// chainLevel is one transform of a chain.
type chainLevel struct {
	name string // as written
	sql  string
	// desc is its target's visible columns as a reader may use them; its
	// key the columns that identify a row (none: not visible), pk whether
	// they are the target's primary key (so NOT NULL in it).
	desc *table
	pk   bool
	// base is the table whose key desc.key is, for joins back to it.
	base *table
	// src is a base table it reads, for the writes before a kill.
	src   *table
	level int
}

func (l *chainLevel) create() string { return "CREATE TRANSFORM " + l.name + " AS " + l.sql }

// descCol is a target column named name with c's type and values,
// nullable unless notNull.
func descCol(c *column, name string, notNull bool) *column {
	d := *c
	d.name, d.notNull = name, notNull
	return &d
}

var chainWeirdNames = []string{`"Level 1"`, `"l-1"`}

// withFeatureRand runs f with the feature stream as the program's stream,
// so that the generators' draws leave the main stream untouched.
func (g *gen) withFeatureRand(f func()) {
	r, or := g.r, g.ops.r
	g.r, g.ops.r = g.fr, g.fr
	defer func() { g.r, g.ops.r = r, or }()
	f()
}

// chainSteps defines chain ci of the given number of levels, with writes
// and kills between the levels' applies.
func (g *gen) chainSteps(ci, levels int) []Step {
	var out []Step
	g.withFeatureRand(func() {
		r := g.r
		var chain []*chainLevel
		l1 := g.chainBase(fmt.Sprintf("l%d_1", ci))
		if ci == 0 && r.IntN(6) == 0 {
			l1.name = chainWeirdNames[r.IntN(len(chainWeirdNames))]
			l1.desc.name = l1.name
		}
		chain = append(chain, l1)
		script := []string{l1.create()}
		for lvl := 2; lvl <= levels; lvl++ {
			up := chain[len(chain)-1]
			l := g.chainNext(fmt.Sprintf("l%d_%d", ci, lvl), up, lvl < levels)
			l.level = lvl
			chain = append(chain, l)
			if r.IntN(3) == 0 {
				// A level and the one it reads in one script.
				script = append(script, l.create())
				continue
			}
			out = append(out, Step{Kind: StepApply, Stmts: script})
			out = append(out, g.chainWrites(l1.src)...)
			out = append(out, g.chainCrash())
			script = []string{l.create()}
		}
		out = append(out, Step{Kind: StepApply, Stmts: script})
		out = append(out, g.chainWrites(l1.src)...)
		out = append(out, g.chainCrash())
		if r.IntN(2) == 0 {
			out = append(out, Step{Kind: StepCheck})
		}
		g.chains = append(g.chains, chain)
	})
	return out
}

// chainWrites are writes the chain reads: fresh bulk rows of its source
// (so that the crash after them lands while they are applied), and
// ordinary transactions.
func (g *gen) chainWrites(src *table) []Step {
	var out []Step
	if src != nil && src.shiftKey != nil && !src.dim {
		out = append(out, g.freshBulk(src, 50+g.r.IntN(250)))
	}
	for i := g.r.IntN(3); i > 0; i-- {
		out = append(out, g.ops.txn())
	}
	return out
}

// chainCrash kills the runner (or loses its store) right after writes.
func (g *gen) chainCrash() Step {
	if g.prof.LoseStore > 0 && g.r.IntN(4) == 0 {
		return Step{Kind: StepLoseStore}
	}
	return Step{Kind: StepKill, Arg: g.r.IntN(200)}
}

// chainBase draws a chain's first level, over the base tables and keyed
// by NOT NULL columns.
func (g *gen) chainBase(name string) *chainLevel {
	r := g.r
	if g.join && r.IntN(5) < 3 {
		return g.chainOverJoin(name)
	}
	var withShift []*table
	for _, t := range g.tables {
		if t.shiftKey != nil && !t.dim {
			withShift = append(withShift, t)
		}
	}
	t := g.tables[r.IntN(len(g.tables))]
	if len(withShift) > 0 && r.IntN(3) > 0 {
		t = withShift[r.IntN(len(withShift))]
	}
	from, pfx := fromClause(r, t)
	e := &exprGen{r: r, t: t, pfx: pfx, fr: r}
	e.keys, e.objKey = tableKeys(t)
	if r.IntN(2) == 0 {
		l := g.chainRow(name, e, from, t.key, t, true)
		l.src = t
		return l
	}
	// An aggregate grouped by NOT NULL columns: a part of a composite key,
	// the key, or NOT NULL values.
	var groups []*column
	var notNull []*column
	for _, c := range t.nonKey() {
		if c.notNull && !hasLongExternal(c) {
			notNull = append(notNull, c)
		}
	}
	switch {
	case len(t.key) > 1 && r.IntN(3) > 0:
		groups = t.key[:1+r.IntN(len(t.key)-1)]
	case len(notNull) > 0 && r.IntN(2) == 0:
		groups = []*column{notNull[r.IntN(len(notNull))]}
	default:
		groups = t.key
	}
	var base *table
	if len(groups) == len(t.key) && groups[0] == t.key[0] {
		base = t
	}
	l := chainAgg(name, e, from, "", groups, base)
	l.src = t
	return l
}

// chainOverJoin draws a first level over the fact and a dimension, inner
// joined: an aggregate grouped by the dimension's key, or the joined rows.
func (g *gen) chainOverJoin(name string) *chainLevel {
	r, js := g.r, g.js
	di := r.IntN(len(js.dims))
	d := js.dims[di]
	f := &jsrc{t: js.fact, item: js.fact.name + " AS f", ref: "f"}
	ds := &jsrc{t: d, item: d.name + " d", ref: "d"}
	j := &joinGen{r: r, js: js}
	on := j.eqs(f, js.refs[di], ds, d.key)
	from := f.item + " JOIN " + ds.item + " ON " + on
	where := ""
	if r.IntN(3) == 0 {
		from = f.item + ", " + ds.item
		where = " WHERE " + on
	}
	v := view([]*jsrc{f, ds})
	e := &exprGen{r: r, t: v, fr: r, keys: (&joinGen{srcs: []*jsrc{f, ds}}).keyRefs()}
	if r.IntN(3) == 0 {
		where = andWhere(where, e.pred(1))
	}
	if r.IntN(2) == 0 {
		var key []*column
		for _, k := range js.fact.key {
			key = append(key, viewCol(v, "f."+k.name))
		}
		l := g.chainRowJoin(name, e, from+where, key, js.fact)
		l.src = js.fact
		return l
	}
	var groups []*column
	for _, k := range d.key {
		groups = append(groups, viewCol(v, "d."+k.name))
	}
	l := chainAgg(name, e, from, where, groups, d)
	l.src = js.fact
	return l
}

func andWhere(where, cond string) string {
	if where == "" {
		return " WHERE " + cond
	}
	return where + " AND " + cond
}

func viewCol(v *table, name string) *column {
	for _, c := range v.cols {
		if c.name == name {
			return c
		}
	}
	panic("no column " + name)
}

// chainRow is a row transform of one table (e's) selecting its key
// columns key plainly and a few others: keyed by that table's key.
func (g *gen) chainRow(name string, e *exprGen, from string, key []*column, base *table, pk bool) *chainLevel {
	r := e.r
	desc := &table{name: name}
	var items []string
	used := map[string]bool{}
	for _, k := range key {
		items = append(items, e.ref(k))
		used[unquote(k.name)] = true
		c := descCol(k, k.name, pk)
		desc.cols = append(desc.cols, c)
		desc.key = append(desc.key, c)
	}
	for i := 1 + r.IntN(3); i > 0; i-- {
		if r.IntN(3) == 0 {
			n := fresh(used, fmt.Sprintf("w%d", len(items)))
			items = append(items, "("+e.numExpr()+")::numeric AS "+n)
			desc.cols = append(desc.cols, &column{name: n, typ: tNumeric, sqlType: "numeric", domain: []string{"0", "1.5", "-1", "10"}})
			continue
		}
		c := e.pick(e.t.cols)
		if used[unquote(c.name)] {
			continue
		}
		used[unquote(c.name)] = true
		items = append(items, e.ref(c))
		desc.cols = append(desc.cols, descCol(c, c.name, false))
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from
	if r.IntN(2) == 0 {
		q += " WHERE " + e.pred(2)
	}
	if len(key) == 0 {
		base = nil
	}
	return &chainLevel{name: name, sql: q, desc: desc, pk: pk && len(key) > 0, base: base}
}

// chainRowJoin is a row transform of an inner join (keyed by its
// lineage): key are view columns that identify a joined row, selected
// under their own names; the others are aliased.
func (g *gen) chainRowJoin(name string, e *exprGen, fromWhere string, key []*column, base *table) *chainLevel {
	r := e.r
	desc := &table{name: name}
	var items []string
	used := map[string]bool{}
	for _, k := range key {
		items = append(items, k.name)
		c := descCol(k, bareNameQuoted(k.name), false)
		used[unquote(c.name)] = true
		desc.cols = append(desc.cols, c)
		desc.key = append(desc.key, c)
	}
	for i := 1 + r.IntN(3); i > 0; i-- {
		c := e.pick(e.t.cols)
		n := fresh(used, fmt.Sprintf("w%d", len(items)))
		items = append(items, c.name+" AS "+n)
		desc.cols = append(desc.cols, descCol(c, n, false))
	}
	return &chainLevel{name: name, sql: "SELECT " + strings.Join(items, ", ") + " FROM " + fromWhere, desc: desc, base: base}
}

// fresh is base, or base with x appended until no output name in used
// has it; it is then used.
func fresh(used map[string]bool, base string) string {
	for used[base] {
		base += "x"
	}
	used[base] = true
	return base
}

// bareNameQuoted is a qualified column reference's column, as written.
func bareNameQuoted(qualified string) string {
	if i := topLevelIndex(qualified, "."); i >= 0 {
		return qualified[i+1:]
	}
	return qualified
}

// chainAgg is an aggregate grouped by the plain NOT NULL columns groups
// (of e's table or view), selected under their own names: keyed by them.
// base is the table whose key the groups are (nil if none).
func chainAgg(name string, e *exprGen, from, where string, groups []*column, base *table) *chainLevel {
	r := e.r
	desc := &table{name: name}
	var items, gb []string
	for _, gc := range groups {
		ref := gc.name
		if !strings.Contains(gc.name, ".") {
			ref = e.ref(gc)
		}
		items = append(items, ref)
		gb = append(gb, ref)
		c := descCol(gc, bareNameQuoted(gc.name), true)
		desc.cols = append(desc.cols, c)
		desc.key = append(desc.key, c)
	}
	items = append(items, "count(*) AS n")
	desc.cols = append(desc.cols, &column{name: "n", typ: tBigint, sqlType: "bigint", small: true, domain: []string{"0", "1", "2", "3"}})
	if nums := e.cols(func(c *column) bool { return c.typ.numeric() }); len(nums) > 0 && r.IntN(4) > 0 {
		c := e.pick(nums)
		items = append(items, "sum("+c.name+") AS s")
		s := &column{name: "s", typ: tNumeric, sqlType: "numeric", domain: []string{"0", "1", "-2.5", "100"}}
		switch c.typ {
		case tInt:
			s.typ, s.sqlType, s.small = tBigint, "bigint", c.small
		case tFloat:
			s.typ, s.sqlType = tFloat, "float8"
		}
		desc.cols = append(desc.cols, s)
	}
	if ords := e.cols(func(c *column) bool { return c.typ.orderable() }); len(ords) > 0 && r.IntN(4) > 0 {
		c := e.pick(ords)
		fn := []string{"min", "max"}[r.IntN(2)]
		items = append(items, fn+"("+c.name+") AS "+fn+"v")
		desc.cols = append(desc.cols, descCol(c, fn+"v", false))
	}
	if e.fr != nil && r.IntN(2) == 0 {
		// A newer aggregate the readers do not read.
		items = append(items, e.featAggCall()+" AS x0")
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from + where + " GROUP BY " + strings.Join(gb, ", ")
	if r.IntN(4) == 0 {
		q += " HAVING " + e.havingCond()
	}
	return &chainLevel{name: name, sql: q, desc: desc, pk: true, base: base}
}

// chainNext draws a level reading up; keyed: a further level will read it.
func (g *gen) chainNext(name string, up *chainLevel, keyed bool) *chainLevel {
	r := g.r
	t := up.desc
	from, pfx := fromClause(r, t)
	e := &exprGen{r: r, t: t, pfx: pfx, fr: r}
	e.keys, _ = tableKeys(t)
	joinBack := up.base != nil && len(t.key) == len(up.base.key)
	switch x := r.IntN(10); {
	case x < 3:
		// A row transform of the upper target.
		l := g.chainRow(name, e, from, t.key, up.base, up.pk)
		return l
	case x < 5 && up.pk && len(t.key) > 0:
		// Grouped by its NOT NULL key (a part of it, if composite).
		groups := t.key
		if len(groups) > 1 && r.IntN(2) == 0 {
			groups = groups[:1]
		}
		var base *table
		if len(groups) == len(t.key) {
			base = up.base
		}
		return chainAgg(name, e, from, "", groups, base)
	case x < 8 && joinBack:
		// Through a join with the table its key comes from.
		return g.chainJoinBack(name, up, keyed)
	case !keyed:
		if r.IntN(2) == 0 {
			return &chainLevel{name: name, sql: aggSelect(r, r, t), desc: &table{name: name}}
		}
		return &chainLevel{name: name, sql: rowSelect(r, r, t), desc: &table{name: name}}
	}
	return g.chainRow(name, e, from, t.key, up.base, up.pk)
}

// chainJoinBack joins up's target with the table its key comes from, on
// that key: a row transform (keyed by the join's lineage) or an aggregate
// grouped by up's key; a last level may LEFT JOIN.
func (g *gen) chainJoinBack(name string, up *chainLevel, keyed bool) *chainLevel {
	r := g.r
	u := &jsrc{t: up.desc, item: up.desc.name + " u", ref: "u"}
	b := &jsrc{t: up.base, item: up.base.name + " AS b", ref: "b"}
	j := &joinGen{r: r}
	on := j.eqs(u, up.desc.key, b, up.base.key)
	kind := " JOIN "
	if !keyed && r.IntN(3) == 0 {
		kind = " LEFT JOIN "
	}
	from := u.item + kind + b.item + " ON " + on
	v := view([]*jsrc{u, b})
	e := &exprGen{r: r, t: v, fr: r}
	var key []*column
	for _, k := range up.desc.key {
		key = append(key, viewCol(v, "u."+k.name))
	}
	where := ""
	if r.IntN(3) == 0 {
		where = " WHERE " + e.pred(1)
	}
	if up.pk && r.IntN(2) == 0 {
		l := chainAgg(name, e, from, where, key, up.base)
		return l
	}
	l := g.chainRowJoin(name, e, from+where, key, up.base)
	return l
}

// chainEvent is a lifecycle action on a chain: PAUSE or RESUME of any
// level, or the last level dropped and defined again over the same level.
func (g *gen) chainEvent() []Step {
	var out []Step
	g.withFeatureRand(func() {
		r := g.r
		chain := g.chains[r.IntN(len(g.chains))]
		if r.IntN(3) == 0 {
			last := chain[len(chain)-1]
			l := g.chainNext(last.name, chain[len(chain)-2], false)
			l.level = last.level
			chain[len(chain)-1] = l
			delete(g.chainPaused, unquote(l.name))
			out = []Step{{Kind: StepApply, Stmts: []string{"DROP TRANSFORM " + l.name, l.create()}}}
			return
		}
		if ps := g.sortedChainPaused(); len(ps) > 0 && r.IntN(2) == 0 {
			n := ps[r.IntN(len(ps))]
			delete(g.chainPaused, unquote(n))
			out = []Step{{Kind: StepApply, Stmts: []string{"RESUME TRANSFORM " + n}}}
			return
		}
		l := chain[r.IntN(len(chain))]
		g.chainPaused[unquote(l.name)] = l.name
		out = []Step{{Kind: StepApply, Stmts: []string{"PAUSE TRANSFORM " + l.name}}}
	})
	return out
}

// sortedChainPaused are the paused chain levels' names as written.
func (g *gen) sortedChainPaused() []string {
	var out []string
	for _, n := range g.chainPaused {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// chainPlan draws, from the feature stream, the body events after which
// chains are defined (none, one or two) and their depths.
func (g *gen) chainPlan(events int) (at []int, depth []int) {
	if g.fr.IntN(100) >= featChainPct || events == 0 {
		return nil, nil
	}
	at = append(at, g.fr.IntN(events/2+1))
	depth = append(depth, 2+g.fr.IntN(2))
	if g.fr.IntN(4) == 0 {
		at = append(at, at[0]+g.fr.IntN(events-at[0]))
		depth = append(depth, 2+g.fr.IntN(2))
	}
	return at, depth
}
