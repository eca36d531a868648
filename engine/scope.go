package engine

import (
	"fmt"
	"strings"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// The lineage-scope path: the statements of a plan with several sources
// (ADR 0010). A batch loads each source's dirty keys into its own key
// table; outer joins widen the preserved side's tables; then the rows in
// scope (any source's lineage in its key table) are re-derived from the
// user's query, one branch per source, and replace the stored rows in the
// same scope.

// scopeKeysTable is the session's key table of source i.
func scopeKeysTable(i int) string { return fmt.Sprintf("pg_temp.__trellis_k%d", i) }

// scopeRowsTable holds a row transform's re-derived rows in scope.
const scopeRowsTable = "pg_temp.__trellis_n"

// sourceKeyRefs are source i's key columns as the user's FROM names them.
func sourceKeyRefs(p *Plan, i int) []string {
	src := p.Sources[i]
	out := make([]string, len(src.Key))
	for j, k := range src.Key {
		out[j] = ident(src.Ref) + "." + ident(k.Name)
	}
	return out
}

// storedKeyRefs are source i's lineage columns in the stored table __t.
func storedKeyRefs(p *Plan, i int) []string {
	out := make([]string, len(p.Sources[i].Lineage))
	for j, l := range p.Sources[i].Lineage {
		out[j] = "__t." + ident(l)
	}
	return out
}

// inScope is the condition that refs (source i's key) is in its key table.
func inScope(p *Plan, i int, refs []string) string {
	if len(refs) == 1 && !strings.HasSuffix(p.Sources[i].Key[0].Type, "]") {
		// As an array, the keys are a value the planner counts: it probes
		// the index once per key. As a semi-join it guesses from the
		// table's statistics, which lag a table that grows with its keys
		// (a hash join over half the target for 10k keys, in make bench).
		return refs[0] + " = ANY (ARRAY(SELECT __k0 FROM " + scopeKeysTable(i) + "))"
	}
	return "(" + strings.Join(refs, ", ") + ") IN (SELECT " + keyList("__k", len(refs)) + " FROM " + scopeKeysTable(i) + ")"
}

// notEarlier keeps branch i from repeating a row that an earlier branch
// (a source j < i of among, whose key is in scope) already produced. NOT
// EXISTS, unlike NOT IN, is true for a NULL-extended source.
func notEarlier(i int, refs func(int) []string, among []int) string {
	var out []string
	for _, j := range among {
		if j >= i {
			continue
		}
		var eq []string
		for c, r := range refs(j) {
			eq = append(eq, fmt.Sprintf("__x.__k%d = %s", c, r))
		}
		out = append(out, " AND NOT EXISTS (SELECT 1 FROM "+scopeKeysTable(j)+" __x WHERE "+strings.Join(eq, " AND ")+")")
	}
	return strings.Join(out, "")
}

// userWhere is the user's WHERE as the first conjunct of a branch.
func userWhere(p *Plan) string {
	if p.Where == "" {
		return "true"
	}
	return "(" + p.Where + ")"
}

// allSources are the indexes of every source of the plan.
func allSources(p *Plan) []int { return spanOf(0, len(p.Sources)) }

// scopeBranches is a query over from (the user's FROM, or a mirrored
// join) restricted to the rows in scope: one branch per source of among,
// each restricted to its key table, so PostgreSQL starts each from the few
// changed rows and reaches the other tables through their indexes.
func scopeBranches(p *Plan, from, where string, sel []string, among []int) string {
	var b []string
	src := func(j int) []string { return sourceKeyRefs(p, j) }
	for _, i := range among {
		b = append(b, "SELECT "+strings.Join(sel, ", ")+" FROM "+from+" WHERE "+where+" AND "+
			inScope(p, i, sourceKeyRefs(p, i))+notEarlier(i, src, among))
	}
	return strings.Join(b, " UNION ALL ")
}

// storedBranches are the rows of stored (target, ledger or mirror, as __t)
// in scope that pass filter ("" for all), one branch per source of among
// through its lineage index.
func storedBranches(p *Plan, stored, sel, filter string, among []int) string {
	var b []string
	st := func(j int) []string { return storedKeyRefs(p, j) }
	if filter != "" {
		filter = " AND " + filter
	}
	for _, i := range among {
		b = append(b, "SELECT "+sel+" FROM "+stored+" __t WHERE "+inScope(p, i, storedKeyRefs(p, i))+notEarlier(i, st, among)+filter)
	}
	return strings.Join(b, " UNION ALL ")
}

// lineageEq joins two row sets by their whole lineage in a form PostgreSQL
// can hash: a lineage column that an outer join may leave NULL is compared
// as a one-element array, whose equality treats NULL as equal to NULL.
func lineageEq(p *Plan, a, b string) string {
	var eq []string
	for _, src := range p.Sources {
		for _, l := range src.Lineage {
			if src.Nullable {
				eq = append(eq, fmt.Sprintf("ARRAY[%s.%s] = ARRAY[%s.%s]", a, ident(l), b, ident(l)))
			} else {
				eq = append(eq, fmt.Sprintf("%s.%s = %s.%s", a, ident(l), b, ident(l)))
			}
		}
	}
	for _, o := range p.Ordinals {
		if o.NotNull {
			eq = append(eq, fmt.Sprintf("%s.%s = %s.%s", a, ident(o.Name), b, ident(o.Name)))
		} else {
			eq = append(eq, fmt.Sprintf("ARRAY[%s.%s] = ARRAY[%s.%s]", a, ident(o.Name), b, ident(o.Name)))
		}
	}
	return strings.Join(eq, " AND ")
}

// storedTable is where a plan keeps its lineage-keyed rows.
func (p *Plan) storedTable() string {
	if p.Shape == ShapeRow {
		return p.Target.Ident()
	}
	return p.Ledger.Ident()
}

// ledgerKey are the identity columns of an aggregate's ledger, and whether
// each may be NULL.
func (p *Plan) ledgerKey() (cols []string, nullable []bool) {
	if !p.Multi() {
		for i := range p.Sources[0].Key {
			cols = append(cols, fmt.Sprintf("__k%d", i))
			nullable = append(nullable, false)
		}
	} else {
		for _, src := range p.Sources {
			for _, l := range src.Lineage {
				cols = append(cols, ident(l))
				nullable = append(nullable, src.Nullable)
			}
		}
		for _, o := range p.Ordinals {
			cols = append(cols, ident(o.Name))
			nullable = append(nullable, !o.NotNull)
		}
	}
	if p.Grouping != nil {
		// One ledger row per source row per grouping set (ADR 0031).
		cols = append(cols, p.ledgerSetCol())
		nullable = append(nullable, false)
	}
	return cols, nullable
}

// ledgerSetCol is the ledger's key column of the grouping set: after the
// source key (__k<n>) of one source, __set after the lineage of several.
func (p *Plan) ledgerSetCol() string {
	if !p.Multi() {
		return fmt.Sprintf("__k%d", len(p.Sources[0].Key))
	}
	return ident(SetCol)
}

// expandSQL widens the scope of preserved-side source pp by the rows that
// a changed key of nullable-side source n matched before (stored rows) or
// matches now (the query): their NULL-extended rows may appear or vanish
// (ADR 0010).
func expandSQL(p *Plan, oj OuterJoin, pp, n int) string {
	var cols, eq, notNull []string
	for j := range p.Sources[pp].Key {
		cols = append(cols, fmt.Sprintf("__c%d", j))
		eq = append(eq, fmt.Sprintf("__x.__k%d = __y.__c%d", j, j))
		notNull = append(notNull, fmt.Sprintf("__y.__c%d IS NOT NULL", j))
	}
	// What n matches now, and what it matched before: the query and the
	// stored rows, or — when a condition after the join may drop matched
	// rows — the join's own matches and their mirror.
	now := "SELECT " + strings.Join(sourceKeyRefs(p, pp), ", ") + " FROM " + p.From + " WHERE " + userWhere(p) + " AND " + inScope(p, n, sourceKeyRefs(p, n))
	before := p.storedTable()
	if oj.Mirror != nil {
		now = "SELECT " + strings.Join(sourceKeyRefs(p, pp), ", ") + " FROM " + oj.Inner + " WHERE " + inScope(p, n, sourceKeyRefs(p, n))
		before = oj.Mirror.Ident()
	}
	return "INSERT INTO " + scopeKeysTable(pp) + " SELECT DISTINCT " + strings.Join(prefixed("__y.", cols), ", ") +
		" FROM (" + now +
		" UNION ALL SELECT " + strings.Join(storedKeyRefs(p, pp), ", ") + " FROM " + before + " __t WHERE " + inScope(p, n, storedKeyRefs(p, n)) +
		") __y(" + strings.Join(cols, ", ") + ") WHERE " + strings.Join(notNull, " AND ") +
		" AND NOT EXISTS (SELECT 1 FROM " + scopeKeysTable(pp) + " __x WHERE " + strings.Join(eq, " AND ") + ")"
}

func prefixed(pre string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = pre + n
	}
	return out
}

