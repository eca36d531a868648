package engine

// generated.go owns the FROM items that read no table (ADR 0034):
// functions in FROM (unnest, jsonb_each, generate_series, ROWS FROM …,
// LATERAL or not) and VALUES lists — "generated items". Such an item
// never changes by itself: its rows are a function of the source rows its
// arguments read, so they are re-derived with those rows. But it makes
// many rows of one lineage, so each item adds an ordinal to the stored
// rows' identity: WITH ORDINALITY for a function (added under a hidden
// name when the user did not write it), the row's position for a VALUES
// list. An immutable function numbers the same rows the same way on
// every run, so the identity is deterministic.
//
//	FROM p, LATERAL unnest(p.tags) t(tag)
//	  → FROM p, LATERAL unnest(p.tags) WITH ORDINALITY t(tag, __trellis_o)
//	FROM p, LATERAL jsonb_to_recordset(p.doc) x(a integer, b text)
//	  → FROM p, LATERAL ROWS FROM(jsonb_to_recordset(p.doc) AS (a integer, b text))
//	        WITH ORDINALITY x(a, b, __trellis_o)
//	JOIN ( VALUES (1,'a'), (2,'b')) v(id, name)
//	  → JOIN ( VALUES (1,'a',1), (2,'b',2)) v(id, name, __trellis_o)
//
// It runs on the text PostgreSQL qualified, where every function item
// has its whole column alias list and every reference names its item.

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// ordinalColumn names the ordinal the engine adds to a generated item.
const ordinalColumn = "__trellis_o"

// Generated is a FROM item that reads no table: its name in the query,
// the column holding each row's ordinal, and whether an outer join may
// NULL-extend it.
type Generated struct {
	Ref      string
	Column   string
	Nullable bool
}

// noTableRefusal refuses a query whose FROM holds generated items only.
const noTableRefusal = "FROM: the query reads no table, only functions or VALUES lists, so no change could ever reach it; a transform is kept from source tables — join one (FROM t CROSS JOIN generate_series(1, 3) AS g(n)), or keep constant rows as a view"

// readsNoTable reports whether sel's FROM has generated items and no
// table anywhere (its derived tables and CTEs, inlined, included).
func readsNoTable(sel *pg_query.SelectStmt) bool {
	if isSetOp(sel) || len(sel.FromClause) == 0 {
		return false
	}
	gens := false
	for _, it := range sel.FromClause {
		if hasTable(it) {
			return false
		}
		gens = gens || readsGenerated(it)
	}
	return gens
}

// hasTable reports whether a FROM item reads a table (in its joins,
// derived tables and inlined CTEs; not in subqueries in expressions).
func hasTable(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SubLink:
			return false // a subquery's tables are not FROM items
		case *pg_query.RangeVar:
			found = true
		case *pg_query.RangeFunction:
			// A recursive CTE's reference reads its terms' tables.
			found = recursiveCall(x) != ""
		}
		return !found
	})
	return found
}

// isValues reports whether a derived table is a VALUES list.
func isValues(rs *pg_query.RangeSubselect) bool {
	sub := rs.GetSubquery().GetSelectStmt()
	return sub != nil && len(sub.ValuesLists) > 0
}

// isGenerated reports whether a FROM item is a function or a VALUES list.
func isGenerated(n *pg_query.Node) bool {
	if rf := n.GetRangeFunction(); rf != nil {
		return recursiveCall(rf) == "" // a recursive CTE's reference is a level
	}
	rs := n.GetRangeSubselect()
	return rs != nil && isValues(rs)
}

// readsGenerated reports whether any FROM clause of the statement n
// holds a generated item: such a query is kept on the text PostgreSQL
// qualified (its function items then carry their column names).
func readsGenerated(n *pg_query.Node) bool {
	found := false
	walk(n.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.RangeFunction:
			found = recursiveCall(x) == "" // a recursive CTE's reference is a level
		case *pg_query.RangeSubselect:
			found = found || isValues(x)
		}
		return !found
	})
	return found
}

// genAlias is a generated item's name, quoted, for a sentence.
func genAlias(n *pg_query.Node) string {
	var a *pg_query.Alias
	if rf := n.GetRangeFunction(); rf != nil {
		a = rf.Alias
	} else if rs := n.GetRangeSubselect(); rs != nil {
		a = rs.Alias
	}
	if a == nil {
		return "without an alias"
	}
	return quoteIdents([]string{a.Aliasname})
}

