package trellistest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/trellistest"
)

// TestHelpers uses the package as a program's tests would, with no
// TestMain: a database, a handle, waits, a backfill after fixtures loaded
// behind capture's back (trigger capture, its triggers disabled for the
// load, so nothing captures it until the backfill), and a failing
// wait that names the transform's reason.
func TestHelpers(t *testing.T) {
	ctx := context.Background()
	dsn := trellistest.Postgres(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE orders (id int PRIMARY KEY, customer int, amount int)`)
	h := trellistest.Open(t, dsn, trellis.Config{Capture: trellis.CaptureTrigger})
	if _, err := h.Apply(ctx, `CREATE TRANSFORM per_customer AS SELECT customer, sum(amount) AS amount, count(*) AS n FROM orders GROUP BY customer`); err != nil {
		t.Fatal(err)
	}
	trellistest.AwaitLive(t, h, "per_customer")
	exec(`INSERT INTO orders SELECT g, g % 3, g FROM generate_series(1, 30) g`)
	trellistest.Eventually(t, h, "per_customer")
	equal(t, h, true, "after captured writes")

	// A load with the capture triggers off: in one transaction, so they
	// are back (ENABLE ALWAYS, as capture made them) when it commits.
	exec(`DO $$ DECLARE r record; BEGIN
		ALTER TABLE orders DISABLE TRIGGER ALL;
		INSERT INTO orders SELECT g, g % 4, g FROM generate_series(31, 90) g;
		FOR r IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal LOOP
			EXECUTE format('ALTER TABLE orders ENABLE ALWAYS TRIGGER %I', r.tgname);
		END LOOP;
	END $$`)
	trellistest.Eventually(t, h, "per_customer")
	equal(t, h, false, "after fixtures loaded with capture bypassed, before the backfill")
	trellistest.Backfill(t, h, "orders")
	equal(t, h, true, "after the backfill")

	if _, err := h.Apply(ctx, `PAUSE TRANSFORM per_customer`); err != nil {
		t.Fatal(err)
	}
	s := trellistest.NewStandalone(t.Name())
	defer s.Close()
	for what, wait := range map[string]func(){
		"Eventually": func() { trellistest.Eventually(s, h, "per_customer") },
		"AwaitLive":  func() { trellistest.AwaitLive(s, h, "per_customer") },
	} {
		if msg := fails(wait); !strings.Contains(msg, "per_customer: paused") {
			t.Errorf("%s on a paused transform: %q, want a failure naming its state", what, msg)
		}
	}
}

// equal wants the target equal to its query (want true) or not.
func equal(t *testing.T, h *trellis.Trellis, want bool, when string) {
	t.Helper()
	r, err := h.CompareNow(context.Background(), "per_customer")
	if err != nil {
		t.Fatal(err)
	}
	if r.Equal() != want {
		t.Fatalf("%s: the target equals its query: %t, want %t (missing %v, extra %v)", when, r.Equal(), want, r.MissingSample, r.ExtraSample)
	}
}
