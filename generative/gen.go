package generative

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// Profile weights what a generated program contains. Probabilities are
// percentages per body event.
type Profile struct {
	Name string
	// Runner and Confirm force the config; "" draws it from the seed.
	Runner  string
	Confirm string
	// MinEvents and MaxEvents bound the number of body events.
	MinEvents, MaxEvents                                                       int
	Kill, LoseStore, RestartPG, Held, Pause, Redefine, Concurrent, Stop, Check int
	// BurstCrash: a burst of bulk transactions, then a crash (kill -9, or
	// losing the store) while they are recorded and applied.
	BurstCrash int
	// FlowCrash: writers keep committing while the runner is crashed right
	// after the slot's confirmed position moves: what the slot confirmed
	// must be durable, and under --confirm=applied applied.
	FlowCrash int
	// Stream is the chance the server streams in-progress transactions;
	// SmallBatch the chance an in-process runner re-derives in tiny batches.
	Stream, SmallBatch int
	// Join is the chance the program is a join program: fact and dimension
	// tables besides the plain ones, and transforms joining them (join.go).
	Join int
	// Capture forces the capture mode the program starts in; "" draws it
	// from the capture stream (trigger one time in three).
	Capture string
	// Switch is the chance the program switches capture mode during its
	// body (once, or twice in a quarter of those), drawn from the capture
	// stream.
	Switch int
	// Poison is the chance the program draws poison rows (poison.go):
	// row transforms of one table whose re-derive fails on some rows (a
	// CHECK on the target, a division by zero), and writes that trip them.
	Poison int
	// DDL is the chance per body event of a schema change on a source
	// (ddl.go), drawn from the DDL stream.
	DDL int
	// Specials is the chance, drawn apart, that the program's numeric
	// columns without a typmod also take NaN, 'Infinity' and '-Infinity'
	// (a sum or avg over them is NaN or infinite, ADR 0024). Apart, so
	// that the other programs, the fast lane's fixed cases among them,
	// are what they were.
	Specials int
}

// Profiles returns the built-in profiles. "mixed" draws a bit of
// everything; the others stress one kind of action each, "join" draws
// only join programs, "trigger" starts every program in trigger capture
// with many held transactions and switches, "poison" draws poison rows in
// every program, "numeric" NaN and infinities among the numeric values of
// every program (Profile.Specials), "ddl" schema changes on sources.
func Profiles() []Profile {
	return []Profile{
		{Name: "mixed", MinEvents: 20, MaxEvents: 60, BurstCrash: 1, FlowCrash: 1, Kill: 2, LoseStore: 1, RestartPG: 1, Held: 2, Pause: 2, Redefine: 2, Concurrent: 3, Stop: 2, Check: 8, Stream: 20, SmallBatch: 30, Join: 35, Switch: 25, Poison: 25},
		{Name: "crash", Runner: RunnerCLI, MinEvents: 20, MaxEvents: 50, BurstCrash: 4, FlowCrash: 3, Kill: 10, Concurrent: 8, Check: 6, Stream: 20, Join: 35, Switch: 25, Poison: 25},
		{Name: "store", Runner: RunnerCLI, Confirm: "applied", MinEvents: 15, MaxEvents: 30, BurstCrash: 4, FlowCrash: 12, Kill: 4, LoseStore: 6, Concurrent: 6, Check: 6, Join: 35, Switch: 25, Poison: 25},
		{Name: "held", MinEvents: 15, MaxEvents: 40, Held: 12, Check: 6, Concurrent: 2, SmallBatch: 30, Join: 35, Switch: 25, Poison: 25},
		{Name: "restart", MinEvents: 15, MaxEvents: 40, RestartPG: 5, Kill: 2, Concurrent: 3, Check: 6, Join: 35, Switch: 25, Poison: 25},
		{Name: "lifecycle", MinEvents: 20, MaxEvents: 50, Pause: 8, Redefine: 8, Stop: 4, Check: 8, Concurrent: 2, SmallBatch: 30, Join: 35, Switch: 25, Poison: 25},
		{Name: "concurrent", MinEvents: 10, MaxEvents: 25, Concurrent: 30, Kill: 2, Check: 6, Stream: 30, Join: 35, Switch: 25, Poison: 25},
		{Name: "batch", Runner: RunnerInProc, MinEvents: 20, MaxEvents: 60, Check: 10, Stream: 50, SmallBatch: 100, Concurrent: 3, Redefine: 2, Join: 35, Switch: 25, Poison: 25},
		{Name: "join", MinEvents: 20, MaxEvents: 45, BurstCrash: 2, FlowCrash: 1, Kill: 4, LoseStore: 1, RestartPG: 1, Held: 3, Pause: 2, Redefine: 4, Concurrent: 5, Stop: 2, Check: 10, Stream: 20, SmallBatch: 30, Join: 100, Switch: 25, Poison: 25},
		{Name: "trigger", Capture: CaptureTrigger, MinEvents: 10, MaxEvents: 22, BurstCrash: 2, FlowCrash: 2, Kill: 4, LoseStore: 4, RestartPG: 1, Held: 14, Pause: 2, Redefine: 2, Concurrent: 5, Stop: 2, Check: 6, SmallBatch: 20, Join: 35, Switch: 100, Poison: 25},
		{Name: "poison", MinEvents: 15, MaxEvents: 35, BurstCrash: 1, FlowCrash: 1, Kill: 3, LoseStore: 2, RestartPG: 1, Held: 2, Pause: 4, Redefine: 2, Concurrent: 4, Stop: 2, Check: 10, Stream: 20, SmallBatch: 40, Join: 20, Switch: 20, Poison: 100},
		{Name: "numeric", MinEvents: 20, MaxEvents: 50, Kill: 2, LoseStore: 1, RestartPG: 1, Held: 2, Pause: 2, Redefine: 2, Concurrent: 3, Stop: 2, Check: 8, Stream: 20, SmallBatch: 20, Join: 35, Switch: 25, Poison: 25, Specials: 100},
		{Name: "ddl", MinEvents: 15, MaxEvents: 30, Kill: 3, RestartPG: 1, Pause: 3, Redefine: 2, Concurrent: 4, Stop: 2, Check: 10, Stream: 20, SmallBatch: 30, Join: 30, Switch: 20, Poison: 25, DDL: ddlEventPct},
	}
}

