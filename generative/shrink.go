package generative

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Shrinker reduces a failing program to a small one that fails the same
// way, re-running every candidate on a fresh database (delta debugging
// over steps, statements, lanes, tables and select-list items).
type Shrinker struct {
	Env *Env
	// Budget bounds the whole shrink; the best program so far is kept.
	Budget time.Duration
	// Logf, when set, reports progress.
	Logf func(format string, args ...any)
	// Attempts runs each candidate up to this many times (default 1): a
	// timing-dependent failure counts if any attempt reproduces it.
	Attempts int

	deadline time.Time
	tries    int
}

// Shrink returns the smallest failing program it found, its failure and
// how many candidates it ran. A failure of kind "setup" is not shrunk.
func (s *Shrinker) Shrink(ctx context.Context, p *Program, f *Failure) (*Program, *Failure, int) {
	if f == nil || f.Kind == "setup" {
		return p, f, 0
	}
	s.deadline = time.Now().Add(s.Budget)
	best, bestF := p.Clone(), f
	test := func(c *Program) bool {
		if time.Now().After(s.deadline) || ctx.Err() != nil {
			return false
		}
		for a := 0; a < max(1, s.Attempts); a++ {
			s.tries++
			res := s.Env.Run(ctx, c)
			if res.Failure != nil && res.Failure.Kind == f.Kind {
				best, bestF = c.Clone(), res.Failure
				s.logf("shrink: %d steps, %d ops still fail (%s at %s)", len(c.Steps), c.Ops(), res.Failure.Kind, res.Failure.Step)
				return true
			}
		}
		return false
	}
	// Steps after the failing one do not matter.
	if i, err := strconv.Atoi(strings.SplitN(f.Step, "/", 2)[0]); err == nil && i+1 < len(best.Steps) {
		c := best.Clone()
		c.Steps = c.Steps[:i+1]
		test(c)
	}
	for round := 0; ; round++ {
		before := best.Format()
		s.shrinkSteps(&best, test)
		s.shrinkInside(&best, test)
		s.dropEmpty(&best, test)
		s.shrinkConfig(&best, test)
		if best.Format() == before || time.Now().After(s.deadline) {
			break
		}
	}
	return best, bestF, s.tries
}

