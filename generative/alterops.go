package generative

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/engine"
)

// alterops.go owns the steps that rebuild a transform in place while the
// runner runs (issue 27): ALTER TRANSFORM (ADR 0041: computed columns
// added, dropped or re-expressed, then a column build) and REQUEST
// BACKFILL OF a source table (ADR 0040: every transform reading it
// re-derives all of its keys). Both are drawn from a stream of their own
// (alterSalt), gated per program, so a program the gate leaves out is
// what its seed drew before these steps existed, the fast lane's fixed
// cases among them (TestFastLaneAlterDraws). Only profiles that draw kills
// or lifecycle events draw them, and a kill of the runner (or loss of its
// store) follows some of them, so that it lands in the middle of the
// column build or the rebuild.

const (
	// alterSalt seeds the stream; chosen so that no fixed case of the
	// fast lane passes the gate (each was chosen to catch a planted bug
	// with the program it draws).
	alterSalt = 0x616c74c1
	// alterProgramPct is the chance an eligible program draws these steps
	// at all, alterEventPct the chance per body event of one of them.
	alterProgramPct = 30
	alterEventPct   = 6
	// alterFresh is where the keys of the stream's bulk rows start: above
	// the main stream's fresh keys, so that neither moves the other's.
	alterFresh = 500000
	// alterLiveWait bounds how long an ALTER waits for its transform to be
	// live (a build or an earlier column build still running) before it
	// is tried anyway; a refusal then is a note.
	alterLiveWait = 30 * time.Second
)

// alterPctEnv is TRELLIS_GEN_ALTER_PCT (0–100), the chance an eligible
// program draws the stream's steps (a soak aimed at them); -1 for the
// default, alterProgramPct.
func alterPctEnv() int {
	if n, err := strconv.Atoi(os.Getenv("TRELLIS_GEN_ALTER_PCT")); err == nil && n >= 0 && n <= 100 {
		return n
	}
	return -1
}

// alterEligible: the profile draws kills or lifecycle events.
func alterEligible(p Profile) bool {
	return p.Kill+p.LoseStore+p.BurstCrash+p.FlowCrash+p.Pause+p.Redefine+p.Stop > 0
}

// alterStream is the stream's generator: its own random source, an
// opGen of its own for the writers around a step (so that the main
// stream's opGen draws what it drew), and the columns each transform
// got from it.
type alterStream struct {
	r     *rand.Rand
	ops   *opGen
	added map[string][]addedCol // by transform name as written
	n     int                   // columns added so far (their names)
	fresh int                   // next fresh key offset above alterFresh
	// spans are where the program's steps from the stream are, [from,
	// to) in its top-level steps (TestAlterDrawnApart).
	spans [][2]int
}

// addedCol is a column an ALTER added: its name ends in its type's
// letter (t text, n numeric, b boolean), so that an ALTER of it keeps
// the type whatever shrinking removed before.
type addedCol struct {
	name string
	typ  byte
}

// newAlterStream passes seed's program through the gate; nil when it
// draws none of these steps.
func newAlterStream(seed int64, prof Profile) *alterStream {
	r := rand.New(rand.NewPCG(uint64(seed), alterSalt))
	pct := alterPctEnv()
	if pct < 0 {
		pct = alterProgramPct
	}
	if !alterEligible(prof) || r.IntN(100) >= pct {
		return nil
	}
	return &alterStream{r: r, added: map[string][]addedCol{}}
}

// forget drops what the stream added to a transform the main stream
// redefined or dropped.
func (a *alterStream) forget(name string) {
	if a != nil {
		delete(a.added, name)
	}
}

// editableSelect reports whether ALTER TRANSFORM accepts a column edit of a
// definition as drawn: a single-table row transform listing its items
// (not *, not DISTINCT, whose items decide its rows), no feature stream
// having replaced it.
func editableSelect(sql string) bool {
	return strings.HasPrefix(sql, "SELECT ") && !strings.HasPrefix(sql, "SELECT DISTINCT") && !strings.HasPrefix(sql, "SELECT *")
}

