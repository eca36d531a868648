package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Shapes of transforms.
const (
	ShapeRow       = "row"
	ShapeAggregate = "aggregate"
)

// Aggregate maintenance modes.
const (
	// ModeCountStar is count(*): the group's row count.
	ModeCountStar = "count_star"
	// ModeCount is count(x): kept by the delta of non-null values.
	ModeCount = "count"
	// ModeSum is an exact sum kept by deltas plus a non-null count.
	ModeSum = "sum"
	// ModeAvg is an exact average kept as hidden sum and count.
	ModeAvg = "avg"
	// ModeExtreme is min or max: lowered (raised) by the values a batch
	// adds, and recomputed from the ledger only for groups that lost a value
	// at or beyond their current extreme (ADR 0005).
	ModeExtreme = "extreme"
	// ModeRecompute is recomputed for affected groups from the ledger.
	ModeRecompute = "recompute"
	// ModeNumeric is sum or avg over numeric, kept by deltas of its
	// finite part, non-null count, scale histogram and special values, so
	// its display scale and NaN/Infinity are PostgreSQL's (ADR 0024).
	ModeNumeric = "numeric"
)

// Plan is everything the engine needs to build and maintain one transform.
// It is decided once, at define time (after asking PostgreSQL for types),
// and stored as JSON in the catalog so every process applies the same plan.
type Plan struct {
	Shape string `json:"shape"`
	// SearchPath is the search_path the definition was validated under;
	// appliers use it so unqualified functions resolve the same way.
	SearchPath string `json:"search_path"`
	// Sources are the FROM tables, one per FROM item (ADR 0010).
	Sources []Source `json:"sources"`
	// From is the FROM clause over the resolved tables when there are
	// several; a single source's FROM item is Sources[0].From.
	From string `json:"from,omitempty"`
	// Outer are the outer joins of From, by Sources index.
	Outer []OuterJoin `json:"outer,omitempty"`
	// Cover are the sources present in every output row: a build
	// enumerates their keys.
	Cover  []int  `json:"cover"`
	Target Rel    `json:"target"`
	Ledger *Rel   `json:"ledger,omitempty"`
	Where  string `json:"where,omitempty"`
	// Visible are the target's user-visible column names in select-list order.
	Visible []string `json:"visible"`

	// Row shape: every target column (visible then hidden identity columns)
	// and the target columns forming the identity: aligned with the one
	// source's key, or every source's lineage (ADR 0010).
	Cols     []Col    `json:"cols,omitempty"`
	Identity []string `json:"identity,omitempty"`

	// Aggregate shape.
	Groups []Col    `json:"groups,omitempty"` // group key columns of the target (Expr over the source)
	Args   []Col    `json:"args,omitempty"`   // ledger argument columns __a<i>
	Aggs   []AggCol `json:"aggs,omitempty"`
	// State, when set, holds the aggregates per group (Groups, Aggs) and
	// the target is its projection through Project and Having: the query
	// has HAVING or expressions over aggregates (ADR 0011).
	State   *Rel   `json:"state,omitempty"`
	Project []Col  `json:"project,omitempty"` // target columns, Expr over __s (the state row)
	Having  string `json:"having,omitempty"`  // over __s

	// Select is the user's query over the resolved sources, as kept: what
	// the target must equal.
	Select string `json:"select,omitempty"`
	// Full, for a query that reads inner levels (ADR 0018), is Select with
	// each level's query in place of its target: the query over the base
	// tables the target equals once its levels and it converged. Checks
	// use Select (QuerySQL): a level's surrogate key, which the owner's
	// stored rows may be keyed by, exists only in the level's target.
	Full string `json:"full,omitempty"`
	// Surrogate names the hidden identity column that keys a target whose
	// own key may be NULL or is missing (an aggregate without GROUP BY or
	// with a nullable group column, a row transform of an outer join), so
	// that a chain can read it (ADR 0018, 0019); "" otherwise, and in
	// plans stored before ADR 0019 for all but inner levels.
	Surrogate string `json:"surrogate,omitempty"`

	// Probes are the lookups through join columns the re-derive makes;
	// IndexGaps reports those no index serves. NoSourceIndex records
	// WITHOUT SOURCE INDEX.
	Probes        []Probe `json:"probes,omitempty"`
	NoSourceIndex bool    `json:"no_source_index,omitempty"`

	// GroupIndexLater: the ledger's group-key index is not made by Install
	// but by EnsureGroupIndex, after a fresh build has filled the ledger
	// (ADR 0025); false in plans stored before, whose Install made it.
	GroupIndexLater bool `json:"group_index_later,omitempty"`
}

