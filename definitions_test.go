package trellis_test

import (
	"context"
	"os"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
)

// definitionCase is one entry of testdata/definitions.sql.
type definitionCase struct {
	script string
	accept bool
	code   string
	want   string
}

// readDefinitions splits testdata/definitions.sql into its setup and cases.
func readDefinitions(t *testing.T) (string, []definitionCase) {
	raw, err := os.ReadFile("testdata/definitions.sql")
	if err != nil {
		t.Fatal(err)
	}
	var setup strings.Builder
	var cases []definitionCase
	var cur *definitionCase
	inSetup := false
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case line == "-- setup":
			inSetup, cur = true, nil
		case line == "-- accept":
			inSetup = false
			cases = append(cases, definitionCase{accept: true})
			cur = &cases[len(cases)-1]
		case strings.HasPrefix(line, "-- refuse "):
			inSetup = false
			code, want, ok := strings.Cut(strings.TrimPrefix(line, "-- refuse "), ": ")
			if !ok {
				t.Fatalf("bad case header %q", line)
			}
			cases = append(cases, definitionCase{code: code, want: want})
			cur = &cases[len(cases)-1]
		case strings.HasPrefix(line, "--"):
		case inSetup:
			setup.WriteString(line + "\n")
		case cur != nil:
			cur.script += line + "\n"
		}
	}
	return setup.String(), cases
}

// TestDefinitionTable runs testdata/definitions.sql: each refused
// definition fails with its code and sentence and changes nothing; each
// accepted one builds and equals its query (a definition Apply accepts
// must build).
func TestDefinitionTable(t *testing.T) {
	t.Parallel()
	setup, cases := readDefinitions(t)
	e := newEnv(t, trellis.Config{})
	ctx := context.Background()
	e.exec(setup)
	count := func() (n int) {
		if err := e.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM trellis.transforms) * 1000 + (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	accepted := 0
	for _, c := range cases {
		before := count()
		_, err := e.tr.Apply(ctx, c.script)
		switch {
		case c.accept && err != nil:
			t.Errorf("refused, want accepted:\n%s\n%v", c.script, err)
		case c.accept:
			accepted++
		case err == nil:
			t.Errorf("accepted, want refused (%s):\n%s", c.want, c.script)
		case string(trellis.CodeOf(err)) != c.code || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s\n got %v\nwant code %s containing %q", c.script, err, c.code, c.want)
		case count() != before:
			t.Errorf("a refused definition changed the catalog or the tables:\n%s", c.script)
		}
	}
	if accepted == 0 {
		t.Fatal("no accepted definition in the table")
	}
	e.start()
	defer e.stop()
	e.converge("every accepted definition built")
	e.exec(`UPDATE fact SET v = v + 1, d1 = (id % 12) + 1 WHERE id % 5 = 0; DELETE FROM dim WHERE id = 3; UPDATE dim2 SET w = w + 50 WHERE a = 2`)
	e.converge("after writes to every table")
}
