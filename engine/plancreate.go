package engine

// plancreate.go owns PlanCreate: a CREATE TRANSFORM validated against the
// database and its plan decided — sources, outer-join mirrors, probes,
// types, the row shape's identity or the aggregate shape's groups — and the
// hidden surrogate key (setSurrogate). What it calls lives by concern:
// sources.go, outerjoin.go, describe.go, mutable.go, groupby.go, planagg.go,
// indexgaps.go.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// PlanCreate validates a CREATE TRANSFORM against the database and decides
// its plan. It reads only; DDL is done by Install. schema is the resolved
// target schema.
func PlanCreate(ctx context.Context, db DB, instanceSchema, schema string, st *Statement) (*Plan, error) {
	name := st.Name
	if st.Query.Expand {
		q, err := expandStar(ctx, db, name, st.Query.SQL, nil)
		if err != nil {
			return nil, err
		}
		st.Query = q
	}
	// Calls the catalog knows as user-defined aggregates (ADR 0031).
	uq, err := userAggregates(ctx, db, name, st.Query)
	if err != nil {
		return nil, err
	}
	st.Query = uq
	q := st.Query
	for _, l := range q.Levels {
		if l.Target.Name == "" {
			// Apply creates the levels and binds them first (ADR 0018).
			return nil, terr.New(terr.Internal, "transform %q: its derived table %s is an inner level that was not created; define it through Apply", name, l.Alias)
		}
	}
	fail := func(format string, args ...any) error {
		return terr.New(terr.Validation, "transform %q: "+format, append([]any{name}, args...)...)
	}
	if err := systemColumnError(name, systemColumnRefs(q.columns)); err != nil {
		return nil, err
	}
	var searchPath string
	if err := db.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&searchPath); err != nil {
		return nil, err
	}
	target := name
	if st.TargetName != "" {
		target = st.TargetName
	}
	settings, err := recordSettings(ctx, db)
	if err != nil {
		return nil, err
	}
	p := &Plan{SearchPath: searchPath, Settings: settings, Target: Rel{Schema: schema, Name: target}, Where: q.Where, Outer: q.Outer, Cover: q.Cover, Views: q.Views}
	if q.Recursive != nil {
		// The level of a recursive CTE, kept by anchor (ADR 0035).
		return planRecursive(ctx, db, p, instanceSchema, q)
	}
	if q.Window != nil {
		// Keyed by lineage and re-derived by partition (window.go).
		p.Window = &PlanWindow{}
	}
	var schemas []string
	for i, t := range q.Tables {
		// A level's target is in the instance schema: only the query it
		// was created for may read it (ADR 0018).
		inst := instanceSchema
		if q.levelAt(i) != nil {
			inst = ""
		}
		src, err := resolveSource(ctx, db, name, inst, t)
		if err != nil {
			return nil, err
		}
		p.Sources = append(p.Sources, src)
		schemas = append(schemas, src.Schema)
	}
	for _, oj := range q.Outer {
		for _, pair := range oj.Sides() {
			for _, i := range pair[1] {
				p.Sources[i].Nullable = true
			}
		}
	}
	for k, oj := range q.Outer {
		if len(oj.Sides()[0][1]) == 0 {
			// Its NULL-extended side is a function or VALUES list, whose
			// rows change only with the preserved side's: no key of its
			// own, nothing a mirror would find (ADR 0034).
			continue
		}
		filtered, err := filteredAbove(ctx, db, p.Sources, oj)
		if err != nil {
			return nil, err
		}
		if filtered {
			// Its matches are kept in a mirror (ADR 0010): the stored rows
			// no longer record every match the join made.
			inner, err := q.InnerSQL(oj, schemas)
			if err != nil {
				return nil, terr.Wrap(terr.Internal, err, "transform %q: %v", name, err)
			}
			p.Outer[k].Inner = inner
			p.Outer[k].Mirror = &Rel{Schema: instanceSchema, Name: fmt.Sprintf("mirror_%d", k)}
		}
	}
	p.NoSourceIndex = st.WithoutSourceIndex
	p.Ordinals = ordinalCols(q.Generated)
	if p.Multi() {
		probes, err := planProbes(ctx, db, p.Sources, q.Equalities)
		if err != nil {
			return nil, err
		}
		p.Probes = probes
		from, err := q.FromSQL(schemas)
		if err != nil {
			return nil, terr.Wrap(terr.Internal, err, "transform %q: %v", name, err)
		}
		p.From = from
		for i := range p.Sources {
			for j := range p.Sources[i].Key {
				p.Sources[i].Lineage = append(p.Sources[i].Lineage, fmt.Sprintf("__s%d_%d", i, j))
			}
		}
	}
	if q.Window != nil {
		if err := windowKeys(name, q.Window, p.Sources, q.Targets); err != nil {
			return nil, err
		}
	}
	for _, t := range q.Targets {
		p.Visible = append(p.Visible, t.Name)
	}
	for _, a := range q.Aggs {
		if a.User {
			if err := checkUserAggregates(ctx, db, name, p.selectSQL(q)); err != nil {
				return nil, err
			}
			break
		}
	}
	p.Select = p.selectSQL(q)
	if len(q.Levels) > 0 {
		// What the target must equal, over the base tables: each level's
		// query in place of its target (ADR 0018).
		from, err := q.fullFrom(p.Sources)
		if err != nil {
			return nil, terr.Wrap(terr.Internal, err, "transform %q: %v", name, err)
		}
		p.Full = p.selectFrom(q, from)
	}
	// Types of the visible columns, as PostgreSQL types the user's query.
	outTypes, err := describeStored(ctx, db, p.selectSQL(q))
	if err != nil {
		return nil, queryError(name, err)
	}
	// Both checks run, so one error names every function refused: the
	// index test per expression, then the view's dependencies for what it
	// cannot see (user SQL functions it inlines; the built-ins are its).
	named, mutErr := checkMutability(ctx, db, name, p, q)
	refusals := []error{mutErr, checkImmutable(ctx, db, name, p.selectSQL(q), named)}
	if len(p.Ordinals) > 0 {
		refusals = append(refusals, checkGeneratedVolatility(ctx, db, name, p.FromSQL()))
	}
	if err := joinRefusals(refusals); err != nil {
		return nil, err
	}
	// Planned, not only analyzed: a query PostgreSQL parses but cannot
	// plan (a FULL JOIN on a condition that is neither merge- nor
	// hash-joinable) would be accepted and then fail at every read.
	if _, err := db.Exec(ctx, "EXPLAIN (COSTS OFF) "+p.selectSQL(q)); err != nil {
		return nil, queryError(name, err)
	}
	if !q.Aggregate {
		p.Shape = ShapeRow
		for i, t := range q.Targets {
			c := Col{Name: t.Name, Type: outTypes[i].name, Collation: outTypes[i].collation, Expr: t.Expr}
			if t.Column != "" {
				// A NOT NULL source column stays NOT NULL in the target, so a
				// transform reading the target can group by it (a chain).
				if c.NotNull, err = notNullColumn(ctx, db, p.Sources, t.ColumnRef, t.Column); err != nil {
					return nil, err
				}
			}
			p.Cols = append(p.Cols, c)
		}
		if p.Window != nil && len(q.Window.Partition) > 0 {
			// The partition values each row had, to find its partition
			// again after it changed.
			ptypes, err := describeStored(ctx, db, "SELECT "+strings.Join(q.Window.Partition, ", ")+" FROM "+p.FromSQL())
			if err != nil {
				return nil, queryError(name, err)
			}
			for i, e := range q.Window.Partition {
				c := Col{Name: fmt.Sprintf("__w%d", i), Type: ptypes[i].name, Collation: ptypes[i].collation, Expr: e}
				p.Window.Partition = append(p.Window.Partition, c)
				p.Cols = append(p.Cols, c)
			}
		}
		if p.Multi() {
			for _, src := range p.Sources {
				for j, k := range src.Key {
					p.Cols = append(p.Cols, Col{Name: src.Lineage[j], Type: k.Type, Expr: pgx.Identifier{src.Ref, k.Name}.Sanitize()})
					p.Identity = append(p.Identity, src.Lineage[j])
				}
			}
			for _, o := range p.Ordinals {
				p.Cols = append(p.Cols, o)
				p.Identity = append(p.Identity, o.Name)
			}
			p.setSurrogate()
			return p, nil
		}
		ref := p.Sources[0].Ref
		for _, k := range p.Sources[0].Key {
			idc := ""
			for _, t := range q.Targets {
				if t.Column == k.Name {
					idc = t.Name
					break
				}
			}
			if idc == "" {
				idc = "__k_" + k.Name
				p.Cols = append(p.Cols, Col{Name: idc, Type: k.Type,
					Expr: pgx.Identifier{ref, k.Name}.Sanitize()})
			}
			p.Identity = append(p.Identity, idc)
		}
		return p, nil
	}
	p.Shape = ShapeAggregate
	if err := checkGroupAliases(ctx, db, name, p.Sources, q); err != nil {
		return nil, err
	}
	p.Ledger = &Rel{Schema: instanceSchema, Name: "ledger_" + sanitizeName(schema+"_"+name)}
	p.GroupIndexLater = true
	// Group key columns: visible ones take the select item's name.
	gtypes := []colType{}
	if exprs := q.groupExprs(); len(exprs) > 0 {
		gtypes, err = describeStored(ctx, db, "SELECT "+strings.Join(exprs, ", ")+" FROM "+p.FromSQL())
		if err != nil {
			return nil, queryError(name, err)
		}
	}
	for len(gtypes) < len(q.GroupBy) {
		gtypes = append(gtypes, colType{name: "integer"}) // GROUPING()
	}
	seenGroup := map[int]string{}
	for _, t := range q.Targets {
		if t.Agg != nil || t.Group < 0 {
			continue
		}
		if first, dup := seenGroup[t.Group]; dup {
			return nil, fail("select list items %q and %q are the same GROUP BY expression; select it once (copy the column when you read the target)", first, t.Name)
		}
		seenGroup[t.Group] = t.Name
	}
	for gi, g := range q.GroupBy {
		col := Col{Name: fmt.Sprintf("__g%d", gi), Type: gtypes[gi].name, Collation: gtypes[gi].collation, Expr: g}
		for _, t := range q.Targets {
			if t.Group == gi && t.Agg == nil {
				col.Name = t.Name
				break
			}
		}
		for _, t := range q.Targets {
			if t.Group != gi || t.Column == "" {
				continue
			}
			nn, err := notNullColumn(ctx, db, p.Sources, t.ColumnRef, t.Column)
			if err != nil {
				return nil, err
			}
			col.NotNull = col.NotNull || nn
		}
		p.Groups = append(p.Groups, col)
	}
	if q.Grouping != nil {
		p.groupingPlan(q.Grouping)
	}
	if err := p.planAggregates(ctx, db, name, q, outTypes); err != nil {
		return nil, err
	}
	p.setSurrogate()
	return p, nil
}

// setSurrogate gives the plan the hidden surrogate key when its target
// would otherwise have no NOT NULL key (ADR 0018 for inner levels, ADR
// 0019 for every transform): an aggregate without GROUP BY or with a
// group column that may be NULL, a row transform whose lineage an outer
// join may leave NULL. A chain reads a target by such a key, and whether
// one will is not known when the target is made.
func (p *Plan) setSurrogate() {
	if p.needsSurrogate() {
		p.Surrogate = SurrogateCol
	}
}

// needsSurrogate reports whether the target's own key (its group key or
// identity) may be NULL, or is missing: see setSurrogate.
func (p *Plan) needsSurrogate() bool {
	if p.Shape == ShapeAggregate {
		return len(p.Groups) == 0 || !p.groupsNotNull()
	}
	return p.identityNullable()
}

// identityNullable reports whether an outer join may leave part of the
// stored rows' identity NULL: a source's lineage or a function's ordinal.
func (p *Plan) identityNullable() bool {
	for _, src := range p.Sources {
		if src.Nullable {
			return true
		}
	}
	for _, o := range p.Ordinals {
		if !o.NotNull {
			return true
		}
	}
	return false
}
