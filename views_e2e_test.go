package trellis_test

import (
	"context"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// Views as sources (issue 24 item 10): a view in FROM is read as its
// definition, views over views in turn, so the transform captures the
// tables under it and stays equal to its query as written; replacing a
// view it read pauses it with the fix.

const viewSchemaSQL = `
CREATE TABLE va (id int PRIMARY KEY, g int, x int);
CREATE TABLE vb (id int PRIMARY KEY, name text);
INSERT INTO va SELECT i, i % 4, i * 3 % 7 FROM generate_series(1, 30) i;
INSERT INTO vb SELECT i, 'n' || i FROM generate_series(0, 3) i;
CREATE VIEW v_big AS SELECT id, g, x FROM va WHERE x > 2;
CREATE VIEW v_named AS SELECT v_big.id, v_big.x, vb.name FROM v_big JOIN vb ON vb.id = v_big.g;
CREATE VIEW v_totals (grp, total) AS SELECT g, sum(x) FROM va GROUP BY g;`

var viewDefs = []levelDef{
	{"vw_plain", `SELECT id, x FROM v_big`},
	{"vw_nested", `SELECT name, count(*) AS n, max(x) AS hi FROM v_named GROUP BY name`},
	{"vw_grouped", `SELECT t.grp, t.total, vb.name FROM v_totals t LEFT JOIN vb ON vb.id = t.grp`},
	{"vw_star", `SELECT * FROM v_named WHERE x < 6`},
}

func TestViewsAsSources(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, func(t *testing.T, mode string) {
		e := keepShapes(t, mode, viewSchemaSQL, viewDefs, []string{
			`UPDATE va SET x = x + 3 WHERE id % 3 = 0`,
			`DELETE FROM va WHERE g = 1; UPDATE vb SET name = 'renamed' WHERE id = 2`,
			`INSERT INTO va SELECT i, i % 5, i % 9 FROM generate_series(100, 120) i`,
		})
		if mode != "logical" {
			return
		}
		// The view replaced: the transforms reading it, directly or through
		// another view, are paused with the fix; the others go on.
		e.exec(`CREATE OR REPLACE VIEW v_big AS SELECT id, g, x FROM va WHERE x > 4`)
		e.exec(`UPDATE va SET x = x + 1 WHERE id = 5`)
		for _, d := range []levelDef{viewDefs[0], viewDefs[1], viewDefs[3]} {
			s := waitStatus(t, e, d.name, "paused for the replaced view", func(s trellis.TransformStatus) bool { return s.State == "paused" })
			if s.CaptureFailure == nil || !strings.Contains(s.CaptureFailure.Error, "CREATE OR REPLACE TRANSFORM "+d.name) {
				t.Fatalf("%s: %+v, want a failure naming the fix", d.name, s.CaptureFailure)
			}
			if _, err := e.tr.Apply(context.Background(), "CREATE OR REPLACE TRANSFORM "+d.name+" AS "+d.query); err != nil {
				t.Fatal(err)
			}
		}
		stillLive(t, e, "vw_grouped")
		for _, d := range viewDefs {
			waitStatus(t, e, d.name, "live over the new view", func(s trellis.TransformStatus) bool { return s.State == "live" && s.Replaces == nil })
		}
		levelConverge(e, viewDefs, "redefined over the new view")
	})
}
