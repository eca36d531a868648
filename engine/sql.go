package engine

import (
	"fmt"
	"strings"
)

// Statements are the SQL texts one applier runs for its transform. They are
// generated once from the plan; every value travels as a parameter.
type Statements struct {
	// Setup creates the applier session's temporary tables.
	Setup []string
	// Clear empties them at the start of a transaction, when they are not
	// emptied at every commit (forTransform; "" otherwise).
	Clear string
	// IntKey: the source key is one integer column, and the applier passes
	// a batch's keys as one sorted, distinct bigint[] and its first and
	// last key as bigint bounds (see intKey).
	IntKey bool
	// LoadKeys inserts the batch's keys into the key table: one text[]
	// parameter per key column, or under IntKey the bigint[] ("" when no
	// step reads the key table).
	LoadKeys string
	// LoadSource fill a plan of several sources' key tables, one per source
	// (its key columns as text[] parameters); Analyze then counts them.
	LoadSource []string
	Analyze    []string
	// LoadBounds records the batch's first and last key value for
	// keyBounds, after LoadKeys ("" under IntKey, where the bounds are
	// parameters, when the key type does not qualify, or when no step
	// reads them).
	LoadBounds string
	// AnalyzeKeys counts the key table's rows after LoadKeys.
	AnalyzeKeys string
	// Apply re-derives the loaded keys and writes ledger and target, in order.
	Apply []Step
	// Enum are the build's walks, one per phase (ADR 0010): the keys of
	// each cover source, then the keys each holds in the target or ledger
	// (rebuilds and truncation: orphans).
	Enum []Enum
	// Reconcile recomputes an aggregate target wholly from its ledger
	// (the last step of a rebuild: repairs a target written by others).
	Reconcile []string
	// RangeBuild, when set, copies the first build phase's chunks by key
	// range (ADR 0020).
	RangeBuild *RangeBuild

	// temps are the temporary tables Setup creates, once named after a
	// transform (forTransform).
	temps []string
}

// Enum lists one source's keys in key order, as text: First is the first
// page ($1 = LIMIT), After the pages after a cursor ($1.. = cursor values,
// then LIMIT).
type Enum struct {
	Source int
	Stored bool
	First  string
	After  string
}

// Step is one statement of an apply transaction and what it does.
type Step struct {
	SQL  string
	Role StepRole
	// EmptyClause, when set, is the part of SQL that deletes groups left
	// without rows (a planted bug removes it).
	EmptyClause string
	// KeyArgs: the statement reads the batch's keys from its parameters
	// (IntKey only: $1 the bigint[] of keys, $2 and $3 the first and
	// last) rather than from the key table.
	KeyArgs bool
	// BoundArgs: the statement reads the key table, bounded by the
	// batch's first and last key as its parameters $1 and $2 (IntKey
	// only; see keyBounds).
	BoundArgs bool
	// ExpectChanges: the statement writes one row per row of the changes
	// table, which the applier checks (a mismatch fails the batch).
	ExpectChanges bool
}

// StepRole says what an apply statement writes.
type StepRole int

// The roles of apply statements.
const (
	// RoleRows re-derives a row transform's target and returns the count.
	RoleRows StepRole = iota + 1
	// RoleMerge re-derives a row transform's target with MERGE; the
	// command tag counts the rows written.
	RoleMerge
	// RoleChanges collects an aggregate's changed contributions.
	RoleChanges
	// RoleLedger writes the ledger.
	RoleLedger
	// RoleTarget applies group deltas to the target.
	RoleTarget
	// RoleRecompute recomputes non-invertible aggregates from the ledger.
	RoleRecompute
	// RoleEmptyGroups deletes groups whose row count reached zero.
	RoleEmptyGroups
	// RoleScope fills the session's key and row tables of a lineage scope
	// (ADR 0010); it writes nothing the user sees.
	RoleScope
	// RoleExpand widens a lineage scope across an outer join (ADR 0010).
	RoleExpand
	// RoleWrite writes a row target; the command tag counts the rows.
	RoleWrite
	// RoleProject writes an aggregate's target from its state (ADR 0011).
	RoleProject
	// RolePlanner sets a planner setting for the statements after it, in
	// the apply transaction; it writes nothing.
	RolePlanner
)

const keysTable = "pg_temp.__trellis_k"
const changesTable = "pg_temp.__trellis_c"
const emptyTable = "pg_temp.__trellis_e"
const boundsTable = "pg_temp.__trellis_b"

// nullSafeEq compares two expressions with NULL equal to NULL in a form
// PostgreSQL can still drive through a btree index (a BitmapOr of `=` and
// `IS NULL`); IS NOT DISTINCT FROM cannot use an index at all.
func nullSafeEq(a, b string, notNull bool) string {
	if notNull {
		return a + " = " + b
	}
	return "(" + a + " = " + b + " OR (" + a + " IS NULL AND " + b + " IS NULL))"
}

func cmpExpr(e string, textCmp bool) string {
	if textCmp {
		return "(" + e + ")::text"
	}
	return e
}

// boundable: the first key column's type orders without a collation, so
// bounds taken from the key table compare exactly as it sorts.
func boundable(p *Plan) bool {
	for _, pre := range []string{"smallint", "integer", "bigint", "numeric", "date", "timestamp", "uuid"} {
		if strings.HasPrefix(p.Sources[0].Key[0].Type, pre) {
			return true
		}
	}
	return false
}

// intKey: the key is one smallint, integer or bigint column. Its text is
// canonical and parses exactly, so the applier sorts and de-duplicates a
// batch's keys itself and sends them as one bigint[], with its first and
// last key: no text casts, no DISTINCT, no bounds query. A row transform
// then re-derives straight from the array, without the key table or its
// ANALYZE (an array parameter's length is known to the planner). Together
// about a fifth of a 10k-key row batch (ADR 0008).
func intKey(p *Plan) bool {
	if len(p.Sources[0].Key) != 1 {
		return false
	}
	switch p.Sources[0].Key[0].Type {
	case "smallint", "integer", "bigint":
		return true
	}
	return false
}

// keyArray is the FROM item __k(__k0) of a KeyArgs statement: the keys of
// its first parameter, in the key column's type.
func keyArray(p *Plan) string {
	return "(SELECT __u::" + p.Sources[0].Key[0].Type + " AS __k0 FROM unnest($1::bigint[]) AS __u) __k"
}

// argBounds is keyBounds for a KeyArgs statement: the bounds are its
// second and third parameters.
func argBounds(col string) string {
	return " AND " + col + " >= $2::bigint AND " + col + " <= $3::bigint"
}

