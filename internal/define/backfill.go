package define

// backfill.go owns REQUEST BACKFILL OF table (ADR 0040): after a load
// that bypassed capture, every transform reading the table re-derives all
// of its keys in place and deletes orphans, on the path RESUME takes.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// requestBackfill starts a rebuild of every transform that reads the
// table st names (or a partitioned table it is a partition of), frozen
// ones excepted (their RESUME rebuilds them). A table no transform reads
// is not captured: not_found.
func (t *Definer) requestBackfill(ctx context.Context, tx pgx.Tx, st *engine.Statement) (Result, error) {
	name := pgx.Identifier{st.Name}
	if st.Schema != "" {
		name = pgx.Identifier{st.Schema, st.Name}
	}
	res := Result{Statement: "REQUEST BACKFILL", Name: name.Sanitize()}
	var oids []uint32
	// The table itself, and the partitioned tables above it (a plan names
	// the root it reads).
	err := tx.QueryRow(ctx, `SELECT array_remove(array_prepend(to_regclass($1)::oid,
		ARRAY(SELECT a.relid::oid FROM pg_partition_ancestors(to_regclass($1)) a)), NULL)`, name.Sanitize()).Scan(&oids)
	if err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "look up table %s: %v", name.Sanitize(), err)
	}
	if len(oids) == 0 {
		return res, terr.New(terr.NotFound, "table %s does not exist; name a table a transform reads (`trellis-repl definitions` lists their sources)", name.Sanitize())
	}
	read := map[uint32]bool{}
	for _, o := range oids {
		read[o] = true
	}
	all, err := t.cat.List(ctx, tx)
	if err != nil {
		return res, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	var started, frozen []string
	for _, tr := range all {
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			return res, terr.Wrap(terr.Internal, err, "transform %q has an unreadable plan: %v", tr.Name, err)
		}
		reads := false
		for _, src := range p.Tables() {
			reads = reads || read[src.OID]
		}
		if !reads {
			continue
		}
		ok, err := t.cat.RequestBackfill(ctx, tx, tr.ID)
		if err != nil {
			return res, terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		// An inner level is named by its owner (ADR 0018).
		who := ResumeName(all, tr)
		switch {
		case ok && !slices.Contains(started, who):
			started = append(started, who)
		case !ok && catalog.Frozen(tr.State) && !slices.Contains(frozen, who):
			frozen = append(frozen, who)
		}
	}
	if len(started) == 0 && len(frozen) == 0 {
		return res, terr.New(terr.NotFound, "no transform reads table %s, so nothing captures it and there is nothing to backfill; REQUEST BACKFILL names a source of a transform (`trellis-repl definitions` lists them)", name.Sanitize())
	}
	res.Action = "requested"
	if len(started) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("re-deriving every key of: %s (status shows each building until live)", strings.Join(started, ", ")))
	}
	for _, f := range frozen {
		res.Notes = append(res.Notes, fmt.Sprintf("transform %q is paused or quarantined and not backfilled now: RESUME TRANSFORM %s rebuilds it", f, f))
	}
	return res, nil
}
