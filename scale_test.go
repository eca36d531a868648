package trellis

// Reading and defining many transforms (issue 25): status reads the whole
// instance in a fixed number of statements, and a script of definitions
// reads the catalog once, not once per definition.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// countingTracer counts the statements run through a pool and the rows
// their SELECTs returned.
type countingTracer struct{ stmts, rows atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.stmts.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.CommandTag.Select() {
		c.rows.Add(d.CommandTag.RowsAffected())
	}
}

// traced opens cfg with its pool replaced by one whose statements c
// counts (one connection, so nothing runs beside what is counted).
func traced(t *testing.T, cfg Config, c *countingTracer) *Trellis {
	t.Helper()
	ctx := context.Background()
	if cfg.CallTimeout == 0 {
		// A guard, not a timing: parallel tests on two cores wait their
		// turn for the CPU.
		cfg.CallTimeout = 5 * time.Minute
	}
	tr, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	pcfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.pool.Close()
	tr.pool = pool
	t.Cleanup(tr.Close)
	return tr
}

// scaleTables creates d and n source tables s<k>; the odd ones have no
// index on the column their join probes.
func scaleTables(t *testing.T, dsn string, from, n int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var b strings.Builder
	if from == 0 {
		b.WriteString(`CREATE TABLE d (id int PRIMARY KEY, label text NOT NULL); INSERT INTO d SELECT g, 'l' || g FROM generate_series(0, 9) g;`)
	}
	for k := from; k < from+n; k++ {
		fmt.Fprintf(&b, `CREATE TABLE s%d (id int PRIMARY KEY, g int NOT NULL, v int NOT NULL);
			INSERT INTO s%d SELECT x, x %% 12, x %% 7 FROM generate_series(1, 50) x;`, k, k)
		if k%2 == 0 {
			fmt.Fprintf(&b, `CREATE INDEX ON s%d (g);`, k)
		}
	}
	if _, err := conn.Exec(ctx, b.String()); err != nil {
		t.Fatal(err)
	}
}

// scaleDefs are the definitions over tables s<from>…: a row transform, an
// aggregate, a join, a transform chained on the row target, and one with
// an aggregating derived table (an inner level).
func scaleDefs(from, n int) string {
	var b strings.Builder
	for k := from; k < from+n; k++ {
		fmt.Fprintf(&b, `CREATE TRANSFORM r%[1]d AS SELECT id, g, v * 2 AS v2 FROM s%[1]d;
			CREATE TRANSFORM a%[1]d AS SELECT g, count(*) AS n, sum(v) AS sv FROM s%[1]d GROUP BY g;
			CREATE TRANSFORM j%[1]d AS SELECT s.id, d.label FROM s%[1]d s JOIN d ON d.id = s.g;
			CREATE TRANSFORM c%[1]d AS SELECT g, sum(v2) AS total FROM r%[1]d GROUP BY g;
			CREATE TRANSFORM l%[1]d AS SELECT x.g, x.n * 2 AS twice FROM (SELECT g, count(*) AS n FROM s%[1]d GROUP BY g) x WHERE x.n > 1;
`, k)
	}
	return b.String()
}

