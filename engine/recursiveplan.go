package engine

// recursiveplan.go owns the plan of a recursive CTE's level (ADR 0035):
// the anchor and step terms over the resolved sources, the hidden columns
// its target keeps (each anchor's lineage, the last step's lineage, the
// row's identity within its anchor) and the derivation query the target
// must equal.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// PlanRecursive is how a recursive CTE's level re-derives its rows: by
// anchor. Its sources are the anchor term's, then the step's (the CTE's
// own reference is not a source); every source's lineage column is named
// as ADR 0010 names them (__s<i>_<n>).
type PlanRecursive struct {
	// Name is the CTE's name, for sentences.
	Name string `json:"name"`
	// Union: anchor UNION step, rows a set per anchor (identified by
	// their values and step lineage); otherwise UNION ALL, every
	// derivation a row identified by its path.
	Union bool `json:"union,omitempty"`
	// Anchor and Step are the sources each term reads, by Sources index.
	Anchor []int `json:"anchor"`
	Step   []int `json:"step"`
	// AnchorFrom, AnchorWhere and AnchorExprs are the anchor term over
	// the resolved tables (AnchorWhere "" when it has none).
	AnchorFrom  string   `json:"anchor_from"`
	AnchorWhere string   `json:"anchor_where,omitempty"`
	AnchorExprs []string `json:"anchor_exprs"`
	// StepFrom is the step's FROM with the CTE's reference written as
	// SelfTable, which a statement replaces by the recursion's working
	// table or by the stored rows; SelfRef is the name the step reads
	// the CTE by.
	StepFrom  string   `json:"step_from"`
	StepWhere string   `json:"step_where,omitempty"`
	StepExprs []string `json:"step_exprs"`
	SelfRef   string   `json:"self_ref"`
	// Joined are the CTE's columns the step equates with a source's
	// column: the target is indexed on them, so a changed source row
	// finds the stored rows it joins.
	Joined []string `json:"joined,omitempty"`
	// MaxDepth bounds a UNION ALL derivation (0 for UNION).
	MaxDepth int `json:"max_depth,omitempty"`
}

// SelfTable stands for the CTE's reference in PlanRecursive.StepFrom.
const SelfTable = "__trellis_self"

// Hidden columns of a recursive level's target and its derivation.
const (
	// pathCol is a row's identity within its anchor: the path of step
	// lineages (UNION ALL) or its values and step lineage (UNION), as text.
	pathCol = "__d"
	// depthCol counts a UNION ALL derivation's steps (not stored).
	depthCol = "__depth"
	// recursionRef names the derivation's working table.
	recursionRef = "__trellis_r"
)

// MaxRecursionDepth is how many steps a UNION ALL derivation may take:
// one that goes on is a cycle, which PostgreSQL would follow forever.
const MaxRecursionDepth = 1000

// anchorLineage are the anchor sources' lineage columns: the identity of
// an anchor, the same on every row it derives.
func (p *Plan) anchorLineage() []string {
	var out []string
	for _, i := range p.Recursive.Anchor {
		out = append(out, p.Sources[i].Lineage...)
	}
	return out
}

// stepLineage are the step sources' lineage columns.
func (p *Plan) stepLineage() []string {
	var out []string
	for _, i := range p.Recursive.Step {
		out = append(out, p.Sources[i].Lineage...)
	}
	return out
}

// stepFrom is the step's FROM with the CTE's reference reading table.
func (r *PlanRecursive) stepFrom(table string) string {
	return strings.Replace(r.StepFrom, SelfTable, table, 1)
}

