package generative

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// The graph tables (ADR 0035's recursion, ADR 0037's grouping): programs
// the graph stream picks get two more tables, besides the program's: nodes
// gn (id, parent — a parent-id forest that re-parenting makes cyclic and
// breaks again —, a weight, a group and a timestamptz around midnight in
// several offsets) and edges ge (src, dst, qty; cycles and self-loops).
// Their writes, drawn from the graph stream after body events, add and
// delete leaves, inner nodes and edges, re-parent subtrees (a node under
// its own descendant), make roots, move keys, change weights, quantities
// and times, truncate the edges and bulk-fill shallow trees and short edge
// chains, in transactions of their own or lanes beside writers of the
// program's tables. They are not among g.tables: the main stream's schema,
// writes and definitions stay what the seed drew.

// graph is the program's graph tables.
type graph struct {
	nodes, edges *table
	// id, parent, w, grp, at are the nodes' columns; src, dst, qty the
	// edges'.
	id, parent, w, grp, at *column
	src, dst, qty          *column
	fresh                  int
}

// graphTimes are the nodes' times: near midnight, in offsets that put
// them on different dates in different time zones.
var graphTimes = []string{
	"'2024-03-10 23:30:00+00'", "'2024-03-11 00:30:00+00'", "'2024-03-10 22:15:00-05'",
	"'2024-03-11 01:00:00+09'", "'2024-12-31 23:59:59+00'", "'2025-01-01 00:00:01+01'",
}

func newGraph(r *rand.Rand) *graph {
	g := &graph{}
	ids := []string{}
	for v := 0; v < 8+r.IntN(5); v++ {
		ids = append(ids, fmt.Sprint(v))
	}
	g.id = &column{name: "id", typ: tInt, sqlType: "int", notNull: true, small: true, domain: ids}
	g.parent = &column{name: "parent", typ: tInt, sqlType: "int", small: true, domain: ids}
	g.w = &column{name: "w", typ: tInt, sqlType: "int", small: true, domain: []string{"-1", "0", "1", "2", "3"}}
	g.grp = &column{name: "grp", typ: tText, sqlType: "text", small: true, domain: []string{"'a'", "'b'", "''"}}
	g.at = &column{name: "at", typ: tTimestamptz, sqlType: "timestamptz", domain: graphTimes}
	g.nodes = &table{name: []string{"gn", "gn", `"Nodes"`}[r.IntN(3)], cols: []*column{g.id, g.parent, g.w, g.grp, g.at}, key: []*column{g.id}, shiftKey: g.id}
	ends := ids[:min(len(ids), 8)]
	g.src = &column{name: "src", typ: tInt, sqlType: "int", notNull: true, small: true, domain: ends}
	g.dst = &column{name: "dst", typ: tInt, sqlType: "int", notNull: true, small: true, domain: ends}
	g.qty = &column{name: "qty", typ: tInt, sqlType: "int", small: true, domain: []string{"1", "2", "3"}}
	g.edges = &table{name: "ge", cols: []*column{g.src, g.dst, g.qty}, key: []*column{g.src, g.dst}, shiftKey: g.src}
	return g
}

// createSQL are the graph tables' CREATE TABLEs.
func (g *graph) createSQL() []string {
	return []string{g.nodes.createSQL(), g.edges.createSQL()}
}

func pick(r *rand.Rand, d []string) string { return d[r.IntN(len(d))] }

// parentOf draws a parent for node id: NULL now and then (a root), a
// smaller id usually (a forest), any id otherwise (a cycle, a self-loop).
func (g *graph) parentOf(r *rand.Rand, id int) string {
	switch x := r.IntN(10); {
	case x < 2 || id == 0:
		return "NULL"
	case x < 8:
		return fmt.Sprint(r.IntN(id))
	}
	return pick(r, g.id.domain)
}

func (g *graph) nodeRow(r *rand.Rand, id int) string {
	w := pick(r, g.w.domain)
	if r.IntN(8) == 0 {
		w = "NULL"
	}
	return fmt.Sprintf("(%d, %s, %s, %s, %s)", id, g.parentOf(r, id), w, pick(r, g.grp.domain), pick(r, graphTimes))
}

// fill is the rows the graph starts with: every node, and a dozen edges
// (a cycle, a self-loop now and then).
func (g *graph) fill(r *rand.Rand) Step {
	var rows []string
	for i := range g.id.domain {
		rows = append(rows, g.nodeRow(r, i))
	}
	s := Step{Kind: StepTxn, Stmts: []string{"INSERT INTO " + g.nodes.name + " (id, parent, w, grp, at) VALUES " + strings.Join(rows, ", ")}}
	s.Stmts = append(s.Stmts, "INSERT INTO ge (src, dst, qty) VALUES "+g.edgeRows(r, 8+r.IntN(8))+" ON CONFLICT DO NOTHING")
	return s
}

func (g *graph) edgeRows(r *rand.Rand, n int) string {
	var rows []string
	for i := 0; i < n; i++ {
		rows = append(rows, fmt.Sprintf("(%s, %s, %s)", pick(r, g.src.domain), pick(r, g.dst.domain), pick(r, g.qty.domain)))
	}
	return strings.Join(rows, ", ")
}

