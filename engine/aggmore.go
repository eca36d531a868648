package engine

// aggmore.go owns the aggregates ADR 0031 added beside the delta-kept
// ones: which statistics depend on row order (orderSensitive), and
// user-defined aggregates, which the parser cannot know by name — the
// catalog names them (userAggregates) and their support functions must be
// immutable (checkUserAggregates). All of them are recomputed per group
// from the ledger (planAggregates).

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// orderSensitiveAggs are the statistics PostgreSQL accumulates in floating
// point with a division per row (Youngs-Cramer), so that their last
// digits depend on the order rows arrive in: the two-argument ones always
// (their arguments are cast to float8), the variances over real and
// double precision only (over integers and numeric they are exact sums).
// regr_count is a count.
var orderSensitiveAggs = map[string]bool{
	"corr": true, "covar_pop": true, "covar_samp": true, "regr_avgx": true, "regr_avgy": true,
	"regr_intercept": true, "regr_r2": true, "regr_slope": true, "regr_sxx": true, "regr_sxy": true, "regr_syy": true,
	"stddev": true, "stddev_samp": true, "stddev_pop": true, "variance": true, "var_samp": true, "var_pop": true,
}

// varianceAggs are the one-argument statistics, exact over integers and
// numeric.
var varianceAggs = map[string]bool{"stddev": true, "stddev_samp": true, "stddev_pop": true,
	"variance": true, "var_samp": true, "var_pop": true}

// orderHintKey stands for the first source's key in Agg.OrderHint.
const orderHintKey = "__trellis_order_key"

// float4OID and float8OID are real and double precision.
const (
	float4OID = 700
	float8OID = 701
)

// orderSensitive refuses a statistic whose value depends on the order of
// its input rows when the call does not order them: the query itself
// prints other last digits after a row moves, so no target could equal it
// (ADR 0031). argOID is the type of its first input.
func orderSensitive(name string, a *Agg, argOID uint32, sources []Source) error {
	if a.Ordered || a.User || !orderSensitiveAggs[a.Func] {
		return nil
	}
	numeric := ""
	if varianceAggs[a.Func] {
		if argOID != float4OID && argOID != float8OID {
			return nil // exact sums of integers or numerics
		}
		numeric = fmt.Sprintf(", or aggregate numeric, which is exact in any order: %s((%s)::numeric)", a.Func, a.Arg)
	}
	hint := a.OrderHint
	if len(sources) > 0 && hint != "" {
		src := sources[0]
		var k []string
		for _, c := range src.Key {
			k = append(k, quoteIdents([]string{src.Ref, c.Name}))
		}
		hint = strings.Replace(hint, orderHintKey, strings.Join(k, ", "), 1)
	}
	return terr.New(terr.Validation, "transform %q: %s depends on the order rows are aggregated in: PostgreSQL accumulates it in floating point, dividing at every row, so another order rounds the last digits differently (the query itself prints other digits after a row moves), and the target could not be kept equal to the query; order the rows inside the call by a unique key, e.g. %s%s",
		name, a.Text, hint, numeric)
}

// isUserAggMarker reports whether a FILTER condition is the constant
// true userAggregates adds to mark a call the catalog knows as an
// aggregate: FILTER (WHERE true) passes every row, so it changes nothing.
func isUserAggMarker(n *pg_query.Node) bool {
	if n == nil {
		return false
	}
	b := n.GetAConst().GetBoolval()
	return b != nil && b.Boolval
}

// userAggMarker is the FILTER condition isUserAggMarker recognises.
func userAggMarker() *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
		Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: true}}, Location: -1}}}
}

// userAggregates finds the calls of the query's select list and HAVING
// that the catalog knows as user-defined or extension aggregates, which
// the parser, knowing aggregates by name, read as plain functions. When
// there are any, the query is parsed again with each such call schema-
// qualified and, where it has no aggregate syntax, marked (FILTER (WHERE
// true)), so the parser reads it as an aggregate (ADR 0031). A query whose
// parse deferred an error for want of this (Query.deferred) gets that
// error when no call turns out to be an aggregate.
func userAggregates(ctx context.Context, db DB, name string, q *Query) (*Query, error) {
	if q.tree == nil || len(q.tree.Stmts) != 1 || len(q.Levels) > 0 {
		return q, q.deferred
	}
	sel := q.tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil {
		return q, q.deferred
	}
	var calls []*pg_query.FuncCall
	visit := func(n *pg_query.Node) {
		if n == nil {
			return
		}
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false
			}
			if fc, ok := m.(*pg_query.FuncCall); ok && userAggCandidate(fc) {
				calls = append(calls, fc)
			}
			return true
		})
	}
	for _, t := range sel.TargetList {
		visit(t)
	}
	visit(sel.HavingClause)
	if len(calls) == 0 {
		return q, q.deferred
	}
	found, err := markUserAggregates(ctx, db, name, calls)
	if err != nil {
		return nil, err
	}
	if !found {
		return q, q.deferred
	}
	text, err := deparse(q.tree)
	if err != nil {
		return nil, terr.Wrap(terr.Internal, err, "transform %q: deparse the query: %v", name, err)
	}
	q2, err := ParseQuery(name, text)
	if err != nil {
		return nil, err
	}
	q2.SQL = q.SQL // the definition as written
	return q2, nil
}

