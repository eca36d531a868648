package engine

// mutable.go owns immutability: every expression of a transform must be
// immutable, or stable only through the settings recorded with it (ADR
// 0037), since rows are re-derived at different times — checkImmutable
// (the functions and operators a view over the query depends on) and
// checkMutability (PostgreSQL's index-expression test, its culprits named
// by OID) — and queryError, which turns PostgreSQL's complaint about a
// definition into a validation error.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// checkMutability refuses expressions that are not immutable, built-in
// functions, operators and casts included, unless what makes them stable
// is only a setting recorded with the plan (ADR 0037). checkImmutable
// reads the dependencies PostgreSQL records for a view, which name user
// functions only (built-in objects are pinned, never recorded). The test
// here is PostgreSQL's own for index expressions: each expression is
// rewritten over a scratch table with a column per column it reads (and
// per aggregate call, for composed items and HAVING) and indexed there,
// inside a savepoint. One that fails is taken apart (culprits): every
// non-immutable function it calls is named, and every refused part of
// every expression goes into one error.
//
// named are the signatures of the functions it refused, so that
// checkImmutable does not name them twice.
func checkMutability(ctx context.Context, db DB, name string, p *Plan, q *Query) (named map[string]bool, err error) {
	named = map[string]bool{}
	exprs := mutabilityExprs(q)
	if len(exprs) == 0 {
		return named, nil
	}
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_mutable`); err != nil {
		return nil, err
	}
	defer db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_mutable`) //nolint:errcheck
	from := ""
	if len(p.Sources) > 0 {
		// A recursive CTE's term may read the CTE alone (no source): it
		// has no aggregate or generated column to type (ADR 0035).
		from = p.FromSQL()
	}
	sc := &scratch{db: db, sources: p.Sources, gens: q.Generated, from: from, aggs: q.Aggs, cols: map[ColumnName]string{}, aggCols: map[string]string{}}
	var rewritten []string
	for _, e := range exprs {
		out, err := sc.over(ctx, e.text)
		if err != nil {
			return nil, queryError(name, err)
		}
		rewritten = append(rewritten, out)
	}
	if len(sc.defs) == 0 {
		sc.defs = append(sc.defs, "__none int")
	}
	if _, err := db.Exec(ctx, "CREATE TEMPORARY TABLE "+scratchTable+" ("+strings.Join(sc.defs, ", ")+")"); err != nil {
		return nil, fmt.Errorf("transform %q: check immutability: %w", name, err)
	}
	// Most definitions pass: one index over every expression (at most
	// indexMaxKeys of them) answers for all at once, PostgreSQL checking
	// each column as it would alone. Only the expressions of an index that
	// fails are tested one by one, to name what fails and why.
	passed := make([]bool, len(exprs))
	for lo := 0; lo < len(exprs); lo += indexMaxKeys {
		hi := min(lo+indexMaxKeys, len(exprs))
		perr, err := indexTest(ctx, db, rewritten[lo:hi]...)
		if err != nil {
			return nil, err
		}
		for i := lo; i < hi && perr == nil; i++ {
			passed[i] = true
		}
	}
	var allowed map[uint32]bool // resolved at the first expression that fails
	fail := func(format string, args ...any) error {
		return terr.New(terr.Validation, "transform %q: "+format, append([]any{name}, args...)...)
	}
	var parts []error
	for i, e := range exprs {
		if passed[i] {
			continue
		}
		perr, err := indexTest(ctx, db, rewritten[i])
		if err != nil {
			return nil, err
		}
		var pgErr *pgconn.PgError
		switch {
		case perr == nil:
		case errors.As(perr, &pgErr) && pgErr.Code == "42P17":
			if allowed == nil {
				if allowed, err = settingsOnlyOIDs(ctx, db); err != nil {
					return nil, err
				}
			}
			refused, rest, err := sc.culprits(ctx, rewritten[i], allowed)
			if err != nil {
				return nil, err
			}
			var sigs []string
			for _, f := range refused {
				named[f.sig] = true
				sigs = append(sigs, f.sig+" ("+f.volatility+")")
			}
			switch {
			case len(refused) > 0:
				parts = append(parts, fail("%s (%s) calls %s, which reads more than the session settings recorded with the transform (the clock, the database or the session), so it could not be kept equal to the query as rows are re-derived at different times; %s",
					e.clause, e.text, strings.Join(sigs, " and "), culpritAdvice(refused)))
			case rest:
				parts = append(parts, fail("%s (%s) is not immutable: it uses an operator, cast or construct that PostgreSQL marks stable or volatile; a transform may use only immutable expressions and the built-ins that depend only on its recorded settings, because rows are re-derived at different times — write it with immutable functions, or compute the value into a source column",
					e.clause, e.text))
			}
		case errors.As(perr, &pgErr) && pgErr.Code == "0A000" && strings.Contains(pgErr.Message, "set-returning"):
			parts = append(parts, fail("%s (%s) returns a set of rows per row in a select list, where its rows have no identity of their own; move it to FROM, where each row is keyed by its ordinal (ADR 0034): SELECT t.id, u.x FROM t, unnest(t.a) AS u(x)", e.clause, e.text))
		case errors.As(perr, &pgErr) && (pgErr.Code == "42803" || pgErr.Code == "42P20"):
			// An aggregate or window function the parser could not know
			// by name: a user-defined or extension one.
			parts = append(parts, fail("%s (%s) calls a user-defined or extension aggregate or window function, which this version does not keep; supported aggregates are "+supportedAggregates, e.clause, e.text))
		}
	}
	return named, joinRefusals(parts)
}

