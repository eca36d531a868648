package generative

import (
	"strings"
	"testing"
)

// TestGraphAccepted (TRELLIS_GEN_GRAPH_CHECK=N, off by default): the graph
// stream's definitions of N seeds per profile, every definition one, are
// accepted by Apply over their program's schema and rows.
func TestGraphAccepted(t *testing.T) {
	n := envInt("TRELLIS_GEN_GRAPH_CHECK", 0)
	if n == 0 {
		t.Skip("set TRELLIS_GEN_GRAPH_CHECK to apply the graph stream's definitions of that many seeds per profile")
	}
	applyDrawn(t, n, func(g *gen) { g.graphPct = 100 }, func(g *gen) []shapeDef { return g.graphDefs })
}

// graphFeatureNames are what the graph stream draws (recursive.go) that
// TestGraphPrograms requires across seeds.
var graphFeatureNames = []string{
	"descendants bounded by depth", "descendants stopped by a path", "ancestors as a set", "reachability",
	"paths with a cycle flag", "bill of materials", "recursive rows", "aggregate over a recursion",
	"recursion joined back", "recursion in IN", "recursion read twice", "grouped by a primary key",
	"t.* grouped by its key", "settings-dependent function", "grouped by a settings-dependent function",
}

// TestGraphPrograms: across seeds, the graph stream draws every shape; a
// quarter of the programs or so have graph tables, and those write them;
// no definition names a hidden column.
func TestGraphPrograms(t *testing.T) {
	all := map[string]bool{}
	missing := func() (out []string) {
		for _, f := range graphFeatureNames {
			if !all[f] {
				out = append(out, f)
			}
		}
		return out
	}
	programs, graphs, writes := 0, 0, 0
	for seed := int64(0); seed < 1000 && (seed < 200 || len(missing()) > 0); seed++ {
		for _, prof := range Profiles() {
			p, g := generate(seed, prof)
			programs++
			if g.graph != nil {
				graphs++
				if strings.Contains(p.Format(), "UPDATE "+g.graph.nodes.name+" SET parent") {
					writes++
				}
			}
			for _, d := range g.graphDefs {
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
		t.Errorf("the programs draw no graph shape with %s", strings.Join(m, ", "))
	}
	if graphs < programs/6 || graphs > programs/3 {
		t.Errorf("%d of %d programs have graph tables, want about a quarter", graphs, programs)
	}
	if writes < graphs/2 {
		t.Errorf("%d of %d programs with graph tables re-parent a node", writes, graphs)
	}
}

// TestGraphDrawnApart: the graph stream only replaces the definitions it
// lands on and adds the graph tables' steps.
func TestGraphDrawnApart(t *testing.T) {
	drawnApart(t, "graph", func(g *gen) { g.graphPct = 0 }, func(g *gen) (int, bool) { return len(g.graphDefs), g.graph != nil })
}
