package engine

// alter.go owns ALTER TRANSFORM's language side (ADR 0041): parseAlter
// reads the clauses, EditSelect applies them in order to a stored
// definition's select list, and SameButColumns says whether a plan of the
// edited definition differs from the old one only in its computed
// columns.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// parseAlter reads ALTER TRANSFORM [schema.]name clause, … where a clause
// is ADD [COLUMN] col AS expr, DROP [COLUMN] col or ALTER [COLUMN] col AS
// expr; clauses are separated by commas outside parentheses.
func (p *stmtParser) parseAlter() (Statement, error) {
	p.i++
	if err := p.expect("transform", "ALTER", "; write ALTER TRANSFORM name ADD col AS expr, DROP col, ALTER col AS expr"); err != nil {
		return Statement{}, err
	}
	st := Statement{Kind: AlterTransform}
	if err := p.name(&st); err != nil {
		return Statement{}, err
	}
	for {
		if p.i >= len(p.toks) {
			return Statement{}, p.errHere("expected ADD, DROP or ALTER, found the end of the statement")
		}
		op := p.word(0)
		if op != "add" && op != "drop" && op != "alter" {
			return Statement{}, p.errHere("expected ADD, DROP or ALTER, found %s; ALTER TRANSFORM edits computed columns only", p.found())
		}
		p.i++
		if p.word(0) == "column" {
			p.i++
		}
		col, err := p.ident("a column name")
		if err != nil {
			return Statement{}, err
		}
		c := AlterClause{Op: op, Column: col}
		if op != "drop" {
			if err := p.expect("as", strings.ToUpper(op)+" "+col, "; write "+strings.ToUpper(op)+" "+col+" AS expression"); err != nil {
				return Statement{}, err
			}
			start, end := p.offset(), p.clauseEnd()
			c.Expr = strings.TrimSpace(p.script[start:end])
			if err := checkExpr(c.Expr); err != nil {
				return Statement{}, terr.Wrap(terr.Validation, err, "%s: %s %s AS %s: %v; write one expression over the transform's FROM", p.label, strings.ToUpper(op), col, c.Expr, err)
			}
		}
		st.Alter = append(st.Alter, c)
		if p.i >= len(p.toks) {
			return st, nil
		}
		if p.toks[p.i].Token != pg_query.Token_ASCII_44 {
			return Statement{}, p.errHere("expected ',' or the end of the statement, found %s", p.found())
		}
		p.i++
	}
}

// clauseEnd moves past the tokens of an expression up to the next comma
// outside parentheses (or the statement's end) and returns its offset.
func (p *stmtParser) clauseEnd() int {
	depth := 0
	for ; p.i < len(p.toks); p.i++ {
		switch p.toks[p.i].Token {
		case pg_query.Token_ASCII_40, pg_query.Token_ASCII_91:
			depth++
		case pg_query.Token_ASCII_41, pg_query.Token_ASCII_93:
			depth--
		case pg_query.Token_ASCII_44:
			if depth == 0 {
				return int(p.toks[p.i].Start)
			}
		}
	}
	return p.end
}