// buildScope generates the statements of a plan with several sources.
func buildScope(p *Plan, merge bool) *Statements {
	s := &Statements{}
	scopeKeyTables(s, p)
	widened := map[int]bool{}
	for _, oj := range p.Outer {
		for _, pair := range oj.Sides() {
			for _, n := range pair[1] {
				for _, pp := range pair[0] {
					s.Apply = append(s.Apply, Step{Role: RoleExpand, SQL: expandSQL(p, oj, pp, n)})
					widened[pp] = true
				}
			}
		}
	}
	for i := range p.Sources {
		if widened[i] {
			s.Apply = append(s.Apply, Step{Role: RoleScope, SQL: "ANALYZE " + scopeKeysTable(i)})
		}
	}
	for _, oj := range p.Outer {
		if oj.Mirror != nil {
			s.Apply = append(s.Apply, mirrorSteps(p, oj)...)
		}
	}
	// Builds walk the cover, and each mirror's own cover (a mirrored
	// join's matches need not reach the target); rebuilds then walk what
	// the target and the mirrors hold.
	type walk struct {
		source int
		table  string
	}
	var sources, stored []walk
	for _, c := range p.Cover {
		sources = append(sources, walk{c, ""})
		stored = append(stored, walk{c, p.storedTable()})
	}
	for _, oj := range p.Outer {
		if oj.Mirror == nil {
			continue
		}
		for _, c := range oj.InnerCover {
			if !containsInt(p.Cover, c) {
				sources = append(sources, walk{c, ""})
			}
			stored = append(stored, walk{c, oj.Mirror.Ident()})
		}
	}
	for _, w := range sources {
		first, after := enumSource(p.Sources[w.source])
		s.Enum = append(s.Enum, Enum{Source: w.source, First: first, After: after})
	}
	for _, w := range stored {
		first, after := enumLineage(p, w.source, w.table)
		s.Enum = append(s.Enum, Enum{Source: w.source, Stored: true, First: first, After: after})
	}
	if p.Shape == ShapeRow && p.Window != nil {
		windowRows(s, p)
		return s
	}
	if p.Shape == ShapeRow {
		scopeRows(s, p)
		return s
	}
	var nsel []string
	for i, src := range p.Sources {
		for j, r := range sourceKeyRefs(p, i) {
			nsel = append(nsel, r+" AS "+ident(src.Lineage[j]))
		}
	}
	for _, o := range p.Ordinals {
		nsel = append(nsel, o.Expr+" AS "+ident(o.Name))
	}
	nsel = append(nsel, "true AS __p")
	setEq := ""
	if p.Grouping != nil {
		nsel = append(nsel, setsRef+"."+ident(SetCol)+" AS "+p.ledgerSetCol())
		setEq = " AND __n." + p.ledgerSetCol() + " = __o." + p.ledgerSetCol()
	}
	for i, g := range p.Groups {
		nsel = append(nsel, fmt.Sprintf("%s AS __g%d", g.Expr, i))
	}
	for _, a := range p.Args {
		nsel = append(nsel, a.Expr+" AS "+ident(a.Name))
	}
	keys, _ := p.ledgerKey()
	var csel []string
	for _, k := range keys {
		csel = append(csel, "CASE WHEN __n.__p THEN __n."+k+" ELSE __o."+k+" END AS "+k)
	}
	csel = append(csel, "(__o.__p IS NOT NULL) AS __had", "(__n.__p IS NOT NULL) AS __has")
	sel, differs := changedContributions(p)
	changes := "SELECT " + strings.Join(append(csel, sel...), ", ") +
		" FROM (" + scopeBranches(p, p.From+p.setsJoin(), userWhere(p), nsel, allSources(p)) + ") __n FULL JOIN (" +
		storedBranches(p, p.Ledger.Ident(), "__t.*, __t.ctid AS __ot, true AS __p", "", allSources(p)) + ") __o ON " +
		lineageEq(p, "__n", "__o") + setEq + " WHERE __n.__p IS NULL OR __o.__p IS NULL OR " + differs
	buildAggregate(s, p, Step{Role: RoleChanges, SQL: "INSERT INTO " + changesTable + " " + changes}, changes, merge)
	return s
}

