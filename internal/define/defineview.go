package define

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// View is what one Apply knows of the defined transforms and their
// decoded plans, for the checks a new definition makes against them (is
// a table it reads another transform's target, and can it be followed;
// what * over a target means). It is read with one List when a statement
// first needs it and kept current by the definitions the script creates,
// so a script of n CREATE TRANSFORM statements reads and decodes the
// catalog once instead of once per definition: applying 1,000
// definitions was quadratic in both (issue 25). It holds no states, and
// a statement that drops, redefines or resumes transforms discards it
// (the next definition reads it again): those change what it holds.
type View struct {
	loaded bool
	rows   []*catalog.Transform
	// plans are the rows' decoded plans (absent: undecodable);
	// byTarget are the rows by their plans' target tables.
	plans    map[int64]*engine.Plan
	byTarget map[[2]string][]*catalog.Transform
}

// load reads the view unless it is current.
func (v *View) load(ctx context.Context, t *Definer, tx pgx.Tx) error {
	if v.loaded {
		return nil
	}
	all, err := t.cat.List(ctx, tx)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	v.rows, v.plans, v.byTarget = nil, make(map[int64]*engine.Plan, len(all)), make(map[[2]string][]*catalog.Transform, len(all))
	for _, o := range all {
		p, err := engine.Decode(o.Plan)
		if err != nil {
			p = nil
		}
		v.put(o, p)
	}
	v.loaded = true
	return nil
}

func (v *View) put(o *catalog.Transform, p *engine.Plan) {
	v.rows = append(v.rows, o)
	if p == nil {
		return
	}
	v.plans[o.ID] = p
	k := [2]string{p.Target.Schema, p.Target.Name}
	v.byTarget[k] = append(v.byTarget[k], o)
}

// created records a transform the script just created.
func (v *View) created(o *catalog.Transform, p *engine.Plan) {
	if v.loaded { // else the next load reads it
		v.put(o, p)
	}
}

// discard drops the view: the next statement that needs it reads it
// again.
func (v *View) discard() { *v = View{} }

// targetOf is the transforms whose target is schema.name.
func (v *View) targetOf(schema, name string) []*catalog.Transform {
	return v.byTarget[[2]string{schema, name}]
}

// targets are the target tables of every transform (levels' included).
func (v *View) targets() []engine.Rel {
	var out []engine.Rel
	for _, o := range v.rows {
		if p := v.plans[o.ID]; p != nil {
			out = append(out, p.Target)
		}
	}
	return out
}