// mutabilityExpr is one expression of a query the immutability test reads.
type mutabilityExpr struct{ clause, text string }

// mutabilityExprs are the query's expressions PostgreSQL evaluates per row
// or per group: WHERE, ON, the select items (composed ones with their
// aggregate calls), GROUP BY, aggregate inputs, window inputs, HAVING, and
// the unread outputs of flattened derived tables.
func mutabilityExprs(q *Query) []mutabilityExpr {
	var exprs []mutabilityExpr
	if q.Where != "" {
		exprs = append(exprs, mutabilityExpr{"WHERE", q.Where})
	}
	for _, j := range q.joinConds {
		exprs = append(exprs, mutabilityExpr{"JOIN … ON", j})
	}
	windowed := map[int]bool{}
	if q.Window != nil {
		// A window call cannot be indexed: its arguments, PARTITION BY
		// and ORDER BY are checked one by one.
		for _, u := range q.Window.Uses {
			windowed[u.Item] = true
			for _, in := range u.Inputs {
				exprs = append(exprs, mutabilityExpr{"the window " + u.Call, in})
			}
		}
	}
	for i, t := range q.Targets {
		if t.Agg == nil && (q.Grouping == nil || t.Group < q.Grouping.Raw) && !windowed[i] {
			exprs = append(exprs, mutabilityExpr{fmt.Sprintf("select list item %d", i+1), t.Expr})
		}
	}
	for i, g := range q.groupExprs() {
		exprs = append(exprs, mutabilityExpr{fmt.Sprintf("GROUP BY item %d", i+1), g})
	}
	for _, a := range q.Aggs {
		for _, in := range a.Inputs {
			exprs = append(exprs, mutabilityExpr{"the aggregate " + a.Text, in})
		}
	}
	if q.HavingSQL != "" {
		exprs = append(exprs, mutabilityExpr{"HAVING", strings.TrimSpace(q.HavingSQL)})
	}
	for _, u := range q.unread {
		exprs = append(exprs, mutabilityExpr{u.Clause, u.Expr})
	}
	return exprs
}

// scratchTable is the immutability test's table: a column per source
// column and aggregate call the expressions read, and per culprit taken
// out of them.
const scratchTable = "pg_temp.__trellis_mut"

// scratch rewrites expressions over scratchTable.
type scratch struct {
	db      DB
	sources []Source
	gens    []Generated // the query's functions and VALUES lists in FROM (ADR 0034)
	from    string      // the query's FROM, to type aggregate calls and generated columns
	aggs    []*Agg
	cols    map[ColumnName]string // column reference -> scratch column
	aggCols map[string]string     // aggregate call -> scratch column
	defs    []string
	// placeholders numbers the columns that stand for culprits.
	placeholders int
}

// indexMaxKeys is PostgreSQL's INDEX_MAX_KEYS as built by default: the
// most columns, expressions included, one index may have.
const indexMaxKeys = 32

