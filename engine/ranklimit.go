package engine

// ranklimit.go owns top-K levels that hold K rows (ADR 0038 §5). A top-K,
// DISTINCT ON, a LATERAL top-K and a filter on row_number() read a window
// query as a level and keep its rows ranked within a limit:
//
//	SELECT … FROM (SELECT …, row_number() OVER (ORDER BY x DESC, id) AS rn FROM t) w
//	WHERE w.rn <= 10
//
// The level needs no row ranked beyond the limit: such a row is after every
// row the reader keeps, so its change moves none of theirs (a delete, an
// update that stays beyond, a move to another partition); only a change
// that reaches the kept rows matters, and that re-derives its partition
// (the rows where it is now, and where the target stored it). So the level
// holds the rows ranked within the limit (PlanWindow.Limit), its re-derive
// filters the window's rows (… WHERE rn <= 10 around the window query),
// and PostgreSQL's run condition stops the window there: over an index on
// the window's order, a partition's re-derive reads its first K rows, not
// all of them. A delete inside the top K re-derives the partition and the
// next row moves in, read from the index.

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// WindowLimit is the most rows per partition a window level keeps: those
// whose column Col (a row_number, rank or dense_rank) is at most Max.
type WindowLimit struct {
	Col string `json:"col"`
	Max int64  `json:"max"`
}

// rankingFuncs are the window functions whose value for a row depends only
// on the rows ordered before it in its partition.
var rankingFuncs = map[string]bool{"row_number": true, "rank": true, "dense_rank": true}

// rankLimits finds the filters on derived tables' columns that keep rows
// ranked within a limit — alias.col <= N, < N, = N, BETWEEN m AND N — in
// sel's WHERE and in the ON of the joins that filter the derived table's
// rows (it is their inner side, or the NULL-extended side of a LEFT or
// RIGHT join): the least limit per derived table and column.
func rankLimits(sel *pg_query.SelectStmt) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	take := func(cond *pg_query.Node, aliases map[string]bool) {
		for _, cj := range conjuncts(cond) {
			alias, col, n, ok := rankFilter(cj)
			if !ok || aliases != nil && !aliases[alias] {
				continue
			}
			if out[alias] == nil {
				out[alias] = map[string]int64{}
			}
			if m, seen := out[alias][col]; !seen || n < m {
				out[alias][col] = n
			}
		}
	}
	take(sel.WhereClause, nil)
	for _, it := range sel.FromClause {
		walk(it.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.JoinExpr:
				filtered := map[string]bool{}
				side := func(n *pg_query.Node, filters bool) {
					if rs := n.GetRangeSubselect(); rs != nil && filters && rs.Alias != nil {
						filtered[rs.Alias.Aliasname] = true
					}
				}
				inner := x.Jointype == pg_query.JoinType_JOIN_INNER
				side(x.Larg, inner || x.Jointype == pg_query.JoinType_JOIN_RIGHT)
				side(x.Rarg, inner || x.Jointype == pg_query.JoinType_JOIN_LEFT)
				if len(filtered) > 0 && x.Quals != nil {
					take(x.Quals, filtered)
				}
			case *pg_query.RangeSubselect, *pg_query.SubLink:
				return false
			}
			return true
		})
	}
	return out
}

// rankFilter reads a condition alias.col <= N (or < N, = N, N >= alias.col,
// alias.col BETWEEN m AND N) with N an integer: the rows it keeps are
// ranked at most n.
func rankFilter(n *pg_query.Node) (alias, col string, max int64, ok bool) {
	ae := n.GetAExpr()
	if ae == nil {
		return "", "", 0, false
	}
	ref := func(x *pg_query.Node) (string, string, bool) {
		cr := x.GetColumnRef()
		if cr == nil || len(cr.Fields) != 2 || hasStar(cr) {
			return "", "", false
		}
		return cr.Fields[0].GetString_().GetSval(), cr.Fields[1].GetString_().GetSval(), true
	}
	num := func(x *pg_query.Node) (int64, bool) {
		ac := x.GetAConst()
		if ac == nil || ac.GetIval() == nil {
			return 0, false
		}
		return int64(ac.GetIval().Ival), true
	}
	if ae.Kind == pg_query.A_Expr_Kind_AEXPR_BETWEEN {
		items := ae.Rexpr.GetList().GetItems()
		a, c, rok := ref(ae.Lexpr)
		if len(items) == 2 && rok {
			if v, nok := num(items[1]); nok {
				return a, c, v, true
			}
		}
		return "", "", 0, false
	}
	if ae.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(ae.Name) != 1 || ae.Lexpr == nil || ae.Rexpr == nil {
		return "", "", 0, false
	}
	op := ae.Name[0].GetString_().GetSval()
	l, r := ae.Lexpr, ae.Rexpr
	if _, _, isRef := ref(l); !isRef {
		// N >= alias.col is alias.col <= N.
		l, r = r, l
		op = map[string]string{">=": "<=", ">": "<", "=": "="}[op]
	}
	a, c, rok := ref(l)
	v, nok := num(r)
	if !rok || !nok {
		return "", "", 0, false
	}
	switch op {
	case "<=", "=":
		return a, c, v, true
	case "<":
		return a, c, v - 1, true
	}
	return "", "", 0, false
}

// rankLimitKey is what a level's limits add to its text, so that two
// readers of the same query that keep different rows are two levels.
func rankLimitKey(limits map[string]int64) string {
	if len(limits) == 0 {
		return ""
	}
	var parts []string
	for col, n := range limits {
		parts = append(parts, fmt.Sprintf("%s<=%d", col, n))
	}
	slices.Sort(parts)
	return " /* " + strings.Join(parts, ", ") + " */"
}

// limitWindow gives q, a level its reader filters by limits (column →
// most rank), the limit of its one window call when that is a ranking
// function whose output the reader filters.
func limitWindow(q *Query, limits map[string]int64) {
	if q.Window == nil || len(q.Window.Uses) != 1 || len(limits) == 0 {
		return
	}
	u := q.Window.Uses[0]
	call := strings.TrimSpace(u.Call)
	name := call[:max(strings.Index(call, "("), 0)]
	if !rankingFuncs[name] {
		return
	}
	col := q.Targets[u.Item].Name
	if n, ok := limits[col]; ok {
		q.Window.Limit = &WindowLimit{Col: col, Max: max(n, 0)}
	}
}

// limitedSelect is sql, a window query whose output has the column lim.Col,
// restricted to the rows ranked within the limit, with the output columns
// names.
func limitedSelect(sql string, names []string, lim *WindowLimit) string {
	return "SELECT " + identList(names) + " FROM (" + sql + ") __w WHERE __w." + ident(lim.Col) + " <= " + fmt.Sprint(lim.Max)
}