// alterEvent draws an ALTER TRANSFORM or a REQUEST BACKFILL, alone or in
// a control lane while writers commit, a kill of the runner right after
// it half the time, and a check now and then.
func (g *gen) alterEvent() []Step {
	a := g.as
	if a.ops == nil {
		// A join schema of its own: the re-inserts of dimension rows the
		// writers delete are theirs to draw.
		var js *joinSchema
		if g.js != nil {
			c := *g.js
			c.reinsert = nil
			js = &c
		}
		a.ops = &opGen{r: a.r, tables: g.tables, bulk: map[*table]bool{}, js: js, bulkDiv: g.ops.bulkDiv}
	}
	r := a.r
	var out []Step
	step, t := g.alterStep()
	if step.Kind == "" {
		return nil
	}
	// Fresh rows first now and then, so that the build has chunks to walk
	// when the kill comes.
	if t != nil && t.shiftKey != nil && !t.dim && r.IntN(3) == 0 {
		rows := max(1, (300+r.IntN(1500))/g.ops.bulkDiv)
		out = append(out, Step{Kind: StepTxn, Stmts: []string{a.ops.bulkRows(t, alterFresh+a.fresh, rows)}})
		a.fresh += rows
	}
	ctl := []Step{step}
	if r.IntN(2) == 0 {
		ctl = append(ctl, Step{Kind: StepWait, Arg: r.IntN(300)}, g.crash(r, 300))
	}
	if r.IntN(2) == 0 {
		out = append(out, ctl...)
	} else {
		// Writers commit across the statement, the build and the kill:
		// their changes must be derived with the new expressions.
		s := Step{Kind: StepConcurrent}
		for i := 1 + r.IntN(2); i > 0; i-- {
			var lane []Step
			for j := 3 + r.IntN(8); j > 0; j-- {
				lane = append(lane, a.ops.txn())
			}
			s.Lanes = append(s.Lanes, lane)
		}
		s.Lanes = append(s.Lanes, append([]Step{{Kind: StepWait, Arg: r.IntN(400)}}, ctl...))
		out = append(out, s)
	}
	if r.IntN(3) == 0 {
		out = append(out, Step{Kind: StepCheck})
	}
	return out
}

// alterStep draws the statement: an ALTER TRANSFORM of a live transform
// it accepts (two times in three when there is one), else a REQUEST
// BACKFILL of a table a transform reads; and the table it rebuilds.
func (g *gen) alterStep() (Step, *table) {
	a := g.as
	var alt, read []string
	for _, n := range g.sortedDefs() {
		if g.paused[n] {
			continue
		}
		d := g.defs[n]
		// A definition a feature stream replaced may no longer read the
		// table it was drawn over.
		if strings.Contains(d.sql, d.table.name) {
			read = append(read, n)
		}
		if d.alterable {
			alt = append(alt, n)
		}
	}
	if len(alt) > 0 && a.r.IntN(3) > 0 {
		n := alt[a.r.IntN(len(alt))]
		return Step{Kind: StepAlter, Stmts: []string{g.alterStmt(n)}}, g.defs[n].table
	}
	if len(read) == 0 {
		return Step{}, nil
	}
	t := g.defs[read[a.r.IntN(len(read))]].table
	return Step{Kind: StepBackfill, Stmts: []string{"REQUEST BACKFILL OF " + t.name}}, t
}

// alterStmt draws one or two clauses: a column added (computed from the
// transform's source, cast to the type its name says), one the stream
// added dropped, or re-expressed with the same type.
func (g *gen) alterStmt(name string) string {
	a := g.as
	r := a.r
	d := g.defs[name]
	e := &exprGen{r: r, t: d.table}
	expr := func(typ byte) string {
		switch typ {
		case 't':
			return "(" + e.textExpr() + ")::text"
		case 'b':
			return "(" + e.boolExpr() + ")::boolean"
		}
		return "(" + e.numExpr() + ")::numeric"
	}
	var clauses []string
	touched := map[string]bool{}
	for i := 1 + r.IntN(4)/3; i > 0; i-- {
		added := a.added[name]
		x := r.IntN(3)
		if len(added) == 0 || x == 0 {
			typ := "tnb"[r.IntN(3)]
			a.n++
			c := addedCol{name: fmt.Sprintf("alt%d_%c", a.n, typ), typ: typ}
			a.added[name] = append(added, c)
			touched[c.name] = true
			clauses = append(clauses, "ADD "+c.name+" AS "+expr(typ))
			continue
		}
		k := r.IntN(len(added))
		c := added[k]
		if touched[c.name] {
			continue
		}
		touched[c.name] = true
		if x == 1 {
			a.added[name] = append(added[:k:k], added[k+1:]...)
			clauses = append(clauses, "DROP "+c.name)
		} else {
			clauses = append(clauses, "ALTER "+c.name+" AS "+expr(c.typ))
		}
	}
	return "ALTER TRANSFORM " + name + " " + strings.Join(clauses, ", ")
}

