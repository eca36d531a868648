package generative

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DDL steps (issue 10's DDL drift, ADR 0013 and docs/architecture.md
// §3.14): schema changes on a source while the runner runs. A lossless
// change (a column nobody reads added, or dropped again) must pause
// nothing; a read column retyped int → bigint may pause the transforms
// reading it with capture_failure.kind = capture (never a halt), and a
// RESUME of each re-types its stored columns and rebuilds it. Drawn from a
// stream of their own (ddlSalt), so programs without DDL are what their
// seeds gave before; only profile "ddl" draws them.

const (
	ddlSalt = 0x64646c31
	// ddlEventPct is the chance per body event of a DDL step.
	ddlEventPct = 15
	// ddlSettle covers a drift check of the runner (every 2 s) and the
	// pause it makes.
	ddlSettle = 3 * time.Second
)

// DDL step modes.
const (
	ddlLossless = "lossless"
	ddlRetype   = "retype"
)

// ddlState is what the generator knows of the program's DDL: the columns
// it added and may drop again.
type ddlState struct {
	added map[*table][]string
	n     int
}

// ddlEvent draws one DDL step on one of the program's plain tables.
func (g *gen) ddlEvent() []Step {
	if g.dd == nil {
		g.dd = &ddlState{added: map[*table][]string{}}
	}
	var plain []*table
	for _, t := range g.tables {
		if g.js == nil || !slices.Contains(g.js.tables(), t) {
			plain = append(plain, t)
		}
	}
	if len(plain) == 0 {
		return nil
	}
	t := plain[g.dr.IntN(len(plain))]
	if g.dr.IntN(2) == 0 {
		// An int column, one a transform reads as itself when there is
		// one: the retype must then reach its stored columns.
		var ints, read []*column
		for _, tt := range plain {
			for _, c := range tt.nonKey() {
				if c.typ != tInt {
					continue
				}
				if tt == t {
					ints = append(ints, c)
				}
				for _, n := range g.sortedDefs() {
					if d := g.defs[n]; d.table == tt && strings.Contains(d.sql, c.name) && !strings.Contains(d.sql, c.name+"::") {
						read = append(read, c)
						t = tt
						break
					}
				}
			}
		}
		if len(read) > 0 {
			ints = read[len(read)-1:]
		}
		if len(ints) > 0 {
			c := ints[g.dr.IntN(len(ints))]
			c.typ, c.sqlType = tBigint, "bigint"
			return []Step{{Kind: StepDDL, Mode: ddlRetype, Stmts: []string{fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE bigint", t.name, c.name)}}}
		}
	}
	if added := g.dd.added[t]; len(added) > 0 && g.dr.IntN(2) == 0 {
		col := added[len(added)-1]
		g.dd.added[t] = added[:len(added)-1]
		return []Step{{Kind: StepDDL, Mode: ddlLossless, Stmts: []string{fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s", t.name, col)}}}
	}
	g.dd.n++
	col := fmt.Sprintf("ddl_extra_%d", g.dd.n)
	g.dd.added[t] = append(g.dd.added[t], col)
	return []Step{{Kind: StepDDL, Mode: ddlLossless, Stmts: []string{fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s int DEFAULT %d", t.name, col, g.dr.IntN(9))}}}
}

// ddl runs a DDL step with the runner running, gives it a drift check,
// and checks what paused: nothing after a lossless change; after a
// retype, only pauses of kind capture, each of which is resumed (the
// RESUME re-types the stored columns; the next check compares them).
func (r *run) ddl(ctx context.Context, path string, s Step) *Failure {
	r.sup.ensureRunning()
	for _, st := range s.Stmts {
		conn, err := r.ctl.get(ctx)
		if err != nil {
			return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
		}
		r.logf("step %s: ddl (%s): %s", path, s.Mode, st)
		if _, err := conn.Exec(ctx, st); err != nil {
			return &Failure{Kind: "setup", Step: path, Msg: fmt.Sprintf("%s: %v", st, err)}
		}
	}
	time.Sleep(ddlSettle)
	sts, err := r.tr.Status(ctx)
	if err != nil {
		return &Failure{Kind: "setup", Step: path, Msg: err.Error()}
	}
	r.mu.Lock()
	r.retyped = r.retyped || s.Mode == ddlRetype
	r.mu.Unlock()
	resumed := map[string]bool{}
	for _, st := range sts {
		f := st.CaptureFailure
		if st.State != "paused" || f == nil || f.Kind != "capture" && f.Kind != "halt" {
			continue
		}
		if s.Mode == ddlLossless || f.Kind == "halt" {
			return &Failure{Kind: "diverged", Step: path, Msg: fmt.Sprintf("%s (%s) paused %s: %s: %s", strings.Join(s.Stmts, "; "), s.Mode, st.Name, f.Kind, f.Error)}
		}
		name := resumeName(st) // a level resumes through its owner
		if resumed[name] {
			continue
		}
		resumed[name] = true
		r.logf("step %s: resume %s after the retype (%s)", path, name, f.Error)
		if _, err := r.tr.Apply(ctx, "RESUME TRANSFORM "+pgx.Identifier{name}.Sanitize()); err != nil {
			return &Failure{Kind: "diverged", Step: path, Msg: fmt.Sprintf("RESUME %s after the retype: %v", name, err)}
		}
	}
	return nil
}