// generatedItem registers a function or VALUES item of FROM, gives it its
// ordinal (the file comment) and returns its cover: none, it holds no
// source.
func (c *selectChecker) generatedItem(n *pg_query.Node) ([]int, error) {
	what := "FROM: the function " + genAlias(n)
	if n.GetRangeSubselect() != nil {
		what = "FROM: the VALUES list " + genAlias(n)
	}
	if hasSublinks(n) {
		return nil, c.errf(-1, "%s reads a subquery; a function or VALUES list in FROM may read only the columns of the items before it — join the subquery's tables instead", what)
	}
	if err := c.checkVolatile(n, what); err != nil {
		return nil, err
	}
	var g Generated
	if rf := n.GetRangeFunction(); rf != nil {
		if rf.Alias == nil || len(rf.Alias.Colnames) == 0 && len(rf.Coldeflist) == 0 {
			return nil, c.errf(-1, "%s has no column names; name it and its columns (FROM unnest(t.a) AS u(x))", what)
		}
		g.Ref = rf.Alias.Aliasname
		switch {
		case rf.Ordinality:
			// The user's own ordinal: the last column.
			g.Column = rf.Alias.Colnames[len(rf.Alias.Colnames)-1].GetString_().GetSval()
		case len(rf.Coldeflist) > 0:
			// PostgreSQL refuses WITH ORDINALITY beside a column
			// definition list; inside ROWS FROM it is the same rows.
			if len(rf.Functions) != 1 || rf.Functions[0].GetList() == nil || len(rf.Functions[0].GetList().Items) != 2 {
				return nil, c.errf(-1, "%s has an unexpected form; write it as ROWS FROM (f(…) AS (a int, …)) AS x(a, …)", what)
			}
			rf.Functions[0].GetList().Items[1] = &pg_query.Node{Node: &pg_query.Node_List{List: &pg_query.List{Items: rf.Coldeflist}}}
			rf.Alias.Colnames = nil
			for _, cd := range rf.Coldeflist {
				rf.Alias.Colnames = append(rf.Alias.Colnames, pg_query.MakeStrNode(cd.GetColumnDef().GetColname()))
			}
			rf.Coldeflist, rf.IsRowsfrom = nil, true
			fallthrough
		default:
			rf.Ordinality = true
			rf.Alias.Colnames = append(rf.Alias.Colnames, pg_query.MakeStrNode(ordinalColumn))
			g.Column = ordinalColumn
		}
	} else {
		rs := n.GetRangeSubselect()
		sub := rs.Subquery.GetSelectStmt()
		if rs.Alias == nil {
			return nil, c.errf(-1, "%s has no alias; name it (JOIN (VALUES …) AS v(a, b) ON …)", what)
		}
		width := len(sub.ValuesLists[0].GetList().GetItems())
		for k := len(rs.Alias.Colnames); k < width; k++ {
			rs.Alias.Colnames = append(rs.Alias.Colnames, pg_query.MakeStrNode(fmt.Sprintf("column%d", k+1)))
		}
		rs.Alias.Colnames = append(rs.Alias.Colnames, pg_query.MakeStrNode(ordinalColumn))
		for i, row := range sub.ValuesLists {
			l := row.GetList()
			l.Items = append(l.Items, &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{
				Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(i + 1)}}, Location: -1}}})
		}
		g.Ref, g.Column = rs.Alias.Aliasname, ordinalColumn
	}
	c.generated = append(c.generated, g)
	return []int{}, nil
}

// generatedRefs are the column references of the arguments of the
// generated items in n that can remove rows of the items they read: not
// those on the NULL-extended side of an outer join inside n, whose rows
// the join keeps anyway. They filter like a condition of the join they
// sit in (an outer join below whose NULL-extended side they read needs
// its matches mirrored, ADR 0010).
func generatedRefs(n *pg_query.Node) []ColumnName {
	switch x := n.Node.(type) {
	case *pg_query.Node_RangeFunction:
		var out []ColumnName
		for _, f := range x.RangeFunction.Functions {
			out = append(out, columnNames(f)...)
		}
		return out
	case *pg_query.Node_RangeSubselect:
		if isValues(x.RangeSubselect) {
			return columnNames(x.RangeSubselect.Subquery)
		}
	case *pg_query.Node_JoinExpr:
		j := x.JoinExpr
		var out []ColumnName
		if j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_LEFT {
			out = append(out, generatedRefs(j.Larg)...)
		}
		if j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_RIGHT {
			out = append(out, generatedRefs(j.Rarg)...)
		}
		return out
	}
	return nil
}

