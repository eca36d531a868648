package tpch

import (
	"fmt"
	"strings"
)

// This file builds the SQL expressions the generator is made of. Every
// pseudo-random value is hashint8extended(key, seed): a pure function of a
// row's key and a per-column seed, so a data set depends only on the scale
// factor (and a refresh only on the round and the current contents), never
// on evaluation order, parallel plans or a session's random() state.
// hashint8extended (the function hash partitioning uses) and md5 are
// computed from values, not memory layout, so neither is the data
// specific to the server's platform.

// Spec constants (TPC-H 4.2.3): order dates run from STARTDATE to
// ENDDATE-151 days, and CURRENTDATE splits shipped from open lines.
const (
	startDate   = "1992-01-01"
	orderDays   = 2405 // date '1998-08-02' - date '1992-01-01'
	currentDate = "1995-06-17"
)

// Column seeds. Each generated column has its own so that columns are
// independent; text columns use seed+word index, hence the spacing.
const (
	colRegionComment = iota*100 + 100
	colNationComment
	colSuppAddr
	colSuppNationMul
	colSuppNationAdd
	colSuppPhone
	colSuppAcctbal
	colSuppComment
	colSuppSpecial
	colSuppSpecialWord
	colPartName
	colPartMfgr
	colPartBrand
	colPartType1
	colPartType2
	colPartType3
	colPartSize
	colPartCont1
	colPartCont2
	colPartComment
	colPSQty
	colPSCost
	colPSComment
	colCustAddr
	colCustNation
	colCustPhone
	colCustAcctbal
	colCustSegment
	colCustComment
	colOrdCust
	colOrdDate
	colOrdPrio
	colOrdClerk
	colOrdComment
	colOrdLines
	colOrdBig
	colLinePart
	colLineSupp
	colLineQty
	colLineBigQty
	colLineDisc
	colLineTax
	colLineShip
	colLineCommit
	colLineReceipt
	colLineFlag
	colLineInstruct
	colLineMode
	colLineComment
	colUpdate // UpdateAll's picks and new values start here
)

// loadSeed is Load's seed base. Any value gives a spec-shaped data set;
// this one is chosen (from the first 24 multiples of 10,000) because at SF
// 0.01 it makes every query's result not only non-empty but free of NULL
// aggregates (Q17's and Q19's predicates expect about one or two matching
// lines at SF 0.01, so some seeds leave them NULL), gives Brazil a
// non-zero Q8 market share in both years, and leaves Q2 and Q20 more than
// one row.
const loadSeed = 30_000

// roundSeed spaces the seeds of refresh rounds so that no two rounds (and
// no round and the initial load) share a column seed.
const roundSeed = 1_000_003

// gen renders generator expressions for one seed base: loadSeed for
// Load, a round-specific base for the refresh functions.
type gen struct{ base int64 }

// h is a non-negative 63-bit hash of the SQL expression key under col.
func (g gen) h(key string, col int) string {
	return fmt.Sprintf("(hashint8extended((%s)::bigint, %d) & 9223372036854775807)", key, g.base+int64(col))
}

// rnd is a uniform integer in [lo, hi].
func (g gen) rnd(key string, col int, lo, hi int64) string {
	return fmt.Sprintf("(%d + %s %% %d)", lo, g.h(key, col), hi-lo+1)
}

// rndN is a uniform integer in [0, n) for an SQL expression n.
func (g gen) rndN(key string, col int, n string) string {
	return fmt.Sprintf("(%s %% (%s))", g.h(key, col), n)
}

// money is a numeric with two decimals, uniform in [lo, hi] cents.
func (g gen) money(key string, col int, loCents, hiCents int64) string {
	return fmt.Sprintf("(%s::numeric / 100)", g.rnd(key, col, loCents, hiCents))
}

// pick chooses one element of words (weights expressed by repetition).
func (g gen) pick(key string, col int, words []string) string {
	return fmt.Sprintf("(%s)[1 + %s %% %d]", arrayLit(words), g.h(key, col), len(words))
}

// orderDate is startDate plus a uniform number of days in [0, orderDays].
func (g gen) orderDate(key string, col int) string {
	return fmt.Sprintf("(date '%s' + %s::integer)", startDate, g.rnd(key, col, 0, orderDays))
}

// text is a comment in the spirit of the spec's text grammar: sentences
// of the spec's vocabulary, cut to a uniform length in [minLen, maxLen].
func (g gen) text(key string, col int, minLen, maxLen int) string {
	n := maxLen/4 + 2
	if n > 55 {
		panic("tpch: text longer than a column's seed range allows")
	}
	pattern := []func(i int) string{
		func(i int) string { return g.pick(key, col+1+i, adverbs) },
		func(i int) string { return g.pick(key, col+1+i, adjectives) },
		func(i int) string { return g.pick(key, col+1+i, nouns) },
		func(i int) string { return g.pick(key, col+1+i, verbs) },
		func(i int) string { return g.pick(key, col+1+i, adverbs) },
		func(i int) string { return g.pick(key, col+1+i, prepositions) },
		func(int) string { return "'the'" },
		func(i int) string { return g.pick(key, col+1+i, adjectives) },
		func(i int) string {
			return g.pick(key, col+1+i, nouns) + " || " + g.pick(key, col+60+i/9, terminators)
		},
	}
	words := make([]string, n)
	for i := range words {
		words[i] = pattern[i%len(pattern)](i)
	}
	return fmt.Sprintf("left(concat_ws(' ', %s), %s::integer)", strings.Join(words, ", "), g.rnd(key, col, int64(minLen), int64(maxLen)))
}

