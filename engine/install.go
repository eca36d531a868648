package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Install creates the target table (and, for aggregates, the ledger) for a
// planned transform inside the caller's transaction. id names the ledger.
func Install(ctx context.Context, db DB, p *Plan, id int64) error {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, p.Target.Ident()).Scan(&exists); err != nil {
		return fmt.Errorf("look for target: %w", err)
	}
	if exists {
		return terr.New(terr.Conflict, "transform %q: a table named %s already exists; choose another transform name or drop that table",
			p.Target.Name, p.Target.Ident())
	}
	if err := markTextCompare(ctx, db, p); err != nil {
		return err
	}
	var ddl []string
	var cols []string
	if p.Shape == ShapeRow {
		for _, c := range p.Cols {
			def := ident(c.Name) + " " + typeDDL(c.Type, c.Collation)
			if c.NotNull {
				def += " NOT NULL"
			}
			cols = append(cols, def)
		}
		if p.Surrogate != "" {
			// Its lineage may be NULL: the identity below keys every
			// write, the surrogate keys the rows for a reader (ADR 0019).
			cols = append(cols, p.surrogateDDL())
		}
		cols = append(cols, p.identityConstraint(identList(p.Identity)))
		// Re-derived rows are rewritten in place: free space on each page
		// lets the update stay on it (HOT), without a new index entry.
		ddl = append(ddl, "CREATE TABLE "+p.Target.Ident()+" ("+strings.Join(cols, ", ")+") WITH (fillfactor = 90)")
		ddl = append(ddl, p.lineageIndexes(p.Target)...)
		ddl = append(ddl, p.recursiveIndexes()...)
	} else {
		p.Ledger.Name = fmt.Sprintf("ledger_%d", id)
		names := p.Visible
		if p.State != nil {
			// The target is the projection; the state holds every group.
			p.State.Name = fmt.Sprintf("state_%d", id)
			var tcols []string
			for _, c := range p.Project {
				tcols = append(tcols, ident(c.Name)+" "+typeDDL(c.Type, c.Collation))
			}
			if p.Surrogate != "" {
				tcols = append(tcols, p.surrogateDDL())
			}
			ddl = append(ddl, "CREATE TABLE "+p.Target.Ident()+" ("+strings.Join(tcols, ", ")+")")
			if len(p.Groups) > 0 {
				ddl = append(ddl, p.groupKey(p.Target))
			}
			names = nil
			for _, a := range p.Aggs {
				names = append(names, a.Name)
			}
		}
		S := p.aggTarget()
		for _, name := range names {
			cols = append(cols, ident(name)+" "+p.visibleType(name))
		}
		for _, g := range p.Groups {
			if !contains(names, g.Name) {
				cols = append(cols, ident(g.Name)+" "+typeDDL(g.Type, g.Collation))
			}
		}
		cols = append(cols, ident(RowsCol)+" bigint NOT NULL DEFAULT 0")
		if p.Surrogate != "" && p.State == nil {
			cols = append(cols, p.surrogateDDL())
		}
		for _, a := range p.Aggs {
			switch a.Mode {
			case ModeSum:
				cols = append(cols, ident(a.NNCol())+" bigint NOT NULL DEFAULT 0")
			case ModeAvg:
				cols = append(cols, ident(a.SumCol())+" numeric NOT NULL DEFAULT 0", ident(a.NNCol())+" bigint NOT NULL DEFAULT 0")
			case ModeNumeric:
				cols = append(cols, ident(a.SumCol())+" numeric NOT NULL DEFAULT 0", ident(a.NNCol())+" bigint NOT NULL DEFAULT 0",
					ident(a.ScalesCol())+" numeric NOT NULL DEFAULT 0", ident(a.SpecialCol())+" numeric NOT NULL DEFAULT 0")
			}
		}
		ddl = append(ddl, "CREATE TABLE "+S.Ident()+" ("+strings.Join(cols, ", ")+") WITH (fillfactor = 80)")
		// The row that always exists, as in PostgreSQL's answer: an
		// aggregate without GROUP BY has one row over no rows, and so has
		// the empty grouping set (ADR 0031). Counts are 0, everything else
		// NULL, or what a recomputed aggregate gives over no rows (below,
		// once the ledger exists).
		zero := []string{ident(RowsCol)}
		for _, a := range p.Aggs {
			// Recomputed counts too (DISTINCT, FILTER): count over
			// no rows is 0 however it is kept.
			if a.Mode == ModeCountStar || a.Mode == ModeCount || a.Func == "count" {
				zero = append(zero, ident(a.Name))
			}
		}
		zeroVals := strings.Split(strings.TrimSuffix(strings.Repeat("0, ", len(zero)), ", "), ", ")
		zeroRow, zeroLedger := "", "" // none (a grouped table without the empty set)
		if len(p.Groups) > 0 {
			ddl = append(ddl, p.groupKey(S))
			if m, ok := p.emptySet(); ok {
				zero, zeroVals = append(zero, ident(SetCol)), append(zeroVals, fmt.Sprint(m))
				for _, g := range p.Groups[1+len(p.Grouping.Exprs):] {
					// GROUPING() calls: computed from __set alone.
					zero, zeroVals = append(zero, ident(g.Name)), append(zeroVals, g.Expr)
				}
				zeroRow, zeroLedger = fmt.Sprintf("__s.%s = %d", ident(SetCol), m), fmt.Sprintf("__l.__g0 = %d", m)
				ddl = append(ddl, "INSERT INTO "+S.Ident()+" ("+strings.Join(zero, ", ")+") SELECT "+strings.Join(zeroVals, ", ")+
					" FROM (VALUES ("+fmt.Sprint(m)+")) AS "+setsRef+"("+ident(SetCol)+")")
			}
		} else {
			zeroRow, zeroLedger = "true", "true"
			ddl = append(ddl, "INSERT INTO "+S.Ident()+" ("+strings.Join(zero, ", ")+") SELECT "+strings.Join(zeroVals, ", "))
		}
		// The ledger: one row per source identity (per joined row: its
		// lineage) that passes WHERE.
		var lcols []string
		keys, nullable := p.ledgerKey()
		var types []string
		for _, src := range p.Sources {
			for _, k := range src.Key {
				types = append(types, k.Type)
			}
		}
		for range p.Ordinals {
			types = append(types, "bigint")
		}
		if p.Grouping != nil {
			types = append(types, "integer") // the grouping set
		}
		for i, k := range keys {
			notNull := " NOT NULL"
			if nullable[i] {
				notNull = ""
			}
			lcols = append(lcols, k+" "+types[i]+notNull)
		}
		for i, g := range p.Groups {
			lcols = append(lcols, fmt.Sprintf("__g%d %s", i, typeDDL(g.Type, g.Collation)))
		}
		for _, a := range p.Args {
			lcols = append(lcols, ident(a.Name)+" "+typeDDL(a.Type, a.Collation))
		}
		lcols = append(lcols, p.identityConstraint(strings.Join(keys, ", ")))
		ddl = append(ddl, "CREATE TABLE "+p.Ledger.Ident()+" ("+strings.Join(lcols, ", ")+") WITH (fillfactor = 80)")
		ddl = append(ddl, p.lineageIndexes(*p.Ledger)...)
		if !p.GroupIndexLater {
			if ix := p.groupIndexDDL(); ix != "" {
				ddl = append(ddl, ix)
			}
		}
		if zeroRow != "" {
			ddl = append(ddl, p.zeroRowDDL(zeroRow, zeroLedger)...)
		}
	}
	ddl = append(ddl, p.mirrorDDL(id)...)
	for _, s := range ddl {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("transform %q: create storage: %w", p.Target.Name, err)
		}
	}
	return nil
}