// derivation is the recursive query over the anchors that pass restrict
// (a condition on the anchor term's FROM, "true" for all), carrying each
// anchor's lineage and the last step's, and selecting the visible
// columns, the lineage, the identity (__d) and, for UNION ALL, the depth.
func (p *Plan) derivation(restrict string) string {
	r := p.Recursive
	self := ident(r.SelfRef)
	var cols, anchorSel, stepSel, lineage, stepKeys []string
	for _, v := range p.Visible {
		cols = append(cols, ident(v))
	}
	anchorSel = append(anchorSel, r.AnchorExprs...)
	stepSel = append(stepSel, r.StepExprs...)
	for _, i := range r.Anchor {
		for j, l := range p.Sources[i].Lineage {
			lineage = append(lineage, ident(l))
			anchorSel = append(anchorSel, sourceKeyRefs(p, i)[j])
			stepSel = append(stepSel, self+"."+ident(l))
		}
	}
	for _, i := range r.Step {
		for j, l := range p.Sources[i].Lineage {
			lineage = append(lineage, ident(l))
			anchorSel = append(anchorSel, "NULL::"+p.Sources[i].Key[j].Type)
			ref := sourceKeyRefs(p, i)[j]
			stepSel = append(stepSel, ref)
			stepKeys = append(stepKeys, ref)
		}
	}
	where := func(w string) string {
		if w == "" {
			return "true"
		}
		return "(" + w + ")"
	}
	all := append(append([]string{}, cols...), lineage...)
	op, stepWhere, out := " UNION ", where(r.StepWhere), ""
	if r.Union {
		// A row's identity is its values and the step that made it: the
		// recursion deduplicates exactly those per anchor.
		out = "ROW(" + strings.Join(append(append([]string{}, cols...), identsOf(p.stepLineage())...), ", ") + ")::text AS " + pathCol
	} else {
		op = " UNION ALL "
		all = append(all, pathCol, depthCol)
		anchorSel = append(anchorSel, "''::text", "0")
		stepSel = append(stepSel, self+"."+pathCol+" || ROW("+strings.Join(stepKeys, ", ")+")::text", self+"."+depthCol+" + 1")
		stepWhere += fmt.Sprintf(" AND %s.%s < %d", self, depthCol, r.MaxDepth)
		out = pathCol + ", " + depthCol
	}
	return "WITH RECURSIVE " + recursionRef + "(" + strings.Join(all, ", ") + ") AS (SELECT " + strings.Join(anchorSel, ", ") +
		" FROM " + r.AnchorFrom + " WHERE " + where(r.AnchorWhere) + " AND " + restrict + op +
		"SELECT " + strings.Join(stepSel, ", ") + " FROM " + r.stepFrom(recursionRef) + " WHERE " + stepWhere +
		") SELECT " + strings.Join(append(append([]string{}, cols...), lineage...), ", ") + ", " + out + " FROM " + recursionRef
}

// identsOf quotes each name.
func identsOf(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = ident(n)
	}
	return out
}

