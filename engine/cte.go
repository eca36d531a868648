package engine

// cte.go owns WITH (common table expressions; recursive ones are
// recursive.go's, ADR 0035): before anything else is checked, every
// reference to a CTE is replaced by the CTE's query as a derived table
// under the reference's name, and the WITH
// clause is removed (ADR 0030). What follows sees derived tables only: one
// that projects and filters is flattened into the query that reads it
// (flatten.go), any other is an inner level (level.go). A CTE read twice
// or more that becomes a level is one level both references read
// (selectChecker.level finds the earlier one by its text), not two
// computations of the same rows. MATERIALIZED and NOT MATERIALIZED change
// how PostgreSQL plans the query, not its rows: both are accepted.

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// dropModifyingCTEs refuses every CTE that holds a data-modifying
// statement (INSERT, UPDATE, DELETE, MERGE), anywhere in n, and leaves it
// out of its WITH, so that the rest of the query is still checked and one
// error names every refused part.
func (c *selectChecker) dropModifyingCTEs(n *pg_query.Node) error {
	var errs []error
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		w, ok := m.(*pg_query.WithClause)
		if !ok {
			return true
		}
		kept := w.Ctes[:0]
		for _, cn := range w.Ctes {
			if cte := cn.GetCommonTableExpr(); cte != nil && cte.Ctequery.GetSelectStmt() == nil {
				errs = append(errs, c.errf(cte.Location, "WITH %s holds a data-modifying statement (INSERT, UPDATE, DELETE or MERGE); a transform's query only reads, so remove it", quoteIdents([]string{cte.Ctename})))
				continue
			}
			kept = append(kept, cn)
		}
		w.Ctes = kept
		return true
	})
	replaceNodes(n, func(x *pg_query.Node) *pg_query.Node {
		if sel := x.GetSelectStmt(); sel != nil && sel.WithClause != nil && len(sel.WithClause.Ctes) == 0 {
			sel.WithClause = nil
		}
		return nil
	})
	return joinRefusals(errs)
}

// cteDef is a CTE of a WITH in scope: its query, with the references it
// makes to earlier CTEs already replaced, and its column names; or, for a
// recursive CTE, how a reference reads its level (recursive.go).
type cteDef struct {
	query     *pg_query.Node
	colnames  []*pg_query.Node
	recursive *recursiveRef
}

// inlineWith replaces, in n and below, every reference to a CTE in scope
// (env, and the WITH clauses met on the way down, which shadow it) by a
// derived table, and removes the WITH clauses. A recursive CTE is read as
// a level (recursive.go); a WITH holding a data-modifying statement is
// refused (withRefusal).
func (c *selectChecker) inlineWith(n *pg_query.Node, env map[string]*cteDef) (*pg_query.Node, error) {
	var ferr error
	var visit func(n *pg_query.Node) *pg_query.Node
	visit = func(n *pg_query.Node) *pg_query.Node {
		if ferr != nil {
			return nil
		}
		switch x := n.Node.(type) {
		case *pg_query.Node_SelectStmt:
			sel := x.SelectStmt
			if sel.WithClause == nil {
				return nil // walked below as any node
			}
			inner, err := c.scopeWith(sel.WithClause, env)
			if err != nil {
				ferr = err
				return n
			}
			sel.WithClause = nil
			if _, err := c.inlineWith(n, inner); err != nil {
				ferr = err
			}
			return n
		case *pg_query.Node_RangeVar:
			rv := x.RangeVar
			def := env[rv.Relname]
			if rv.Schemaname != "" || rv.Catalogname != "" || def == nil {
				return nil
			}
			if def.recursive != nil {
				return def.recursive.reference(rv)
			}
			return cteReference(rv, def)
		}
		return nil
	}
	out := replaceNodes(n, visit)
	return out, ferr
}

// scopeWith is env extended by the CTEs of w, each query's own references
// to earlier CTEs (and to those of env) replaced. In a WITH RECURSIVE, a
// CTE that reads itself is checked and read as a level (recursive.go).
func (c *selectChecker) scopeWith(w *pg_query.WithClause, env map[string]*cteDef) (map[string]*cteDef, error) {
	inner := make(map[string]*cteDef, len(env)+len(w.Ctes))
	for k, v := range env {
		inner[k] = v
	}
	for k, n := range w.Ctes {
		cte := n.GetCommonTableExpr()
		if cte == nil {
			continue
		}
		if cte.Ctequery.GetSelectStmt() == nil {
			return nil, c.withRefusal(w)
		}
		if w.Recursive {
			if err := c.forwardRefusal(w, k); err != nil {
				return nil, err
			}
			if len(tableRefs(cte.Ctequery, cte.Ctename)) > 0 {
				ref, err := c.recursiveCTE(cte, withoutName(inner, cte.Ctename))
				if err != nil {
					return nil, err
				}
				inner[cte.Ctename] = &cteDef{recursive: ref}
				continue
			}
		}
		// A CTE sees the CTEs before it, not itself (it would be a
		// recursive one, above).
		q, err := c.inlineWith(proto.Clone(cte.Ctequery).(*pg_query.Node), inner)
		if err != nil {
			return nil, err
		}
		inner[cte.Ctename] = &cteDef{query: q, colnames: cte.Aliascolnames}
	}
	return inner, nil
}

// cteReference is the derived table that takes the place of rv, a
// reference to def: def's query under rv's alias (its name when it has
// none), its columns named by def's column list and then rv's.
func cteReference(rv *pg_query.RangeVar, def *cteDef) *pg_query.Node {
	alias := &pg_query.Alias{Aliasname: rv.Relname}
	if rv.Alias != nil {
		alias = proto.Clone(rv.Alias).(*pg_query.Alias)
	}
	if len(def.colnames) > len(alias.Colnames) {
		names := make([]*pg_query.Node, 0, len(def.colnames))
		names = append(names, alias.Colnames...)
		names = append(names, def.colnames[len(alias.Colnames):]...)
		alias.Colnames = names
	}
	return &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Subquery: proto.Clone(def.query).(*pg_query.Node), Alias: alias}}}
}
