package engine

// mutable.go owns immutability: every expression of a transform must be
// immutable, since rows are re-derived at different times — checkImmutable
// (the functions and operators a view over the query depends on) and
// checkMutability (PostgreSQL's index-expression test) — and queryError,
// which turns PostgreSQL's complaint about a definition into a validation
// error.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// checkMutability refuses expressions that are not immutable, built-in
// functions, operators and casts included. checkImmutable reads the
// dependencies PostgreSQL records for a view, which name user functions
// only (built-in objects are pinned, never recorded), so timestamptz::date
// or to_char(timestamptz, …) — stable, they depend on TimeZone — would
// pass it. PostgreSQL's own test is the one it applies to index
// expressions: each expression is rewritten over a scratch table with a
// column per column it reads and indexed there, inside a savepoint.
func checkMutability(ctx context.Context, db DB, name string, p *Plan, q *Query) error {
	type expr struct{ clause, text string }
	var exprs []expr
	if q.Where != "" {
		exprs = append(exprs, expr{"WHERE", q.Where})
	}
	for _, j := range q.joinConds {
		exprs = append(exprs, expr{"JOIN … ON", j})
	}
	windowed := map[int]bool{}
	if q.Window != nil {
		// A window call cannot be indexed: its arguments, PARTITION BY
		// and ORDER BY are checked one by one.
		for _, u := range q.Window.Uses {
			windowed[u.Item] = true
			for _, in := range u.Inputs {
				exprs = append(exprs, expr{"the window " + u.Call, in})
			}
		}
	}
	for i, t := range q.Targets {
		if t.Agg == nil && t.Composed == "" && (q.Grouping == nil || t.Group < q.Grouping.Raw) && !windowed[i] {
			exprs = append(exprs, expr{fmt.Sprintf("select list item %d", i+1), t.Expr})
		}
	}
	for i, g := range q.groupExprs() {
		exprs = append(exprs, expr{fmt.Sprintf("GROUP BY item %d", i+1), g})
	}
	for _, a := range q.Aggs {
		for _, in := range a.Inputs {
			exprs = append(exprs, expr{"the aggregate " + a.Text, in})
		}
	}
	for _, u := range q.unread {
		exprs = append(exprs, expr{u.Clause, u.Expr})
	}
	if len(exprs) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_mutable`); err != nil {
		return err
	}
	defer db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_mutable`) //nolint:errcheck
	cols := map[ColumnName]string{}                             // column reference -> scratch column
	var defs []string
	var rewritten []string
	for _, e := range exprs {
		out, err := overScratch(ctx, db, p, q.Generated, e.text, cols, &defs)
		if err != nil {
			return err
		}
		rewritten = append(rewritten, out)
	}
	if len(defs) == 0 {
		defs = append(defs, "__none int")
	}
	if _, err := db.Exec(ctx, "CREATE TEMPORARY TABLE __trellis_mut ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("transform %q: check immutability: %w", name, err)
	}
	var bad, sets, aggs []string
	for i, e := range exprs {
		if _, err := db.Exec(ctx, `SAVEPOINT trellis_mutable_expr`); err != nil {
			return err
		}
		_, err := db.Exec(ctx, "CREATE INDEX ON pg_temp.__trellis_mut ((("+rewritten[i]+") IS NULL))")
		if _, rerr := db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_mutable_expr`); rerr != nil {
			return rerr
		}
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
		case errors.As(err, &pgErr) && pgErr.Code == "42P17":
			bad = append(bad, fmt.Sprintf("%s (%s) is not immutable", e.clause, e.text))
		case errors.As(err, &pgErr) && pgErr.Code == "0A000" && strings.Contains(pgErr.Message, "set-returning"):
			sets = append(sets, fmt.Sprintf("%s (%s)", e.clause, e.text))
		case errors.As(err, &pgErr) && (pgErr.Code == "42803" || pgErr.Code == "42P20"):
			// An aggregate or window function the parser could not know
			// by name: a user-defined or extension one.
			aggs = append(aggs, fmt.Sprintf("%s (%s)", e.clause, e.text))
		}
	}
	var parts []string
	if len(bad) > 0 {
		parts = append(parts, strings.Join(bad, "; ")+": it calls a function, operator or cast that PostgreSQL marks stable or volatile (timestamptz::date, to_char(timestamptz, …) and timestamptz + interval depend on the TimeZone setting, for example); a transform may use only immutable expressions, because rows are re-derived at different times — name the time zone (timezone('UTC', t)::date), or compute the value into a source column")
	}
	if len(sets) > 0 {
		parts = append(parts, strings.Join(sets, "; ")+" returns a set of rows per row in a select list, where its rows have no identity of their own; move it to FROM, where each row is keyed by its ordinal (ADR 0034): SELECT t.id, u.x FROM t, unnest(t.a) AS u(x)")
	}
	if len(aggs) > 0 {
		parts = append(parts, strings.Join(aggs, "; ")+" calls a user-defined or extension aggregate or window function, which this version does not keep; supported aggregates are "+supportedAggregates)
	}
	if len(parts) > 0 {
		return terr.New(terr.Validation, "transform %q: %s", name, strings.Join(parts, "; and "))
	}
	return nil
}

// overScratch rewrites an expression's column references to columns of
// the scratch table, adding a column (with the source column's type, or
// the type a function or VALUES item of gens gives it) for each reference
// not seen before.
func overScratch(ctx context.Context, db DB, p *Plan, gens []Generated, text string, cols map[ColumnName]string, defs *[]string) (string, error) {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return "", fmt.Errorf("check immutability of %s: parse: %v", text, err)
	}
	rt := tree.Stmts[0].GetStmt().GetSelectStmt().TargetList[0].GetResTarget()
	var ferr error
	out := replaceNodes(rt.Val, func(n *pg_query.Node) *pg_query.Node {
		if n.GetSubLink() != nil {
			// A subquery reads other tables: its level checks its own
			// expressions (ADR 0030); here it stands for a value.
			return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Isnull: true, Location: -1}}}
		}
		cr := n.GetColumnRef()
		if cr == nil || ferr != nil {
			return nil
		}
		names := columnNames(n)
		if len(names) != 1 {
			return nil
		}
		cn := names[0]
		if c, ok := cols[cn]; ok {
			return columnRef(c)
		}
		src, typ, err := columnType(ctx, db, p.Sources, cn)
		if err == nil && src < 0 {
			typ, err = generatedType(ctx, db, p, gens, cn)
		}
		if err != nil {
			ferr = err
			return nil
		}
		if typ == "" {
			return nil // not a source column (PostgreSQL resolved it otherwise)
		}
		c := fmt.Sprintf("c%d", len(cols))
		cols[cn] = c
		*defs = append(*defs, c+" "+typ)
		return columnRef(c)
	})
	if ferr != nil {
		return "", ferr
	}
	return deparseExpr(out)
}

// generatedType is the type of a column of a function or VALUES item in
// FROM (ADR 0034), as PostgreSQL types it there; "" when cn names none.
func generatedType(ctx context.Context, db DB, p *Plan, gens []Generated, cn ColumnName) (string, error) {
	for _, g := range gens {
		if g.Ref != cn.Ref {
			continue
		}
		ts, err := describeStored(ctx, db, "SELECT "+pgx.Identifier{cn.Ref, cn.Column}.Sanitize()+" FROM "+p.FromSQL())
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
