package define

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Result says what Apply did for one statement.
type Result struct {
	Statement string // "CREATE TRANSFORM", "PAUSE TRANSFORM", …
	Name      string
	// Action is created, redefining (CREATE OR REPLACE of an existing
	// transform: the new definition builds beside the old target and
	// replaces it once live), exists (IF NOT EXISTS), paused, resumed,
	// dropped, absent (IF EXISTS), or unchanged (PAUSE of a paused
	// transform).
	Action string
	// Notes are what the statement did not keep as written, one sentence
	// each (e.g. an ORDER BY the target table cannot hold).
	Notes []string
}

var kindNames = map[engine.StatementKind]string{
	engine.CreateTransform: "CREATE TRANSFORM",
	engine.PauseTransform:  "PAUSE TRANSFORM",
	engine.ResumeTransform: "RESUME TRANSFORM",
	engine.DropTransform:   "DROP TRANSFORM",
	engine.AlterTransform:  "ALTER TRANSFORM",
}

// ApplyStatement applies one statement of a script; view is what the script's
// definitions know of the transforms (see View).
func (t *Definer) ApplyStatement(ctx context.Context, tx pgx.Tx, st *engine.Statement, view *View) (Result, error) {
	if st.Kind == engine.RequestBackfill {
		return t.requestBackfill(ctx, tx, st)
	}
	res := Result{Statement: kindNames[st.Kind], Name: st.Name}
	schema, err := t.schemaOf(ctx, tx, st.Schema)
	if err != nil {
		return res, err
	}
	var existing *catalog.Transform
	if !st.All {
		existing, err = t.cat.Get(ctx, tx, schema, st.Name)
	}
	if err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	missing := func() error {
		return terr.New(terr.NotFound, "transform %q does not exist in schema %q; list transforms with `trellis-repl status`", st.Name, schema)
	}
	if existing != nil && existing.Owner != 0 && (st.Kind != engine.CreateTransform || st.OrReplace) {
		stmt := res.Statement
		if st.OrReplace {
			stmt = "CREATE OR REPLACE TRANSFORM"
		}
		return res, t.levelRefusal(ctx, tx, stmt, existing)
	}
	switch st.Kind {
	case engine.CreateTransform:
		if existing != nil && st.OrReplace {
			notes, err := t.redefine(ctx, tx, schema, st, existing, view)
			if err != nil {
				return res, err
			}
			res.Action, res.Notes = "redefining", notes
			if st.Query.OrderBy {
				res.Notes = append(res.Notes, "ORDER BY dropped: the target is a table and keeps no row order; order the rows when you read it")
			}
			return res, nil
		}
		if existing != nil {
			if st.IfNotExists {
				res.Action = "exists"
				return res, nil
			}
			return res, terr.New(terr.Conflict, "transform %q already exists; use CREATE TRANSFORM IF NOT EXISTS, or DROP TRANSFORM %s first", st.Name, st.Name)
		}
		if schema == t.cat.Schema {
			return res, terr.New(terr.Validation, "transform %q: schema %q is trellis-repl's instance schema; put the target in another schema", st.Name, schema)
		}
		_, notes, err := t.create(ctx, tx, schema, st, 0, view)
		if err != nil {
			return res, err
		}
		res.Action, res.Notes = "created", notes
		if st.Query.OrderBy {
			res.Notes = append(res.Notes, "ORDER BY dropped: the target is a table and keeps no row order; order the rows when you read it")
		}
	case engine.AlterTransform:
		if existing == nil {
			return res, missing()
		}
		r, err := t.alter(ctx, tx, schema, st, existing)
		if err != nil {
			return res, err
		}
		view.discard() // a new plan
		return r, nil
	case engine.PauseTransform:
		if existing == nil {
			return res, missing()
		}
		all, err := t.cat.List(ctx, tx)
		if err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		// Its levels pause with it (ADR 0018).
		changed, err := t.pauseWith(ctx, tx, all, existing)
		if err != nil {
			return res, err
		}
		res.Action = "paused"
		if !changed {
			res.Action = "unchanged"
		}
	case engine.ResumeTransform:
		if st.All {
			res, err := t.resumeAll(ctx, tx, res)
			if err == nil {
				view.discard() // re-typed plans
			}
			return res, err
		}
		if existing == nil {
			return res, missing()
		}
		all, err := t.cat.List(ctx, tx)
		if err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		if err := t.resumeWith(ctx, tx, all, existing); err != nil {
			return res, err
		}
		view.discard() // a re-typed plan
		res.Action = "resumed"
	case engine.DropTransform:
		if existing == nil {
			if st.IfExists {
				res.Action = "absent"
				return res, nil
			}
			return res, missing()
		}
		p, err := engine.Decode(existing.Plan)
		if err != nil {
			return res, terr.Wrap(terr.Internal, err, "%v", err)
		}
		all, err := t.cat.List(ctx, tx)
		if err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		if err := t.dropRedefinitions(ctx, tx, all, existing.ID); err != nil {
			return res, err
		}
		if reader := ReaderOf(all, p.Target, existing.ID); reader != "" {
			return res, terr.New(terr.Conflict, "transform %q is read by transform %q (a chain); DROP TRANSFORM %s first, or keep %s", st.Name, reader, reader, st.Name)
		}
		if err := t.dropTransform(ctx, tx, all, existing); err != nil {
			return res, err
		}
		view.discard()
		res.Action = "dropped"
	}
	return res, nil
}

