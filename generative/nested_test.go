package generative

import (
	"strings"
	"testing"
)

// nestedFeatureNames are what the nested stream's definitions draw
// (nested.go) that TestNestedPrograms requires across seeds.
var nestedFeatureNames = []string{
	"2 deep", "3 deep", "*", "w.*", "column list", "alias list", "renamed", "computed in a wrapper",
	"constant", "coalesce", "IS NOT NULL", "CASE", "arithmetic", "WHERE inside",
	"NULL-extended LEFT JOIN", "NULL-extended RIGHT JOIN", "NULL-extended FULL JOIN",
	"preserved LEFT JOIN", "preserved RIGHT JOIN",
	"NULL-extended computed", "NULL-extended WHERE", "NULL-extended below a pass-through wrapper",
	"NULL-extended non-strict output read", "NULL-extended non-strict output read below a pass-through wrapper",
	"both sides", "link", "self", "USING", "filter above", "aggregate",
}

// TestNestedPrograms: across seeds, the nested stream draws derived tables
// nested two and three deep with every kind of output and wrapper, on
// every side of every outer join kind; the fast lane's fixed cases draw a
// non-strict output of a NULL-extended derived table below a pass-through
// wrapper, read by the query (what the planted flatten_nullable_computed
// gets wrong); no definition names a hidden column.
func TestNestedPrograms(t *testing.T) {
	all := map[string]bool{}
	missing := func() (out []string) {
		for _, f := range nestedFeatureNames {
			if !all[f] {
				out = append(out, f)
			}
		}
		return out
	}
	// The nested stream is seeded by the seed alone: profiles differ in
	// what it lands on, not in what it draws.
	const seeds = 150
	for seed := int64(0); seed < seeds && len(missing()) > 0; seed++ {
		for _, prof := range Profiles() {
			_, g := generate(seed, prof)
			for _, d := range g.nested {
				for f := range d.feats {
					all[f] = true
				}
				if strings.Contains(d.sql, "__") {
					t.Errorf("%s/seed=%d: %s names a hidden column", prof.Name, seed, d.sql)
				}
			}
		}
	}
	if m := missing(); len(m) > 0 {
		t.Errorf("the programs of %d seeds draw no nested derived table with %s", seeds, strings.Join(m, ", "))
	}
	lane := map[string]bool{}
	for _, c := range FastLaneCases() {
		prof, _ := ProfileByName(c.Profile)
		_, g := generate(c.Seed, prof)
		for _, d := range g.nested {
			for f := range d.feats {
				lane[f] = true
			}
		}
	}
	for _, f := range []string{"NULL-extended non-strict output read below a pass-through wrapper", "3 deep", "NULL-extended LEFT JOIN", "NULL-extended RIGHT JOIN"} {
		if !lane[f] {
			t.Errorf("the fast lane's fixed cases draw no nested derived table with %s", f)
		}
	}
}

// TestNestedDrawnApart: the nested stream only replaces the definitions
// it lands on: a program drawn with it and without it has the same steps
// and statements but for those definitions. (Profile "ddl" is left out:
// which column a retype picks follows the definitions that read it.)
func TestNestedDrawnApart(t *testing.T) {
	landed := 0
	for _, prof := range Profiles() {
		if prof.Name == "ddl" {
			continue
		}
		for seed := int64(0); seed < 30; seed++ {
			with := newGenApart(seed, prof)
			p := with.program(seed)
			without := newGenApart(seed, prof)
			without.nestedPct = 0
			q := without.program(seed)
			a, b := strings.Split(p.Format(), "\n"), strings.Split(q.Format(), "\n")
			if len(a) != len(b) {
				t.Fatalf("%s/seed=%d: %d lines with the nested stream, %d without", prof.Name, seed, len(a), len(b))
			}
			differ := 0
			for i := range a {
				if a[i] == b[i] {
					continue
				}
				_, _, sel := splitDefinition(strings.TrimSpace(a[i]))
				_, _, was := splitDefinition(strings.TrimSpace(b[i]))
				if sel == "" || was == "" {
					t.Fatalf("%s/seed=%d: line %d differs and is no definition:\n%s\n%s", prof.Name, seed, i, a[i], b[i])
				}
				differ++
			}
			if differ > len(with.nested) {
				t.Errorf("%s/seed=%d: %d definitions differ, %d drawn by the nested stream", prof.Name, seed, differ, len(with.nested))
			}
			landed += len(with.nested)
		}
	}
	if landed == 0 {
		t.Error("the nested stream drew nothing")
	}
}
