package engine

import (
	"fmt"
	"strings"
)

// CheckSpec is what a self-check compares for a plan: the target's
// columns, its identity among them, and the defining query extended with
// the identity columns the user did not select, so that both sides can be
// paged and paired by identity.
type CheckSpec struct {
	// Columns are the target columns compared: the visible ones, then the
	// hidden identity columns (a row target's __k_ or lineage columns, an
	// aggregate's unselected GROUP BY expressions).
	Columns []string
	// Identity are the columns that identify a target row: a row
	// target's key or lineage, an aggregate's group columns (none without
	// GROUP BY: one row).
	Identity []string
	// Query produces Columns, by name.
	Query string
	// Keys say which identity columns hold which source's key (row
	// targets), so a divergent row maps to the keys that re-derive it.
	Keys []IdentityKey
}

// IdentityKey is source Source's key as identity columns, in key order.
type IdentityKey struct {
	Source  int
	Columns []string
}

// CheckSpec describes the plan for a self-check.
func (p *Plan) CheckSpec() CheckSpec {
	var s CheckSpec
	var hidden []Col // identity columns the query does not select
	if p.Shape == ShapeRow {
		for _, c := range p.Cols {
			s.Columns = append(s.Columns, c.Name)
		}
		hidden = p.Cols[len(p.Visible):]
		s.Identity = p.Identity
		if p.Multi() {
			for i, src := range p.Sources {
				s.Keys = append(s.Keys, IdentityKey{Source: i, Columns: src.Lineage})
			}
		} else {
			s.Keys = []IdentityKey{{Source: 0, Columns: p.Identity}}
		}
	} else {
		s.Columns = append(s.Columns, p.Visible...)
		for i, g := range p.Groups {
			s.Identity = append(s.Identity, g.Name)
			if !contains(p.Visible, g.Name) {
				s.Columns = append(s.Columns, g.Name)
				g.Expr = p.checkGroupExpr(i) // as the query computes it
				hidden = append(hidden, g)
			}
		}
	}
	s.Query = p.withColumns(hidden)
	return s
}

// withColumns is the defining query (QuerySQL, the user's select list)
// with more items selected: expressions over its FROM, or GROUP BY
// expressions of an aggregate.
func (p *Plan) withColumns(extra []Col) string {
	q := p.QuerySQL()
	if len(extra) == 0 {
		return q
	}
	var items []string
	for _, c := range extra {
		items = append(items, c.Expr+" AS "+ident(c.Name))
	}
	// QuerySQL is "SELECT <items> FROM <FromSQL> …" as the plan wrote it.
	from := " FROM " + p.FromSQL()
	if i := strings.Index(q, from); strings.HasPrefix(q, "SELECT ") && i > 0 {
		return q[:i] + ", " + strings.Join(items, ", ") + q[i:]
	}
	if p.Shape != ShapeRow {
		return q // not the plan's own text (cannot happen): the check names the missing column
	}
	// Not the plan's own text (cannot happen): select every column from
	// the plan's expressions instead.
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, c := range p.Cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Expr + " AS " + ident(c.Name))
	}
	b.WriteString(from)
	if p.Where != "" {
		b.WriteString(" WHERE " + p.Where)
	}
	return b.String()
}

// GroupKeysSQL lists the source keys of an aggregate's groups: those the
// ledger holds for them and those the source has now (the rows that
// should contribute), so that re-deriving them repairs the groups'
// ledger rows. Its parameters are one text[] per group column ($1 the
// first column's values, element r of each belonging to group r, NULL
// for a NULL group value); its rows are (source index, key as text[]).
// It is "" for a plan without groups.
func (p *Plan) GroupKeysSQL() string {
	if p.Shape != ShapeAggregate || len(p.Groups) == 0 {
		return ""
	}
	var params, vcols []string
	for i := range p.Groups {
		params = append(params, fmt.Sprintf("$%d::text[]", i+1))
		vcols = append(vcols, fmt.Sprintf("__trellis_v%d", i))
	}
	with := "WITH __trellis_g AS (SELECT * FROM unnest(" + strings.Join(params, ", ") + ") AS __trellis_g(" + strings.Join(vcols, ", ") + "))\n"
	match := func(exprOf func(i int) string) string {
		var conj []string
		for i, g := range p.Groups {
			v := fmt.Sprintf("__trellis_g.__trellis_v%d::%s", i, g.Type)
			conj = append(conj, nullSafeEq(exprOf(i), v, false))
		}
		return strings.Join(conj, " AND ")
	}
	ledgerMatch := match(func(i int) string { return fmt.Sprintf("__l.__g%d", i) })
	sourceMatch := match(func(i int) string { return "(" + p.Groups[i].Expr + ")" })
	where := ""
	if p.Where != "" {
		where = "(" + p.Where + ") AND "
	}
	var branches []string
	for i, src := range p.Sources {
		var lk, sk []string
		first := ""
		if p.Multi() {
			for _, l := range src.Lineage {
				lk = append(lk, "__l."+ident(l)+"::text")
			}
			first = " AND __l." + ident(src.Lineage[0]) + " IS NOT NULL"
		} else {
			for j := range src.Key {
				lk = append(lk, fmt.Sprintf("__l.__k%d::text", j))
			}
		}
		for _, k := range src.Key {
			sk = append(sk, ident(src.Ref)+"."+ident(k.Name)+"::text")
		}
		branches = append(branches,
			fmt.Sprintf("SELECT %d AS __src, ARRAY[%s] AS __key FROM %s __l, __trellis_g WHERE %s%s", i, strings.Join(lk, ", "), p.Ledger.Ident(), ledgerMatch, first),
			fmt.Sprintf("SELECT %d, ARRAY[%s] FROM %s%s, __trellis_g WHERE %s%s AND %s.%s IS NOT NULL", i, strings.Join(sk, ", "), p.FromSQL(), p.setsJoin(), where, sourceMatch,
				ident(src.Ref), ident(src.Key[0].Name)))
	}
	return with + "SELECT DISTINCT __src, __key FROM (\n  " + strings.Join(branches, "\n  UNION ALL ") + "\n) AS __z"
}
