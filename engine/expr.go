package engine

// expr.go owns expressions: what a transform refuses inside one (checkExpr:
// subqueries, window functions, volatile functions, SQL value functions,
// parameters, clock-dependent literals, column references that name no FROM
// table), a plain column reference (plainColumn), the key two expressions
// compare by (compareKey), and an expression rendered back as SQL that reads
// back the same (deparse, deparseExpr, deparseSelect).

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// windowOnlyFuncs are built-in functions that only work as window functions.
var windowOnlyFuncs = map[string]bool{
	"row_number": true, "rank": true, "dense_rank": true, "percent_rank": true,
	"cume_dist": true, "ntile": true, "lag": true, "lead": true, "first_value": true,
	"last_value": true, "nth_value": true,
}

// volatileFuncs is a deny-list of well-known volatile or stable built-ins,
// caught here for an early, clear error. The complete check runs later
// against pg_proc.provolatile, where the catalog is known.
var volatileFuncs = map[string]bool{
	"now": true, "random": true, "clock_timestamp": true, "statement_timestamp": true,
	"transaction_timestamp": true, "timeofday": true, "nextval": true, "currval": true,
	"setval": true, "lastval": true, "setseed": true, "gen_random_uuid": true,
	"txid_current": true, "pg_current_xact_id": true, "current_setting": true,
	"set_config": true,
}

// checkExpr walks an expression and refuses what a transform cannot keep
// exact. aggMsg is the sentence (with one %s for the function name) used
// when an aggregate call is found.
func (c *selectChecker) checkExpr(n *pg_query.Node, clause, aggMsg string) error {
	var errs []error
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if sl, ok := m.(*pg_query.SubLink); ok && (c.sublinks[sl.Location] || !c.qualified) {
			// A kept subquery's own tables are checked by its level (and
			// unqualified, when the expanded query is parsed again); its
			// test expression (x IN …) is the outer query's, and what
			// would read the clock is refused anywhere inside.
			if sl.Testexpr != nil {
				errs = append(errs, c.checkExpr(sl.Testexpr, clause, aggMsg))
			}
			errs = append(errs, c.checkVolatile(sl.Subselect, clause))
			return false
		}
		if err := c.checkNode(m, clause, aggMsg); err != nil {
			errs = append(errs, err)
			return false // one refusal per offending node, not per part of it
		}
		return true
	})
	return joinRefusals(errs)
}

// checkVolatile refuses the calls inside n that read the clock or the
// session (the deny-list; the catalog check runs at define).
func (c *selectChecker) checkVolatile(n *pg_query.Node, clause string) error {
	var errs []error
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.FuncCall:
			if schema, name := funcName(x); (schema == "" || schema == "pg_catalog") && volatileFuncs[name] {
				errs = append(errs, c.errf(x.Location, "%s: %s() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it", clause, name))
			}
		case *pg_query.SQLValueFunction:
			errs = append(errs, c.checkNode(m, clause, ""))
		}
		return true
	})
	return joinRefusals(errs)
}

func (c *selectChecker) checkNode(m proto.Message, clause, aggMsg string) error {
	switch x := m.(type) {
	case *pg_query.SubLink:
		return c.errf(x.Location, "%s: subqueries in expressions are not supported yet; %s", clause, subLinkAdvice(x))
	case *pg_query.FuncCall:
		schema, name := funcName(x)
		builtin := schema == "" || schema == "pg_catalog"
		switch {
		case x.Over != nil && c.windows && strings.HasPrefix(clause, "select list"):
			return nil // window.go: its arguments and clauses are checked as they are walked
		case x.Over != nil:
			return c.errf(x.Location, "%s: window functions (%s … OVER) are not supported in a transform; remove OVER", clause, name)
		case builtin && windowOnlyFuncs[name] && !x.AggWithinGroup:
			return c.errf(x.Location, "%s: %s() is a window function; window functions are not supported in a transform", clause, name)
		case isAggregate(x):
			return c.errf(x.Location, "%s: "+aggMsg, clause, name)
		case builtin && volatileFuncs[name]:
			return c.errf(x.Location, "%s: %s() is not immutable (its result changes from call to call), so the target could never be kept equal to the query; remove it", clause, name)
		}
	case *pg_query.SQLValueFunction:
		return c.errf(x.Location, "%s: %s is not immutable (it depends on when or by whom the query runs), so the target could never be kept equal to the query; remove it or store the value in a source column", clause, sqlValueFuncName(x.Op))
	case *pg_query.ParamRef:
		return c.errf(x.Location, "%s: parameters ($%d) are not supported in a transform; write the value as a literal", clause, x.Number)
	case *pg_query.ColumnRef:
		return c.checkColumnRef(x, clause)
	case *pg_query.A_Star:
		return c.errf(-1, "%s: * is not supported in a transform; name the columns you need", clause)
	case *pg_query.JsonObjectAgg:
		return c.errf(-1, "%s: JSON_OBJECTAGG is not supported in a transform; write jsonb_object_agg(key, value ORDER BY …)", clause)
	case *pg_query.JsonArrayAgg:
		return c.errf(-1, "%s: JSON_ARRAYAGG is not supported in a transform; write jsonb_agg(value ORDER BY …)", clause)
	case *pg_query.A_Indirection:
		if x.Arg.GetAConst() != nil {
			// PostgreSQL cannot select a field of or subscript an untyped
			// constant, and the deparser would drop the parentheses.
			return c.errf(nodeLocation(x.Arg), "%s: a field selection or subscript needs a typed value; cast the constant first, e.g. ('{1,2}'::int[])[1]", clause)
		}
	case *pg_query.TypeName:
		for _, m := range x.Typmods {
			if m.GetAConst() == nil && m.GetColumnRef() == nil {
				return c.errf(x.Location, "%s: type modifiers must be simple constants or identifiers (as PostgreSQL requires); write e.g. numeric(10, 2)", clause)
			}
		}
	case *pg_query.TypeCast:
		if word := specialDateTimeLiteral(x); word != "" {
			return c.errf(x.Location, "%s: the literal '%s' is read when the query runs, so it is not immutable; remove it or store the value in a source column", clause, word)
		}
	}
	return nil
}

