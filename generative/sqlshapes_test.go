package generative

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestShapesAccepted (TRELLIS_GEN_SHAPES_CHECK=N, off by default): the
// shapes stream's definitions of N seeds per profile, every definition a
// shape, are accepted by Apply over their program's schema and rows.
func TestShapesAccepted(t *testing.T) {
	n := envInt("TRELLIS_GEN_SHAPES_CHECK", 0)
	if n == 0 {
		t.Skip("set TRELLIS_GEN_SHAPES_CHECK to apply the shapes of that many seeds per profile")
	}
	applyDrawn(t, n, func(g *gen) { g.shapesPct = 100 }, func(g *gen) []shapeDef { return g.shapeDefs })
}

// applyDrawn applies, for n seeds of three profiles, the definitions
// drawn (a generator set up by setup, its draws read by drawn) over
// their program's schema and the rows written before its first
// definition; each refusal is an error.
func applyDrawn(t *testing.T, n int64, setup func(*gen), drawn func(*gen) []shapeDef) {
	env := shared.get(t)
	ctx := context.Background()
	bad, total := 0, 0
	for _, pn := range []string{"mixed", "join", "batch"} {
		prof, _ := ProfileByName(pn)
		for seed := int64(0); seed < n; seed++ {
			g := newGen(seed, prof)
			setup(g)
			p := g.program(seed)
			name, dsn, err := env.createDatabase(ctx, seed)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			applied := false
			for _, s := range p.Steps {
				// Every table, created before the definitions or after
				// (a poison program's own); the rows before them.
				applied = applied || s.Kind == StepApply || s.Kind == StepStart
				if applied && s.Kind != StepSQL {
					continue
				}
				for _, st := range s.Stmts {
					if _, err := conn.Exec(ctx, st); err != nil {
						_ = err // a key conflict, a savepoint outside a transaction: no matter
					}
				}
			}
			conn.Close(ctx)
			tr, err := trellis.Open(ctx, trellis.Config{DSN: dsn})
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range drawn(g) {
				if d.feats["in a chain"] {
					continue
				}
				total++
				if _, err := tr.Apply(ctx, fmt.Sprintf("CREATE TRANSFORM z%d AS %s", i, d.sql)); err != nil {
					bad++
					t.Errorf("%s/seed=%d: %v\n  %s", pn, seed, err, d.sql)
				}
			}
			tr.Close()
			if err := env.dropDatabase(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d of %d definitions refused", bad, total)
}

// shapeFeatureNames are what the shapes stream draws (sqlshapes.go) that
// TestShapePrograms requires across seeds.
var shapeFeatureNames = []string{
	"EXISTS", "NOT EXISTS", "IN", "NOT IN", "NOT IN nullable", "scalar in WHERE", "scalar in select list",
	"subquery under OR", "aggregate over a subquery filter", "set operation in IN",
	"UNION ALL", "UNION", "INTERSECT", "EXCEPT", "three branches", "nested set operation", "set operation in FROM",
	"rank", "dense_rank", "row_number", "lag", "lead", "first_value", "ntile", "ROWS frame", "sum OVER", "count OVER", "max OVER",
	"window over all rows", "window filter", "window in FROM",
	"top-K", "OFFSET", "DISTINCT ON", "top-K over groups", "top-K over a set operation",
	"WITH once", "WITH twice", "derived projection", "derived aggregate", "nested", "in a chain",
}

// TestShapePrograms: across seeds, the shapes stream draws every shape;
// no definition names a hidden column.
func TestShapePrograms(t *testing.T) {
	all := map[string]bool{}
	missing := func() (out []string) {
		for _, f := range shapeFeatureNames {
			if !all[f] {
				out = append(out, f)
			}
		}
		return out
	}
	const seeds = 500
	for seed := int64(0); seed < seeds && len(missing()) > 0; seed++ {
		for _, prof := range Profiles() {
			_, g := generate(seed, prof)
			for _, d := range g.shapeDefs {
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
		t.Errorf("the programs of %d seeds draw no shape with %s", seeds, strings.Join(m, ", "))
	}
}

// TestShapesDrawnApart: the shapes stream only replaces the definitions
// it lands on. (Profile "ddl" is left out: which column a retype picks
// follows the definitions that read it.)
func TestShapesDrawnApart(t *testing.T) {
	landed := 0
	for _, prof := range Profiles() {
		if prof.Name == "ddl" {
			continue
		}
		for seed := int64(0); seed < 30; seed++ {
			with := newGenApart(seed, prof)
			p := with.program(seed)
			without := newGenApart(seed, prof)
			without.shapesPct = 0
			q := without.program(seed)
			a, b := strings.Split(p.Format(), "\n"), strings.Split(q.Format(), "\n")
			if len(a) != len(b) {
				t.Fatalf("%s/seed=%d: %d lines with the shapes stream, %d without", prof.Name, seed, len(a), len(b))
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
			if differ > len(with.shapeDefs) {
				t.Errorf("%s/seed=%d: %d definitions differ, %d drawn by the shapes stream", prof.Name, seed, differ, len(with.shapeDefs))
			}
			landed += len(with.shapeDefs)
		}
	}
	if landed == 0 {
		t.Error("the shapes stream drew nothing")
	}
}
