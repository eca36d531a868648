package generative

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// Recursion and grouping (ADR 0035, 0037): definitions over the graph
// tables (graph.go) — WITH RECURSIVE descendants of roots (UNION ALL,
// bounded by a depth or stopped by a path check, since re-parenting makes
// cycles, which PostgreSQL would follow forever), ancestors as a set
// (UNION), reachability over the edges (UNION; from every edge or from one
// node), paths with PostgreSQL's cycle flag, a bill of materials summed
// over a bounded UNION ALL; read by rows, an aggregate per anchor, a join
// back to the nodes, a subquery IN, twice — and grouping as PostgreSQL
// reads it: GROUP BY a primary key selecting the columns that depend on
// it (t.* too) over a join, and the settings-dependent stable functions
// over timestamptz (at::date, date_trunc, to_char, extract, at::text) in
// select lists, GROUP BY and WHERE. Programs without graph tables draw the
// grouping over their own tables (a table's key grouped, its other columns
// selected, joined to another table).
//
// Drawn from a stream of their own (graphSalt), after every other stream
// drew the definition it replaces, and never where another landed, so
// every other draw of a program stays as it was.

const (
	// graphSalt seeds the graph stream. It is chosen so that the fast
	// lane's fixed cases draw a few such definitions in cases that catch
	// no planted bug: concurrent/7 (paths over the edges with a cycle
	// flag, read by IN) and join/79 (ancestors as a set joined back to
	// the nodes), which have the graph tables, and restart/5 and
	// lifecycle/6 (a table grouped by its key, another column of it
	// selected), and still draw everything the other streams' tests
	// require of them.
	graphSalt = 0x67726579
	// graphTablePct: a program has graph tables; graphEventPct: a body
	// event of such a program is followed by a write of them.
	graphTablePct = 25
	graphEventPct = 25
	// featGraphPct: a definition is replaced by one of these shapes in a
	// program without graph tables (grouping by a key over its tables),
	// featGraphTablesPct with them.
	featGraphPct       = 2
	featGraphTablesPct = 14
)

// graphPctEnv is TRELLIS_GEN_GRAPH_PCT (0–100), the chance a definition
// is drawn here whether the program has graph tables or not, or -1 for
// the default.
func graphPctEnv() int {
	if v, err := strconv.Atoi(os.Getenv("TRELLIS_GEN_GRAPH_PCT")); err == nil && v >= 0 && v <= 100 {
		return v
	}
	return -1
}

// graphDraw draws one definition of these shapes.
type graphDraw struct {
	g     *gen
	r     *rand.Rand
	gr    *graph
	feats map[string]bool
}

// graphSelect draws a definition: recursion or grouping over the graph
// tables when the program has them, else grouping by a key over its own.
func (gn *gen) graphSelect(r *rand.Rand) shapeDef {
	d := &graphDraw{g: gn, r: r, gr: gn.graph, feats: map[string]bool{}}
	var q string
	switch x := r.IntN(10); {
	case d.gr == nil:
		q = d.keyGroupTables()
	case x < 6:
		q = d.recursive()
	case x < 8:
		q = d.keyGroupGraph()
	default:
		q = d.settings()
	}
	return shapeDef{sql: q, feats: d.feats}
}

// ---- recursion ----

