package trellis

import (
	"context"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Apply runs a script of definition statements in one transaction: either
// all of them take effect or none does. Building a new transform continues
// in the background under Run.
func (t *Trellis) Apply(ctx context.Context, script string) ([]Result, error) {
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
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "connect: %v", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "begin: %v", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// One definition change at a time per instance keeps names and
	// publication membership consistent.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "trellis-repl apply "+t.cat.Schema); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "lock the catalog: %v", err)
	}
	var out []Result
	view := &define.View{}
	for i := range sts {
		st := &sts[i]
		r, err := t.def.ApplyStatement(ctx, tx, st, view)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, t.cat.NotifyChannel()); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "notify: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "commit: %v", err)
	}
	return out, nil
}
