package generative

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// Chains: transforms reading other transforms' targets, two or three
// levels deep, drawn from the feature stream (features.go). A level a
// further level reads is keyed by NOT NULL columns (a row transform of one
// table or of an inner join, an aggregate grouped by plain NOT NULL
// columns), except in four chains in ten (nullChainPct, from a stream of
// their own): there the first level or, of three, the second is keyed by
// columns that may be NULL, which the engine keys by the hidden surrogate
// __id (ADR 0019):
//   - an aggregate grouped by a nullable column, now and then with one
//     more column (chainAggNullable);
//   - an aggregate grouped by a nullable expression: nullif of a value of
//     the column's domain, a CASE without ELSE, c % 3 of a nullable
//     integer (nullableExpr);
//   - an aggregate without GROUP BY: one row, which a HAVING may take away
//     and give back;
//   - in join programs (half the first levels there), a row transform of
//     the fact and a dimension outer joined, LEFT either way, RIGHT or FULL,
//     selecting both sides' keys (chainOuterJoin);
//   - over a level below, the table that level's key comes from outer
//     joined to it, selecting both keys (chainOuterBack).
//
// The levels above read such a level's key as nullable (chainLevel.nullable
// and back): row transforms of it, aggregates grouped by its key (nullable
// again), and joins back to the table its key columns come from, on the
// columns it groups by with IS NOT DISTINCT FROM or = (which drops the NULL
// keys), on the table's key with =, keyed by the side whose rows meet at
// most one row of the other: a nullable key is not a primary key
// (chainJoinBackNullable). The last level is anything the
// generators draw over the level below. Levels are applied one after
// another, with writes and a kill of the runner between them so that a
// crash lands while the lower levels are behind. Chain levels are not in
// gen.defs: the program's DROP and redefinition never pick them (the
// engine refuses to drop or redefine a target another transform reads);
// their own lifecycle actions pause and resume any level and redefine only
// the last. No generated SQL names __id (it is hidden).
//
// A chain with a nullable level is drawn as every chain is, from the
// feature stream (so that stream draws what it drew before such levels
// existed), and then its levels are drawn again from the nullable-chain
// stream, with the same names, writes and kills: only the definitions
// change, and fresh rows of the first level's table are added when it
// reads another (nullableChain).

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
	// nullable: its key (desc.key, perhaps none) identifies a row only
	// NULL-safely, as UNIQUE NULLS NOT DISTINCT does; it is not the
	// target's primary key (the surrogate is), and a level grouped by it
	// is nullable too.
	nullable bool
	// back is a source table whose columns backOf equal the level's key
	// columns backOn, NULL-safely, for joins back to it (nil: none).
	// backKey: backOf is back's key, so a row of the level meets at most
	// one row of back; otherwise backOn is the level's whole key (it
	// groups back's rows by backOf), so a row of back meets at most one
	// row of the level.
	back    *table
	backOn  []*column
	backOf  []*column
	backKey bool
	// kind names the nullable key drawn ("" for none; for the tests).
	kind string
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
func (g *gen) withFeatureRand(f func()) { g.withStream(g.fr, f) }

// withStream runs f with s as the program's stream.
func (g *gen) withStream(s *rand.Rand, f func()) {
	r, or := g.r, g.ops.r
	g.r, g.ops.r = s, s
	defer func() { g.r, g.ops.r = r, or }()
	f()
}

// chainSteps defines chain ci of the given number of levels, with writes
// and kills between the levels' applies.
func (g *gen) chainSteps(ci, levels int) []Step {
	var out []Step
	var chain []*chainLevel
	var crashes []int // indexes in out of the kills after the writes
	g.withFeatureRand(func() {
		r := g.r
		l1 := g.chainBase(fmt.Sprintf("l%d_1", ci), false)
		if ci == 0 && r.IntN(6) == 0 {
			l1.name = chainWeirdNames[r.IntN(len(chainWeirdNames))]
			l1.desc.name = l1.name
		}
		chain = append(chain, l1)
		script := []string{l1.create()}
		for lvl := 2; lvl <= levels; lvl++ {
			up := chain[len(chain)-1]
			l := g.chainNext(fmt.Sprintf("l%d_%d", ci, lvl), up, lvl < levels, false)
			l.level = lvl
			chain = append(chain, l)
			if r.IntN(3) == 0 {
				// A level and the one it reads in one script.
				script = append(script, l.create())
				continue
			}
			out = append(out, Step{Kind: StepApply, Stmts: script})
			out = append(out, g.chainWrites(l1.src)...)
			crashes = append(crashes, len(out))
			out = append(out, g.crash(g.r, 200))
			script = []string{l.create()}
		}
		out = append(out, Step{Kind: StepApply, Stmts: script})
		out = append(out, g.chainWrites(l1.src)...)
		crashes = append(crashes, len(out))
		out = append(out, g.crash(g.r, 200))
		if r.IntN(2) == 0 {
			out = append(out, Step{Kind: StepCheck})
		}
	})
	drawn := chain
	if g.nr.IntN(100) < nullChainPct {
		chain, out = g.nullableChain(drawn, out, crashes)
	}
	g.chains = append(g.chains, chain)
	g.chainsDrawn = append(g.chainsDrawn, drawn)
	return out
}

