package engine

import (
	"reflect"
	"testing"
)

// TestNarrowSpots pins which scalar comparisons are narrowed (narrow.go):
// a comparison or BETWEEN bound in a WHERE conjunct, alone or in an
// expression of constants, against one table's expression (a number cast
// kept aside), read as the level's value; a scalar read anywhere else too,
// or compared with two tables, is not.
func TestNarrowSpots(t *testing.T) {
	for _, tc := range []struct {
		sql   string
		where string
		want  []NarrowSpec
	}{
		{sql: `SELECT o.id FROM o WHERE o.amt::numeric > (SELECT avg(l.qty) FROM l)`,
			where: `o.amt::numeric > __dep1.v`,
			want:  []NarrowSpec{{Dep: "__dep1", Ref: "o", Expr: "o.amt::numeric", Bound: "__narrow.v", Uncast: "o.amt"}}},
		{sql: `SELECT o.id FROM o WHERE o.amt BETWEEN 3 AND (SELECT max(l.qty) FROM l) * 2 - 1 AND o.id > 0`,
			where: `o.amt BETWEEN 3 AND (__dep1.v * 2) - 1 AND o.id > 0`,
			want:  []NarrowSpec{{Dep: "__dep1", Ref: "o", Expr: "o.amt", Bound: "(__narrow.v * 2) - 1"}}},
		{sql: `SELECT o.id, (SELECT max(l.qty) FROM l) AS m FROM o WHERE o.amt < (SELECT max(l.qty) FROM l)`,
			where: `o.amt < (SELECT max(l.qty) FROM l)`},
		{sql: `SELECT o.id FROM o JOIN c ON c.id = o.cust WHERE o.amt + c.tier > (SELECT max(l.qty) FROM l)`,
			where: `(o.amt + c.tier) > (SELECT max(l.qty) FROM l)`},
		{sql: `SELECT o.id FROM o WHERE o.amt > (SELECT max(l.qty) FROM l WHERE l.oid = o.id)`,
			where: `o.amt > (SELECT max(l.qty) FROM l WHERE l.oid = o.id)`},
	} {
		q, err := ParseQuery("x", tc.sql)
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		if q.Where != tc.where {
			t.Errorf("%s:\n  WHERE %s\n  want  %s", tc.sql, q.Where, tc.where)
		}
		if !reflect.DeepEqual(q.Narrow, tc.want) {
			t.Errorf("%s:\n  narrow %+v\n  want   %+v", tc.sql, q.Narrow, tc.want)
		}
	}
}

// TestReadingApplied pins the FROM the batches of a plan with a narrowed
// scalar run: its level's table gives way to the applied table (each
// schema-qualified as the deparser writes it, quoted where it must be),
// in the FROM and a mirrored join's inner side; a table whose name only
// starts with the level's, and the plan itself, are left alone.
func TestReadingApplied(t *testing.T) {
	p := &Plan{
		Sources: []Source{
			{Schema: "public", Name: "o", Ref: "o"},
			{Schema: "Trellis X", Name: "dep_1_0", Ref: "__dep1"},
			{Schema: "Trellis X", Name: "dep_1_01", Ref: "__dep2"},
		},
		From:   `public.o o LEFT JOIN "Trellis X".dep_1_0 __dep1 ON true LEFT JOIN "Trellis X".dep_1_01 __dep2 ON true`,
		Outer:  []OuterJoin{{Inner: `(public.o o JOIN "Trellis X".dep_1_0 __dep1 ON true)`}},
		Narrow: []PlanNarrow{{Dep: 1, Applied: Rel{Schema: "Trellis X", Name: "applied_7_0"}}},
	}
	r := p.readingApplied()
	if want := `public.o o LEFT JOIN "Trellis X".applied_7_0 __dep1 ON true LEFT JOIN "Trellis X".dep_1_01 __dep2 ON true`; r.From != want {
		t.Errorf("FROM\n  %s\nwant\n  %s", r.From, want)
	}
	if want := `(public.o o JOIN "Trellis X".applied_7_0 __dep1 ON true)`; r.Outer[0].Inner != want {
		t.Errorf("inner side\n  %s\nwant\n  %s", r.Outer[0].Inner, want)
	}
	if p.From == r.From || p.Outer[0].Inner == r.Outer[0].Inner {
		t.Errorf("the plan itself was rewritten: %s", p.From)
	}
	if q := (&Plan{From: p.From}); q.readingApplied() != q {
		t.Errorf("a plan without narrowed scalars was copied")
	}
}