// Source describes one FROM table.
type Source struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	OID    uint32 `json:"oid"`
	// From is the FROM item as used in generated SQL: schema-qualified and
	// aliased with Ref, so the user's column references resolve as written.
	From string `json:"from"`
	Ref  string `json:"ref"`
	Key  []Col  `json:"key"`
	// Lineage are the stored columns (target or ledger) that hold this
	// source's key in plans of several sources, aligned with Key.
	Lineage []string `json:"lineage,omitempty"`
	// Nullable: an outer join may NULL-extend this source, so its lineage
	// may be NULL.
	Nullable bool `json:"nullable,omitempty"`
}

// Ident is the source table's quoted, schema-qualified name.
func (s Source) Ident() string { return pgx.Identifier{s.Schema, s.Name}.Sanitize() }

// Multi reports whether the plan reads several sources, and so re-derives
// through lineage scopes (ADR 0010).
func (p *Plan) Multi() bool { return len(p.Sources) > 1 }

// FromSQL is the FROM clause of the plan's query.
func (p *Plan) FromSQL() string {
	if p.Multi() {
		return p.From
	}
	return p.Sources[0].From
}

// SourcesOf are the indexes of the sources that read the table oid (two
// or more for a self-join).
func (p *Plan) SourcesOf(oid uint32) []int {
	var out []int
	for i, s := range p.Sources {
		if s.OID == oid {
			out = append(out, i)
		}
	}
	return out
}

// Tables are the distinct source tables, in Sources order.
func (p *Plan) Tables() []Source {
	var out []Source
	seen := map[uint32]bool{}
	for _, s := range p.Sources {
		if !seen[s.OID] {
			seen[s.OID] = true
			out = append(out, s)
		}
	}
	return out
}

// Rel is a schema-qualified table.
type Rel struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// Ident returns the quoted name.
func (r Rel) Ident() string { return pgx.Identifier{r.Schema, r.Name}.Sanitize() }

// Col is a column with its SQL type and the expression that computes it.
type Col struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Collation is the expression's collation when it is not the
	// database's default (quoted, as pg_collation_for gives it): stored
	// columns carry it, so that min, max and ORDER BY over them compare
	// as the query does.
	Collation string `json:"collation,omitempty"`
	Expr      string `json:"expr,omitempty"`
	NotNull   bool   `json:"not_null,omitempty"`
	// TextCmp: the type has no default equality, so changes are detected on
	// its text form.
	TextCmp bool `json:"text_cmp,omitempty"`
}

// AggCol is one aggregate output column of an aggregate transform.
type AggCol struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Collation is as Col's: min(s) over a collated s keeps it.
	Collation string `json:"collation,omitempty"`
	Func      string `json:"func"`
	Mode      string `json:"mode"`
	// Arg indexes Plan.Args; -1 for count(*).
	Arg int `json:"arg"`
	// Call recomputes the aggregate over a group's ledger rows __l (its
	// inputs are ledger columns), for ModeRecompute.
	Call string `json:"call,omitempty"`
}

// SumCol is the hidden exact-sum column of an avg (of a numeric sum or
// avg: the sum of its finite values).
func (a AggCol) SumCol() string { return "__sum_" + a.Name }