// nullableChain draws chain drawn again from the nullable-chain stream,
// level by level under the same names, with one level that a further
// level reads keyed by columns that may be NULL: the first or, of three,
// the second. The steps out stay as drawn, their definitions replaced;
// when the first level reads another table than it did, fresh rows of
// that table come before each kill (crashes, indexes in out).
func (g *gen) nullableChain(drawn []*chainLevel, out []Step, crashes []int) ([]*chainLevel, []Step) {
	var chain []*chainLevel
	g.withStream(g.nr, func() {
		r := g.r
		at := 1 + r.IntN(len(drawn)-1)
		for i, d := range drawn {
			var l *chainLevel
			if i == 0 {
				l = g.chainBase(d.name, at == 1)
			} else {
				l = g.chainNext(d.name, chain[i-1], i+1 < len(drawn), at == i+1)
			}
			l.level = d.level
			chain = append(chain, l)
		}
		creates := map[string]string{}
		for i, d := range drawn {
			creates[d.create()] = chain[i].create()
		}
		for i, s := range out {
			if s.Kind != StepApply {
				continue
			}
			stmts := make([]string, len(s.Stmts))
			for j, st := range s.Stmts {
				stmts[j] = st
				if c, ok := creates[st]; ok {
					stmts[j] = c
				}
			}
			out[i].Stmts = stmts
		}
		src := chain[0].src
		if src == drawn[0].src || src == nil || src.shiftKey == nil || src.dim {
			return
		}
		var with []Step
		for i, s := range out {
			if len(crashes) > 0 && crashes[0] == i {
				with = append(with, g.freshBulk(src, 50+r.IntN(250)))
				crashes = crashes[1:]
			}
			with = append(with, s)
		}
		out = with
	})
	return chain, out
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

// crash kills the runner within the next `within` ms (or, a quarter of
// the time when the profile loses stores, loses its store), drawn from r
// (the stream of the event it ends).
func (g *gen) crash(r *rand.Rand, within int) Step {
	if g.prof.LoseStore > 0 && r.IntN(4) == 0 {
		return Step{Kind: StepLoseStore}
	}
	return Step{Kind: StepKill, Arg: r.IntN(within)}
}

// chainBase draws a chain's first level, over the base tables and keyed
// by NOT NULL columns, or (nullable) by columns that may be NULL.
func (g *gen) chainBase(name string, nullable bool) *chainLevel {
	if nullable {
		return g.chainBaseNullable(name)
	}
	r := g.r
	if g.join && r.IntN(5) < 3 {
		return g.chainOverJoin(name)
	}
	t, from, e := g.chainSource()
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
	l := chainAgg(name, e, from, "", groups, base, true)
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
	l := chainAgg(name, e, from, where, groups, d, true)
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

// chainAgg is an aggregate grouped by the plain columns groups (of e's
// table or view), selected under their own names: keyed by them, and pk
// when they are NOT NULL (otherwise they may be NULL, and the level is
// nullable). base is the table whose key the groups are (nil if none).
func chainAgg(name string, e *exprGen, from, where string, groups []*column, base *table, pk bool) *chainLevel {
	var gs []groupItem
	for _, gc := range groups {
		ref := gc.name
		if !strings.Contains(gc.name, ".") {
			ref = e.ref(gc)
		}
		gs = append(gs, groupItem{sel: ref, by: ref, col: descCol(gc, bareNameQuoted(gc.name), pk)})
	}
	l := chainAggOf(name, e, from, where, gs, pk)
	l.base = base
	return l
}

// groupItem is a GROUP BY item of a chain aggregate: its select item, its
// GROUP BY text and its target column.
type groupItem struct {
	sel, by string
	col     *column
}

// chainAggOf is an aggregate grouped by groups (none: one row), with
// count(*), often a sum and a min or max, now and then a newer aggregate
// the readers do not read and a HAVING: keyed by its groups, NOT NULL ones
// when pk, else nullable.
func chainAggOf(name string, e *exprGen, from, where string, groups []groupItem, pk bool) *chainLevel {
	r := e.r
	desc := &table{name: name}
	var items, gb []string
	used := map[string]bool{}
	for _, gi := range groups {
		items = append(items, gi.sel)
		gb = append(gb, gi.by)
		used[unquote(gi.col.name)] = true
		desc.cols = append(desc.cols, gi.col)
		desc.key = append(desc.key, gi.col)
	}
	n := fresh(used, "n")
	items = append(items, "count(*) AS "+n)
	desc.cols = append(desc.cols, &column{name: n, typ: tBigint, sqlType: "bigint", small: true, domain: []string{"0", "1", "2", "3"}})
	if nums := e.cols(func(c *column) bool { return c.typ.numeric() }); len(nums) > 0 && r.IntN(4) > 0 {
		c := e.pick(nums)
		sn := fresh(used, "s")
		items = append(items, "sum("+c.name+") AS "+sn)
		s := &column{name: sn, typ: tNumeric, sqlType: "numeric", domain: []string{"0", "1", "-2.5", "100"}}
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
		mn := fresh(used, fn+"v")
		items = append(items, fn+"("+c.name+") AS "+mn)
		desc.cols = append(desc.cols, descCol(c, mn, false))
	}
	if e.fr != nil && r.IntN(2) == 0 {
		// A newer aggregate the readers do not read.
		items = append(items, e.featAggCall()+" AS "+fresh(used, "x0"))
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + from + where
	if len(gb) > 0 {
		q += " GROUP BY " + strings.Join(gb, ", ")
	}
	if r.IntN(4) == 0 {
		q += " HAVING " + e.havingCond()
	}
	pk = pk && len(groups) > 0
	return &chainLevel{name: name, sql: q, desc: desc, pk: pk, nullable: !pk}
}

// chainNext draws a level reading up; keyed: a further level will read it;
// nullable: keyed by columns that may be NULL (chainNextNullable).
func (g *gen) chainNext(name string, up *chainLevel, keyed, nullable bool) *chainLevel {
	if nullable {
		return g.chainNextNullable(name, up)
	}
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
		l.inherit(up, len(t.key))
		return l
	case x < 5 && (up.pk || up.nullable) && len(t.key) > 0:
		// Grouped by its key (a part of it, if composite): NOT NULL, or
		// nullable again.
		groups := t.key
		if len(groups) > 1 && r.IntN(2) == 0 {
			groups = groups[:1]
		}
		var base *table
		if len(groups) == len(t.key) {
			base = up.base
		}
		l := chainAgg(name, e, from, "", groups, base, up.pk)
		l.inherit(up, len(groups))
		return l
	case x < 8 && joinBack:
		// Through a join with the table its key comes from.
		return g.chainJoinBack(name, up, keyed)
	case x < 8 && up.back != nil:
		// Through a join with the table its nullable key comes from.
		return g.chainJoinBackNullable(name, up, keyed)
	case !keyed:
		l := &chainLevel{name: name, desc: &table{name: name}}
		if r.IntN(2) == 0 {
			l.sql = aggSelect(r, r, t)
		} else {
			l.sql = rowSelect(r, r, t)
		}
		shaped := false
		if g.sr.IntN(100) < 2*g.shapesPct {
			// From the shapes stream, after the others drew (sqlshapes.go).
			sd := g.shapeOverLevel(g.sr, up)
			l.sql = sd.sql
			g.shapeDefs = append(g.shapeDefs, sd)
			shaped = true
		}
		if g.gr.IntN(100) < 2*g.srfPct {
			// From the function stream, after the shapes stream drew
			// (srfshapes.go), not where it landed.
			sd := g.srfOverLevel(g.gr, up)
			if !shaped {
				l.sql = sd.sql
				g.srfDefs = append(g.srfDefs, sd)
			}
		}
		return l
	}
	l := g.chainRow(name, e, from, t.key, up.base, up.pk)
	l.inherit(up, len(t.key))
	return l
}

// inherit makes l, a level whose key is the first n of up's key columns
// (aligned), nullable when up is, with what is left of up's way back.
func (l *chainLevel) inherit(up *chainLevel, n int) {
	if !up.nullable || len(l.desc.key) < n {
		return
	}
	l.nullable = true
	if up.back == nil {
		return
	}
	var on, of []*column
	for i, c := range up.backOn {
		j := colIndex(up.desc.key, c)
		switch {
		case j >= 0 && j < n:
			on, of = append(on, l.desc.key[j]), append(of, up.backOf[i])
		case up.backKey:
			return // a part of back's key is not among l's
		}
	}
	if len(on) > 0 {
		l.back, l.backOn, l.backOf, l.backKey = up.back, on, of, up.backKey
	}
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
		l := chainAgg(name, e, from, where, key, up.base, true)
		return l
	}
	l := g.chainRowJoin(name, e, from+where, key, up.base)
	return l
}

// chainSource draws the base table of a chain's first level, most often
// one the program shifts keys of, with its FROM clause and an expression
// generator over it.
func (g *gen) chainSource() (*table, string, *exprGen) {
	r := g.r
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
	return t, from, e
}

// chainBaseNullable draws a first level keyed by columns that may be
// NULL: in join programs half the time the fact and a dimension outer
// joined, otherwise an aggregate of one table (chainAggNullable).
func (g *gen) chainBaseNullable(name string) *chainLevel {
	r := g.r
	if g.join && r.IntN(2) == 0 {
		return g.chainOuterJoin(name)
	}
	t, from, e := g.chainSource()
	where := ""
	if r.IntN(4) == 0 {
		where = " WHERE " + e.pred(1)
	}
	l := g.chainAggNullable(name, e, from, where, t)
	l.src = t
	return l
}

// chainNextNullable draws a level reading up (keyed by NOT NULL columns)
// that a further level reads, keyed by columns that may be NULL: the
// table up's key comes from outer joined to it (chainOuterBack), or an
// aggregate of up (chainAggNullable).
func (g *gen) chainNextNullable(name string, up *chainLevel) *chainLevel {
	r := g.r
	t := up.desc
	if up.base != nil && len(t.key) == len(up.base.key) && r.IntN(3) == 0 {
		return g.chainOuterBack(name, up)
	}
	from, pfx := fromClause(r, t)
	e := &exprGen{r: r, t: t, pfx: pfx, fr: r}
	e.keys, _ = tableKeys(t)
	return g.chainAggNullable(name, e, from, "", nil)
}

// chainAggNullable is an aggregate of e's table (or of a level's target)
// keyed by columns that may be NULL: grouped by a nullable column (now and
// then with one more), by an expression that may be NULL (nullableExpr),
// or not grouped at all (one row, or none under a HAVING). back is e's
// table when it is a source table (nil for a level): a group of plain
// columns can be joined back to it. Those columns are then none of its
// key nor the fact's parent column, whose bulk values are all distinct: a
// NULL-safe join back cannot hash, and would compare every group with
// every row.
func (g *gen) chainAggNullable(name string, e *exprGen, from, where string, back *table) *chainLevel {
	r := e.r
	// Not float8: a level's float sum may depend on the order of its rows.
	var nullCols, short []*column
	for _, c := range e.t.cols {
		if hasLongExternal(c) || c.typ == tFloat {
			continue
		}
		if back != nil && (back.isKey(c) || g.js != nil && c == g.js.parent) {
			continue
		}
		short = append(short, c)
		if !c.notNull {
			nullCols = append(nullCols, c)
		}
	}
	switch x := r.IntN(10); {
	case x < 4 && len(nullCols) > 0:
		groups := []*column{e.pick(nullCols)}
		if c := e.pick(short); r.IntN(3) == 0 && c != groups[0] {
			groups = append(groups, c)
		}
		l := chainAgg(name, e, from, where, groups, nil, false)
		l.kind = "nullable group"
		l.back, l.backOn, l.backOf = back, l.desc.key, groups
		return l
	case x < 7 && len(short) > 0:
		used := map[string]bool{}
		for _, c := range e.t.cols {
			used[unquote(c.name)] = true
		}
		x, col := e.nullableExpr(short, fresh(used, "ng"))
		gi := groupItem{sel: x + " AS " + col.name, by: []string{"1", x, col.name}[r.IntN(3)], col: col}
		l := chainAggOf(name, e, from, where, []groupItem{gi}, false)
		l.kind = "nullable expression"
		return l
	}
	l := chainAggOf(name, e, from, where, nil, false)
	l.kind = "total"
	return l
}

// nullableExpr is a GROUP BY expression over one of cols that may be NULL
// where the column is not: nullif of a value of its domain, a CASE without
// ELSE, or (over a nullable small integer) c % 3; col is its target column,
// named name, of the column's type and values.
func (e *exprGen) nullableExpr(cols []*column, name string) (x string, col *column) {
	c := e.pick(cols)
	ref := e.ref(c)
	col = descCol(c, name, false)
	switch e.r.IntN(3) {
	case 0:
		if c.typ.integer() && c.small && !c.notNull {
			return ref + " % 3", col
		}
	case 1:
		return "CASE WHEN " + e.pred(1) + " THEN " + ref + " END", col
	}
	v := c.domain[e.r.IntN(len(c.domain))]
	if v == longInline {
		v = "'a'"
	}
	return "nullif(" + ref + ", " + v + ")", col
}

// chainOuterJoin draws a first level over the fact and a dimension, outer
// joined (LEFT either way, RIGHT or FULL): a row transform selecting both
// sides' keys, which the NULL-extended side leaves NULL.
func (g *gen) chainOuterJoin(name string) *chainLevel {
	r, js := g.r, g.js
	di := r.IntN(len(js.dims))
	d := js.dims[di]
	f := &jsrc{t: js.fact, item: js.fact.name + " AS f", ref: "f"}
	ds := &jsrc{t: d, item: d.name + " d", ref: "d"}
	j := &joinGen{r: r, js: js}
	on := j.eqs(f, js.refs[di], ds, d.key)
	from := []string{f.item + " LEFT JOIN " + ds.item, ds.item + " LEFT JOIN " + f.item,
		f.item + " RIGHT JOIN " + ds.item, f.item + " FULL JOIN " + ds.item}[r.IntN(4)] + " ON " + on
	v := view([]*jsrc{f, ds})
	e := &exprGen{r: r, t: v, fr: r}
	if r.IntN(3) == 0 {
		from += " WHERE " + e.pred(1)
	}
	var key []*column
	for _, k := range js.fact.key {
		key = append(key, viewCol(v, "f."+k.name))
	}
	for _, k := range d.key {
		key = append(key, viewCol(v, "d."+k.name))
	}
	l := g.chainRowJoin(name, e, from, key, nil)
	l.src, l.nullable, l.kind = js.fact, true, "outer join"
	l.back, l.backOn, l.backOf, l.backKey = d, l.desc.key[len(js.fact.key):], d.key, true
	return l
}

// chainOuterBack is a row transform of the table up's key comes from,
// outer joined to up's target on that key (b LEFT JOIN u, u RIGHT JOIN b,
// b FULL JOIN u): the rows up leaves out are NULL-extended, so its visible
// key, the table's key and then up's (aliased k0, …), may be NULL.
func (g *gen) chainOuterBack(name string, up *chainLevel) *chainLevel {
	r := g.r
	u := &jsrc{t: up.desc, item: up.desc.name + " u", ref: "u"}
	b := &jsrc{t: up.base, item: up.base.name + " AS b", ref: "b"}
	j := &joinGen{r: r}
	on := j.eqs(b, up.base.key, u, up.desc.key)
	from := []string{b.item + " LEFT JOIN " + u.item, u.item + " RIGHT JOIN " + b.item,
		b.item + " FULL JOIN " + u.item}[r.IntN(3)] + " ON " + on
	v := view([]*jsrc{b, u})
	e := &exprGen{r: r, t: v, fr: r}
	if r.IntN(3) == 0 {
		from += " WHERE " + e.pred(1)
	}
	var key []*column
	for _, k := range up.base.key {
		key = append(key, viewCol(v, "b."+k.name))
	}
	for _, k := range up.desc.key {
		key = append(key, viewCol(v, "u."+k.name))
	}
	desc := &table{name: name}
	var items []string
	used := map[string]bool{}
	for i, k := range key {
		n := fresh(used, fmt.Sprintf("k%d", i))
		items = append(items, k.name+" AS "+n)
		c := descCol(k, n, false)
		desc.cols = append(desc.cols, c)
		desc.key = append(desc.key, c)
	}
	for i := 1 + r.IntN(3); i > 0; i-- {
		c := e.pick(e.t.cols)
		n := fresh(used, fmt.Sprintf("w%d", len(items)))
		items = append(items, c.name+" AS "+n)
		desc.cols = append(desc.cols, descCol(c, n, false))
	}
	nb := len(up.base.key)
	return &chainLevel{name: name, sql: "SELECT " + strings.Join(items, ", ") + " FROM " + from, desc: desc,
		nullable: true, kind: "outer join of a level",
		back: up.base, backOn: desc.key[:nb], backOf: up.base.key, backKey: true}
}

// chainJoinBackNullable joins up's target with up.back on the columns its
// key comes from: on back's key with = (as NULL-safe as IS NOT DISTINCT
// FROM there, back's side is never NULL, and it can hash), on the columns
// up groups by NULL-safely (IS NOT DISTINCT FROM) or, one time in three
// per column, with = (which drops the NULL keys). It is an aggregate
// grouped by up's key (nullable), or a row transform keyed by up's key
// when back's columns are its key (a row of up meets at most one row of
// back), else by back's key (a row of back meets at most one row of up); a
// last level may LEFT JOIN.
func (g *gen) chainJoinBackNullable(name string, up *chainLevel, keyed bool) *chainLevel {
	r := g.r
	u := &jsrc{t: up.desc, item: up.desc.name + " u", ref: "u"}
	b := &jsrc{t: up.back, item: up.back.name + " AS b", ref: "b"}
	var on []string
	for i, c := range up.backOn {
		x, y := "u."+c.name, "b."+up.backOf[i].name
		if r.IntN(2) == 0 {
			x, y = y, x
		}
		op := " = "
		if !up.backKey && r.IntN(3) > 0 {
			op = " IS NOT DISTINCT FROM "
		}
		on = append(on, x+op+y)
	}
	kind := " JOIN "
	if !keyed && r.IntN(3) == 0 {
		kind = " LEFT JOIN "
	}
	from := u.item + kind + b.item + " ON " + strings.Join(on, " AND ")
	v := view([]*jsrc{u, b})
	e := &exprGen{r: r, t: v, fr: r}
	where := ""
	if r.IntN(3) == 0 {
		where = " WHERE " + e.pred(1)
	}
	var ukey []*column
	for _, k := range up.desc.key {
		ukey = append(ukey, viewCol(v, "u."+k.name))
	}
	var l *chainLevel
	switch {
	case len(ukey) > 0 && r.IntN(2) == 0:
		l = chainAgg(name, e, from, where, ukey, nil, false)
		l.inherit(up, len(ukey))
	case up.backKey:
		l = g.chainRowJoin(name, e, from+where, ukey, nil)
		l.inherit(up, len(ukey))
	default:
		var bkey []*column
		for _, k := range up.back.key {
			bkey = append(bkey, viewCol(v, "b."+k.name))
		}
		var base *table
		if len(bkey) > 0 {
			base = up.back
		}
		l = g.chainRowJoin(name, e, from+where, bkey, base)
		l.nullable = true
	}
	l.kind = "NULL-safe join back"
	return l
}

// chainEvent is a lifecycle action on a chain: PAUSE or RESUME of any
// level, or the last level dropped and defined again over the same level.
// A chain drawn again with a nullable level (nullableChain) draws its
// last level again from the nullable-chain stream, after the feature
// stream drew it over the chain as first drawn.
func (g *gen) chainEvent() []Step {
	var out []Step
	g.withFeatureRand(func() {
		r := g.r
		ci := r.IntN(len(g.chains))
		chain := g.chains[ci]
		if r.IntN(3) == 0 {
			last := chain[len(chain)-1]
			drawn := g.chainsDrawn[ci]
			l := g.chainNext(last.name, drawn[len(drawn)-2], false, false)
			l.level = last.level
			drawn[len(drawn)-1] = l
			if chain[0] != drawn[0] {
				g.withStream(g.nr, func() { l = g.chainNext(last.name, chain[len(chain)-2], false, false) })
				l.level = last.level
				chain[len(chain)-1] = l
			}
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