// keyBounds is a redundant condition " AND col BETWEEN the batch's
// smallest and largest first key value", or "" when the key type does not
// qualify. PostgreSQL's merge join reads an index from its start, not from
// the other side's first key: without the bounds, re-deriving a batch of
// neighbouring keys far into a big table scans every index entry before
// them, in each statement. Under IntKey the applier knows the values and
// passes them as the statement's parameters $1 and $2 (Step.BoundArgs):
// the planner then sees the range, and chooses per batch between a range
// scan (neighbouring keys) and index probes (keys scattered over the
// table, where a range priced at its default selectivity read the whole
// index: ADR 0016). Otherwise they are found once per batch
// (LoadBounds), not by each statement, and read from the bounds table.
func keyBounds(p *Plan, col string) string {
	switch {
	case p.Multi() || !boundable(p):
		return ""
	case intKey(p):
		return " AND " + col + " >= $1::bigint AND " + col + " <= $2::bigint"
	}
	return " AND " + col + " >= (SELECT __lo FROM " + boundsTable + ") AND " + col + " <= (SELECT __hi FROM " + boundsTable + ")"
}

// boundArgs says whether keyBounds makes parameters of a one-source plan's
// bounds (the statements using them are then BoundArgs).
func boundArgs(p *Plan) bool { return !p.Multi() && boundable(p) && intKey(p) }

// BuildStatements generates the applier SQL for a plan, for a server of
// the given version (server_version_num; MERGE needs 150000).
func BuildStatements(p *Plan, serverVersion int) *Statements {
	if p.Recursive != nil {
		return buildRecursive(p)
	}
	if p.Multi() {
		return buildScope(p, serverVersion >= 150000)
	}
	s := &Statements{IntKey: intKey(p)}
	src := p.Sources[0]
	first, after := enumSource(src)
	s.Enum = append(s.Enum, Enum{Source: 0, First: first, After: after})
	if p.Shape == ShapeRow {
		first, after = enumIdentities(p)
		s.Enum = append(s.Enum, Enum{Source: 0, Stored: true, First: first, After: after})
		if serverVersion >= 150000 && s.IntKey {
			s.Apply = []Step{{Role: RoleMerge, SQL: mergeRow(p, true), KeyArgs: true}}
			s.RangeBuild = rangeBuild(p)
			return s
		}
	}
	loadKeyTable(s, p)
	ref := ident(src.Ref)
	var joinK []string
	for i, k := range src.Key {
		joinK = append(joinK, fmt.Sprintf("%s.%s = __k.__k%d", ref, ident(k.Name), i))
	}
	fromK := src.From + " JOIN " + keysTable + " __k ON " + strings.Join(joinK, " AND ") +
		keyBounds(p, fmt.Sprintf("%s.%s", ref, ident(src.Key[0].Name)))
	where := ""
	if p.Where != "" {
		where = " WHERE (" + p.Where + ")"
	}
	switch {
	case p.Shape != ShapeRow:
		first, after = enumLedger(p)
		s.Enum = append(s.Enum, Enum{Source: 0, Stored: true, First: first, After: after})
		// The changes table takes its columns from the query without
		// parameters: a CREATE TABLE AS takes none.
		shape := singleChanges(p, keysTable+" __k", noBounds, where)
		if s.IntKey {
			// Only the changes query reads the keys: from the array, whose
			// length the planner knows, so no key table is filled and
			// analyzed per batch (ADR 0016).
			s.LoadKeys = ""
			buildAggregate(s, p, Step{Role: RoleChanges, SQL: "INSERT INTO " + changesTable + " " + singleChanges(p, keyArray(p), argBounds, where), KeyArgs: true},
				shape, serverVersion >= 150000)
			s.RangeBuild = rangeBuildAgg(p, where)
			break
		}
		changes := singleChanges(p, keysTable+" __k", func(col string) string { return keyBounds(p, col) }, where)
		buildAggregate(s, p, Step{Role: RoleChanges, SQL: "INSERT INTO " + changesTable + " " + changes}, shape, serverVersion >= 150000)
	case serverVersion >= 150000:
		s.Apply = []Step{{Role: RoleMerge, SQL: mergeRow(p, false)}}
	default:
		s.Apply = []Step{upsertRow(p, fromK, where)}
	}
	return s
}

// loadKeyTable sets up the key table (and the bounds table) that the
// apply statements join, and the statements that fill them per batch.
func loadKeyTable(s *Statements, p *Plan) {
	var kcols, kcasts, kparams, ucols []string
	for i, k := range p.Sources[0].Key {
		kcols = append(kcols, fmt.Sprintf("__k%d %s", i, k.Type))
		kcasts = append(kcasts, fmt.Sprintf("u.c%d::%s", i, k.Type))
		kparams = append(kparams, fmt.Sprintf("$%d::text[]", i+1))
		ucols = append(ucols, fmt.Sprintf("c%d", i))
	}
	s.Setup = append(s.Setup, "CREATE TEMP TABLE IF NOT EXISTS __trellis_k ("+strings.Join(kcols, ", ")+") ON COMMIT DELETE ROWS")
	s.AnalyzeKeys = "ANALYZE " + keysTable
	if s.IntKey {
		s.LoadKeys = "INSERT INTO " + keysTable + " SELECT __u FROM unnest($1::bigint[]) AS __u"
	} else {
		s.LoadKeys = "INSERT INTO " + keysTable + " SELECT DISTINCT " + strings.Join(kcasts, ", ") +
			" FROM unnest(" + strings.Join(kparams, ", ") + ") AS u(" + strings.Join(ucols, ", ") + ")"
	}
	if !boundable(p) || s.IntKey {
		return // no bounds, or bounds as parameters (keyBounds)
	}
	typ := p.Sources[0].Key[0].Type
	s.Setup = append(s.Setup, fmt.Sprintf("CREATE TEMP TABLE IF NOT EXISTS __trellis_b (__lo %s, __hi %s) ON COMMIT DELETE ROWS", typ, typ))
	s.LoadBounds = "INSERT INTO " + boundsTable + " SELECT (SELECT __k0 FROM " + keysTable + " ORDER BY __k0 LIMIT 1), (SELECT __k0 FROM " +
		keysTable + " ORDER BY __k0 DESC LIMIT 1)"
}

// enumSource lists source keys in key order, for builds: the first page,
// and the pages after a cursor.
func enumSource(src Source) (first, after string) {
	var keyText, keyOrder, cur []string
	// The text outputs get their own names: ORDER BY resolves output names
	// first, and ordering by the text form would not match the cursor.
	for i, k := range src.Key {
		keyText = append(keyText, fmt.Sprintf("%s::text AS __e%d", ident(k.Name), i))
		keyOrder = append(keyOrder, ident(k.Name))
		cur = append(cur, fmt.Sprintf("$%d::%s", i+1, k.Type))
	}
	srcTable := src.Ident()
	if strings.HasPrefix(src.From, "ONLY ") {
		srcTable = "ONLY " + srcTable
	}
	first = fmt.Sprintf("SELECT %s FROM %s ORDER BY %s LIMIT $1",
		strings.Join(keyText, ", "), srcTable, strings.Join(keyOrder, ", "))
	after = fmt.Sprintf("SELECT %s FROM %s WHERE (%s) > (%s) ORDER BY %s LIMIT $%d",
		strings.Join(keyText, ", "), srcTable, strings.Join(keyOrder, ", "), strings.Join(cur, ", "),
		strings.Join(keyOrder, ", "), len(src.Key)+1)
	return first, after
}