// planRecursive plans the level of a recursive CTE: its sources (the
// anchor's, then the step's), the types of its columns as PostgreSQL
// gives them for the CTE as written, and a target keyed by anchor and
// identity with the surrogate key its reader reads it by.
func planRecursive(ctx context.Context, db DB, p *Plan, instanceSchema string, q *Query) (*Plan, error) {
	name := p.Target.Name
	rs := q.Recursive
	r := &PlanRecursive{Name: rs.Name, Union: rs.Union, SelfRef: rs.SelfRef}
	if !rs.Union {
		r.MaxDepth = MaxRecursionDepth
	}
	p.Recursive = r
	resolve := func(term *Query, skip int) ([]int, []string, error) {
		var idx []int
		var schemas []string
		for i, t := range term.Tables {
			if i == skip {
				schemas = append(schemas, "")
				continue
			}
			src, err := resolveSource(ctx, db, name, instanceSchema, t)
			if err != nil {
				return nil, nil, err
			}
			idx = append(idx, len(p.Sources))
			p.Sources = append(p.Sources, src)
			schemas = append(schemas, src.Schema)
		}
		return idx, schemas, nil
	}
	var err error
	var anchorSchemas, stepSchemas []string
	if r.Anchor, anchorSchemas, err = resolve(rs.Anchor, -1); err != nil {
		return nil, err
	}
	if r.Step, stepSchemas, err = resolve(rs.Step, rs.Self); err != nil {
		return nil, err
	}
	for i := range p.Sources {
		for j := range p.Sources[i].Key {
			p.Sources[i].Lineage = append(p.Sources[i].Lineage, fmt.Sprintf("__s%d_%d", i, j))
		}
	}
	for _, i := range r.Step {
		// NULL on the anchor's own row.
		p.Sources[i].Nullable = true
	}
	if r.AnchorFrom, err = rs.Anchor.FromSQL(anchorSchemas); err != nil {
		return nil, terr.Wrap(terr.Internal, err, "transform %q: %v", name, err)
	}
	if r.StepFrom, err = rs.Step.FromSQL(stepSchemas); err != nil {
		return nil, terr.Wrap(terr.Internal, err, "transform %q: %v", name, err)
	}
	if strings.Count(r.StepFrom, SelfTable) != 1 {
		return nil, terr.New(terr.Validation, "transform %q: the recursive term's FROM names %s, a name the engine keeps for itself; rename it", name, SelfTable)
	}
	r.AnchorWhere, r.StepWhere = rs.Anchor.Where, rs.Step.Where
	for _, t := range rs.Anchor.Targets {
		r.AnchorExprs = append(r.AnchorExprs, t.Expr)
	}
	for _, t := range rs.Step.Targets {
		r.StepExprs = append(r.StepExprs, t.Expr)
	}
	r.Joined = rs.Joined
	if p.Probes, err = recursiveProbes(ctx, db, p, rs); err != nil {
		return nil, err
	}
	p.Cover = []int{r.Anchor[0]}
	p.Visible = rs.Columns
	if err := checkSetReturning(ctx, db, name, rs); err != nil {
		return nil, err
	}
	// Both terms' expressions by the index test, then the CTE as written
	// by its view's dependencies: one error names every refused call.
	var refusals []error
	named := map[string]bool{}
	for _, term := range []struct {
		q    *Query
		srcs []int
	}{{rs.Anchor, r.Anchor}, {rs.Step, r.Step}} {
		var srcs []Source
		for _, i := range term.srcs {
			srcs = append(srcs, p.Sources[i])
		}
		n, err := checkMutability(ctx, db, name, &Plan{Sources: srcs}, term.q)
		refusals = append(refusals, err)
		for k, v := range n {
			named[k] = named[k] || v
		}
	}
	// The CTE as written, over the resolved tables: PostgreSQL types its
	// columns (and refuses what it refuses in a recursive query).
	written := rs.written(r)
	if err := joinRefusals(append(refusals, checkImmutable(ctx, db, name, written, named))); err != nil {
		return nil, err
	}
	outTypes, err := describeStored(ctx, db, written)
	if err != nil {
		return nil, queryError(name, err)
	}
	p.From = "(" + p.derivation("true") + ") " + recursionRef
	p.Shape = ShapeRow
	for i, v := range p.Visible {
		p.Cols = append(p.Cols, Col{Name: v, Type: outTypes[i].name, Collation: outTypes[i].collation, Expr: recursionRef + "." + ident(v)})
	}
	for _, src := range p.Sources {
		for j, k := range src.Key {
			p.Cols = append(p.Cols, Col{Name: src.Lineage[j], Type: k.Type, Expr: recursionRef + "." + ident(src.Lineage[j])})
		}
	}
	p.Cols = append(p.Cols, Col{Name: pathCol, Type: "text", NotNull: true, Expr: recursionRef + "." + pathCol})
	p.Identity = append(p.anchorLineage(), pathCol)
	p.Select = p.QuerySQL()
	if _, err := db.Exec(ctx, "EXPLAIN (COSTS OFF) "+p.Select); err != nil {
		return nil, queryError(name, err)
	}
	// Read by its owner's query: keyed by the surrogate (ADR 0019).
	p.Surrogate = SurrogateCol
	return p, nil
}