// TestStatusStatements: Status reads an instance of 10 or of 30 source
// tables' transforms (levels and a redefinition in progress among them)
// in the same number of statements, and reports what the per-transform
// reads reported: each join's source index gaps, each level's owner, the
// redefinition's transform.
func TestStatusStatements(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	var c countingTracer
	tr := traced(t, Config{DSN: dsn, DataDir: t.TempDir()}, &c)
	count := func() (int64, []TransformStatus) {
		t.Helper()
		if _, err := tr.Status(ctx); err != nil { // the connection's own setup is not Status's
			t.Fatal(err)
		}
		before := c.stmts.Load()
		st, err := tr.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c.stmts.Load() - before, st
	}
	scaleTables(t, dsn, 0, 2)
	if _, err := tr.Apply(ctx, scaleDefs(0, 2)+`CREATE OR REPLACE TRANSFORM a0 AS SELECT g, count(*) AS n, sum(v) + 1 AS sv FROM s0 GROUP BY g;`); err != nil {
		t.Fatal(err)
	}
	few, st := count()
	scaleTables(t, dsn, 2, 4)
	if _, err := tr.Apply(ctx, scaleDefs(2, 4)); err != nil {
		t.Fatal(err)
	}
	many, st2 := count()
	t.Logf("status of %d transforms: %d statements; of %d: %d", len(st), few, len(st2), many)
	if many != few || len(st2) <= len(st) {
		t.Fatalf("status of %d transforms ran %d statements, of %d transforms %d: want the same", len(st), few, len(st2), many)
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	all, err := tr.cat.List(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]TransformStatus{}
	for _, s := range st2 {
		byName[s.Name] = s
	}
	owners, replaces := 0, 0
	for _, o := range all {
		s := byName[o.Name]
		p, err := engine.Decode(o.Plan)
		if err != nil {
			t.Fatal(err)
		}
		want, err := engine.IndexGaps(ctx, conn, p)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(s.SourceIndexGaps) != fmt.Sprint(want) || s.Target != p.Target.Ident() {
			t.Errorf("%s: gaps %v, target %s; want %v, %s", o.Name, s.SourceIndexGaps, s.Target, want, p.Target.Ident())
		}
		if o.Owner != 0 {
			owners++
			if s.Owner == nil || !strings.HasPrefix(*s.Owner, "l") {
				t.Errorf("level %s: owner %v, want its l transform", o.Name, s.Owner)
			}
		}
		if o.Replaces != 0 {
			replaces++
			if s.Replaces == nil || *s.Replaces != "a0" {
				t.Errorf("redefinition %s: replaces %v, want a0", o.Name, s.Replaces)
			}
		}
	}
	gaps := 0
	for k := range 6 {
		gaps += len(byName[fmt.Sprintf("j%d", k)].SourceIndexGaps)
	}
	if owners != 6 || replaces != 1 || gaps != 3 {
		t.Errorf("%d levels, %d redefinitions, %d joins with a gap; want 6, 1, 3", owners, replaces, gaps)
	}

	one, err := tr.Status(ctx, "j1")
	if err != nil || len(one) != 1 || one[0].Name != "j1" || len(one[0].SourceIndexGaps) != 1 {
		t.Errorf("status j1 = %+v, %v; want j1 with its gap", one, err)
	}
	if _, err := tr.Status(ctx, "j1", "nope"); terr.CodeOf(err) != terr.NotFound {
		t.Errorf("status of a missing transform: %v, want not_found", err)
	}
}

// TestApplyReadsLinear: a script of definitions reads the catalog once,
// not once per definition: the rows Apply reads grow linearly with the
// definitions (each used to List, and decode, every transform), and
// chains, levels and * over a target defined in the same script still
// resolve against what the script created before them.
func TestApplyReadsLinear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reads := map[int]int64{}
	took := map[int]time.Duration{}
	for _, n := range []int{4, 16} {
		dsn := pgtest.NewDatabase(t)
		scaleTables(t, dsn, 0, n)
		var c countingTracer
		tr := traced(t, Config{DSN: dsn, DataDir: t.TempDir()}, &c)
		start := time.Now()
		res, err := tr.Apply(ctx, scaleDefs(0, n)+`CREATE TRANSFORM star0 AS SELECT * FROM r0;`)
		if err != nil {
			t.Fatal(err)
		}
		took[n] = time.Since(start)
		if len(res) != 5*n+1 {
			t.Fatalf("%d results for %d statements", len(res), 5*n+1)
		}
		reads[n] = c.rows.Load()
		defs, err := tr.Definitions(ctx, "star0")
		if err != nil || len(defs) != 1 || !slices.Equal(defs[0].Columns, []string{"id", "g", "v2"}) {
			t.Errorf("star0 over r0: %+v, %v; want r0's visible columns", defs, err)
		}
	}
	t.Logf("rows read by Apply: %v for 4 and 16 tables' definitions (took %v)", reads, took)
	// Four times the definitions: linear reads are four times as many
	// (some per statement); one List per definition made them ~16 times.
	if r := float64(reads[16]) / float64(reads[4]); r > 6 {
		t.Errorf("Apply read %d rows for 20 definitions and %d for 80 (%.1f×): it reads the catalog per definition", reads[4], reads[16], r)
	}
}
