package define

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Inner levels (ADR 0018): a derived table in FROM that aggregates is kept
// as a transform of its own — a level — whose target the outer query reads
// in its place: a chain the outer transform owns. Levels live in the
// instance schema under names taken from the owner's id, are created in
// the owner's Apply transaction before it, and follow it through DROP,
// PAUSE, RESUME and CREATE OR REPLACE; a statement naming a level is
// refused, naming the owner.

// levelName is the table (and catalog name) of the k-th level of the
// transform with id owner.
func levelName(owner int64, k int) string { return fmt.Sprintf("level_%d_%d", owner, k) }

// hasLevels reports whether a query reads a derived table kept as a level.
func hasLevels(q *engine.Query) bool { return q != nil && len(q.Levels) > 0 }

// createLevels creates the levels of st's query (their own levels first),
// owned by owner and numbered on from d.levels, and binds the query to
// their targets.
func (t *Definer) createLevels(ctx context.Context, tx pgx.Tx, st *engine.Statement, owner int64, d *defining) error {
	for i, l := range st.Query.Levels {
		if l.SameAs != nil {
			// The same rows as an earlier level: read its target.
			if err := st.Query.BindLevel(i, l.SameAs.Target, l.SameAs.SQL); err != nil {
				return terr.Wrap(terr.Internal, err, "transform %q: %v", st.Name, err)
			}
			continue
		}
		d.levels++
		lst := &engine.Statement{Kind: engine.CreateTransform, Schema: t.cat.Schema, Name: levelName(owner, d.levels),
			Query: l.Query, WithoutSourceIndex: st.WithoutSourceIndex}
		p, err := t.install(ctx, tx, t.cat.Schema, lst, 0, 0, owner, d)
		if err != nil {
			return levelError(err, st.Name, l.Alias, lst.Name)
		}
		sql := p.QuerySQL()
		if p.Full != "" {
			sql = p.Full // a level over levels: its query over the base tables
		}
		if err := st.Query.BindLevel(i, p.Target, sql); err != nil {
			return terr.Wrap(terr.Internal, err, "transform %q: %v", st.Name, err)
		}
	}
	return nil
}

// levelError says a refusal of a level's definition as the owner's: the
// user wrote a derived table, not the level.
func levelError(err error, owner, alias, level string) error {
	var te *terr.Error
	if !errors.As(err, &te) {
		return err
	}
	name := alias
	if !plainName.MatchString(alias) {
		name = pgx.Identifier{alias}.Sanitize()
	}
	what := fmt.Sprintf("transform %q: FROM: the subquery %s", owner, name)
	if alias == "" {
		what = fmt.Sprintf("transform %q: FROM: a subquery", owner)
	}
	msg := te.Msg
	if rest, ok := strings.CutPrefix(msg, fmt.Sprintf("transform %q: ", level)); ok {
		msg = what + ": " + rest
	} else if !strings.HasPrefix(msg, fmt.Sprintf("transform %q", owner)) {
		msg = what + ": " + msg
	}
	return &terr.Error{Code: te.Code, Msg: msg, Err: te.Err}
}

// plainName is a name PostgreSQL reads back unquoted (as the parser's
// sentences write it).
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// LevelsOf are the levels transform id owns, in creation order.
func LevelsOf(all []*catalog.Transform, id int64) []*catalog.Transform {
	var out []*catalog.Transform
	for _, o := range all {
		if o.Owner == id && id != 0 {
			out = append(out, o)
		}
	}
	return out
}

// levelRefusal refuses a statement naming a level: it is maintained for
// its owner's query and changes only with it. stmt is the statement as
// Result names it.
func (t *Definer) levelRefusal(ctx context.Context, tx pgx.Tx, stmt string, level *catalog.Transform) error {
	owner, err := t.cat.GetByID(ctx, tx, level.Owner)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	if owner == nil {
		return terr.New(terr.Internal, "transform %s is an inner level of transform %d, which does not exist", QuoteName(level.Schema, level.Name), level.Owner)
	}
	what := map[string]string{
		"DROP TRANSFORM":              "which drops its levels with it",
		"PAUSE TRANSFORM":             "which pauses its levels with it",
		"RESUME TRANSFORM":            "which resumes its levels with it",
		"CREATE OR REPLACE TRANSFORM": "whose new definition gets levels of its own",
	}[stmt]
	on := QuoteName(owner.Schema, owner.Name)
	if stmt == "CREATE OR REPLACE TRANSFORM" {
		on += " AS …"
	}
	return terr.New(terr.Conflict, "transform %s is an inner level of transform %s (kept for a derived table in its FROM that aggregates) and changes only with it; run %s %s instead, %s",
		QuoteName(level.Schema, level.Name), QuoteName(owner.Schema, owner.Name), stmt, on, what)
}