// recursiveProbes are the lookups a recursive level's statements make
// through join columns (IndexGaps reports those no index serves): the
// anchor term's joins, and each step source's column the step equates
// with a column of the CTE — every step of the recursion, and a batch's
// new-step branch, reach the source's rows through it.
func recursiveProbes(ctx context.Context, db DB, p *Plan, rs *RecursiveSpec) ([]Probe, error) {
	r := p.Recursive
	var anchor []Source
	for _, i := range r.Anchor {
		anchor = append(anchor, p.Sources[i])
	}
	out, err := planProbes(ctx, db, anchor, rs.Anchor.Equalities)
	if err != nil {
		return nil, err
	}
	for _, eq := range rs.Step.Equalities {
		for _, pair := range [][2]ColumnName{{eq.Left, eq.Right}, {eq.Right, eq.Left}} {
			if pair[0].Ref != r.SelfRef {
				continue
			}
			for _, i := range r.Step {
				if p.Sources[i].Ref == pair[1].Ref && pair[1].Ref != r.SelfRef {
					out = append(out, Probe{Source: i, Columns: []string{pair[1].Column}, Role: RoleJoinJoined})
				}
			}
		}
	}
	return out, nil
}

// written is the recursive CTE as the user wrote it, over the resolved
// tables, selecting its columns.
func (rs *RecursiveSpec) written(r *PlanRecursive) string {
	name := ident(rs.Name)
	cols := identsOf(rs.Columns)
	where := func(w string) string {
		if w == "" {
			return ""
		}
		return " WHERE " + w
	}
	op := " UNION ALL "
	if r.Union {
		op = " UNION "
	}
	return "WITH RECURSIVE " + name + "(" + strings.Join(cols, ", ") + ") AS (SELECT " + strings.Join(r.AnchorExprs, ", ") +
		" FROM " + r.AnchorFrom + where(r.AnchorWhere) + op + "SELECT " + strings.Join(r.StepExprs, ", ") +
		" FROM " + r.stepFrom(pgx.Identifier{rs.Name}.Sanitize()) + where(r.StepWhere) + ") SELECT " +
		strings.Join(prefixed(name+".", cols), ", ") + " FROM " + name
}

// checkSetReturning refuses a set-returning function in a term's select
// list: its rows would share one derivation's identity.
func checkSetReturning(ctx context.Context, db DB, name string, rs *RecursiveSpec) error {
	calls := rs.funcs
	if len(calls) == 0 {
		return nil
	}
	var sets []string
	if err := db.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT proname ORDER BY proname), '{}') FROM pg_proc WHERE proretset AND proname = ANY ($1)`, calls).Scan(&sets); err != nil {
		return fmt.Errorf("transform %q: look for set-returning functions: %w", name, err)
	}
	if len(sets) > 0 {
		return terr.New(terr.Validation, "transform %q: WITH RECURSIVE %s: its select lists call %s, which returns a set of rows per row: one derivation would give several rows the engine cannot tell apart; keep the rows it would produce in a table and join it", name, quoteIdents([]string{rs.Name}), strings.Join(sets, ", "))
	}
	return nil
}

// recursiveIndexes index a recursive level's target on the CTE's columns
// its step joins on: the new-step branch of a batch (recursivesql.go)
// probes the stored rows by them.
func (p *Plan) recursiveIndexes() []string {
	if p.Recursive == nil || len(p.Recursive.Joined) == 0 {
		return nil
	}
	name := truncIdent(p.Target.Name + "_joined")
	return []string{"CREATE INDEX " + ident(name) + " ON " + p.Target.Ident() + " (" + identList(p.Recursive.Joined) + ")",
		"COMMENT ON INDEX " + pgx.Identifier{p.Target.Schema, name}.Sanitize() + " IS " + quoteLiteral(ownIndexComment)}
}
