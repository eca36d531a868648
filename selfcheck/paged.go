package selfcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Kinds of divergence.
const (
	// MissingRow is a row the query produces that the target lacks.
	MissingRow = "missing_row"
	// ExtraRow is a target row the query does not produce.
	ExtraRow = "extra_row"
	// Cell is a column whose stored value differs from the recomputed one,
	// in a row both sides have (same identity).
	Cell = "cell"
)

// Defaults of Options.
const (
	DefaultPageSize = 20000
	DefaultKeep     = 10000
	// recheckChunk is how many identities one re-check statement reads.
	recheckChunk = 200
)

// Spec says what to compare: the target's Columns with the same-named
// output columns of Query, page by page in the order of the target's
// Identity (a subset of Columns; empty for a target of one row, such as
// an aggregate without GROUP BY).
type Spec struct {
	Target   pgx.Identifier
	Columns  []string
	Identity []string
	// Query is a SELECT whose output columns are named like Columns.
	Query string
}

// Options tune Run. The zero value compares everything with the defaults.
type Options struct {
	// PageSize is how many target rows one page compares (default
	// DefaultPageSize). Go holds no page: only the differences of the
	// current identity and the kept divergences.
	PageSize int
	// Keep is how many divergences Result.Divergences keeps (default
	// DefaultKeep); the counts are exact whatever it is.
	Keep int
	// Held, when set, says whether an identity's divergences are expected
	// (a key held in quarantine): they are counted in Result.Held only.
	Held func(identity []*string) bool
	// After starts the comparison after this identity (nil: at the first);
	// with MaxRows, it wraps round to the first identity and stops at After.
	After []*string
	// MaxRows, when > 0, stops at the end of the page where the target rows
	// compared reach it (a sample).
	MaxRows int64
}

// Divergence is one difference between the target and the query. Values
// are PostgreSQL's text forms; nil is SQL NULL.
type Divergence struct {
	Kind string `json:"kind"`
	// Identity is the row's identity values, in Spec.Identity order.
	Identity []*string `json:"identity"`
	// Column names the differing column of a Cell.
	Column string `json:"column,omitempty"`
	// Stored is the target's value (a whole row, in row text form, for an
	// ExtraRow); Recomputed the query's (the row, for a MissingRow).
	Stored     *string `json:"stored"`
	Recomputed *string `json:"recomputed"`
}

// Result is what Run and Recheck found.
type Result struct {
	// TargetRows and QueryRows are the rows compared on each side.
	TargetRows int64
	QueryRows  int64
	// Pages is the number of pages compared.
	Pages int
	// Total counts divergences (a row differing in two columns is two
	// Cell divergences), Counts the same by kind; Held those at identities
	// Options.Held accepted, which count nowhere else.
	Total  int64
	Counts map[string]int64
	Held   int64
	// Divergences are the first Options.Keep divergences, in identity
	// order within each page, pages in order; Truncated says there were
	// more.
	Divergences []Divergence
	Truncated   bool
	// Complete: every identity was compared (no MaxRows stop).
	Complete bool
}

// Identities are the distinct identities of r.Divergences, in order.
func (r *Result) Identities() [][]*string {
	var out [][]*string
	seen := map[string]bool{}
	for _, d := range r.Divergences {
		var k strings.Builder
		for _, v := range d.Identity {
			if v == nil {
				k.WriteString("\x00N")
			} else {
				k.WriteString("\x00V" + *v)
			}
		}
		if !seen[k.String()] {
			seen[k.String()] = true
			out = append(out, d.Identity)
		}
	}
	return out
}

// column is one compared target column as the catalog describes it.
type column struct {
	name    string
	typ     string // format_type, for casting identity bounds
	notNull bool
	collate string // the column's collation, qualified and quoted; "" when not collatable
	text    bool   // no btree equality: compared as text
}

// checker compares one Spec inside one transaction.
type checker struct {
	tx    pgx.Tx
	spec  Spec
	opts  Options
	cols  []column
	ident []int // indexes into cols of the identity columns
}