// upsertRow re-derives a row transform's keys on servers without MERGE:
// the rows whose source left are deleted, the others upserted.
func upsertRow(p *Plan, fromK, where string) Step {
	var sel, names, idEq, idKeyEq, set, oldVals, newVals []string
	for _, c := range p.Cols {
		sel = append(sel, c.Expr+" AS "+ident(c.Name))
		names = append(names, ident(c.Name))
	}
	for i, id := range p.Identity {
		// Correlate with the key, not the target row: the anti-join of two
		// small sets comes first and the target is only probed by key.
		idEq = append(idEq, fmt.Sprintf("__n.%s = __k.__k%d", ident(id), i))
		idKeyEq = append(idKeyEq, fmt.Sprintf("__t.%s = __k.__k%d", ident(id), i))
	}
	for _, c := range p.Cols {
		if contains(p.Identity, c.Name) {
			continue
		}
		set = append(set, ident(c.Name)+" = EXCLUDED."+ident(c.Name))
		oldVals = append(oldVals, cmpExpr("__t."+ident(c.Name), c.TextCmp))
		newVals = append(newVals, cmpExpr("EXCLUDED."+ident(c.Name), c.TextCmp))
	}
	conflict := " ON CONFLICT (" + identList(p.Identity) + ") DO NOTHING"
	if len(set) > 0 {
		conflict = " ON CONFLICT (" + identList(p.Identity) + ") DO UPDATE SET " + strings.Join(set, ", ") +
			" WHERE (" + strings.Join(oldVals, ", ") + ", NULL) IS DISTINCT FROM (" + strings.Join(newVals, ", ") + ", NULL)"
	}
	t := p.Target.Ident()
	// Keys whose row left are found first (an anti-join of two small sets,
	// kept apart by OFFSET 0), then probed in the target.
	return Step{Role: RoleRows, SQL: "WITH __n AS (SELECT " + strings.Join(sel, ", ") + " FROM " + fromK + where + "),\n" +
		" __d AS (DELETE FROM " + t + " __t USING (SELECT __k.* FROM " + keysTable + " __k WHERE NOT EXISTS (SELECT 1 FROM __n WHERE " +
		strings.Join(idEq, " AND ") + ") OFFSET 0) __k WHERE " + strings.Join(idKeyEq, " AND ") +
		keyBounds(p, "__t."+ident(p.Identity[0])) + " RETURNING 1),\n" +
		" __u AS (INSERT INTO " + t + " AS __t (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(names, ", ") +
		" FROM __n" + conflict + " RETURNING 1)\n" +
		"SELECT (SELECT count(*) FROM __d) + (SELECT count(*) FROM __u)", BoundArgs: boundArgs(p)}
}

// enumIdentities lists a row target's identities in key order, for
// rebuilds and truncation: the first page, and the pages after a cursor.
func enumIdentities(p *Plan) (first, after string) {
	t := p.Target.Ident()
	var idText, idOrder, cur []string
	for i, id := range p.Identity {
		idText = append(idText, fmt.Sprintf("%s::text AS __e%d", ident(id), i))
		idOrder = append(idOrder, ident(id))
		cur = append(cur, fmt.Sprintf("$%d::%s", i+1, p.Sources[0].Key[i].Type))
	}
	first = fmt.Sprintf("SELECT %s FROM %s ORDER BY %s LIMIT $1", strings.Join(idText, ", "), t, strings.Join(idOrder, ", "))
	after = fmt.Sprintf("SELECT %s FROM %s WHERE (%s) > (%s) ORDER BY %s LIMIT $%d", strings.Join(idText, ", "), t,
		strings.Join(idOrder, ", "), strings.Join(cur, ", "), strings.Join(idOrder, ", "), len(p.Identity)+1)
	return first, after
}

// enumLedger lists the identities an aggregate's ledger holds, in key
// order: the first page, and the pages after a cursor.
func enumLedger(p *Plan) (first, after string) {
	nk := len(p.Sources[0].Key)
	L := p.Ledger.Ident()
	var lk, cur, lkText []string
	for i, k := range p.Sources[0].Key {
		lk = append(lk, fmt.Sprintf("__k%d", i))
		cur = append(cur, fmt.Sprintf("$%d::%s", i+1, k.Type))
		lkText = append(lkText, fmt.Sprintf("__k%d::text AS __e%d", i, i))
	}
	first = fmt.Sprintf("SELECT %s FROM %s ORDER BY %s LIMIT $1", strings.Join(lkText, ", "), L, strings.Join(lk, ", "))
	after = fmt.Sprintf("SELECT %s FROM %s WHERE (%s) > (%s) ORDER BY %s LIMIT $%d", strings.Join(lkText, ", "), L,
		strings.Join(lk, ", "), strings.Join(cur, ", "), strings.Join(lk, ", "), nk+1)
	return first, after
}

// noBounds is the bounds of a statement that has none.
func noBounds(string) string { return "" }

// singleChanges is the query of a one-source aggregate's changed
// contributions: the new ledger rows (where) of the batch's keys (the FROM
// item keys, named __k), full-joined to their old ones; bounds(col) is the
// redundant key-range condition on a key column (keyBounds).
func singleChanges(p *Plan, keys string, bounds func(col string) string, where string) string {
	src := p.Sources[0]
	ref := ident(src.Ref)
	var joinK, keyCols, ljoin []string
	for i, k := range src.Key {
		joinK = append(joinK, fmt.Sprintf("%s.%s = __k.__k%d", ref, ident(k.Name), i))
		keyCols = append(keyCols, fmt.Sprintf("__k.__k%d", i))
		ljoin = append(ljoin, fmt.Sprintf("__l.__k%d = __k.__k%d", i, i))
	}
	fromK := src.From + " JOIN " + keys + " ON " + strings.Join(joinK, " AND ") + bounds(ref+"."+ident(src.Key[0].Name)) + p.setsJoin()
	if p.Grouping != nil {
		keyCols = append(keyCols, setsRef+"."+ident(SetCol))
	}
	return changesOver(p, keyCols, fromK+where,
		"SELECT __l.*, __l.ctid AS __ot FROM "+p.Ledger.Ident()+" __l JOIN "+keys+" ON "+strings.Join(ljoin, " AND ")+bounds("__l.__k0"))
}

// changesOver is the changes query of a single-source aggregate: the new
// contributions, keyed by keyCols (as __k0, …), of the source rows from
// (a FROM item with its conditions), full-joined by key with the ledger
// rows that ledger (a query) reads.
func changesOver(p *Plan, keyCols []string, from, ledger string) string {
	var nsel []string
	for i, k := range keyCols {
		nsel = append(nsel, fmt.Sprintf("%s AS __k%d", k, i))
	}
	for i, g := range p.Groups {
		nsel = append(nsel, fmt.Sprintf("%s AS __g%d", g.Expr, i))
	}
	for _, a := range p.Args {
		nsel = append(nsel, a.Expr+" AS "+ident(a.Name))
	}
	var fjoin, ck, csel []string
	for i := range keyCols {
		fjoin = append(fjoin, fmt.Sprintf("__n.__k%d = __o.__k%d", i, i))
		ck = append(ck, fmt.Sprintf("coalesce(__n.__k%d, __o.__k%d) AS __k%d", i, i, i))
	}
	csel = append(csel, ck...)
	csel = append(csel, "(__o.__k0 IS NOT NULL) AS __had", "(__n.__k0 IS NOT NULL) AS __has")
	sel, differs := changedContributions(p)
	return "SELECT " + strings.Join(append(csel, sel...), ", ") +
		" FROM (SELECT " + strings.Join(nsel, ", ") + " FROM " + from + ") __n" +
		" FULL JOIN (" + ledger + ") __o" +
		" ON " + strings.Join(fjoin, " AND ") +
		" WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR " + differs
}

