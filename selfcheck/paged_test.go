package selfcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

func sp(s string) *string { return &s }

// short renders divergences compactly for comparison in tests.
func short(ds []Divergence) []string {
	var out []string
	for _, d := range ds {
		var id []string
		for _, v := range d.Identity {
			if v == nil {
				id = append(id, "NULL")
			} else {
				id = append(id, *v)
			}
		}
		s := d.Kind + "[" + strings.Join(id, ",") + "]"
		val := func(p *string) string {
			if p == nil {
				return "NULL"
			}
			return *p
		}
		switch d.Kind {
		case Cell:
			s += d.Column + ":" + val(d.Stored) + "->" + val(d.Recomputed)
		case MissingRow:
			s += val(d.Recomputed)
		case ExtraRow:
			s += val(d.Stored)
		}
		out = append(out, s)
	}
	return out
}

func inSnapshot(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	fn(tx)
}

// TestSelfCheckRunPaged compares targets with their queries across page
// boundaries (page sizes 1 to 4, and one page): every divergence kind,
// nullable and composite identities, a collatable identity, a type
// without equality, duplicates, and an identity-less target.
func TestSelfCheckRunPaged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const setup = `
CREATE TABLE src (id int PRIMARY KEY, name text, v numeric);
INSERT INTO src VALUES (1,'a',1),(2,'b',2),(3,'c',NULL),(4,'d',4),(5,'e',5),(6,'f',6),(7,'g',7);
CREATE TABLE tgt (id int PRIMARY KEY, name text, v numeric);
INSERT INTO tgt VALUES (1,'a',1),(2,'b',20),(3,'c',NULL),(5,'e',5),(6,'f',NULL),(7,'G',7),(9,'z',9);
CREATE TABLE src2 (a int, b text, v int);
INSERT INTO src2 VALUES (1,NULL,1),(1,'x',2),(NULL,NULL,3),(NULL,'y',4),(2,'x',5);
CREATE TABLE tgt2 (a int, b text, v int, UNIQUE NULLS NOT DISTINCT (a, b));
INSERT INTO tgt2 VALUES (1,NULL,1),(1,'x',2),(NULL,NULL,30),(2,'x',5),(3,NULL,6);
CREATE TABLE tgt3 (n bigint, j json);
INSERT INTO tgt3 VALUES (7, '{"a": 1}');
CREATE TABLE src4 (k text COLLATE "C" PRIMARY KEY, v int);
INSERT INTO src4 VALUES ('B',1),('a',2),('C',3),('b',4);
CREATE TABLE tgt4 (k text PRIMARY KEY, v int);
INSERT INTO tgt4 VALUES ('B',1),('a',2),('C',30),('c',5);`
	if _, err := pool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec Spec
		want []string
	}{
		{
			name: "row shape",
			spec: Spec{Target: pgx.Identifier{"tgt"}, Columns: []string{"id", "name", "v"}, Identity: []string{"id"},
				Query: "SELECT id, name, v FROM src -- trailing comment"},
			want: []string{"cell[2]v:20->2", "missing_row[4](4,d,4)", "cell[6]v:NULL->6", "cell[7]name:G->g", "extra_row[9](9,z,9)"},
		},
		{
			name: "nullable composite identity",
			spec: Spec{Target: pgx.Identifier{"tgt2"}, Columns: []string{"a", "b", "v"}, Identity: []string{"a", "b"},
				Query: "SELECT a, b, v FROM src2"},
			want: []string{"extra_row[3,NULL](3,,6)", "missing_row[NULL,y](,y,4)", "cell[NULL,NULL]v:30->3"},
		},
		{
			name: "no identity, a type without equality",
			spec: Spec{Target: pgx.Identifier{"tgt3"}, Columns: []string{"n", "j"},
				Query: `SELECT count(*) AS n, '{"a": 2}'::json AS j FROM src`},
			want: []string{`cell[]j:{"a": 1}->{"a": 2}`},
		},
		{
			name: "collations differ",
			spec: Spec{Target: pgx.Identifier{"tgt4"}, Columns: []string{"k", "v"}, Identity: []string{"k"},
				Query: "SELECT k, v FROM src4"},
			want: nil, // checked by set below: order follows the target's collation
		},
	}
	for _, tt := range tests {
		for _, ps := range []int{1, 2, 3, 4, 1000} {
			t.Run(fmt.Sprintf("%s/page %d", tt.name, ps), func(t *testing.T) {
				inSnapshot(t, ctx, pool, func(tx pgx.Tx) {
					res, err := Run(ctx, tx, tt.spec, Options{PageSize: ps})
					if err != nil {
						t.Fatal(err)
					}
					got := short(res.Divergences)
					if tt.name == "collations differ" {
						want := map[string]bool{"cell[C]v:30->3": true, "missing_row[b](b,4)": true, "extra_row[c](c,5)": true}
						if len(got) != len(want) {
							t.Fatalf("divergences = %v, want %v", got, want)
						}
						for _, g := range got {
							if !want[g] {
								t.Fatalf("divergences = %v, want %v", got, want)
							}
						}
						return
					}
					if !reflect.DeepEqual(got, tt.want) && !sameSet(got, tt.want) {
						t.Fatalf("divergences = %v, want %v", got, tt.want)
					}
					if res.Total != int64(len(tt.want)) || !res.Complete {
						t.Errorf("total %d complete %v, want %d true", res.Total, res.Complete, len(tt.want))
					}
					if len(tt.spec.Identity) > 0 && ps < 5 && res.Pages < 2 {
						t.Errorf("pages = %d with page size %d, want several", res.Pages, ps)
					}
				})
			})
		}
	}

	t.Run("counts, keep, held", func(t *testing.T) {
		inSnapshot(t, ctx, pool, func(tx pgx.Tx) {
			spec := tests[0].spec
			res, err := Run(ctx, tx, spec, Options{PageSize: 2, Keep: 2, Held: func(id []*string) bool { return *id[0] == "6" }})
			if err != nil {
				t.Fatal(err)
			}
			if res.TargetRows != 7 || res.QueryRows != 7 {
				t.Errorf("rows = %d, %d; want 7, 7", res.TargetRows, res.QueryRows)
			}
			want := map[string]int64{Cell: 2, MissingRow: 1, ExtraRow: 1}
			if !reflect.DeepEqual(res.Counts, want) || res.Total != 4 || res.Held != 1 || !res.Truncated || len(res.Divergences) != 2 {
				t.Errorf("counts %v total %d held %d truncated %v kept %d", res.Counts, res.Total, res.Held, res.Truncated, len(res.Divergences))
			}
			// Recheck of the divergent identities and one that agrees.
			ids := append(res.Identities(), []*string{sp("1")}, []*string{sp("4")}, []*string{sp("9")})
			again, err := Recheck(ctx, tx, spec, ids, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := short(again.Divergences); !reflect.DeepEqual(got, []string{"cell[2]v:20->2", "missing_row[4](4,d,4)", "extra_row[9](9,z,9)"}) {
				t.Errorf("recheck = %v", got)
			}
		})
	})

	t.Run("sample wraps round", func(t *testing.T) {
		inSnapshot(t, ctx, pool, func(tx pgx.Tx) {
			spec := tests[0].spec
			res, err := Run(ctx, tx, spec, Options{PageSize: 2, After: []*string{sp("5")}, MaxRows: 3})
			if err != nil {
				t.Fatal(err)
			}
			// After 5: 6, 7 (a page), then 9 (the last page, which also
			// holds what the query has beyond): 3 rows, stop.
			if got := short(res.Divergences); !reflect.DeepEqual(got, []string{"cell[6]v:NULL->6", "cell[7]name:G->g", "extra_row[9](9,z,9)"}) || res.Complete {
				t.Errorf("sample = %v complete %v", got, res.Complete)
			}
			res, err = Run(ctx, tx, spec, Options{PageSize: 2, After: []*string{sp("5")}, MaxRows: 100})
			if err != nil {
				t.Fatal(err)
			}
			if res.Total != 5 || !res.Complete || res.TargetRows != 7 {
				t.Errorf("wrapped sample: total %d complete %v rows %d, want 5 true 7", res.Total, res.Complete, res.TargetRows)
			}
		})
	})

	t.Run("errors", func(t *testing.T) {
		inSnapshot(t, ctx, pool, func(tx pgx.Tx) {
			for _, c := range []struct {
				spec Spec
				code terr.Code
			}{
				{Spec{Target: pgx.Identifier{"nope"}, Columns: []string{"a"}, Query: "SELECT 1 AS a"}, terr.NotFound},
				{Spec{Target: pgx.Identifier{"tgt"}, Columns: []string{"nope"}, Query: "SELECT 1 AS nope"}, terr.NotFound},
				{Spec{Target: pgx.Identifier{"tgt"}, Columns: []string{"id"}, Identity: []string{"v"}, Query: "SELECT 1 AS id"}, terr.Validation},
				{Spec{Target: pgx.Identifier{"tgt"}, Columns: []string{"id"}, Query: " ; "}, terr.Validation},
			} {
				if _, err := Run(ctx, tx, c.spec, Options{}); terr.CodeOf(err) != c.code {
					t.Errorf("Run(%+v) = %v, want code %s", c.spec, err, c.code)
				}
			}
		})
	})
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

// TestSelfCheckPageSQLGolden pins the generated statements (testdata/*.sql;
// TRELLIS_UPDATE_GOLDEN=1 rewrites them).
func TestSelfCheckPageSQLGolden(t *testing.T) {
	c := &checker{
		spec: Spec{Target: pgx.Identifier{"out", "tgt"}, Query: "SELECT a, b, j FROM s"},
		opts: Options{PageSize: 500},
		cols: []column{
			{name: "a", typ: "integer", notNull: true},
			{name: "b", typ: "text", notNull: true, collate: `pg_catalog."default"`},
			{name: "j", typ: "json", text: true},
		},
		ident: []int{0, 1},
	}
	n := &checker{spec: c.spec, opts: c.opts, cols: []column{
		{name: "a", typ: "integer"}, {name: "b", typ: "text", collate: `pg_catalog."default"`}, {name: "j", typ: "json", text: true},
	}, ident: []int{0, 1}}
	var b strings.Builder
	for _, k := range []struct {
		name   string
		c      *checker
		lo, hi []*string
	}{{"not null identity", c, []*string{sp("1"), sp("x")}, []*string{sp("5"), sp("y")}},
		{"nullable identity", n, []*string{sp("1"), sp("x")}, []*string{sp("5"), nil}}} {
		lo, hi := k.lo, k.hi
		a := &args{}
		fmt.Fprintf(&b, "-- %s: boundary after %s\n%s;\n", k.name, rowText(lo), k.c.boundarySQL(k.c.rangePred(lo, nil, onTarget, a)))
		tp, qp, pa := k.c.pagePreds(func(s side, a *args) string { return k.c.rangePred(lo, hi, s, a) })
		fmt.Fprintf(&b, "-- %s: page %s .. %s, %d parameters\n%s;\n", k.name, rowText(lo), rowText(hi), len(pa.vals), k.c.pageSQL(tp, qp))
		tp, qp, pa = k.c.pagePreds(func(s side, a *args) string { return k.c.anyOf([][]*string{lo, hi}, s, a) })
		fmt.Fprintf(&b, "-- %s: recheck %s, %s, %d parameters\n%s;\n", k.name, rowText(lo), rowText(hi), len(pa.vals), k.c.pageSQL(tp, qp))
	}
	path := filepath.Join("testdata", "page.sql")
	if os.Getenv("TRELLIS_UPDATE_GOLDEN") != "" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (TRELLIS_UPDATE_GOLDEN=1 writes it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("generated SQL differs from %s (TRELLIS_UPDATE_GOLDEN=1 rewrites it):\n%s", path, b.String())
	}
}

func TestSelfCheckRowText(t *testing.T) {
	got := rowText([]*string{sp("1"), sp("a b"), nil, sp(""), sp(`q"\`), sp("x")})
	if want := `(1,"a b",,"","q""\\",x)`; got != want {
		t.Errorf("rowText = %s, want %s", got, want)
	}
}