// Run compares spec inside tx, which must be a REPEATABLE READ transaction
// so that every page reads one snapshot. Pages are keyset ranges of the
// target's identity: each page finds its upper bound in the target (the
// PageSize-th identity after the last page's), then compares the target
// rows and the query rows in that range with a two-way EXCEPT ALL (exact
// for every type with equality, NULLs equal, duplicates by multiplicity)
// and pairs the differing rows of one identity into cell divergences.
// The query is restricted by the same range, which PostgreSQL pushes into
// it: for an identity served by an index (a row transform's source key)
// each page is a range scan.
func Run(ctx context.Context, tx pgx.Tx, spec Spec, opts Options) (*Result, error) {
	c, err := newChecker(ctx, tx, spec, opts)
	if err != nil {
		return nil, err
	}
	res := newResult()
	if len(c.ident) == 0 {
		res.Complete = true
		return res, c.runPage(ctx, res, "true", "true", nil)
	}
	done, err := c.scan(ctx, res, opts.After, nil, opts.MaxRows)
	if err != nil {
		return nil, err
	}
	if done && opts.After != nil {
		// Wrap round: the identities up to where it started.
		if done, err = c.scan(ctx, res, nil, opts.After, opts.MaxRows); err != nil {
			return nil, err
		}
	}
	res.Complete = done
	return res, nil
}

// Recheck compares only the given identities (those of an earlier Run's
// divergences, typically), in tx's snapshot.
func Recheck(ctx context.Context, tx pgx.Tx, spec Spec, identities [][]*string, opts Options) (*Result, error) {
	c, err := newChecker(ctx, tx, spec, opts)
	if err != nil {
		return nil, err
	}
	res := newResult()
	res.Complete = true
	if len(c.ident) == 0 {
		if len(identities) == 0 {
			return res, nil
		}
		return res, c.runPage(ctx, res, "true", "true", nil)
	}
	for start := 0; start < len(identities); start += recheckChunk {
		chunk := identities[start:min(start+recheckChunk, len(identities))]
		tp, qp, a := c.pagePreds(func(s side, a *args) string { return c.anyOf(chunk, s, a) })
		if err := c.runPage(ctx, res, tp, qp, a.vals); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func newResult() *Result {
	return &Result{Counts: map[string]int64{MissingRow: 0, ExtraRow: 0, Cell: 0}}
}

func newChecker(ctx context.Context, tx pgx.Tx, spec Spec, opts Options) (*checker, error) {
	if len(spec.Target) == 0 {
		return nil, terr.New(terr.Validation, "self-check: no target table given")
	}
	if len(spec.Columns) == 0 {
		return nil, terr.New(terr.Validation, "self-check of %s: no columns to compare", spec.Target.Sanitize())
	}
	spec.Query = strings.TrimRight(strings.TrimSpace(spec.Query), "; \t\r\n")
	if spec.Query == "" {
		return nil, terr.New(terr.Validation, "self-check of %s: empty defining query", spec.Target.Sanitize())
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	c := &checker{tx: tx, spec: spec, opts: opts}
	cols, err := describeTarget(ctx, tx, spec.Target, spec.Columns)
	if err != nil {
		return nil, err
	}
	c.cols = cols
	for _, name := range spec.Identity {
		i := slices.IndexFunc(cols, func(c column) bool { return c.name == name })
		if i < 0 {
			return nil, terr.New(terr.Validation, "self-check of %s: identity column %q is not among the compared columns", spec.Target.Sanitize(), name)
		}
		c.ident = append(c.ident, i)
	}
	return c, nil
}

// describeSQL reads the compared columns of the target: type, NOT NULL,
// collation, and whether the type has a default btree equality (else it
// is compared as text, as the engine detects changes: Col.TextCmp).
const describeSQL = `
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
  CASE WHEN a.attcollation <> 0 THEN quote_ident(cn.nspname) || '.' || quote_ident(co.collname) ELSE '' END,
  NOT (EXISTS (SELECT 1 FROM pg_opclass oc JOIN pg_am am ON am.oid = oc.opcmethod
        WHERE am.amname = 'btree' AND oc.opcdefault AND (oc.opcintype = b.oid
          OR (oc.opcintype = 'anyenum'::regtype AND b.typtype = 'e')
          OR (oc.opcintype = 'anyrange'::regtype AND b.typtype = 'r')
          OR (oc.opcintype = 'anymultirange'::regtype AND b.typtype = 'm')
          OR (oc.opcintype = 'anyarray'::regtype AND b.typelem <> 0 AND b.typlen = -1 AND EXISTS (
                SELECT 1 FROM pg_opclass eo JOIN pg_am ea ON ea.oid = eo.opcmethod
                JOIN pg_type e ON e.oid = b.typelem
                WHERE ea.amname = 'btree' AND eo.opcdefault
                  AND (eo.opcintype = e.oid OR eo.opcintype = e.typbasetype
                    OR (eo.opcintype = 'anyenum'::regtype AND e.typtype = 'e')
                    OR (eo.opcintype = 'anyrange'::regtype AND e.typtype = 'r')))))))
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY($2)`

func describeTarget(ctx context.Context, tx pgx.Tx, target pgx.Identifier, names []string) ([]column, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, target.Sanitize()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("self-check of %s: look for the target: %w", target.Sanitize(), err)
	}
	if !exists {
		return nil, terr.New(terr.NotFound, "self-check: the target table %s does not exist; DROP TRANSFORM and create it again if it was dropped", target.Sanitize())
	}
	rows, err := tx.Query(ctx, describeSQL, target.Sanitize(), names)
	if err != nil {
		return nil, fmt.Errorf("self-check of %s: describe the target: %w", target.Sanitize(), err)
	}
	byName := map[string]column{}
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ, &c.notNull, &c.collate, &c.text); err != nil {
			rows.Close()
			return nil, err
		}
		byName[c.name] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("self-check of %s: describe the target: %w", target.Sanitize(), err)
	}
	out := make([]column, 0, len(names))
	for _, n := range names {
		c, ok := byName[n]
		if !ok {
			return nil, terr.New(terr.NotFound, "self-check: the target table %s has no column %q; was it altered? DROP TRANSFORM and create it again", target.Sanitize(), n)
		}
		out = append(out, c)
	}
	return out, nil
}

