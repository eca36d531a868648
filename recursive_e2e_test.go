package trellis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// WITH RECURSIVE (ADR 0035): trees (descendants and ancestors, with depth
// and path), reachability over a graph with cycles (UNION), a bill of
// materials summed over UNION ALL, a recursive CTE joined to another
// table, read twice and read by a chain — each compared with its query as
// written after the build and after writes that add leaves and inner
// nodes, delete inner nodes (orphaning their subtrees), move subtrees,
// make and break cycles, change keys and truncate.

const recursiveSchemaSQL = `
CREATE TABLE rnodes (id int PRIMARY KEY, parent_id int, name text, w int);
CREATE TABLE redges (src int, dst int, PRIMARY KEY (src, dst));
CREATE TABLE rparts (id text PRIMARY KEY, cost numeric);
CREATE TABLE rcomp (part text, sub text, qty int, PRIMARY KEY (part, sub));
CREATE TABLE rlinks (id int PRIMARY KEY, parent_id int);
INSERT INTO rlinks SELECT i, NULLIF(i / 2, 0) FROM generate_series(1, 20) i;
INSERT INTO rnodes SELECT i, CASE WHEN i <= 2 THEN NULL ELSE i / 3 END, 'n' || i, i % 4 FROM generate_series(1, 40) i;
INSERT INTO redges VALUES (1, 2), (2, 3), (3, 4), (4, 2), (5, 6), (6, 7), (1, 5), (8, 8), (9, 10);
INSERT INTO rparts SELECT p, length(p) * 1.5 FROM unnest(ARRAY['A', 'B', 'C', 'D', 'E', 'F', 'G', 'H']) p;
INSERT INTO rcomp VALUES ('A', 'B', 2), ('A', 'C', 1), ('B', 'D', 3), ('C', 'D', 1), ('D', 'E', 2), ('C', 'F', 4), ('G', 'H', 1);`

// descendants of the roots with depth and path (UNION ALL, a tree).
const recDescendants = `WITH RECURSIVE d(root, id, depth, path) AS (
	SELECT id, id, 0, ARRAY[id] FROM rnodes WHERE parent_id IS NULL
	UNION ALL
	SELECT d.root, n.id, d.depth + 1, d.path || n.id FROM rnodes n JOIN d ON n.parent_id = d.id)
SELECT root, id, depth, path FROM d`