// changedContributions are the old and new group keys and arguments of a
// changes query over __o (old ledger row) and __n (new one), and the
// condition that they differ.
func changedContributions(p *Plan) (sel []string, differs string) {
	var oldv, newv []string
	// Where the old ledger row is, so that the ledger's MERGE goes
	// straight to it (ledgerSteps).
	sel = append(sel, "__o.__ot")
	for i, g := range p.Groups {
		sel = append(sel, fmt.Sprintf("__o.__g%d AS __og%d", i, i), fmt.Sprintf("__n.__g%d AS __ng%d", i, i))
		oldv = append(oldv, cmpExpr(fmt.Sprintf("__o.__g%d", i), g.TextCmp))
		newv = append(newv, cmpExpr(fmt.Sprintf("__n.__g%d", i), g.TextCmp))
	}
	for i, a := range p.Args {
		sel = append(sel, fmt.Sprintf("__o.%s AS __oa%d", ident(a.Name), i), fmt.Sprintf("__n.%s AS __na%d", ident(a.Name), i))
		oldv = append(oldv, cmpExpr("__o."+ident(a.Name), a.TextCmp))
		newv = append(newv, cmpExpr("__n."+ident(a.Name), a.TextCmp))
	}
	return sel, "(" + strings.Join(append(oldv, "NULL"), ", ") + ") IS DISTINCT FROM (" + strings.Join(append(newv, "NULL"), ", ") + ")"
}

