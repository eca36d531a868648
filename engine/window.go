package engine

// window.go owns window functions (ADR 0033): which select items call
// them, the PARTITION BY every window of a query shares, and whether a
// window's value depends on the order of rows its ORDER BY leaves tied.
//
// A window query is kept as a row target keyed by lineage, like a join
// (ADR 0010), with its partition values stored in hidden columns
// (__w<i>). A change re-derives whole partitions: the partitions of the
// changed rows, as they are now (the query) and as they were (the stored
// values), are collected, and the query runs again restricted to them —
// a filter on the partition expressions keeps or drops whole partitions,
// so each window sees every row of its own (scope.go, windowRows). A query
// whose windows share no PARTITION BY expression is one partition: every
// change re-derives the whole target, and Apply says so.
//
// A window over grouped rows (SELECT g, rank() OVER (ORDER BY sum(x)) …
// GROUP BY g) is read over the grouped query as a level (aggsplit.go); a
// filter on a window's result (… WHERE rn <= 3 over a derived table) reads
// the window query as a level. Top-K (ORDER BY … LIMIT) and DISTINCT ON
// are rewritten to both (topk.go).

import (
	"context"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// WindowSpec describes the windows of a query.
type WindowSpec struct {
	// Partition are the PARTITION BY expressions every window of the
	// query has, deparsed; none: the query is one partition.
	Partition []string
	// Uses are the window calls, one per call in the select list.
	Uses []WindowUse
	// Limit, for a level whose reader keeps only the rows its one ranking
	// call ranks within a limit, is that limit (ranklimit.go).
	Limit *WindowLimit
}

// WindowUse is one window call of the select list.
type WindowUse struct {
	// Item is the select item's index; Call the call as written.
	Item int
	Call string
	// Ordered: the call's value depends on which of the rows its ORDER BY
	// leaves tied comes first (row_number, lag, a ROWS frame …), so the
	// window's order must be total.
	Ordered bool
	// Columns are the plain column references of its PARTITION BY and
	// ORDER BY: the order is total when they hold every source's key.
	Columns []ColumnName
	// Inputs are its arguments and its PARTITION BY and ORDER BY
	// expressions, deparsed, for the immutability check.
	Inputs []string
	// TieBreak: the call was written by the engine (top-K, DISTINCT ON),
	// whose ties are broken by the sources' keys, appended to its ORDER BY
	// when the plan knows them.
	TieBreak bool
}

// Frame option bits of a window definition (PostgreSQL's parsenodes.h).
const (
	frameRows                  = 0x00004
	frameStartUnboundedPreced  = 0x00020
	frameEndUnboundedFollowing = 0x00100
)

// orderedWindowFuncs are the window functions whose value for a row
// depends on its position among rows its ORDER BY ties; rank,
// dense_rank, percent_rank and cume_dist give peers the same value.
var orderedWindowFuncs = map[string]bool{
	"row_number": true, "ntile": true, "lag": true, "lead": true,
	"first_value": true, "last_value": true, "nth_value": true,
}

// orderedAggregates accumulate in row order: over a window their value
// depends on the order of peers (no ORDER BY inside a window call).
var orderedAggregates = map[string]bool{
	"array_agg": true, "string_agg": true, "jsonb_agg": true, "json_agg": true,
	"jsonb_object_agg": true, "json_object_agg": true, "xmlagg": true,
}

// inlineWindows writes every named window a call refers to (OVER w, OVER
// (w ORDER BY …)) into the call and drops the WINDOW clause, so that each
// call's text is whole: the engine renders select items one by one.
func (c *selectChecker) inlineWindows(sel *pg_query.SelectStmt) error {
	defs := map[string]*pg_query.WindowDef{}
	for _, n := range sel.WindowClause {
		if wd := n.GetWindowDef(); wd != nil {
			defs[wd.Name] = wd
		}
	}
	// A named window may itself refer to an earlier one.
	var resolve func(wd *pg_query.WindowDef, depth int) (*pg_query.WindowDef, error)
	resolve = func(wd *pg_query.WindowDef, depth int) (*pg_query.WindowDef, error) {
		name := wd.Refname
		if wd.Name != "" && len(wd.PartitionClause) == 0 && len(wd.OrderClause) == 0 && wd.FrameOptions&0x1 == 0 && wd.Refname == "" {
			name = wd.Name // OVER w
		}
		if name == "" || depth > len(defs) {
			return wd, nil
		}
		base, ok := defs[name]
		if !ok {
			return nil, c.errf(wd.Location, "window %q does not exist; define it in the WINDOW clause", name)
		}
		if base == wd {
			return wd, nil
		}
		b, err := resolve(base, depth+1)
		if err != nil {
			return nil, err
		}
		out := proto.Clone(b).(*pg_query.WindowDef)
		out.Name, out.Refname, out.Location = "", "", wd.Location
		if len(wd.OrderClause) > 0 {
			out.OrderClause = wd.OrderClause
		}
		if wd.FrameOptions&0x1 != 0 {
			out.FrameOptions, out.StartOffset, out.EndOffset = wd.FrameOptions, wd.StartOffset, wd.EndOffset
		}
		return out, nil
	}
	var ferr error
	for _, t := range sel.TargetList {
		walk(t.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false
			}
			fc, ok := m.(*pg_query.FuncCall)
			if !ok || fc.Over == nil || ferr != nil {
				return ferr == nil
			}
			wd, err := resolve(fc.Over, 0)
			if err != nil {
				ferr = err
				return false
			}
			fc.Over = wd
			return true
		})
	}
	if ferr != nil {
		return ferr
	}
	sel.WindowClause = nil
	return nil
}