// side says which relation a predicate or select list reads: the target,
// or the query (whose collatable identity columns are compared under the
// target's collation, so that both sides page in one order).
type side int

const (
	onTarget side = iota
	onQuery
)

// ref is column c as a predicate or ORDER BY on side s reads it.
func (c *checker) ref(i int, s side) string {
	col := c.cols[i]
	r := pgx.Identifier{col.name}.Sanitize()
	if s == onQuery && col.collate != "" {
		r = "(" + r + " COLLATE " + col.collate + ")"
	}
	return r
}

// args collects a statement's parameters: identity values as text, cast
// to the target column's type.
type args struct{ vals []any }

func (a *args) add(v string, typ string) string {
	a.vals = append(a.vals, v)
	return fmt.Sprintf("$%d::%s", len(a.vals), typ)
}

// byRow: every identity column is NOT NULL (and so is every value of v),
// so a row comparison (which a btree index serves) orders them.
func (c *checker) byRow(v []*string) bool {
	for j, i := range c.ident {
		if !c.cols[i].notNull || v[j] == nil {
			return false
		}
	}
	return true
}

// after is the predicate "identity > v" in ORDER BY order (ascending,
// NULLS LAST), on side s.
func (c *checker) after(v []*string, s side, a *args) string {
	if c.byRow(v) {
		return c.rowCmp(v, ">", s, a)
	}
	var terms []string
	for j := range c.ident {
		if v[j] == nil {
			continue // nothing sorts after NULL
		}
		var conj []string
		for l := 0; l < j; l++ {
			conj = append(conj, c.eq(l, v[l], s, a))
		}
		terms = append(terms, "("+strings.Join(append(conj, c.gt(j, v[j], s, a)), " AND ")+")")
	}
	if len(terms) == 0 {
		return "false"
	}
	return "(" + strings.Join(terms, " OR ") + ")"
}

// atOrBefore is "identity <= v" in ORDER BY order, on side s.
func (c *checker) atOrBefore(v []*string, s side, a *args) string {
	if c.byRow(v) {
		return c.rowCmp(v, "<=", s, a)
	}
	var terms []string
	for j := range c.ident {
		var conj []string
		for l := 0; l < j; l++ {
			conj = append(conj, c.eq(l, v[l], s, a))
		}
		terms = append(terms, "("+strings.Join(append(conj, c.lt(j, v[j], s, a)), " AND ")+")")
	}
	terms = append(terms, c.eqAll(v, s, a))
	return "(" + strings.Join(terms, " OR ") + ")"
}

// rowCmp compares the NOT NULL identity with v as a row (one column: a
// plain comparison). On the query side of an identity of several
// columns, the first column is also bounded on its own, a condition
// PostgreSQL can push to the table that column comes from (a join's
// first source).
func (c *checker) rowCmp(v []*string, op string, s side, a *args) string {
	var l, r []string
	for j, i := range c.ident {
		l = append(l, c.ref(i, s))
		r = append(r, a.add(*v[j], c.cols[i].typ))
	}
	if len(l) == 1 {
		return l[0] + " " + op + " " + r[0]
	}
	out := "(" + strings.Join(l, ", ") + ") " + op + " (" + strings.Join(r, ", ") + ")"
	if s == onQuery {
		lead := strings.TrimSuffix(op, "=")
		out = l[0] + " " + lead + "= " + r[0] + " AND " + out
	}
	return out
}