// scopeKeyTables sets up each source's key table and the statements that
// fill and count it per batch.
func scopeKeyTables(s *Statements, p *Plan) {
	for i, src := range p.Sources {
		var kcols, kcasts, kparams, ucols []string
		for j, k := range src.Key {
			kcols = append(kcols, fmt.Sprintf("__k%d %s", j, k.Type))
			kcasts = append(kcasts, fmt.Sprintf("u.c%d::%s", j, k.Type))
			kparams = append(kparams, fmt.Sprintf("$%d::text[]", j+1))
			ucols = append(ucols, fmt.Sprintf("c%d", j))
		}
		s.Setup = append(s.Setup, fmt.Sprintf("CREATE TEMP TABLE IF NOT EXISTS __trellis_k%d (%s) ON COMMIT DELETE ROWS", i, strings.Join(kcols, ", ")))
		s.LoadSource = append(s.LoadSource, "INSERT INTO "+scopeKeysTable(i)+" SELECT DISTINCT "+strings.Join(kcasts, ", ")+
			" FROM unnest("+strings.Join(kparams, ", ")+") AS u("+strings.Join(ucols, ", ")+")")
		s.Analyze = append(s.Analyze, "ANALYZE "+scopeKeysTable(i))
	}
}

// enumLineage lists the keys of source c that the rows of table (the
// stored rows, or a mirror) hold, in key order, for rebuilds and
// truncation.
func enumLineage(p *Plan, c int, table string) (first, after string) {
	src := p.Sources[c]
	var text, order, cur []string
	for j, l := range src.Lineage {
		text = append(text, fmt.Sprintf("%s::text AS __e%d", ident(l), j))
		order = append(order, ident(l))
		cur = append(cur, fmt.Sprintf("$%d::%s", j+1, src.Key[j].Type))
	}
	from := table + " WHERE " + order[0] + " IS NOT NULL"
	first = fmt.Sprintf("SELECT %s FROM %s GROUP BY %s ORDER BY %s LIMIT $1", strings.Join(text, ", "), from,
		strings.Join(order, ", "), strings.Join(order, ", "))
	after = fmt.Sprintf("SELECT %s FROM %s AND (%s) > (%s) GROUP BY %s ORDER BY %s LIMIT $%d", strings.Join(text, ", "), from,
		strings.Join(order, ", "), strings.Join(cur, ", "), strings.Join(order, ", "), strings.Join(order, ", "), len(order)+1)
	return first, after
}

