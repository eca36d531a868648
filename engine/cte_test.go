package engine

import (
	"strings"
	"testing"
)

// TestInlineWith pins how WITH is kept (ADR 0030): each reference to a
// CTE becomes its query as a derived table, which is flattened or kept as
// a level; a CTE read twice that is a level is one level.
func TestInlineWith(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		levels   int // levels of their own (not SameAs)
		shared   int // levels that read another's target
	}{
		// Read once, a projection: flattened.
		{`WITH s AS (SELECT a, b + 1 AS c FROM t WHERE b > 0) SELECT s.a, s.c FROM s`,
			`SELECT t.a, t.b + 1 AS c FROM t WHERE t.b > 0`, 0, 0},
		// A column list on the CTE, MATERIALIZED, and a CTE over another.
		{`WITH s(x, y) AS MATERIALIZED (SELECT a, b FROM t), u AS NOT MATERIALIZED (SELECT x FROM s WHERE y = 1) SELECT u.x FROM u`,
			`SELECT t.a AS x FROM t WHERE t.b = 1`, 0, 0},
		// An aggregating CTE read twice: one level, read by both.
		{`WITH g AS (SELECT a, count(*) AS n FROM t GROUP BY a) SELECT g1.a, g2.n FROM g g1 JOIN g g2 ON g2.a = g1.a + 1`,
			`SELECT g1.a, g2.n FROM __trellis_level_0 g1 JOIN __trellis_level_1 g2 ON g2.a = (g1.a + 1)`, 1, 1},
		// A projection read twice: flattened twice, each copy of the table
		// under a name of its own.
		{`WITH s AS (SELECT a, b FROM t) SELECT s1.b, s2.b AS b2 FROM s s1 JOIN s s2 ON s2.a = s1.a`,
			`SELECT t_1.b, t_2.b AS b2 FROM t t_1 JOIN t t_2 ON t_2.a = t_1.a`, 0, 0},
		// Nested WITH inside a derived table, shadowing an outer CTE.
		{`WITH s AS (SELECT a FROM t) SELECT d.a FROM (WITH s AS (SELECT a FROM u) SELECT s.a FROM s) d JOIN s ON s.a = d.a`,
			`SELECT u.a FROM u JOIN t ON t.a = u.a`, 0, 0},
		// WITH RECURSIVE (ADR 0035): UNION ALL read as its level; UNION
		// through the distinct rows of it (a level over the level); a
		// recursive CTE read twice is one level; a CTE of the same WITH
		// that does not read itself is inlined.
		{`WITH RECURSIVE r AS (SELECT a, b FROM t UNION ALL SELECT r.a, u.b FROM r JOIN u ON u.a = r.b) SELECT r.a, r.b FROM r`,
			`SELECT r.a, r.b FROM __trellis_level_0 r`, 1, 0},
		{`WITH RECURSIVE r(x) AS (SELECT a FROM t UNION SELECT u.b FROM r, u WHERE u.a = r.x) SELECT r.x FROM r`,
			`SELECT r.x FROM __trellis_level_0 r`, 1, 0},
		{`WITH RECURSIVE s AS (SELECT a, b FROM t WHERE b > 0), r AS (SELECT a, b FROM s UNION ALL SELECT r.a, u.b FROM r JOIN u ON u.a = r.b) SELECT r1.a, r2.b FROM r r1 JOIN r r2 ON r2.a = r1.b`,
			`SELECT r_1.a, r_2.b FROM __trellis_level_0 r_1 JOIN __trellis_level_1 r_2 ON r_2.a = r_1.b`, 1, 1},
		// Nested WITH inside a CTE.
		{`WITH s AS (WITH i AS (SELECT a, b FROM t) SELECT i.a, sum(i.b) AS sb FROM i GROUP BY i.a) SELECT s.a, s.sb FROM s`,
			`SELECT s.a, s.sb FROM __trellis_level_0 s`, 1, 0},
	} {
		sts, err := ParseStatements("CREATE TRANSFORM x AS " + tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		q := sts[0].Query
		if q.Rewritten != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, q.Rewritten, tc.want)
		}
		own, shared := 0, 0
		for _, l := range q.Levels {
			if l.SameAs != nil {
				shared++
			} else {
				own++
			}
		}
		if own != tc.levels || shared != tc.shared {
			t.Errorf("%s: %d levels and %d shared, want %d and %d", tc.in, own, shared, tc.levels, tc.shared)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`WITH RECURSIVE r AS (SELECT 1 AS a UNION ALL SELECT a + 1 FROM r WHERE a < 9) SELECT a FROM r`, "its anchor reads no table"},
		{`WITH d AS (DELETE FROM t RETURNING a) SELECT a FROM d`, "holds a data-modifying statement"},
	} {
		_, err := ParseStatements("CREATE TRANSFORM x AS " + tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}
