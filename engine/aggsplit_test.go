package engine

import (
	"strings"
	"testing"
)

// TestSplitAggregate: a subquery read over groups becomes a query over
// the grouped rows (aggsplit.go), written as text; what cannot be split is
// refused with the sentence that says why.
func TestSplitAggregate(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		want      []string // parts of the rewritten text
		err       string
	}{
		{name: "HAVING over a total",
			sql:  `SELECT o.cust, sum(o.amt) AS s FROM o GROUP BY o.cust HAVING sum(o.amt) > (SELECT avg(l.qty) FROM l)`,
			want: []string{`SELECT o.cust AS cust, sum(o.amt) AS s, sum(o.amt) AS agg_1 FROM o GROUP BY o.cust`, `FROM __trellis_level_0 __grouped`, `WHERE __grouped.agg_1 > __dep1.v`}},
		{name: "correlated on a group column",
			sql:  `SELECT o.cust, count(*) AS n FROM o GROUP BY o.cust HAVING EXISTS (SELECT 1 FROM l WHERE l.sku = o.cust % 4)`,
			want: []string{`SELECT o.cust AS cust, count(*) AS n FROM o GROUP BY o.cust`, `l.sku = (__grouped.cust % 4)`}},
		{name: "correlated on a group column not selected",
			sql:  `SELECT count(*) AS n FROM o GROUP BY o.cust HAVING EXISTS (SELECT 1 FROM l WHERE l.sku = o.cust % 4)`,
			want: []string{`o.cust AS grp_1`, `l.sku = (__grouped.grp_1 % 4)`}},
		{name: "outer aggregate inside the subquery",
			sql:  `SELECT o.status, max(o.amt) AS hi FROM o GROUP BY o.status HAVING EXISTS (SELECT 1 FROM l WHERE l.qty = max(o.amt))`,
			want: []string{`max(o.amt) AS agg_1`, `l.qty = __grouped.agg_1`}},
		{name: "select list per group",
			sql:  `SELECT o.cust, (SELECT c.region FROM c WHERE c.id = o.cust) AS region FROM o GROUP BY o.cust`,
			want: []string{`(SELECT c.region FROM c WHERE c.id = __grouped.cust) AS region`}},
		{name: "names do not collide",
			sql:  `SELECT count(*) AS grp_1, sum(o.amt) AS agg_1 FROM o GROUP BY o.cust HAVING count(*) > (SELECT count(*) FROM l WHERE l.oid = o.cust)`,
			want: []string{`count(*) AS agg_2`, `o.cust AS grp_2`}},
		{name: "ungrouped column",
			sql: `SELECT o.cust, count(*) AS n FROM o GROUP BY o.cust HAVING count(*) > (SELECT count(*) FROM l WHERE l.oid = o.amt)`,
			err: "reads a column outside an aggregate that is not a GROUP BY expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseQuery("x", tc.sql)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(q.Levels) == 0 || q.Levels[0].Alias != groupedAlias {
				t.Fatalf("the grouped query is not a level: %s", q.Rewritten)
			}
			text := q.Rewritten + "\n" + q.Levels[0].text
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("rewritten\n  %s\nlacks\n  %s", text, w)
				}
			}
		})
	}
}
