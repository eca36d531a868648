package define

// alter.go owns ALTER TRANSFORM (ADR 0041): computed columns added,
// dropped or re-expressed in place. The edited definition is planned
// again and must differ from the old plan only in those columns; the
// target is altered, the plan and definition replaced, and a column
// build started that the worker runs with the new plan.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// alter applies ALTER TRANSFORM st to transform tr in schema.
func (t *Definer) alter(ctx context.Context, tx pgx.Tx, schema string, st *engine.Statement, tr *catalog.Transform) (Result, error) {
	res := Result{Statement: "ALTER TRANSFORM", Name: st.Name}
	name := tr.Name
	if tr.State != catalog.StateLive {
		return res, terr.New(terr.Conflict, "transform %q is %s; ALTER TRANSFORM edits a live transform: wait until it is live (`trellis-repl await %s`), or RESUME it first", name, tr.State, name)
	}
	all, err := t.cat.List(ctx, tx)
	if err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	for _, o := range all {
		if o.Replaces == tr.ID {
			return res, terr.New(terr.Conflict, "transform %q is being redefined (CREATE OR REPLACE, building as %s); edit it once the redefinition has taken its place", name, o.Name)
		}
	}
	if len(LevelsOf(all, tr.ID)) > 0 {
		return res, terr.New(terr.Validation, "transform %q reads derived tables kept as inner levels, which ALTER TRANSFORM does not re-plan; use CREATE OR REPLACE TRANSFORM %s AS …", name, name)
	}
	p, err := engine.Decode(tr.Plan)
	if err != nil {
		return res, terr.Wrap(terr.Internal, err, "%v", err)
	}
	edited, altered, err := engine.EditSelect(name, tr.Definition, p.Visible, st.Alter)
	if err != nil {
		return res, err
	}
	opt := ""
	if p.NoSourceIndex {
		opt = " WITHOUT SOURCE INDEX"
	}
	sts, err := engine.ParseStatements("CREATE TRANSFORM " + QuoteName(schema, name) + opt + " AS " + edited)
	if err != nil {
		return res, err
	}
	nst := &sts[0]
	np, err := engine.PlanCreate(ctx, tx, t.cat.Schema, schema, nst)
	if err != nil {
		return res, asTerr(err)
	}
	if err := engine.Finished(ctx, tx, p, np); err != nil {
		return res, asTerr(err)
	}
	if diff := engine.SameButColumns(p, np); diff != "" {
		return res, terr.New(terr.Validation, "transform %q: this edit changes more than its computed columns (%s: what it reads, filters, groups or keys by, or the aggregates it stores); ALTER TRANSFORM only adds, drops and re-expresses computed columns: use CREATE OR REPLACE TRANSFORM %s AS %s", name, diff, name, edited)
	}
	oldCols := map[string]engine.Col{}
	for _, c := range p.ComputedCols() {
		oldCols[c.Name] = c
	}
	newCols := map[string]engine.Col{}
	for _, c := range np.ComputedCols() {
		newCols[c.Name] = c
	}
	for col := range altered {
		if o, n := oldCols[col], newCols[col]; engine.BaseType(o.Type) != engine.BaseType(n.Type) || o.Collation != n.Collation {
			return res, terr.New(terr.Validation, "transform %q: column %q is %s and its new expression is %s; ALTER keeps a column's type: DROP %s, ADD %s AS … replaces the column (its values are rebuilt)",
				name, col, typeText(o), typeText(n), col, col)
		}
	}
	// retyped columns are replaced (DROP then ADD: their values are
	// rebuilt); a modifier that changes (numeric(12,2) to numeric) is kept
	// with the values.
	var added, dropped, retyped, modified, changed []string
	for _, c := range p.ComputedCols() {
		n, ok := newCols[c.Name]
		switch {
		case !ok:
			dropped = append(dropped, c.Name)
		case altered[c.Name] && n.Type != c.Type:
			modified = append(modified, c.Name)
			changed = append(changed, c.Name)
		case n.Type != c.Type || n.Collation != c.Collation:
			retyped = append(retyped, c.Name)
		case n.Expr != c.Expr:
			changed = append(changed, c.Name)
		}
	}
	for _, c := range np.ComputedCols() {
		if _, ok := oldCols[c.Name]; !ok {
			added = append(added, c.Name)
		}
	}
	if err := t.checkDrops(ctx, tx, all, tr, p, append(append([]string(nil), dropped...), retyped...)); err != nil {
		return res, err
	}
	target := p.Target.Ident()
	for _, c := range np.ComputedCols() {
		col := pgx.Identifier{c.Name}.Sanitize()
		var ddl string
		switch {
		case slices.Contains(added, c.Name):
			ddl = "ADD COLUMN " + col + " " + c.Type + collate(c)
		case slices.Contains(retyped, c.Name):
			ddl = "ALTER COLUMN " + col + " DROP NOT NULL, ALTER COLUMN " + col + " TYPE " + c.Type + collate(c) + " USING NULL"
		case slices.Contains(modified, c.Name):
			ddl = "ALTER COLUMN " + col + " TYPE " + c.Type + collate(c)
		default:
			continue
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+target+" "+ddl); err != nil {
			return res, asTerr(err)
		}
	}
	// A dropped column goes when the column build ends (a batch of the old
	// plan may still write it until the worker sees the new one); it
	// loses NOT NULL now, since the new plan leaves it out.
	for _, c := range dropped {
		if _, err := tx.Exec(ctx, "ALTER TABLE "+target+" ALTER COLUMN "+pgx.Identifier{c}.Sanitize()+" DROP NOT NULL"); err != nil {
			return res, asTerr(err)
		}
	}
	stored := *p
	stored.Visible, stored.Select, stored.Full = np.Visible, np.Select, np.Full
	if p.Shape == engine.ShapeRow {
		stored.Cols = append(append([]engine.Col(nil), np.ComputedCols()...), p.Cols[len(p.Visible):]...)
	} else {
		stored.Project = np.Project
	}
	raw, err := stored.Encode()
	if err != nil {
		return res, terr.Wrap(terr.Internal, err, "%v", err)
	}
	if err := t.cat.StartColumnBuild(ctx, tx, tr.ID, raw, nst.Query.SQL, dropped); err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	res.Action = "altered"
	for _, n := range []struct {
		what string
		cols []string
	}{{"added", added}, {"dropped", dropped}, {"changed", changed}, {"replaced", retyped}} {
		if len(n.cols) > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %s", n.what, strings.Join(n.cols, ", ")))
		}
	}
	res.Notes = append(res.Notes, "a column build rewrites the existing rows; status shows it backfilling until live, and new changes use the new expressions at once")
	return res, nil
}

