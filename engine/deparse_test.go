package engine

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// TestDeparseReadsBack: every expression below renders as text that
// parses back to it, including those pg_query's deparser writes without
// the parentheses they need ((a OR b) IS NULL came out as a OR b IS NULL,
// another expression).
func TestDeparseReadsBack(t *testing.T) {
	for _, e := range []string{
		"(a IS NOT NULL OR b = 'n2')::boolean",
		"(a OR b)::int",
		"(NOT a)::text",
		"(a AT TIME ZONE 'UTC')::text",
		"(a OR b) IS NULL",
		"(a AND b) IS NOT DISTINCT FROM c",
		"a BETWEEN (b AND c) AND d",
		"(a OR b) IS TRUE",
		"(a OR b) = c",
		"(a - b) * c",
		"a OR b AND c",
		"(a OR b) AND c AND (d OR e)",
		"(a COLLATE \"C\")::text",
		"(a IS NULL) IN (true, (b OR c))",
		"CASE WHEN (a OR b) IS NULL THEN (c AND d)::text END",
		"EXISTS (SELECT 1 FROM u WHERE (u.x OR u.y) IS NULL)",
		"(a OR b) IN (SELECT c FROM u)",
		"(a + b)::numeric(10,2)",
		"-(a::int)",
		"coalesce(a, b)::int",
	} {
		t.Run(e, func(t *testing.T) {
			tree, err := pg_query.Parse("SELECT " + e + " FROM t WHERE (" + e + ") IS NOT NULL")
			if err != nil {
				t.Fatal(err)
			}
			out, err := deparse(tree)
			if err != nil {
				t.Fatal(err)
			}
			if !readsBack(tree, out) {
				t.Fatalf("%s reads back as another query", out)
			}
		})
	}
}

// TestDeparsePlainWhenFaithful: a tree the deparser renders faithfully
// keeps its plain text (no parentheses added).
func TestDeparsePlainWhenFaithful(t *testing.T) {
	tree, err := pg_query.Parse("SELECT a + b AS s FROM t WHERE a > 1 AND b IS NULL")
	if err != nil {
		t.Fatal(err)
	}
	out, err := deparse(tree)
	if err != nil {
		t.Fatal(err)
	}
	if want := "SELECT a + b AS s FROM t WHERE a > 1 AND b IS NULL"; out != want {
		t.Fatalf("got %s, want %s", out, want)
	}
}
