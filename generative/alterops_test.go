package generative

import (
	"reflect"
	"strings"
	"testing"
)

// alterFeatures names what a program draws of the ALTER and backfill
// stream: each clause, two clauses in one statement, a backfill, a kill
// or store loss right after either, writers committing across one.
func alterFeatures(p *Program) map[string]bool {
	out := map[string]bool{}
	var walk func(ss []Step, lane bool)
	walk = func(ss []Step, lane bool) {
		for i, s := range ss {
			switch s.Kind {
			case StepAlter, StepBackfill:
				out[string(s.Kind)] = true
				if lane {
					out[string(s.Kind)+" with writers"] = true
				}
				if i+2 < len(ss) && ss[i+1].Kind == StepWait && (ss[i+2].Kind == StepKill || ss[i+2].Kind == StepLoseStore) {
					out[string(s.Kind)+" then crash"] = true
				}
				for _, st := range s.Stmts {
					if _, cs, ok := splitAlter(st); ok {
						for _, c := range cs {
							out[strings.ToLower(strings.Fields(c)[0])] = true
						}
						if len(cs) > 1 {
							out["two clauses"] = true
						}
					}
				}
			}
			for _, l := range s.Lanes {
				walk(l, true)
			}
		}
	}
	walk(p.Steps, false)
	return out
}

var alterFeatureNames = []string{"alter", "backfill", "alter with writers", "backfill with writers", "alter then crash",
	"backfill then crash", "add", "drop", "alter", "two clauses"}

// TestAlterPrograms: across seeds, programs of the profiles that kill or
// redefine draw every form of the stream, about alterProgramPct in a
// hundred of them; the other profiles draw none.
func TestAlterPrograms(t *testing.T) {
	all := map[string]bool{}
	drew, eligible := 0, 0
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 60; seed++ {
			p := Generate(seed, prof)
			f := alterFeatures(p)
			if !alterEligible(prof) {
				if len(f) > 0 {
					t.Fatalf("%s/seed=%d draws %v; profile %s draws no kill or lifecycle event", prof.Name, seed, f, prof.Name)
				}
				continue
			}
			eligible++
			if len(f) > 0 {
				drew++
			}
			for k := range f {
				all[k] = true
			}
		}
	}
	for _, n := range alterFeatureNames {
		if !all[n] {
			t.Errorf("no program draws %q (drawn: %v)", n, all)
		}
	}
	if drew == 0 || drew > eligible/2 && alterPctEnv() < 0 {
		t.Errorf("%d of %d eligible programs draw the stream, want about %d in a hundred", drew, eligible, alterProgramPct)
	}
	t.Logf("%d of %d eligible programs draw ALTER or backfill steps", drew, eligible)
}

// TestFastLaneAlterDraws: no fixed case of the fast lane passes the
// stream's gate, so each draws the program it was chosen for.
func TestFastLaneAlterDraws(t *testing.T) {
	if alterPctEnv() >= 0 {
		t.Skip("TRELLIS_GEN_ALTER_PCT is set: the gate is not the default")
	}
	for _, c := range FastLaneCases() {
		p, err := c.Program()
		if err != nil {
			t.Fatal(err)
		}
		if f := alterFeatures(p); len(f) > 0 {
			t.Errorf("%s draws %v: the ALTER stream changed a fixed case", c, f)
		}
	}
}

// TestAlterDrawnApart: a program the gate lets in is the program without
// the stream plus the stream's steps (the main stream's draws stay).
func TestAlterDrawnApart(t *testing.T) {
	landed := 0
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 40; seed++ {
			with := newGen(seed, prof)
			p := with.program(seed)
			without := newGen(seed, prof)
			without.as = nil
			q := without.program(seed)
			if with.as == nil {
				if p.Format() != q.Format() {
					t.Fatalf("%s/seed=%d: the gate left the program out and it changed", prof.Name, seed)
				}
				continue
			}
			landed++
			if got, want := stripAlter(p.Steps, with.as.spans), q.Steps; !reflect.DeepEqual(got, want) {
				pp, qq := p.Clone(), q.Clone()
				pp.Steps = got
				t.Fatalf("%s/seed=%d: without the stream's steps the program differs:\n%s\n---- without the stream ----\n%s", prof.Name, seed, pp.Format(), qq.Format())
			}
		}
	}
	if landed == 0 {
		t.Error("the stream drew nothing")
	}
}

// stripAlter removes the spans of steps the stream appended.
func stripAlter(ss []Step, spans [][2]int) []Step {
	var out []Step
	for i := 0; i < len(ss); i++ {
		in := false
		for _, sp := range spans {
			in = in || i >= sp[0] && i < sp[1]
		}
		if !in {
			out = append(out, ss[i])
		}
	}
	return out
}

// newGenApart is newGen without the ALTER stream, for the tests that turn
// another stream off: the ALTER stream picks among the definitions the
// others drew, so it draws differently when one of them is off.
func newGenApart(seed int64, prof Profile) *gen {
	g := newGen(seed, prof)
	g.as = nil
	return g
}

func TestSplitAlter(t *testing.T) {
	for _, c := range []struct {
		st, head string
		clauses  []string
	}{
		{`ALTER TRANSFORM t3 ADD alt1_n AS (coalesce(c2, 0))::numeric`, `ALTER TRANSFORM t3`, []string{`ADD alt1_n AS (coalesce(c2, 0))::numeric`}},
		{`ALTER TRANSFORM "Big Groups" DROP alt2_t, ALTER alt3_b AS (c1 IN (1, 2))::boolean`, `ALTER TRANSFORM "Big Groups"`, []string{`DROP alt2_t`, `ALTER alt3_b AS (c1 IN (1, 2))::boolean`}},
	} {
		head, cs, ok := splitAlter(c.st)
		if !ok || head != c.head || !reflect.DeepEqual(cs, c.clauses) {
			t.Errorf("splitAlter(%s) = %q %q %v", c.st, head, cs, ok)
		}
	}
	if _, _, ok := splitAlter("CREATE TRANSFORM t AS SELECT 1"); ok {
		t.Error("splitAlter took a CREATE")
	}
}