// create plans and installs a transform, and first the inner levels its
// derived tables need (ADR 0018); replaces is the transform a redefinition
// replaces (0 for none), whose shadow is st.TargetName.
func (t *Definer) create(ctx context.Context, tx pgx.Tx, schema string, st *engine.Statement, replaces int64, view *View) (*engine.Plan, []string, error) {
	// * is expanded first: the derived tables it reads are known then.
	// * over a target means its visible columns. A view is read as its
	// definition, which the expansion writes in.
	if st.Query != nil && !st.Query.Expand {
		views, err := engine.ReadsView(ctx, tx, st.Query.SQL)
		if err != nil {
			return nil, nil, terr.Wrap(terr.Unavailable, err, "transform %q: look for views in its FROM: %v", st.Name, err)
		}
		if views {
			st.Query = &engine.Query{SQL: st.Query.SQL, Expand: true}
		}
	}
	if st.Query != nil && st.Query.Expand {
		if err := view.load(ctx, t, tx); err != nil {
			return nil, nil, err
		}
		if err := engine.ExpandStar(ctx, tx, st, view.targets()); err != nil {
			return nil, nil, asTerr(err)
		}
	}
	var id int64
	if hasLevels(st.Query) {
		var err error
		if id, err = t.cat.ReserveID(ctx, tx); err != nil {
			return nil, nil, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
	}
	d := &defining{view: view}
	p, err := t.install(ctx, tx, schema, st, replaces, id, 0, d)
	return p, d.notes, err
}

// defining is one definition's install: the script's view of the
// transforms, and the levels made so far.
type defining struct {
	view *View
	// levels is the number of the last level made.
	levels int
	// notes are what Apply tells about the plans made (engine.PlanNotes).
	notes []string
}

// install plans and installs st as transform id (0: a new id) owned by
// owner (0: none), after its levels; levels are named by the id of the
// transform that owns them all (root: id for a user's definition, owner
// for a level), numbered on from d.levels.
func (t *Definer) install(ctx context.Context, tx pgx.Tx, schema string, st *engine.Statement, replaces, id, owner int64, d *defining) (*engine.Plan, error) {
	if hasLevels(st.Query) {
		root := id
		if owner != 0 {
			root = owner
		}
		if err := t.createLevels(ctx, tx, st, root, d); err != nil {
			return nil, err
		}
	}
	if err := d.view.load(ctx, t, tx); err != nil {
		return nil, err
	}
	if err := checkChainSources(ctx, tx, st, d.view); err != nil {
		return nil, err
	}
	p, err := engine.PlanCreate(ctx, tx, t.cat.Schema, schema, st)
	if err != nil {
		return nil, asTerr(err)
	}
	notes, err := engine.PlanNotes(ctx, tx, p)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	d.notes = append(d.notes, notes...)
	var names []string
	for _, src := range p.Tables() {
		names = append(names, src.Ident())
	}
	raw, err := p.Encode()
	if err != nil {
		return nil, terr.Wrap(terr.Internal, err, "%v", err)
	}
	row := &catalog.Transform{ID: id, Schema: schema, Name: p.Target.Name, Definition: st.Query.SQL, Shape: p.Shape, Plan: raw,
		State: catalog.StateWaiting, SourceTable: strings.Join(names, ", "), SourceOID: p.Sources[0].OID, Replaces: replaces, Owner: owner}
	id, err = t.cat.Insert(ctx, tx, row)
	if err != nil {
		return nil, asTerr(err)
	}
	if err := engine.Install(ctx, tx, p, id); err != nil {
		return nil, asTerr(err)
	}
	if raw, err = p.Encode(); err != nil {
		return nil, terr.Wrap(terr.Internal, err, "%v", err)
	}
	if err := t.cat.SetPlan(ctx, tx, id, raw); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	row.ID, row.Plan = id, raw
	d.view.created(row, p)
	return p, nil
}

// retype makes, at RESUME, the stored columns of a transform follow
// source columns that changed type (the drift that RESUME cures) and
// reports whether it changed any; any other drift refuses the RESUME,
// changing nothing.
func (t *Definer) retype(ctx context.Context, tx pgx.Tx, name string, id int64, p *engine.Plan) (bool, error) {
	d, err := engine.CheckDrift(ctx, tx, name, p)
	if err != nil {
		return false, terr.Wrap(terr.Unavailable, err, "check transform %q against the catalog: %v", name, err)
	}
	if d == nil {
		return false, nil
	}
	if len(d.Retype) == 0 {
		return false, terr.New(terr.Validation, "%s", d.Error)
	}
	if err := engine.ApplyRetype(ctx, tx, p, d); err != nil {
		return false, asTerr(err)
	}
	raw, err := p.Encode()
	if err != nil {
		return false, terr.Wrap(terr.Internal, err, "%v", err)
	}
	return true, t.cat.SetPlan(ctx, tx, id, raw)
}

// notPausedError is RESUME's refusal of a transform that is not paused.
// RESUME means "rebuild what a pause left stale"; accepting it silently on a
// running transform would let a script that expected a rebuild (say, after a
// disruption it assumed had paused the transform) succeed without one, so it
// is a conflict with the transform's state, and — as any failing statement —
// it rolls back the whole script.
func notPausedError(name, state string) error {
	return terr.New(terr.Conflict, "transform %q is not paused (state %s); RESUME only applies to a paused transform — PAUSE TRANSFORM it first, or leave it running",
		name, state)
}

// asTerr keeps *terr.Error as is and classifies anything else.
func asTerr(err error) error {
	var te *terr.Error
	if errors.As(err, &te) {
		return err
	}
	// The one classifier (ADR 0013): what every key would hit is a
	// definition PostgreSQL refuses; a row-data error is a definition's
	// value PostgreSQL refuses, or (23xxx) a concurrent statement that
	// got there first; anything else may pass by itself.
	switch fault.Classify(err) {
	case fault.Halt:
		return terr.Wrap(terr.Validation, err, "%s", fault.Message(err))
	case fault.Data:
		if strings.HasPrefix(fault.SQLState(err), "23") {
			return terr.Wrap(terr.Conflict, err, "%s", fault.Message(err))
		}
		return terr.Wrap(terr.Validation, err, "%s", fault.Message(err))
	}
	return terr.Wrap(terr.Unavailable, err, "%v", err)
}

func pgxIdent(s string) string { return pgx.Identifier{s}.Sanitize() }
