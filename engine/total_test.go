package engine

import (
	"context"
	"testing"
)

// TestTotalAggregatesWithState keeps aggregates without GROUP BY exact when
// min/max sit beside composed items or HAVING (their state table shares
// column names with the deltas; found by the generative suite: "column
// reference __x0 is ambiguous"): inserts, the extreme's deletion, and the
// table emptied.
func TestTotalAggregatesWithState(t *testing.T) {
	ctx := context.Background()
	dsn, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE s1 (c1 int NOT NULL, c0 float8 PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	for _, def := range []string{
		`CREATE TRANSFORM t_composed AS SELECT max(c0) AS a2, count(*) + 1 AS q FROM s1`,
		`CREATE TRANSFORM t_having AS SELECT min(c0) AS lo, max(c1) AS hi FROM s1 HAVING count(*) > 0`,
		`CREATE TRANSFORM t_both AS SELECT max(c0) - min(c0) AS spread, sum(c1) / nullif(count(*), 0) AS mean FROM s1 HAVING count(*) > 1`,
	} {
		a := built(t, ctx, dsn, conn, cat, def)
		for i, step := range []struct {
			sql  string
			keys []string
		}{
			{`INSERT INTO s1 VALUES (1, 0.5), (7, 2.5), (3, -1)`, []string{"0.5", "2.5", "-1"}},
			{`DELETE FROM s1 WHERE c0 = 2.5`, []string{"2.5"}},
			{`UPDATE s1 SET c1 = 9 WHERE c0 = -1`, []string{"-1"}},
			{`DELETE FROM s1`, []string{"0.5", "-1"}},
		} {
			if _, err := conn.Exec(ctx, step.sql); err != nil {
				t.Fatal(err)
			}
			var keys [][]string
			for _, k := range step.keys {
				keys = append(keys, []string{k})
			}
			if _, err := a.Apply(ctx, Batch{Keys: [][][]string{keys}}); err != nil {
				t.Fatalf("%s, step %d: %v", def, i, err)
			}
			mustEqual(t, ctx, conn, a.Plan, def)
		}
	}
}