// crossJoin is a JOIN b without a condition, as a comma list joins.
func crossJoin(a, b *pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_JoinExpr{JoinExpr: &pg_query.JoinExpr{Jointype: pg_query.JoinType_JOIN_INNER, Larg: a, Rarg: b}}}
}

// plainJoin: an inner or left join whose condition is an ON (USING and
// NATURAL name columns, which a wider left side could make ambiguous).
func plainJoin(j *pg_query.JoinExpr) bool {
	return (j.Jointype == pg_query.JoinType_JOIN_INNER || j.Jointype == pg_query.JoinType_JOIN_LEFT) &&
		len(j.UsingClause) == 0 && !j.IsNatural
}

// headsOuterJoin reports whether n is an outer join (through inner and
// left joins down its left side) whose leftmost item is a generated one:
// a preserved side with no table of its own.
func headsOuterJoin(n *pg_query.Node) bool {
	left := false
	for {
		j := n.GetJoinExpr()
		if j == nil {
			return left && isGenerated(n)
		}
		if !plainJoin(j) {
			return false
		}
		left = left || j.Jointype == pg_query.JoinType_JOIN_LEFT
		n = j.Larg
	}
}

// graft puts left at the leftmost leaf of item, through its inner and left
// joins: A × (B ⟕ C ON x) is (A × B) ⟕ C ON x, whatever x reads, since
// a cross product distributes over the left join (and the inner one).
func graft(left, item *pg_query.Node) *pg_query.Node {
	if j := item.GetJoinExpr(); j != nil && plainJoin(j) {
		j.Larg = graft(left, j.Larg)
		return item
	}
	return crossJoin(left, item)
}

// reassociate rewrites the FROM items so that a function that reads the
// items before it and heads an outer join — FROM p, unnest(p.tags) t
// LEFT JOIN i ON …, where the comma binds loosest — has those items on
// the outer join's preserved side: (p × unnest(…) t) LEFT JOIN i ON ….
// The rows are the same; the preserved side then holds a source whose
// lineage a change on the NULL-extended side widens (ADR 0010).
func reassociate(from []*pg_query.Node) []*pg_query.Node {
	for i := range from {
		from[i] = reassociateItem(from[i])
	}
	fold := false
	for _, it := range from[1:] {
		fold = fold || headsOuterJoin(it)
	}
	if !fold {
		return from
	}
	left := from[0]
	for _, it := range from[1:] {
		left = graft(left, it)
	}
	return []*pg_query.Node{left}
}

func reassociateItem(n *pg_query.Node) *pg_query.Node {
	j := n.GetJoinExpr()
	if j == nil {
		return n
	}
	j.Larg, j.Rarg = reassociateItem(j.Larg), reassociateItem(j.Rarg)
	if j.Jointype == pg_query.JoinType_JOIN_INNER && j.Quals == nil && plainJoin(j) && j.Alias == nil && headsOuterJoin(j.Rarg) {
		return graft(j.Larg, j.Rarg)
	}
	return n
}

// ordinalCols are the stored columns of the generated items' ordinals
// (ADR 0034), part of every stored row's identity.
func ordinalCols(gens []Generated) []Col {
	var out []Col
	for k, g := range gens {
		out = append(out, Col{Name: fmt.Sprintf("__o%d", k), Type: "bigint", NotNull: !g.Nullable,
			Expr: pgx.Identifier{g.Ref, g.Column}.Sanitize() + "::bigint"})
	}
	return out
}

// funcIDs finds the function ids in a stored rule's text; colTypes a
// function item's column definition types.
var (
	funcIDs  = regexp.MustCompile(`:(?:funcid|opfuncid) (\d+)`)
	colTypes = regexp.MustCompile(`:funccoltypes \(o((?: \d+)*)\)`)
)