// scopeRows re-derives a row target's rows in scope: the new rows are
// collected once, the stored rows in scope that are no longer among them
// are deleted by address, and the new rows are upserted by lineage.
func scopeRows(s *Statements, p *Plan) {
	T := p.Target.Ident()
	names, sel := newRowsTable(s, p)
	s.Apply = append(s.Apply,
		Step{Role: RoleScope, SQL: "INSERT INTO " + scopeRowsTable + " (" + strings.Join(names, ", ") + ") " + scopeBranches(p, p.From, userWhere(p), sel, allSources(p))},
		Step{Role: RoleWrite, SQL: "DELETE FROM " + T + " WHERE ctid = ANY (ARRAY(" +
			storedBranches(p, T, "__t.ctid", "NOT EXISTS (SELECT 1 FROM "+scopeRowsTable+" __n WHERE "+lineageEq(p, "__n", "__t")+")", allSources(p)) + "))"},
		upsertNewRows(p, names))
}

// newRowsTable sets up the table of a row target's re-derived rows
// (scopeRowsTable) and returns its column names and the select items
// that fill it, over the user's FROM.
func newRowsTable(s *Statements, p *Plan) (names, sel []string) {
	var defs []string
	for _, c := range p.Cols {
		defs = append(defs, ident(c.Name)+" "+c.Type)
		names = append(names, ident(c.Name))
		sel = append(sel, c.Expr+" AS "+ident(c.Name))
	}
	s.Setup = append(s.Setup, "CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("+strings.Join(defs, ", ")+") ON COMMIT DELETE ROWS")
	return names, sel
}

