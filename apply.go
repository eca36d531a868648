package trellis

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Apply runs a script of definition statements in one transaction: either
// all of them take effect or none does. Building a new transform continues
// in the background under Run. Like every call that does not wait, it
// returns within Config.CallTimeout: a script blocked by a lock another
// session holds fails with code timeout and changes nothing.
func (t *Trellis) Apply(ctx context.Context, script string) ([]Result, error) {
	if err := t.open("Apply"); err != nil {
		return nil, err
	}
	if err := t.writable("Apply"); err != nil {
		return nil, err
	}
	sts, err := engine.ParseStatements(script)
	if err != nil {
		return nil, err
	}
	if len(sts) == 0 {
		return nil, terr.New(terr.Validation, "the script contains no statement; write e.g. CREATE TRANSFORM name AS SELECT …")
	}
	var out []Result
	err = t.bounded(ctx, "Apply", func(ctx context.Context, tx pgx.Tx) error {
		// One definition change at a time per instance keeps names and
		// publication membership consistent.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "trellis-repl apply "+t.cat.Schema); err != nil {
			return terr.Wrap(terr.Unavailable, err, "lock the catalog: %v", err)
		}
		if err := t.def.Prepare(ctx, tx); err != nil {
			return err
		}
		view := &define.View{}
		for i := range sts {
			r, err := t.def.ApplyStatement(ctx, tx, &sts[i], view)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return t.notifyRunner(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