var recursiveDefs = []levelDef{
	{"rc_descendants", recDescendants},
	// Ancestors of every node, as a set.
	{"rc_ancestors", `WITH RECURSIVE up(id, anc) AS (
		SELECT id, parent_id FROM rnodes WHERE parent_id IS NOT NULL
		UNION
		SELECT up.id, p.parent_id FROM up JOIN rnodes p ON p.id = up.anc WHERE p.parent_id IS NOT NULL)
	SELECT id, anc FROM up`},
	// Ancestors with their depth, UNION ALL (the tree has no cycle).
	{"rc_ancestors_depth", `WITH RECURSIVE up(id, anc, depth) AS (
		SELECT n.id, p.id, 1 FROM rnodes n JOIN rnodes p ON p.id = n.parent_id
		UNION ALL
		SELECT up.id, p.id, up.depth + 1 FROM up, rnodes c, rnodes p WHERE c.id = up.anc AND p.id = c.parent_id)
	SELECT id, anc, depth FROM up`},
	// Ancestors as a set over a tree that re-parenting turns cyclic.
	{"rc_links_up", `WITH RECURSIVE up(id, anc) AS (
		SELECT id, parent_id FROM rlinks WHERE parent_id IS NOT NULL
		UNION
		SELECT up.id, l.parent_id FROM up JOIN rlinks l ON l.id = up.anc WHERE l.parent_id IS NOT NULL)
	SELECT id, anc FROM up`},
	// Reachability over a graph with cycles.
	{"rc_reach", `WITH RECURSIVE reach(src, dst) AS (
		SELECT src, dst FROM redges
		UNION
		SELECT r.src, e.dst FROM reach r JOIN redges e ON e.src = r.dst)
	SELECT src, dst FROM reach`},
	{"rc_reach_from_one", `WITH RECURSIVE r(n) AS (SELECT dst FROM redges WHERE src = 1 UNION SELECT e.dst FROM r, redges e WHERE e.src = r.n) SELECT n FROM r`},
	// UNION ALL over a graph with cycles, stopped by the query's own
	// path check (PostgreSQL's documented pattern).
	{"rc_paths", `WITH RECURSIVE g(src, dst, path, cyc) AS (
		SELECT src, dst, ARRAY[src, dst], src = dst FROM redges WHERE src IN (1, 5)
		UNION ALL
		SELECT g.src, e.dst, g.path || e.dst, e.dst = ANY(g.path) FROM g JOIN redges e ON e.src = g.dst WHERE NOT g.cyc)
	SELECT src, dst, path, cyc FROM g`},
	// A bill of materials: quantities multiplied down, summed per part.
	{"rc_bom", `WITH RECURSIVE bom(top, sub, qty) AS (
		SELECT part, sub, qty FROM rcomp
		UNION ALL
		SELECT b.top, c.sub, b.qty * c.qty FROM bom b JOIN rcomp c ON c.part = b.sub)
	SELECT top, sub, sum(qty) AS total FROM bom GROUP BY top, sub`},
	// Joined to another table, and aggregated over the join.
	{"rc_bom_cost", `WITH RECURSIVE bom(top, sub, qty) AS (
		SELECT part, sub, qty FROM rcomp
		UNION ALL
		SELECT b.top, c.sub, b.qty * c.qty FROM bom b JOIN rcomp c ON c.part = b.sub)
	SELECT b.top, sum(b.qty * p.cost) AS cost, count(*) AS lines FROM bom b JOIN rparts p ON p.id = b.sub GROUP BY b.top`},
	{"rc_names", `WITH RECURSIVE d(root, id) AS (
		SELECT id, id FROM rnodes WHERE parent_id IS NULL
		UNION ALL
		SELECT d.root, n.id FROM d JOIN rnodes n ON n.parent_id = d.id)
	SELECT d.root, n.name, n.w FROM d JOIN rnodes n ON n.id = d.id WHERE n.w > 0`},
	// Read twice: one level.
	{"rc_twice", `WITH RECURSIVE up(id, anc) AS (
		SELECT id, parent_id FROM rnodes WHERE parent_id IS NOT NULL
		UNION
		SELECT up.id, p.parent_id FROM up JOIN rnodes p ON p.id = up.anc WHERE p.parent_id IS NOT NULL)
	SELECT a.id, b.id AS sibling FROM up a JOIN up b ON b.anc = a.anc AND b.id <> a.id WHERE a.anc = 1`},
	// Columns named by the anchor, * expanded by PostgreSQL.
	{"rc_star", `WITH RECURSIVE sub AS (
		SELECT * FROM rnodes WHERE id = 3
		UNION ALL
		SELECT n.* FROM rnodes n JOIN sub ON n.parent_id = sub.id)
	SELECT * FROM sub`},
	// Read by a subquery in WHERE.
	{"rc_in", `WITH RECURSIVE d(id) AS (SELECT id FROM rnodes WHERE id = 1 UNION ALL SELECT n.id FROM rnodes n JOIN d ON n.parent_id = d.id)
	SELECT name FROM rnodes WHERE id IN (SELECT id FROM d) AND w < 3`},
	// Read by a chain.
	{"rc_chain", `SELECT root, count(*) AS n, max(depth) AS deepest FROM rc_descendants GROUP BY root`},
}