// zeroRowDDL completes the row that always exists (row: the condition
// that selects it in the aggregate table; ledger: its ledger rows, none at
// install): a recomputed aggregate takes its value over no rows, which is
// not NULL for every aggregate (regr_count is 0, a user-defined one may
// have an initial state), and a projected target gets the row's
// projection when it passes HAVING.
func (p *Plan) zeroRowDDL(row, ledger string) []string {
	S := p.aggTarget().Ident()
	var ddl, set []string
	for _, a := range p.Aggs {
		if a.Mode == ModeRecompute {
			set = append(set, ident(a.Name)+" = (SELECT "+recomputeCall(p, a)+" FROM "+p.Ledger.Ident()+" __l WHERE "+ledger+")")
		}
	}
	if len(set) > 0 {
		ddl = append(ddl, "UPDATE "+S+" __s SET "+strings.Join(set, ", ")+" WHERE "+row)
	}
	if p.State != nil {
		var tn, ts []string
		for _, c := range p.Project {
			tn, ts = append(tn, ident(c.Name)), append(ts, c.Expr)
		}
		having := "true"
		if p.Having != "" {
			having = p.Having
		}
		ddl = append(ddl, "INSERT INTO "+p.Target.Ident()+" ("+strings.Join(tn, ", ")+") SELECT "+strings.Join(ts, ", ")+
			" FROM "+S+" __s WHERE "+row+" AND "+having)
	}
	return ddl
}

