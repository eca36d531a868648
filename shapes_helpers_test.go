package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// keepShapes defines every shape of defs in one script over schema,
// builds them over the existing rows and keeps them exact through writes,
// comparing each with its query as written after the build and after every
// write; it returns the running env for what a test checks next.
func keepShapes(t *testing.T, mode, schema string, defs []levelDef, writes []string) *env {
	t.Helper()
	// One Apply defines every shape and its levels (TestTopKMore: 25
	// shapes, some with four levels); on a loaded machine that outlasts
	// the default call timeout of 30s, which is not what these tests check.
	e := newEnv(t, trellis.Config{Capture: mode, CallTimeout: 5 * time.Minute})
	e.exec(schema)
	var b strings.Builder
	for _, d := range defs {
		fmt.Fprintf(&b, "CREATE TRANSFORM %s AS %s;\n", d.name, d.query)
	}
	e.apply(b.String())
	e.start()
	levelConverge(e, defs, "after the build")
	for i, w := range writes {
		e.exec(w)
		levelConverge(e, defs, fmt.Sprintf("write %d (%s)", i+1, w))
	}
	return e
}

// refusal is a definition the engine refuses, and a part of its sentence.
type refusal struct{ query, want string }

// refuseEach applies each query as a transform and wants a validation
// error containing its sentence that leaves no transform behind.
func refuseEach(t *testing.T, e *env, cases []refusal) {
	t.Helper()
	ctx := context.Background()
	for _, tc := range cases {
		before := e.queryInt(`SELECT count(*) FROM trellis.transforms`)
		_, err := e.tr.Apply(ctx, "CREATE TRANSFORM refused AS "+tc.query)
		if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%s: %v, want a validation error containing %q", tc.query, err, tc.want)
		}
		if after := e.queryInt(`SELECT count(*) FROM trellis.transforms`); after != before {
			t.Errorf("%s: a refused definition left %d transforms behind", tc.query, after-before)
		}
	}
}
