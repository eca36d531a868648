package engine

// star.go owns * and t.*: a select list that has them (selectsStar) and
// their expansion by PostgreSQL when a definition is applied.

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

// * and t.* name the columns a table has when a definition is applied.
// PostgreSQL expands them, as it does for a view, and the expanded text is
// the definition the catalog keeps. A transform's target also has hidden
// columns (lineage, surrogate key: every name that begins with
// reservedPrefix); * over a target means its visible columns, so each
// target the query reads is first replaced by a derived table that selects
// only those (the flattening pulls it up again).

// ExpandStar has PostgreSQL expand * and t.* in st's query, as PlanCreate
// does, so that the derived tables of an expanded query are known before
// it is planned (its levels are created first). targets are the
// relations that are transforms' targets, whose hidden columns * leaves
// out.
func ExpandStar(ctx context.Context, db DB, st *Statement, targets []Rel) error {
	if st.Query == nil || !st.Query.Expand {
		return nil
	}
	q, err := expandStar(ctx, db, st.Name, st.Query.SQL, targets)
	if err != nil {
		return err
	}
	st.Query = q
	return nil
}

// expandStar has PostgreSQL expand * and t.* to the columns the tables
// have now (targets: their visible columns) and validates the expanded
// query.
func expandStar(ctx context.Context, db DB, name, sql string, targets []Rel) (*Query, error) {
	if len(targets) > 0 {
		var err error
		if sql, err = visibleTargets(ctx, db, name, sql, targets); err != nil {
			return nil, err
		}
	}
	// Views are read as their definitions (views.go).
	sql, views, err := expandViews(ctx, db, name, sql)
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_star`); err != nil {
		return nil, err
	}
	defer db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_star`) //nolint:errcheck
	if _, err := db.Exec(ctx, `CREATE TEMPORARY VIEW trellis_star_view AS `+sql); err != nil {
		return nil, queryError(name, err)
	}
	var def string
	if err := db.QueryRow(ctx, `SELECT pg_get_viewdef('trellis_star_view'::regclass)`).Scan(&def); err != nil {
		return nil, fmt.Errorf("transform %q: expand *: %w", name, err)
	}
	def = strings.TrimSuffix(strings.TrimSpace(def), ";")
	marked, err := lateralUserAggregates(ctx, db, name, def)
	if err != nil {
		return nil, err
	}
	q, err := ParseQuery(name, marked)
	if err != nil {
		return nil, err
	}
	if marked != def {
		// The definition is PostgreSQL's expansion, without the marks.
		tree, err := pg_query.Parse(def)
		if err != nil {
			return nil, terr.Wrap(terr.Internal, err, "transform %q: parse the expanded query: %v", name, err)
		}
		if q.SQL, err = deparse(tree); err != nil {
			return nil, terr.Wrap(terr.Internal, err, "transform %q: deparse the expanded query: %v", name, err)
		}
	}
	if q.Expand {
		return nil, terr.New(terr.Internal, "transform %q: PostgreSQL's expansion of the query still needs one", name)
	}
	q.Views = views
	return q, nil
}

// visibleTargets returns sql with every table that is one of targets
// replaced by a derived table of its visible columns under the same name
// (and column aliases): (SELECT a, b FROM t) AS t.
func visibleTargets(ctx context.Context, db DB, name, sql string, targets []Rel) (string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return "", terr.Wrap(terr.Internal, err, "transform %q: parse the query to expand *: %v", name, err)
	}
	isTarget := map[Rel]bool{}
	for _, t := range targets {
		isTarget[t] = true
	}
	var ferr error
	changed := false
	for _, st := range tree.Stmts {
		replaceNodes(st.Stmt, func(n *pg_query.Node) *pg_query.Node {
			rv := n.GetRangeVar()
			if rv == nil || ferr != nil {
				return nil
			}
			cols, err := visibleColumns(ctx, db, rv, isTarget)
			if err != nil || cols == nil {
				ferr = err
				return nil
			}
			changed = true
			return visibleSubquery(rv, cols)
		})
	}
	if ferr != nil {
		return "", ferr
	}
	if !changed {
		return sql, nil
	}
	out, err := deparse(tree)
	if err != nil {
		return "", terr.Wrap(terr.Internal, err, "transform %q: deparse the query to expand *: %v", name, err)
	}
	return out, nil
}

// visibleColumns are the visible columns of the relation rv names when it
// is a target, in their order, or nil.
func visibleColumns(ctx context.Context, db DB, rv *pg_query.RangeVar, isTarget map[Rel]bool) ([]string, error) {
	ident := pgx.Identifier{rv.Relname}
	if rv.Schemaname != "" {
		ident = pgx.Identifier{rv.Schemaname, rv.Relname}
	}
	var rel Rel
	err := db.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, ident.Sanitize()).Scan(&rel.Schema, &rel.Name)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !isTarget[rel] {
		return nil, nil // not a target (or not a table: the expansion says so)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", ident.Sanitize(), err)
	}
	rows, err := db.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND left(attname, $2) <> $3
		ORDER BY attnum`, rel.Ident(), len(reservedPrefix), reservedPrefix)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", rel.Ident(), err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", rel.Ident(), err)
	}
	return cols, nil
}

// visibleSubquery is (SELECT cols FROM rv) under rv's name and column
// aliases.
func visibleSubquery(rv *pg_query.RangeVar, cols []string) *pg_query.Node {
	alias := &pg_query.Alias{Aliasname: rv.Relname}
	if rv.Alias != nil {
		alias = rv.Alias
	}
	inner := &pg_query.RangeVar{Schemaname: rv.Schemaname, Relname: rv.Relname, Inh: rv.Inh, Relpersistence: rv.Relpersistence, Location: -1}
	sel := &pg_query.SelectStmt{FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: inner}}}}
	for _, c := range cols {
		sel.TargetList = append(sel.TargetList, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{
			Val: pg_query.MakeColumnRefNode([]*pg_query.Node{pg_query.MakeStrNode(c)}, -1), Location: -1}}})
	}
	return &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}, Alias: alias}}}
}

// selectsStar reports whether a select list (of the query or of a
// subquery in its FROM) has * or t.*.
func selectsStar(sel *pg_query.SelectStmt) bool {
	found := false
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		if rt, ok := m.(*pg_query.ResTarget); ok && rt.Val != nil {
			if cr := rt.Val.GetColumnRef(); cr != nil && hasStar(cr) {
				found = true
			}
		}
		if _, ok := m.(*pg_query.SubLink); ok {
			return false
		}
		return !found
	})
	return found
}

func hasStar(cr *pg_query.ColumnRef) bool {
	for _, f := range cr.Fields {
		if f.GetAStar() != nil {
			return true
		}
	}
	return false
}
