package engine

// recursivesql.go owns the statements of a recursive CTE's level (ADR
// 0035): a batch finds the anchors its changed keys reach — the stored
// rows that read a changed key (old), the anchor term and the step over
// the stored rows restricted to the changed keys (new) — re-derives those
// anchors whole, and replaces their stored rows by identity.

import (
	"fmt"
	"strings"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// recursiveAnchorsTable holds the anchors a batch re-derives.
const recursiveAnchorsTable = "pg_temp.__trellis_ra"

// inAnchors is the condition that refs (the anchor sources' keys, in
// anchorLineage order) name an anchor of the batch.
func inAnchors(p *Plan, refs []string) string {
	cols := p.anchorLineage()
	if len(refs) == 1 && !strings.HasSuffix(p.Sources[p.Recursive.Anchor[0]].Key[0].Type, "]") {
		return refs[0] + " = ANY (ARRAY(SELECT " + ident(cols[0]) + " FROM " + recursiveAnchorsTable + "))"
	}
	return "(" + strings.Join(refs, ", ") + ") IN (SELECT " + identList(cols) + " FROM " + recursiveAnchorsTable + ")"
}

// anchorKeyRefs are the anchor sources' keys as the anchor term names them.
func anchorKeyRefs(p *Plan) []string {
	var out []string
	for _, i := range p.Recursive.Anchor {
		out = append(out, sourceKeyRefs(p, i)...)
	}
	return out
}

// buildRecursive generates the statements of a recursive CTE's level.
func buildRecursive(p *Plan) *Statements {
	s := &Statements{}
	scopeKeyTables(s, p)
	r := p.Recursive
	T := p.Target.Ident()
	for _, c := range p.Cover {
		first, after := enumSource(p.Sources[c])
		s.Enum = append(s.Enum, Enum{Source: c, First: first, After: after})
	}
	for _, c := range p.Cover {
		first, after := enumLineage(p, c, T)
		s.Enum = append(s.Enum, Enum{Source: c, Stored: true, First: first, After: after})
	}
	anchor := identsOf(p.anchorLineage())
	var adefs []string
	for _, i := range r.Anchor {
		for j, k := range p.Sources[i].Key {
			adefs = append(adefs, ident(p.Sources[i].Lineage[j])+" "+k.Type)
		}
	}
	var names, ndefs []string
	for _, c := range p.Cols {
		names = append(names, ident(c.Name))
		ndefs = append(ndefs, ident(c.Name)+" "+typeDDL(c.Type, c.Collation))
	}
	s.Setup = append(s.Setup,
		"CREATE TEMP TABLE IF NOT EXISTS __trellis_ra ("+strings.Join(adefs, ", ")+") ON COMMIT DELETE ROWS",
		"CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("+strings.Join(ndefs, ", ")+", "+depthCol+" integer) ON COMMIT DELETE ROWS")

	// The anchors: where the changed rows were read (stored lineage), and
	// where they are read now (the anchor term, and the step over the
	// stored rows, each restricted to the changed keys).
	stored := storedBranches(p, T, strings.Join(prefixed("__t.", anchor), ", "), "", allSources(p))
	if plant.Active(plant.RecursiveAnchorStale) {
		stored = "" // planted: the anchors whose derivation read a changed row's old version are not re-derived
	}
	where := func(w string) string {
		if w == "" {
			return "true"
		}
		return "(" + w + ")"
	}
	branches := []string{scopeBranches(p, r.AnchorFrom, where(r.AnchorWhere), anchorKeyRefs(p), r.Anchor)}
	if len(r.Step) > 0 {
		self := ident(r.SelfRef)
		branches = append(branches, scopeBranches(p, r.stepFrom(T), where(r.StepWhere), prefixed(self+".", anchor), r.Step))
	}
	if stored != "" {
		branches = append([]string{stored}, branches...)
	}
	s.Apply = append(s.Apply,
		Step{Role: RoleScope, SQL: "INSERT INTO " + recursiveAnchorsTable + " SELECT DISTINCT " + strings.Join(prefixed("__x.", anchor), ", ") +
			" FROM (" + strings.Join(branches, " UNION ALL ") + ") __x(" + strings.Join(anchor, ", ") + ")"},
		Step{Role: RoleScope, SQL: "ANALYZE " + recursiveAnchorsTable})

	// The anchors again in whole.
	cols := append([]string{}, names...)
	if !r.Union {
		cols = append(cols, depthCol)
	}
	s.Apply = append(s.Apply, Step{Role: RoleScope, SQL: "INSERT INTO " + scopeRowsTable + " (" + strings.Join(cols, ", ") + ") " +
		p.derivation(inAnchors(p, anchorKeyRefs(p)))})
	if !r.Union {
		s.Apply = append(s.Apply, Step{Role: RoleScope, SQL: depthGuard(p)})
	}

	// Their stored rows it no longer gives go; the others are upserted by
	// identity (anchor, __d), writing only changed values.
	var same []string
	for _, c := range append(append([]string{}, anchor...), ident(pathCol)) {
		same = append(same, "__n."+c+" = __t."+c)
	}
	s.Apply = append(s.Apply,
		Step{Role: RoleWrite, SQL: "DELETE FROM " + T + " __t WHERE " + inAnchors(p, prefixed("__t.", anchor)) +
			" AND NOT EXISTS (SELECT 1 FROM " + scopeRowsTable + " __n WHERE " + strings.Join(same, " AND ") + ")"},
		upsertNewRows(p, names))
	return s
}

// depthGuard fails a UNION ALL re-derive whose recursion reached
// MaxDepth steps: a cycle, which PostgreSQL would follow forever. Its
// SQLSTATE (54001, a limit exceeded) makes it a data error (ADR 0013): the
// key that made the cycle is held with this sentence, the others applied.
func depthGuard(p *Plan) string {
	r := p.Recursive
	msg := fmt.Sprintf("WITH RECURSIVE %s: the derivation from one anchor row (anchor key %%s) went past %d steps, so it follows a cycle that UNION ALL would follow forever, in PostgreSQL too",
		quoteIdents([]string{r.Name}), r.MaxDepth)
	hint := "break the cycle in the source rows, stop the recursive term with a condition (carry a path: WHERE NOT id = ANY(path)), or write UNION, which ends cycles by itself"
	return "DO $trellis$ BEGIN IF EXISTS (SELECT 1 FROM " + scopeRowsTable + " WHERE " + depthCol + " >= " + fmt.Sprint(r.MaxDepth) +
		") THEN RAISE EXCEPTION USING ERRCODE = '54001', MESSAGE = format(" + quoteLiteral(msg) + ", (SELECT ROW(" +
		identList(p.anchorLineage()) + ")::text FROM " + scopeRowsTable + " WHERE " + depthCol + " >= " + fmt.Sprint(r.MaxDepth) +
		" LIMIT 1)), HINT = " + quoteLiteral(hint) + "; END IF; END $trellis$"
}