// upsertNewRows writes the re-derived rows to the target by lineage,
// updating a stored row only where a value differs.
func upsertNewRows(p *Plan, names []string) Step {
	var set, oldv, newv []string
	for _, c := range p.Cols {
		if !contains(p.Identity, c.Name) {
			set = append(set, ident(c.Name)+" = EXCLUDED."+ident(c.Name))
			oldv = append(oldv, cmpExpr("__t."+ident(c.Name), c.TextCmp))
			newv = append(newv, cmpExpr("EXCLUDED."+ident(c.Name), c.TextCmp))
		}
	}
	conflict := " ON CONFLICT (" + identList(p.Identity) + ") DO NOTHING"
	if len(set) > 0 {
		conflict = " ON CONFLICT (" + identList(p.Identity) + ") DO UPDATE SET " + strings.Join(set, ", ") +
			" WHERE (" + strings.Join(append(oldv, "NULL"), ", ") + ") IS DISTINCT FROM (" + strings.Join(append(newv, "NULL"), ", ") + ")"
	}
	return Step{Role: RoleWrite, SQL: "INSERT INTO " + p.Target.Ident() + " AS __t (" + strings.Join(names, ", ") + ") SELECT " +
		strings.Join(names, ", ") + " FROM " + scopeRowsTable + conflict}
}

// windowPartsTable holds the partitions a window batch re-derives.
const windowPartsTable = "pg_temp.__trellis_wp"

