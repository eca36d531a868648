package trellis_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestTwoHandles: two instances of one database in one process, with a
// transform of the same name in each (in their own target schemas) and a
// Metrics shared by both, run side by side: neither sees the other's
// transforms, series or store; Definitions says what reads what; StatusOf
// finds a transform by its table; Close stops one handle's pipeline (the
// other keeps converging), is idempotent, and calls after it are
// validation errors (ADR 0040).
func TestTwoHandles(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := trellis.NewMetrics(reg)
	a := newEnvOn(t, dsn, trellis.Config{Schema: "inst_a", TargetSchema: "a_out", Metrics: m})
	a.exec(`CREATE SCHEMA a_out; CREATE SCHEMA b_out;` + schemaSQL)
	a.exec(`INSERT INTO orders SELECT g, g % 7, 'new', g % 50, g % 4, NULL FROM generate_series(1, 200) g`)
	b := newEnvOn(t, dsn, trellis.Config{Schema: "inst_b", TargetSchema: "b_out", Metrics: m})
	a.apply(`CREATE TRANSFORM totals AS SELECT customer, sum(amount) AS amount FROM orders GROUP BY customer;
CREATE TRANSFORM only_a AS SELECT customer FROM totals WHERE amount > 100`)
	b.apply(`CREATE TRANSFORM totals AS SELECT customer, count(*) AS n FROM orders GROUP BY customer;
CREATE TRANSFORM only_b AS SELECT id FROM orders WHERE qty = 0`)
	a.start()
	b.start()
	a.converge("instance a, built")
	b.converge("instance b, built")

	defs, err := a.tr.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range defs {
		got = append(got, d.Schema+"."+d.Name+" reads "+strings.Join(d.Reads, ",")+" read by "+strings.Join(d.ReadBy, ","))
	}
	if want := []string{"a_out.totals reads  read by only_a", "a_out.only_a reads totals read by "}; !slices.Equal(got, want) {
		t.Fatalf("instance a's definitions: %q, want %q", got, want)
	}
	st, err := a.tr.StatusOf(ctx, "a_out.totals")
	if err != nil || st == nil || st.Name != "totals" || st.Schema != "a_out" {
		t.Fatalf("StatusOf(a_out.totals): %+v %v", st, err)
	}
	if st, err := a.tr.StatusOf(ctx, "b_out.totals"); err != nil || st != nil {
		t.Fatalf("StatusOf of the other instance's target: %+v %v, want nil", st, err)
	}
	if st, err := a.tr.StatusOf(ctx, "orders"); err != nil || st != nil {
		t.Fatalf("StatusOf of a source table: %+v %v, want nil", st, err)
	}
	// Each instance's series carry its own transforms only.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			var inst, tr string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "trellis_instance":
					inst = l.GetValue()
				case "transform":
					tr = l.GetValue()
				}
			}
			if tr != "" {
				seen[inst[strings.Index(inst, "/")+1:]+":"+tr] = true
			}
		}
	}
	for _, want := range []string{"inst_a:totals", "inst_a:only_a", "inst_b:totals", "inst_b:only_b"} {
		if !seen[want] {
			t.Errorf("no series for %s", want)
		}
	}
	if seen["inst_a:only_b"] || seen["inst_b:only_a"] {
		t.Errorf("an instance's series carry the other's transform: %v", seen)
	}

	// Close ends a's Run and its work; b goes on.
	closed := make(chan struct{})
	go func() { a.tr.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatalf("Close did not return within %s", waitTimeout)
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("a's Run after Close: %v", err)
		}
		a.cancel = nil
	case <-time.After(waitTimeout):
		t.Fatalf("a's Run did not return within %s of its handle closing", waitTimeout)
	}
	a.tr.Close() // again: nothing happens
	if _, err := a.tr.Status(ctx); trellis.CodeOf(err) != trellis.CodeValidation {
		t.Fatalf("Status after Close: %v, want validation", err)
	}
	if _, err := a.tr.Apply(ctx, `DROP TRANSFORM only_a`); trellis.CodeOf(err) != trellis.CodeValidation {
		t.Fatalf("Apply after Close: %v, want validation", err)
	}
	if err := a.tr.Run(ctx); trellis.CodeOf(err) != trellis.CodeValidation {
		t.Fatalf("Run after Close: %v, want validation", err)
	}
	b.exec(`UPDATE orders SET qty = 0 WHERE id % 5 = 0; DELETE FROM orders WHERE id % 11 = 0`)
	b.converge("instance b, after a closed")
	if n := b.queryInt(`SELECT count(*) FROM inst_a.transforms`); n != 2 {
		t.Fatalf("instance a's catalog holds %d transforms after b's work, want its 2", n)
	}
}
