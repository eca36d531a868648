package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RangeBuild are the statements of a build chunk that copies a range of
// source keys with one INSERT … SELECT instead of re-deriving them key by
// key (ADR 0020). They exist for single-source row transforms keyed by one
// integer column, where a chunk is the keys lo ≤ key ≤ hi and a target row
// is identified by its source key. Every statement takes lo as $1 and hi
// as $2.
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
}

// rangeBuild generates p's RangeBuild, or nil when p does not qualify.
func rangeBuild(p *Plan) *RangeBuild {
	if p.Multi() || p.Shape != ShapeRow || !intKey(p) || len(p.Identity) != 1 {
		return nil
	}
	src := p.Sources[0]
	key := ident(src.Key[0].Name)
	srcTable := src.Ident()
	if strings.HasPrefix(src.From, "ONLY ") {
		srcTable = "ONLY " + srcTable
	}
	rng := func(col string) string { return col + " >= $1::bigint AND " + col + " <= $2::bigint" }
	var names, sel []string
	for _, c := range p.Cols {
		names = append(names, ident(c.Name))
		sel = append(sel, c.Expr+" AS "+ident(c.Name))
	}
	key0 := ident(src.Ref) + "." + key
	where := rng(key0) + " AND " + key0 + " <> ALL ($3::bigint[])"
	if p.Where != "" {
		where = "(" + p.Where + ") AND " + where
	}
	idc := ident(p.Identity[0])
	return &RangeBuild{
		Next: fmt.Sprintf("SELECT max(__e), count(*) FROM (SELECT %s AS __e FROM %s WHERE %s >= $1::bigint ORDER BY %s LIMIT $2) __c",
			key, srcTable, key, key),
		Stored: "SELECT " + idc + "::bigint FROM " + p.Target.Ident() + " WHERE " + rng(idc),
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
	rows, err := a.conn.Query(ctx, a.Stmts.RangeBuild.Stored, lo, hi)
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
	tag, err := tx.Exec(ctx, a.Stmts.RangeBuild.Copy, lo, hi, skip)
	if err != nil {
		return 0, fmt.Errorf("copy rows %d..%d into %s: %w", lo, hi, a.Plan.Target.Name, err)
	}
	return tag.RowsAffected(), nil
}
