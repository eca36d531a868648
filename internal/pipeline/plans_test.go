package pipeline

import (
	"testing"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// TestPlanCache: a plan is decoded once per version of its bytes, a changed
// plan is decoded again, and a dropped transform's plan is forgotten.
func TestPlanCache(t *testing.T) {
	encode := func(table string, oid uint32) []byte {
		t.Helper()
		raw, err := (&engine.Plan{Sources: []engine.Source{{Schema: "public", Name: table, OID: oid, Key: []engine.Col{{Name: "id"}}}}}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	var c planCache
	a := &catalog.Transform{ID: 1, Plan: encode("a", 10)}
	first, err := c.get(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.tables) != 1 || first.tables[0].OID != 10 || first.tables[0].Key[0] != "id" {
		t.Fatalf("tables %+v, want public.a (10) keyed by id", first.tables)
	}
	// The same bytes, read again from the catalog: the same decoded plan.
	again, err := c.get(&catalog.Transform{ID: 1, Plan: append([]byte(nil), a.Plan...)})
	if err != nil {
		t.Fatal(err)
	}
	if again.plan != first.plan {
		t.Error("the same plan bytes were decoded again")
	}
	// A redefinition: decoded anew.
	changed, err := c.get(&catalog.Transform{ID: 1, Plan: encode("b", 11)})
	if err != nil {
		t.Fatal(err)
	}
	if changed.plan == first.plan || changed.tables[0].OID != 11 {
		t.Errorf("a changed plan was served from the cache: %+v", changed.tables)
	}
	if _, err := c.get(&catalog.Transform{ID: 2, Plan: []byte(`{`)}); err == nil {
		t.Error("a plan that does not decode gave no error")
	}
	if _, err := c.get(&catalog.Transform{ID: 3, Plan: encode("c", 12)}); err != nil {
		t.Fatal(err)
	}
	c.keep([]*catalog.Transform{{ID: 3}})
	if _, ok := c.m[1]; ok || len(c.m) != 1 {
		t.Errorf("after keep of transform 3 the cache holds %d plans", len(c.m))
	}
}