// windowSpec collects the window calls of the select list.
func (c *selectChecker) windowSpec(sel *pg_query.SelectStmt, items []*selectItem) (*WindowSpec, error) {
	spec := &WindowSpec{}
	var common []string
	first := true
	for i, it := range items {
		var ferr error
		walk(it.node.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				return false
			}
			fc, ok := m.(*pg_query.FuncCall)
			if !ok || fc.Over == nil || ferr != nil {
				return ferr == nil
			}
			call, err := deparseExpr(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: fc}})
			if err != nil {
				ferr = c.errf(fc.Location, "select list item %d: this window call cannot be rendered back to SQL by the bundled deparser (%v); rewrite it", i+1, err)
				return false
			}
			_, name := funcName(fc)
			wd := fc.Over
			use := WindowUse{Item: i, Call: call, TieBreak: it.t.Name == rankItem && name == "row_number"}
			rows := wd.FrameOptions&frameRows != 0 &&
				!(wd.FrameOptions&frameStartUnboundedPreced != 0 && wd.FrameOptions&frameEndUnboundedFollowing != 0)
			use.Ordered = orderedWindowFuncs[name] || orderedAggregates[name] || (rows && len(wd.OrderClause) > 0)
			for _, a := range fc.Args {
				if s, err := deparseExpr(a); err == nil {
					use.Inputs = append(use.Inputs, s)
				}
			}
			var parts []string
			for _, p := range wd.PartitionClause {
				s, err := deparseExpr(p)
				if err != nil {
					ferr = c.errf(fc.Location, "select list item %d: PARTITION BY cannot be rendered back to SQL (%v); rewrite it", i+1, err)
					return false
				}
				parts = append(parts, s)
				use.Inputs = append(use.Inputs, s)
				if col, ref := c.plainColumn(p); col != "" {
					use.Columns = append(use.Columns, ColumnName{Ref: ref, Column: col})
				}
			}
			for _, o := range wd.OrderClause {
				if sb := o.GetSortBy(); sb != nil {
					if s, err := deparseExpr(sb.Node); err == nil {
						use.Inputs = append(use.Inputs, s)
					}
					if col, ref := c.plainColumn(sb.Node); col != "" {
						use.Columns = append(use.Columns, ColumnName{Ref: ref, Column: col})
					}
				}
			}
			if first {
				common, first = parts, false
			} else {
				var keep []string
				for _, p := range common {
					if contains(parts, p) {
						keep = append(keep, p)
					}
				}
				common = keep
			}
			spec.Uses = append(spec.Uses, use)
			// Its arguments and clauses hold no window call (PostgreSQL
			// refuses nested ones).
			return false
		})
		if ferr != nil {
			return nil, ferr
		}
	}
	spec.Partition = common
	return spec, nil
}

