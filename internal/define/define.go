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
	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// Definer applies definition statements against one instance's catalog.
type Definer struct {
	cat catalog.Catalog
}

// New returns a Definer for the instance whose catalog is cat.
func New(cat catalog.Catalog) *Definer { return &Definer{cat: cat} }

// QuoteName is schema.name with both quoted as identifiers.
func QuoteName(schema, name string) string {
	return pgx.Identifier{schema}.Sanitize() + "." + pgx.Identifier{name}.Sanitize()
}
