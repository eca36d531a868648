package generative

import (
	"strings"
	"testing"
)

// nullableKinds are the levels keyed by columns that may be NULL that
// chains draw (chainLevel.kind), and "kill between", a kill or store loss
// between the apply of such a level and its reader's.
var nullableKinds = []string{"nullable group", "nullable expression", "total", "outer join", "outer join of a level",
	"NULL-safe join back", "kill between"}

// nullableFeatures names what the chains of a program draw of
// nullableKinds.
func nullableFeatures(p *Program, g *gen) map[string]bool {
	out := map[string]bool{}
	for _, chain := range g.chains {
		for _, l := range chain {
			if l.kind != "" {
				out[l.kind] = true
			}
		}
		if nullableKilled(p, chain) {
			out["kill between"] = true
		}
	}
	return out
}

// nullableKilled: a kill or store loss comes between the first apply of a
// nullable level of chain and the first apply of the level reading it.
func nullableKilled(p *Program, chain []*chainLevel) bool {
	first := func(name string) int {
		for i, s := range p.Steps {
			for _, st := range s.Stmts {
				if s.Kind == StepApply && strings.HasPrefix(st, "CREATE TRANSFORM "+name+" AS ") {
					return i
				}
			}
		}
		return -1
	}
	for i := 0; i+1 < len(chain); i++ {
		if !chain[i].nullable {
			continue
		}
		a, b := first(chain[i].name), first(chain[i+1].name)
		for j := a + 1; a >= 0 && j < b; j++ {
			if k := p.Steps[j].Kind; k == StepKill || k == StepLoseStore {
				return true
			}
		}
	}
	return false
}

// TestNullableChainPrograms: across seeds, chains draw every kind of level
// keyed by columns that may be NULL that a further level reads, readers
// joining them back NULL-safely, and kills between such a level and its
// reader; the fast lane's fixed cases draw such a chain with a kill
// between its levels. No generated definition names the hidden __id.
func TestNullableChainPrograms(t *testing.T) {
	all := map[string]bool{}
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 40; seed++ {
			p, g := generate(seed, prof)
			for f := range nullableFeatures(p, g) {
				all[f] = true
			}
			for _, chain := range g.chains {
				for _, l := range chain {
					if strings.Contains(l.sql, "__id") {
						t.Errorf("%s/seed=%d: %s names the hidden __id", prof.Name, seed, l.create())
					}
				}
			}
		}
	}
	for _, f := range nullableKinds {
		if !all[f] {
			t.Errorf("%d programs have no chain with a %s", 40*len(Profiles()), f)
		}
	}
	lane := map[string]bool{}
	for _, c := range FastLaneCases() {
		prof, _ := ProfileByName(c.Profile)
		p, g := generate(c.Seed, prof)
		for f := range nullableFeatures(p, g) {
			lane[f] = true
		}
	}
	if !lane["kill between"] {
		t.Errorf("the fast lane's fixed cases have no chain with a kill between a nullable-keyed level and its reader (drew %v)", lane)
	}
}

// TestNullableChainsDrawnApart: a chain drawn again with a nullable level
// keeps the names, the number of levels and the steps of the chain as the
// feature stream drew it (only definitions change, and fresh rows may be
// added), and a level marked nullable is not the target's primary key.
func TestNullableChainsDrawnApart(t *testing.T) {
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 40; seed++ {
			_, g := generate(seed, prof)
			if len(g.chains) != len(g.chainsDrawn) {
				t.Fatalf("%s/seed=%d: %d chains, %d drawn", prof.Name, seed, len(g.chains), len(g.chainsDrawn))
			}
			for i, chain := range g.chains {
				drawn := g.chainsDrawn[i]
				if len(chain) != len(drawn) {
					t.Errorf("%s/seed=%d: chain %d has %d levels, drawn %d", prof.Name, seed, i, len(chain), len(drawn))
					continue
				}
				for j, l := range chain {
					if l.name != drawn[j].name || l.level != drawn[j].level {
						t.Errorf("%s/seed=%d: level %s (%d) was drawn as %s (%d)", prof.Name, seed, l.name, l.level, drawn[j].name, drawn[j].level)
					}
					if l.nullable && l.pk {
						t.Errorf("%s/seed=%d: %s is nullable and keyed by its primary key", prof.Name, seed, l.name)
					}
				}
			}
		}
	}
}