// ScalesCol is a numeric sum's hidden scale histogram (ADR 0024).
func (a AggCol) ScalesCol() string { return "__scales_" + a.Name }

// SpecialCol is a numeric sum's hidden count of NaN and infinities.
func (a AggCol) SpecialCol() string { return "__special_" + a.Name }

// NNCol is the hidden non-null-count column of a sum or avg.
func (a AggCol) NNCol() string { return "__nn_" + a.Name }

// RowsCol is the hidden per-group row count of an aggregate target.
const RowsCol = "__rows"

// Decode parses a stored plan. Plans stored before ADR 0010 name their one
// table as "source"; they read as a plan of that one source.
func Decode(raw []byte) (*Plan, error) {
	var p struct {
		Plan
		Legacy *Source `json:"source"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	if len(p.Sources) == 0 && p.Legacy != nil {
		p.Sources = []Source{*p.Legacy}
	}
	if len(p.Sources) == 0 {
		return nil, errors.New("decode plan: it names no source table")
	}
	if len(p.Cover) == 0 {
		p.Cover = []int{0}
	}
	return &p.Plan, nil
}

// Encode serialises the plan.
func (p *Plan) Encode() (json.RawMessage, error) { return json.Marshal(p) }

// DB is what planning needs: queries and statement description in one
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Conn() *pgx.Conn
}

type colType struct {
	oid  uint32
	name string
	// collation: see Col.Collation.
	collation string
}

// describe asks PostgreSQL for the result types of a SELECT without
// running it.
func describe(ctx context.Context, db DB, sql string) ([]colType, error) {
	out, _, err := describeTypes(ctx, db, sql)
	return out, err
}

// describeStored is describe plus the collations of the collatable
// columns: what a stored column of the plan needs (the drift watch, which
// compares types only, spares the extra query).
func describeStored(ctx context.Context, db DB, sql string) ([]colType, error) {
	out, collatable, err := describeTypes(ctx, db, sql)
	if err == nil && len(collatable) > 0 {
		err = describeCollations(ctx, db, sql, out, collatable)
	}
	return out, err
}

// describeTypes is describe, and which columns are collatable.
func describeTypes(ctx context.Context, db DB, sql string) ([]colType, []int, error) {
	sd, err := db.Conn().PgConn().Prepare(ctx, "", sql, nil)
	if err != nil {
		return nil, nil, err
	}
	out := make([]colType, len(sd.Fields))
	var collatable []int
	for i, f := range sd.Fields {
		var coll bool
		if err := db.QueryRow(ctx, `SELECT format_type($1::oid, nullif($2::int, -1)), coalesce((SELECT typcollation <> 0 FROM pg_type WHERE oid = $1::oid), false)`,
			f.DataTypeOID, f.TypeModifier).Scan(&out[i].name, &coll); err != nil {
			return nil, nil, fmt.Errorf("format type %d: %w", f.DataTypeOID, err)
		}
		if coll {
			collatable = append(collatable, i)
		}
		// Without a length, "character" and "bit" name one-character types
		// in DDL; an expression's char/bit value can be any length.
		if f.TypeModifier < 0 {
			switch f.DataTypeOID {
			case 1042:
				out[i].name = "bpchar"
			case 1560:
				out[i].name = "bit varying"
			}
		}
		out[i].oid = f.DataTypeOID
	}
	return out, collatable, nil
}

// describeCollations sets the collation of the columns at idx of sql's
// result: pg_collation_for over the columns of one NULL-extended row, so
// the query is planned but reads nothing.
func describeCollations(ctx context.Context, db DB, sql string, out []colType, idx []int) error {
	names := make([]string, len(out))
	for i := range out {
		names[i] = fmt.Sprintf("c%d", i)
	}
	calls := make([]string, len(idx))
	for k, i := range idx {
		calls[k] = "pg_collation_for(__q.c" + fmt.Sprint(i) + ")"
	}
	q := "SELECT " + strings.Join(calls, ", ") + " FROM (" + sql + ") AS __q(" + strings.Join(names, ", ") + ") RIGHT JOIN (SELECT) AS __one ON false"
	colls := make([]*string, len(idx))
	dest := make([]any, len(idx))
	for k := range colls {
		dest[k] = &colls[k]
	}
	if err := db.QueryRow(ctx, q).Scan(dest...); err != nil {
		return fmt.Errorf("read the collations of the query's columns: %w", err)
	}
	for k, i := range idx {
		if colls[k] != nil && *colls[k] != `"default"` {
			out[i].collation = *colls[k]
		}
	}
	return nil
}

// typeDDL is a stored column's type with its collation.
func typeDDL(typ, collation string) string {
	if collation == "" {
		return typ
	}
	return typ + " COLLATE " + collation
}

// exactNumeric reports whether sums of this type are exact (and so can be
// maintained by deltas): smallint, integer, bigint, numeric.
func exactNumeric(oid uint32) bool {
	switch oid {
	case 20, 21, 23, 1700:
		return true
	}
	return false
}

// PlanCreate validates a CREATE TRANSFORM against the database and decides
// its plan. It reads only; DDL is done by Install. schema is the resolved
// target schema.
func PlanCreate(ctx context.Context, db DB, instanceSchema, schema string, st *Statement) (*Plan, error) {
	name := st.Name
	if st.Query.Star {
		q, err := expandStar(ctx, db, name, st.Query.SQL, nil)
		if err != nil {
			return nil, err
		}
		st.Query = q
	}
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
	p := &Plan{SearchPath: searchPath, Target: Rel{Schema: schema, Name: target}, Where: q.Where, Outer: q.Outer, Cover: q.Cover}
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
	for _, t := range q.Targets {
		p.Visible = append(p.Visible, t.Name)
	}
	if err := checkImmutable(ctx, db, name, p.selectSQL(q)); err != nil {
		return nil, err
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
	if err := checkMutability(ctx, db, name, p, q); err != nil {
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
		if p.Multi() {
			for _, src := range p.Sources {
				for j, k := range src.Key {
					p.Cols = append(p.Cols, Col{Name: src.Lineage[j], Type: k.Type, Expr: pgx.Identifier{src.Ref, k.Name}.Sanitize()})
					p.Identity = append(p.Identity, src.Lineage[j])
				}
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
	if len(q.GroupBy) > 0 {
		exprs := make([]string, len(q.GroupBy))
		copy(exprs, q.GroupBy)
		gtypes, err = describeStored(ctx, db, "SELECT "+strings.Join(exprs, ", ")+" FROM "+p.FromSQL())
		if err != nil {
			return nil, queryError(name, err)
		}
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
	for _, src := range p.Sources {
		if src.Nullable {
			return true
		}
	}
	return false
}

// filteredAbove reports whether a condition after an outer join may keep
// a matched row and drop its NULL-extended counterpart (or the other way
// round): one that reads a table other than the join's preserved side —
// its NULL-extended side (WHERE b.x IS NULL above a LEFT JOIN b), or a
// table joined later, possibly through it. A matched row the condition
// drops leaves no stored row, so a later change to b could not find, from
// the stored rows alone, the preserved row whose NULL-extended row should
// appear; the join's matches are mirrored instead (ADR 0010). A condition
// on the preserved side alone keeps or drops a row with or without its
// match alike.
func filteredAbove(ctx context.Context, db DB, sources []Source, oj OuterJoin) (bool, error) {
	for _, pair := range oj.Sides() {
		for _, cn := range oj.Above {
			if cn.Column == "*" {
				return true, nil
			}
			for i, src := range sources {
				if containsInt(pair[0], i) {
					continue
				}
				hit := cn.Ref == src.Ref
				if cn.Ref == "" {
					col, err := sourceColumn(ctx, db, src, cn.Column)
					if err != nil {
						return false, err
					}
					hit = col.found
				}
				if hit {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// resolveSource finds a FROM table in the catalog with its key.
func resolveSource(ctx context.Context, db DB, name, instanceSchema string, t TableRef) (Source, error) {
	lookup := pgx.Identifier{t.Name}.Sanitize()
	if t.Schema != "" {
		lookup = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	var src Source
	var relkind string
	err := db.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname, c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, lookup).
		Scan(&src.OID, &src.Schema, &src.Name, &relkind)
	if errors.Is(err, pgx.ErrNoRows) {
		return src, terr.New(terr.NotFound, "transform %q: FROM table %s does not exist; create it first or fix the name", name, lookup)
	}
	if err != nil {
		return src, fmt.Errorf("resolve source %s: %w", lookup, err)
	}
	if relkind != "r" && relkind != "p" {
		return src, terr.New(terr.Validation, "transform %q: FROM %s is not a table (relkind %q); a transform reads ordinary or partitioned tables", name, lookup, relkind)
	}
	if instanceSchema != "" && src.Schema == instanceSchema {
		return src, terr.New(terr.Validation, "transform %q: FROM %s is in the trellis-repl instance schema; transforms read user tables", name, lookup)
	}
	// Primary key (or replica identity index) of the source.
	if src.Key, err = sourceKey(ctx, db, src.OID); err != nil {
		return src, err
	}
	if len(src.Key) == 0 {
		return src, terr.New(terr.Validation, "transform %q: FROM table %s has no primary key; add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or make a unique index over NOT NULL columns its replica identity (ALTER TABLE %[2]s REPLICA IDENTITY USING INDEX ...), so changed rows can be identified (REPLICA IDENTITY FULL names no key)",
			name, src.Ident(), src.Ident())
	}
	if err := checkWholeSource(ctx, db, name, src.OID, src.Ident(), t.Only); err != nil {
		return src, err
	}
	src.Ref = t.RefName()
	src.From = src.Ident() + " AS " + pgx.Identifier{src.Ref}.Sanitize()
	if t.Only {
		src.From = "ONLY " + src.From
	}
	return src, nil
}

// selectSQL is the user's query with the FROM item schema-qualified.
func (p *Plan) selectSQL(q *Query) string { return p.selectFrom(q, p.FromSQL()) }

// selectFrom is the user's query over the FROM clause from.
func (p *Plan) selectFrom(q *Query, from string) string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, t := range q.Targets {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.Expr)
		b.WriteString(" AS ")
		b.WriteString(pgx.Identifier{t.Name}.Sanitize())
	}
	b.WriteString(" FROM ")
	b.WriteString(from)
	if q.Where != "" {
		b.WriteString(" WHERE ")
		b.WriteString(q.Where)
	}
	if len(q.GroupBy) > 0 {
		b.WriteString(" GROUP BY ")
		b.WriteString(strings.Join(q.GroupBy, ", "))
	}
	if q.HavingSQL != "" {
		b.WriteString(" HAVING ")
		b.WriteString(q.HavingSQL)
	}
	return b.String()
}

// QuerySQL is the transform's defining query over the resolved source, with
// visible columns in order: what the target must equal.
func (p *Plan) QuerySQL() string {
	if p.Select != "" {
		return p.Select
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	if p.Shape == ShapeRow {
		for i, c := range p.Cols[:len(p.Visible)] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s AS %s", c.Expr, pgx.Identifier{c.Name}.Sanitize())
		}
	} else {
		for i, name := range p.Visible {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.visibleAggExpr(name))
			b.WriteString(" AS ")
			b.WriteString(pgx.Identifier{name}.Sanitize())
		}
	}
	b.WriteString(" FROM " + p.FromSQL())
	if p.Where != "" {
		b.WriteString(" WHERE " + p.Where)
	}
	if p.Shape == ShapeAggregate && len(p.Groups) > 0 {
		b.WriteString(" GROUP BY ")
		for i, g := range p.Groups {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(g.Expr)
		}
	}
	return b.String()
}

func (p *Plan) visibleAggExpr(name string) string {
	for _, g := range p.Groups {
		if g.Name == name {
			return g.Expr
		}
	}
	for _, a := range p.Aggs {
		if a.Name != name {
			continue
		}
		if a.Arg < 0 {
			return "count(*)"
		}
		return a.Func + "(" + p.Args[a.Arg].Expr + ")"
	}
	return "NULL"
}

// sourceKey returns the primary key (else replica identity index) columns of
// a table in index order, with their types.
func sourceKey(ctx context.Context, db DB, oid uint32) ([]Col, error) {
	rows, err := db.Query(ctx, `
		WITH idx AS (
			SELECT i.indexrelid, i.indkey FROM pg_index i
			WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)
			ORDER BY i.indisprimary DESC LIMIT 1)
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM idx, unnest(idx.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = $1 AND a.attnum = k.attnum
		ORDER BY k.ord`, oid)
	if err != nil {
		return nil, fmt.Errorf("read key of table %d: %w", oid, err)
	}
	defer rows.Close()
	var out []Col
	for rows.Next() {
		var c Col
		if err := rows.Scan(&c.Name, &c.Type); err != nil {
			return nil, err
		}
		c.NotNull = true
		out = append(out, c)
	}
	return out, rows.Err()
}

// notNullColumn reports whether a column reference (ref "" when
// unqualified) always has a value: a NOT NULL column of a source that no
// outer join NULL-extends. An unqualified name is resolved as PostgreSQL
// does, to the one source that has such a column.
func notNullColumn(ctx context.Context, db DB, sources []Source, ref, column string) (bool, error) {
	found := false
	for _, src := range sources {
		if ref != "" && src.Ref != ref {
			continue
		}
		col, err := sourceColumn(ctx, db, src, column)
		if err != nil {
			return false, err
		}
		if !col.found {
			continue
		}
		if found {
			return false, nil // ambiguous: PostgreSQL refuses the query anyway
		}
		found = true
		if !col.notNull || src.Nullable {
			return false, nil
		}
	}
	return found, nil
}

// checkImmutable refuses definitions that call volatile or stable functions
// or operators: PostgreSQL records every function and operator a view uses in
// pg_depend, so a throwaway temporary view inside a savepoint tells us.
func checkImmutable(ctx context.Context, db DB, name, sql string) error {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_check`); err != nil {
		return err
	}
	defer db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_check`) //nolint:errcheck
	if _, err := db.Exec(ctx, `CREATE TEMPORARY VIEW trellis_check_view AS `+sql); err != nil {
		return queryError(name, err)
	}
	rows, err := db.Query(ctx, `
		SELECT DISTINCT p.oid::regprocedure::text, p.provolatile::text
		FROM pg_depend d
		JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
		LEFT JOIN pg_operator o ON d.refclassid = 'pg_operator'::regclass AND d.refobjid = o.oid
		JOIN pg_proc p ON (d.refclassid = 'pg_proc'::regclass AND p.oid = d.refobjid) OR p.oid = o.oprcode
		WHERE r.ev_class = 'trellis_check_view'::regclass AND p.provolatile <> 'i'
		ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("check volatility: %w", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var fn, vol string
		if err := rows.Scan(&fn, &vol); err != nil {
			return err
		}
		kind := "stable"
		if vol == "v" {
			kind = "volatile"
		}
		bad = append(bad, fn+" ("+kind+")")
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return terr.New(terr.Validation, "transform %q: the query calls %s; a transform may use only immutable functions and operators, because rows are re-derived at different times — remove the call or compute the value into a source column",
			name, strings.Join(bad, ", "))
	}
	return nil
}

