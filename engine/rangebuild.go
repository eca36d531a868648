package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RangeBuild are the statements of a build chunk that re-derives a range
// of source keys, lo ≤ key ≤ hi, instead of a list of them (ADR 0020):
// for single-source transforms keyed by one integer column. A row
// transform copies the range with one INSERT … SELECT (Copy); an
// aggregate computes the range's changes against its ledger (Changes) and
// writes them with its usual apply steps. Every statement takes lo as $1
// and hi as $2.
type RangeBuild struct {
	// Next returns the last of the first $2 source keys ≥ $1 (NULL when
	// there is none), the chunk's hi, and how many keys it spans. It walks
	// the key's index only.
	Next string
	// Stored lists the identities the target already holds in the range:
	// rows that re-derives of changed keys wrote ahead of the build. They
	// are re-derived by key; the copy leaves them out.
	Stored string
	// Copy inserts the query's rows of the range, except the keys in $3
	// (a bigint[]: Stored's), and returns how many it wrote.
	Copy string
	// Changes (aggregates; Stored and Copy are then empty) fills the
	// changes table with the range's source rows full-joined with the
	// range's ledger rows, in place of the keyed changes step: the ledger
	// rows that re-derives wrote ahead of the build compare like any.
	Changes string
	// LedgerStored and LedgerCopy (aggregates) are Stored and Copy for
	// the ledger, used while the build writes only the ledger (ADR 0022):
	// the ledger is then a row set like a row transform's target.
	LedgerStored, LedgerCopy string
}

// rangeNext is RangeBuild.Next for p's source.
func rangeNext(p *Plan) string {
	src := p.Sources[0]
	key := ident(src.Key[0].Name)
	srcTable := src.Ident()
	if strings.HasPrefix(src.From, "ONLY ") {
		srcTable = "ONLY " + srcTable
	}
	return fmt.Sprintf("SELECT max(__e), count(*) FROM (SELECT %s AS __e FROM %s WHERE %s >= $1::bigint ORDER BY %s LIMIT $2) __c",
		key, srcTable, key, key)
}

// inRange is the condition lo ≤ col ≤ hi.
func inRange(col string) string { return col + " >= $1::bigint AND " + col + " <= $2::bigint" }

// rangeBuildAgg generates a single-source aggregate's RangeBuild, or nil
// when p does not qualify; where is the user's condition as " WHERE (…)"
// or "".
func rangeBuildAgg(p *Plan, where string) *RangeBuild {
	if p.Multi() || p.Shape == ShapeRow || !intKey(p) {
		return nil
	}
	src := p.Sources[0]
	key0 := ident(src.Ref) + "." + ident(src.Key[0].Name)
	cond := " WHERE " + inRange(key0)
	if where != "" {
		cond = where + " AND " + inRange(key0)
	}
	lcols, lsel := []string{"__k0"}, []string{key0}
	keyCols, from := []string{key0}, src.From+p.setsJoin()
	if p.Grouping != nil {
		// One ledger row per source row per grouping set (ADR 0031).
		lcols, lsel = append(lcols, p.ledgerSetCol()), append(lsel, setsRef+"."+ident(SetCol))
		keyCols = append(keyCols, setsRef+"."+ident(SetCol))
	}
	for i, g := range p.Groups {
		lcols, lsel = append(lcols, fmt.Sprintf("__g%d", i)), append(lsel, g.Expr)
	}
	for _, a := range p.Args {
		lcols, lsel = append(lcols, ident(a.Name)), append(lsel, a.Expr)
	}
	L := p.Ledger.Ident()
	return &RangeBuild{Next: rangeNext(p),
		Changes: "INSERT INTO " + changesTable + " " + changesOver(p, keyCols, from+cond,
			"SELECT __l.*, __l.ctid AS __ot FROM "+L+" __l WHERE "+inRange("__l.__k0")),
		LedgerStored: "SELECT __k0::bigint FROM " + L + " WHERE " + inRange("__k0"),
		LedgerCopy: "INSERT INTO " + L + " (" + strings.Join(lcols, ", ") + ") SELECT " + strings.Join(lsel, ", ") +
			" FROM " + from + cond + " AND " + key0 + " <> ALL ($3::bigint[])",
	}
}