// userAggCandidate reports whether a call may be a user-defined or
// extension aggregate: not a window call, not one PostgreSQL's catalog
// schema or the parser's lists know.
func userAggCandidate(fc *pg_query.FuncCall) bool {
	schema, fn := funcName(fc)
	builtin := schema == "" || schema == "pg_catalog"
	return fc.Over == nil && schema != "pg_catalog" && !(builtin && (supportedAggs[fn] || withinGroupAggs[fn] || knownAggs[fn]))
}

// markUserAggregates schema-qualifies each of calls the catalog knows as
// a user-defined or extension aggregate and, where it has no aggregate
// syntax, marks it (FILTER (WHERE true)); found: one was.
func markUserAggregates(ctx context.Context, db DB, name string, calls []*pg_query.FuncCall) (found bool, err error) {
	for _, fc := range calls {
		schema, fn := funcName(fc)
		var nsp string
		err := db.QueryRow(ctx, `SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE p.proname = $2 AND p.prokind = 'a' AND n.nspname <> 'pg_catalog'
			  AND CASE WHEN $1 = '' THEN n.nspname = ANY (current_schemas(false)) ELSE n.nspname = $1 END
			ORDER BY array_position(current_schemas(false), n.nspname) LIMIT 1`, schema, fn).Scan(&nsp)
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			return false, fmt.Errorf("transform %q: look up aggregate %s: %w", name, fn, err)
		}
		found = true
		fc.Funcname = []*pg_query.Node{
			{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: nsp}}},
			{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: fn}}},
		}
		if !isAggregate(fc) {
			fc.AggFilter = userAggMarker()
		}
	}
	return found, nil
}

// lateralUserAggregates marks the user-defined aggregates of the LATERAL
// subqueries of an expanded query's text (markUserAggregates), so that
// one aggregating without GROUP BY reads as one (lateralagg.go); the text
// is returned unchanged when it has none.
func lateralUserAggregates(ctx context.Context, db DB, name, sql string) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return sql, nil //nolint:nilerr // the parse that follows reports it
	}
	var calls []*pg_query.FuncCall
	walk(tree.Stmts[0].Stmt.ProtoReflect(), func(m proto.Message) bool {
		rs, ok := m.(*pg_query.RangeSubselect)
		if !ok || !rs.Lateral {
			return true
		}
		sub := rs.Subquery.GetSelectStmt()
		if sub == nil || len(sub.GroupClause) > 0 {
			return true
		}
		for _, t := range sub.TargetList {
			walk(t.ProtoReflect(), func(m proto.Message) bool {
				if _, ok := m.(*pg_query.SubLink); ok {
					return false
				}
				if fc, ok := m.(*pg_query.FuncCall); ok && userAggCandidate(fc) {
					calls = append(calls, fc)
				}
				return true
			})
		}
		return true
	})
	if len(calls) == 0 {
		return sql, nil
	}
	found, err := markUserAggregates(ctx, db, name, calls)
	if err != nil || !found {
		return sql, err
	}
	out, err := deparse(tree)
	if err != nil {
		return "", terr.Wrap(terr.Internal, err, "transform %q: deparse the query: %v", name, err)
	}
	return out, nil
}

// checkUserAggregates refuses a user-defined aggregate whose transition,
// final or combine function is not immutable: the aggregate itself is
// recorded immutable whatever its functions are, so checkImmutable would
// pass it, and a recompute would then give another value than the query.
func checkUserAggregates(ctx context.Context, db DB, name, sql string) error {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_uagg`); err != nil {
		return err
	}
	defer db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_uagg`) //nolint:errcheck
	if _, err := db.Exec(ctx, `CREATE TEMPORARY VIEW trellis_uagg_view AS `+sql); err != nil {
		return queryError(name, err)
	}
	rows, err := db.Query(ctx, `
		SELECT DISTINCT a.aggfnoid::regprocedure::text, f.oid::regprocedure::text, f.provolatile::text
		FROM pg_depend d
		JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
		JOIN pg_aggregate a ON d.refclassid = 'pg_proc'::regclass AND a.aggfnoid = d.refobjid
		JOIN pg_proc f ON f.oid IN (a.aggtransfn, a.aggfinalfn, a.aggcombinefn)
		WHERE r.ev_class = 'trellis_uagg_view'::regclass AND f.provolatile <> 'i'
		ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("check aggregate volatility: %w", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var agg, fn, vol string
		if err := rows.Scan(&agg, &fn, &vol); err != nil {
			return err
		}
		kind := "stable"
		if vol == "v" {
			kind = "volatile"
		}
		bad = append(bad, fmt.Sprintf("the aggregate %s calls %s (%s)", agg, fn, kind))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return terr.New(terr.Validation, "transform %q: %s; a transform may use only immutable functions, because groups are recomputed at different times — mark the function IMMUTABLE if its result depends only on its arguments (ALTER FUNCTION … IMMUTABLE), or aggregate with one that is",
			name, strings.Join(bad, "; "))
	}
	return nil
}
