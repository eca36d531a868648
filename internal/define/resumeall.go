package define

// RESUME TRANSFORM ALL (ADR 0039): after a disruption every transform is
// paused by the system (a failover, a restore, a copy of the database),
// and one statement resumes them all.

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// resumeAll resumes every transform the system paused or quarantined
// (with its levels; a level resumes through its owner), each as RESUME
// TRANSFORM name does, in a savepoint of its own: one that cannot be
// resumed (its definition no longer plans, a source is missing) is named
// in the notes and left as it is. A transform a user paused stays paused.
// When nothing could be resumed while something was to be, the statement
// fails naming each, and changes nothing.
func (t *Definer) resumeAll(ctx context.Context, tx pgx.Tx, res Result) (Result, error) {
	res.Name = "ALL"
	all, err := t.cat.List(ctx, tx)
	if err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	var resumed, byUser, failed []string
	for _, tr := range all {
		if tr.Owner != 0 {
			continue // resumes with its owner
		}
		chain := append(LevelsOf(all, tr.ID), tr)
		if !slices.ContainsFunc(chain, bySystem) {
			if slices.ContainsFunc(chain, func(o *catalog.Transform) bool { return catalog.Frozen(o.State) }) {
				byUser = append(byUser, tr.Name)
			}
			continue
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		if err := t.resumeWith(ctx, sp, all, tr); err != nil {
			if rerr := sp.Rollback(ctx); rerr != nil {
				return res, terr.Wrap(terr.Unavailable, rerr, "%v", rerr)
			}
			failed = append(failed, tr.Name+": "+err.Error())
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		resumed = append(resumed, tr.Name)
	}
	if len(resumed) == 0 && len(failed) > 0 {
		return res, terr.New(terr.Conflict, "RESUME TRANSFORM ALL: no transform could be resumed: %s", strings.Join(failed, "; "))
	}
	res.Action = "unchanged"
	if len(resumed) > 0 {
		res.Action = "resumed"
		res.Notes = append(res.Notes, "resumed: "+strings.Join(resumed, ", "))
	}
	for _, f := range failed {
		res.Notes = append(res.Notes, "not resumed: "+f)
	}
	if len(byUser) > 0 {
		res.Notes = append(res.Notes, "left paused by a user (RESUME TRANSFORM each by name): "+strings.Join(byUser, ", "))
	}
	return res, nil
}

// bySystem reports a transform the system froze: paused for a capture
// failure, a halt or a disruption, or quarantined.
func bySystem(tr *catalog.Transform) bool {
	return tr.State == catalog.StateQuarantined || tr.State == catalog.StatePaused && tr.PausedBy == "system"
}
