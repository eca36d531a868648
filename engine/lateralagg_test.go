package engine

import (
	"testing"
)

// TestLateralAggregates pins how a LATERAL subquery that aggregates
// without GROUP BY is read (lateralagg.go): each column the outer query
// reads becomes its scalar subquery, the LATERAL item leaves the FROM, and
// the scalars share one dependency level, joined once.
func TestLateralAggregates(t *testing.T) {
	checkRewrites(t, []rewriteCase{
		{name: "LEFT JOIN ON true",
			sql: `SELECT c.id, x.n, x.s FROM c LEFT JOIN LATERAL (SELECT count(*) AS n, sum(o.amt) AS s FROM o WHERE o.cust = c.id) x ON true`,
			want: []string{`SELECT c.id AS id, (SELECT count(*) FROM o WHERE o.cust = c.id) AS n, (SELECT sum(o.amt) FROM o WHERE o.cust = c.id) AS s FROM c LEFT JOIN __trellis_level_0 __dep1 ON __dep1.g1 = c.id`,
				`SELECT o.cust AS g1, count(*) AS v1, sum(o.amt) AS v2 FROM o WHERE o.cust IS NOT NULL GROUP BY o.cust`},
			levels: 1},
		{name: "LEFT JOIN ON a condition",
			sql:    `SELECT c.id, x.n FROM c LEFT JOIN LATERAL (SELECT count(*) AS n FROM o WHERE o.cust = c.id) x ON x.n > 2`,
			want:   []string{`CASE WHEN (SELECT count(*) FROM o WHERE o.cust = c.id) > 2 THEN (SELECT count(*) FROM o WHERE o.cust = c.id) END AS n FROM c LEFT JOIN`},
			levels: 1},
		{name: "inner join: its condition filters",
			sql:    `SELECT c.id, x.n, x.one FROM c JOIN LATERAL (SELECT count(*) AS n, 1 AS one FROM o WHERE o.cust = c.id AND o.amt > c.tier) x ON x.n > 2`,
			want:   []string{`1 AS one FROM c LEFT JOIN __trellis_level_0 __dep1 ON __dep1.g1 = c.id WHERE (SELECT count(*) FROM o WHERE o.cust = c.id AND o.amt > c.tier) > 2`, `count(*) AS n, array_agg(o.amt ORDER BY o.amt) AS a1`},
			levels: 1},
	})
}