// groupIndexDDL creates the ledger's group-key index, or is "" when the
// plan needs none. Only recomputed aggregates read the ledger by group;
// the index would make every group move a non-HOT update otherwise. When
// min/max read one argument, it ends the index: their recompute is then
// one index probe per group (ADR 0005). Named, so that EnsureGroupIndex
// can make it once (ADR 0025); plans stored before let PostgreSQL name it.
func (p *Plan) groupIndexDDL() string {
	if p.Ledger == nil || !p.readsLedgerByGroup() || len(p.Groups) == 0 {
		return ""
	}
	cols := keyList("__g", len(p.Groups))
	if arg := p.extremeArg(); arg >= 0 {
		cols += ", " + ident(p.Args[arg].Name)
	}
	if !p.GroupIndexLater {
		return "CREATE INDEX ON " + p.Ledger.Ident() + " (" + cols + ")"
	}
	return "CREATE INDEX IF NOT EXISTS " + ident(p.Ledger.Name+"_group") + " ON " + p.Ledger.Ident() + " (" + cols + ")"
}

// mirrorDDL creates the mirrors of the outer joins whose matches the
// stored rows do not record (ADR 0010): the lineage of the join's sources
// for each match, found by any of them.
func (p *Plan) mirrorDDL(id int64) []string {
	var ddl []string
	for k := range p.Outer {
		oj := &p.Outer[k]
		if oj.Mirror == nil {
			continue
		}
		oj.Mirror.Name = fmt.Sprintf("mirror_%d_%d", id, k)
		var cols, all []string
		under := underJoin(*oj)
		for _, i := range under {
			for j, l := range p.Sources[i].Lineage {
				cols = append(cols, ident(l)+" "+p.Sources[i].Key[j].Type)
				all = append(all, ident(l))
			}
		}
		ddl = append(ddl, "CREATE TABLE "+oj.Mirror.Ident()+" ("+strings.Join(cols, ", ")+", UNIQUE NULLS NOT DISTINCT ("+strings.Join(all, ", ")+"))")
		for _, i := range under[1:] {
			ddl = append(ddl, "CREATE INDEX ON "+oj.Mirror.Ident()+" ("+identList(p.Sources[i].Lineage)+")")
		}
	}
	return ddl
}

// surrogateDDL is the column that keys a target whose own key may be NULL
// or is missing (ADR 0018, 0019): the engine never writes it — no column
// list or value of a write names it, and GENERATED ALWAYS would refuse a
// value — so a group (or a row's identity) keeps its value while it
// exists, and a group that empties and comes back (or a row deleted and
// inserted again) takes a new one, which a reader sees as a delete of the
// old key and an insert of the new.
func (p *Plan) surrogateDDL() string {
	return ident(p.Surrogate) + " bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
}

// groupKey keys an aggregate table by its groups: a primary key when no
// group column can be NULL — so a transform can read the target as its
// source (a chain) and its changes are published with their key — else a
// unique constraint that treats NULLs as equal.
func (p *Plan) groupKey(t Rel) string {
	kind := "UNIQUE NULLS NOT DISTINCT"
	if p.groupsNotNull() {
		kind = "PRIMARY KEY"
	}
	return "ALTER TABLE " + t.Ident() + " ADD CONSTRAINT " + ident(truncIdent(t.Name+"_group_key")) + " " + kind + " (" + identList(p.groupNames()) + ")"
}

// identityConstraint keys the stored rows: a primary key, or where an
// outer join may leave lineage NULL, a unique constraint that treats NULLs
// as equal (one NULL-extended row per preserved row); a unique constraint
// too for a recursive CTE's level, keyed by its surrogate.
func (p *Plan) identityConstraint(cols string) string {
	if p.Recursive != nil || p.identityNullable() {
		// A recursive level's surrogate is its primary key (ADR 0035).
		return "UNIQUE NULLS NOT DISTINCT (" + cols + ")"
	}
	return "PRIMARY KEY (" + cols + ")"
}

// lineageIndexes let each source's changed keys find their stored rows
// (ADR 0010); the first source's lineage leads the identity's index.
func (p *Plan) lineageIndexes(t Rel) []string {
	if !p.Multi() {
		return nil
	}
	var out []string
	for i, src := range p.Sources[1:] {
		name := truncIdent(fmt.Sprintf("%s_lineage_%d", t.Name, i+1))
		out = append(out, "CREATE INDEX "+ident(name)+" ON "+t.Ident()+" ("+identList(src.Lineage)+")",
			"COMMENT ON INDEX "+pgx.Identifier{t.Schema, name}.Sanitize()+" IS "+quoteLiteral(ownIndexComment))
	}
	return out
}

// Uninstall drops the target and ledger of a transform.
func Uninstall(ctx context.Context, db DB, p *Plan) error {
	if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+p.Target.Ident()); err != nil {
		return fmt.Errorf("drop target %s: %w", p.Target.Ident(), err)
	}
	if p.Ledger != nil {
		if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+p.Ledger.Ident()); err != nil {
			return fmt.Errorf("drop ledger %s: %w", p.Ledger.Ident(), err)
		}
	}
	if p.State != nil {
		if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+p.State.Ident()); err != nil {
			return fmt.Errorf("drop aggregate state %s: %w", p.State.Ident(), err)
		}
	}
	for _, oj := range p.Outer {
		if oj.Mirror != nil {
			if _, err := db.Exec(ctx, "DROP TABLE IF EXISTS "+oj.Mirror.Ident()); err != nil {
				return fmt.Errorf("drop join mirror %s: %w", oj.Mirror.Ident(), err)
			}
		}
	}
	return nil
}

