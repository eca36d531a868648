package engine

// refuse.go owns refusals: the statement-level clauses outside the subset
// (checkClauses: set operations, VALUES, INTO, DISTINCT ON, LIMIT,
// locking, WINDOW, GROUP BY DISTINCT), the advice that names an accepted
// rewrite (withRefusal, subLinkAdvice), and joinRefusals, which makes one
// error of every refused part of a query.

import (
	"errors"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// checkClauses refuses the statement-level clauses outside the subset.
func (c *selectChecker) checkClauses(sel *pg_query.SelectStmt) error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED {
		op := strings.TrimPrefix(sel.Op.String(), "SETOP_")
		add(c.errf(-1, "%s is not supported in a transform; define one transform per branch", op))
	}
	if len(sel.ValuesLists) > 0 {
		add(c.errf(-1, "VALUES is not supported in a transform; a transform reads a source table (put constant rows in a table)"))
	}
	if sel.IntoClause != nil {
		add(c.errf(-1, "SELECT INTO is not supported in a transform; remove INTO (the transform's name is its target table)"))
	}
	if len(sel.DistinctClause) > 0 {
		if len(sel.DistinctClause) == 1 && sel.DistinctClause[0].GetNode() == nil {
			add(c.errf(-1, "DISTINCT is not supported yet; GROUP BY the selected expressions instead"))
		} else if len(sel.SortClause) == 0 {
			add(c.errf(-1, "DISTINCT ON without ORDER BY keeps an arbitrary row of each group (in PostgreSQL too); add ORDER BY starting with the DISTINCT ON expressions and ending with a key"))
		}
	}
	if sel.LimitCount != nil || sel.LimitOffset != nil {
		loc := int32(-1)
		if sel.LimitCount != nil {
			loc = nodeLocation(sel.LimitCount)
		} else {
			loc = nodeLocation(sel.LimitOffset)
		}
		if len(sel.SortClause) == 0 {
			add(c.errf(loc, "LIMIT without ORDER BY keeps arbitrary rows (in PostgreSQL too), so the target could not be kept equal to the query; add ORDER BY ending with a key, or remove LIMIT/OFFSET/FETCH and limit rows when you read the target"))
		}
	}
	if len(sel.LockingClause) > 0 {
		add(c.errf(-1, "FOR UPDATE/FOR SHARE is not supported in a transform; remove it (source rows are read without locking them)"))
	}
	return joinRefusals(errs)
}

// innerRefusals are the parts of a refused derived table that would be
// refused on their own — TABLESAMPLE, FOR UPDATE/SHARE and calls that read
// the clock, at any depth — so that one error names them with the reason
// the derived table itself is refused.
func (c *selectChecker) innerRefusals(inner *pg_query.SelectStmt, what string) []error {
	var errs []error
	walk(inner.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.RangeTableSample:
			errs = append(errs, c.errf(x.Location, "%s: TABLESAMPLE is not supported in a transform; remove it (a transform covers every row)", what))
		case *pg_query.SelectStmt:
			if x != inner && len(x.LockingClause) > 0 {
				errs = append(errs, c.errf(-1, "%s: FOR UPDATE/FOR SHARE is not supported in a transform; remove it (source rows are read without locking them)", what))
			}
		}
		return true
	})
	return append(errs, c.checkVolatile(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}}, what))
}

// withRefusal refuses a WITH clause the engine cannot keep (a
// data-modifying statement in it) with the advice that fits it; any other
// WITH is inlined (cte.go), a recursive CTE read as a level (recursive.go).
func (c *selectChecker) withRefusal(w *pg_query.WithClause) error {
	for _, n := range w.Ctes {
		cte := n.GetCommonTableExpr()
		if cte != nil && cte.Ctequery.GetSelectStmt() == nil {
			return c.errf(cte.Location, "WITH %s holds a data-modifying statement (INSERT, UPDATE, DELETE or MERGE); a transform's query only reads, so remove it", quoteIdents([]string{cte.Ctename}))
		}
	}
	return c.errf(w.Location, "WITH: unexpected clause")
}

// subLinkAdvice says how to write a subquery in an expression with a
// subquery in FROM instead, by kind; each rewrite it suggests is accepted
// (testdata/definitions.sql holds one of each).
func subLinkAdvice(x *pg_query.SubLink) string {
	switch x.SubLinkType {
	case pg_query.SubLinkType_EXISTS_SUBLINK:
		return "for EXISTS, join the subquery's distinct rows instead: … JOIN (SELECT DISTINCT <the columns it correlates on> FROM … WHERE <its other conditions>) AS e ON e.<column> = <outer column>; for NOT EXISTS, LEFT JOIN it and add WHERE e.<column> IS NULL"
	case pg_query.SubLinkType_ANY_SUBLINK:
		if isEqualsOp(x.OperName) {
			return "for IN, join the subquery's distinct values instead: … JOIN (SELECT DISTINCT <its column> AS v FROM …) AS s ON s.v = <the outer expression>; for NOT IN where neither side is ever NULL, LEFT JOIN it and add WHERE s.v IS NULL"
		}
	case pg_query.SubLinkType_EXPR_SUBLINK:
		return "compute a scalar subquery in a subquery in FROM and join that: LEFT JOIN (SELECT <correlated column>, max(…) AS m FROM … GROUP BY <correlated column>) AS s ON s.<correlated column> = <outer column> when it refers to the outer query (a count becomes coalesce(s.m, 0)), CROSS JOIN (SELECT avg(…) AS m FROM …) AS s when it does not; then use s.m"
	case pg_query.SubLinkType_ARRAY_SUBLINK:
		return "for ARRAY (subquery), LEFT JOIN (SELECT <correlated column>, array_agg(… ORDER BY …) AS a FROM … GROUP BY <correlated column>) AS s ON s.<correlated column> = <outer column> and use s.a"
	}
	return "join the subquery's tables in FROM and move its conditions into WHERE where the query allows it"
}

// isEqualsOp: an operator name list is plain "=" (IN is = ANY).
func isEqualsOp(names []*pg_query.Node) bool {
	return len(names) == 0 || lastElemString(names) == "="
}

// refusals is one definition's refusal that names several unsupported
// parts: the user fixes them all at once, not one per attempt.
type refusals struct {
	combined *terr.Error
	parts    []*terr.Error
}

// Error is the combined sentence.
func (r *refusals) Error() string { return r.combined.Error() }

// Unwrap exposes the combined *terr.Error (its code is validation).
func (r *refusals) Unwrap() error { return r.combined }

// joinRefusals combines the refusals of one query: nil for none, the one
// itself, or one error listing every part (nested lists flattened).
func joinRefusals(errs []error) error {
	var parts []*terr.Error
	var other error
	for _, err := range errs {
		var r *refusals
		var te *terr.Error
		switch {
		case err == nil:
		case errors.As(err, &r):
			parts = append(parts, r.parts...)
		case errors.As(err, &te) && te.Code == terr.Validation:
			parts = append(parts, te)
		case other == nil:
			other = err
		}
	}
	switch {
	case other != nil:
		return other
	case len(parts) == 0:
		return nil
	case len(parts) == 1:
		return parts[0]
	}
	label, _, _ := strings.Cut(parts[0].Msg, ": ")
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the query has %d unsupported parts: ", label, len(parts))
	for i, p := range parts {
		if i > 0 {
			b.WriteString("; ")
		}
		_, msg, _ := strings.Cut(p.Msg, ": ")
		fmt.Fprintf(&b, "(%d) %s", i+1, msg)
	}
	return &refusals{combined: terr.New(terr.Validation, "%s", b.String()), parts: parts}
}
