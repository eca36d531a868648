package engine

import "fmt"

// A numeric sum or average (ModeNumeric) keeps four values per group, all by
// deltas (ADR 0024): the sum of its finite values, the count of non-null
// values, a scale histogram (Σ 10^(12·scale) over the finite values: the
// count of each scale is a 12-digit group, so the largest scale present is
// read from the histogram's length) and the special values (#NaN +
// #Infinity·10^12 + #-Infinity·10^24). From them the value is PostgreSQL's:
// the same scale, and NaN or an infinity as numeric_sum/numeric_avg give them.

// scalePowers are the histogram entries of scales 0 to 16: 10^(12·scale).
const scalePowers = "{1,1e12,1e24,1e36,1e48,1e60,1e72,1e84,1e96,1e108,1e120,1e132,1e144,1e156,1e168,1e180,1e192}"

// numericParts are one value's contributions to a numeric sum's state:
// its finite part, its scale-histogram entry and its special count.
func numericParts(v string) (finite, scales, special string) {
	v = "(" + v + ")::numeric"
	finite = "CASE WHEN scale(" + v + ") IS NULL THEN 0 ELSE " + v + " END"
	// Powers for the usual scales from a constant array (a fifth of a
	// 1M-row reconcile's time went to building them as text); beyond it
	// the text form.
	scales = "CASE WHEN scale(" + v + ") IS NULL THEN 0 ELSE coalesce(('" + scalePowers + "'::numeric[])[scale(" + v + ") + 1], ('1e' || 12 * scale(" +
		v + "))::numeric) END"
	special = "CASE WHEN " + v + " IS NULL OR scale(" + v + ") IS NOT NULL THEN 0 WHEN " + v + " = 'NaN' THEN 1 WHEN " + v +
		" > 0 THEN 1e12 ELSE 1e24 END"
	return finite, scales, special
}

// numericValue is a numeric sum's (or average's) value from its state:
// NULL without values; NaN when there is a NaN or both infinities; the
// infinity when there is one; else the finite sum at the largest scale of
// the values summed (round changes no digit of it, only its scale),
// divided by the count for an average as numeric_avg does.
func numericValue(a AggCol, finite, nn, scales, special string) string {
	value := "round(" + finite + ", (length((" + scales + ")::text) - 1) / 12)"
	if a.Func == "avg" {
		value += " / (" + nn + ")"
	}
	sp := "(" + special + ")"
	pinf, ninf := "mod(div("+sp+", 1e12), 1e12) > 0", "div("+sp+", 1e24) > 0"
	return "CASE WHEN (" + nn + ") = 0 THEN NULL WHEN " + sp + " = 0 THEN " + value +
		" WHEN mod(" + sp + ", 1e12) > 0 OR (" + pinf + " AND " + ninf + ") THEN 'NaN'::numeric" +
		" WHEN " + pinf + " THEN 'Infinity'::numeric ELSE '-Infinity'::numeric END"
}

// numericState names a numeric sum's state columns (quoted), in the order
// numericValue reads them: finite sum, count, scales, specials.
func numericState(a AggCol) [4]string {
	return [4]string{ident(a.SumCol()), ident(a.NNCol()), ident(a.ScalesCol()), ident(a.SpecialCol())}
}

// numericDeltas name a numeric sum's per-group deltas in a batch (the
// aggregate at index i), in numericState's order.
func numericDeltas(i int) [4]string {
	return [4]string{fmt.Sprintf("__s%d", i), fmt.Sprintf("__nn%d", i), fmt.Sprintf("__h%d", i), fmt.Sprintf("__p%d", i)}
}