// ProfileByName finds a built-in profile.
func ProfileByName(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// Generate draws a program from seed: the same seed and profile always
// give the same program.
func Generate(seed int64, prof Profile) *Program {
	p, _ := generate(seed, prof)
	return p
}

// generate is Generate, with the generator it drew the program with.
func generate(seed int64, prof Profile) (*Program, *gen) {
	g := newGen(seed, prof)
	return g.program(seed), g
}

// newGen is the generator of seed's program under prof, its streams
// seeded.
func newGen(seed int64, prof Profile) *gen {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	g := &gen{r: r, prof: prof, defs: map[string]transformDef{}, paused: map[string]bool{},
		fr: rand.New(rand.NewPCG(uint64(seed), 0x66656174)), chainPaused: map[string]string{},
		cr: rand.New(rand.NewPCG(uint64(seed), captureSalt)), pr: rand.New(rand.NewPCG(uint64(seed), poisonSalt)),
		dr: rand.New(rand.NewPCG(uint64(seed), ddlSalt)), lr: rand.New(rand.NewPCG(uint64(seed), levelSalt)),
		nr: rand.New(rand.NewPCG(uint64(seed), nullChainSalt)), xr: rand.New(rand.NewPCG(uint64(seed), nestedSalt)),
		nestedPct: featNestedPct, sr: rand.New(rand.NewPCG(shapesSeed(seed), shapesSalt)), shapesPct: shapesPct(),
		gr: rand.New(rand.NewPCG(shapesSeed(seed), srfSalt)), srfPct: srfPctEnv(),
		hr: rand.New(rand.NewPCG(shapesSeed(seed), graphSalt)), graphPct: graphPctEnv(),
		as: newAlterStream(seed, prof)}
	// Whether it is a join program is drawn apart, so that the programs
	// without joins are what they were before joins existed.
	g.join = prof.Join > 0 && rand.New(rand.NewPCG(uint64(seed), 0x6a6f696e)).IntN(100) < prof.Join
	return g
}

type gen struct {
	r      *rand.Rand
	prof   Profile
	tables []*table
	ops    *opGen
	defs   map[string]transformDef // live transforms by name as written
	paused map[string]bool
	nextID int
	// join: a join program; js its fact and dimensions, shapes the join
	// shapes still to draw (each program goes round all of them).
	join   bool
	js     *joinSchema
	shapes []string
	// fr is the feature stream (features.go); chains the program's
	// chains, level 1 first (chains.go), chainPaused their paused levels
	// (by name as stored, to name as written).
	fr          *rand.Rand
	chains      [][]*chainLevel
	chainPaused map[string]string
	// nr is the nullable-chain stream (chains.go): which chains have a
	// level keyed by columns that may be NULL, and their levels;
	// chainsDrawn the chains as the feature stream drew them (chains
	// where nr landed differ).
	nr          *rand.Rand
	chainsDrawn [][]*chainLevel
	// cr is the capture stream (capture.go): the mode a program starts in,
	// its switches and their writers; mode the capture mode at the point
	// of the body being drawn.
	cr   *rand.Rand
	mode string
	// pr is the poison stream (poison.go); pz the program's poison, nil
	// for none.
	pr *rand.Rand
	pz *poisonPlan
	// dr is the DDL stream (ddl.go); dd what it changed.
	dr *rand.Rand
	// lr is the level stream (features.go): which derived tables
	// aggregate, and what they aggregate (ADR 0018).
	lr *rand.Rand
	dd *ddlState
	// xr is the nested stream (nested.go): which definitions are replaced
	// by one joining a nested derived table (nestedPct in a hundred), and
	// what it draws; nested the definitions it drew.
	xr        *rand.Rand
	nestedPct int
	nested    []nestedDef
	// sr is the shapes stream (sqlshapes.go): which definitions (and
	// chains' last levels) are replaced by one using subqueries in
	// expressions, set operations, windows, top-K or WITH (shapesPct in a
	// hundred), and what it draws; shapes the definitions it drew.
	sr        *rand.Rand
	shapesPct int
	shapeDefs []shapeDef
	// gr is the function stream (srfshapes.go, collection.go): whether
	// the program has a collection table (coll), which definitions (and
	// chains' last levels) are replaced by one with functions in FROM,
	// VALUES lists or ALL set operations (srfPct in a hundred; -1 until
	// the program resolves the default, 0 for none), the writes of the
	// collection table; srfDefs the definitions it drew.
	gr      *rand.Rand
	coll    *collection
	srfPct  int
	srfDefs []shapeDef
	// hr is the graph stream (graph.go, recursive.go): whether the
	// program has the graph tables (graph), which definitions are
	// replaced by recursion or grouping by a key or over settings
	// (graphPct in a hundred, resolved like srfPct), the graph's writes;
	// graphDefs the definitions it drew.
	hr        *rand.Rand
	graph     *graph
	graphPct  int
	graphDefs []shapeDef
	// as is the ALTER and backfill stream (alterops.go), nil for a
	// program its gate leaves out.
	as *alterStream
	// smallBatch: the runner re-derives a few keys per batch (a window
	// over thousands of bulk rows would re-derive them per batch).
	smallBatch bool
}

func (g *gen) pct(p int) bool { return g.r.IntN(100) < p }

func (g *gen) program(seed int64) *Program {
	r := g.r
	p := &Program{Seed: seed, Profile: g.prof.Name}
	p.Config.Confirm = g.prof.Confirm
	if p.Config.Confirm == "" {
		p.Config.Confirm = []string{"local", "applied"}[r.IntN(2)]
	}
	p.Config.Runner = g.prof.Runner
	if p.Config.Runner == "" {
		p.Config.Runner = []string{RunnerInProc, RunnerCLI}[r.IntN(2)]
	}
	if p.Config.Runner == RunnerInProc && g.pct(g.prof.SmallBatch) {
		p.Config.Batch = 1 + r.IntN(4)
	}
	g.smallBatch = p.Config.Batch > 0
	p.Config.Stream = g.pct(g.prof.Stream)
	p.Config.Capture = g.drawCapture()
	if p.Config.Capture == CaptureTrigger {
		// Nothing decodes WAL in trigger mode (drawn all the same, so that
		// the rest of the program is what the seed gives in either mode).
		p.Config.Stream = false
	}

	// Schema.
	nt := 2 + r.IntN(3)
	if g.join {
		nt = 1 + r.IntN(2)
	}
	usedNames := map[string]bool{}
	var create []string
	for i := 0; i < nt; i++ {
		name := fmt.Sprintf("s%d", i)
		if r.IntN(10) == 0 {
			if w := weirdTableNames[r.IntN(len(weirdTableNames))]; !usedNames[w] {
				name = w
			}
		}
		usedNames[name] = true
		t := newTable(r, name)
		g.tables = append(g.tables, t)
		create = append(create, t.createSQL())
	}
	if g.join {
		g.js = newJoinSchema(r)
		g.tables = append(g.tables, g.js.tables()...)
		create = append(create, g.js.ddl(r)...)
	}
	if g.prof.Specials > 0 && rand.New(rand.NewPCG(uint64(seed), specialsSalt)).IntN(100) < g.prof.Specials {
		addSpecials(g.tables)
	}
	g.ops = &opGen{r: r, tables: g.tables, bulk: map[*table]bool{}, js: g.js, bulkDiv: 1}
	if g.join && p.Config.Batch > 0 {
		// A join re-derives a batch in a dozen statements (some 6 ms):
		// tiny batches are twice as large and get a tenth of the bulk rows,
		// or bursts take minutes.
		p.Config.Batch *= 2
		g.ops.bulkDiv = 10
	}
	p.Steps = append(p.Steps, Step{Kind: StepSQL, Stmts: create})
	p.Steps = append(p.Steps, g.drawCollection()...)
	p.Steps = append(p.Steps, g.drawGraph()...)

	// Data that exists before the transforms (their build reads it).
	if g.join {
		// Every dimension row, and facts referencing each many times.
		fill := Step{Kind: StepTxn}
		for _, d := range g.js.dims {
			fill.Stmts = append(fill.Stmts, g.ops.fill(d))
		}
		g.js.dense = true
		fill.Stmts = append(fill.Stmts, g.ops.bulkRows(g.js.fact, 1000, 30+r.IntN(200)))
		g.js.dense = false
		p.Steps = append(p.Steps, fill)
	}
	for i := r.IntN(4); i > 0; i-- {
		p.Steps = append(p.Steps, g.ops.txn())
	}

	// Definitions.
	startFirst := r.IntN(2) == 0
	if startFirst {
		p.Steps = append(p.Steps, Step{Kind: StepStart})
	}
	var script []string
	for i := 1 + r.IntN(4); i > 0; i-- {
		script = append(script, g.newDef("").create())
		if r.IntN(4) == 0 {
			p.Steps = append(p.Steps, Step{Kind: StepApply, Stmts: script})
			script = nil
		}
	}
	if len(script) > 0 {
		p.Steps = append(p.Steps, Step{Kind: StepApply, Stmts: script})
	}
	if !startFirst {
		p.Steps = append(p.Steps, Step{Kind: StepStart})
	}
	if g.drawPoison() {
		p.Steps = append(p.Steps, g.poisonSetup()...)
	}

	// Body.
	n := g.prof.MinEvents + r.IntN(g.prof.MaxEvents-g.prof.MinEvents+1)
	chainAt, chainDepth := g.chainPlan(n)
	switchAt := g.switchPlan(n)
	for i := 0; i < n; i++ {
		p.Steps = append(p.Steps, g.event()...)
		for _, at := range switchAt {
			if at == i {
				p.Steps = append(p.Steps, g.switchSteps()...)
			}
		}
		for c, at := range chainAt {
			if at == i {
				p.Steps = append(p.Steps, g.chainSteps(len(g.chains), chainDepth[c])...)
			}
		}
		if len(g.chains) > 0 && g.fr.IntN(100) < featChainEventPct {
			p.Steps = append(p.Steps, g.chainEvent()...)
		}
		if g.pz != nil && g.pr.IntN(100) < poisonEventPct {
			p.Steps = append(p.Steps, g.poisonEvent()...)
		}
		if g.prof.DDL > 0 && g.dr.IntN(100) < g.prof.DDL {
			p.Steps = append(p.Steps, g.ddlEvent()...)
		}
		if g.coll != nil && g.gr.IntN(100) < collEventPct {
			p.Steps = append(p.Steps, g.collectionEvent()...)
		}
		if g.graph != nil && g.hr.IntN(100) < graphEventPct {
			p.Steps = append(p.Steps, g.graphEvent()...)
		}
		if g.as != nil && g.as.r.IntN(100) < alterEventPct {
			at := len(p.Steps)
			p.Steps = append(p.Steps, g.alterEvent()...)
			g.as.spans = append(g.as.spans, [2]int{at, len(p.Steps)})
		}
	}
	for _, name := range g.sortedPaused() {
		if r.IntN(5) > 0 {
			p.Steps = append(p.Steps, Step{Kind: StepApply, Stmts: []string{"RESUME TRANSFORM " + name}})
			delete(g.paused, name)
		}
	}
	for _, name := range g.sortedChainPaused() {
		if g.fr.IntN(5) > 0 {
			p.Steps = append(p.Steps, Step{Kind: StepApply, Stmts: []string{"RESUME TRANSFORM " + name}})
			delete(g.chainPaused, unquote(name))
		}
	}
	p.Steps = append(p.Steps, Step{Kind: StepCheck})
	if g.pz != nil {
		avoidTruncate(p.Steps, g.pz.t)
	}
	return p
}

func (g *gen) sortedPaused() []string {
	var out []string
	for n := range g.paused {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (g *gen) sortedDefs() []string {
	var out []string
	for n := range g.defs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// newDef draws a definition; name "" picks a fresh name.
func (g *gen) newDef(name string) transformDef {
	if name == "" {
		name = fmt.Sprintf("t%d", g.nextID)
		if g.r.IntN(12) == 0 {
			w := weirdTransformNames[g.r.IntN(len(weirdTransformNames))]
			if _, ok := g.defs[w]; !ok && !g.everUsed(w) {
				name = w
			}
		}
		g.nextID++
	}
	g.as.forget(name)
	if g.join && (g.countJoinDefs() == 0 || g.pct(60)) {
		return g.newJoinDef(name)
	}
	t := g.tables[g.r.IntN(len(g.tables))]
	d := transformDef{name: name, table: t}
	row := false
	if g.r.IntN(100) < 55 {
		d.sql = aggSelect(g.r, g.fr, t)
	} else {
		d.sql = rowSelect(g.r, g.fr, t)
		row = true
	}
	drawn := d.sql
	g.derived(&d)
	d.alterable = row && d.sql == drawn && editableSelect(drawn)
	g.defs[name] = d
	return d
}

// derived now and then (from the feature stream) replaces a drawn
// definition by one over a derived table, now and then (from the nested
// stream, after the others drew) by one joining a nested derived table
// (nested.go), now and then (from the shapes stream, after all of them
// drew; not where the nested stream landed) by one of the SQL shapes
// (sqlshapes.go), now and then (from the function stream; not where the
// nested or shapes stream landed) by one with functions in FROM
// (srfshapes.go), and now and then (from the graph stream, last; not
// where another landed) by recursion or grouping by a key or over
// settings (recursive.go). d keeps its table and join shape as drawn.
func (g *gen) derived(d *transformDef) {
	if g.fr.IntN(100) < featDerivedPct {
		d.sql = g.derivedSelect(g.fr)
	}
	nested := false
	if g.xr.IntN(100) < g.nestedPct {
		nd := g.nestedSelect(g.xr)
		d.sql = nd.sql
		g.nested = append(g.nested, nd)
		nested = true
	}
	shaped := false
	if g.sr.IntN(100) < g.shapesPct {
		sd := g.shapeSelect(g.sr)
		if !nested {
			d.sql = sd.sql
			g.shapeDefs = append(g.shapeDefs, sd)
			shaped = true
		}
	}
	landed := nested || shaped
	if g.gr.IntN(100) < g.srfPct {
		sd := g.srfSelect(g.gr)
		if !landed {
			d.sql = sd.sql
			g.srfDefs = append(g.srfDefs, sd)
			landed = true
		}
	}
	if g.hr.IntN(100) < g.graphPct {
		sd := g.graphSelect(g.hr)
		if !landed {
			d.sql = sd.sql
			g.graphDefs = append(g.graphDefs, sd)
		}
	}
}

// newJoinDef draws a transform over a join, of the next shape of the
// program's round of shapes.
func (g *gen) newJoinDef(name string) transformDef {
	if len(g.shapes) == 0 {
		g.shapes = append([]string(nil), joinShapes...)
		g.r.Shuffle(len(g.shapes), func(i, j int) { g.shapes[i], g.shapes[j] = g.shapes[j], g.shapes[i] })
	}
	shape := g.shapes[0]
	g.shapes = g.shapes[1:]
	d := transformDef{name: name, table: g.js.fact, join: shape}
	if g.r.IntN(100) < 50 {
		d.sql = joinAggSelect(g.r, g.fr, g.js, shape)
	} else {
		d.sql = joinRowSelect(g.r, g.fr, g.js, shape)
	}
	g.derived(&d)
	g.defs[name] = d
	return d
}

func (g *gen) countJoinDefs() int {
	n := 0
	for _, d := range g.defs {
		if d.join != "" {
			n++
		}
	}
	return n
}

// everUsed reports whether a source table has the name: a transform's
// target cannot take it.
func (g *gen) everUsed(name string) bool {
	for _, t := range g.tables {
		if unquote(t.name) == unquote(name) {
			return true
		}
	}
	return false
}

// event draws one body event.
func (g *gen) event() []Step {
	r, pr := g.r, g.prof
	x := r.IntN(100)
	pick := func(p int) bool {
		if x < p {
			return true
		}
		x -= p
		return false
	}
	switch {
	case pick(pr.BurstCrash):
		return g.burstCrash()
	case pick(pr.FlowCrash):
		return g.flowCrash()
	case pick(pr.Kill):
		return []Step{{Kind: StepKill, Arg: r.IntN(400)}}
	case pick(pr.LoseStore):
		return []Step{{Kind: StepLoseStore}}
	case pick(pr.RestartPG):
		return []Step{{Kind: StepRestartPG}}
	case pick(pr.Held):
		s := g.ops.txn()
		s.Kind, s.Arg, s.Rollback = StepHeld, 100+r.IntN(400), false
		// Make sure the held transaction changes something a transform
		// reads: fresh rows that nothing later re-touches.
		if cands := g.bulkTables(); len(cands) > 0 && (r.IntN(4) > 0 || g.mode == CaptureTrigger) {
			s.Stmts = append(s.Stmts, g.freshBulk(cands[r.IntN(len(cands))], 3+r.IntN(20)).Stmts...)
		}
		if g.mode == CaptureTrigger {
			return g.heldTrigger(s)
		}
		return []Step{s}
	case pick(pr.Pause):
		return []Step{g.pauseOrResume()}
	case pick(pr.Redefine):
		return []Step{g.redefine()}
	case pick(pr.Concurrent):
		return []Step{g.concurrent()}
	case pick(pr.Stop):
		out := []Step{{Kind: StepStop}}
		for i := 1 + r.IntN(4); i > 0; i-- {
			out = append(out, g.ops.txn())
		}
		return append(out, Step{Kind: StepStart})
	case pick(pr.Check):
		return []Step{{Kind: StepCheck}}
	}
	return []Step{g.ops.txn()}
}

// bulkTables are tables a burst fills: preferably read by a transform,
// with an integer key to fill from fresh ranges.
func (g *gen) bulkTables() []*table {
	var cands []*table
	for _, n := range g.sortedDefs() {
		if t := g.defs[n].table; t.shiftKey != nil && !t.dim {
			cands = append(cands, t)
		}
	}
	if len(cands) == 0 {
		for _, t := range g.tables {
			if t.shiftKey != nil && !t.dim {
				cands = append(cands, t)
			}
		}
	}
	return cands
}

// freshBulk inserts rows rows into t with keys no other statement uses (from
// 100000 up), so that nothing later re-touches them and hides a loss.
func (g *gen) freshBulk(t *table, rows int) Step {
	rows = max(1, rows/g.ops.bulkDiv)
	start := 100000 + g.ops.fresh
	g.ops.fresh += rows
	return Step{Kind: StepTxn, Stmts: []string{g.ops.bulkRows(t, start, rows)}}
}

// cleanup sometimes removes the rows bursts added, so that later
// statements stay small.
func (g *gen) cleanup(filled []*table) []Step {
	if len(filled) == 0 || g.r.IntN(3) == 0 {
		return nil
	}
	t := filled[g.r.IntN(len(filled))]
	if g.r.IntN(3) == 0 {
		return []Step{{Kind: StepTxn, Stmts: []string{"TRUNCATE " + t.name}}}
	}
	return []Step{{Kind: StepTxn, Stmts: []string{fmt.Sprintf("DELETE FROM %s WHERE %s >= 100000", t.name, t.shiftKey.name)}}}
}

// burstCrash: a burst of bulk transactions, then kill -9 (or losing the
// store) while they are recorded and applied.
func (g *gen) burstCrash() []Step {
	r := g.r
	cands := g.bulkTables()
	var out []Step
	var filled []*table
	for i := 2 + r.IntN(3); i > 0; i-- {
		if len(cands) > 0 {
			t := cands[r.IntN(len(cands))]
			filled = append(filled, t)
			out = append(out, g.freshBulk(t, 200+r.IntN(1500)))
		} else {
			out = append(out, g.ops.txn())
		}
	}
	out = append(out, Step{Kind: StepWait, Arg: r.IntN(200)})
	if g.prof.LoseStore > 0 && r.IntN(3) == 0 {
		out = append(out, Step{Kind: StepLoseStore})
	} else {
		out = append(out, Step{Kind: StepKill, Arg: r.IntN(200)})
	}
	if r.IntN(2) == 0 {
		out = append(out, Step{Kind: StepCheck})
	}
	return append(out, g.cleanup(filled)...)
}

// flowCrash: writer lanes commit fresh rows (and ordinary transactions)
// while a control lane, once the runner has been up for a status interval,
// crashes it right after the slot's confirmed position moves; then a check
// before anything can re-touch (and so heal) what might have been lost.
func (g *gen) flowCrash() []Step {
	r := g.r
	cands := g.bulkTables()
	s := Step{Kind: StepConcurrent}
	var filled []*table
	for i := 1 + r.IntN(2); i > 0; i-- {
		// Writes go on for a few seconds, past the crash, faster than
		// they are applied.
		var lane []Step
		for j := 30 + r.IntN(20); j > 0; j-- {
			if len(cands) > 0 && r.IntN(7) > 0 {
				t := cands[r.IntN(len(cands))]
				filled = append(filled, t)
				lane = append(lane, g.freshBulk(t, 100+r.IntN(200)))
			} else {
				lane = append(lane, g.ops.txn())
			}
		}
		s.Lanes = append(s.Lanes, lane)
	}
	crash := Step{Kind: StepKill, AfterConfirm: true, Arg: r.IntN(100)}
	loseStore := g.prof.LoseStore > 0 && r.IntN(4) > 0
	if loseStore {
		crash = Step{Kind: StepLoseStore, AfterConfirm: true}
	}
	s.Lanes = append(s.Lanes, []Step{{Kind: StepWait, Arg: 1000 + r.IntN(300)}, crash})
	// Usually the appliers are stalled meanwhile (a user's lock on the
	// targets), so a backlog certainly exists when the crash comes.
	if loseStore || r.IntN(3) > 0 {
		s.Lanes = append(s.Lanes, []Step{{Kind: StepStall, Arg: 1500 + r.IntN(2000)}})
	}
	out := []Step{s, {Kind: StepCheck}}
	return append(out, g.cleanup(filled)...)
}

func (g *gen) pauseOrResume() Step {
	if ps := g.sortedPaused(); len(ps) > 0 && g.r.IntN(2) == 0 {
		n := ps[g.r.IntN(len(ps))]
		delete(g.paused, n)
		return Step{Kind: StepApply, Stmts: []string{"RESUME TRANSFORM " + n}}
	}
	ds := g.sortedDefs()
	if len(ds) == 0 {
		return g.ops.txn()
	}
	n := ds[g.r.IntN(len(ds))]
	g.paused[n] = true
	return Step{Kind: StepApply, Stmts: []string{"PAUSE TRANSFORM " + n}}
}

// redefine drops and re-creates a transform (same name, new definition),
// adds a new one, or drops one.
func (g *gen) redefine() Step {
	ds := g.sortedDefs()
	switch x := g.r.IntN(10); {
	case x < 5 && len(ds) > 0:
		n := ds[g.r.IntN(len(ds))]
		delete(g.paused, n)
		return Step{Kind: StepApply, Stmts: []string{"DROP TRANSFORM " + n, g.newDef(n).create()}}
	case x < 8 || len(ds) <= 1:
		return Step{Kind: StepApply, Stmts: []string{g.newDef("").create()}}
	default:
		n := ds[g.r.IntN(len(ds))]
		delete(g.defs, n)
		delete(g.paused, n)
		g.as.forget(n)
		return Step{Kind: StepApply, Stmts: []string{"DROP TRANSFORM IF EXISTS " + n}}
	}
}

// concurrent draws 2–4 writer lanes and, now and then, a control lane
// acting in the middle of the writes.
func (g *gen) concurrent() Step {
	r := g.r
	s := Step{Kind: StepConcurrent}
	for i := 2 + r.IntN(3); i > 0; i-- {
		var lane []Step
		for j := 2 + r.IntN(9); j > 0; j-- {
			lane = append(lane, g.ops.txn())
		}
		s.Lanes = append(s.Lanes, lane)
	}
	if r.IntN(3) > 0 {
		ctl := []Step{{Kind: StepWait, Arg: r.IntN(300)}}
		pr := g.prof
		x := r.IntN(pr.Kill+pr.LoseStore+pr.Pause+pr.Redefine+pr.RestartPG+2) - 2
		switch {
		case x < 0:
			ctl = append(ctl, Step{Kind: StepStall, Arg: 200 + r.IntN(800)})
		case x < pr.Kill:
			ctl = append(ctl, Step{Kind: StepKill, Arg: r.IntN(300)})
		case x < pr.Kill+pr.LoseStore:
			ctl = append(ctl, Step{Kind: StepLoseStore})
		case x < pr.Kill+pr.LoseStore+pr.Pause:
			ctl = append(ctl, g.pauseOrResume())
		case x < pr.Kill+pr.LoseStore+pr.Pause+pr.RestartPG:
			ctl = append(ctl, Step{Kind: StepRestartPG})
		default:
			ctl = append(ctl, g.redefine())
		}
		s.Lanes = append(s.Lanes, ctl)
	}
	return s
}

// opGen draws data changes.
type opGen struct {
	r      *rand.Rand
	tables []*table
	bulk   map[*table]bool // tables that got bulk rows (keys ≥ 1000)
	fresh  int             // next fresh key offset above 100000
	js     *joinSchema     // a join program's fact and dimensions
	// bulkDiv divides the number of bulk rows.
	bulkDiv int
}

func (o *opGen) value(c *column, nullable bool) string {
	if nullable && !c.notNull && o.r.IntN(7) == 0 {
		return "NULL"
	}
	return c.domain[o.r.IntN(len(c.domain))]
}

func (o *opGen) keyVals(t *table) []string {
	out := make([]string, len(t.key))
	for i, k := range t.key {
		out[i] = o.value(k, false)
	}
	return out
}

func keyMatch(t *table, kv []string, qual string) string {
	var parts []string
	for i, k := range t.key {
		parts = append(parts, qual+k.name+" = "+kv[i])
	}
	return strings.Join(parts, " AND ")
}

// txn draws one transaction over one or more tables.
func (o *opGen) txn() Step {
	r := o.r
	var n int
	switch x := r.IntN(100); {
	case x < 40:
		n = 1
	case x < 75:
		n = 2 + r.IntN(3)
	case x < 95:
		n = 5 + r.IntN(8)
	default:
		n = 13 + r.IntN(28)
	}
	s := Step{Kind: StepTxn, Rollback: r.IntN(25) == 0, NoSavepoints: r.IntN(6) == 0}
	if o.js != nil && r.IntN(3) == 0 {
		// A change aimed at the joins, maybe with others on the join tables.
		for len(s.Stmts) < n {
			if r.IntN(3) > 0 {
				s.Stmts = append(s.Stmts, o.joinStmts()...)
			} else {
				jt := o.js.tables()
				s.Stmts = append(s.Stmts, o.stmts(jt[r.IntN(len(jt))])...)
			}
		}
		return s
	}
	// Most transactions touch one or two tables.
	tabs := o.tables
	if r.IntN(3) > 0 {
		t := o.tables[r.IntN(len(o.tables))]
		tabs = []*table{t}
		if r.IntN(3) == 0 {
			tabs = append(tabs, o.tables[r.IntN(len(o.tables))])
		}
	}
	for len(s.Stmts) < n {
		s.Stmts = append(s.Stmts, o.stmts(tabs[r.IntN(len(tabs))])...)
	}
	return s
}

// stmts draws one data change on t (a partial rollback is three).
func (o *opGen) stmts(t *table) []string {
	r := o.r
	e := &exprGen{r: r, t: t}
	nonKey := t.nonKey()
	set := func() string {
		if len(nonKey) == 0 {
			return ""
		}
		var parts []string
		seen := map[*column]bool{}
		for i := 1 + r.IntN(2); i > 0; i-- {
			c := nonKey[r.IntN(len(nonKey))]
			if seen[c] {
				continue
			}
			seen[c] = true
			v := o.value(c, true)
			switch {
			case c.typ.integer() && c.small && r.IntN(3) == 0:
				v = c.name + " + 1"
			case c.typ == tText && r.IntN(4) == 0:
				v = "upper(" + c.name + ")"
			}
			parts = append(parts, c.name+" = "+v)
		}
		return strings.Join(parts, ", ")
	}
	x := r.IntN(100)
	switch {
	case x < 28:
		return []string{o.insert(t, 1)}
	case x < 36:
		return []string{o.insert(t, 2+r.IntN(5))}
	case x < 52:
		if s := set(); s != "" {
			return []string{"UPDATE " + t.name + " SET " + s + " WHERE " + keyMatch(t, o.keyVals(t), "")}
		}
	case x < 59:
		if s := set(); s != "" {
			return []string{"UPDATE " + t.name + " SET " + s + " WHERE " + e.pred(1)}
		}
	case x < 69:
		return []string{o.updateKey(t, set)}
	case x < 72:
		if k := t.shiftKey; k != nil {
			if r.IntN(2) == 0 {
				return []string{fmt.Sprintf("UPDATE %s SET %s = %s + 100 WHERE %s < 100 AND %s", t.name, k.name, k.name, k.name, e.pred(1))}
			}
			return []string{fmt.Sprintf("UPDATE %s SET %s = %s - 100 WHERE %s >= 100 AND NOT EXISTS (SELECT 1 FROM %s AS o WHERE %s)",
				t.name, k.name, k.name, k.name, t.name, sameKeyExcept(t, k, t.name+"."+k.name+" - 100"))}
		}
	case x < 83:
		return []string{"DELETE FROM " + t.name + " WHERE " + keyMatch(t, o.keyVals(t), "")}
	case x < 87:
		return []string{"DELETE FROM " + t.name + " WHERE " + e.pred(1)}
	case x < 88:
		if len(o.tables) > 1 && r.IntN(2) == 0 {
			u := o.tables[r.IntN(len(o.tables))]
			if u != t {
				return []string{"TRUNCATE " + t.name + ", " + u.name}
			}
		}
		return []string{"TRUNCATE " + t.name}
	case x < 90:
		if s := o.bulkInsert(t); s != "" {
			return []string{s}
		}
	case x < 93:
		if o.bulk[t] {
			k := t.shiftKey
			if r.IntN(2) == 0 {
				return []string{fmt.Sprintf("DELETE FROM %s WHERE %s >= 1000 AND %s %% %d = 0", t.name, k.name, k.name, 1+r.IntN(3))}
			}
			if s := set(); s != "" {
				return []string{fmt.Sprintf("UPDATE %s SET %s WHERE %s >= 1000 AND %s %% 3 = %d", t.name, s, k.name, k.name, r.IntN(3))}
			}
		}
	case x < 95:
		inner := o.stmts(t)
		out := append([]string{"SAVEPOINT u"}, inner...)
		return append(out, "ROLLBACK TO SAVEPOINT u")
	}
	return []string{o.insert(t, 1)}
}

// sameKeyExcept matches row o against the outer row of t with key column k
// replaced by the expression newVal.
func sameKeyExcept(t *table, k *column, newVal string) string {
	var parts []string
	for _, c := range t.key {
		if c == k {
			parts = append(parts, "o."+c.name+" = "+newVal)
		} else {
			parts = append(parts, "o."+c.name+" = "+t.name+"."+c.name)
		}
	}
	return strings.Join(parts, " AND ")
}

func (o *opGen) insert(t *table, rows int) string {
	r := o.r
	var names []string
	for _, c := range t.cols {
		names = append(names, c.name)
	}
	seen := map[string]bool{}
	var tuples []string
	for i := 0; i < rows; i++ {
		var vals []string
		kv := map[*column]string{}
		kvs := o.keyVals(t)
		for j, k := range t.key {
			kv[k] = kvs[j]
		}
		ks := strings.Join(kvs, ",")
		if seen[ks] {
			continue
		}
		seen[ks] = true
		for _, c := range t.cols {
			if v, ok := kv[c]; ok {
				vals = append(vals, v)
			} else {
				vals = append(vals, o.value(c, true))
			}
		}
		tuples = append(tuples, "("+strings.Join(vals, ", ")+")")
	}
	s := "INSERT INTO " + t.name + " (" + strings.Join(names, ", ") + ") VALUES " + strings.Join(tuples, ", ")
	var keys []string
	for _, k := range t.key {
		keys = append(keys, k.name)
	}
	nonKey := t.nonKey()
	switch x := r.IntN(10); {
	case x < 2:
	case x < 5 || len(nonKey) == 0:
		s += " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO NOTHING"
	default:
		var sets []string
		for _, c := range nonKey {
			if r.IntN(3) > 0 {
				sets = append(sets, c.name+" = EXCLUDED."+c.name)
			}
		}
		if len(sets) == 0 {
			sets = append(sets, nonKey[0].name+" = EXCLUDED."+nonKey[0].name)
		}
		s += " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET " + strings.Join(sets, ", ")
	}
	return s
}

// updateKey changes one key column of one row (and maybe values too),
// usually guarded so that it does not collide with an existing row.
func (o *opGen) updateKey(t *table, set func() string) string {
	r := o.r
	k := t.key[r.IntN(len(t.key))]
	nv := o.value(k, false)
	s := "UPDATE " + t.name + " SET " + k.name + " = " + nv
	if r.IntN(3) == 0 {
		if v := set(); v != "" {
			s += ", " + v
		}
	}
	s += " WHERE " + keyMatch(t, o.keyVals(t), "")
	if r.IntN(4) > 0 {
		s += " AND NOT EXISTS (SELECT 1 FROM " + t.name + " AS o WHERE " + sameKeyExcept(t, k, nv) + ")"
	}
	return s
}

// bulkInsert adds many rows with keys from 1000 up in one statement.
func (o *opGen) bulkInsert(t *table) string {
	if t.shiftKey == nil || t.dim {
		return ""
	}
	n := 50 + o.r.IntN(1000)
	if o.r.IntN(10) == 0 {
		n = 3000
	}
	return o.bulkRows(t, 1000+o.r.IntN(3)*500, max(1, n/o.bulkDiv))
}

// bulkRows inserts n rows with integer keys from start, the other columns
// cycling through their domains.
func (o *opGen) bulkRows(t *table, start, n int) string {
	k := t.shiftKey
	var names, exprs []string
	for _, c := range t.cols {
		names = append(names, c.name)
		if c == k {
			exprs = append(exprs, "g")
			continue
		}
		var arr []string
		for _, v := range c.domain {
			if v == longExternal {
				continue
			}
			arr = append(arr, "("+v+")::"+c.sqlType)
		}
		x := fmt.Sprintf("(ARRAY[%s])[1 + g %% %d]", strings.Join(arr, ", "), len(arr))
		if !c.notNull && !t.isKey(c) {
			x = fmt.Sprintf("CASE WHEN g %% 7 = 0 THEN NULL ELSE %s END", x)
		}
		if o.js != nil && t == o.js.fact {
			x = o.js.bulkExpr(c, x, arr)
		}
		exprs = append(exprs, x)
	}
	o.bulk[t] = true
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM generate_series(%d, %d) g ON CONFLICT DO NOTHING",
		t.name, strings.Join(names, ", "), strings.Join(exprs, ", "), start, start+n-1)
}
