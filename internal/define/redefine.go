package define

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Redefinition: CREATE OR REPLACE TRANSFORM of an existing transform
// records the new definition as a transform of its own that builds into a
// shadow table beside the old target (engine/redefine.go). When it is live
// its worker stops the old one and swaps the tables in one transaction;
// until then the old target keeps serving and keeps being maintained.

// shadowName is the table (and catalog name) a redefinition of transform
// id builds into.
func shadowName(id int64) string { return fmt.Sprintf("__trellis_next_%d", id) }

// redefine applies CREATE OR REPLACE TRANSFORM to an existing transform
// and returns what its swap will not carry over.
func (t *Definer) redefine(ctx context.Context, tx pgx.Tx, schema string, st *engine.Statement, existing *catalog.Transform, view *View) ([]string, error) {
	if existing.Replaces != 0 {
		return nil, terr.New(terr.Validation, "transform %q is itself a redefinition in progress; redefine the transform it replaces", st.Name)
	}
	old, err := engine.Decode(existing.Plan)
	if err != nil {
		return nil, terr.Wrap(terr.Internal, err, "%v", err)
	}
	all, err := t.cat.List(ctx, tx)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	// A newer redefinition supersedes one still building.
	if err := t.dropRedefinitions(ctx, tx, all, existing.ID); err != nil {
		return nil, err
	}
	view.discard() // it may hold the redefinitions just dropped
	shadow := *st
	shadow.TargetName = shadowName(existing.ID)
	p, planNotes, err := t.create(ctx, tx, schema, &shadow, existing.ID, view)
	if err != nil {
		return nil, err
	}
	if cycle := chainCycle(all, p, old.Target, st.Name); cycle != "" {
		return nil, terr.New(terr.Validation, "transform %q: the new definition would read its own target through a chain (%s); read the sources of those transforms instead", st.Name, cycle)
	}
	if reader := ReaderOf(all, old.Target, existing.ID); reader != "" {
		// The swap replaces the table the reader follows; the reader's
		// plan (its key, its columns) was made for the old one.
		return nil, terr.New(terr.Conflict, "transform %q is read by transform %q (a chain); redefining it would replace the table %s follows — DROP TRANSFORM %s, redefine %s, then create %s again",
			st.Name, reader, reader, reader, st.Name, reader)
	}
	notes, err := engine.CheckCarry(ctx, tx, old, p)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "transform %q: check what the swap carries over: %v", st.Name, err)
	}
	return append(append([]string{fmt.Sprintf("the new definition builds into %s; %s keeps serving the old one until it is live", p.Target.Ident(), old.Target.Ident())}, notes...), planNotes...), nil
}

// dropRedefinitions removes the redefinitions in progress of transform id
// (their catalog rows and shadow tables).
func (t *Definer) dropRedefinitions(ctx context.Context, tx pgx.Tx, all []*catalog.Transform, id int64) error {
	for _, o := range all {
		if o.Replaces != id {
			continue
		}
		// Its levels (ADR 0018) go with it.
		if err := t.dropTransform(ctx, tx, all, o); err != nil {
			return err
		}
	}
	return nil
}

// chainCycle names the cycle a plan about to take target's place would
// close (it reads, directly or through other transforms, target itself),
// as "a → b → a"; "" when there is none.
func chainCycle(all []*catalog.Transform, p *engine.Plan, target engine.Rel, name string) string {
	byTarget := map[string]*catalog.Transform{}
	plans := map[int64]*engine.Plan{}
	for _, o := range all {
		if op, err := engine.Decode(o.Plan); err == nil {
			byTarget[op.Target.Ident()] = o
			plans[o.ID] = op
		}
	}
	var path []string
	seen := map[string]bool{}
	var visit func(q *engine.Plan) bool
	visit = func(q *engine.Plan) bool {
		for _, src := range q.Sources {
			if src.Ident() == target.Ident() {
				return true
			}
			o := byTarget[src.Ident()]
			if o == nil || seen[o.Name] {
				continue
			}
			seen[o.Name] = true
			path = append(path, o.Name)
			if visit(plans[o.ID]) {
				return true
			}
			path = path[:len(path)-1]
		}
		return false
	}
	if !visit(p) {
		return ""
	}
	return strings.Join(append(append([]string{name}, path...), name), " → ")
}