// indexTest is PostgreSQL's index-expression test of texts (at most
// indexMaxKeys) over the scratch table, as the columns of one index: perr
// is PostgreSQL's complaint about one of them (nil when all pass), err a
// failure to run the test.
func indexTest(ctx context.Context, db DB, texts ...string) (perr, err error) {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_mutable_expr`); err != nil {
		return nil, err
	}
	cols := make([]string, len(texts))
	for i, text := range texts {
		cols[i] = "((" + text + ") IS NULL)"
	}
	_, perr = db.Exec(ctx, "CREATE INDEX ON "+scratchTable+" ("+strings.Join(cols, ", ")+")")
	if _, err := db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_mutable_expr`); err != nil {
		return nil, err
	}
	return perr, nil
}

// isMutable: PostgreSQL's complaint is that the expression is not
// immutable.
func isMutable(perr error) bool {
	var pgErr *pgconn.PgError
	return errors.As(perr, &pgErr) && pgErr.Code == "42P17"
}

// culprits takes an expression that failed the index test apart, bottom
// up: each function call, operator, cast or CASE that fails while its
// parts pass is a culprit, and PostgreSQL names its functions (culprit).
// A culprit whose non-immutable functions all depend only on recorded
// settings (allowed: settingsOnly's OIDs) is replaced by a scratch column
// of its type and the test goes on above it; any other is refused by name
// (and replaced too, so that every culprit is named). rest reports that
// the expression still fails with nothing refused: a construct the walk
// does not take apart.
func (sc *scratch) culprits(ctx context.Context, text string, allowed map[uint32]bool) (refused []calledFunc, rest bool, err error) {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return nil, false, fmt.Errorf("check immutability of %s: parse: %v", text, err)
	}
	rt := tree.Stmts[0].GetStmt().GetSelectStmt().TargetList[0].GetResTarget()
	var visit func(n *pg_query.Node) *pg_query.Node
	visit = func(n *pg_query.Node) *pg_query.Node {
		if err != nil {
			return n
		}
		var arg *pg_query.Node
		switch {
		case n.GetTypeCast() != nil:
			arg = n.GetTypeCast().Arg
		case n.GetFuncCall() != nil, n.GetAExpr() != nil, n.GetCaseExpr() != nil:
		default:
			return nil // descend
		}
		replaceIn(n.ProtoReflect(), visit)
		s, derr := deparseExpr(n)
		if derr != nil {
			return n
		}
		perr, terr := indexTest(ctx, sc.db, s)
		if terr != nil {
			err = terr
			return n
		}
		if !isMutable(perr) {
			return n
		}
		fns, typ, ferr := sc.culprit(ctx, s, arg)
		if ferr != nil {
			err = ferr
			return n
		}
		if len(fns) == 0 {
			return n // not its own functions: left to the whole test
		}
		for _, f := range fns {
			if !allowed[f.oid] {
				refused = append(refused, f)
			}
		}
		col, perr2 := sc.placeholder(ctx, typ)
		if perr2 != nil {
			err = perr2
			return n
		}
		return columnRef(col)
	}
	out := replaceNodes(rt.Val, visit)
	if err != nil {
		return nil, false, err
	}
	s, err := deparseExpr(out)
	if err != nil {
		return refused, len(refused) == 0, nil
	}
	perr, err := indexTest(ctx, sc.db, s)
	if err != nil {
		return nil, false, err
	}
	return refused, len(refused) == 0 && perr != nil, nil
}

// culpritAdvice is the rewrite that works for refused functions: a text
// read as a date or time (an input function, which reads 'now' and
// 'today') through a format; anything else out of the query.
func culpritAdvice(fns []calledFunc) string {
	for _, f := range fns {
		if strings.Contains(f.sig, "(cstring") {
			return "read text as a date or time through a format instead, e.g. to_date(x, 'YYYY-MM-DD') or to_timestamp(x, 'YYYY-MM-DD HH24:MI:SS'), which depend only on recorded settings; remove any other such call or compute its value into a source column"
		}
	}
	return "remove the call or compute the value into a source column"
}

// calledFunc is a non-immutable function a culprit calls.
type calledFunc struct {
	oid        uint32
	sig        string // oid::regprocedure
	volatility string // "stable" or "volatile"
}

