package engine

// views.go owns plain views in FROM (issue 24 item 10): a view is read as
// its definition, a derived table under the view's name, when the
// definition is applied (views over views in turn), so the transform
// reads — and captures — the tables under it. Each view's definition is
// recorded in the plan; a later CREATE OR REPLACE VIEW no longer matches
// it, which CheckDrift reports (viewDrift).

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// ViewDep is a view a definition read, as it was then.
type ViewDep struct {
	// OID and Name (schema-qualified, quoted) identify it; Def is
	// pg_get_viewdef's text.
	OID  uint32 `json:"oid"`
	Name string `json:"name"`
	Def  string `json:"def"`
}

// maxViewDepth bounds views over views.
const maxViewDepth = 32

// ReadsView reports whether the query sql names a plain view in a FROM
// clause: such a definition is expanded (Query.Expand) when applied.
func ReadsView(ctx context.Context, db DB, sql string) (bool, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return false, nil // the parser already said why
	}
	var names []string
	for _, st := range tree.Stmts {
		replaceNodes(st.Stmt, func(n *pg_query.Node) *pg_query.Node {
			if rv := n.GetRangeVar(); rv != nil {
				names = append(names, rangeVarIdent(rv))
			}
			return nil
		})
	}
	if len(names) == 0 {
		return false, nil
	}
	var found bool
	err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) n JOIN pg_class c ON c.oid = to_regclass(n) WHERE c.relkind = 'v')`, names).Scan(&found)
	return found, err
}

// rangeVarIdent is the quoted name a FROM table is looked up by.
func rangeVarIdent(rv *pg_query.RangeVar) string {
	if rv.Schemaname != "" {
		return pgx.Identifier{rv.Schemaname, rv.Relname}.Sanitize()
	}
	return pgx.Identifier{rv.Relname}.Sanitize()
}

// expandViews returns sql with every plain view in it replaced by its
// definition as a derived table under the view's name, and the views
// read.
func expandViews(ctx context.Context, db DB, name, sql string) (string, []ViewDep, error) {
	var deps []ViewDep
	seen := map[uint32]bool{}
	for depth := 0; ; depth++ {
		tree, err := pg_query.Parse(sql)
		if err != nil {
			return "", nil, terr.Wrap(terr.Internal, err, "transform %q: parse the query to expand its views: %v", name, err)
		}
		changed := false
		var ferr error
		for _, st := range tree.Stmts {
			replaceNodes(st.Stmt, func(n *pg_query.Node) *pg_query.Node {
				rv := n.GetRangeVar()
				if rv == nil || ferr != nil {
					return nil
				}
				var v ViewDep
				var kind string
				err := db.QueryRow(ctx, `SELECT c.oid, format('%I.%I', ns.nspname, c.relname), c.relkind::text,
					CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) ELSE '' END
					FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, rangeVarIdent(rv)).
					Scan(&v.OID, &v.Name, &kind, &v.Def)
				if errors.Is(err, pgx.ErrNoRows) || err == nil && kind != "v" {
					return nil
				}
				if err != nil {
					ferr = fmt.Errorf("transform %q: read view %s: %w", name, rangeVarIdent(rv), err)
					return nil
				}
				if !seen[v.OID] {
					seen[v.OID] = true
					deps = append(deps, v)
				}
				sub, err := pg_query.Parse(strings.TrimSuffix(strings.TrimSpace(v.Def), ";"))
				if err != nil || len(sub.Stmts) != 1 || sub.Stmts[0].Stmt.GetSelectStmt() == nil {
					ferr = terr.New(terr.Validation, "transform %q: the view %s is not a plain SELECT this version can read; select from its tables", name, v.Name)
					return nil
				}
				alias := rv.Alias
				if alias == nil {
					alias = &pg_query.Alias{Aliasname: rv.Relname}
				}
				changed = true
				return &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
					Subquery: sub.Stmts[0].Stmt, Alias: alias}}}
			})
		}
		if ferr != nil {
			return "", nil, ferr
		}
		if !changed {
			return sql, deps, nil
		}
		if depth >= maxViewDepth {
			return "", nil, terr.New(terr.Validation, "transform %q: its views read views more than %d deep; select from the tables", name, maxViewDepth)
		}
		if sql, err = deparse(tree); err != nil {
			return "", nil, terr.Wrap(terr.Internal, err, "transform %q: deparse the query with its views expanded: %v", name, err)
		}
	}
}

// viewDrift reports a view the plan read whose definition changed or
// which is gone.
func viewDrift(ctx context.Context, db DB, name string, p *Plan) (*Drift, error) {
	for _, v := range p.Views {
		var def *string
		if err := db.QueryRow(ctx, `SELECT pg_get_viewdef(oid) FROM pg_class WHERE oid = $1 AND relkind = 'v'`, v.OID).Scan(&def); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		if def == nil || *def != v.Def {
			return &Drift{Kind: catalog.FailureHalt, Error: fmt.Sprintf("transform %q: the view %s it reads was replaced or dropped since it was defined, and the transform still reads the view's old definition; CREATE OR REPLACE TRANSFORM %s to read the view as it is now",
				name, v.Name, name)}, nil
		}
	}
	return nil, nil
}
