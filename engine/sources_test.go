package engine

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// TestCheckWholeSource runs checkWholeSource against real catalogs: plain
// tables, inheritance parents with and without ONLY, partitioned tables and
// their partitions (accepted: published via the root), and the sentence's
// list of children (schema-qualified, quoted, at most five).
func TestCheckWholeSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
		CREATE TABLE plain (id int PRIMARY KEY);
		-- An inheritance parent with two children, one in another schema
		-- under a name that needs quoting.
		CREATE SCHEMA "Archive";
		CREATE TABLE events (id int PRIMARY KEY, v int);
		CREATE TABLE events_2024 () INHERITS (events);
		CREATE TABLE "Archive"."Events 2023" () INHERITS (events);
		-- Seven children: five are named, the rest counted.
		CREATE TABLE many (id int PRIMARY KEY);
		CREATE TABLE many_1 () INHERITS (many); CREATE TABLE many_2 () INHERITS (many);
		CREATE TABLE many_3 () INHERITS (many); CREATE TABLE many_4 () INHERITS (many);
		CREATE TABLE many_5 () INHERITS (many); CREATE TABLE many_6 () INHERITS (many);
		CREATE TABLE many_7 () INHERITS (many);
		-- Three levels: the middle table is both a child and a parent.
		CREATE TABLE top (id int PRIMARY KEY);
		CREATE TABLE mid () INHERITS (top);
		CREATE TABLE leaf () INHERITS (mid);
		-- Partitioned, with a sub-partitioned partition.
		CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id);
		CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (100);
		CREATE TABLE parted_high PARTITION OF parted FOR VALUES FROM (100) TO (200) PARTITION BY RANGE (id);
		CREATE TABLE parted_high_a PARTITION OF parted_high FOR VALUES FROM (100) TO (150);
	`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck

	cases := []struct {
		name  string
		table string // regclass text
		only  bool
		want  string // the whole error text; "" means accepted
	}{
		{name: "plain table", table: "plain"},
		{name: "inheritance parent", table: "events",
			want: `validation: transform "t": "public"."events" has inheritance children ("Archive"."Events 2023", "public"."events_2024"); ` +
				`changes to a child would not reach the transform — write FROM ONLY "public"."events" to read the parent's own rows, or select from each child`},
		{name: "inheritance parent with ONLY", table: "events", only: true},
		{name: "inheritance child", table: "events_2024"},
		{name: "more than five children", table: "many",
			want: `validation: transform "t": "public"."many" has inheritance children ("public"."many_1", "public"."many_2", "public"."many_3", "public"."many_4", "public"."many_5" and 2 more); ` +
				`changes to a child would not reach the transform — write FROM ONLY "public"."many" to read the parent's own rows, or select from each child`},
		{name: "grandparent names its direct child", table: "top",
			want: `validation: transform "t": "public"."top" has inheritance children ("public"."mid"); ` +
				`changes to a child would not reach the transform — write FROM ONLY "public"."top" to read the parent's own rows, or select from each child`},
		{name: "middle of three levels", table: "mid",
			want: `validation: transform "t": "public"."mid" has inheritance children ("public"."leaf"); ` +
				`changes to a child would not reach the transform — write FROM ONLY "public"."mid" to read the parent's own rows, or select from each child`},
		{name: "partitioned table", table: "parted"},
		{name: "sub-partitioned partition", table: "parted_high"},
		{name: "leaf partition", table: "parted_low"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var oid uint32
			var schema, rel string
			if err := tx.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname FROM pg_class c
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass`, c.table).
				Scan(&oid, &schema, &rel); err != nil {
				t.Fatal(err)
			}
			err := checkWholeSource(ctx, tx, "t", oid, pgx.Identifier{schema, rel}.Sanitize(), c.only)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %s", c.want)
			}
			if terr.CodeOf(err) != terr.Validation {
				t.Errorf("code %s, want %s", terr.CodeOf(err), terr.Validation)
			}
			if err.Error() != c.want {
				t.Errorf("error\n got %s\nwant %s", err, c.want)
			}
		})
	}
	// The checks only read: the transaction is still usable.
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		t.Fatalf("transaction unusable after the checks: %v", err)
	}
}

// TestIsSystemColumn pins the list: PostgreSQL's six system columns, and
// not oid (a user column since PostgreSQL 12) nor a quoted upper-case name.
func TestIsSystemColumn(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		{"ctid", true},
		{"xmin", true},
		{"xmax", true},
		{"cmin", true},
		{"cmax", true},
		{"tableoid", true},
		{"oid", false},
		{"CTID", false}, // only reachable quoted: a user column
		{"id", false},
		{"xmin2", false},
		{"", false},
	}
	for _, c := range cases {
		if got := isSystemColumn(c.name); got != c.want {
			t.Errorf("isSystemColumn(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSystemColumnRefs: the system columns among the references, each
// once, in order of first appearance.
func TestSystemColumnRefs(t *testing.T) {
	cases := []struct {
		name string
		cols []string
		want []string
	}{
		{"none", nil, nil},
		{"only user columns", []string{"id", "amount", "oid"}, nil},
		{"one", []string{"id", "ctid"}, []string{"ctid"}},
		{"several in order, duplicates once", []string{"xmin", "id", "ctid", "xmin", "tableoid", "ctid"},
			[]string{"xmin", "ctid", "tableoid"}},
	}
	for _, c := range cases {
		if got := systemColumnRefs(c.cols); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: systemColumnRefs(%q) = %q, want %q", c.name, c.cols, got, c.want)
		}
	}
}

// TestSystemColumnError: the code and the whole sentence, and nil when
// there is nothing to refuse.
func TestSystemColumnError(t *testing.T) {
	const tail = "; their values change with row locks, VACUUM FULL and CLUSTER without a change being published, so the target could not be kept equal — select a user column instead"
	cases := []struct {
		name  string
		names []string
		want  string // "" means nil
	}{
		{"nothing", nil, ""},
		{"empty", []string{}, ""},
		{"one", []string{"ctid"}, `validation: transform "t": the query reads system column(s) ctid` + tail},
		{"two", []string{"xmin", "tableoid"}, `validation: transform "t": the query reads system column(s) xmin, tableoid` + tail},
	}
	for _, c := range cases {
		err := systemColumnError("t", c.names)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v, want nil", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: nil, want %s", c.name, c.want)
			continue
		}
		if terr.CodeOf(err) != terr.Validation {
			t.Errorf("%s: code %s, want %s", c.name, terr.CodeOf(err), terr.Validation)
		}
		if err.Error() != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, err, c.want)
		}
	}
}