// buildAggregate generates an aggregate's apply statements from the step
// that fills the changes table with its changed contributions (and the
// query of those without parameters, for the shape of the table); merge:
// the server has MERGE (15+).
func buildAggregate(s *Statements, p *Plan, changes Step, shape string, merge bool) {
	ng := len(p.Groups)
	L := p.Ledger.Ident()
	T := p.aggTarget().Ident()
	s.Reconcile = reconcileAggregate(p)
	defer projectSteps(s, p)
	s.Setup = append(s.Setup, "CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS "+shape+" WITH NO DATA")
	s.Apply = append(s.Apply, changes)

	s.Apply = append(s.Apply, ledgerSteps(p, merge)...)

	// Signed contributions: -old, +new.
	contrib := func(sign, pre string, filter string) string {
		var cols []string
		for i := 0; i < ng; i++ {
			cols = append(cols, fmt.Sprintf("__%sg%d AS __g%d", pre, i, i))
		}
		cols = append(cols, sign+"1 AS __dn")
		for i, a := range p.Aggs {
			if a.Arg < 0 {
				continue
			}
			v := fmt.Sprintf("__%sa%d", pre, a.Arg)
			switch a.Mode {
			case ModeCount, ModeSum, ModeAvg, ModeNumeric:
				cols = append(cols, fmt.Sprintf("%s(CASE WHEN %s IS NULL THEN 0 ELSE 1 END) AS __nn%d", sign, v, i))
			}
			switch a.Mode {
			case ModeNumeric:
				finite, scales, special := numericParts(v)
				d := numericDeltas(i)
				cols = append(cols, fmt.Sprintf("%s(%s) AS %s", sign, finite, d[0]), fmt.Sprintf("%s(%s) AS %s", sign, scales, d[2]),
					fmt.Sprintf("%s(%s) AS %s", sign, special, d[3]))
			case ModeSum:
				cols = append(cols, fmt.Sprintf("%s(%s::%s) AS __s%d", sign, v, a.Type, i))
			case ModeAvg:
				cols = append(cols, fmt.Sprintf("%s(%s::numeric) AS __s%d", sign, v, i))
			case ModeExtreme:
				cols = append(cols, fmt.Sprintf("%s AS __x%d", v, i))
			}
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + changesTable + " WHERE " + filter
	}
	deltas := contrib("-", "o", "__had") + " UNION ALL " + contrib("", "n", "__has")
	var dsel, nonzero []string
	var gcols []string
	for i := 0; i < ng; i++ {
		gcols = append(gcols, fmt.Sprintf("__g%d", i))
	}
	dsel = append(dsel, gcols...)
	dsel = append(dsel, "sum(__dn) AS __dn")
	nonzero = append(nonzero, "sum(__dn) <> 0")
	for i, a := range p.Aggs {
		switch a.Mode {
		case ModeCount:
			dsel = append(dsel, fmt.Sprintf("sum(__nn%d) AS __nn%d", i, i))
			nonzero = append(nonzero, fmt.Sprintf("sum(__nn%d) <> 0", i))
		case ModeSum, ModeAvg:
			dsel = append(dsel, fmt.Sprintf("sum(__nn%d) AS __nn%d", i, i), fmt.Sprintf("sum(__s%d) AS __s%d", i, i))
			nonzero = append(nonzero, fmt.Sprintf("sum(__nn%d) <> 0", i), fmt.Sprintf("coalesce(sum(__s%d), 0) <> 0", i))
		case ModeNumeric:
			d := numericDeltas(i)
			for _, k := range []int{1, 0, 2, 3} {
				dsel = append(dsel, fmt.Sprintf("sum(%s) AS %[1]s", d[k]))
				nonzero = append(nonzero, fmt.Sprintf("sum(%s) <> 0", d[k]))
			}
		case ModeExtreme:
			// The extreme of the values added; removals are handled by
			// the recompute step.
			added := fmt.Sprintf("%s(__x%d) FILTER (WHERE __dn > 0)", a.Func, i)
			dsel = append(dsel, added+fmt.Sprintf(" AS __x%d", i))
			nonzero = append(nonzero, added+" IS NOT NULL")
		}
	}
	grouped := "SELECT " + strings.Join(dsel, ", ") + " FROM (" + deltas + ") __x"
	if ng > 0 {
		grouped += " GROUP BY " + strings.Join(gcols, ", ")
	}
	grouped += " HAVING " + strings.Join(nonzero, " OR ")

	// Target columns and their values for a new group (deltas are absolute
	// there); an existing one gets old + delta (targetSet).
	var tcols, tins []string
	val := map[string]string{}
	add := func(col, v string) {
		tcols, tins, val[col] = append(tcols, col), append(tins, v), v
	}
	for i, g := range p.Groups {
		add(ident(g.Name), fmt.Sprintf("__d.__g%d", i))
	}
	add(ident(RowsCol), "__d.__dn")
	for i, a := range p.Aggs {
		c := ident(a.Name)
		switch a.Mode {
		case ModeCountStar:
			add(c, "__d.__dn")
		case ModeCount:
			add(c, fmt.Sprintf("__d.__nn%d", i))
		case ModeExtreme:
			add(c, fmt.Sprintf("__d.__x%d", i))
		case ModeSum:
			add(c, fmt.Sprintf("__d.__s%d", i))
			add(ident(a.NNCol()), fmt.Sprintf("__d.__nn%d", i))
		case ModeNumeric:
			var d [4]string
			for k, name := range numericDeltas(i) {
				d[k] = "__d." + name
			}
			add(c, numericValue(a, d[0], d[1], d[2], d[3]))
			for k, col := range numericState(a) {
				add(col, d[k])
			}
		case ModeAvg:
			add(c, fmt.Sprintf("CASE WHEN __d.__nn%d = 0 THEN NULL ELSE coalesce(__d.__s%d, 0) / __d.__nn%d END", i, i, i))
			add(ident(a.SumCol()), fmt.Sprintf("coalesce(__d.__s%d, 0)", i))
			add(ident(a.NNCol()), fmt.Sprintf("__d.__nn%d", i))
		}
	}
	switch {
	case ng > 0 && merge && p.groupsNotNull():
		// One MERGE: matched groups take their deltas, or are deleted when
		// their row count reaches zero; new groups are inserted. A fifth
		// cheaper than the upsert, which finds every existing group twice
		// (ADR 0008). Group keys that may be NULL cannot be joined by `=`.
		var on []string
		for i, g := range p.Groups {
			on = append(on, fmt.Sprintf("__t.%s = __d.__g%d", ident(g.Name), i))
		}
		rows := ident(RowsCol)
		empty := " WHEN MATCHED AND __t." + rows + " + __d.__dn = 0" + p.keepEmptySet("__t."+ident(SetCol)) + " THEN DELETE"
		s.Apply = append(s.Apply, Step{Role: RoleTarget, EmptyClause: empty, SQL: "MERGE INTO " + T + " __t USING (" + grouped + ") __d ON " +
			strings.Join(on, " AND ") + empty +
			" WHEN MATCHED THEN UPDATE SET " + strings.Join(targetSet(p, func(c string) string { return val[c] }), ", ") +
			" WHEN NOT MATCHED THEN INSERT (" + strings.Join(tcols, ", ") + ") VALUES (" + strings.Join(tins, ", ") + ")"})
	case ng > 0:
		// Groups whose row count reaches zero are remembered by row address
		// and deleted by it: found through the upsert itself, never by
		// scanning the target.
		s.Setup = append(s.Setup, "CREATE TEMP TABLE IF NOT EXISTS __trellis_e (__tid tid) ON COMMIT DELETE ROWS")
		s.Apply = append(s.Apply, Step{Role: RoleTarget, SQL: "WITH __u AS (INSERT INTO " + T + " AS __t (" + strings.Join(tcols, ", ") + ") SELECT " + strings.Join(tins, ", ") +
			" FROM (" + grouped + ") __d ON CONFLICT (" + identList(p.groupNames()) + ") DO UPDATE SET " +
			strings.Join(targetSet(p, func(c string) string { return "EXCLUDED." + c }), ", ") +
			" RETURNING __t.ctid AS __tid, __t." + ident(RowsCol) + " AS __n" + returnSet(p) + ") INSERT INTO " + emptyTable +
			" SELECT __tid FROM __u WHERE __n = 0" + p.keepEmptySet("__u.__gset")})
		s.Apply = append(s.Apply, Step{Role: RoleEmptyGroups, SQL: "DELETE FROM " + T + " WHERE ctid = ANY (ARRAY(SELECT __tid FROM " + emptyTable + "))"})
	default:
		// One row that always exists: update it in place.
		s.Apply = append(s.Apply, Step{Role: RoleTarget, SQL: "UPDATE " + T + " __t SET " + oneRowSet(p) + " FROM (" + grouped + ") __d"})
	}
	if st, ok := extremeRecompute(p); ok {
		s.Apply = append(s.Apply, Step{Role: RoleRecompute, SQL: st})
	}
	if !p.hasRecompute() {
		return
	}
	var rsel, rset, rold, rnew []string
	for i, a := range p.Aggs {
		if a.Mode != ModeRecompute {
			continue
		}
		rsel = append(rsel, fmt.Sprintf("%s AS __r%d", recomputeCall(p, a), i))
		rset = append(rset, fmt.Sprintf("%s = __r.__r%d", ident(a.Name), i))
		rold = append(rold, fmt.Sprintf("__x.__o%d", i))
		rnew = append(rnew, fmt.Sprintf("__z.__r%d", i))
	}
	distinct := "(" + strings.Join(append(rold, "NULL"), ", ") + ") IS DISTINCT FROM (" + strings.Join(append(rnew, "NULL"), ", ") + ")"
	if ng == 0 {
		var olds []string
		for i, a := range p.Aggs {
			if a.Mode == ModeRecompute {
				olds = append(olds, fmt.Sprintf("%s AS __o%d", ident(a.Name), i))
			}
		}
		s.Apply = append(s.Apply, Step{Role: RoleRecompute, SQL: "UPDATE " + T + " __t SET " + strings.Join(rset, ", ") +
			" FROM (SELECT __z.* FROM (SELECT " + strings.Join(olds, ", ") + " FROM " + T + ") __x, (SELECT " + strings.Join(rsel, ", ") +
			" FROM " + L + " __l) __z WHERE EXISTS (SELECT 1 FROM " + changesTable + ") AND " + distinct + ") __r"})
		return
	}
	// Affected groups: every group a changed row left or entered. Each is
	// probed in the target and the ledger through their group-key indexes
	// (LATERAL … OFFSET 0 keeps PostgreSQL from turning the probes into a
	// scan), then the target row is updated by its address.
	var og, ngs, ajoin, tjoin, olds []string
	for i, g := range p.Groups {
		og = append(og, fmt.Sprintf("__og%d AS __g%d", i, i))
		ngs = append(ngs, fmt.Sprintf("__ng%d", i))
		ajoin = append(ajoin, nullSafeEq(fmt.Sprintf("__l.__g%d", i), fmt.Sprintf("__a.__g%d", i), g.NotNull))
		tjoin = append(tjoin, nullSafeEq("__y."+ident(g.Name), fmt.Sprintf("__a.__g%d", i), g.NotNull))
	}
	for i, a := range p.Aggs {
		if a.Mode == ModeRecompute {
			olds = append(olds, fmt.Sprintf("__y.%s AS __o%d", ident(a.Name), i))
		}
	}
	affected := "SELECT " + strings.Join(og, ", ") + " FROM " + changesTable + " WHERE __had UNION SELECT " +
		strings.Join(ngs, ", ") + " FROM " + changesTable + " WHERE __has"
	s.Apply = append(s.Apply, Step{Role: RoleRecompute, SQL: "UPDATE " + T + " __t SET " + strings.Join(rset, ", ") +
		" FROM (SELECT __x.__tid, __z.* FROM (" + affected + ") __a" +
		" CROSS JOIN LATERAL (SELECT __y.ctid AS __tid, " + strings.Join(olds, ", ") + " FROM " + T + " __y WHERE " + strings.Join(tjoin, " AND ") + " OFFSET 0) __x" +
		" CROSS JOIN LATERAL (SELECT " + strings.Join(rsel, ", ") + " FROM " + L + " __l WHERE " + strings.Join(ajoin, " AND ") + ") __z" +
		" WHERE " + distinct + ") __r WHERE __t.ctid = __r.__tid"})
}

// returnSet returns a grouping-sets target row's set beside its row
// count, when the empty set's row must outlive its rows.
func returnSet(p *Plan) string {
	if _, ok := p.emptySet(); ok {
		return ", __t." + ident(SetCol) + " AS __gset"
	}
	return ""
}

// recomputeCall is a recomputed aggregate over the ledger rows __l of a
// group.
func recomputeCall(p *Plan, a AggCol) string {
	if a.Call != "" {
		return a.Call
	}
	arg := "*"
	if a.Arg >= 0 {
		arg = "__l." + ident(p.Args[a.Arg].Name)
	}
	return a.Func + "(" + arg + ")"
}

// mergeRow re-derives a row transform's keys in one MERGE: each key joined
// to its source row (NULL when the row is gone or fails WHERE) and to its
// target row; a target row is deleted, updated when it differs, or inserted.
// About a third cheaper than the upsert with a delete CTE that servers
// before 15 use. Expressions are only evaluated for rows that exist, as the
// query would (an expression may fail on NULLs). With keyArgs the keys and
// bounds are the statement's parameters (IntKey), not the key table.
func mergeRow(p *Plan, keyArgs bool) string {
	ref := ident(p.Sources[0].Ref)
	key0 := ref + "." + ident(p.Sources[0].Key[0].Name)
	var joinK, on, sel, names, vals, set, oldv, newv []string
	for i, k := range p.Sources[0].Key {
		joinK = append(joinK, fmt.Sprintf("%s.%s = __k.__k%d", ref, ident(k.Name), i))
		sel = append(sel, fmt.Sprintf("__k.__k%d", i))
		on = append(on, fmt.Sprintf("__t.%s = __n.__k%d", ident(p.Identity[i]), i))
	}
	sel = append(sel, key0+" IS NOT NULL AS __trellis_p")
	for _, c := range p.Cols {
		sel = append(sel, "CASE WHEN "+key0+" IS NOT NULL THEN "+c.Expr+" END AS "+ident(c.Name))
		names = append(names, ident(c.Name))
		vals = append(vals, "__n."+ident(c.Name))
		if !contains(p.Identity, c.Name) {
			set = append(set, ident(c.Name)+" = __n."+ident(c.Name))
			oldv = append(oldv, cmpExpr("__t."+ident(c.Name), c.TextCmp))
			newv = append(newv, cmpExpr("__n."+ident(c.Name), c.TextCmp))
		}
	}
	cond := strings.Join(joinK, " AND ")
	if p.Where != "" {
		cond += " AND (" + p.Where + ")"
	}
	keys, bounds := keysTable+" __k", func(col string) string { return keyBounds(p, col) }
	if keyArgs {
		keys, bounds = keyArray(p), argBounds
	}
	cond += bounds(key0)
	q := "MERGE INTO " + p.Target.Ident() + " __t USING (SELECT " + strings.Join(sel, ", ") + " FROM " + keys + " LEFT JOIN " +
		p.Sources[0].From + " ON " + cond + ") __n ON " + strings.Join(on, " AND ") + bounds("__t."+ident(p.Identity[0])) +
		" WHEN MATCHED AND NOT __n.__trellis_p THEN DELETE"
	if len(set) > 0 {
		q += " WHEN MATCHED AND (" + strings.Join(append(oldv, "NULL"), ", ") + ") IS DISTINCT FROM (" +
			strings.Join(append(newv, "NULL"), ", ") + ") THEN UPDATE SET " + strings.Join(set, ", ")
	}
	return q + " WHEN NOT MATCHED AND __n.__trellis_p THEN INSERT (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
}

// extremeFunc is the scalar counterpart of min or max.
func extremeFunc(agg string) string {
	if agg == "max" {
		return "greatest"
	}
	return "least"
}

// extremeRecompute builds the statement that recomputes min and max from
// the ledger for the groups that need it: those that lost a value at or
// beyond the extreme the target now holds (after the upsert lowered or
// raised it by the values added). Any other group's extreme is exact
// already: every value it lost was beyond it.
func extremeRecompute(p *Plan) (string, bool) {
	T := p.aggTarget().Ident()
	var asel, agroup, tjoin, ajoin, olds, need, rsel, rset, rold, rnew []string
	for i, g := range p.Groups {
		asel = append(asel, fmt.Sprintf("__og%d AS __g%d", i, i))
		agroup = append(agroup, fmt.Sprintf("__og%d", i))
		tjoin = append(tjoin, nullSafeEq("__y."+ident(g.Name), fmt.Sprintf("__a.__g%d", i), g.NotNull))
	}
	// The reference keeps the ledger reads lateral, after the need filter.
	ajoin = append(ajoin, "__x.__tid IS NOT NULL")
	if len(p.Groups) == 0 {
		tjoin = append(tjoin, "true")
	}
	for i, a := range p.Aggs {
		if a.Mode != ModeExtreme {
			continue
		}
		cmp := "<="
		if a.Func == "max" {
			cmp = ">="
		}
		asel = append(asel, fmt.Sprintf("%s(__oa%d) AS __m%d", a.Func, a.Arg, i))
		olds = append(olds, fmt.Sprintf("__y.%s AS __o%d", ident(a.Name), i))
		need = append(need, fmt.Sprintf("(__a.__m%d IS NOT NULL AND (__x.__o%d IS NULL OR __a.__m%d %s __x.__o%d))", i, i, i, cmp, i))
		rsel = append(rsel, extremeOfGroup(p, a)+fmt.Sprintf(" AS __r%d", i))
		rset = append(rset, fmt.Sprintf("%s = __r.__r%d", ident(a.Name), i))
		rold = append(rold, fmt.Sprintf("__x.__o%d", i))
		rnew = append(rnew, fmt.Sprintf("__z.__r%d", i))
	}
	if len(need) == 0 {
		return "", false
	}
	affected := "SELECT " + strings.Join(asel, ", ") + " FROM " + changesTable + " WHERE __had"
	if len(agroup) > 0 {
		affected += " GROUP BY " + strings.Join(agroup, ", ")
	}
	distinct := "(" + strings.Join(append(rold, "NULL"), ", ") + ") IS DISTINCT FROM (" + strings.Join(append(rnew, "NULL"), ", ") + ")"
	// The need filter only reads __a and __x, so PostgreSQL applies it
	// before the lateral ledger probe. OFFSET 0 keeps the probe's subquery
	// from being pulled up: flattened, its expression was evaluated twice
	// per group, once for the IS DISTINCT FROM filter and once for SET.
	return "UPDATE " + T + " __t SET " + strings.Join(rset, ", ") +
		" FROM (SELECT __x.__tid, __z.* FROM (" + affected + ") __a" +
		" CROSS JOIN LATERAL (SELECT __y.ctid AS __tid, " + strings.Join(olds, ", ") + " FROM " + T + " __y WHERE " + strings.Join(tjoin, " AND ") + " OFFSET 0) __x" +
		" CROSS JOIN LATERAL (SELECT " + strings.Join(rsel, ", ") + " WHERE " + strings.Join(ajoin, " AND ") + " OFFSET 0) __z" +
		" WHERE (" + strings.Join(need, " OR ") + ") AND " + distinct + ") __r WHERE __t.ctid = __r.__tid", true
}

// extremeOfGroup is a scalar subquery for min or max of a's argument over
// the ledger rows of group __a. Each form names the group with plain
// equalities or IS NULL, so PostgreSQL answers it from the ledger's
// (group, argument) index with one index probe (its min/max rewrite);
// matching NULL groups with OR would read every row of the group. With
// several nullable group columns the OR form stays (2^n forms otherwise).
func extremeOfGroup(p *Plan, a AggCol) string {
	L := p.Ledger.Ident()
	agg := fmt.Sprintf("(SELECT %s(__l.%s) FROM %s __l WHERE ", a.Func, ident(p.Args[a.Arg].Name), L)
	var eq, nullable []string
	for i, g := range p.Groups {
		eq = append(eq, fmt.Sprintf("__l.__g%d = __a.__g%d", i, i))
		if !g.NotNull {
			nullable = append(nullable, fmt.Sprint(i))
		}
	}
	switch {
	case len(p.Groups) == 0:
		return agg + "true)"
	case len(nullable) == 0:
		return agg + strings.Join(eq, " AND ") + ")"
	case len(p.Groups) == 1:
		return "CASE WHEN __a.__g0 IS NULL THEN " + agg + "__l.__g0 IS NULL) ELSE " + agg + eq[0] + ") END"
	}
	var ors []string
	for i, g := range p.Groups {
		ors = append(ors, nullSafeEq(fmt.Sprintf("__l.__g%d", i), fmt.Sprintf("__a.__g%d", i), g.NotNull))
	}
	return agg + strings.Join(ors, " AND ") + ")"
}

// ledgerSteps make the ledger follow the changed contributions: identities
// that left are deleted, the others updated or inserted. With merge, one
// MERGE does all three (about a tenth cheaper than the delete and the
// upsert, which re-finds every existing row through its speculative
// insertion); before 15, a DELETE and an upsert of disjoint rows.
func ledgerSteps(p *Plan, merge bool) []Step {
	ng := len(p.Groups)
	L := p.Ledger.Ident()
	keys, nullable := p.ledgerKey()
	nk := len(keys)
	bounds := ""
	if !p.Multi() {
		bounds = keyBounds(p, "__l.__k0")
	}
	// Column i of the ledger takes the value vals[i] of the changes table.
	var lkeyEq, lcols, vals []string
	for i, k := range keys {
		lkeyEq = append(lkeyEq, nullSafeEq("__l."+k, "__c."+k, !nullable[i]))
		lcols = append(lcols, k)
		vals = append(vals, k)
	}
	for i := 0; i < ng; i++ {
		lcols = append(lcols, fmt.Sprintf("__g%d", i))
		vals = append(vals, fmt.Sprintf("__ng%d", i))
	}
	for i, a := range p.Args {
		lcols = append(lcols, ident(a.Name))
		vals = append(vals, fmt.Sprintf("__na%d", i))
	}
	var lset, mset, mvals []string
	for i, c := range lcols {
		mvals = append(mvals, "__c."+vals[i])
		if i >= nk {
			lset = append(lset, c+" = EXCLUDED."+c)
			mset = append(mset, c+" = __c."+vals[i])
		}
	}
	del := Step{Role: RoleLedger, SQL: "DELETE FROM " + L + " __l USING " + changesTable + " __c WHERE " + strings.Join(lkeyEq, " AND ") +
		bounds + " AND NOT __c.__has", BoundArgs: bounds != "" && boundArgs(p)}
	lconf := " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO NOTHING"
	if len(lset) > 0 {
		lconf = " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET " + strings.Join(lset, ", ")
	}
	upsert := Step{Role: RoleLedger, SQL: "INSERT INTO " + L + " (" + strings.Join(lcols, ", ") + ") SELECT " + strings.Join(vals, ", ") +
		" FROM " + changesTable + " WHERE __has" + lconf}
	if !merge {
		return []Step{del, upsert}
	}
	// The changes query read each old row's ctid in this transaction, and
	// only this applier writes the ledger: the MERGE finds the row by it,
	// a TID scan, instead of descending the identity index once per row
	// (8 ms against 3 ms for 1,000 rows; ADR 0021). Every change row then
	// acts, so the step checks that it wrote as many rows as there are
	// changes (ExpectChanges): a row that moved would otherwise be missed.
	// Above some tens of thousands of changes the planner would rather
	// hash the whole ledger by ctid than probe it per row; the probes are
	// never more work than the rows they find, so hash and merge joins are
	// off for this statement.
	q := "MERGE INTO " + L + " __l USING " + changesTable + " __c ON __l.ctid = __c.__ot" +
		" WHEN MATCHED AND NOT __c.__has THEN DELETE"
	if len(mset) > 0 {
		q += " WHEN MATCHED THEN UPDATE SET " + strings.Join(mset, ", ")
	}
	q += " WHEN NOT MATCHED AND __c.__has THEN INSERT (" + strings.Join(lcols, ", ") + ") VALUES (" + strings.Join(mvals, ", ") + ")"
	return []Step{
		{Role: RolePlanner, SQL: "SET LOCAL enable_hashjoin = off"},
		{Role: RolePlanner, SQL: "SET LOCAL enable_mergejoin = off"},
		{Role: RoleLedger, SQL: q, ExpectChanges: true},
		{Role: RolePlanner, SQL: "RESET enable_hashjoin"},
		{Role: RolePlanner, SQL: "RESET enable_mergejoin"},
	}
}

// targetSet is the SET list that adds a group's deltas to its target row
// __t; delta(col) is the delta of a target column.
func targetSet(p *Plan, delta func(col string) string) []string {
	r := ident(RowsCol)
	set := []string{r + " = __t." + r + " + " + delta(r)}
	for _, a := range p.Aggs {
		c := ident(a.Name)
		switch a.Mode {
		case ModeCountStar, ModeCount:
			set = append(set, c+" = __t."+c+" + "+delta(c))
		case ModeExtreme:
			set = append(set, c+" = "+extremeFunc(a.Func)+"(__t."+c+", "+delta(c)+")")
		case ModeSum:
			nn := ident(a.NNCol())
			set = append(set, c+" = CASE WHEN __t."+nn+" + "+delta(nn)+" = 0 THEN NULL ELSE coalesce(__t."+c+", 0) + coalesce("+delta(c)+", 0) END",
				nn+" = __t."+nn+" + "+delta(nn))
		case ModeNumeric:
			var next [4]string
			for k, col := range numericState(a) {
				next[k] = "__t." + col + " + " + delta(col)
				set = append(set, col+" = "+next[k])
			}
			set = append(set, c+" = "+numericValue(a, next[0], next[1], next[2], next[3]))
		case ModeAvg:
			nn, sm := ident(a.NNCol()), ident(a.SumCol())
			set = append(set, c+" = CASE WHEN __t."+nn+" + "+delta(nn)+" = 0 THEN NULL ELSE (__t."+sm+" + "+delta(sm)+") / (__t."+nn+" + "+delta(nn)+") END",
				sm+" = __t."+sm+" + "+delta(sm), nn+" = __t."+nn+" + "+delta(nn))
		}
	}
	return set
}

// oneRowSet is the SET list applying deltas __d to the single row __t of
// an aggregate without GROUP BY. Reads of the row are qualified: its state
// columns may share names with the deltas' (__x<i>).
func oneRowSet(p *Plan) string {
	q := func(c string) string { return "__t." + c }
	r := ident(RowsCol)
	set := []string{r + " = " + q(r) + " + __d.__dn"}
	for i, a := range p.Aggs {
		c := ident(a.Name)
		switch a.Mode {
		case ModeCountStar:
			set = append(set, c+" = "+q(c)+" + __d.__dn")
		case ModeCount:
			set = append(set, fmt.Sprintf("%s = %s + __d.__nn%d", c, q(c), i))
		case ModeExtreme:
			set = append(set, fmt.Sprintf("%s = %s(%s, __d.__x%d)", c, extremeFunc(a.Func), q(c), i))
		case ModeSum:
			nn := ident(a.NNCol())
			set = append(set, fmt.Sprintf("%s = CASE WHEN %s + __d.__nn%d = 0 THEN NULL ELSE coalesce(%s, 0) + coalesce(__d.__s%d, 0) END", c, q(nn), i, q(c), i),
				fmt.Sprintf("%s = %s + __d.__nn%d", nn, q(nn), i))
		case ModeNumeric:
			var next [4]string
			for k, col := range numericState(a) {
				next[k] = fmt.Sprintf("%s + coalesce(__d.%s, 0)", q(col), numericDeltas(i)[k])
				set = append(set, col+" = "+next[k])
			}
			set = append(set, c+" = "+numericValue(a, next[0], next[1], next[2], next[3]))
		case ModeAvg:
			nn, sm := ident(a.NNCol()), ident(a.SumCol())
			set = append(set, fmt.Sprintf("%s = CASE WHEN %s + __d.__nn%d = 0 THEN NULL ELSE (%s + coalesce(__d.__s%d, 0)) / (%s + __d.__nn%d) END", c, q(nn), i, q(sm), i, q(nn), i),
				fmt.Sprintf("%s = %s + coalesce(__d.__s%d, 0)", sm, q(sm), i), fmt.Sprintf("%s = %s + __d.__nn%d", nn, q(nn), i))
		}
	}
	return strings.Join(set, ", ")
}

// reconcileAggregate builds the statements that make an aggregate target
// exactly the aggregation of its ledger.
func reconcileAggregate(p *Plan) []string {
	T, L := p.aggTarget().Ident(), p.Ledger.Ident()
	ng := len(p.Groups)
	var cols, vals, set, oldv, newv []string
	add := func(col, val string) {
		cols = append(cols, ident(col))
		vals = append(vals, val+" AS "+ident(col))
		set = append(set, ident(col)+" = __r."+ident(col))
		oldv = append(oldv, "__t."+ident(col))
		newv = append(newv, "__r."+ident(col))
	}
	var gsel []string
	for i, g := range p.Groups {
		gsel = append(gsel, fmt.Sprintf("__g%d AS %s", i, ident(g.Name)))
	}
	add(RowsCol, "count(*)")
	for _, a := range p.Aggs {
		arg := "*"
		if a.Arg >= 0 {
			arg = ident(p.Args[a.Arg].Name)
		}
		switch a.Mode {
		case ModeCountStar:
			add(a.Name, "count(*)")
		case ModeCount:
			add(a.Name, "count("+arg+")")
		case ModeSum:
			add(a.Name, "sum("+arg+")")
			add(a.NNCol(), "count("+arg+")")
		case ModeNumeric:
			finite, scales, special := numericParts(arg)
			add(a.Name, a.Func+"("+arg+")")
			add(a.SumCol(), "coalesce(sum("+finite+"), 0)")
			add(a.NNCol(), "count("+arg+")")
			add(a.ScalesCol(), "coalesce(sum("+scales+"), 0)")
			add(a.SpecialCol(), "coalesce(sum("+special+"), 0)")
		case ModeAvg:
			add(a.Name, "avg("+arg+")")
			add(a.SumCol(), "coalesce(sum("+arg+"::numeric), 0)")
			add(a.NNCol(), "count("+arg+")")
		default:
			add(a.Name, recomputeCall(p, a))
		}
	}
	distinct := "(" + strings.Join(append(oldv, "NULL"), ", ") + ") IS DISTINCT FROM (" + strings.Join(append(newv, "NULL"), ", ") + ")"
	if ng == 0 {
		return []string{"UPDATE " + T + " __t SET " + strings.Join(set, ", ") + " FROM (SELECT " + strings.Join(vals, ", ") +
			" FROM " + L + " __l) __r WHERE " + distinct}
	}
	var gcols, tjoin, lgroups []string
	for i, g := range p.Groups {
		gcols = append(gcols, ident(g.Name))
		tjoin = append(tjoin, nullSafeEq("__l.__g"+fmt.Sprint(i), "__t."+ident(g.Name), g.NotNull))
		lgroups = append(lgroups, fmt.Sprintf("__g%d", i))
	}
	upsert := "INSERT INTO " + T + " AS __t (" + strings.Join(append(append([]string{}, gcols...), cols...), ", ") + ") SELECT " +
		strings.Join(append(append([]string{}, gcols...), cols...), ", ") + " FROM (SELECT " + strings.Join(append(gsel, vals...), ", ") +
		" FROM " + L + " __l GROUP BY " + strings.Join(lgroups, ", ") + ") __r ON CONFLICT (" + strings.Join(gcols, ", ") +
		") DO UPDATE SET " + strings.Replace(strings.Join(set, ", "), "__r.", "EXCLUDED.", -1) +
		" WHERE " + strings.Replace(distinct, "__r.", "EXCLUDED.", -1)
	orphans := "DELETE FROM " + T + " __t WHERE NOT EXISTS (SELECT 1 FROM " + L + " __l WHERE " + strings.Join(tjoin, " AND ") + ")" +
		p.keepEmptySet("__t."+ident(SetCol))
	// Orphans first: the two sets are disjoint, and a fresh build's
	// target (ADR 0022) is empty before the upsert, so the anti-join over
	// it costs nothing instead of a probe per group.
	out := []string{orphans, upsert}
	if m, ok := p.emptySet(); ok {
		// The empty set's row outlives its rows: over none it takes the
		// values of an aggregate over no rows, which no GROUP BY makes.
		out = append(out, fmt.Sprintf("UPDATE %s __t SET %s FROM (SELECT %s FROM %s __l WHERE __l.__g0 = %d) __r WHERE __t.%s = %d AND %s",
			T, strings.Join(set, ", "), strings.Join(vals, ", "), L, m, ident(SetCol), m, distinct))
	}
	return out
}
