package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// recordOID is the pseudo-type of an anonymous row value, (a, b).
const recordOID = 2249

// planAggregates decides how each aggregate call is kept (its mode and
// the ledger columns of its inputs) and, when the query has HAVING or
// expressions over aggregates, the state table and the projection that
// makes the target (ADR 0011).
func (p *Plan) planAggregates(ctx context.Context, db DB, name string, q *Query, outTypes []colType) error {
	project := q.Having != ""
	for _, t := range q.Targets {
		project = project || t.Composed != ""
	}
	argIndex := map[string]int{}
	var argOIDs []uint32
	input := func(expr string) (int, error) {
		if ai, ok := argIndex[expr]; ok {
			return ai, nil
		}
		at, err := describeStored(ctx, db, "SELECT "+expr+" FROM "+p.FromSQL())
		if err != nil {
			return 0, queryError(name, err)
		}
		if at[0].oid == recordOID {
			// An anonymous row has no type a ledger column can have.
			return 0, terr.New(terr.Validation, "transform %q: the aggregate input %s is a row value, which the ledger cannot store; aggregate the distinct rows of a subquery in FROM instead, e.g. SELECT g, count(*) AS n FROM (SELECT DISTINCT g, a, b FROM t) AS d GROUP BY g for count(DISTINCT (a, b))", name, expr)
		}
		ai := len(p.Args)
		argIndex[expr] = ai
		p.Args = append(p.Args, Col{Name: fmt.Sprintf("__a%d", ai), Type: at[0].name, Collation: at[0].collation, Expr: expr})
		argOIDs = append(argOIDs, at[0].oid)
		return ai, nil
	}
	// Which aggregates are kept, and under which names: without a
	// projection, the select items' own; with one, every call of the
	// query as __x<k>.
	type kept struct {
		agg  *Agg
		name string
		typ  colType
	}
	var keep []kept
	if project {
		for k, a := range q.Aggs {
			ts, err := describeStored(ctx, db, "SELECT "+a.Text+" FROM "+p.FromSQL())
			if err != nil {
				return queryError(name, err)
			}
			keep = append(keep, kept{a, fmt.Sprintf("__x%d", k), ts[0]})
		}
	} else {
		for i, t := range q.Targets {
			if t.Agg != nil {
				keep = append(keep, kept{t.Agg, t.Name, outTypes[i]})
			}
		}
	}
	for _, kp := range keep {
		a := AggCol{Name: kp.name, Type: kp.typ.name, Collation: kp.typ.collation, Func: kp.agg.Func, Arg: -1}
		var ins []int
		for _, in := range kp.agg.Inputs {
			ai, err := input(in)
			if err != nil {
				return err
			}
			ins = append(ins, ai)
		}
		if len(ins) > 0 {
			a.Arg = ins[0]
		}
		var argOID uint32
		if a.Arg >= 0 {
			argOID = argOIDs[a.Arg]
		}
		if err := orderSensitive(name, kp.agg, argOID, p.Sources); err != nil {
			return err
		}
		exact := a.Arg >= 0 && exactNumeric(argOIDs[a.Arg])
		switch {
		case !kp.agg.Plain:
			a.Mode = ModeRecompute
		case a.Func == "count" && kp.agg.Star:
			a.Mode = ModeCountStar
		case a.Func == "count":
			a.Mode = ModeCount
		case (a.Func == "sum" || a.Func == "avg") && exact && argOIDs[a.Arg] == 1700:
			// The result's scale and NaN/Infinity need more state than
			// a plain delta sum (ADR 0024).
			a.Mode = ModeNumeric
		case a.Func == "sum" && exact:
			a.Mode = ModeSum
		case a.Func == "avg" && exact:
			a.Mode = ModeAvg
		case a.Func == "min" || a.Func == "max":
			a.Mode = ModeExtreme
		default:
			a.Mode = ModeRecompute
		}
		if a.Mode == ModeRecompute {
			call := kp.agg.Call
			// Longest placeholder first: __trellis_in_1 is a prefix of _10.
			for i := len(ins) - 1; i >= 0; i-- {
				call = strings.ReplaceAll(call, AggInput(i), "__l."+ident(p.Args[ins[i]].Name))
			}
			a.Call = call
		}
		p.Aggs = append(p.Aggs, a)
	}
	if !project {
		return nil
	}
	p.State = &Rel{Schema: p.Ledger.Schema, Name: "state_" + sanitizeName(p.Target.Schema+"_"+name)}
	p.Having = q.Having
	for i, t := range q.Targets {
		c := Col{Name: t.Name, Type: outTypes[i].name, Collation: outTypes[i].collation}
		switch {
		case t.Composed != "":
			c.Expr = t.Composed
		case t.Agg != nil:
			c.Expr = fmt.Sprintf("%s.__x%d", stateRef, addAgg(q, t.Agg))
		default:
			c.Expr = stateRef + "." + ident(t.Name)
		}
		p.Project = append(p.Project, c)
	}
	// GROUP BY expressions the select list does not name stay in hidden
	// columns: they key the target.
	for _, g := range p.Groups {
		if !contains(p.Visible, g.Name) {
			p.Project = append(p.Project, Col{Name: g.Name, Type: g.Type, Expr: stateRef + "." + ident(g.Name)})
		}
	}
	return nil
}
