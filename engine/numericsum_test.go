package engine

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestNumericStateIsPostgreSQLs: for random multisets of numeric values
// (scales 0 to 20, NaN, both infinities, NULL), the state numericParts
// contributes, added and then partly subtracted again as deltas would,
// gives through numericValue exactly the text PostgreSQL's sum and avg
// give for the values left (ADR 0024).
func TestNumericStateIsPostgreSQLs(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	values := []string{"1.5", "1.50", "2.250", "-0.0", "0", "3", "1e20", "123456789.123456789", "0.00000000000000000001",
		"-7.125", "'NaN'", "'Infinity'", "'-Infinity'", "NULL"}
	finite, scales, special := numericParts("v")
	rng := rand.New(rand.NewSource(3))
	for round := 0; round < 200; round++ {
		var all, gone []string
		for range 1 + rng.Intn(6) {
			v := values[rng.Intn(len(values))]
			all = append(all, "("+v+"::numeric, "+fmt.Sprint(rng.Intn(2) == 0)+")")
		}
		for _, r := range all {
			if strings.HasSuffix(r, "true)") {
				gone = append(gone, r)
			}
		}
		// State: every value added, the gone ones subtracted.
		state := fmt.Sprintf(`SELECT coalesce(sum(%[1]s * w), 0) AS f, coalesce(sum(CASE WHEN v IS NULL THEN 0 ELSE 1 END * w), 0) AS n,
			coalesce(sum(%[2]s * w), 0) AS h, coalesce(sum(%[3]s * w), 0) AS p
			FROM (SELECT v, 1 AS w FROM (VALUES %[4]s) x(v, g) UNION ALL SELECT v, -1 FROM (VALUES %[4]s) x(v, g) WHERE g) y`,
			finite, scales, special, strings.Join(all, ", "))
		for _, fn := range []string{"sum", "avg"} {
			a := AggCol{Func: fn}
			q := fmt.Sprintf(`SELECT (%s)::text, (SELECT %s(v) FROM (VALUES %s) x(v, g) WHERE NOT g)::text FROM (%s) s`,
				numericValue(a, "s.f", "s.n", "s.h", "s.p"), fn, strings.Join(all, ", "), state)
			var got, want *string
			if err := conn.QueryRow(ctx, q).Scan(&got, &want); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if (got == nil) != (want == nil) || got != nil && *got != *want {
				t.Fatalf("%s of %v without %v: state gives %v, PostgreSQL %v", fn, all, gone, deref(got), deref(want))
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