// queryError turns PostgreSQL's complaint about a definition into a
// validation error that keeps PostgreSQL's own sentence.
func queryError(name string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := terr.Validation
		// A missing table or column; a function that does not exist for
		// these argument types (max(uuid)) is the query's own mistake.
		if pgErr.Code == "42P01" || pgErr.Code == "42703" {
			code = terr.NotFound
		}
		msg := pgErr.Message
		if strings.HasPrefix(msg, "could not identify an equality operator for type") {
			// GROUP BY or DISTINCT over a type without btree equality.
			return terr.Wrap(terr.Validation, err, "transform %q: %s, so it cannot key a group: GROUP BY and DISTINCT need a type with equality — group by a cast to one that has it (json to jsonb, or to text)", name, msg)
		}
		if pgErr.Hint != "" {
			msg += " (hint: " + pgErr.Hint + ")"
		}
		return terr.Wrap(code, err, "transform %q: PostgreSQL rejects the query: %s; fix the SELECT", name, msg)
	}
	return fmt.Errorf("transform %q: describe query: %w", name, err)
}

// sanitizeName makes a string usable inside a generated identifier.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + 32)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 50 {
		out = out[:50]
	}
	return out
}

// Revalidate checks, before a rebuild, that a stored plan still matches the
// database: the source exists with the same identity and key.
func Revalidate(ctx context.Context, db DB, name string, p *Plan) error {
	for _, src := range p.Tables() {
		if err := revalidateSource(ctx, db, name, src); err != nil {
			return err
		}
	}
	var ok bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, p.Target.Ident()).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return terr.New(terr.NotFound, "transform %q: its target table %s was dropped; DROP TRANSFORM %s and create it again", name, p.Target.Ident(), name)
	}
	return nil
}