// recursive is a WITH RECURSIVE over the graph and an outer query over it.
func (d *graphDraw) recursive() string {
	r, n := d.r, d.gr.nodes.name
	var cte string
	var cols []string // the CTE's columns; the first is its anchor
	switch x := r.IntN(6); {
	case x < 2:
		// Descendants of the anchors: roots, a group, or every node.
		anchor := []string{" WHERE parent IS NULL", " WHERE grp = 'a'", "", " WHERE w > 0"}[r.IntN(4)]
		if r.IntN(2) == 0 {
			k := 2 + r.IntN(4)
			cte = fmt.Sprintf("d(root, id, depth) AS (SELECT id, id, 0 FROM %s%s UNION ALL SELECT d.root, c.id, d.depth + 1 FROM %s c JOIN d ON c.parent = d.id WHERE d.depth < %d)", n, anchor, n, k)
			cols = []string{"root", "id", "depth"}
			d.feats["descendants bounded by depth"] = true
		} else {
			cte = fmt.Sprintf("d(root, id, path) AS (SELECT id, id, ARRAY[id] FROM %s%s UNION ALL SELECT d.root, c.id, d.path || c.id FROM %s c, d WHERE c.parent = d.id AND NOT c.id = ANY(d.path))", n, anchor, n)
			cols = []string{"root", "id", "path"}
			d.feats["descendants stopped by a path"] = true
		}
	case x < 3:
		cte = fmt.Sprintf("d(id, anc) AS (SELECT id, parent FROM %s WHERE parent IS NOT NULL UNION SELECT d.id, p.parent FROM d JOIN %s p ON p.id = d.anc WHERE p.parent IS NOT NULL)", n, n)
		cols = []string{"id", "anc"}
		d.feats["ancestors as a set"] = true
	case x < 4:
		if r.IntN(2) == 0 {
			cte = "d(src, dst) AS (SELECT src, dst FROM ge UNION SELECT d.src, e.dst FROM d JOIN ge e ON e.src = d.dst)"
			cols = []string{"src", "dst"}
		} else {
			cte = fmt.Sprintf("d(id) AS (SELECT dst FROM ge WHERE src = %s UNION SELECT e.dst FROM d, ge e WHERE e.src = d.id)", pick(r, d.gr.src.domain))
			cols = []string{"id"}
		}
		d.feats["reachability"] = true
	case x < 5:
		cte = fmt.Sprintf("d(src, dst, path, cyc) AS (SELECT src, dst, ARRAY[src, dst], src = dst FROM ge WHERE src IN (%s, %s) UNION ALL SELECT d.src, e.dst, d.path || e.dst, e.dst = ANY(d.path) FROM d JOIN ge e ON e.src = d.dst WHERE NOT d.cyc)",
			pick(r, d.gr.src.domain), pick(r, d.gr.src.domain))
		cols = []string{"src", "dst", "path", "cyc"}
		d.feats["paths with a cycle flag"] = true
	default:
		cte = fmt.Sprintf("d(top, sub, qty, depth) AS (SELECT src, dst, qty, 1 FROM ge UNION ALL SELECT d.top, e.dst, d.qty * e.qty, d.depth + 1 FROM d JOIN ge e ON e.src = d.sub WHERE d.depth < %d)", 2+r.IntN(2))
		cols = []string{"top", "sub", "qty", "depth"}
		d.feats["bill of materials"] = true
	}
	q := "WITH RECURSIVE " + cte + " "
	first, last := cols[0], cols[len(cols)-1]
	switch x := r.IntN(6); {
	case x < 2:
		d.feats["recursive rows"] = true
		q += "SELECT " + strings.Join(cols, ", ") + " FROM d"
		if r.IntN(3) == 0 {
			q += " WHERE " + first + " <> " + pick(r, d.gr.id.domain)
		}
	case x < 3:
		d.feats["aggregate over a recursion"] = true
		agg := "count(*) AS n"
		if last == "depth" || last == "qty" {
			agg += ", max(" + last + ") AS m, sum(" + last + ") AS s"
		}
		q += "SELECT " + first + ", " + agg + " FROM d GROUP BY " + first
	case x < 4 && first != "src" && first != "top":
		d.feats["recursion joined back"] = true
		col := cols[min(1, len(cols)-1)]
		q += fmt.Sprintf("SELECT d.%s, n.grp, n.w FROM d JOIN %s n ON n.id = d.%s", first, n, col)
	case x < 5:
		d.feats["recursion in IN"] = true
		col := cols[min(1, len(cols)-1)]
		if col == "path" || col == "cyc" {
			col = first
		}
		q += fmt.Sprintf("SELECT n.id, n.w FROM %s n WHERE n.id IN (SELECT d.%s FROM d)", n, col)
	default:
		d.feats["recursion read twice"] = true
		col := cols[min(1, len(cols)-1)]
		if col == "path" || col == "cyc" || col == first {
			q += "SELECT a." + first + " FROM d a JOIN d b ON b." + first + " = a." + first
			break
		}
		q += fmt.Sprintf("SELECT a.%s, b.%s AS other FROM d a JOIN d b ON b.%s = a.%s AND b.%s <> a.%s", first, first, col, col, first, first)
	}
	return q
}

