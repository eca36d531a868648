package generative

import (
	"strings"
	"testing"
)

// poisonGuard reports whether a statement reads the poison guard (a row
// holding a poisoned value), as only poison statements do.
func poisonGuard(st string) bool {
	return strings.Contains(st, ") >= 500") || strings.Contains(st, ") LIKE 'poison%'")
}

// poisonedValue reports whether a SET value is a poisoned one.
func poisonedValue(v string) bool {
	v = strings.TrimPrefix(v, "-")
	return v == "500" || v == "777" || v == "4096" || strings.HasPrefix(strings.ToLower(v), "'poison")
}

// poisonFeatures names what a program draws of the poison stream, read
// from its statements: the poisoned transforms (a CHECK on the target, a
// division by zero), poison statements (a poisoned row inserted, a good
// row poisoned, one corrected, deleted, moved to another poisoned value),
// transactions mixing them with good rows, poison writes in a lane beside
// writers, and poisoned rows a build meets.
func poisonFeatures(p *Program) map[string]bool {
	out := map[string]bool{}
	defined := false
	var walk func(ss []Step, lane bool)
	walk = func(ss []Step, lane bool) {
		for _, s := range ss {
			writes, others := 0, 0
			for _, st := range s.Stmts {
				switch {
				case strings.HasPrefix(st, "ALTER TABLE ") && strings.Contains(st, "_poison CHECK ("):
					out["poison check"] = true
				case strings.HasPrefix(st, "CREATE TRANSFORM p") && strings.Contains(st, "100 / ("):
					out["poison division"] = true
				}
				if strings.HasPrefix(st, "CREATE TRANSFORM p0 ") {
					defined = true
				}
				if defined && (st == "RESUME TRANSFORM p0" || st == "RESUME TRANSFORM p1") {
					out["poison rebuild"] = true
				}
				if !poisonGuard(st) {
					others++
					continue
				}
				counted := strings.Contains(st, "(SELECT count(*) FROM ")
				switch {
				case strings.HasPrefix(st, "INSERT "):
					out["poison insert"] = true
				case strings.HasPrefix(st, "DELETE "):
					out["poison delete"] = true
				case strings.HasPrefix(st, "UPDATE ") && counted:
					out["poison update"] = true
				case strings.HasPrefix(st, "UPDATE "):
					set := st[strings.Index(st, " SET ")+5 : strings.Index(st, " WHERE ")]
					if poisonedValue(set[strings.Index(set, " = ")+3:]) {
						out["poison moved"] = true
					} else {
						out["poison correct"] = true
					}
				}
				if counted {
					writes++
					if lane {
						out["poison in a lane"] = true
					}
					if !defined {
						out["poison before the build"] = true
					}
				}
			}
			if s.Kind == StepTxn && writes > 0 && others > 0 {
				out["poison mixed batch"] = true
			}
			for _, l := range s.Lanes {
				walk(l, true)
			}
		}
	}
	walk(p.Steps, false)
	return out
}

// TestPoisonPrograms: about a quarter of the programs outside profile
// "poison" draw poison, all of profile "poison" do, and the poisoned
// table is never truncated (avoidTruncate).
func TestPoisonPrograms(t *testing.T) {
	n, poisoned := 0, 0
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 40; seed++ {
			p := Generate(seed, prof)
			f := poisonFeatures(p)
			has := f["poison check"] || f["poison division"]
			if prof.Name == "poison" && !has {
				t.Errorf("%s/seed=%d draws no poison", prof.Name, seed)
			}
			if prof.Name != "poison" {
				n++
				if has {
					poisoned++
				}
			}
		}
	}
	if poisoned*6 < n || poisoned*3 > n {
		t.Errorf("%d of %d programs draw poison; want about a quarter", poisoned, n)
	}
}

// TestFastLanePoisonDraws: the fixed cases that predate poison draw none,
// so they draw what they drew and catch what they were chosen for.
func TestFastLanePoisonDraws(t *testing.T) {
	for _, c := range FastLaneCases() {
		if c.Profile == "poison" {
			continue
		}
		p, err := c.Program()
		if err != nil {
			t.Fatal(err)
		}
		if f := poisonFeatures(p); len(f) > 0 {
			t.Errorf("%s: draws poison %v: the poison stream changed a fixed case", c, f)
		}
	}
}

func TestGuardDivisions(t *testing.T) {
	for _, c := range []struct{ in, safe, zero string }{
		{"100 / (c3 - 777)", "100 / nullif((c3 - 777), 0)", "((c3 - 777) = 0)"},
		{`(100 / ("a b" + 500))`, `(100 / nullif(("a b" + 500), 0))`, `(("a b" + 500) = 0)`},
		{"'a / (b)' || c", "'a / (b)' || c", ""},
		{"x / nullif(y, 0)", "x / nullif(y, 0)", ""},
	} {
		safe, zeros := guardDivisions(c.in)
		if safe != c.safe || strings.Join(zeros, " OR ") != c.zero {
			t.Errorf("guardDivisions(%q) = %q, %q; want %q, %q", c.in, safe, zeros, c.safe, c.zero)
		}
	}
}

func TestAvoidTruncate(t *testing.T) {
	pz := &table{name: `"T"`}
	steps := []Step{{Kind: StepTxn, Stmts: []string{`TRUNCATE s0, "T"`, "TRUNCATE s1", `TRUNCATE "T"`}},
		{Kind: StepConcurrent, Lanes: [][]Step{{{Kind: StepTxn, Stmts: []string{`TRUNCATE "T", s0`}}}}}}
	avoidTruncate(steps, pz)
	want := []string{"TRUNCATE s0", `DELETE FROM "T"`, "TRUNCATE s1", `DELETE FROM "T"`}
	if strings.Join(steps[0].Stmts, "; ") != strings.Join(want, "; ") {
		t.Errorf("avoidTruncate: %q", steps[0].Stmts)
	}
	if got := strings.Join(steps[1].Lanes[0][0].Stmts, "; "); got != `TRUNCATE s0; DELETE FROM "T"` {
		t.Errorf("avoidTruncate in a lane: %q", got)
	}
}
