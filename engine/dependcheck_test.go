package engine

import (
	"slices"
	"strings"
	"testing"
)

// TestDependencies: the dependency levels a definition's subqueries make
// are recorded with the owner's join condition over a row of the level's
// query, and the check reads the FROM's rows in scope, not the WHERE's
// (ADR 0043).
func TestDependencies(t *testing.T) {
	for _, tc := range []struct {
		in   string
		on   []string
		cols [][]string
	}{
		{in: `SELECT o.grp, count(*) AS n FROM o WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.k = o.grp) GROUP BY 1`,
			on: []string{"__trellis_dq.g1 = o.grp"}, cols: [][]string{{"g1"}}},
		{in: `SELECT o.id FROM o WHERE o.v > (SELECT avg(s.x) FROM s)`,
			on: []string{"true"}, cols: [][]string{{"v"}}},
		{in: `SELECT o.id FROM o WHERE o.grp NOT IN (SELECT s.k FROM s WHERE s.x > 0)`,
			on: []string{"__trellis_dq.g1 = o.grp", "true"}, cols: [][]string{{"g1"}, {"nonempty", "has_null"}}},
		{in: `SELECT o.id FROM o`},
	} {
		q, err := ParseQuery("x", tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		var sources []Source
		for _, tb := range q.Tables {
			sources = append(sources, Source{Schema: "s", Name: tb.Name, Ref: tb.RefName(), Key: []Col{{Name: "id", Type: "integer"}}})
		}
		for k, l := range q.Levels {
			if err := q.BindLevel(k, Rel{Schema: "trellis", Name: "level_" + l.Alias}, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			sources[l.Table] = Source{Schema: "trellis", Name: "level_" + l.Alias, Ref: l.Alias, Key: []Col{{Name: "g1", Type: "text"}}}
		}
		deps, err := q.dependencies(sources)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if len(deps) != len(tc.on) {
			t.Fatalf("%s: %d dependencies, want %d", tc.in, len(deps), len(tc.on))
		}
		for i, d := range deps {
			if d.On != tc.on[i] || strings.Join(d.Cols, ",") != strings.Join(tc.cols[i], ",") {
				t.Errorf("%s: dependency %d: on %q cols %v; want on %q cols %v", tc.in, i, d.On, d.Cols, tc.on[i], tc.cols[i])
			}
		}
		p := &Plan{Sources: sources, From: "FROM-CLAUSE", Dependencies: deps}
		stale := staleSQL(p)
		if len(deps) == 0 || len(sources) < 2 {
			if stale != "" {
				t.Errorf("%s: a check without dependencies: %s", tc.in, stale)
			}
			continue
		}
		if !strings.Contains(stale, "FROM FROM-CLAUSE WHERE true AND") || !strings.Contains(stale, "IS NOT DISTINCT FROM") {
			t.Errorf("%s: the check does not read the FROM's rows in scope: %s", tc.in, stale)
		}
		// The subqueries run once over the union of the branches, which
		// project the owner's columns the join conditions read.
		if strings.Contains(tc.on[0], "o.grp") && (!strings.Contains(stale, `"o"."grp" AS __o0`) || !strings.Contains(stale, "__trellis_dq.g1 = __x.__o0") ||
			strings.Count(stale, "NOT EXISTS (SELECT 1 FROM (") != len(deps)) {
			t.Errorf("%s: the check is not written once over the branches: %s", tc.in, stale)
		}
		// It returns the keys of the owner's own sources only: a
		// dependency level's key would re-derive every row joined to the
		// level row, and is no key of the rows flagged.
		for i := range sources {
			key := sourceKeyRefs(p, i)[0] + "::text"
			level := slices.ContainsFunc(deps, func(d Dependency) bool { return d.Source == i })
			if got := strings.Contains(stale, key); got == level {
				t.Errorf("%s: source %d (a dependency level: %v): the check returns its key %s: %v; want %v", tc.in, i, level, key, got, !level)
			}
		}
	}
}
