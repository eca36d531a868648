package engine

// This file owns the check of ADR 0043: an owner re-derives its rows with
// each subquery evaluated against the source tables, and its dependency
// levels (ADR 0030) only wake it when what they store changes. A row whose
// answer was read while its level was behind is not covered by a future
// level write, so the apply reports its source keys to be re-derived
// again. Plan.Dependencies is recorded at define; Statements.Stale is the
// check, run in the re-derive's snapshot.

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// Dependency is one dependency level an owner joins, and what checking an
// answer against it needs.
type Dependency struct {
	// Source is the level's index in Plan.Sources.
	Source int `json:"source"`
	// Query is the level's query over the base tables: what its target
	// equals once it has converged.
	Query string `json:"query"`
	// On is the owner's join condition over the level with the level's
	// columns read from a row of Query (dependRow).
	On string `json:"on"`
	// Cols are the level's output columns.
	Cols []string `json:"cols"`
}

// dependRow is the alias of a row of a dependency level's query in the
// check.
const dependRow = "__trellis_dq"

// dependencies lists the dependency levels among the query's bound levels,
// by the index of the source each stands for.
func (q *Query) dependencies(sources []Source) ([]Dependency, error) {
	var out []Dependency
	for i := range sources {
		l := q.levelAt(i)
		if l == nil || !l.Dependency {
			continue
		}
		ref := sources[i].Ref
		on, err := q.joinCondition(ref)
		if err != nil {
			return nil, err
		}
		d := Dependency{Source: i, Query: l.SQL, On: on}
		for _, t := range l.Query.Targets {
			d.Cols = append(d.Cols, t.Name)
		}
		out = append(out, d)
	}
	return out, nil
}

// joinCondition is the ON condition of the join that reads the table
// named ref, its references to ref read from dependRow instead.
func (q *Query) joinCondition(ref string) (string, error) {
	var quals *pg_query.Node
	for _, it := range q.from {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false
			}
			j, ok := m.(*pg_query.JoinExpr)
			if !ok {
				return true
			}
			if rv := j.Rarg.GetRangeVar(); rv != nil && rv.Alias != nil && rv.Alias.Aliasname == ref && j.Quals != nil {
				quals = j.Quals
				return false
			}
			return true
		})
	}
	if quals == nil {
		return "", fmt.Errorf("the join condition of dependency level %s is not in the FROM clause", ref)
	}
	on := replaceNodes(proto.Clone(quals).(*pg_query.Node), func(n *pg_query.Node) *pg_query.Node {
		cr := n.GetColumnRef()
		if cr == nil || len(cr.Fields) != 2 || cr.Fields[0].GetString_().GetSval() != ref {
			return nil
		}
		c := proto.Clone(cr).(*pg_query.ColumnRef)
		c.Fields[0] = pg_query.MakeStrNode(dependRow)
		return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: c}}
	})
	return deparseExpr(on)
}

