package engine

import (
	"strings"
	"testing"
)

// rewriteCase is a query as PostgreSQL writes it back, the parts its
// rewritten text and its levels' must hold, and how many levels it has
// (0: any).
type rewriteCase struct {
	name, sql string
	want      []string
	levels    int
}

// checkRewrites parses each case (ParseQuery) and wants its parts.
func checkRewrites(t *testing.T, cases []rewriteCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseQuery("x", tc.sql)
			if err != nil {
				t.Fatal(err)
			}
			text := q.Rewritten + "\n" + strings.Join(levelTexts(q), "\n")
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("rewritten\n  %s\nlacks\n  %s", text, w)
				}
			}
			if tc.levels > 0 && len(q.Levels) != tc.levels {
				t.Errorf("%d levels, want %d: %s", len(q.Levels), tc.levels, text)
			}
		})
	}
}

// levelTexts are the rewritten queries of q's levels, depth first.
func levelTexts(q *Query) []string {
	var out []string
	for _, l := range q.Levels {
		out = append(out, l.Query.Rewritten)
		out = append(out, levelTexts(l.Query)...)
	}
	return out
}

// TestTopKSubqueryLevels pins the dependency levels of subqueries that
// limit their rows (topksub.go): correlated by equalities, the rows
// ranked within the limit per group (rank, so every tie is in), their
// ranks and values the fingerprint; correlated otherwise, every row of
// the group; uncorrelated, the ranked rows of the whole subquery.
func TestTopKSubqueryLevels(t *testing.T) {
	checkRewrites(t, []rewriteCase{
		{name: "latest value per row",
			sql: `SELECT i.id, (SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC, p.id LIMIT 1) AS price FROM items i`,
			want: []string{`(SELECT p.price FROM prices p WHERE p.item_id = i.id ORDER BY p.valid_from DESC, p.id LIMIT 1) AS price FROM items i LEFT JOIN __trellis_level_0 __dep1 ON __dep1.g1 = i.id`,
				`SELECT __ranked.g1 AS g1, count(*) AS n, array_agg(__ranked.__trellis_rn ORDER BY __ranked.__trellis_rn, __ranked.r1) AS a1, array_agg(__ranked.r1 ORDER BY __ranked.__trellis_rn, __ranked.r1) AS a2 FROM __trellis_level_0 __ranked WHERE __ranked.__trellis_rn <= 1 AND __ranked.g1 IS NOT NULL GROUP BY __ranked.g1`,
				`SELECT p.item_id AS g1, p.price AS r1, rank() OVER (PARTITION BY p.item_id ORDER BY p.valid_from DESC, p.id) AS __trellis_rn FROM prices p`}},
		{name: "EXISTS past an OFFSET reads the count",
			sql:  `SELECT i.id FROM items i WHERE EXISTS (SELECT 1 FROM prices p WHERE p.item_id = i.id AND p.price > 0 ORDER BY p.valid_from LIMIT 1 OFFSET 2)`,
			want: []string{`count(*) AS n, array_agg(__ranked.__trellis_rn ORDER BY __ranked.__trellis_rn) AS a1 FROM __trellis_level_0 __ranked WHERE __ranked.__trellis_rn <= 3`, `FROM prices p WHERE p.price > 0`}},
		{name: "as-of correlation: every row of the group",
			sql:  `SELECT i.id, (SELECT p.price FROM prices p WHERE p.item_id = i.id AND p.valid_from <= i.asof ORDER BY p.valid_from DESC LIMIT 1) AS price FROM items i`,
			want: []string{`SELECT p.item_id AS g1, count(*) AS n, array_agg(p.valid_from ORDER BY p.valid_from, p.price) AS a1, array_agg(p.price ORDER BY p.valid_from, p.price) AS a2 FROM prices p WHERE p.item_id IS NOT NULL GROUP BY p.item_id`}},
		{name: "uncorrelated, with OFFSET",
			sql:  `SELECT i.id FROM items i WHERE i.price > (SELECT p.price FROM prices p ORDER BY p.price DESC LIMIT 1 OFFSET 3)`,
			want: []string{`LEFT JOIN __trellis_level_0 __dep1 ON true`, `WHERE __ranked.__trellis_rn <= 4`, `rank() OVER (ORDER BY p.price DESC) AS __trellis_rn FROM prices p`}},
		{name: "an aggregate's LIMIT keeps its row",
			sql:  `SELECT i.id, (SELECT max(p.price) FROM prices p WHERE p.item_id = i.id LIMIT 1) AS m FROM items i`,
			want: []string{`SELECT p.item_id AS g1, max(p.price) AS v FROM prices p WHERE p.item_id IS NOT NULL GROUP BY p.item_id`}},
	})
}