// gt, lt and eq compare identity column j with a bound value (nil: NULL,
// which sorts after every value; gt needs a value).
func (c *checker) gt(j int, v *string, s side, a *args) string {
	i := c.ident[j]
	cmp := c.ref(i, s) + " > " + a.add(*v, c.cols[i].typ)
	if !c.cols[i].notNull {
		cmp = "(" + cmp + " OR " + c.ref(i, s) + " IS NULL)"
	}
	return cmp
}

func (c *checker) lt(j int, v *string, s side, a *args) string {
	i := c.ident[j]
	if v == nil {
		if c.cols[i].notNull {
			return "true"
		}
		return c.ref(i, s) + " IS NOT NULL"
	}
	return c.ref(i, s) + " < " + a.add(*v, c.cols[i].typ)
}

func (c *checker) eq(j int, v *string, s side, a *args) string {
	i := c.ident[j]
	if v == nil {
		return c.ref(i, s) + " IS NULL"
	}
	return c.ref(i, s) + " = " + a.add(*v, c.cols[i].typ)
}

func (c *checker) eqAll(v []*string, s side, a *args) string {
	var conj []string
	for j := range c.ident {
		conj = append(conj, c.eq(j, v[j], s, a))
	}
	return "(" + strings.Join(conj, " AND ") + ")"
}

// rangePred is the page range (lo, hi] on side s (nil bounds: open).
func (c *checker) rangePred(lo, hi []*string, s side, a *args) string {
	var conj []string
	if lo != nil {
		conj = append(conj, c.after(lo, s, a))
	}
	if hi != nil {
		conj = append(conj, c.atOrBefore(hi, s, a))
	}
	if len(conj) == 0 {
		return "true"
	}
	return strings.Join(conj, " AND ")
}

// anyOf is "identity is one of ids" on side s.
func (c *checker) anyOf(ids [][]*string, s side, a *args) string {
	terms := make([]string, 0, len(ids))
	for _, v := range ids {
		terms = append(terms, c.eqAll(v, s, a))
	}
	return "(" + strings.Join(terms, " OR ") + ")"
}

// pagePreds builds the predicate of both sides for a range or a set of
// identities, sharing one argument list.
func (c *checker) pagePreds(build func(s side, a *args) string) (tp, qp string, a *args) {
	a = &args{}
	return build(onTarget, a), build(onQuery, a), a
}

// orderBy is the ORDER BY list of the identity on side s.
func (c *checker) orderBy(s side, prefix string) string {
	var out []string
	for _, i := range c.ident {
		r := prefix + pgx.Identifier{c.cols[i].name}.Sanitize()
		if s == onQuery && c.cols[i].collate != "" {
			r += " COLLATE " + c.cols[i].collate
		}
		out = append(out, r)
	}
	return strings.Join(out, ", ")
}

// boundarySQL is the statement that finds a page's upper bound: the
// identity (as text) of the PageSize-th target row in range.
func (c *checker) boundarySQL(pred string) string {
	var sel []string
	for _, i := range c.ident {
		sel = append(sel, pgx.Identifier{c.cols[i].name}.Sanitize()+"::text")
	}
	return fmt.Sprintf("SELECT ARRAY[%s] FROM %s WHERE %s ORDER BY %s OFFSET %d LIMIT 1",
		strings.Join(sel, ", "), c.spec.Target.Sanitize(), pred, c.orderBy(onTarget, ""), c.opts.PageSize-1)
}