// funcRefs are the function OIDs of an analysed expression: the called
// function of a FuncExpr, an operator's underlying function.
var funcRefs = regexp.MustCompile(`:(?:funcid|opfuncid) (\d+)`)

// culprit asks PostgreSQL which non-immutable functions expression text
// calls (its parts are immutable, or placeholders): a scratch view over
// it is analysed, and its rule's tree names the functions and operators'
// functions; a cast via I/O (arg, the cast's operand) calls the operand
// type's output and the result type's input function. typ is the
// expression's type.
func (sc *scratch) culprit(ctx context.Context, text string, arg *pg_query.Node) (fns []calledFunc, typ string, err error) {
	if _, err := sc.db.Exec(ctx, `SAVEPOINT trellis_mutable_view`); err != nil {
		return nil, "", err
	}
	defer sc.db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_mutable_view`) //nolint:errcheck
	items := "(" + text + ") AS v"
	if arg != nil {
		a, err := deparseExpr(arg)
		if err != nil {
			return nil, "", nil
		}
		items += ", (" + a + ") AS a"
	}
	if _, err := sc.db.Exec(ctx, "CREATE TEMPORARY VIEW __trellis_mutv AS SELECT "+items+" FROM "+scratchTable); err != nil {
		return nil, "", nil // not an expression of its own (PostgreSQL says why in the whole test)
	}
	var action string
	var vtype, atype *uint32
	if err := sc.db.QueryRow(ctx, `SELECT r.ev_action::text, format_type(v.atttypid, v.atttypmod), v.atttypid, a.atttypid
		FROM pg_rewrite r JOIN pg_attribute v ON v.attrelid = r.ev_class AND v.attname = 'v'
		LEFT JOIN pg_attribute a ON a.attrelid = r.ev_class AND a.attname = 'a'
		WHERE r.ev_class = 'pg_temp.__trellis_mutv'::regclass`).Scan(&action, &typ, &vtype, &atype); err != nil {
		return nil, "", fmt.Errorf("read the analysed expression %s: %w", text, err)
	}
	var oids []uint32
	for _, m := range funcRefs.FindAllStringSubmatch(action, -1) {
		if oid, err := strconv.ParseUint(m[1], 10, 32); err == nil {
			oids = append(oids, uint32(oid))
		}
	}
	io := arg != nil && strings.Contains(action, "{COERCEVIAIO") && vtype != nil && atype != nil
	rows, err := sc.db.Query(ctx, `SELECT p.oid, p.oid::regprocedure::text, CASE p.provolatile WHEN 's' THEN 'stable' ELSE 'volatile' END
		FROM pg_proc p
		WHERE p.provolatile <> 'i' AND (p.oid = ANY ($1::oid[])
		   OR $2 AND (p.oid = (SELECT typoutput FROM pg_type WHERE oid = $3) OR p.oid = (SELECT typinput FROM pg_type WHERE oid = $4)))
		ORDER BY 2`, oids, io, atype, vtype)
	if err != nil {
		return nil, "", fmt.Errorf("read the volatility of %s: %w", text, err)
	}
	defer rows.Close()
	for rows.Next() {
		var f calledFunc
		if err := rows.Scan(&f.oid, &f.sig, &f.volatility); err != nil {
			return nil, "", err
		}
		fns = append(fns, f)
	}
	return fns, typ, rows.Err()
}

// placeholder adds a scratch column of type typ that stands for a culprit
// taken out of an expression.
func (sc *scratch) placeholder(ctx context.Context, typ string) (string, error) {
	sc.placeholders++
	col := fmt.Sprintf("p%d", sc.placeholders)
	if _, err := sc.db.Exec(ctx, "ALTER TABLE "+scratchTable+" ADD COLUMN "+col+" "+typ); err != nil {
		return "", fmt.Errorf("check immutability: %w", err)
	}
	return col, nil
}

// over rewrites an expression's column references to columns of the
// scratch table, adding a column (with the source column's type) for each
// reference not seen before, and each aggregate call to a column of the
// call's type.
func (sc *scratch) over(ctx context.Context, text string) (string, error) {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return "", fmt.Errorf("check immutability of %s: parse: %v", text, err)
	}
	rt := tree.Stmts[0].GetStmt().GetSelectStmt().TargetList[0].GetResTarget()
	var ferr error
	out := replaceNodes(rt.Val, func(n *pg_query.Node) *pg_query.Node {
		if ferr != nil {
			return nil
		}
		if n.GetSubLink() != nil {
			// A subquery reads other tables: its level checks its own
			// expressions (ADR 0030); here it stands for a value.
			return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Isnull: true, Location: -1}}}
		}
		if n.GetGroupingFunc() != nil {
			// GROUPING() is constant per grouping set: an integer.
			c := fmt.Sprintf("c%d", len(sc.defs))
			sc.defs = append(sc.defs, c+" integer")
			return columnRef(c)
		}
		if fc := n.GetFuncCall(); fc != nil && fc.Over == nil {
			col, ok, err := sc.aggregate(ctx, n)
			if err != nil {
				ferr = err
				return nil
			}
			if ok {
				return columnRef(col)
			}
			return nil
		}
		cr := n.GetColumnRef()
		if cr == nil {
			return nil
		}
		names := columnNames(n)
		if len(names) != 1 {
			return nil
		}
		cn := names[0]
		if c, ok := sc.cols[cn]; ok {
			return columnRef(c)
		}
		src, typ, err := columnType(ctx, sc.db, sc.sources, cn)
		if err == nil && src < 0 {
			typ, err = generatedType(ctx, sc.db, sc.from, sc.gens, cn)
		}
		if err != nil {
			ferr = err
			return nil
		}
		if typ == "" {
			return nil // not a source column (PostgreSQL resolved it otherwise)
		}
		c := fmt.Sprintf("c%d", len(sc.defs))
		sc.cols[cn] = c
		sc.defs = append(sc.defs, c+" "+typ)
		return columnRef(c)
	})
	if ferr != nil {
		return "", ferr
	}
	return deparseExpr(out)
}

// aggregate is the scratch column standing for n when n is one of the
// query's aggregate calls (a composed item or HAVING reads its value).
func (sc *scratch) aggregate(ctx context.Context, n *pg_query.Node) (string, bool, error) {
	text, err := deparseExpr(n)
	if err != nil {
		return "", false, nil
	}
	known := aggCall(n) != nil
	for _, a := range sc.aggs {
		known = known || a.Text == text
	}
	if !known {
		return "", false, nil
	}
	if c, ok := sc.aggCols[text]; ok {
		return c, true, nil
	}
	ts, err := describeStored(ctx, sc.db, "SELECT "+text+" FROM "+sc.from)
	if err != nil {
		return "", false, err
	}
	c := fmt.Sprintf("c%d", len(sc.defs))
	sc.aggCols[text] = c
	sc.defs = append(sc.defs, c+" "+ts[0].name)
	return c, true, nil
}

// generatedType is the type of a column of a function or VALUES item in
// FROM (ADR 0034), as PostgreSQL types it there; "" when cn names none.
func generatedType(ctx context.Context, db DB, from string, gens []Generated, cn ColumnName) (string, error) {
	for _, g := range gens {
		if g.Ref != cn.Ref {
			continue
		}
		ts, err := describeStored(ctx, db, "SELECT "+pgx.Identifier{cn.Ref, cn.Column}.Sanitize()+" FROM "+from)
		if err != nil {
			return "", fmt.Errorf("check immutability: type %s.%s: %w", cn.Ref, cn.Column, err)
		}
		return ts[0].name, nil
	}
	return "", nil
}

// columnType finds the source a column reference reads, as PostgreSQL
// resolves it, and the column's type; -1 when no source has it.
func columnType(ctx context.Context, db DB, sources []Source, cn ColumnName) (int, string, error) {
	for i, src := range sources {
		if cn.Ref != "" && src.Ref != cn.Ref {
			continue
		}
		col, err := sourceColumn(ctx, db, src, cn.Column)
		if err != nil {
			return -1, "", err
		}
		if col.found {
			return i, col.typ, nil
		}
	}
	return -1, "", nil
}

// checkImmutable refuses definitions that call volatile or stable functions
// or operators: PostgreSQL records every function and operator a view uses in
// pg_depend, so a throwaway temporary view inside a savepoint tells us.
// named are functions checkMutability already refused.
func checkImmutable(ctx context.Context, db DB, name, sql string, named map[string]bool) error {
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
		if named[fn] {
			continue
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