// windowKeys checks, for a plan whose sources are known, that each window
// call whose value depends on the order of tied rows has a total order
// (its PARTITION BY and ORDER BY name every source's key), and breaks the
// ties of the engine's own calls by the sources' keys. targets are the
// query's select items, whose Expr is rewritten for those calls.
func windowKeys(name string, w *WindowSpec, sources []Source, targets []Target) error {
	for _, u := range w.Uses {
		if u.TieBreak {
			var keys []string
			for _, src := range sources {
				for _, k := range src.Key {
					keys = append(keys, ident(src.Ref)+"."+ident(k.Name))
				}
			}
			expr := targets[u.Item].Expr
			if !strings.HasSuffix(expr, ")") {
				return terr.New(terr.Internal, "transform %q: the engine's window call %s does not end its window", name, expr)
			}
			targets[u.Item].Expr = strings.TrimSuffix(expr, ")") + ", " + strings.Join(keys, ", ") + ")"
			continue
		}
		if !u.Ordered {
			continue
		}
		var missing []string
		for _, src := range sources {
			for _, k := range src.Key {
				found := false
				for _, cn := range u.Columns {
					if cn.Column == k.Name && (cn.Ref == "" || cn.Ref == src.Ref) {
						found = true
						break
					}
				}
				if !found {
					missing = append(missing, ident(src.Ref)+"."+ident(k.Name))
				}
			}
		}
		if len(missing) > 0 {
			return windowOrderError(name, u.Call, missing)
		}
	}
	return nil
}

// windowOrderError refuses a window call whose value depends on the order
// of rows its window leaves tied.
func windowOrderError(name, call string, missing []string) error {
	return terr.New(terr.Validation, "transform %q: %s gives rows its window orders as equal values that depend on which comes first, in PostgreSQL too (its ORDER BY is not total: it lacks %s), so the target could not be kept equal to the query; add the key to the window's ORDER BY (… ORDER BY …, %s)",
		name, call, strings.Join(missing, ", "), strings.Join(missing, ", "))
}

// PlanNotes are what Apply tells about a plan: a window query whose
// windows share no PARTITION BY (top-K over all rows among them) is one
// partition, re-derived whole by every change, at the cost of reading
// its rows — about as many as its sources hold, by the statistics; a
// top-K level (ranklimit.go) reads its first K rows when an index serves
// its order.
func PlanNotes(ctx context.Context, db DB, p *Plan) ([]string, error) {
	if p.Window == nil || len(p.Window.Partition) > 0 {
		return nil, nil
	}
	var oids []uint32
	for _, src := range p.Sources {
		oids = append(oids, src.OID)
	}
	var rows int64
	if err := db.QueryRow(ctx, `SELECT coalesce(sum(greatest(reltuples, 0)), 0)::bigint FROM pg_class WHERE oid = ANY ($1::oid[])`, oids).Scan(&rows); err != nil {
		return nil, fmt.Errorf("transform %s: estimate its rows: %w", p.Target.Ident(), err)
	}
	if lim := p.Window.Limit; lim != nil {
		call := lim.Col
		for _, c := range p.Cols {
			if c.Name == lim.Col {
				call = c.Expr
			}
		}
		return []string{fmt.Sprintf("%s: its window has no PARTITION BY (top-K over all rows), so every change re-derives its first %d rows (%s): with an index in that order a batch reads about as many, without one about %d source rows; add the index where the table is large",
			p.Target.Ident(), lim.Max, call, rows)}, nil
	}
	return []string{fmt.Sprintf("%s: its windows have no PARTITION BY (or top-K over all rows), so every change re-derives all of its rows: a batch reads about %d source rows; partition the window (or keep the top rows per group) where the table is large",
		p.Target.Ident(), rows)}, nil
}

// windowedAlias names the derived table a DISTINCT over windows reads.
const windowedAlias = "__windowed"

// distinctOverWindows rewrites SELECT DISTINCT over window calls, whose
// DISTINCT applies to the windows' results, as the distinct rows of the
// window query as a derived table (a level):
//
//	SELECT DISTINCT g, count(*) OVER (PARTITION BY g) AS n FROM t
//	  → SELECT DISTINCT __windowed.g, __windowed.n FROM (SELECT g, count(*) OVER … AS n FROM t) __windowed
func distinctOverWindows(sel *pg_query.SelectStmt) {
	if len(sel.DistinctClause) != 1 || sel.DistinctClause[0].GetNode() != nil || !hasWindow(sel) {
		return
	}
	names := outputNames(&pg_query.RangeSubselect{}, sel)
	inner := proto.Clone(sel).(*pg_query.SelectStmt)
	inner.DistinctClause, inner.SortClause = nil, nil
	for i, rt := range inner.TargetList {
		if r := rt.GetResTarget(); r != nil && r.Name == "" && names[i] != "" {
			r.Name = names[i]
		}
	}
	var targets []*pg_query.Node
	for _, n := range names {
		targets = append(targets, named(columnRef(windowedAlias, n), n))
	}
	*sel = pg_query.SelectStmt{Op: pg_query.SetOperation_SETOP_NONE, TargetList: targets, DistinctClause: sel.DistinctClause,
		FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
			Subquery: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: inner}},
			Alias:    &pg_query.Alias{Aliasname: windowedAlias}}}}}}
}
