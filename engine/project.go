package engine

import (
	"fmt"
	"strings"
)

// The projection of an aggregate's state onto its target (ADR 0011): when
// the query has HAVING or expressions over aggregates, the groups are
// kept in a state table by the usual steps, and the target holds, for each
// group that passes HAVING, the select list computed from its state row.
// Only the groups a batch changed are projected again.

// aggTarget is the table the aggregate steps maintain: the state table
// when the target is a projection of it, else the target itself.
func (p *Plan) aggTarget() Rel {
	if p.State != nil {
		return *p.State
	}
	return p.Target
}

// projectSteps appends the projection steps to an aggregate's apply and
// reconcile statements (nothing when the target is the state).
func projectSteps(s *Statements, p *Plan) {
	if p.State == nil {
		return
	}
	T, S := p.Target.Ident(), p.State.Ident()
	having := "true"
	if p.Having != "" {
		having = "(" + p.Having + ")"
	}
	var names, sel, set, oldv, newv []string
	for _, c := range p.Project {
		names = append(names, ident(c.Name))
		sel = append(sel, c.Expr+" AS "+ident(c.Name))
		if !contains(p.groupNames(), c.Name) {
			set = append(set, ident(c.Name)+" = EXCLUDED."+ident(c.Name))
			oldv = append(oldv, cmpExpr("__t."+ident(c.Name), c.TextCmp))
			newv = append(newv, cmpExpr("EXCLUDED."+ident(c.Name), c.TextCmp))
		}
	}
	if len(p.Groups) == 0 {
		// One state row: the target has it when it passes HAVING.
		all := []string{"DELETE FROM " + T,
			"INSERT INTO " + T + " (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(sel, ", ") + " FROM " + S + " __s WHERE " + having}
		s.Apply = append(s.Apply, Step{Role: RoleProject, SQL: all[0]}, Step{Role: RoleProject, SQL: all[1]})
		s.Reconcile = append(s.Reconcile, all...)
		return
	}
	conflict := " ON CONFLICT (" + identList(p.groupNames()) + ") DO NOTHING"
	if len(set) > 0 {
		conflict = " ON CONFLICT (" + identList(p.groupNames()) + ") DO UPDATE SET " + strings.Join(set, ", ") +
			" WHERE (" + strings.Join(append(oldv, "NULL"), ", ") + ") IS DISTINCT FROM (" + strings.Join(append(newv, "NULL"), ", ") + ")"
	}
	// match is the condition that state or target row x is group __a's.
	match := func(x string) string {
		var eq []string
		for i, g := range p.Groups {
			eq = append(eq, nullSafeEq(x+"."+ident(g.Name), fmt.Sprintf("__a.__g%d", i), g.NotNull))
		}
		return strings.Join(eq, " AND ")
	}
	var og, ng, sg []string
	for i, g := range p.Groups {
		og = append(og, fmt.Sprintf("__og%d AS __g%d", i, i))
		ng = append(ng, fmt.Sprintf("__ng%d", i))
		sg = append(sg, fmt.Sprintf("__s.%s AS __g%d", ident(g.Name), i))
	}
	affected := "SELECT " + strings.Join(og, ", ") + " FROM " + changesTable + " WHERE __had UNION SELECT " +
		strings.Join(ng, ", ") + " FROM " + changesTable + " WHERE __has"
	project := func(groups string) []string {
		return []string{
			"DELETE FROM " + T + " __t USING (" + groups + ") __a WHERE " + match("__t") +
				" AND NOT EXISTS (SELECT 1 FROM " + S + " __s WHERE " + match("__s") + " AND " + having + ")",
			"INSERT INTO " + T + " AS __t (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(sel, ", ") +
				" FROM (" + groups + ") __a JOIN " + S + " __s ON " + match("__s") + " WHERE " + having + conflict,
		}
	}
	for _, st := range project(affected) {
		s.Apply = append(s.Apply, Step{Role: RoleProject, SQL: st})
	}
	// A rebuild projects every group the state or the target holds.
	var tg []string
	for i, g := range p.Groups {
		tg = append(tg, fmt.Sprintf("__t.%s AS __g%d", ident(g.Name), i))
	}
	every := "SELECT " + strings.Join(sg, ", ") + " FROM " + S + " __s UNION SELECT " + strings.Join(tg, ", ") + " FROM " + T + " __t"
	s.Reconcile = append(s.Reconcile, project(every)...)
}
