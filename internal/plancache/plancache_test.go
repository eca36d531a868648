package plancache

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
	var c Cache
	a := &catalog.Transform{ID: 1, Plan: encode("a", 10)}
	first, err := c.Get(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tables) != 1 || first.Tables[0].OID != 10 || first.Tables[0].Key[0] != "id" {
		t.Fatalf("tables %+v, want public.a (10) keyed by id", first.Tables)
	}
	// The same bytes, read again from the catalog: the same decoded plan.
	again, err := c.Get(&catalog.Transform{ID: 1, Plan: append([]byte(nil), a.Plan...)})
	if err != nil {
		t.Fatal(err)
	}
	if again.Plan != first.Plan {
		t.Error("the same plan bytes were decoded again")
	}
	// A redefinition: decoded anew.
	changed, err := c.Get(&catalog.Transform{ID: 1, Plan: encode("b", 11)})
	if err != nil {
		t.Fatal(err)
	}
	if changed.Plan == first.Plan || changed.Tables[0].OID != 11 {
		t.Errorf("a changed plan was served from the cache: %+v", changed.Tables)
	}
	if _, err := c.Get(&catalog.Transform{ID: 2, Plan: []byte(`{`)}); err == nil {
		t.Error("a plan that does not decode gave no error")
	}
	if _, err := c.Get(&catalog.Transform{ID: 3, Plan: encode("c", 12)}); err != nil {
		t.Fatal(err)
	}
	c.Keep([]*catalog.Transform{{ID: 3}})
	if _, ok := c.m[1]; ok || len(c.m) != 1 {
		t.Errorf("after keep of transform 3 the cache holds %d plans", len(c.m))
	}
}
