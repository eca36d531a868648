package engine

// recursivelevel.go owns the level of a recursive CTE as the parser
// meets it (ADR 0035): the recursiveFunc call a reference reads in FROM
// becomes an inner level (recursiveLevel), whose query is the CTE with
// its terms parsed as queries of their own (parseRecursive); a call left
// in a subquery in an expression is written back as the recursive query
// PostgreSQL evaluates there (realizeRecursive).

import (
	"errors"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// RecursiveSpec is a recursive CTE kept as a level: its terms, parsed as
// queries of their own, and how the step reads the CTE.
type RecursiveSpec struct {
	// Name is the CTE's name; Columns its column names, the level's
	// output.
	Name    string
	Columns []string
	// Union: anchor UNION step (sets); otherwise UNION ALL.
	Union bool
	// Anchor is the non-recursive term; Step the recursive one, whose
	// Tables[Self] is the CTE's reference (named SelfTable), read as
	// SelfRef.
	Anchor, Step *Query
	Self         int
	SelfRef      string
	// Joined are the CTE's columns the step equates with other columns.
	Joined []string
	// funcs are the functions the terms' select lists call, by name.
	funcs []string
}

// recursiveCall is the level text of a FROM item that is a reference's
// recursiveFunc call, or "" for any other item.
func recursiveCall(rf *pg_query.RangeFunction) string {
	if len(rf.Functions) != 1 {
		return ""
	}
	items := rf.Functions[0].GetList().GetItems()
	if len(items) == 0 {
		return ""
	}
	fc := items[0].GetFuncCall()
	if fc == nil || len(fc.Args) != 1 {
		return ""
	}
	if _, name := funcName(fc); name != recursiveFunc {
		return ""
	}
	return fc.Args[0].GetAConst().GetSval().GetSval()
}

// realizeRecursive writes every recursiveFunc call left in n — in
// subqueries in expressions, which PostgreSQL evaluates as written (ADR
// 0030), their dependency levels already made — back as the recursive
// query it stands for.
func realizeRecursive(n *pg_query.Node) {
	replaceNodes(n, func(x *pg_query.Node) *pg_query.Node {
		rf := x.GetRangeFunction()
		if rf == nil {
			return nil
		}
		text := recursiveCall(rf)
		if text == "" {
			return nil
		}
		tree, err := pg_query.Parse(text)
		if err != nil || len(tree.Stmts) != 1 {
			return nil
		}
		sub := tree.Stmts[0].Stmt
		clearLocations(sub.ProtoReflect())
		return &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{Subquery: sub, Alias: rf.Alias}}}
	})
}

// recursiveLevel makes the level a recursiveFunc call in FROM reads.
func (c *selectChecker) recursiveLevel(rf *pg_query.RangeFunction, text string) (*pg_query.Node, error) {
	alias := ""
	if rf.Alias != nil {
		alias = rf.Alias.Aliasname
	}
	if l := c.sameLevel(text); l != nil {
		return c.placeLevel(&Level{Alias: alias, Query: l.Query, SameAs: l, text: text}, alias), nil
	}
	q, err := parseRecursive(c.label, text, c.qualified)
	if err != nil {
		return nil, err
	}
	return c.placeLevel(&Level{Alias: alias, Query: q, text: text}, alias), nil
}