// stmt draws one write of the graph.
func (g *graph) stmt(r *rand.Rand) string {
	n := g.nodes.name
	id := func() string { return pick(r, g.id.domain) }
	switch x := r.IntN(100); {
	case x < 12:
		i := r.IntN(len(g.id.domain))
		return "INSERT INTO " + n + " (id, parent, w, grp, at) VALUES " + g.nodeRow(r, i) +
			[]string{" ON CONFLICT (id) DO NOTHING", " ON CONFLICT (id) DO UPDATE SET parent = EXCLUDED.parent, at = EXCLUDED.at"}[r.IntN(2)]
	case x < 28:
		// Re-parented: under any node (its own descendant: a cycle).
		return "UPDATE " + n + " SET parent = " + id() + " WHERE id = " + id()
	case x < 33:
		return "UPDATE " + n + " SET parent = NULL WHERE id = " + id()
	case x < 40:
		return "UPDATE " + n + " SET " + []string{"w = w + 1", "grp = 'a'", "at = at + interval '1 hour'", "at = " + pick(r, graphTimes)}[r.IntN(4)] + " WHERE id = " + id()
	case x < 44:
		return fmt.Sprintf("UPDATE %s SET id = id + 100 WHERE id = %s AND NOT EXISTS (SELECT 1 FROM %s AS o WHERE o.id = %s.id + 100)", n, id(), n, n)
	case x < 47:
		return fmt.Sprintf("UPDATE %s SET id = id - 100 WHERE id >= 100 AND id < 1000 AND NOT EXISTS (SELECT 1 FROM %s AS o WHERE o.id = %s.id - 100)", n, n, n)
	case x < 55:
		return "DELETE FROM " + n + " WHERE id = " + id()
	case x < 70:
		return "INSERT INTO ge (src, dst, qty) VALUES " + g.edgeRows(r, 1+r.IntN(3)) +
			[]string{" ON CONFLICT DO NOTHING", " ON CONFLICT (src, dst) DO UPDATE SET qty = EXCLUDED.qty"}[r.IntN(2)]
	case x < 80:
		return "DELETE FROM ge WHERE src = " + pick(r, g.src.domain) + []string{"", " AND dst = " + pick(r, g.dst.domain)}[r.IntN(2)]
	case x < 86:
		return fmt.Sprintf("UPDATE ge SET %s WHERE src = %s AND dst = %s", []string{"qty = qty + 1", "dst = " + pick(r, g.dst.domain)}[r.IntN(2)], pick(r, g.src.domain), pick(r, g.dst.domain))
	case x < 88:
		return "TRUNCATE ge"
	case x < 94:
		return g.bulk(r)
	}
	return fmt.Sprintf("DELETE FROM %s WHERE id >= 1000 AND id %% %d = 0", n, 2+r.IntN(3))
}

// bulk adds shallow trees (a root every eight nodes) and short edge
// chains (six edges) with fresh keys.
func (g *graph) bulk(r *rand.Rand) string {
	k := 20 + r.IntN(120)
	start := 1000 + g.fresh
	g.fresh += k
	if r.IntN(2) == 0 {
		return fmt.Sprintf("INSERT INTO %s (id, parent, w, grp, at) SELECT i, CASE WHEN i %% 8 = 0 THEN NULL ELSE i - 1 END, i %% 4, (ARRAY['a', 'b', ''])[1 + i %% 3], timestamptz '2024-03-10 20:00:00+00' + i * interval '17 minutes' FROM generate_series(%d, %d) i ON CONFLICT DO NOTHING",
			g.nodes.name, start, start+k-1)
	}
	return fmt.Sprintf("INSERT INTO ge (src, dst, qty) SELECT i, i + 1, 1 + i %% 3 FROM generate_series(%d, %d) i WHERE i %% 6 <> 5 ON CONFLICT DO NOTHING", start, start+k-1)
}

func (g *graph) txn(r *rand.Rand) Step {
	s := Step{Kind: StepTxn, Rollback: r.IntN(20) == 0}
	for i := 1 + r.IntN(4); i > 0; i-- {
		s.Stmts = append(s.Stmts, g.stmt(r))
	}
	return s
}

// drawGraph decides (from the graph stream) whether the program has the
// graph tables, and returns the steps creating and filling them (none
// without); it resolves the graph stream's share of definitions.
func (gn *gen) drawGraph() []Step {
	var out []Step
	if gn.graphPct != 0 && gn.hr.IntN(100) < graphTablePct {
		gn.graph = newGraph(gn.hr)
		out = append(out, Step{Kind: StepSQL, Stmts: gn.graph.createSQL()}, gn.graph.fill(gn.hr))
	}
	if gn.graphPct < 0 {
		gn.graphPct = featGraphPct
		if gn.graph != nil {
			gn.graphPct = featGraphTablesPct
		}
	}
	return out
}

// graphEvent is what follows a body event of a program with graph tables
// now and then: a transaction writing them, maybe with a check right
// after, or lanes of them.
func (gn *gen) graphEvent() []Step {
	r, g := gn.hr, gn.graph
	switch x := r.IntN(10); {
	case x < 6:
		return []Step{g.txn(r)}
	case x < 8:
		return []Step{g.txn(r), g.txn(r), {Kind: StepCheck}}
	}
	s := Step{Kind: StepConcurrent}
	for i := 2 + r.IntN(2); i > 0; i-- {
		var lane []Step
		for j := 2 + r.IntN(4); j > 0; j-- {
			lane = append(lane, g.txn(r))
		}
		s.Lanes = append(s.Lanes, lane)
	}
	return []Step{s}
}
