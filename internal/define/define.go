// Package define is the definition lifecycle of transforms: what Apply's
// statements do inside the caller's transaction. CREATE plans a
// definition (engine), installs its target, its levels (ADR 0018) and its
// catalog rows; CREATE OR REPLACE records a redefinition that builds
// beside the old target; PAUSE, RESUME and DROP act on a transform with
// its levels; chains (a transform reading another's target) are checked
// and ordered here. It opens no connection and commits nothing: the
// caller (the root package's Apply) owns the transaction, the advisory
// lock that serialises definition changes and the notification that
// wakes the runner. The runtime (internal/pipeline) uses the level and
// chain helpers when it swaps a redefinition in.
package define

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Definer applies definition statements against one instance's catalog.
type Definer struct {
	cat catalog.Catalog
	// target is the schema a bare transform name is created and looked
	// up in; "" for the transaction's current schema (ADR 0040).
	target string
}

// New returns a Definer for the instance whose catalog is cat, putting
// bare transform names in targetSchema ("" for the current schema).
func New(cat catalog.Catalog, targetSchema string) *Definer {
	return &Definer{cat: cat, target: targetSchema}
}

// Prepare readies a script's transaction: with a target schema, it must
// exist, and it goes at the end of the search_path, so that a definition
// reads another transform's target by its bare name from any schema (a
// chain across schemas), while source tables resolve as they did.
func (t *Definer) Prepare(ctx context.Context, tx pgx.Tx) error {
	if t.target == "" {
		return nil
	}
	var exists, inPath bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1),
		$1 = ANY (current_schemas(false))`, t.target).Scan(&exists, &inPath)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "look for target schema %q: %v", t.target, err)
	}
	if !exists {
		return terr.New(terr.NotFound, "target schema %q does not exist; create it (CREATE SCHEMA %s) or set Config.TargetSchema (--target-schema) to one that does", t.target, pgxIdent(t.target))
	}
	if inPath {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('search_path', current_setting('search_path') || ', ' || quote_ident($1), true)`, t.target); err != nil {
		return terr.Wrap(terr.Unavailable, err, "add target schema %q to the search_path: %v", t.target, err)
	}
	return nil
}

// schemaOf is the schema a statement's transform name means: the one
// written, else the target schema, else the current one.
func (t *Definer) schemaOf(ctx context.Context, tx pgx.Tx, written string) (string, error) {
	switch {
	case written != "":
		return written, nil
	case t.target != "":
		return t.target, nil
	}
	var schema string
	if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return "", terr.Wrap(terr.Unavailable, err, "read current schema: %v", err)
	}
	return schema, nil
}

// QuoteName is schema.name with both quoted as identifiers.
func QuoteName(schema, name string) string {
	return pgx.Identifier{schema}.Sanitize() + "." + pgx.Identifier{name}.Sanitize()
}