// pageSQL is the statement that compares one page: the target rows and
// the query rows that pass their side's predicate, two-way EXCEPT ALL,
// the differing rows ordered by identity (query's before target's), then
// one row with the row counts of both sides.
func (c *checker) pageSQL(targetPred, queryPred string) string {
	var tcols, qcols, vals, ids []string
	for _, col := range c.cols {
		n := pgx.Identifier{col.name}.Sanitize()
		switch {
		case col.text:
			tcols = append(tcols, n+"::text AS "+n)
			qcols = append(qcols, "__q."+n+"::text AS "+n)
		case col.collate != "":
			tcols = append(tcols, n)
			qcols = append(qcols, "__q."+n+" COLLATE "+col.collate+" AS "+n)
		default:
			tcols = append(tcols, n)
			qcols = append(qcols, "__q."+n)
		}
		vals = append(vals, "__d."+n+"::text")
	}
	for _, i := range c.ident {
		ids = append(ids, "__d."+pgx.Identifier{c.cols[i].name}.Sanitize())
	}
	order := "__z.__side = 2"
	if len(ids) > 0 {
		var o []string
		for k := range ids {
			o = append(o, fmt.Sprintf("__z.__i%d", k))
		}
		order += ", " + strings.Join(o, ", ")
	}
	order += ", __z.__side"
	var idOut, idNull []string
	for k, id := range ids {
		idOut = append(idOut, fmt.Sprintf("%s AS __i%d", id, k))
		idNull = append(idNull, fmt.Sprintf("NULL AS __i%d", k))
	}
	extra, extraNull := "", ""
	if len(ids) > 0 {
		extra, extraNull = ", "+strings.Join(idOut, ", "), ", "+strings.Join(idNull, ", ")
	}
	return fmt.Sprintf(`WITH __t AS MATERIALIZED (SELECT %s FROM %s WHERE %s),
__q AS MATERIALIZED (SELECT %s FROM (%s
) AS __q WHERE %s),
__d AS (SELECT 1 AS __side, * FROM (SELECT * FROM __t EXCEPT ALL SELECT * FROM __q) AS __x
  UNION ALL SELECT 0, * FROM (SELECT * FROM __q EXCEPT ALL SELECT * FROM __t) AS __m)
SELECT __z.__side, __z.__vals, __z.__nt, __z.__nq FROM (
  SELECT __d.__side, ARRAY[%s] AS __vals, NULL::bigint AS __nt, NULL::bigint AS __nq%s FROM __d
  UNION ALL SELECT 2, NULL, (SELECT count(*) FROM __t), (SELECT count(*) FROM __q)%s) AS __z
ORDER BY %s`,
		strings.Join(tcols, ", "), c.spec.Target.Sanitize(), targetPred,
		strings.Join(qcols, ", "), c.spec.Query, queryPred,
		strings.Join(vals, ", "), extra, extraNull, order)
}

// scan compares the pages after lo up to stop (inclusive; nil: the end),
// and reports whether it reached stop (false: budget, MaxRows, ended it).
func (c *checker) scan(ctx context.Context, res *Result, lo, stop []*string, budget int64) (bool, error) {
	for {
		if budget > 0 && res.TargetRows >= budget {
			return false, nil
		}
		a := &args{}
		bp := c.rangePred(lo, stop, onTarget, a)
		var hi []*string
		var arr []pgtype.Text
		err := c.tx.QueryRow(ctx, c.boundarySQL(bp), a.vals...).Scan(&arr)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			hi = stop
		case err != nil:
			return false, fmt.Errorf("self-check of %s: find the next page: %w", c.spec.Target.Sanitize(), err)
		default:
			hi = texts(arr)
		}
		last := err != nil // no PageSize-th row: this page runs to stop
		tp, qp, pa := c.pagePreds(func(s side, a *args) string { return c.rangePred(lo, hi, s, a) })
		if err := c.runPage(ctx, res, tp, qp, pa.vals); err != nil {
			return false, err
		}
		if last {
			return true, nil
		}
		lo = hi
	}
}