func (c *selectChecker) checkColumnRef(cr *pg_query.ColumnRef, clause string) error {
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return c.errf(cr.Location, "%s: * is not supported in a transform; name the columns you need", clause)
		}
		parts = append(parts, s.Sval)
	}
	ref := quoteIdents(parts)
	names := c.refNames()
	if len(parts) == 2 && (c.fromRefused || c.generatedName(parts[0])) {
		return nil
	}
	switch {
	case len(parts) > 2:
		return c.errf(cr.Location, "%s: column reference %s has %d parts; refer to columns as %s.column or just column", clause, ref, len(parts), quoteIdents(names[:1]))
	case len(parts) == 2 && !contains(names, parts[0]) && c.single():
		return c.errf(cr.Location, "%s: column reference %s names %s, which is not the FROM table; the FROM table is referred to as %s, write %s or just %s", clause, ref, quoteIdents(parts[:1]),
			quoteIdents(names), quoteIdents([]string{names[0], parts[1]}), quoteIdents(parts[1:]))
	case len(parts) == 2 && !contains(names, parts[0]):
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = quoteIdents([]string{n})
		}
		return c.errf(cr.Location, "%s: column reference %s names %s, which is not a FROM table; the FROM tables are referred to as %s", clause, ref, quoteIdents(parts[:1]), strings.Join(quoted, ", "))
	}
	return nil
}

// generatedName reports whether name is a function or VALUES item's.
func (c *selectChecker) generatedName(name string) bool {
	for _, g := range c.generated {
		if g.Ref == name {
			return true
		}
	}
	return false
}

// plainColumn returns the column name and its qualifier ("" when
// unqualified) when n is a plain column reference, else "", "".
func (c *selectChecker) plainColumn(n *pg_query.Node) (column, ref string) {
	cr := n.GetColumnRef()
	if cr == nil {
		return "", ""
	}
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return "", ""
		}
		parts = append(parts, s.Sval)
	}
	switch {
	case len(parts) == 1:
		return parts[0], ""
	case len(parts) == 2 && contains(c.refNames(), parts[0]):
		return parts[1], parts[0]
	}
	return "", ""
}

// compareKey is the text two expressions are compared by: the deparsed
// expression after dropping the FROM table's qualifier from column
// references, so that `o.region` and `region` compare equal as they do in
// PostgreSQL. With several tables the qualifiers stay: which table an
// unqualified name belongs to is the catalog's to say.
func (c *selectChecker) compareKey(n *pg_query.Node, clause string) (string, error) {
	clone := proto.Clone(n).(*pg_query.Node)
	walk(clone.ProtoReflect(), func(m proto.Message) bool {
		if cr, ok := m.(*pg_query.ColumnRef); ok && len(cr.Fields) == 2 && c.single() {
			if s := cr.Fields[0].GetString_(); s != nil && s.Sval == c.tables[0].RefName() && cr.Fields[1].GetString_() != nil {
				cr.Fields = cr.Fields[1:]
			}
		}
		return true
	})
	return c.deparse(clone, clause)
}