// revalidateSource checks that one source table still exists with the
// same identity and key.
func revalidateSource(ctx context.Context, db DB, name string, src Source) error {
	var oid uint32
	err := db.QueryRow(ctx, `SELECT coalesce(to_regclass($1)::oid, 0)`, src.Ident()).Scan(&oid)
	if err != nil {
		return fmt.Errorf("look for source: %w", err)
	}
	if oid == 0 {
		return terr.New(terr.NotFound, "transform %q: its FROM table %s.%s no longer exists; recreate it, or DROP TRANSFORM %s",
			name, src.Schema, src.Name, name)
	}
	if oid != src.OID {
		return terr.New(terr.Validation, "transform %q: its FROM table %s.%s was dropped and recreated; DROP TRANSFORM %s and create it again",
			name, src.Schema, src.Name, name)
	}
	key, err := sourceKey(ctx, db, oid)
	if err != nil {
		return err
	}
	same := len(key) == len(src.Key)
	for i := 0; same && i < len(key); i++ {
		same = key[i].Name == src.Key[i].Name && key[i].Type == src.Key[i].Type
	}
	if !same {
		return terr.New(terr.Validation, "transform %q: the primary key of %s.%s changed; DROP TRANSFORM %s and create it again", name, src.Schema, src.Name, name)
	}
	return nil
}

// checkGroupAliases refuses a GROUP BY name that the parser resolved to an
// output alias when a source also has a column of that name: PostgreSQL
// would group by the column, so the definition would not mean what it says.
func checkGroupAliases(ctx context.Context, db DB, name string, sources []Source, q *Query) error {
	for _, alias := range q.GroupByAlias {
		if alias == "" {
			continue
		}
		for _, src := range sources {
			col, err := sourceColumn(ctx, db, src, alias)
			if err != nil {
				return err
			}
			if col.found {
				return terr.New(terr.Validation, "transform %q: GROUP BY %s is ambiguous: it names both a column of FROM table %s and an output column; PostgreSQL groups by the table column — write the expression itself in GROUP BY, or rename the output column",
					name, alias, src.Ident())
			}
		}
	}
	return nil
}