// checkDrops refuses dropping (or retyping) cols of tr's target when a
// view or another transform reads them: they are dropped in a savepoint,
// every reader's query is planned, and the savepoint is rolled back.
func (t *Definer) checkDrops(ctx context.Context, tx pgx.Tx, all []*catalog.Transform, tr *catalog.Transform, p *engine.Plan, cols []string) error {
	if len(cols) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_alter_drops"); err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	check := func() error {
		for _, c := range cols {
			if _, err := tx.Exec(ctx, "ALTER TABLE "+p.Target.Ident()+" DROP COLUMN "+pgx.Identifier{c}.Sanitize()); err != nil {
				if fault.SQLState(err) == "2BP01" {
					return terr.Wrap(terr.Conflict, err, "transform %q: column %q is read by another object: %s; drop or change it first", tr.Name, c, fault.Message(err))
				}
				return asTerr(err)
			}
		}
		for _, o := range all {
			op, err := engine.Decode(o.Plan)
			if err != nil || o.ID == tr.ID {
				continue
			}
			reads := false
			for _, src := range op.Sources {
				reads = reads || src.Schema == p.Target.Schema && src.Name == p.Target.Name
			}
			if !reads {
				continue
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, op.SearchPath); err != nil {
				return terr.Wrap(terr.Unavailable, err, "%v", err)
			}
			if _, err := tx.Exec(ctx, "EXPLAIN (COSTS OFF) "+op.QuerySQL()); err != nil {
				return terr.Wrap(terr.Conflict, err, "transform %q: %s reads %s.%s (%s); ALTER TRANSFORM %s or DROP TRANSFORM %s first",
					tr.Name, o.Name, tr.Name, strings.Join(cols, ", "), fault.Message(err), o.Name, o.Name)
			}
		}
		return nil
	}
	err := check()
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_alter_drops"); rerr != nil && err == nil {
		err = terr.Wrap(terr.Unavailable, rerr, "%v", rerr)
	}
	return err
}

// typeText is a column's type as an error names it.
func typeText(c engine.Col) string {
	if c.Collation != "" {
		return c.Type + " COLLATE " + c.Collation
	}
	return c.Type
}

// collate is a column's COLLATE clause, when it has one.
func collate(c engine.Col) string {
	if c.Collation != "" {
		return " COLLATE " + c.Collation
	}
	return ""
}