func (s *Shrinker) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// ddmin removes chunks of items while test still fails, halving the chunk
// size when no chunk can go.
func ddmin[T any](items []T, test func([]T) bool) []T {
	n := 2
	for len(items) > 0 {
		chunk := (len(items) + n - 1) / n
		reduced := false
		for start := 0; start < len(items); start += chunk {
			end := min(start+chunk, len(items))
			cand := append(append([]T(nil), items[:start]...), items[end:]...)
			if test(cand) {
				items = cand
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if chunk == 1 {
				break
			}
			n = min(n*2, len(items))
		}
	}
	return items
}

func (s *Shrinker) shrinkSteps(best **Program, test func(*Program) bool) {
	base := *best
	steps := ddmin(base.Steps, func(ss []Step) bool {
		c := base.Clone()
		c.Steps = cloneSteps(ss)
		return test(c)
	})
	_ = steps
}

// shrinkInside shrinks each step's contents: statements, lanes (first by
// running them one after another), tables and definitions.
func (s *Shrinker) shrinkInside(best **Program, test func(*Program) bool) {
	for i := 0; i < len((*best).Steps); i++ {
		if time.Now().After(s.deadline) {
			return
		}
		st := (*best).Steps[i]
		switch st.Kind {
		case StepConcurrent:
			// Sequential lanes are deterministic: try them first.
			c := (*best).Clone()
			var flat []Step
			for _, l := range st.Lanes {
				flat = append(flat, l...)
			}
			c.Steps = append(append(append([]Step(nil), c.Steps[:i]...), flat...), c.Steps[i+1:]...)
			if test(c) {
				i-- // look at the same position again
				continue
			}
			base := *best
			ddmin(st.Lanes, func(ls [][]Step) bool {
				c := base.Clone()
				c.Steps[i].Lanes = ls
				return test(c)
			})
			for li := range (*best).Steps[i].Lanes {
				base := *best
				ddmin(base.Steps[i].Lanes[li], func(ss []Step) bool {
					c := base.Clone()
					c.Steps[i].Lanes[li] = cloneSteps(ss)
					return test(c)
				})
			}
		case StepSQL, StepApply, StepTxn, StepHeld, StepAlter, StepBackfill:
			base := *best
			ddmin(st.Stmts, func(ss []string) bool {
				c := base.Clone()
				c.Steps[i].Stmts = append([]string(nil), ss...)
				return test(c)
			})
			if st.Kind == StepApply {
				s.shrinkDefinitions(best, i, test)
			}
			if st.Kind == StepAlter {
				s.shrinkAlter(best, i, test)
			}
			if st.Kind == StepTxn || st.Kind == StepHeld {
				if (*best).Steps[i].Rollback || (*best).Steps[i].NoSavepoints {
					c := (*best).Clone()
					c.Steps[i].Rollback, c.Steps[i].NoSavepoints = false, false
					test(c)
				}
			}
			if st.Kind == StepHeld {
				c := (*best).Clone()
				c.Steps[i].Kind, c.Steps[i].Arg, c.Steps[i].Open = StepTxn, 0, false
				test(c)
			}
		case StepSwitch:
			if st.Crash {
				c := (*best).Clone()
				c.Steps[i].Crash = false
				test(c)
			}
		case StepKill:
			if st.Arg > 0 {
				c := (*best).Clone()
				c.Steps[i].Arg = 0
				test(c)
			}
		}
	}
}

// shrinkDefinitions drops WHERE clauses and select-list items of the
// CREATE TRANSFORM statements of step i.
func (s *Shrinker) shrinkDefinitions(best **Program, i int, test func(*Program) bool) {
	for j := 0; j < len((*best).Steps[i].Stmts); j++ {
		st := (*best).Steps[i].Stmts[j]
		kind, _, sel := splitDefinition(st)
		if kind != "create" {
			continue
		}
		head := strings.TrimSuffix(st, sel)
		if w := topLevelIndex(sel, " WHERE "); w >= 0 {
			rest := sel[w+len(" WHERE "):]
			cut := sel[:w]
			if g := topLevelIndex(rest, " GROUP BY "); g >= 0 {
				cut += rest[g:]
			}
			c := (*best).Clone()
			c.Steps[i].Stmts[j] = head + cut
			if test(c) {
				st, sel = c.Steps[i].Stmts[j], cut
			}
		}
		from := topLevelIndex(sel, " FROM ")
		if !strings.HasPrefix(sel, "SELECT ") || from < 0 {
			continue
		}
		items := splitTopLevel(sel[len("SELECT "):from], ',')
		for k := range items {
			items[k] = strings.TrimSpace(items[k])
		}
		tail := sel[from:]
		if len(items) < 2 {
			continue
		}
		base := *best
		ddmin(items, func(its []string) bool {
			if len(its) == 0 {
				return false
			}
			c := base.Clone()
			c.Steps[i].Stmts[j] = head + "SELECT " + strings.Join(its, ", ") + tail
			return test(c)
		})
	}
}

// shrinkAlter drops clauses of the ALTER TRANSFORM statements of step i.
func (s *Shrinker) shrinkAlter(best **Program, i int, test func(*Program) bool) {
	for j := 0; j < len((*best).Steps[i].Stmts); j++ {
		head, clauses, ok := splitAlter((*best).Steps[i].Stmts[j])
		if !ok || len(clauses) < 2 {
			continue
		}
		base := *best
		ddmin(clauses, func(cs []string) bool {
			if len(cs) == 0 {
				return false
			}
			c := base.Clone()
			c.Steps[i].Stmts[j] = head + " " + strings.Join(cs, ", ")
			return test(c)
		})
	}
}

// dropEmpty removes steps left without statements (and empty lanes).
func (s *Shrinker) dropEmpty(best **Program, test func(*Program) bool) {
	var keep func([]Step) []Step
	keep = func(ss []Step) []Step {
		var out []Step
		for _, st := range ss {
			switch st.Kind {
			case StepSQL, StepApply, StepTxn, StepHeld, StepAlter, StepBackfill:
				if len(st.Stmts) == 0 {
					continue
				}
			case StepConcurrent:
				var lanes [][]Step
				for _, l := range st.Lanes {
					if l = keep(l); len(l) > 0 {
						lanes = append(lanes, l)
					}
				}
				if len(lanes) == 0 {
					continue
				}
				st.Lanes = lanes
			}
			out = append(out, st)
		}
		return out
	}
	c := (*best).Clone()
	c.Steps = keep(c.Steps)
	if len(c.Steps) < len((*best).Steps) || c.Format() != (*best).Format() {
		test(c)
	}
}

func (s *Shrinker) shrinkConfig(best **Program, test func(*Program) bool) {
	cfg := (*best).Config
	try := func(f func(*Config)) {
		c := (*best).Clone()
		f(&c.Config)
		if c.Config != (*best).Config {
			test(c)
		}
	}
	if cfg.Stream {
		try(func(c *Config) { c.Stream = false })
	}
	if cfg.Batch != 0 {
		try(func(c *Config) { c.Batch = 0 })
	}
	if cfg.Runner == RunnerCLI {
		try(func(c *Config) { c.Runner = RunnerInProc })
	}
}

// topLevelIndex finds sep outside parentheses and quotes.
func topLevelIndex(s, sep string) int {
	depth, quote := 0, byte(0)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '(':
			depth++
		case ch == ')':
			depth--
		case depth == 0 && strings.HasPrefix(s[i:], sep):
			return i
		}
	}
	return -1
}

// splitTopLevel splits s at sep outside parentheses and quotes.
func splitTopLevel(s string, sep byte) []string {
	var out []string
	for {
		i := topLevelIndex(s, string(sep))
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i])
		s = s[i+1:]
	}
}
