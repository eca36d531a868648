package generative

import (
	"strings"
	"testing"
)

// TestSRFAccepted (TRELLIS_GEN_SRF_CHECK=N, off by default): the function
// stream's definitions of N seeds per profile, every definition one, are
// accepted by Apply over their program's schema and rows.
func TestSRFAccepted(t *testing.T) {
	n := envInt("TRELLIS_GEN_SRF_CHECK", 0)
	if n == 0 {
		t.Skip("set TRELLIS_GEN_SRF_CHECK to apply the function shapes of that many seeds per profile")
	}
	applyDrawn(t, n, func(g *gen) { g.srfPct = 100 }, func(g *gen) []shapeDef { return g.srfDefs })
}

// srfFeatureNames are what the function stream draws (srfshapes.go) that
// TestSRFPrograms requires across seeds.
var srfFeatureNames = []string{
	"unnest", "unnest bare", "unnest two arrays", "WITH ORDINALITY", "ROWS FROM", "jsonb_array_elements",
	"jsonb_array_elements_text", "jsonb_each", "jsonb_each_text", "jsonb_to_recordset", "generate_series over columns",
	"unnest of an array of columns", "LATERAL VALUES", "regexp_split_to_table", "constant generate_series", "VALUES",
	"LEFT JOIN VALUES", "CTE holding VALUES", "CROSS JOIN function", "LEFT JOIN LATERAL", "jsonb output",
	"rows of a function", "DISTINCT over a function", "aggregate over a function", "function then a join",
	"function on the NULL-extended side", "function joined to a table", "derived table holding a function",
	"aggregate of a function in FROM", "CTE holding a function", "nested function", "nested",
	"INTERSECT ALL", "EXCEPT ALL", "three branches", "nested set operation", "function in a set operation",
	"ALL set operation in FROM", "ALL set operation in a CTE", "aggregate over an ALL set operation",
	"window over a function", "top-K over a function", "derived function joined", "aggregate over a derived function",
	"WITH twice", "EXISTS", "IN", "in a chain", "function joined to a level", "function over a derived table",
}

// TestSRFPrograms: across seeds, the function stream draws every shape;
// no definition names a hidden column; a quarter of the programs or so
// have a collection table, and those write it.
func TestSRFPrograms(t *testing.T) {
	all := map[string]bool{}
	missing := func() (out []string) {
		for _, f := range srfFeatureNames {
			if !all[f] {
				out = append(out, f)
			}
		}
		return out
	}
	programs, colls, writes := 0, 0, 0
	const seeds = 1000
	for seed := int64(0); seed < seeds && (seed < 200 || len(missing()) > 0); seed++ {
		for _, prof := range Profiles() {
			p, g := generate(seed, prof)
			programs++
			if g.coll != nil {
				colls++
				if strings.Contains(p.Format(), "UPDATE "+g.coll.t.name+" SET") {
					writes++
				}
			}
			for _, d := range g.srfDefs {
				for f := range d.feats {
					all[f] = true
				}
				if strings.Contains(d.sql, "__") {
					t.Errorf("%s/seed=%d: %s names a hidden column", prof.Name, seed, d.sql)
				}
			}
		}
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("the programs of %d seeds draw no function shape with %s", seeds, strings.Join(m, ", "))
	}
	if colls < programs/6 || colls > programs/3 {
		t.Errorf("%d of %d programs have a collection table, want about a quarter", colls, programs)
	}
	if writes < colls*3/4 {
		t.Errorf("%d of %d programs with a collection table update it", writes, colls)
	}
}

// TestSRFDrawnApart: the function stream only replaces the definitions it
// lands on and adds the collection table's steps.
func TestSRFDrawnApart(t *testing.T) {
	drawnApart(t, "function", func(g *gen) { g.srfPct = 0 }, func(g *gen) (int, bool) { return len(g.srfDefs), g.coll != nil })
}

// drawnApart checks a stream that off turns off: every line of the
// program drawn without it is, in order, a line of the program drawn with
// it or a definition it replaced (at most the number drawn says), and
// lines are added only where it says it added tables. (Profile "ddl" is
// left out: which column a retype picks follows the definitions that read
// it.)
func drawnApart(t *testing.T, stream string, off func(*gen), drawn func(*gen) (defs int, tables bool)) {
	landed, added := 0, 0
	for _, prof := range Profiles() {
		if prof.Name == "ddl" {
			continue
		}
		for seed := int64(0); seed < 30; seed++ {
			with := newGenApart(seed, prof)
			p := with.program(seed)
			without := newGenApart(seed, prof)
			off(without)
			q := without.program(seed)
			defs, tables := drawn(with)
			a, b := body(p), body(q)
			differ, i := 0, 0
			for j := 0; j < len(b); j++ {
				for ; i < len(a) && a[i] != b[j]; i++ {
					_, _, sel := splitDefinition(strings.TrimSpace(a[i]))
					_, _, was := splitDefinition(strings.TrimSpace(b[j]))
					if sel != "" && was != "" {
						differ++
						break
					}
					if !tables {
						t.Fatalf("%s/seed=%d: line %d added without the %s stream's tables: %s", prof.Name, seed, i, stream, a[i])
					}
					added++
				}
				if i == len(a) {
					t.Fatalf("%s/seed=%d: line %d of the program without the %s stream is missing: %s", prof.Name, seed, j, stream, b[j])
				}
				i++
			}
			if differ > defs {
				t.Errorf("%s/seed=%d: %d definitions differ, %d drawn by the %s stream", prof.Name, seed, differ, defs, stream)
			}
			landed += defs
		}
	}
	if landed == 0 || added == 0 {
		t.Errorf("the %s stream drew %d definitions and added %d lines", stream, landed, added)
	}
}

// body is p's lines without its header comments (which count its ops).
func body(p *Program) []string {
	var out []string
	for _, l := range strings.Split(p.Format(), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