// deparse renders an expression as SQL text, naming the clause on failure.
func (c *selectChecker) deparse(n *pg_query.Node, clause string) (string, error) {
	s, err := deparseExpr(n)
	if err != nil {
		return "", terr.Wrap(terr.Validation, err, "%s: %s: this expression cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", c.label, clause, err)
	}
	if !sameExpr(n, s) {
		// deparse already checks its text reads back; this guards the
		// expression alone, as a second line: text that would mean
		// another expression is refused rather than kept.
		return "", c.errf(nodeLocation(n), "%s: the expression %s does not read back as written after PostgreSQL's deparser renders it; write it another way, e.g. with function calls instead of operators (timezone('UTC', t) for t AT TIME ZONE 'UTC')", clause, s)
	}
	return s, nil
}

// atTimeZoneAsCalls writes every x AT TIME ZONE z below n as the call it
// stands for, pg_catalog.timezone(z, x): the bundled deparser renders the
// operator form without the parentheses PostgreSQL needs around it
// ((x AT TIME ZONE 'UTC')::date would read back as x AT TIME ZONE
// ('UTC'::date)), the call form reads back as written.
func atTimeZoneAsCalls(n *pg_query.Node) {
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		if fc, ok := m.(*pg_query.FuncCall); ok && fc.Funcformat == pg_query.CoercionForm_COERCE_SQL_SYNTAX {
			if schema, name := funcName(fc); schema == "pg_catalog" && name == "timezone" {
				fc.Funcformat = pg_query.CoercionForm_COERCE_EXPLICIT_CALL
			}
		}
		return true
	})
}

// sameExpr reports whether text parses back to the expression n (node
// locations aside).
func sameExpr(n *pg_query.Node, text string) bool {
	tree, err := pg_query.Parse("SELECT " + text)
	if err != nil || len(tree.Stmts) != 1 {
		return false
	}
	sel := tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || sel.TargetList[0].GetResTarget() == nil {
		return false
	}
	a, b := proto.Clone(n).(*pg_query.Node), sel.TargetList[0].GetResTarget().Val
	clearLocations(a.ProtoReflect())
	clearLocations(b.ProtoReflect())
	return proto.Equal(a, b)
}

// deparseExpr renders one expression node as SQL text by deparsing it as
// the single item of a SELECT.
func deparseExpr(node *pg_query.Node) (string, error) {
	rt := &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: node}}}
	out, err := deparseSelect(&pg_query.SelectStmt{TargetList: []*pg_query.Node{rt}})
	if err != nil {
		return "", err
	}
	s, ok := strings.CutPrefix(out, "SELECT ")
	if !ok {
		return "", fmt.Errorf("unexpected deparser output %q", out)
	}
	return s, nil
}

func deparseSelect(sel *pg_query.SelectStmt) (string, error) {
	tree := &pg_query.ParseResult{Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}}}}
	out, err := deparse(tree)
	if err != nil {
		return "", fmt.Errorf("deparse: %w", err)
	}
	return out, nil
}

// specialDateTimeLiteral returns the word when a cast reads one of the
// date/time input strings that depend on the clock ('now', 'today', …).
func specialDateTimeLiteral(tc *pg_query.TypeCast) string {
	s := tc.GetArg().GetAConst().GetSval()
	if s == nil || tc.TypeName == nil || len(tc.TypeName.Names) == 0 {
		return ""
	}
	typ := tc.TypeName.Names[len(tc.TypeName.Names)-1].GetString_()
	if typ == nil {
		return ""
	}
	switch typ.Sval {
	case "date", "timestamp", "timestamptz", "time", "timetz":
	default:
		return ""
	}
	word := strings.ToLower(strings.TrimSpace(s.Sval))
	switch word {
	case "now", "today", "tomorrow", "yesterday":
		return word
	}
	return ""
}

func sqlValueFuncName(op pg_query.SQLValueFunctionOp) string {
	switch op {
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_DATE:
		return "CURRENT_DATE"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N:
		return "CURRENT_TIME"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP, pg_query.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N:
		return "CURRENT_TIMESTAMP"
	case pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIME_N:
		return "LOCALTIME"
	case pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP, pg_query.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N:
		return "LOCALTIMESTAMP"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_ROLE:
		return "CURRENT_ROLE"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_USER:
		return "CURRENT_USER"
	case pg_query.SQLValueFunctionOp_SVFOP_USER:
		return "USER"
	case pg_query.SQLValueFunctionOp_SVFOP_SESSION_USER:
		return "SESSION_USER"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_CATALOG:
		return "CURRENT_CATALOG"
	case pg_query.SQLValueFunctionOp_SVFOP_CURRENT_SCHEMA:
		return "CURRENT_SCHEMA"
	}
	return "this SQL value function"
}