// markTextCompare flags columns whose type has no default btree equality
// (json, point, xml, …) or one under which equal values may print
// differently (numeric 1.5 and 1.50, float 0 and -0, interval '1 day' and
// '24 hours', jsonb, every array and range: the opclass has no equalimage
// support function, so the anyarray and anyrange opclasses never match):
// change detection compares their text form instead, so a target shows
// what its query shows (ADR 0024).
func markTextCompare(ctx context.Context, db DB, p *Plan) error {
	check := func(c *Col) error {
		return db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_opclass oc JOIN pg_am am ON am.oid = oc.opcmethod
			JOIN pg_amproc ap ON ap.amprocfamily = oc.opcfamily AND ap.amproclefttype = oc.opcintype AND ap.amprocnum = 4
			WHERE am.amname = 'btree' AND oc.opcdefault AND (oc.opcintype = $1::regtype
			OR oc.opcintype = (SELECT typbasetype FROM pg_type WHERE oid = $1::regtype)))`, c.Type).Scan(&c.TextCmp)
	}
	for i := range p.Cols {
		if err := check(&p.Cols[i]); err != nil {
			return fmt.Errorf("inspect type %s: %w", p.Cols[i].Type, err)
		}
	}
	for i := range p.Args {
		if err := check(&p.Args[i]); err != nil {
			return fmt.Errorf("inspect type %s: %w", p.Args[i].Type, err)
		}
	}
	for i := range p.Groups {
		if err := check(&p.Groups[i]); err != nil {
			return fmt.Errorf("inspect type %s: %w", p.Groups[i].Type, err)
		}
	}
	for i := range p.Project {
		if err := check(&p.Project[i]); err != nil {
			return fmt.Errorf("inspect type %s: %w", p.Project[i].Type, err)
		}
	}
	return nil
}

// visibleType is the stored type (with its collation) of a visible
// column of an aggregate's target or state.
func (p *Plan) visibleType(name string) string {
	for _, g := range p.Groups {
		if g.Name == name {
			return typeDDL(g.Type, g.Collation)
		}
	}
	for _, a := range p.Aggs {
		if a.Name == name {
			return typeDDL(a.Type, a.Collation)
		}
	}
	return "text"
}

func (p *Plan) groupNames() []string {
	out := make([]string, len(p.Groups))
	for i, g := range p.Groups {
		out[i] = g.Name
	}
	return out
}

// groupsNotNull: no group column can be NULL, so groups join by plain
// equality.
func (p *Plan) groupsNotNull() bool {
	for _, g := range p.Groups {
		if !g.NotNull {
			return false
		}
	}
	return true
}

// readsLedgerByGroup: some aggregate is recomputed from the ledger rows of
// a group, so the ledger needs an index on the group key.
func (p *Plan) readsLedgerByGroup() bool {
	for _, a := range p.Aggs {
		if a.Mode == ModeRecompute || a.Mode == ModeExtreme {
			return true
		}
	}
	return false
}

// extremeArg is the ledger argument all min/max aggregates read, or -1
// when there is none, more than one, or its values may be too long for an
// index entry (a text of a few kB would make every ledger write fail).
func (p *Plan) extremeArg() int {
	arg := -1
	for _, a := range p.Aggs {
		if a.Mode != ModeExtreme {
			continue
		}
		if arg >= 0 && a.Arg != arg {
			return -1
		}
		arg = a.Arg
	}
	if arg < 0 || !boundedWidth(p.Args[arg].Type) {
		return -1
	}
	return arg
}

// boundedWidth: values of the type always fit an index entry.
func boundedWidth(typ string) bool {
	for _, pre := range []string{"smallint", "integer", "bigint", "real", "double precision", "numeric",
		"date", "timestamp", "time", "interval", "uuid", "boolean", "money", "oid"} {
		if strings.HasPrefix(typ, pre) {
			return true
		}
	}
	return false
}

func (p *Plan) hasRecompute() bool {
	for _, a := range p.Aggs {
		if a.Mode == ModeRecompute {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func identList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = ident(n)
	}
	return strings.Join(q, ", ")
}

func keyList(prefix string, n int) string {
	q := make([]string, n)
	for i := range q {
		q[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(q, ", ")
}

func truncIdent(s string) string {
	if len(s) > 63 {
		return s[:63]
	}
	return s
}
