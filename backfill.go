package trellis

// backfill.go owns RequestBackfill: the API of REQUEST BACKFILL OF table
// (ADR 0040; internal/define/backfill.go does the work).

import (
	"context"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// RequestBackfill re-reads table for every transform that reads it,
// after rows reached it behind capture's back (a load with the capture
// triggers disabled, rows restored or edited while the instance was not
// capturing, targets edited by hand): each such transform goes back to
// waiting_to_backfill and re-derives every one of its keys in place,
// deleting the rows no source row backs any more, while the others keep
// running; Status shows the catch-up as a build. table is an SQL name,
// bare (resolved on the search_path) or schema-qualified, quoted where it
// must be. A table no transform reads is not_found; a paused transform
// is left to its RESUME (Result.Notes says so). It is the statement
// REQUEST BACKFILL OF table, applied alone.
func (t *Trellis) RequestBackfill(ctx context.Context, table string) (Result, error) {
	sts, err := engine.ParseStatements("REQUEST BACKFILL OF " + table)
	if err != nil {
		return Result{}, err
	}
	if len(sts) != 1 || sts[0].Kind != engine.RequestBackfill {
		return Result{}, terr.New(terr.Validation, "RequestBackfill takes one table name, not %q; give [schema.]table", table)
	}
	res, err := t.Apply(ctx, "REQUEST BACKFILL OF "+table)
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}