// windowRows re-derives a window target by partition (ADR 0033): the
// partitions of the rows in scope, as the query gives them now and as the
// target stored them, are collected; the query runs again over the rows
// of those partitions only (a filter on the partition expressions keeps
// whole partitions, so every window sees all of its rows); the stored
// rows of those partitions that it no longer gives are deleted, and the
// rest upserted by lineage as scopeRows does. Without a partition every
// batch re-derives the whole target.
func windowRows(s *Statements, p *Plan) {
	T := p.Target.Ident()
	names, sel := newRowsTable(s, p)
	parts := p.Window.Partition
	inParts := func(exprs []string) string { return "true" }
	if len(parts) > 0 {
		var pdefs, pcols, psel, stored []string
		for i, c := range parts {
			pdefs = append(pdefs, fmt.Sprintf("__p%d %s", i, c.Type))
			pcols = append(pcols, fmt.Sprintf("__p%d", i))
			psel = append(psel, fmt.Sprintf("%s AS __p%d", c.Expr, i))
			stored = append(stored, "__t."+ident(c.Name))
		}
		s.Setup = append(s.Setup, "CREATE TEMP TABLE IF NOT EXISTS __trellis_wp ("+strings.Join(pdefs, ", ")+") ON COMMIT DELETE ROWS")
		was := " UNION ALL " + storedBranches(p, T, strings.Join(stored, ", "), "", allSources(p))
		if plant.Active(plant.WindowPartitionStale) {
			was = "" // planted: the partitions rows were stored in are not recomputed
		}
		s.Apply = append(s.Apply, Step{Role: RoleScope, SQL: "INSERT INTO " + windowPartsTable + " SELECT DISTINCT " + strings.Join(pcols, ", ") +
			" FROM (" + scopeBranches(p, p.From, userWhere(p), psel, allSources(p)) +
			was + ") __x(" + strings.Join(pcols, ", ") + ")"})
		// Each partition expression among the batch's values, NULL among
		// them when one is: a condition on each expression alone keeps
		// whole partitions (a superset of the batch's when there are
		// several), and an index on the expression serves it.
		inParts = func(exprs []string) string {
			var conds []string
			for i, e := range exprs {
				col := fmt.Sprintf("__p%d", i)
				in := e + " = ANY (ARRAY(SELECT " + col + " FROM " + windowPartsTable + "))"
				if strings.HasSuffix(parts[i].Type, "]") {
					in = "EXISTS (SELECT 1 FROM " + windowPartsTable + " WHERE " + col + " = " + e + ")"
				}
				conds = append(conds, "("+in+" OR ("+e+" IS NULL AND EXISTS (SELECT 1 FROM "+windowPartsTable+" WHERE "+col+" IS NULL)))")
			}
			return strings.Join(conds, " AND ")
		}
	}
	var pexprs, pstored []string
	for _, c := range parts {
		pexprs = append(pexprs, "("+c.Expr+")")
		pstored = append(pstored, "__t."+ident(c.Name))
	}
	s.Apply = append(s.Apply,
		Step{Role: RoleScope, SQL: "INSERT INTO " + scopeRowsTable + " (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(sel, ", ") +
			" FROM " + p.From + " WHERE " + userWhere(p) + " AND " + inParts(pexprs)},
		Step{Role: RoleWrite, SQL: "DELETE FROM " + T + " __t WHERE " + inParts(pstored) +
			" AND NOT EXISTS (SELECT 1 FROM " + scopeRowsTable + " __n WHERE " + lineageEq(p, "__n", "__t") + ")"},
		upsertNewRows(p, names))
	if plant.Active(plant.TopKNoRefill) {
		// Planted: stored rows keep their values (ranks go stale).
		up := &s.Apply[len(s.Apply)-1]
		up.SQL = up.SQL[:strings.Index(up.SQL, " ON CONFLICT")] + " ON CONFLICT (" + identList(p.Identity) + ") DO NOTHING"
	}
}

// underJoin are the sources below an outer join.
func underJoin(oj OuterJoin) []int { return append(append([]int{}, oj.Left...), oj.Right...) }

// mirrorSteps keep a mirrored outer join's matches: the matches in scope
// are deleted and made again from the join as an inner join. They run
// after the widening, which reads the mirror as it was.
func mirrorSteps(p *Plan, oj OuterJoin) []Step {
	M := oj.Mirror.Ident()
	under := underJoin(oj)
	var cols, sel []string
	for _, i := range under {
		cols = append(cols, identList(p.Sources[i].Lineage))
		sel = append(sel, sourceKeyRefs(p, i)...)
	}
	return []Step{
		{Role: RoleScope, SQL: "DELETE FROM " + M + " WHERE ctid = ANY (ARRAY(" + storedBranches(p, M, "__t.ctid", "", under) + "))"},
		{Role: RoleScope, SQL: "INSERT INTO " + M + " (" + strings.Join(cols, ", ") + ") " + scopeBranches(p, oj.Inner, "true", sel, under) + " ON CONFLICT DO NOTHING"},
	}
}