// runPage runs one page statement and folds its differences into res.
func (c *checker) runPage(ctx context.Context, res *Result, tp, qp string, vals []any) error {
	rows, err := c.tx.Query(ctx, c.pageSQL(tp, qp), vals...)
	if err != nil {
		return fmt.Errorf("self-check of %s: compare a page: %w", c.spec.Target.Sanitize(), err)
	}
	defer rows.Close()
	res.Pages++
	var run []diffRow // the differing rows of one identity
	for rows.Next() {
		var sideN int
		var arr []pgtype.Text
		var nt, nq *int64
		if err := rows.Scan(&sideN, &arr, &nt, &nq); err != nil {
			return fmt.Errorf("self-check of %s: read a page: %w", c.spec.Target.Sanitize(), err)
		}
		if sideN == 2 {
			res.TargetRows += deref(nt)
			res.QueryRows += deref(nq)
			continue
		}
		r := diffRow{target: sideN == 1, vals: texts(arr)}
		if len(run) > 0 && !sameValues(c.identity(run[0].vals), c.identity(r.vals)) {
			c.fold(res, run)
			run = run[:0]
		}
		run = append(run, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("self-check of %s: compare a page: %w", c.spec.Target.Sanitize(), err)
	}
	if len(run) > 0 {
		c.fold(res, run)
	}
	return nil
}

// diffRow is one row of a page's EXCEPT ALL: in the target but not the
// query (target), or the other way round.
type diffRow struct {
	target bool
	vals   []*string
}

func (c *checker) identity(vals []*string) []*string {
	out := make([]*string, len(c.ident))
	for j, i := range c.ident {
		out[j] = vals[i]
	}
	return out
}

// fold turns the differing rows of one identity into divergences: a query
// row and a target row pair up as the cells that differ, the rest are
// missing or extra rows.
func (c *checker) fold(res *Result, run []diffRow) {
	var q, t [][]*string
	for _, r := range run {
		if r.target {
			t = append(t, r.vals)
		} else {
			q = append(q, r.vals)
		}
	}
	id := c.identity(run[0].vals)
	var ds []Divergence
	for len(q) > 0 && len(t) > 0 {
		var cells []Divergence
		for i, col := range c.cols {
			if !sameValue(q[0][i], t[0][i]) {
				cells = append(cells, Divergence{Kind: Cell, Identity: id, Column: col.name, Stored: t[0][i], Recomputed: q[0][i]})
			}
		}
		if len(cells) == 0 {
			break // equal as text, different as values: report the rows
		}
		ds = append(ds, cells...)
		q, t = q[1:], t[1:]
	}
	for _, r := range q {
		s := rowText(r)
		ds = append(ds, Divergence{Kind: MissingRow, Identity: id, Recomputed: &s})
	}
	for _, r := range t {
		s := rowText(r)
		ds = append(ds, Divergence{Kind: ExtraRow, Identity: id, Stored: &s})
	}
	if c.opts.Held != nil && len(c.ident) > 0 && c.opts.Held(id) {
		res.Held += int64(len(ds))
		return
	}
	for _, d := range ds {
		res.Total++
		res.Counts[d.Kind]++
		if len(res.Divergences) < c.opts.Keep {
			res.Divergences = append(res.Divergences, d)
		} else {
			res.Truncated = true
		}
	}
}

func texts(arr []pgtype.Text) []*string {
	out := make([]*string, len(arr))
	for i, v := range arr {
		if v.Valid {
			s := v.String
			out[i] = &s
		}
	}
	return out
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func sameValue(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func sameValues(a, b []*string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameValue(a[i], b[i]) {
			return false
		}
	}
	return true
}

// rowText renders values as PostgreSQL renders a row: (1,"a b",) — NULL
// empty, a value quoted when empty or holding a delimiter, quote,
// backslash or space.
func rowText(vals []*string) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		if v == nil {
			continue
		}
		if *v == "" || strings.ContainsAny(*v, "\",\\() \t\n\r") {
			b.WriteByte('"')
			for _, r := range *v {
				if r == '"' || r == '\\' {
					b.WriteRune(r)
				}
				b.WriteRune(r)
			}
			b.WriteByte('"')
			continue
		}
		b.WriteString(*v)
	}
	b.WriteByte(')')
	return b.String()
}

// RandomStart picks a random target row to start a sample after (nil: a
// small or unanalyzed table, start at the first row) and estimates the
// target's rows, for Options.After and Options.MaxRows.
func RandomStart(ctx context.Context, tx pgx.Tx, spec Spec) ([]*string, float64, error) {
	var rows float64
	var pages int64
	if err := tx.QueryRow(ctx, `SELECT greatest(reltuples, 0)::float8, greatest(relpages, 1)::bigint FROM pg_class WHERE oid = $1::regclass`,
		spec.Target.Sanitize()).Scan(&rows, &pages); err != nil {
		return nil, 0, fmt.Errorf("self-check of %s: estimate its rows: %w", spec.Target.Sanitize(), err)
	}
	if len(spec.Identity) == 0 {
		return nil, rows, nil
	}
	var sel []string
	for _, id := range spec.Identity {
		sel = append(sel, pgx.Identifier{id}.Sanitize()+"::text")
	}
	// About one page of the table, at random.
	pct := min(100, 100/float64(pages))
	var arr []pgtype.Text
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT ARRAY[%s] FROM %s TABLESAMPLE SYSTEM (%g) ORDER BY random() LIMIT 1`,
		strings.Join(sel, ", "), spec.Target.Sanitize(), pct)).Scan(&arr)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, rows, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("self-check of %s: pick a row to start at: %w", spec.Target.Sanitize(), err)
	}
	return texts(arr), rows, nil
}
