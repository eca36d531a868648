package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// refusalParts splits a refusal into its parts: the sentences after
// "(1) ", "(2) " … of a combined refusal, or the one sentence.
func refusalParts(t *testing.T, err error) []string {
	t.Helper()
	var r *refusals
	if !errors.As(err, &r) {
		if err == nil {
			t.Fatal("accepted, want a refusal")
		}
		return []string{err.Error()}
	}
	var out []string
	for _, p := range r.parts {
		out = append(out, p.Msg)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("the query has %d unsupported parts: (1) ", len(out))) {
		t.Errorf("combined sentence does not count its %d parts: %v", len(out), err)
	}
	return out
}

// wantParts checks that a refusal lists exactly the parts of want, in
// order, each containing its substring.
func wantParts(t *testing.T, err error, want []string) {
	t.Helper()
	got := refusalParts(t, err)
	if len(got) != len(want) {
		t.Fatalf("%d parts, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("part %d: %q\n  want it to contain %q", i+1, got[i], want[i])
		}
	}
}

// TestRefusalsListEveryPart: a query with several parts that cannot be
// maintained is refused with one error listing every one of them, each
// with its position in the script where the parser has one and the
// advice that works, across clauses, a data-modifying WITH and nested
// queries (issue 24 item 12).
func TestRefusalsListEveryPart(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"clauses of one query",
			"SELECT random() AS r, a FROM t TABLESAMPLE SYSTEM (10) LIMIT 3 FOR UPDATE",
			[]string{"LIMIT without ORDER BY keeps arbitrary rows (in PostgreSQL too), so the target could not be kept equal to the query; add ORDER BY ending with a key, or remove LIMIT/OFFSET/FETCH and limit rows when you read the target (line 1, column 84)",
				"FOR UPDATE/FOR SHARE is not supported in a transform; remove it",
				"FROM: TABLESAMPLE is not supported in a transform; remove it (a transform covers every row) (line 1, column 66)",
				"select list item 1 (random()): random() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it (line 1, column 30)"}},
		{"a data-modifying WITH and the query after it",
			"WITH d AS (DELETE FROM u RETURNING b) SELECT random() AS r, a FROM t LIMIT 3",
			[]string{"WITH d holds a data-modifying statement (INSERT, UPDATE, DELETE or MERGE); a transform's query only reads, so remove it (line 1, column 28)",
				"LIMIT without ORDER BY keeps arbitrary rows (in PostgreSQL too), so the target could not be kept equal to the query; add ORDER BY ending with a key, or remove LIMIT/OFFSET/FETCH and limit rows when you read the target (line 1, column 98)",
				"select list item 1 (random()): random() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it (line 1, column 68)"}},
		{"inside a refused derived table",
			"SELECT a, now() AS n FROM (SELECT a, clock_timestamp() AS c FROM t TABLESAMPLE SYSTEM (1) LIMIT 2) s FOR SHARE",
			[]string{"FOR UPDATE/FOR SHARE is not supported in a transform",
				"FROM: the subquery s uses LIMIT or OFFSET without ORDER BY, which keeps arbitrary rows (in PostgreSQL too); add ORDER BY ending with a key, or remove the LIMIT (line 1, column 119)",
				"FROM: the subquery s: TABLESAMPLE is not supported in a transform; remove it (a transform covers every row) (line 1, column 102)",
				"FROM: the subquery s: clock_timestamp() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it (line 1, column 60)",
				"select list item 2 (now()): now() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it (line 1, column 33)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseStatements("CREATE TRANSFORM x AS " + tc.query)
			wantParts(t, err, tc.want)
		})
	}
}

// TestDefineRefusalsListEveryFunction: at define, the immutability test
// names every function of every expression that reads more than the
// recorded settings — built-ins that read the clock or the database, text
// read as a date, a user's stable function — in one error, with the
// advice that fits each (ADR 0037).
func TestDefineRefusalsListEveryFunction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE f (id int PRIMARY KEY, t timestamptz, s text);
		CREATE FUNCTION stab(int) RETURNS int STABLE LANGUAGE sql AS 'SELECT $1'`); err != nil {
		t.Fatal(err)
	}
	sts, err := ParseStatements(`CREATE TRANSFORM x AS SELECT id, age(t) AS a, s::date AS sd, t::date AS d, to_regclass(s) AS rc, stab(id) AS st
		FROM f WHERE t > pg_postmaster_start_time()`)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = PlanCreate(ctx, tx, cat.Schema, "public", &sts[0])
	wantParts(t, err, []string{
		"WHERE (t > pg_postmaster_start_time()) calls pg_postmaster_start_time() (stable), which reads more than the session settings recorded with the transform",
		"select list item 2 (age(t)) calls age(timestamp with time zone) (stable)",
		"select list item 3 (s::date) calls date_in(cstring) (stable), which reads more than the session settings recorded with the transform (the clock, the database or the session), so it could not be kept equal to the query as rows are re-derived at different times; read text as a date or time through a format instead, e.g. to_date(x, 'YYYY-MM-DD')",
		"select list item 5 (to_regclass(s)) calls to_regclass(text) (stable)",
		"the query calls stab(integer) (stable)",
	})
}