// rangeCopies says whether a range chunk copies rows (a row transform's
// target, or an aggregate's ledger while the build writes only the ledger)
// rather than computing changes, and returns the statements that list the
// rows already stored and copy the others.
func (a *Applier) rangeCopies() (copies bool, stored, copySQL string) {
	rb := a.Stmts.RangeBuild
	switch {
	case rb.Changes == "":
		return true, rb.Stored, rb.Copy
	case a.LedgerOnly && rb.LedgerCopy != "":
		return true, rb.LedgerStored, rb.LedgerCopy
	}
	return false, "", ""
}

// RangeCopies says whether this applier's range chunks copy rows
// (RangeStored, RangeCopy) rather than re-derive (RangeRederive).
func (a *Applier) RangeCopies() bool {
	c, _, _ := a.rangeCopies()
	return c
}

// rangeBuild generates a row transform's RangeBuild, or nil when p does
// not qualify.
func rangeBuild(p *Plan) *RangeBuild {
	if p.Multi() || p.Shape != ShapeRow || !intKey(p) || len(p.Identity) != 1 {
		return nil
	}
	src := p.Sources[0]
	var names, sel []string
	for _, c := range p.Cols {
		names = append(names, ident(c.Name))
		sel = append(sel, c.Expr+" AS "+ident(c.Name))
	}
	key0 := ident(src.Ref) + "." + ident(src.Key[0].Name)
	where := inRange(key0) + " AND " + key0 + " <> ALL ($3::bigint[])"
	if p.Where != "" {
		where = "(" + p.Where + ") AND " + where
	}
	idc := ident(p.Identity[0])
	return &RangeBuild{
		Next:   rangeNext(p),
		Stored: "SELECT " + idc + "::bigint FROM " + p.Target.Ident() + " WHERE " + inRange(idc),
		Copy: "INSERT INTO " + p.Target.Ident() + " (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(sel, ", ") +
			" FROM " + src.From + " WHERE " + where,
	}
}

// RangeNext returns the last key of the range-build chunk that starts at
// lo and spans at most limit keys, and how many it spans; ok is false when
// no key ≥ lo is left.
func (a *Applier) RangeNext(ctx context.Context, lo int64, limit int) (hi, keys int64, ok bool, err error) {
	var h *int64
	if err := a.conn.QueryRow(ctx, a.Stmts.RangeBuild.Next, lo, limit).Scan(&h, &keys); err != nil {
		return 0, 0, false, fmt.Errorf("find the next build range of %s: %w", a.Plan.Target.Name, err)
	}
	if h == nil {
		return 0, 0, false, nil
	}
	return *h, keys, true, nil
}

// RangeStored lists the identities the target holds between lo and hi.
func (a *Applier) RangeStored(ctx context.Context, lo, hi int64) ([]int64, error) {
	_, stored, _ := a.rangeCopies()
	rows, err := a.conn.Query(ctx, stored, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("list stored rows of %s: %w", a.Plan.Target.Name, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list stored rows of %s: %w", a.Plan.Target.Name, err)
	}
	return out, nil
}

// RangeCopy inserts, in tx, the query's rows whose key lies between lo and
// hi, except those of skip, and returns how many it wrote.
func (a *Applier) RangeCopy(ctx context.Context, tx pgx.Tx, lo, hi int64, skip []int64) (int64, error) {
	if skip == nil {
		skip = []int64{}
	}
	_, _, copySQL := a.rangeCopies()
	tag, err := tx.Exec(ctx, copySQL, lo, hi, skip)
	if err != nil {
		return 0, fmt.Errorf("copy rows %d..%d into %s: %w", lo, hi, a.Plan.Target.Name, err)
	}
	return tag.RowsAffected(), nil
}

// RangeRederive re-derives, in tx, an aggregate's source keys between lo
// and hi: its apply steps with the range's changes in place of the keyed
// ones. It returns the ledger and target rows written.
func (a *Applier) RangeRederive(ctx context.Context, tx pgx.Tx, lo, hi int64) (int64, error) {
	var steps []Step
	for _, st := range a.steps() {
		if st.Role == RoleChanges && st.KeyArgs {
			st = Step{SQL: a.Stmts.RangeBuild.Changes, Role: RoleChanges, BoundArgs: true}
		}
		steps = append(steps, st)
	}
	out, err := a.send(ctx, tx, &pgx.Batch{}, steps, []int64{lo, hi})
	return out.written, err
}