// staleSQL is the check of a plan with dependencies: rows (source index,
// key as text[]) of the distinct keys of the owner's own sources — every
// source but its dependency levels — of the rows in scope for which some
// dependency level stores a row its query no longer gives, or stores none
// where its query gives one. A dependency level's key is left out: the
// owner's dirty set would re-derive every owner row joined to that level
// row, not the rows flagged, and the flagged rows are named by their own
// sources' keys already (the level joins add no row). A key with a NULL
// column (a NULL-extended source) is left out too: a dirty key is text
// values. The rows are the FROM's, not the WHERE's: a row a subquery
// filters out has an answer too.
//
// The scope's branches (one per source, scopeBranches) only project what
// the check reads — the keys, the owner's columns each join condition
// names, the level's stored values — and the check's subqueries run once
// over their union: written inside every branch they were planned once
// per branch, which cost TPC-H Q21 (six branches, two levels) more in
// planning than the re-derive itself.
func staleSQL(p *Plan) string {
	if len(p.Dependencies) == 0 || !p.Multi() || plant.Active(plant.SubqueryAnswerUnchecked) {
		return ""
	}
	level := map[int]bool{}
	for _, d := range p.Dependencies {
		level[d.Source] = true
	}
	var sel, keys []string
	for i := range p.Sources {
		if level[i] {
			continue
		}
		var whole, text []string
		for _, r := range sourceKeyRefs(p, i) {
			whole = append(whole, r+" IS NOT NULL")
			text = append(text, r+"::text")
		}
		name := fmt.Sprintf("__d%d", i)
		sel = append(sel, "CASE WHEN "+strings.Join(whole, " AND ")+" THEN ARRAY["+strings.Join(text, ", ")+"] END AS "+name)
		keys = append(keys, fmt.Sprintf("(%d, __x.%s)", i, name))
	}
	checked := func(d Dependency) bool {
		// A narrowed scalar is read as the level's value, not the
		// subquery (narrow.go): what the owner read is what its level
		// stored.
		return !slices.ContainsFunc(p.Narrow, func(nw PlanNarrow) bool { return nw.Dep == d.Source })
	}
	// The join conditions over the union; when one cannot be rewritten
	// (a column not named as ref.col), the check is written inside every
	// branch instead.
	outer := map[string]string{}
	ons := make([]string, len(p.Dependencies))
	var reads []string
	inBranch := false
	for n, d := range p.Dependencies {
		if !checked(d) {
			continue
		}
		on, r, ok := overUnion(d.On, outer)
		if !ok {
			inBranch = true
			break
		}
		ons[n], reads = on, append(reads, r...)
	}
	var flags []string
	for n, d := range p.Dependencies {
		if !checked(d) {
			continue
		}
		ref := ident(p.Sources[d.Source].Ref)
		present, on := sourceKeyRefs(p, d.Source)[0]+" IS NOT NULL", d.On
		if !inBranch {
			sel = append(sel, fmt.Sprintf("(%s) AS __p%d", present, n))
			present, on = fmt.Sprintf("__x.__p%d", n), ons[n]
		}
		rows := "SELECT 1 FROM (" + d.Query + ") " + dependRow + " WHERE (" + on + ")"
		var mine, theirs []string
		for k, c := range d.Cols {
			// As text, as the ledgers compare values: a type without an
			// equality operator (json, and arrays of it in a fingerprint)
			// compares too.
			stored := "(" + ref + "." + ident(c) + ")::text"
			if !inBranch {
				sel = append(sel, fmt.Sprintf("%s AS __m%d_%d", stored, n, k))
				stored = fmt.Sprintf("__x.__m%d_%d", n, k)
			}
			mine = append(mine, stored)
			theirs = append(theirs, "("+dependRow+"."+ident(c)+")::text")
		}
		same := "ROW(" + strings.Join(theirs, ", ") + ") IS NOT DISTINCT FROM ROW(" + strings.Join(mine, ", ") + ")"
		flags = append(flags, "CASE WHEN "+present+" THEN NOT EXISTS ("+rows+" AND "+same+") ELSE EXISTS ("+rows+") END")
	}
	if len(flags) == 0 || len(keys) == 0 {
		return ""
	}
	stale := strings.Join(flags, " OR ")
	if inBranch {
		sel, stale = append(sel, "("+stale+") AS __stale"), "__x.__stale"
	}
	return "SELECT DISTINCT __k.s, __k.k FROM (" + scopeBranches(p, p.From, "true", append(sel, reads...), allSources(p)) +
		") __x CROSS JOIN LATERAL (VALUES " + strings.Join(keys, ", ") + ") __k(s, k) WHERE (" + stale + ") AND __k.k IS NOT NULL"
}

// overUnion rewrites a dependency's join condition to read the owner's
// columns from the union of scope branches (__x): each ref.col it names
// gets an alias in outer (shared across dependencies), and reads lists
// the branch items that project the new ones. ok is false when the
// condition names a column other than as ref.col.
func overUnion(on string, outer map[string]string) (string, []string, bool) {
	tree, err := pg_query.Parse("SELECT " + on)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetSelectStmt() == nil {
		return "", nil, false
	}
	expr := tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
	var reads []string
	ok := true
	expr = replaceNodes(expr, func(n *pg_query.Node) *pg_query.Node {
		if n.GetSubLink() != nil {
			ok = false // a subquery in the join condition: keep the per-branch form
			return nil
		}
		cr := n.GetColumnRef()
		if cr == nil {
			return nil
		}
		if len(cr.Fields) != 2 || cr.Fields[0].GetString_() == nil || cr.Fields[1].GetString_() == nil {
			ok = false
			return nil
		}
		ref, col := cr.Fields[0].GetString_().Sval, cr.Fields[1].GetString_().Sval
		if ref == dependRow {
			return nil
		}
		qualified := ident(ref) + "." + ident(col)
		alias, seen := outer[qualified]
		if !seen {
			alias = fmt.Sprintf("__o%d", len(outer))
			outer[qualified] = alias
			reads = append(reads, qualified+" AS "+alias)
		}
		return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
			Fields: []*pg_query.Node{pg_query.MakeStrNode("__x"), pg_query.MakeStrNode(alias)}}}}
	})
	if !ok {
		return "", nil, false
	}
	text, err := deparseExpr(expr)
	if err != nil {
		return "", nil, false
	}
	return text, reads, true
}
