package generative

import (
	"reflect"
	"strings"
	"testing"
)

func TestGenerateIsReproducible(t *testing.T) {
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 20; seed++ {
			a, b := Generate(seed, prof).Format(), Generate(seed, prof).Format()
			if a != b {
				t.Fatalf("%s seed %d: two generations differ", prof.Name, seed)
			}
		}
	}
	if Generate(1, Profiles()[0]).Format() == Generate(2, Profiles()[0]).Format() {
		t.Fatal("different seeds gave the same program")
	}
}

func TestFormatParseRoundTrip(t *testing.T) {
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 30; seed++ {
			p := Generate(seed, prof)
			p.Note = "a note\non two lines"
			q, err := Parse(p.Format())
			if err != nil {
				t.Fatalf("%s seed %d: %v\n%s", prof.Name, seed, err, p.Format())
			}
			if q.Format() != p.Format() {
				t.Fatalf("%s seed %d: round trip differs:\n%s\n----\n%s", prof.Name, seed, p.Format(), q.Format())
			}
			if !reflect.DeepEqual(q.Config, p.Config) || q.Seed != p.Seed || q.Profile != p.Profile {
				t.Fatalf("%s seed %d: header lost", prof.Name, seed)
			}
		}
	}
}

func TestGeneratedStatementsAreSingleLines(t *testing.T) {
	var walk func([]Step)
	walk = func(ss []Step) {
		for _, s := range ss {
			for _, st := range s.Stmts {
				if strings.ContainsAny(st, "\n") || strings.HasSuffix(st, ";") || strings.HasPrefix(strings.TrimSpace(st), "@") {
					t.Fatalf("statement cannot be written as one line: %q", st)
				}
			}
			for _, l := range s.Lanes {
				walk(l)
			}
		}
	}
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 50; seed++ {
			walk(Generate(seed, prof).Steps)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, text := range []string{
		"INSERT INTO x VALUES (1);",
		"@start\n  INSERT INTO x VALUES (1);",
		"@bogus",
		"@concurrent\n@txn\nSELECT 1;\n@end",
		"@concurrent\n@lane\n@txn\nSELECT 1;",
		"@end",
		"@config nope=1",
	} {
		if _, err := Parse(text); err == nil {
			t.Errorf("Parse(%q): no error", text)
		}
	}
}

func TestSplitDefinition(t *testing.T) {
	cases := []struct{ in, kind, name, sel string }{
		{"CREATE TRANSFORM t0 AS SELECT a FROM s", "create", "t0", "SELECT a FROM s"},
		{`CREATE TRANSFORM "Big Groups" AS SELECT count(*) FROM s`, "create", "Big Groups", "SELECT count(*) FROM s"},
		{`create transform if not exists "a""b" as select 1 as x from s`, "create", `a"b`, "select 1 as x from s"},
		{"DROP TRANSFORM IF EXISTS T1", "drop", "t1", ""},
		{"DROP TRANSFORM t2", "drop", "t2", ""},
		{"PAUSE TRANSFORM t2", "", "", ""},
	}
	for _, c := range cases {
		k, n, s := splitDefinition(c.in)
		if k != c.kind || n != c.name || s != c.sel {
			t.Errorf("splitDefinition(%q) = %q, %q, %q; want %q, %q, %q", c.in, k, n, s, c.kind, c.name, c.sel)
		}
	}
}

func TestDdmin(t *testing.T) {
	items := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	// Fails while it holds both 3 and 11.
	got := ddmin(items, func(xs []int) bool {
		has := map[int]bool{}
		for _, x := range xs {
			has[x] = true
		}
		return has[3] && has[11]
	})
	if !reflect.DeepEqual(got, []int{3, 11}) {
		t.Fatalf("ddmin = %v, want [3 11]", got)
	}
}

func TestSplitTopLevel(t *testing.T) {
	got := splitTopLevel(`a, coalesce(b, 'x,y') AS "c,d", sum(e)`, ',')
	want := []string{"a", ` coalesce(b, 'x,y') AS "c,d"`, " sum(e)"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitTopLevel = %q, want %q", got, want)
	}
	if i := topLevelIndex(`SELECT f(x FROM y) FROM t WHERE a`, " FROM "); i != 18 {
		t.Fatalf("topLevelIndex = %d", i)
	}
}

func TestDSNWithDatabase(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h:5/postgres?sslmode=disable", "postgres://u@h:5/db1?sslmode=disable"},
		{"postgres://u@h:5", "postgres://u@h:5/db1"},
		{"host=h user=u", "host=h user=u dbname='db1'"},
	} {
		if got := dsnWithDatabase(c.in, "db1"); got != c.want {
			t.Errorf("dsnWithDatabase(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
