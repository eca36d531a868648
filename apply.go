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
// in the background under Run. Like every call that does not wait, it is
// bounded: by one Config.CallTimeout per statement of the script (a
// thousand definitions in one script are not cut short by their number),
// and a lock another session holds by one CallTimeout — such a script
// fails with code timeout and changes nothing.
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
	err = t.boundedFor(ctx, "Apply", len(sts), func(ctx context.Context, tx pgx.Tx) error {
		if err := t.lockDefinitions(ctx, tx); err != nil {
			return err
		}
		var err error
		out, err = t.applyStatements(ctx, tx, sts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockDefinitions takes the instance's definition lock for tx: one
// definition change at a time per instance keeps names and publication
// membership consistent.
func (t *Trellis) lockDefinitions(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "trellis-repl apply "+t.cat.Schema); err != nil {
		return terr.Wrap(terr.Unavailable, err, "lock the catalog: %v", err)
	}
	return nil
}

// applyStatements applies parsed statements in tx, which holds the
// definition lock, and wakes the runner at commit.
func (t *Trellis) applyStatements(ctx context.Context, tx pgx.Tx, sts []engine.Statement) ([]Result, error) {
	if err := t.def.Prepare(ctx, tx); err != nil {
		return nil, err
	}
	var out []Result
	view := &define.View{}
	for i := range sts {
		r, err := t.def.ApplyStatement(ctx, tx, &sts[i], view)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, t.notifyRunner(ctx, tx)
}
