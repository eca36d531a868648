package trellis_test

import (
	"context"
	"math/rand"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestTargetSchema: bare names go to Config.TargetSchema, qualified ones
// where they say, PAUSE and DROP find a bare name there, and chains read
// targets by their bare names across schemas (ADR 0040).
func TestTargetSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t, trellis.Config{TargetSchema: "analytics"})
	e.exec(schemaSQL)
	ctx := context.Background()
	if _, err := e.tr.Apply(ctx, `CREATE TRANSFORM a AS SELECT id, amount FROM orders`); trellis.CodeOf(err) != trellis.CodeNotFound {
		t.Fatalf("a missing target schema: %v, want not_found", err)
	}
	e.exec(`CREATE SCHEMA analytics`)
	e.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 200) g`)
	e.apply(`
CREATE TRANSFORM paid AS SELECT id, customer, amount FROM orders WHERE status <> 'cancelled';
CREATE TRANSFORM public.ids AS SELECT id, qty FROM orders;
CREATE TRANSFORM per_customer AS SELECT customer, sum(amount) AS amount FROM paid GROUP BY customer;
CREATE TRANSFORM public.big_paid AS SELECT id, amount FROM paid WHERE amount > 20;
CREATE TRANSFORM ids_twice AS SELECT id, qty * 2 AS qty2 FROM ids`)
	for name, want := range map[string]string{"paid": "analytics", "ids": "public", "per_customer": "analytics", "big_paid": "public", "ids_twice": "analytics"} {
		if got := e.queryString(`SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = $1`, name); got != want {
			t.Errorf("target %s is in schema %q, want %q", name, got, want)
		}
	}
	e.start()
	e.converge("after the build")
	workload(e, rand.New(rand.NewSource(3)), 20, 10)
	e.converge("after writes")
	// A bare name in PAUSE and DROP is looked up in the target schema.
	e.apply(`DROP TRANSFORM ids_twice; PAUSE TRANSFORM per_customer; DROP TRANSFORM per_customer`)
	if n := e.queryInt(`SELECT count(*) FROM pg_class WHERE relname IN ('ids_twice', 'per_customer')`); n != 0 {
		t.Fatalf("DROP of bare names left %d tables", n)
	}
}

// queryString runs a query returning one text value.
func (e *env) queryString(sql string, args ...any) string {
	e.t.Helper()
	var s string
	if err := e.conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return s
}