// vstring is the spec's random v-string (addresses): hex digits here, of a
// uniform length in [minLen, maxLen] (maxLen <= 64).
func (g gen) vstring(key string, col int, minLen, maxLen int) string {
	return fmt.Sprintf("left(md5((%[1]s)::text || ':%[2]d') || md5((%[1]s)::text || ':%[2]d:2'), %[3]s::integer)",
		key, g.base+int64(col), g.rnd(key, col, int64(minLen), int64(maxLen)))
}

// phone is the spec's phone number: country code nation+10, then random
// local digits.
func (g gen) phone(nation, key string, col int) string {
	return fmt.Sprintf("((%s) + 10)::text || '-' || %s::text || '-' || %s::text || '-' || %s::text",
		nation, g.rnd(key, col, 100, 999), g.rnd(key, col+1, 100, 999), g.rnd(key, col+2, 1000, 9999))
}

// retailPrice is the spec's p_retailprice formula; lineitems use it for
// l_extendedprice so that they need not join part.
func retailPrice(partkey string) string {
	return fmt.Sprintf("((90000 + ((%[1]s) / 10) %% 20001 + 100 * ((%[1]s) %% 1000))::numeric / 100)", partkey)
}

// partSupp is the suppkey of a part's i-th (0..3) supplier. The spec's
// formula, (p + i*(S/4 + (p-1)/S)) mod S + 1, repeats a supplier for some
// small S; adding (p-1)/S to the base instead keeps the four distinct for
// every S >= 4 while still varying the set between parts p and p+S.
func partSupp(partkey, i, ns string) string {
	return fmt.Sprintf("((%[1]s) + ((%[1]s) - 1) / (%[3]s) + (%[2]s) * ((%[3]s) / 4)) %% (%[3]s) + 1", partkey, i, ns)
}

// lineStatus and returnFlag follow the spec: shipped by CURRENTDATE is
// 'F', received by it is returned ('R') or accepted ('A') at random.
func lineStatus(shipdate string) string {
	return fmt.Sprintf("CASE WHEN (%s) > date '%s' THEN 'O' ELSE 'F' END", shipdate, currentDate)
}

func (g gen) returnFlag(receiptdate, key string, col int) string {
	return fmt.Sprintf("CASE WHEN (%s) <= date '%s' THEN CASE WHEN %s %% 2 = 0 THEN 'R' ELSE 'A' END ELSE 'N' END",
		receiptdate, currentDate, g.h(key, col))
}

// custForOrder maps a random j in [0, nc - nc/3) onto the custkeys that
// are not multiples of 3: the spec leaves a third of customers orderless.
func (g gen) custForOrder(key string, col int, nc string) string {
	j := g.rndN(key, col, fmt.Sprintf("(%[1]s) - (%[1]s) / 3", nc))
	return fmt.Sprintf("(%[1]s / 2 * 3 + %[1]s %% 2 + 1)", j)
}

// arrayLit renders words as a text[] literal.
func arrayLit(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", "''") + "'"
	}
	return "ARRAY[" + strings.Join(q, ",") + "]::text[]"
}

// weighted expands (word, weight) pairs into a list in which each word
// occurs weight times, so that pick reproduces the spec's distributions.
func weighted(pairs ...any) []string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		for n := pairs[i+1].(int); n > 0; n-- {
			out = append(out, pairs[i].(string))
		}
	}
	return out
}

