package engine

import (
	"testing"
)

// TestDistinctOnLimited pins DISTINCT ON with a limit (topk.go): top-K
// over the DISTINCT ON query as a derived table, ordered by its ORDER BY
// values kept as hidden columns; in a LATERAL subquery the outer window
// is partitioned by the correlation too.
func TestDistinctOnLimited(t *testing.T) {
	checkRewrites(t, []rewriteCase{
		{name: "LIMIT and OFFSET",
			sql: `SELECT DISTINCT ON (t.g) t.g, t.id FROM t ORDER BY t.g, t.x DESC NULLS LAST, t.id LIMIT 3 OFFSET 1`,
			want: []string{`WHERE __topk.__trellis_rn > 1 AND __topk.__trellis_rn <= 4`,
				`row_number() OVER (ORDER BY __don.__trellis_o1, __don.__trellis_o2 DESC NULLS LAST, __don.__trellis_o3) AS __trellis_rn FROM __trellis_level_0 __don`,
				`t.g AS __trellis_o1, t.x AS __trellis_o2, t.id AS __trellis_o3, row_number() OVER (PARTITION BY t.g ORDER BY t.g, t.x DESC NULLS LAST, t.id) AS __trellis_rn FROM t`}},
		{name: "in a LATERAL subquery",
			sql:  `SELECT c.id, x.s FROM c LEFT JOIN LATERAL (SELECT DISTINCT ON (o.status) o.status AS s FROM o WHERE o.cust = c.id ORDER BY o.status, o.amt DESC, o.id LIMIT 2) x ON true`,
			want: []string{`row_number() OVER (PARTITION BY __don.__trellis_lat1 ORDER BY`, `PARTITION BY o.cust, o.status ORDER BY o.cust, o.status, o.amt DESC, o.id`}},
	})
}
