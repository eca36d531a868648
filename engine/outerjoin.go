package engine

// outerjoin.go owns the define-time check of an outer join: whether a
// condition above it can keep a matched row and drop its NULL-extended
// counterpart, so that the join's matches are mirrored (filteredAbove, ADR
// 0010).

import (
	"context"
)

// filteredAbove reports whether a condition after an outer join may keep
// a matched row and drop its NULL-extended counterpart (or the other way
// round): one that reads a table other than the join's preserved side —
// its NULL-extended side (WHERE b.x IS NULL above a LEFT JOIN b), or a
// table joined later, possibly through it. A matched row the condition
// drops leaves no stored row, so a later change to b could not find, from
// the stored rows alone, the preserved row whose NULL-extended row should
// appear; the join's matches are mirrored instead (ADR 0010). A condition
// on the preserved side alone keeps or drops a row with or without its
// match alike.
func filteredAbove(ctx context.Context, db DB, sources []Source, oj OuterJoin) (bool, error) {
	for _, pair := range oj.Sides() {
		for _, cn := range oj.Above {
			if cn.Column == "*" {
				return true, nil
			}
			for i, src := range sources {
				if containsInt(pair[0], i) {
					continue
				}
				hit := cn.Ref == src.Ref
				if cn.Ref == "" {
					col, err := sourceColumn(ctx, db, src, cn.Column)
					if err != nil {
						return false, err
					}
					hit = col.found
				}
				if hit {
					return true, nil
				}
			}
		}
	}
	return false, nil
}
