package selfcheck_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Both connection kinds the daemon uses must satisfy Querier.
var (
	_ selfcheck.Querier = (*pgx.Conn)(nil)
	_ selfcheck.Querier = (*pgxpool.Pool)(nil)
)

func TestCompare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// The target lives in a schema whose name needs quoting, and has a
	// bookkeeping column the comparison must ignore.
	const setup = `
CREATE TABLE src (id int, grp text, v int);
CREATE SCHEMA "Out Put";
CREATE TABLE "Out Put".tgt (grp text, total bigint, refreshed_at timestamptz DEFAULT now());`
	if _, err := pool.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	target := pgx.Identifier{"Out Put", "tgt"}
	columns := []string{"grp", "total"}
	const query = `SELECT grp, sum(v) AS total FROM src GROUP BY grp -- trailing comment;`

	tests := []struct {
		name   string
		src    string // rows of src
		tgt    string // rows of the target
		query  string // defaults to query
		want   selfcheck.Diff
		wantEq bool
	}{
		{
			name:   "equal",
			src:    "(1,'a',1),(2,'a',2),(3,'b',5)",
			tgt:    "('a',3),('b',5)",
			want:   selfcheck.Diff{},
			wantEq: true,
		},
		{
			name: "missing row",
			src:  "(1,'a',1),(3,'b',5)",
			tgt:  "('a',1)",
			want: selfcheck.Diff{Missing: 1, MissingSample: []string{"(b,5)"}},
		},
		{
			name: "extra row",
			src:  "(1,'a',1)",
			tgt:  "('a',1),('zz',9)",
			want: selfcheck.Diff{Extra: 1, ExtraSample: []string{"(zz,9)"}},
		},
		{
			name: "wrong value is one missing and one extra",
			src:  "(1,'a',1)",
			tgt:  "('a',2)",
			want: selfcheck.Diff{Missing: 1, Extra: 1, MissingSample: []string{"(a,1)"}, ExtraSample: []string{"(a,2)"}},
		},
		{
			name:  "duplicates counted by multiplicity",
			src:   "(1,'a',1),(2,'a',1),(3,'a',1)",
			tgt:   "('a',1),('b',2),('b',2),('b',2)",
			query: "SELECT grp, v::bigint FROM src",
			want: selfcheck.Diff{
				Missing: 2, MissingSample: []string{"(a,1)", "(a,1)"},
				Extra: 3, ExtraSample: []string{"(b,2)", "(b,2)", "(b,2)"},
			},
		},
		{
			name:   "NULLs are equal",
			src:    "(1,NULL,NULL),(2,'a',NULL)",
			tgt:    "(NULL,NULL),('a',NULL)",
			want:   selfcheck.Diff{},
			wantEq: true,
		},
		{
			name:  "sample capped, count exact",
			src:   "(1,'a',1)",
			tgt:   "('a',1),('b',1),('c',1),('d',1),('e',1),('f',1),('g',1)",
			query: "SELECT grp, v::bigint FROM src",
			want: selfcheck.Diff{
				Extra:       6,
				ExtraSample: []string{"(b,1)", "(c,1)", "(d,1)", "(e,1)", "(f,1)"},
			},
		},
		{
			name:   "both empty",
			want:   selfcheck.Diff{},
			wantEq: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reset := `TRUNCATE src; TRUNCATE "Out Put".tgt;`
			if tt.src != "" {
				reset += "INSERT INTO src VALUES " + tt.src + ";"
			}
			if tt.tgt != "" {
				reset += `INSERT INTO "Out Put".tgt (grp, total) VALUES ` + tt.tgt + ";"
			}
			if _, err := pool.Exec(ctx, reset); err != nil {
				t.Fatal(err)
			}
			q := tt.query
			if q == "" {
				q = query
			}
			got, err := selfcheck.Compare(ctx, pool, target, columns, q)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Compare = %+v, want %+v", got, tt.want)
			}
			if got.Equal() != tt.wantEq {
				t.Errorf("Equal() = %v, want %v", got.Equal(), tt.wantEq)
			}
		})
	}
}

func TestCompareErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (a int)"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		target   pgx.Identifier
		columns  []string
		query    string
		wantCode terr.Code
	}{
		{"no columns", pgx.Identifier{"t"}, nil, "SELECT 1", terr.Validation},
		{"empty query", pgx.Identifier{"t"}, []string{"a"}, " ; ", terr.Validation},
		{"no target", nil, []string{"a"}, "SELECT 1", terr.Validation},
		{"unknown table", pgx.Identifier{"nope"}, []string{"a"}, "SELECT 1", terr.Internal},
		{"column count mismatch", pgx.Identifier{"t"}, []string{"a"}, "SELECT 1, 2", terr.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := selfcheck.Compare(ctx, conn, tt.target, tt.columns, tt.query)
			if err == nil {
				t.Fatal("Compare succeeded, want an error")
			}
			if got := terr.CodeOf(err); got != tt.wantCode {
				t.Errorf("code = %s, want %s (err: %v)", got, tt.wantCode, err)
			}
		})
	}
	// The connection is still usable: the failed transaction was rolled back.
	if err := conn.Ping(ctx); err != nil {
		t.Errorf("connection unusable after a failed Compare: %v", err)
	}
}