// checkExpr accepts one expression and nothing more.
func checkExpr(expr string) error {
	if expr == "" {
		return fmt.Errorf("the expression is missing")
	}
	tree, err := pg_query.Parse("SELECT " + expr)
	if err != nil {
		return err
	}
	if len(tree.Stmts) != 1 {
		return fmt.Errorf("not one expression")
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || len(sel.FromClause) > 0 || sel.WhereClause != nil || len(sel.GroupClause) > 0 ||
		sel.HavingClause != nil || len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.Op != pg_query.SetOperation_SETOP_NONE ||
		sel.GetTargetList()[0].GetResTarget().Name != "" {
		return fmt.Errorf("not one expression")
	}
	return nil
}

// EditSelect applies clauses in order to the select list of definition
// (a stored SELECT whose items are named visible, in order) and returns
// the edited SELECT, and the columns an ALTER clause kept (whose type
// must not change). ADD of a column that exists is a conflict, DROP or
// ALTER of one that does not is not_found, and a DROP of a column added
// earlier in the same statement cancels it.
func EditSelect(name, definition string, visible []string, clauses []AlterClause) (string, map[string]bool, error) {
	tree, err := pg_query.Parse(definition)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetSelectStmt() == nil {
		return "", nil, terr.New(terr.Validation, "transform %q: its definition cannot be edited in place; use CREATE OR REPLACE TRANSFORM", name)
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.TargetList) != len(visible) {
		return "", nil, terr.New(terr.Validation, "transform %q: ALTER TRANSFORM edits the select list of one SELECT, and this definition is not one (a set operation, or * expanded later); use CREATE OR REPLACE TRANSFORM", name)
	}
	names := append([]string(nil), visible...)
	items := sel.TargetList
	altered := map[string]bool{}
	index := func(col string) int {
		for i, n := range names {
			if n == col {
				return i
			}
		}
		return -1
	}
	for _, c := range clauses {
		i := index(c.Column)
		var node *pg_query.Node
		if c.Op != "drop" {
			et, err := pg_query.Parse("SELECT " + c.Expr)
			if err != nil {
				return "", nil, terr.Wrap(terr.Validation, err, "transform %q: %s: %v", name, c.Expr, err)
			}
			node = et.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
		}
		switch c.Op {
		case "add":
			if i >= 0 {
				return "", nil, terr.New(terr.Conflict, "transform %q already has a column %q; ALTER %s AS … changes its expression, DROP %s, ADD %s AS … replaces it", name, c.Column, c.Column, c.Column, c.Column)
			}
			items = append(items, pg_query.MakeResTargetNodeWithNameAndVal(c.Column, node, -1))
			names = append(names, c.Column)
		case "drop", "alter":
			if i < 0 {
				return "", nil, terr.New(terr.NotFound, "transform %q has no column %q; its columns are %s", name, c.Column, strings.Join(names, ", "))
			}
			if c.Op == "drop" {
				items = append(items[:i:i], items[i+1:]...)
				names = append(names[:i:i], names[i+1:]...)
				delete(altered, c.Column)
				continue
			}
			items[i] = pg_query.MakeResTargetNodeWithNameAndVal(c.Column, node, -1)
			altered[c.Column] = true
		}
	}
	if len(items) == 0 {
		return "", nil, terr.New(terr.Validation, "transform %q would have no column left; DROP TRANSFORM %s instead", name, name)
	}
	sel.TargetList = items
	out, err := deparse(tree)
	if err != nil {
		return "", nil, terr.Wrap(terr.Internal, err, "transform %q: deparse the edited definition: %v", name, err)
	}
	return out, altered, nil
}

// SameButColumns says how plan b differs from a beyond the computed
// columns ALTER TRANSFORM edits — the visible columns of a row transform
// (its hidden ones and its key unchanged), or an aggregate's projection
// of the aggregates it stores — naming what else changed ("" when
// nothing did). The query text and the visible list may differ.
func SameButColumns(a, b *Plan) string {
	if a.Shape == ShapeAggregate && a.State == nil {
		return "its outputs are the aggregates it stores" // no projection to edit
	}
	fields := func(p *Plan) map[string]json.RawMessage {
		c := *p
		c.Visible, c.Select, c.Full, c.Project = nil, "", "", nil
		if c.Shape == ShapeRow {
			c.Cols = c.Cols[len(p.Visible):] // the hidden ones only
		}
		raw, _ := json.Marshal(c)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		return m
	}
	fa, fb := fields(a), fields(b)
	var diff []string
	for k, v := range fa {
		if string(fb[k]) != string(v) {
			diff = append(diff, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	return strings.Join(diff, ", ")
}

// BaseType is a type's name without its modifier (numeric for
// numeric(12,2)).
func BaseType(t string) string {
	if i := strings.IndexByte(t, '('); i >= 0 {
		if j := strings.LastIndexByte(t, ')'); j > i {
			return strings.TrimSpace(t[:i] + t[j+1:])
		}
	}
	return t
}

// ComputedCols are the target's visible columns with their types: a row
// transform's, or an aggregate's projection.
func (p *Plan) ComputedCols() []Col {
	if p.Shape == ShapeRow {
		return p.Cols[:len(p.Visible)]
	}
	return p.Project
}

// Finished gives np, a plan of transform old's edited definition, what
// Install gave old's plan without DDL: the names of its ledger and state
// table, and the columns whose changes are detected on their text.
func Finished(ctx context.Context, db DB, old, np *Plan) error {
	if old.Ledger != nil && np.Ledger != nil {
		l := *old.Ledger
		np.Ledger = &l
	}
	if old.State != nil && np.State != nil {
		s := *old.State
		np.State = &s
	}
	return markTextCompare(ctx, db, np)
}