// recordFuncs make rows from JSON by the column definition list's types:
// PostgreSQL marks them stable because some types' text input is
// (timestamptz reads TimeZone, date DateStyle), so they are as immutable
// as the input functions of the types they are given.
var recordFuncs = map[string]bool{"jsonb_to_record": true, "jsonb_to_recordset": true, "json_to_record": true, "json_to_recordset": true}

// checkGeneratedVolatility refuses a function in FROM that is not
// immutable, or one whose arguments call one: its rows would change
// between re-derives without any source change. PostgreSQL records no
// dependency on a built-in, so the functions are read from the rule of
// a throwaway view over the FROM clause: every function and operator of
// its function items, as resolved.
func checkGeneratedVolatility(ctx context.Context, db DB, name, from string) error {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_gen`); err != nil {
		return err
	}
	defer db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_gen`) //nolint:errcheck
	if _, err := db.Exec(ctx, `CREATE TEMPORARY VIEW trellis_gen_view AS SELECT 1 FROM `+from); err != nil {
		return queryError(name, err)
	}
	var rule string
	if err := db.QueryRow(ctx, `SELECT ev_action::text FROM pg_rewrite WHERE ev_class = 'pg_temp.trellis_gen_view'::regclass`).Scan(&rule); err != nil {
		return fmt.Errorf("transform %q: read the functions in FROM: %w", name, err)
	}
	var bad []string
	for _, block := range nodeBlocks(rule, "{RANGETBLFUNCTION") {
		var ids, types []int64
		for _, m := range funcIDs.FindAllStringSubmatch(block, -1) {
			ids = append(ids, atoi(m[1]))
		}
		for _, m := range colTypes.FindAllStringSubmatch(block, -1) {
			for _, f := range strings.Fields(m[1]) {
				types = append(types, atoi(f))
			}
		}
		if len(ids) == 0 {
			continue
		}
		rows, err := db.Query(ctx, `SELECT p.oid::regprocedure::text, p.proname::text, p.provolatile::text,
			  (SELECT coalesce(bool_and(i.provolatile = 'i'), true) FROM unnest($2::oid[]) AS c(t)
			     JOIN pg_type ty ON ty.oid = c.t
			     LEFT JOIN pg_type el ON el.oid = ty.typelem AND ty.typcategory = 'A'
			     JOIN pg_proc i ON i.oid = coalesce(el.typinput, ty.typinput))
			FROM pg_proc p WHERE p.oid = ANY ($1::oid[]) AND p.provolatile <> 'i' ORDER BY 1`, ids, types)
		if err != nil {
			return fmt.Errorf("transform %q: check the functions in FROM: %w", name, err)
		}
		for rows.Next() {
			var fn, proname, vol string
			var inputsImmutable bool
			if err := rows.Scan(&fn, &proname, &vol, &inputsImmutable); err != nil {
				rows.Close()
				return err
			}
			if recordFuncs[proname] && vol == "s" && inputsImmutable {
				continue // its columns' types read their text immutably
			}
			bad = append(bad, fn+map[bool]string{true: " (volatile)", false: " (stable)"}[vol == "v"])
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		return terr.New(terr.Validation, "transform %q: FROM calls %s in a function item; its rows could change between re-derives with no source change, so only immutable functions may make rows in FROM — over timestamptz, name the time zone (generate_series(timezone('UTC', a), timezone('UTC', b), interval '1 day') is immutable); jsonb_to_recordset is kept when its columns' types read text immutably (int, numeric, text, bool, jsonb, not date or timestamptz: read those as text and convert them in the select list); or keep the rows in a table and join it",
			name, strings.Join(bad, ", "))
	}
	return nil
}

// atoi reads digits a pattern matched.
func atoi(s string) int64 {
	var n int64
	for _, r := range s {
		n = n*10 + int64(r-'0')
	}
	return n
}

// nodeBlocks are the balanced {…} blocks of a stored node tree's text
// that begin with open.
func nodeBlocks(text, open string) []string {
	var out []string
	for i := strings.Index(text, open); i >= 0; {
		depth, end := 0, len(text)
		for k := i; k < len(text); k++ {
			switch text[k] {
			case '\\':
				k++ // an escaped character in a constant
			case '{':
				depth++
			case '}':
				depth--
			}
			if depth == 0 {
				end = k + 1
				break
			}
		}
		out = append(out, text[i:end])
		next := strings.Index(text[end:], open)
		if next < 0 {
			break
		}
		i = end + next
	}
	return out
}
