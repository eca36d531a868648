package engine

import "testing"

// TestFlattenDerived pins the flattened text of subqueries in FROM: the
// subquery's tables replace it, its WHERE joins the outer one, and each
// reference to its outputs becomes their expression, under the output's
// own name.
func TestFlattenDerived(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT a FROM (SELECT a FROM t) s`, `SELECT a FROM t`},
		{`SELECT s.x, y FROM (SELECT t.a + 1 AS x, t.b AS y FROM t WHERE t.c) AS s`,
			`SELECT t.a + 1 AS x, t.b AS y FROM t WHERE t.c`},
		{`SELECT nm, sum(v) AS total FROM (SELECT n.name AS nm, l.p * (1 - l.d) AS v FROM l, n WHERE n.id = l.n) AS x GROUP BY nm ORDER BY nm`,
			`SELECT n.name AS nm, sum(l.p * (1 - l.d)) AS total FROM l CROSS JOIN n WHERE n.id = l.n GROUP BY n.name ORDER BY n.name`},
		{`SELECT c, u.k FROM (SELECT a AS c FROM t WHERE b > 0) s(c) JOIN u ON u.k = s.c WHERE u.z`,
			`SELECT a AS c, u.k FROM t JOIN u ON u.k = a WHERE u.z AND b > 0`},
		{`SELECT q FROM (SELECT p AS q FROM (SELECT t.a AS p FROM t WHERE t.a > 1) i WHERE p < 9) o`,
			`SELECT t.a AS q FROM t WHERE t.a < 9 AND t.a > 1`},
		// Both WHEREs already conjunctions: one flat AND, as the parser
		// reads the deparsed text back (found by the generative suite).
		{`SELECT s.k FROM (SELECT c0 AS k, c1 AS v FROM s0 WHERE c1 IS NOT NULL AND c1 > 0) s WHERE (s.k >= 2.5 AND s.k < 9)`,
			`SELECT c0 AS k FROM s0 WHERE c0 >= 2.5 AND c0 < 9 AND c1 IS NOT NULL AND c1 > 0`},
	} {
		sts, err := ParseStatements("CREATE TRANSFORM x AS " + tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := sts[0].Query.Rewritten; got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}
