package engine

import (
	"strings"
	"testing"
)

// TestLevels pins how a derived table that aggregates is kept (ADR 0018):
// the outer query reads a placeholder table under the derived table's
// alias, and the level is the subquery with its outputs renamed by the
// alias's column list; a level's own derived tables are flattened or
// become its levels, and a flattened derived table passes its levels up.
// Binding names the level's table; the full query writes the level's
// query back in its place.
func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		in, outer string
		levels    []string // each level's rewritten query, then its own levels after " | "
		full      string   // FROM of the full query once level k is bound to level_1_<k+1>
	}{
		{in: `SELECT c_count, count(*) AS custdist FROM (SELECT c_custkey, count(o_orderkey) FROM customer LEFT OUTER JOIN orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' GROUP BY c_custkey) AS c_orders (c_custkey, c_count) GROUP BY c_count ORDER BY custdist DESC, c_count DESC`,
			outer:  `SELECT c_count, count(*) AS custdist FROM __trellis_level_0 c_orders GROUP BY c_count ORDER BY custdist DESC, c_count DESC`,
			levels: []string{`SELECT c_custkey AS c_custkey, count(o_orderkey) AS c_count FROM customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%' GROUP BY c_custkey`},
			full:   `(L0) AS "c_orders"`},
		{in: `SELECT count(*) AS n FROM (SELECT DISTINCT a FROM t) d`,
			outer:  `SELECT count(*) AS n FROM __trellis_level_0 d`,
			levels: []string{`SELECT a FROM t GROUP BY 1`},
			full:   `(L0) AS "d"`},
		{in: `SELECT u.k, s.n FROM u JOIN (SELECT k, count(*) AS n FROM t GROUP BY k HAVING count(*) > 1) s ON s.k = u.k LEFT JOIN (SELECT sum(v) AS total FROM t) w ON true`,
			outer: `SELECT u.k, s.n FROM u JOIN __trellis_level_0 s ON s.k = u.k LEFT JOIN __trellis_level_1 w ON true`,
			levels: []string{`SELECT k, count(*) AS n FROM t GROUP BY k HAVING count(*) > 1`,
				`SELECT sum(v) AS total FROM t`},
			full: `s.u JOIN (L0) s ON s.k = u.k LEFT JOIN (L1) w ON true`},
		// A flattened derived table passes its level up; a level's own
		// aggregating derived table is its level.
		{in: `SELECT m, count(*) AS k FROM (SELECT a.c AS m FROM (SELECT x, count(*) AS c FROM t GROUP BY x) a WHERE a.c > 1) b GROUP BY m`,
			outer:  `SELECT a.c AS m, count(*) AS k FROM __trellis_level_0 a WHERE a.c > 1 GROUP BY a.c`,
			levels: []string{`SELECT x, count(*) AS c FROM t GROUP BY x`},
			full:   `(L0) AS "a"`},
		{in: `SELECT b.n, count(*) AS k FROM (SELECT c AS n, count(*) AS m FROM (SELECT x, count(*) AS c FROM t GROUP BY x) a GROUP BY c) b GROUP BY b.n`,
			outer:  `SELECT b.n, count(*) AS k FROM __trellis_level_0 b GROUP BY b.n`,
			levels: []string{`SELECT c AS n, count(*) AS m FROM __trellis_level_0 a GROUP BY c | SELECT x, count(*) AS c FROM t GROUP BY x`},
			full:   `(L0) AS "b"`},
	} {
		sts, err := ParseStatements("CREATE TRANSFORM x AS " + tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		q := sts[0].Query
		if q.Rewritten != tc.outer {
			t.Errorf("%s:\n got outer %s\nwant       %s", tc.in, q.Rewritten, tc.outer)
		}
		var got []string
		for _, l := range q.Levels {
			s := l.Query.Rewritten
			for _, ll := range l.Query.Levels {
				s += " | " + ll.Query.Rewritten
			}
			got = append(got, s)
		}
		if strings.Join(got, "\n") != strings.Join(tc.levels, "\n") {
			t.Errorf("%s:\n got levels %q\nwant        %q", tc.in, got, tc.levels)
		}
		var sources []Source
		for _, tb := range q.Tables {
			sources = append(sources, Source{Schema: "s", Name: tb.Name, Ref: tb.RefName(), From: `"s".` + ident(tb.Name) + " AS " + ident(tb.RefName())})
		}
		for k := range q.Levels {
			r := Rel{Schema: "trellis", Name: "level_1_" + string(rune('1'+k))}
			if err := q.BindLevel(k, r, "SELECT "+string(rune('0'+k))+" AS l"+string(rune('0'+k))); err != nil {
				t.Fatal(err)
			}
			sources[q.Levels[k].Table] = Source{Schema: r.Schema, Name: r.Name, Ref: q.Tables[q.Levels[k].Table].RefName()}
			if !strings.Contains(q.Rewritten, "trellis.level_1_"+string(rune('1'+k))) {
				t.Errorf("%s: bound level %d, but the rewritten query does not read it: %s", tc.in, k, q.Rewritten)
			}
		}
		full, err := q.fullFrom(sources)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		want := tc.full
		for k := range q.Levels {
			want = strings.ReplaceAll(want, "L"+string(rune('0'+k)), "SELECT "+string(rune('0'+k))+" AS l"+string(rune('0'+k)))
		}
		if full != want {
			t.Errorf("%s:\n got full FROM %s\nwant           %s", tc.in, full, want)
		}
	}
}