// recursiveWrites change the tree, the graph and the bill of materials.
var recursiveWrites = []string{
	// Leaves.
	`INSERT INTO rnodes VALUES (100, 13, 'leaf', 1), (101, 100, 'leaf2', 2); INSERT INTO redges VALUES (7, 11); INSERT INTO rcomp VALUES ('E', 'H', 5)`,
	// An inner node, with a subtree moved under it.
	`INSERT INTO rnodes VALUES (200, 1, 'mid', 3); UPDATE rnodes SET parent_id = 200 WHERE id IN (3, 4)`,
	// An inner node deleted: its subtree orphaned.
	`DELETE FROM rnodes WHERE id = 5; DELETE FROM rcomp WHERE part = 'C' AND sub = 'D'`,
	// Subtrees re-parented; cycles made in the graph and in the links
	// (2 under its descendant 9).
	`UPDATE rnodes SET parent_id = 2 WHERE id = 4; UPDATE rnodes SET parent_id = 100 WHERE id = 12; INSERT INTO redges VALUES (7, 5), (11, 1); UPDATE rlinks SET parent_id = 9 WHERE id = 2`,
	// Quantities and costs change; a cycle broken, another edge moved.
	`UPDATE rcomp SET qty = qty + 1 WHERE part = 'B'; UPDATE rparts SET cost = cost * 2 WHERE id IN ('D', 'H'); DELETE FROM redges WHERE src = 4 AND dst = 2; UPDATE redges SET dst = 9 WHERE src = 6 AND dst = 7; UPDATE rlinks SET parent_id = 3 WHERE id = 4; UPDATE rlinks SET parent_id = id WHERE id = 20`,
	// Keys change.
	`UPDATE rnodes SET id = 300 WHERE id = 6; UPDATE rnodes SET id = 301, parent_id = NULL WHERE id = 13; UPDATE rcomp SET sub = 'G' WHERE part = 'D' AND sub = 'E'; UPDATE redges SET src = 8 WHERE src = 1 AND dst = 5`,
	// Roots become children and back.
	`UPDATE rnodes SET parent_id = 1 WHERE id = 2; UPDATE rnodes SET parent_id = NULL WHERE id = 10; UPDATE rnodes SET w = w + 1`,
	`TRUNCATE redges; INSERT INTO redges VALUES (1, 2), (2, 1), (2, 3), (5, 5)`,
	`TRUNCATE rcomp; INSERT INTO rcomp VALUES ('A', 'B', 1), ('B', 'C', 2), ('A', 'C', 3)`,
	`DELETE FROM rnodes WHERE id % 5 = 0; UPDATE rlinks SET parent_id = NULL WHERE id = 2; DELETE FROM rlinks WHERE id = 9`,
}

// TestRecursive builds every recursive shape over existing rows and keeps
// it exact through the writes, in both capture modes.
func TestRecursive(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		keepShapes(t, mode, recursiveSchemaSQL, recursiveDefs, recursiveWrites)
	})
}

// TestRecursiveCycleHeld: a UNION ALL recursion that a new row makes
// follow a cycle forever (as PostgreSQL's would) holds the key that made
// the cycle, naming the recursion and the fix, while the rest of the
// transform keeps applying; the change that breaks the cycle releases it
// and the target is exact again.
func TestRecursiveCycleHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(`CREATE TABLE cnodes (id int PRIMARY KEY, parent_id int);
		INSERT INTO cnodes SELECT i, NULLIF(i - 1, 0) FROM generate_series(1, 6) i`)
	def := levelDef{"rc_up", `WITH RECURSIVE up(id, anc, depth) AS (
		SELECT id, parent_id, 1 FROM cnodes WHERE parent_id IS NOT NULL
		UNION ALL
		SELECT up.id, p.parent_id, up.depth + 1 FROM up JOIN cnodes p ON p.id = up.anc WHERE p.parent_id IS NOT NULL)
	SELECT id, anc, depth FROM up`}
	e.apply("CREATE TRANSFORM " + def.name + " AS " + def.query)
	e.start()
	levelConverge(e, []levelDef{def}, "after the build")
	ctx := context.Background()
	level := ""
	all, err := e.tr.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Owner != nil && *s.Owner == def.name {
			level = s.Name
		}
	}
	if level == "" {
		t.Fatalf("no level owned by %s in %+v", def.name, all)
	}
	// 1 becomes 4's child: 1 → 4 → 3 → 2 → 1 … for every node.
	e.exec(`UPDATE cnodes SET parent_id = 4 WHERE id = 1; INSERT INTO cnodes VALUES (7, NULL)`)
	waitStatus(t, e, level, "holding the key that made the cycle", func(s trellis.TransformStatus) bool { return heldCount(s) > 0 && s.State == "live" })
	ps, err := e.tr.PoisonedSince(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) == 0 || ps[0].SQLState != "54001" || !strings.Contains(ps[0].Error, `WITH RECURSIVE up: the derivation from one anchor row`) || !strings.Contains(ps[0].Error, "went past 1000 steps") {
		t.Fatalf("held keys %+v, want the cycle named (SQLSTATE 54001)", ps)
	}
	// The cycle broken by the row that made it: released, exact.
	e.exec(`UPDATE cnodes SET parent_id = NULL WHERE id = 1`)
	waitStatus(t, e, level, "releasing the key", func(s trellis.TransformStatus) bool { return heldCount(s) == 0 })
	levelConverge(e, []levelDef{def}, "after the cycle was broken")
}
