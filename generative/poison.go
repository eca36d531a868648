package generative

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Poison rows (ADR 0013): a fraction of the programs (all of profile
// "poison") define row transforms over one table whose re-derive fails on
// some rows' data — a CHECK the program adds to the target, or a division
// by zero in a select expression — and write rows that trip it mixed with
// good ones. The engine must hold exactly the failing keys, per
// transform, and keep every other key (and every other transform) exact.
// Everything is drawn from a stream of its own (the poison stream, seeded
// from the seed), so that a program without poison is what its seed drew
// before poison existed.

// poisonSalt seeds the poison stream. It is chosen so that the fast lane's
// fixed cases that predate poison draw none (TestFastLanePoisonDraws).
const poisonSalt = 0x706f6995

// Chances, in percent, of the poison draws.
const (
	// poisonEventPct: a body event of a poison program is followed by a
	// poison transaction (now and then in a lane beside writers, or with a
	// check right after).
	poisonEventPct = 20
	// maxPoisoned bounds the rows holding a poisoned value at any time.
	// The CLI runner has no flag for Config.QuarantineAfter, so its fuse is
	// the default 5; a batch may meet the keys held before (at most
	// maxPoisoned) and as many newly poisoned ones, which stays below it.
	maxPoisoned = 2
	// poisonMinAbs: poisoned integers are at least this far from zero, far
	// outside every small domain (-2..10), so that no other statement
	// writes one (each held key costs about 300 ms of retries, and bulk
	// rows from the domain would hold hundreds).
	poisonMinAbs = 500
)

// poisonPlan is what a poison program poisons: one table's column, the
// values that trip the poisoned transforms, and the keys poison statements
// write them at.
type poisonPlan struct {
	t *table
	c *column
	// vals are the poisoned values (outside c's domain); guard is true of
	// a row of t holding one (over t's columns, unqualified); hot are the
	// values that fail at least one of the transforms (the others pass all).
	vals  []string
	guard string
	hot   map[string]bool
	// keys are the keys the poison statements write (maxPoisoned of them,
	// from the key domain, so other statements touch them too).
	keys [][]string
}

// drawPoison decides (from the poison stream) whether the program draws
// poison.
func (g *gen) drawPoison() bool {
	return g.pr.IntN(100) < g.prof.Poison
}

// poisonable reports whether poison may live in column c of t: a small
// integer or a text column outside the key, not a join column; t's key is
// integers and texts, whose text forms (the held keys' key text, from the
// WAL, a capture trigger or a build) are canonical.
func (g *gen) poisonable(t *table, c *column) bool {
	if t.dim || t.isKey(c) || !(c.typ.integer() && c.small || c.typ == tText) {
		return false
	}
	for _, k := range t.key {
		if !k.typ.integer() && k.typ != tText {
			return false
		}
	}
	if g.js != nil && t == g.js.fact {
		if c == g.js.parent {
			return false
		}
		for _, refs := range g.js.refs {
			if colIndex(refs, c) >= 0 {
				return false
			}
		}
	}
	return true
}

// poisonSetup draws the poison plan and returns the steps that set it up:
// a table of its own when no table can take poison, the poisoned
// transforms (division by zero in a select item, or a CHECK added to the
// target right after), and a first transaction mixing poisoned and good
// rows.
func (g *gen) poisonSetup() []Step {
	pr := g.pr
	var out []Step
	type cand struct {
		t *table
		c *column
	}
	var cands []cand
	for _, t := range g.tables {
		for _, c := range t.cols {
			if g.poisonable(t, c) {
				cands = append(cands, cand{t, c})
			}
		}
	}
	if len(cands) == 0 {
		t := g.poisonTable()
		for _, c := range t.cols {
			if g.poisonable(t, c) {
				cands = append(cands, cand{t, c})
			}
		}
		out = append(out, Step{Kind: StepSQL, Stmts: []string{t.createSQL()}})
	}
	// Integers take both kinds of poison: preferred two times in three.
	var ints []cand
	for _, c := range cands {
		if c.c.typ.integer() {
			ints = append(ints, c)
		}
	}
	if len(ints) > 0 && pr.IntN(3) > 0 {
		cands = ints
	}
	pick := cands[pr.IntN(len(cands))]
	pz := &poisonPlan{t: pick.t, c: pick.c, hot: map[string]bool{}}
	g.pz = pz
	c := pz.c
	integer := c.typ.integer()
	sign := 1
	if pr.IntN(3) == 0 {
		sign = -1
	}
	if integer {
		for _, v := range []int{poisonMinAbs, 777, 4096} {
			pz.vals = append(pz.vals, fmt.Sprint(sign*v))
		}
		pz.guard = fmt.Sprintf("abs(%s) >= %d", c.name, poisonMinAbs)
	} else {
		pz.vals = []string{"'poison'", "'poison!'", "'Poisoned'"}
		pz.guard = "lower(" + c.name + ") LIKE 'poison%'"
	}
	seen := map[string]bool{}
	for range 20 {
		if len(pz.keys) == maxPoisoned {
			break
		}
		kv := withPoisonRand(g, func() []string { return g.ops.keyVals(pz.t) })
		if s := strings.Join(kv, ","); !seen[s] {
			seen[s] = true
			pz.keys = append(pz.keys, kv)
		}
	}

	// The poisoned transforms: a CHECK on the target, a division by zero,
	// or (an integer column) one of each.
	kinds := []string{"check"}
	if integer {
		kinds = [][]string{{"check"}, {"div"}, {"check", "div"}}[pr.IntN(3)]
	}
	var script, alters []string
	for i, kind := range kinds {
		name := fmt.Sprintf("p%d", i)
		sel, col := g.poisonSelect(kind, sign)
		d := transformDef{name: name, table: pz.t, sql: sel}
		// Among the program's transforms: its PAUSE, RESUME, DROP and
		// redefinitions pick them too.
		g.defs[name] = d
		script = append(script, d.create())
		if kind == "check" {
			alters = append(alters, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s_poison CHECK (%s)", name, name, g.poisonCheck(col, integer, sign)))
		}
	}
	if len(alters) == 0 && pr.IntN(3) > 0 {
		// Poisoned rows before the transform: its build holds them.
		out = append(out, g.poisonTxn(true))
	}
	out = append(out, Step{Kind: StepApply, Stmts: script})
	if len(alters) > 0 {
		// No row holds a poisoned value yet, so the constraint validates.
		out = append(out, Step{Kind: StepSQL, Stmts: alters})
	}
	return append(out, g.poisonTxn(true))
}

// poisonTable draws a table that can take poison, for a program none of
// whose tables can.
func (g *gen) poisonTable() *table {
	var t *table
	for range 100 {
		t = newTable(g.pr, "pz")
		for _, c := range t.cols {
			if g.poisonable(t, c) {
				g.tables = append(g.tables, t)
				g.ops.tables = g.tables
				return t
			}
		}
	}
	// Unreachable in practice; a fixed shape keeps it total.
	k := &column{name: "c0", typ: tInt, sqlType: "int", notNull: true, small: true, domain: []string{"0", "1", "2", "3"}}
	v := &column{name: "c1", typ: tInt, sqlType: "int", small: true, domain: []string{"-1", "0", "1"}}
	t = &table{name: "pz", cols: []*column{k, v}, key: []*column{k}, shiftKey: k}
	g.tables = append(g.tables, t)
	g.ops.tables = g.tables
	return t
}

// poisonSelect draws a poisoned row transform over the plan's table: the
// poisoned item (the column, for a CHECK on the target, or 100 divided by
// its distance to a poisoned value), some of the key, a few other items,
// now and then a WHERE. It returns the SELECT and the target column the
// poisoned item becomes, as written.
func (g *gen) poisonSelect(kind string, sign int) (string, string) {
	pr, pz := g.pr, g.pz
	t, c := pz.t, pz.c
	e := &exprGen{r: pr, t: t}
	var items []string
	used := map[string]bool{unquote(c.name): true}
	col := c.name
	switch {
	case kind == "div":
		k := pz.vals[pr.IntN(len(pz.vals))]
		pz.hot[k] = true
		den := c.name + " - " + k
		if sign < 0 {
			den = c.name + " + " + strings.TrimPrefix(k, "-")
		}
		col = "pd"
		items = append(items, "100 / ("+den+") AS pd")
	case pr.IntN(2) == 0:
		col = "pc"
		items = append(items, c.name+" AS pc")
	default:
		items = append(items, c.name)
	}
	used[unquote(col)] = true
	for _, k := range t.key {
		if pr.IntN(2) == 0 && !used[unquote(k.name)] {
			used[unquote(k.name)] = true
			items = append(items, k.name)
		}
	}
	for i := pr.IntN(3); i > 0; i-- {
		name := fmt.Sprintf("e%d", len(items))
		if used[name] {
			continue
		}
		used[name] = true
		x := []func() string{e.numExpr, e.textExpr, e.boolExpr}[pr.IntN(3)]()
		items = append(items, x+" AS "+name)
	}
	pr.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + t.name
	if pr.IntN(3) == 0 {
		q += " WHERE " + e.pred(1)
	}
	return q, col
}

// poisonCheck is the CHECK on target column col that some poisoned values
// fail (NULL passes, as it does any CHECK); it marks those values hot.
func (g *gen) poisonCheck(col string, integer bool, sign int) string {
	pr, pz := g.pr, g.pz
	hot := func(vs ...string) {
		for _, v := range vs {
			pz.hot[v] = true
		}
	}
	if !integer {
		switch pr.IntN(3) {
		case 0:
			hot("'poison'", "'poison!'")
			return col + " NOT LIKE 'poison%'"
		case 1:
			hot(pz.vals...)
			return "lower(" + col + ") NOT LIKE 'poison%'"
		}
		hot("'poison!'")
		return col + " <> 'poison!'"
	}
	lim := poisonMinAbs
	switch pr.IntN(4) {
	case 0:
		hot(pz.vals...)
		if sign < 0 {
			return fmt.Sprintf("%s > %d", col, -lim)
		}
		return fmt.Sprintf("%s < %d", col, lim)
	case 1:
		hot(fmt.Sprint(sign * 777))
		return fmt.Sprintf("%s <> %d", col, sign*777)
	case 2:
		hot(pz.vals...)
		return fmt.Sprintf("%s BETWEEN %d AND %d", col, -lim+1, lim-1)
	}
	hot(pz.vals[1:]...)
	return fmt.Sprintf("abs(%s) < 600", col)
}

// poisonValue draws a poisoned value: usually one that fails a transform,
// now and then one that fails none.
func (pz *poisonPlan) poisonValue(pr *rand.Rand) string {
	var hot []string
	for _, v := range pz.vals {
		if pz.hot[v] {
			hot = append(hot, v)
		}
	}
	if len(hot) > 0 && pr.IntN(4) > 0 {
		return hot[pr.IntN(len(hot))]
	}
	return pz.vals[pr.IntN(len(pz.vals))]
}

// withPoisonRand runs f with the poison stream as the statements' stream,
// so that the main stream is untouched.
func withPoisonRand[T any](g *gen, f func() T) T {
	saved := g.ops.r
	g.ops.r = g.pr
	defer func() { g.ops.r = saved }()
	return f()
}

// poisonEvent is what follows a body event of a poison program now and
// then: a poison transaction, alone, with a check right after (so that a
// check sees keys held in the middle of the program), or in a lane while
// other lanes write.
func (g *gen) poisonEvent() []Step {
	pr := g.pr
	switch x := pr.IntN(10); {
	case x < 5:
		return []Step{g.poisonTxn(false)}
	case x < 8:
		return []Step{g.poisonTxn(false), {Kind: StepCheck}}
	}
	// Poison writes stay in one lane, so that the guard bounding the
	// poisoned rows sees every one of them.
	s := Step{Kind: StepConcurrent}
	var lane []Step
	for i := 2 + pr.IntN(3); i > 0; i-- {
		lane = append(lane, g.poisonTxn(false))
	}
	s.Lanes = append(s.Lanes, lane)
	for i := 1 + pr.IntN(2); i > 0; i-- {
		var w []Step
		for j := 2 + pr.IntN(5); j > 0; j-- {
			w = append(w, withPoisonRand(g, g.ops.txn))
		}
		s.Lanes = append(s.Lanes, w)
	}
	return []Step{s}
}

// poisonTxn is one transaction on the poisoned table: one or two poison
// statements (writing a poisoned value, correcting one, deleting a
// poisoned row, moving a poisoned row to another poisoned value) mixed
// with good rows, so that one batch holds both; with insert, a poisoned
// row inserted first of all.
func (g *gen) poisonTxn(insert bool) Step {
	pr, pz := g.pr, g.pz
	s := Step{Kind: StepTxn, Rollback: !insert && pr.IntN(12) == 0}
	// Groups of statements, shuffled whole: a partial rollback is three.
	var groups [][]string
	if insert {
		groups = append(groups, []string{g.poisonInsert(pz.keys[pr.IntN(len(pz.keys))], pz.poisonValue(pr))})
	}
	for i := 1 + pr.IntN(2); i > 0; i-- {
		groups = append(groups, []string{g.poisonStmt()})
	}
	for i := 1 + pr.IntN(3); i > 0; i-- {
		if pr.IntN(3) == 0 {
			groups = append(groups, withPoisonRand(g, func() []string { return g.ops.stmts(pz.t) }))
		} else {
			groups = append(groups, []string{withPoisonRand(g, func() string { return g.ops.insert(pz.t, 2+pr.IntN(4)) })})
		}
	}
	pr.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	for _, gr := range groups {
		s.Stmts = append(s.Stmts, gr...)
	}
	return s
}

// poisonStmt draws one poison statement on one of the plan's keys (or
// every poisoned row). A statement that writes a poisoned value is
// guarded: it does nothing while maxPoisoned other rows hold one.
func (g *gen) poisonStmt() string {
	pr, pz := g.pr, g.pz
	t, c := pz.t, pz.c
	kv := pz.keys[pr.IntN(len(pz.keys))]
	match := keyMatch(t, kv, "")
	v := pz.poisonValue(pr)
	good := withPoisonRand(g, func() string { return g.ops.value(c, true) })
	switch x := pr.IntN(20); {
	case x < 8:
		return g.poisonInsert(kv, v)
	case x < 11:
		// A good row poisoned.
		return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s AND %s", t.name, c.name, v, match, pz.room(match))
	case x < 14:
		// A poisoned row corrected: one, or every one.
		if pr.IntN(3) == 0 {
			return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s", t.name, c.name, good, pz.guard)
		}
		return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s AND %s", t.name, c.name, good, match, pz.guard)
	case x < 17:
		// A poisoned row deleted: one, or every one.
		if pr.IntN(3) == 0 {
			return fmt.Sprintf("DELETE FROM %s WHERE %s", t.name, pz.guard)
		}
		return fmt.Sprintf("DELETE FROM %s WHERE %s AND %s", t.name, match, pz.guard)
	}
	// Poisoned rows moved to another poisoned value (which may trip
	// another of the transforms, or none).
	return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s", t.name, c.name, v, pz.guard)
}

// room is the guard of a statement writing a poisoned value at the key
// match selects: fewer than maxPoisoned other rows hold one.
func (pz *poisonPlan) room(match string) string {
	return fmt.Sprintf("(SELECT count(*) FROM %s AS o WHERE %s AND NOT (%s)) < %d", pz.t.name, pz.guard, match, maxPoisoned)
}

// poisonInsert inserts a row at key kv with poisoned value v (or poisons
// the row there, by the upsert), its other columns from their domains,
// when the guard allows.
func (g *gen) poisonInsert(kv []string, v string) string {
	t, c := g.pz.t, g.pz.c
	kvs := map[*column]string{}
	for i, k := range t.key {
		kvs[k] = kv[i]
	}
	var names, vals []string
	for _, col := range t.cols {
		names = append(names, col.name)
		val, ok := kvs[col]
		switch {
		case col == c:
			val = v
		case !ok:
			val = withPoisonRand(g, func() string { return g.ops.value(col, true) })
		}
		// Typed, since the row is a SELECT (an untyped literal would be
		// text, which assigns to no date or number column).
		vals = append(vals, "("+val+")::"+col.sqlType)
	}
	var keys []string
	for _, k := range t.key {
		keys = append(keys, k.name)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s WHERE %s ON CONFLICT (%s) DO UPDATE SET %s = EXCLUDED.%s",
		t.name, strings.Join(names, ", "), strings.Join(vals, ", "), g.pz.room(keyMatch(t, kv, "")), strings.Join(keys, ", "), c.name, c.name)
}

// avoidTruncate rewrites every TRUNCATE of t in steps as a DELETE of all
// its rows. It dates from an engine bug since fixed (a TRUNCATE left held
// a key the target never stored; testdata/regressions/
// poison-truncate-keeps-held.trellis pins the fix); it stays so that the
// fixed fast-lane seeds keep generating the programs their plant coverage
// was established with.
func avoidTruncate(steps []Step, t *table) {
	for i := range steps {
		s := &steps[i]
		var out []string
		for _, st := range s.Stmts {
			rest, ok := strings.CutPrefix(st, "TRUNCATE ")
			if !ok {
				out = append(out, st)
				continue
			}
			var keep []string
			var del []string
			for _, n := range strings.Split(rest, ", ") {
				if n == t.name {
					del = append(del, "DELETE FROM "+n)
				} else {
					keep = append(keep, n)
				}
			}
			if len(keep) > 0 {
				out = append(out, "TRUNCATE "+strings.Join(keep, ", "))
			}
			out = append(out, del...)
		}
		s.Stmts = out
		for _, l := range s.Lanes {
			avoidTruncate(l, t)
		}
	}
}
