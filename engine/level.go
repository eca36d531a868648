package engine

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Inner levels (ADR 0018): a derived table in FROM that aggregates — GROUP
// BY, an aggregate call, HAVING or DISTINCT — cannot be flattened, since
// its rows are groups. It is kept as a transform of its own whose target
// the outer query reads in its place: a chain the outer definition owns.
// The parser records the level and puts a placeholder table in the outer
// FROM tree; Apply creates the level and binds the placeholder to its
// target before planning the outer query.

// SurrogateCol is the hidden key column of a level's target whose group
// key may be NULL (or that has no GROUP BY): a chain reads a target by a
// NOT NULL key, and the group columns cannot be one.
const SurrogateCol = "__id"

// positionRe matches the position an error sentence ends a part with.
var positionRe = regexp.MustCompile(` \(line \d+, column \d+\)`)

// Level is a derived table in FROM kept as an inner transform.
type Level struct {
	// Alias is the derived table's alias ("" when it has none): the name
	// the outer query reads the level's target by.
	Alias string
	// Query is the derived table's SELECT, its output columns renamed by
	// the alias's column list.
	Query *Query
	// Table is the index in the outer Query.Tables of the table that takes
	// the derived table's place.
	Table int
	// Target is the level's target once bound, SQL its query over the base
	// tables (for the owner's Plan.Full).
	Target Rel
	SQL    string
	// SameAs is an earlier level of the query with the same query (a CTE
	// read twice): this one is no transform of its own, it reads that
	// level's target (Apply binds it to SameAs's).
	SameAs *Level
	// Dependency: the level stands for a subquery in an expression (ADR
	// 0030); the owner joins it for lineage only and checks its answers
	// against it (Plan.Dependencies, ADR 0043).
	Dependency bool

	rv   *pg_query.RangeVar // the placeholder in the outer FROM tree
	text string             // its query as deparsed, and the limits its reader keeps (ranklimit.go), to find a SameAs
}

// placeholderName names the table that stands for level k until Apply
// binds it; the "__" prefix keeps it out of every user name space.
func placeholderName(k int) string { return fmt.Sprintf("__trellis_level_%d", k) }

// level parses an aggregating derived table as a query of its own and
// returns the table that takes its place in the outer FROM tree.
func (c *selectChecker) level(rs *pg_query.RangeSubselect, inner *pg_query.SelectStmt, alias, what string) (*pg_query.Node, error) {
	sub := proto.Clone(inner).(*pg_query.SelectStmt)
	var names []string
	if rs.Alias != nil {
		for _, cn := range rs.Alias.Colnames {
			if s := cn.GetString_(); s != nil {
				names = append(names, s.Sval)
			}
		}
	}
	if len(names) > len(sub.TargetList) {
		return nil, c.errf(-1, "%s has %d columns but its alias names %d; name at most as many columns as the subquery selects", what, len(sub.TargetList), len(names))
	}
	// The outer query reads the level's target by the derived table's
	// column names: they become the level's output names.
	for i, n := range names {
		rt := sub.TargetList[i].GetResTarget()
		if rt == nil {
			return nil, c.errf(-1, "%s: select list item %d: unexpected entry", what, i+1)
		}
		rt.Name = n
	}
	text, err := deparseSelect(sub)
	if err != nil {
		return nil, terr.Wrap(terr.Validation, err, "%s: %s cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", c.label, what, err)
	}
	limits := c.rankLimits[alias]
	key := text + rankLimitKey(limits)
	if l := c.sameLevel(key); l != nil {
		return c.placeLevel(&Level{Alias: alias, Query: l.Query, SameAs: l, text: key}, alias), nil
	}
	q, err := parseSelect(c.label+": "+what, text, 0, len(text), c.qualified)
	if err != nil {
		// Positions would count in the subquery as deparsed, not in the
		// script: the sentence names the subquery instead.
		var te *terr.Error
		if errors.As(err, &te) {
			return nil, &terr.Error{Code: te.Code, Msg: positionRe.ReplaceAllString(te.Msg, ""), Err: te.Err}
		}
		return nil, err
	}
	if q.Expand {
		// The outer query's * is expanded before its levels are read.
		return nil, c.errf(-1, "%s selects *; list its columns by name", what)
	}
	limitWindow(q, limits)
	return c.placeLevel(&Level{Alias: alias, Query: q, text: key}, alias), nil
}