// dropTransform drops a transform's tables and catalog row, and those of
// its levels; the caller checks that no other transform reads it.
func (t *Definer) dropTransform(ctx context.Context, tx pgx.Tx, all []*catalog.Transform, tr *catalog.Transform) error {
	for _, o := range append([]*catalog.Transform{tr}, LevelsOf(all, tr.ID)...) {
		p, err := engine.Decode(o.Plan)
		if err != nil {
			return terr.Wrap(terr.Internal, err, "%v", err)
		}
		if err := engine.Uninstall(ctx, tx, p); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
	}
	// Levels first: the owner's row is what their rows reference.
	for _, o := range append(LevelsOf(all, tr.ID), tr) {
		if err := t.cat.Delete(ctx, tx, o.ID); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
	}
	return nil
}

// pauseWith pauses a transform and its levels (those not frozen already);
// it reports whether it changed anything.
func (t *Definer) pauseWith(ctx context.Context, tx pgx.Tx, all []*catalog.Transform, tr *catalog.Transform) (bool, error) {
	changed := false
	for _, o := range append([]*catalog.Transform{tr}, LevelsOf(all, tr.ID)...) {
		if catalog.Frozen(o.State) {
			continue
		}
		if err := t.cat.Pause(ctx, tx, o.ID, "user", nil); err != nil {
			return false, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		changed = true
	}
	return changed, nil
}

// resumeWith resumes a transform and its frozen levels: each is checked
// against the catalog, re-typed where a source column changed type, and
// rebuilt. A level the system paused while its owner ran is resumed
// through the owner too. Levels go first, innermost first: a level whose
// stored columns were re-typed changed the types its reader reads, so
// the reader (running or not) is re-typed and rebuilt with it. Nothing
// frozen is a conflict.
func (t *Definer) resumeWith(ctx context.Context, tx pgx.Tx, all []*catalog.Transform, tr *catalog.Transform) error {
	chain := append(LevelsOf(all, tr.ID), tr)
	if !slices.ContainsFunc(chain, func(o *catalog.Transform) bool { return catalog.Frozen(o.State) }) {
		return notPausedError(tr.Name, tr.State)
	}
	retyped := false
	for _, o := range chain {
		if !catalog.Frozen(o.State) && !retyped {
			continue
		}
		p, err := engine.Decode(o.Plan)
		if err != nil {
			return terr.Wrap(terr.Internal, err, "%v", err)
		}
		if err := engine.Revalidate(ctx, tx, o.Name, p); err != nil {
			return err
		}
		changed, err := t.retype(ctx, tx, o.Name, o.ID, p)
		if err != nil {
			return err
		}
		if !catalog.Frozen(o.State) && !changed {
			continue // a running reader its levels' re-typing left alone
		}
		retyped = retyped || changed
		if err := t.cat.Resume(ctx, tx, o.ID); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
	}
	return nil
}

// DropLevelsInSwap removes, in the swap's transaction, the levels of the
// transform a redefinition replaces: the new definition has levels of its
// own. Their workers are stopped by the caller first.
func DropLevelsInSwap(ctx context.Context, tx pgx.Tx, cat catalog.Catalog, levels []*catalog.Transform) error {
	for _, o := range levels {
		p, err := engine.Decode(o.Plan)
		if err != nil {
			return err
		}
		if err := engine.Uninstall(ctx, tx, p); err != nil {
			return fmt.Errorf("drop level %s of the replaced transform: %w", o.Name, err)
		}
		if err := cat.Delete(ctx, tx, o.ID); err != nil {
			return fmt.Errorf("drop level %s of the replaced transform: %w", o.Name, err)
		}
	}
	return nil
}

// ResumeName is the transform a RESUME must name to restart tr: tr, or
// for an inner level its owner (ADR 0018).
func ResumeName(ts []*catalog.Transform, tr *catalog.Transform) string {
	for _, o := range ts {
		if tr.Owner != 0 && o.ID == tr.Owner {
			return o.Name
		}
	}
	return tr.Name
}
