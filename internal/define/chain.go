package define

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Chains: a transform may read another transform's target. The target's
// writes reach the slot like any other table's, so the reader follows
// them; what a chain needs is a target whose rows a change can be found
// by (a key without NULLs), and an order for convergence and DROP. Every
// target has one: its own key, or where that may be NULL a hidden
// surrogate (ADR 0019) — except targets made before the surrogate.

// checkChainSources refuses a definition that reads the target of a
// transform whose rows have no NOT NULL key (a plan stored before ADR
// 0019): its changes could not be routed to the rows they affect. The
// refusal says how to give that transform one. view is loaded.
func checkChainSources(ctx context.Context, tx pgx.Tx, st *engine.Statement, view *View) error {
	if st.Query == nil {
		return nil
	}
	for _, tbl := range st.Query.Tables {
		name := pgx.Identifier{tbl.Name}
		if tbl.Schema != "" {
			name = pgx.Identifier{tbl.Schema, tbl.Name}
		}
		// The table as the planner will resolve it, compared with each
		// target by name (targets are named by schema and table).
		var schema, rel string
		err := tx.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass($1)`, name.Sanitize()).Scan(&schema, &rel)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // PlanCreate says it does not exist
		}
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "resolve %s: %v", name.Sanitize(), err)
		}
		for _, o := range view.targetOf(schema, rel) {
			if why := unkeyedTarget(view.plans[o.ID]); why != "" {
				return terr.New(terr.Validation, "transform %q: FROM %s is the target of transform %q, whose rows have no key a change can be found by (%s): %s was defined before such targets got a hidden surrogate key; %s",
					st.Name, name.Sanitize(), o.Name, why, o.Name, rekeyAdvice(view.rows, o, st.Name))
			}
		}
	}
	return nil
}

// rekeyAdvice says how reader can come to read o's unkeyed target: a
// redefinition of o with the same query is planned as today's plans are,
// so its target gets the surrogate; the reader can be created once it
// has swapped in. (No transform reads o: such a reader was refused, so
// the redefinition is not refused for one either.)
func rekeyAdvice(all []*catalog.Transform, o *catalog.Transform, reader string) string {
	for _, x := range all {
		if x.Replaces == o.ID {
			return fmt.Sprintf("its redefinition (CREATE OR REPLACE TRANSFORM, building as %s) will have one — create transform %q once that redefinition is live and has taken %s's place",
				pgx.Identifier{x.Schema, x.Name}.Sanitize(), reader, o.Name)
		}
	}
	return fmt.Sprintf("give it one by redefining it with the same query, CREATE OR REPLACE TRANSFORM %s AS %s, then create transform %q once that redefinition is live and has taken %s's place",
		pgx.Identifier{o.Schema, o.Name}.Sanitize(), o.Definition, reader, o.Name)
}

// unkeyedTarget says why a transform's target cannot be a chain's source,
// or "" when it can. Plans made since ADR 0019 always can: a target whose
// own key may be NULL has the surrogate.
func unkeyedTarget(p *engine.Plan) string {
	switch {
	case p.Surrogate != "":
		return "" // keyed by its surrogate (ADR 0018, 0019)
	case p.Shape == engine.ShapeAggregate && len(p.Groups) == 0:
		return "an aggregate without GROUP BY"
	case p.Shape == engine.ShapeAggregate:
		for _, g := range p.Groups {
			if !g.NotNull {
				return "its GROUP BY column " + g.Name + " may be NULL"
			}
		}
	default:
		for _, src := range p.Sources {
			if src.Nullable && p.Multi() {
				return "its rows come from an outer join, whose keys may be NULL"
			}
		}
	}
	return ""
}

// ReaderOf names a transform other than self that reads target, or "".
func ReaderOf(all []*catalog.Transform, target engine.Rel, self int64) string {
	for _, o := range all {
		if o.ID == self {
			continue
		}
		op, err := engine.Decode(o.Plan)
		if err != nil {
			continue
		}
		for _, src := range op.Sources {
			if src.Schema == target.Schema && src.Name == target.Name {
				return o.Name
			}
		}
	}
	return ""
}

// ChainDepth is the number of levels of the longest chain: 1 when no
// transform reads another's target.
func ChainDepth(all []*catalog.Transform) int {
	targets := map[string]*engine.Plan{}
	var plans []*engine.Plan
	for _, o := range all {
		if p, err := engine.Decode(o.Plan); err == nil {
			targets[p.Target.Ident()] = p
			plans = append(plans, p)
		}
	}
	memo := map[*engine.Plan]int{}
	var depth func(p *engine.Plan, seen map[*engine.Plan]bool) int
	depth = func(p *engine.Plan, seen map[*engine.Plan]bool) int {
		if d, ok := memo[p]; ok {
			return d
		}
		if seen[p] {
			return 1 // a cycle is refused at define; never loop on one
		}
		seen[p] = true
		d := 1
		for _, src := range p.Sources {
			if up := targets[src.Ident()]; up != nil {
				d = max(d, 1+depth(up, seen))
			}
		}
		memo[p] = d
		return d
	}
	out := 1
	for _, p := range plans {
		out = max(out, depth(p, map[*engine.Plan]bool{}))
	}
	return out
}

// UpstreamOf is transform id and the transforms whose targets it reads,
// directly or through others (nil when id is gone).
func UpstreamOf(ts []*catalog.Transform, id int64) []*catalog.Transform {
	byTarget := map[string]*catalog.Transform{}
	plans := map[int64]*engine.Plan{}
	var self *catalog.Transform
	for _, tr := range ts {
		if p, err := engine.Decode(tr.Plan); err == nil {
			plans[tr.ID] = p
			if tr.Replaces == 0 {
				byTarget[p.Target.Ident()] = tr
			}
		}
		if tr.ID == id {
			self = tr
		}
	}
	if self == nil {
		return nil
	}
	out := []*catalog.Transform{self}
	seen := map[int64]bool{id: true}
	for i := 0; i < len(out); i++ {
		p := plans[out[i].ID]
		if p == nil {
			continue
		}
		for _, src := range p.Sources {
			if up := byTarget[src.Ident()]; up != nil && !seen[up.ID] {
				seen[up.ID] = true
				out = append(out, up)
			}
		}
	}
	return out
}