// splitAlter splits an ALTER TRANSFORM statement into its head (through
// the transform's name) and its clauses; ok is false for anything else.
func splitAlter(st string) (head string, clauses []string, ok bool) {
	rest, found := strings.CutPrefix(st, "ALTER TRANSFORM ")
	if !found {
		return "", nil, false
	}
	end := strings.IndexByte(rest, ' ')
	if strings.HasPrefix(rest, `"`) {
		q := strings.IndexByte(rest[1:], '"')
		if q < 0 {
			return "", nil, false
		}
		end = q + 2
	}
	if end < 0 || end >= len(rest) {
		return "", nil, false
	}
	head = st[:len("ALTER TRANSFORM ")+end]
	for _, c := range splitTopLevel(rest[end:], ',') {
		clauses = append(clauses, strings.TrimSpace(c))
	}
	return head, clauses, true
}

// rebuild runs an ALTER TRANSFORM or REQUEST BACKFILL step. An ALTER
// first waits (a while) for its transform to be live, since it edits
// only a live transform and a build may still run, and once accepted
// takes the edited definition as the transform's SELECT for the oracle
// (the clauses' text lands in the stored definition; the target is then
// compared with it, and with the plan's query). A refusal naming
// something that does not exist or a state that conflicts (a transform
// or column shrinking removed, a transform paused or still building) is
// a note; any other refusal is a failure.
func (r *run) rebuild(ctx context.Context, path string, s Step) *Failure {
	for _, st := range s.Stmts {
		name := ""
		if s.Kind == StepAlter {
			sts, err := engine.ParseStatements(st)
			if err != nil || len(sts) != 1 || sts[0].Kind != engine.AlterTransform {
				return &Failure{Kind: "setup", Step: path, Msg: fmt.Sprintf("not an ALTER TRANSFORM: %s (%v)", st, err)}
			}
			name = sts[0].Name
			r.awaitLive(ctx, name)
		}
		r.logf("step %s: %s %s", path, s.Kind, oneLine(st, 200))
		if err := r.applyRetry(ctx, st); err != nil {
			switch trellis.CodeOf(err) {
			case trellis.CodeNotFound, trellis.CodeConflict:
				r.note("step %s: %v", path, err)
				continue
			}
			return &Failure{Kind: "rejected", Step: path, Msg: fmt.Sprintf("%s: %v", st, err)}
		}
		r.mu.Lock()
		r.stats.Rebuilds++
		r.mu.Unlock()
		if name == "" {
			continue
		}
		ds, err := r.tr.Definitions(ctx, name)
		if err != nil || len(ds) != 1 {
			return &Failure{Kind: "setup", Step: path, Msg: fmt.Sprintf("definition of %s after %s: %v (%d)", name, st, err, len(ds))}
		}
		// CREATE TRANSFORM "schema"."name" AS sel (no name the program
		// writes holds " AS ").
		_, sel, found := strings.Cut(ds[0].SQL, " AS ")
		if !found || !strings.HasPrefix(ds[0].SQL, "CREATE TRANSFORM ") {
			return &Failure{Kind: "setup", Step: path, Msg: fmt.Sprintf("definition of %s after %s: not a CREATE TRANSFORM: %s", name, st, ds[0].SQL)}
		}
		r.logf("step %s: %s is now %s", path, name, oneLine(sel, 300))
		r.mu.Lock()
		r.defs[name] = sel
		r.mu.Unlock()
	}
	return nil
}

// awaitLive waits at most alterLiveWait until transform name is live, or
// paused or gone (which no wait changes).
func (r *run) awaitLive(ctx context.Context, name string) {
	deadline := time.Now().Add(alterLiveWait)
	for time.Now().Before(deadline) {
		sts, err := r.tr.Status(ctx, name)
		if err != nil || len(sts) != 1 {
			return
		}
		switch sts[0].State {
		case "live", "paused", "quarantined":
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