// parseRecursive parses a recursive CTE's level query (recursiveCTE made
// it): its terms as queries of their own, the step's reference to the
// CTE as a table named SelfTable.
func parseRecursive(label, text string, qualified bool) (*Query, error) {
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, terr.New(terr.Internal, "%s: parse the recursive CTE's level query: %v", label, err)
	}
	cte := tree.Stmts[0].GetStmt().GetSelectStmt().GetWithClause().GetCtes()[0].GetCommonTableExpr()
	body := cte.Ctequery.GetSelectStmt()
	what := label + ": WITH RECURSIVE " + quoteIdents([]string{cte.Ctename})
	rs := &RecursiveSpec{Name: cte.Ctename, Union: !body.All}
	for _, cn := range cte.Aliascolnames {
		rs.Columns = append(rs.Columns, cn.GetString_().GetSval())
	}
	selfRef := cte.Ctename
	for _, rv := range tableRefs(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: body.Rarg}}, cte.Ctename) {
		if rv.Alias != nil {
			selfRef = rv.Alias.Aliasname
		}
		rv.Relname, rv.Alias = SelfTable, &pg_query.Alias{Aliasname: selfRef}
	}
	term := func(sel *pg_query.SelectStmt, part string) (*Query, error) {
		for _, it := range sel.FromClause {
			if readsGenerated(it) {
				// Its rows would need an ordinal in the path identity,
				// which the anchor re-derive does not carry (ADR 0035).
				return nil, terr.New(terr.Validation, "%s: %s reads a function or VALUES list in FROM; %s — expand the function in the outer query, over the recursive CTE", what, part, keptForm)
			}
		}
		for i, t := range sel.TargetList {
			if rt := t.GetResTarget(); rt != nil && i < len(rs.Columns) {
				// The CTE's column list names the term's outputs.
				rt.Name = rs.Columns[i]
			}
			walk(t.ProtoReflect(), func(m proto.Message) bool {
				if fc, ok := m.(*pg_query.FuncCall); ok {
					_, name := funcName(fc)
					rs.funcs = append(rs.funcs, name)
				}
				return true
			})
		}
		s, err := deparseSelect(sel)
		if err != nil {
			return nil, terr.Wrap(terr.Validation, err, "%s: %s cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", what, part, err)
		}
		q, err := parseSelect(what+": "+part, s, 0, len(s), qualified)
		if err != nil {
			var te *terr.Error
			if errors.As(err, &te) {
				// Positions would count in the term as deparsed.
				return nil, &terr.Error{Code: te.Code, Msg: positionRe.ReplaceAllString(te.Msg, ""), Err: te.Err}
			}
			return nil, err
		}
		switch {
		case q.Expand:
			return nil, terr.New(terr.Validation, "%s: %s selects * or reads a subquery in an expression; list its columns by name and join the subquery's table in FROM", what, part)
		case len(q.Levels) > 0:
			return nil, terr.New(terr.Validation, "%s: %s reads a subquery that aggregates (or a CTE that does); %s — aggregate in the outer query, over the recursive CTE", what, part, keptForm)
		case len(q.Outer) > 0:
			return nil, terr.New(terr.Validation, "%s: %s has an outer join; %s", what, part, keptForm)
		case q.Aggregate || q.Window != nil:
			return nil, terr.New(terr.Validation, "%s: %s aggregates; %s", what, part, keptForm)
		}
		return q, nil
	}
	if rs.Anchor, err = term(body.Larg, "its anchor"); err != nil {
		return nil, err
	}
	if rs.Step, err = term(body.Rarg, "its recursive term"); err != nil {
		return nil, err
	}
	rs.Self, rs.SelfRef = -1, selfRef
	for i, t := range rs.Step.Tables {
		if t.Name == SelfTable && t.Schema == "" {
			rs.Self = i
		}
	}
	if rs.Self < 0 {
		return nil, terr.New(terr.Internal, "%s: its recursive term lost its reference to the CTE", what)
	}
	for _, eq := range rs.Step.Equalities {
		for _, pair := range [][2]ColumnName{{eq.Left, eq.Right}, {eq.Right, eq.Left}} {
			if pair[0].Ref == selfRef && pair[1].Ref != selfRef && contains(rs.Columns, pair[0].Column) && !contains(rs.Joined, pair[0].Column) {
				rs.Joined = append(rs.Joined, pair[0].Column)
			}
		}
	}
	q := &Query{SQL: text, Rewritten: text, Recursive: rs}
	for _, term := range []*Query{rs.Anchor, rs.Step} {
		for i, t := range term.Tables {
			if term != rs.Step || i != rs.Self {
				q.Tables = append(q.Tables, t)
			}
		}
		q.Views = append(q.Views, term.Views...)
	}
	for _, col := range rs.Columns {
		q.Targets = append(q.Targets, Target{Name: col, Expr: ident(col), Group: -1})
	}
	return q, nil
}
