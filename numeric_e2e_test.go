package trellis_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestNumericPrintsAsQuery: numeric sums and averages, and numeric values
// a row transform copies, print exactly as their query prints them, with
// values of different scales (1.5 and 1.50), NaN and both infinities
// entering and leaving groups in random order (ADR 0024). The usual
// comparison (EXCEPT ALL) calls 1.5 and 1.50 equal; this one compares text.
func TestNumericPrintsAsQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{})
	e.exec(`CREATE TABLE m (id int PRIMARY KEY, g int, v numeric)`)
	defs := map[string]struct{ cols, query string }{
		"nsum": {"g, s, a, n", `SELECT g, sum(v) AS s, avg(v) AS a, count(*) AS n FROM m GROUP BY g`},
		"ntot": {"s, a, q", `SELECT sum(v) AS s, avg(v) AS a, sum(v) / nullif(count(*), 0) AS q FROM m`},
		"nrow": {"id, v", `SELECT id, v FROM m`},
		"nhav": {"g, q", `SELECT g, sum(v) / count(v) AS q FROM m GROUP BY g HAVING count(v) > 0`},
	}
	var script []string
	for name, d := range defs {
		script = append(script, fmt.Sprintf("CREATE TRANSFORM %s AS %s;", name, d.query))
	}
	e.exec(`INSERT INTO m SELECT g, g % 3, (g * 7 % 11) / 4.0 FROM generate_series(1, 12) g`)
	e.start()
	e.apply(strings.Join(script, "\n"))
	values := []string{"1.5", "1.50", "2.250", "'NaN'", "'Infinity'", "'-Infinity'", "1e20", "123456789.123456789", "-0.0", "NULL", "3", "0.001", "0.00000000000000000001"}
	// First the changes only of scale: a value and a group's only value
	// print differently while staying equal.
	fixed := []string{
		"UPDATE m SET g = 5, v = 1.5 WHERE id = 1",
		"UPDATE m SET v = 1.50 WHERE id = 1",
		"UPDATE m SET v = 1.5 WHERE id = 1",
	}
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < len(fixed)+12; round++ {
		if round < len(fixed) {
			e.exec(fixed[round])
		}
		for txn := 0; round >= len(fixed) && txn < 1+rng.Intn(4); txn++ {
			var stmts []string
			for k := 0; k < 1+rng.Intn(3); k++ {
				id, v := 1+rng.Intn(16), values[rng.Intn(len(values))]
				switch rng.Intn(3) {
				case 0:
					stmts = append(stmts, fmt.Sprintf("DELETE FROM m WHERE id = %d", id))
				default:
					stmts = append(stmts, fmt.Sprintf("INSERT INTO m VALUES (%d, %d, %s) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, g = EXCLUDED.g", id, rng.Intn(3), v))
				}
			}
			e.exec("BEGIN; " + strings.Join(stmts, "; ") + "; COMMIT")
		}
		e.await(fmt.Sprintf("round %d", round))
		for name, d := range defs {
			text := func(from string) string {
				var cs []string
				for _, c := range strings.Split(d.cols, ", ") {
					cs = append(cs, c+"::text")
				}
				return "SELECT " + strings.Join(cs, ", ") + " FROM " + from
			}
			e.sameRows(fmt.Sprintf("round %d: %s as text", round, name), text(name), text("("+d.query+") q"))
		}
	}
}