// Vocabularies of TPC-H 4.2.2.13 and 4.2.3. The text-grammar weights are
// the spec's divided by ten (at least one).
var (
	regions = []string{"AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"}

	// nations lists the spec's nations in nationkey order with their
	// regionkeys.
	nations = []struct {
		name   string
		region int
	}{
		{"ALGERIA", 0}, {"ARGENTINA", 1}, {"BRAZIL", 1}, {"CANADA", 1}, {"EGYPT", 4},
		{"ETHIOPIA", 0}, {"FRANCE", 3}, {"GERMANY", 3}, {"INDIA", 2}, {"INDONESIA", 2},
		{"IRAN", 4}, {"IRAQ", 4}, {"JAPAN", 2}, {"JORDAN", 4}, {"KENYA", 0},
		{"MOROCCO", 0}, {"MOZAMBIQUE", 0}, {"PERU", 1}, {"CHINA", 2}, {"ROMANIA", 3},
		{"SAUDI ARABIA", 4}, {"VIETNAM", 2}, {"RUSSIA", 3}, {"UNITED KINGDOM", 3}, {"UNITED STATES", 1},
	}

	colors = []string{
		"almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue",
		"blush", "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral",
		"cornflower", "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger", "drab", "firebrick",
		"floral", "forest", "frosted", "gainsboro", "ghost", "goldenrod", "green", "grey", "honeydew",
		"hot", "indian", "ivory", "khaki", "lace", "lavender", "lawn", "lemon", "light", "lime", "linen",
		"magenta", "maroon", "medium", "metallic", "midnight", "mint", "misty", "moccasin", "navajo",
		"navy", "olive", "orange", "orchid", "pale", "papaya", "peach", "peru", "pink", "plum", "powder",
		"puff", "purple", "red", "rose", "rosy", "royal", "saddle", "salmon", "sandy", "seashell",
		"sienna", "sky", "slate", "smoke", "snow", "spring", "steel", "tan", "thistle", "tomato",
		"turquoise", "violet", "wheat", "white", "yellow",
	}

	typeSyl1  = []string{"STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"}
	typeSyl2  = []string{"ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"}
	typeSyl3  = []string{"TIN", "NICKEL", "BRASS", "STEEL", "COPPER"}
	contSyl1  = []string{"SM", "LG", "MED", "JUMBO", "WRAP"}
	contSyl2  = []string{"CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"}
	segments  = []string{"AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD"}
	priorites = []string{"1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"}
	instructs = []string{"DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"}
	shipmodes = []string{"REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"}

	nouns = weighted(
		"packages", 4, "requests", 4, "accounts", 4, "deposits", 4, "foxes", 2, "ideas", 2,
		"theodolites", 2, "pinto beans", 2, "instructions", 2, "dependencies", 1, "excuses", 1,
		"platelets", 1, "asymptotes", 1, "courts", 1, "dolphins", 1, "multipliers", 1, "sauternes", 1,
		"warthogs", 1, "frets", 1, "dinos", 1, "attainments", 1, "somas", 1, "Tiresias", 1,
		"patterns", 1, "forges", 1, "braids", 1, "hockey players", 1, "frays", 1, "warhorses", 1,
		"dugouts", 1, "notornis", 1, "epitaphs", 1, "pearls", 1, "tithes", 1, "waters", 1,
		"orbits", 1, "gifts", 1, "sheaves", 1, "depths", 1, "sentiments", 1, "decoys", 1,
		"realms", 1, "pains", 1, "grouches", 1, "escapades", 1)
	verbs = weighted(
		"sleep", 2, "wake", 2, "are", 2, "cajole", 2, "haggle", 2, "nag", 1, "use", 1, "boost", 1,
		"affix", 1, "detect", 1, "integrate", 1, "maintain", 1, "nod", 1, "was", 1, "lose", 1,
		"sublate", 1, "solve", 1, "thrash", 1, "promise", 1, "engage", 1, "hinder", 1, "print", 1,
		"x-ray", 1, "breach", 1, "eat", 1, "grow", 1, "impress", 1, "mold", 1, "poach", 1, "serve", 1,
		"run", 1, "dazzle", 1, "snooze", 1, "doze", 1, "unwind", 1, "kindle", 1, "play", 1, "hang", 1,
		"believe", 1, "doubt", 1)
	adjectives = weighted(
		"special", 2, "pending", 2, "unusual", 2, "express", 2, "furious", 1, "sly", 1, "careful", 1,
		"blithe", 1, "quick", 1, "fluffy", 1, "slow", 1, "quiet", 1, "ruthless", 1, "thin", 1,
		"close", 1, "dogged", 1, "daring", 1, "brave", 1, "stealthy", 1, "permanent", 1,
		"enticing", 1, "idle", 1, "busy", 1, "regular", 5, "final", 4, "ironic", 4, "even", 3,
		"bold", 2, "silent", 1)
	adverbs = weighted(
		"sometimes", 1, "always", 1, "never", 1, "furiously", 5, "slyly", 5, "carefully", 5,
		"blithely", 4, "quickly", 3, "fluffily", 2, "slowly", 1, "quietly", 1, "ruthlessly", 1,
		"thinly", 1, "closely", 1, "doggedly", 1, "daringly", 1, "bravely", 1, "stealthily", 1,
		"permanently", 1, "enticingly", 1, "idly", 1, "busily", 1, "regularly", 1, "finally", 1,
		"ironically", 1, "evenly", 1, "boldly", 1, "silently", 1)
	prepositions = weighted(
		"about", 5, "above", 5, "according to", 5, "across", 5, "after", 5, "against", 4, "along", 4,
		"alongside of", 3, "among", 3, "around", 2, "at", 1, "atop", 1, "before", 1, "behind", 1,
		"beneath", 1, "beside", 1, "besides", 1, "between", 1, "beyond", 1, "by", 1, "despite", 1,
		"during", 1, "except", 1, "for", 1, "from", 1, "in place of", 1, "inside", 1, "instead of", 1,
		"into", 1, "near", 1, "of", 1, "on", 1, "outside", 1, "over", 1, "past", 1, "since", 1,
		"through", 1, "throughout", 1, "to", 1, "toward", 1, "under", 1, "until", 1, "up", 1,
		"upon", 1, "without", 1, "with", 1, "within", 1)
	terminators = weighted(".", 10, ";", 1, ":", 1, "?", 1, "!", 1, "--", 1)
)