// ---- grouping ----

// keyGroupGraph groups the nodes by their key, selecting columns that
// depend on it (n.* now and then), over their edges.
func (d *graphDraw) keyGroupGraph() string {
	r, n := d.r, d.gr.nodes.name
	sel := []string{"n.id", "n.grp", "n.w"}
	if r.IntN(3) == 0 {
		sel = []string{"n.*"}
		d.feats["t.* grouped by its key"] = true
	}
	if r.IntN(3) == 0 {
		sel = append(sel, "upper(n.grp) AS ug")
	}
	kind := []string{"LEFT JOIN", "JOIN"}[r.IntN(2)]
	d.feats["grouped by a primary key"] = true
	q := "SELECT " + strings.Join(sel, ", ") + ", count(e.dst) AS outs, sum(e.qty) AS q FROM " + n + " n " + kind + " ge e ON e.src = n.id GROUP BY n.id"
	if r.IntN(3) == 0 {
		q += " HAVING count(*) > 1"
	}
	return q
}

// keyGroupTables groups one of the program's tables by its key, selecting
// its other columns, over a join with another table on comparable columns.
func (d *graphDraw) keyGroupTables() string {
	r := d.r
	sd := &shapeDraw{g: d.g, r: r, feats: d.feats}
	t := sd.anyTable()
	u := sd.anyTable()
	a, b := sd.aliased(t), sd.aliased(u)
	x, y, ok := sd.pair(a, b, t, u)
	var keys, sel []string
	for _, k := range a.keyRefs() {
		keys = append(keys, k)
		sel = append(sel, k)
	}
	if r.IntN(3) == 0 {
		sel = []string{a.ref + ".*"}
		d.feats["t.* grouped by its key"] = true
	} else {
		for _, c := range short(t.nonKey()) {
			if r.IntN(2) == 0 {
				sel = append(sel, a.q(c))
			}
		}
	}
	from := a.item
	agg := "count(*) AS n"
	if ok {
		from += []string{" LEFT JOIN ", " JOIN "}[r.IntN(2)] + b.item + " ON " + b.q(y) + " = " + a.q(x)
		agg = "count(" + b.q(b.cols[r.IntN(len(b.cols))]) + ") AS n"
	}
	d.feats["grouped by a primary key"] = true
	return "SELECT " + strings.Join(sel, ", ") + ", " + agg + " FROM " + from + " GROUP BY " + strings.Join(keys, ", ")
}

// settings reads the nodes' times through stable functions whose only
// instability is a setting (TimeZone, DateStyle): grouped by, selected,
// filtered on.
func (d *graphDraw) settings() string {
	r, n := d.r, d.gr.nodes.name
	exprs := []string{"n.at::date", "date_trunc('day', n.at)", "to_char(n.at, 'YYYY-MM-DD HH24')", "extract(hour FROM n.at)", "n.at::text"}
	x := exprs[r.IntN(len(exprs))]
	d.feats["settings-dependent function"] = true
	switch r.IntN(3) {
	case 0:
		d.feats["grouped by a settings-dependent function"] = true
		return "SELECT " + x + " AS day, count(*) AS n, max(n.w) AS w FROM " + n + " n GROUP BY 1"
	case 1:
		return "SELECT n.id, " + x + " AS t FROM " + n + " n WHERE n.at::date " + []string{">=", "<", "="}[r.IntN(3)] + " '2024-03-11'"
	}
	return "SELECT n.id, n.grp, " + x + " AS t, date_part('dow', n.at) AS dow FROM " + n + " n"
}
