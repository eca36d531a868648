package engine

// rebind.go owns Rebind: a stored plan's sources and views found again by
// their schema-qualified names in a copy of the database (pg_dump and
// restore, CREATE DATABASE … TEMPLATE), where OIDs are not kept (ADR 0039).

import (
	"context"
	"fmt"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Rebind points p's sources and views at the tables and views that bear
// their names now, after checking each source's key is the plan's, and
// returns the source OIDs that moved (old → new; empty when every OID was
// already right, as after pg_upgrade, which keeps relation OIDs). A source
// or view that is missing, or a key that changed, is an error naming the
// fix; p is left unchanged then.
func Rebind(ctx context.Context, db DB, name string, p *Plan) (map[uint32]uint32, error) {
	found := map[uint32]uint32{}
	for _, src := range p.Tables() {
		oid, err := findSource(ctx, db, name, src, nil)
		if err != nil {
			return nil, err
		}
		found[src.OID] = oid
	}
	views := make([]uint32, len(p.Views))
	for i, v := range p.Views {
		var oid uint32
		if err := db.QueryRow(ctx, `SELECT coalesce(to_regclass($1)::oid, 0)`, v.Name).Scan(&oid); err != nil {
			return nil, fmt.Errorf("look for view %s: %w", v.Name, err)
		}
		if oid == 0 {
			return nil, terr.New(terr.NotFound, "transform %q: the view %s it reads no longer exists; recreate it, or DROP TRANSFORM %s and create it again", name, v.Name, name)
		}
		views[i] = oid
	}
	moved := map[uint32]uint32{}
	for old, oid := range found {
		if old != oid {
			moved[old] = oid
		}
	}
	for i := range p.Sources {
		p.Sources[i].OID = found[p.Sources[i].OID]
	}
	for i := range p.Views {
		p.Views[i].OID = views[i]
	}
	return moved, nil
}
