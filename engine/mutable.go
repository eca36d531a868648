package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	for i, t := range q.Targets {
		if t.Agg == nil && t.Composed == "" {
			exprs = append(exprs, expr{fmt.Sprintf("select list item %d", i+1), t.Expr})
		}
	}
	for i, g := range q.GroupBy {
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
		out, err := overScratch(ctx, db, p.Sources, e.text, cols, &defs)
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
		parts = append(parts, strings.Join(sets, "; ")+" returns a set of rows per row, which a transform cannot key; remove the set-returning call (keep the rows it would produce in a table and join it)")
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
// the scratch table, adding a column (with the source column's type) for
// each reference not seen before.
func overScratch(ctx context.Context, db DB, sources []Source, text string, cols map[ColumnName]string, defs *[]string) (string, error) {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return "", fmt.Errorf("check immutability of %s: parse: %v", text, err)
	}
	rt := tree.Stmts[0].GetStmt().GetSelectStmt().TargetList[0].GetResTarget()
	var ferr error
	out := replaceNodes(rt.Val, func(n *pg_query.Node) *pg_query.Node {
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
		src, typ, err := columnType(ctx, db, sources, cn)
		if err != nil {
			ferr = err
			return nil
		}
		if src < 0 {
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
