package generative

import (
	"strings"
	"testing"
)

// TestDDLPrograms: profile ddl draws both kinds of DDL step, which round
// trip through the text format; no other profile draws any, so their
// seeds give the programs they gave before DDL steps existed.
func TestDDLPrograms(t *testing.T) {
	prof, _ := ProfileByName("ddl")
	modes := map[string]int{}
	for seed := int64(1); seed <= 40; seed++ {
		p := Generate(seed, prof)
		for _, s := range p.Steps {
			if s.Kind == StepDDL {
				modes[s.Mode]++
			}
		}
		q, err := Parse(p.Format())
		if err != nil || q.Format() != p.Format() {
			t.Fatalf("seed %d: the program does not round trip: %v", seed, err)
		}
	}
	if modes[ddlLossless] == 0 || modes[ddlRetype] == 0 {
		t.Fatalf("profile ddl drew %v; want both modes", modes)
	}
	for _, other := range Profiles() {
		if other.Name == "ddl" {
			continue
		}
		for seed := int64(1); seed <= 20; seed++ {
			if strings.Contains(Generate(seed, other).Format(), "@ddl") {
				t.Fatalf("profile %s seed %d draws a DDL step", other.Name, seed)
			}
		}
	}
}