// sameLevel is an earlier level of the query with the same query text:
// the same rows read again (a CTE read twice) are one level, which both
// places read.
func (c *selectChecker) sameLevel(text string) *Level {
	for _, l := range c.levels {
		if l.text == text && l.SameAs == nil {
			return l
		}
	}
	return nil
}

// placeLevel registers l and returns the placeholder table that takes its
// place in the FROM tree, under alias.
func (c *selectChecker) placeLevel(l *Level, alias string) *pg_query.Node {
	rv := &pg_query.RangeVar{Relname: placeholderName(len(c.levels)), Inh: true, Relpersistence: "p", Location: -1}
	if alias != "" {
		rv.Alias = &pg_query.Alias{Aliasname: alias}
	}
	l.rv = rv
	c.levels = append(c.levels, l)
	return &pg_query.Node{Node: &pg_query.Node_RangeVar{RangeVar: rv}}
}

// aggregates reports whether a derived table's SELECT groups its rows:
// such a subquery is kept as a level instead of being flattened.
func aggregates(sel *pg_query.SelectStmt) bool {
	return len(sel.GroupClause) > 0 || sel.HavingClause != nil || hasAggregate(sel) || len(sel.DistinctClause) > 0
}

// BindLevel places level k's target in the outer query (its table in the
// FROM tree, Tables and the rewritten text); sql is the level's query over
// the base tables.
func (q *Query) BindLevel(k int, target Rel, sql string) error {
	l := q.Levels[k]
	l.Target, l.SQL = target, sql
	l.rv.Schemaname, l.rv.Relname = target.Schema, target.Name
	q.Tables[l.Table].Schema, q.Tables[l.Table].Name = target.Schema, target.Name
	if q.tree != nil {
		out, err := deparse(q.tree)
		if err != nil {
			return fmt.Errorf("deparse the query bound to its levels: %w", err)
		}
		q.Rewritten = out
	}
	return nil
}

// levelAt is the bound level whose table is Tables[i], or nil.
func (q *Query) levelAt(i int) *Level {
	for _, l := range q.Levels {
		if l.Table == i && l.Target.Name != "" {
			return l
		}
	}
	return nil
}

// fullFrom renders the FROM clause with each bound level's table replaced
// by its query as a derived table under the same alias: the owner's query
// over the base tables (Plan.Full).
func (q *Query) fullFrom(sources []Source) (string, error) {
	if len(sources) == 1 && len(q.Generated) == 0 {
		l := q.levelAt(0)
		if l == nil {
			return sources[0].From, nil
		}
		return "(" + l.SQL + ") AS " + ident(sources[0].Ref), nil
	}
	items := make([]*pg_query.Node, len(q.from))
	i := 0
	for k, it := range q.from {
		items[k] = proto.Clone(it).(*pg_query.Node)
		var err error
		items[k] = replaceNodes(items[k], func(n *pg_query.Node) *pg_query.Node {
			if n.GetSubLink() != nil {
				return n // a subquery in ON names its own tables
			}
			rv := n.GetRangeVar()
			if rv == nil {
				return nil
			}
			src, l := sources[i], q.levelAt(i)
			i++
			if l == nil {
				rv.Schemaname = src.Schema
				return n
			}
			tree, perr := pg_query.Parse(l.SQL)
			if perr != nil || len(tree.Stmts) != 1 {
				err = fmt.Errorf("parse the query of level %s: %v", l.Target.Ident(), perr)
				return n
			}
			return &pg_query.Node{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
				Subquery: tree.Stmts[0].Stmt, Alias: &pg_query.Alias{Aliasname: src.Ref}}}}
		})
		if err != nil {
			return "", err
		}
	}
	out, err := deparseSelect(&pg_query.SelectStmt{FromClause: items})
	if err != nil {
		return "", fmt.Errorf("deparse FROM: %w", err)
	}
	sql, ok := strings.CutPrefix(out, "SELECT FROM ")
	if !ok {
		return "", fmt.Errorf("deparse FROM: unexpected deparser output %q", out)
	}
	return sql, nil
}
