package generative

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// typ is a column type of the generated schemas.
type typ int

const (
	tInt typ = iota
	tBigint
	tNumeric
	tText
	tBool
	tFloat
	tDate
	numTypes
	// tTimestamptz is drawn for the graph tables only (graph.go), after
	// numTypes so that newTable never draws it.
	tTimestamptz
)

func (t typ) numeric() bool { return t == tInt || t == tBigint || t == tNumeric || t == tFloat }
func (t typ) integer() bool { return t == tInt || t == tBigint }

// orderable: has min/max (boolean has neither).
func (t typ) orderable() bool { return t != tBool }

// column is one column of a generated table.
type column struct {
	name    string // as written in SQL (quoted when needed)
	typ     typ
	sqlType string
	notNull bool
	// small: every value is small, so arithmetic on it cannot overflow.
	small  bool
	domain []string // SQL literals of the values it takes, NULL aside
}

// table is one generated source table.
type table struct {
	name string // as written in SQL
	cols []*column
	key  []*column
	// shiftKey is an integer key column whose values can be moved out of
	// the domain and back (UPDATE … SET k = k + 100).
	shiftKey *column
	// dim: a join program's dimension table, kept small (no bulk rows).
	dim bool
}

func (t *table) nonKey() []*column {
	var out []*column
	for _, c := range t.cols {
		if !t.isKey(c) {
			out = append(out, c)
		}
	}
	return out
}

func (t *table) isKey(c *column) bool {
	for _, k := range t.key {
		if k == c {
			return true
		}
	}
	return false
}

// Long text values: one compressible (stored inline), one that is not and
// so goes to a TOAST table (unchanged-TOAST markers in the WAL).
const (
	longInline   = `repeat('ab', 2000)`
	longExternal = `(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i)`
)

// Weird identifiers, used now and then so that quoting is exercised.
var weirdColumnNames = []string{`"Amount"`, `"select"`, `"a b"`, `"x""y"`, `"Ünits"`}
var weirdTableNames = []string{`"Order Items"`, `"T"`, `"from"`}
var weirdTransformNames = []string{`"T-1"`, `"Big Groups"`, `"Sum"`}

// unquote returns the name PostgreSQL stores for an identifier as written.
func unquote(id string) string {
	if strings.HasPrefix(id, `"`) && strings.HasSuffix(id, `"`) && len(id) >= 2 {
		return strings.ReplaceAll(id[1:len(id)-1], `""`, `"`)
	}
	return strings.ToLower(id)
}

// specialsSalt seeds the stream that decides Profile.Specials.
const specialsSalt = 0x6e614e21

// addSpecials gives the numeric columns without a typmod (a typmod
// refuses the infinities) that are not keys NaN and the infinities too.
func addSpecials(tables []*table) {
	for _, t := range tables {
		for _, c := range t.cols {
			if c.typ == tNumeric && c.sqlType == "numeric" && !slices.Contains(t.key, c) {
				c.domain = append(slices.Clone(c.domain), "'NaN'", "'Infinity'", "'-Infinity'")
			}
		}
	}
}

// newColumn draws a column of type ty. key columns get small domains with
// values that are equal but print differently (1.0 and 1.00, 0 and -0).
func newColumn(r *rand.Rand, name string, ty typ, key bool) *column {
	c := &column{name: name, typ: ty, notNull: key || r.IntN(4) == 0, small: true}
	switch ty {
	case tInt, tBigint:
		c.sqlType = map[typ]string{tInt: "int", tBigint: "bigint"}[ty]
		if !key && r.IntN(3) == 0 {
			c.small = false
			if ty == tInt {
				c.domain = []string{"-2147483648", "2147483647", "0", "1", "-1", "1000000"}
			} else {
				c.domain = []string{"-9223372036854775808", "9223372036854775807", "0", "42", "-1", "4294967296"}
			}
		} else {
			lo, n := -2, 4+r.IntN(6)
			if key {
				lo, n = 0, 3+r.IntN(10)
			}
			for v := lo; v < lo+n; v++ {
				c.domain = append(c.domain, fmt.Sprint(v))
			}
		}
	case tNumeric:
		switch {
		case key:
			c.sqlType = "numeric"
			c.domain = []string{"1", "1.0", "1.00", "2.5", "0", "-0.0", "3"}
		case r.IntN(2) == 0:
			c.sqlType = "numeric(10,2)"
			c.domain = []string{"0", "1.5", "-2.25", "10", "99999999.99", "-99999999.99", "0.01"}
		default:
			c.sqlType = "numeric"
			c.domain = []string{"0", "1.5", "1.50", "-2.25", "10", "1e20", "-0.001", "123456789.123456789"}
		}
	case tText:
		c.sqlType = "text"
		if key {
			c.domain = []string{"'a'", "'b'", "''", "'A'", "'a '", "'c'", "'NULL'"}
		} else {
			c.domain = []string{"''", "'a'", "'b'", "'A'", "'a b'", "'NULL'", "','", "'it''s'", "'ü'", "' '", `'\'`}
		}
		switch {
		case r.IntN(3) > 0:
		case key:
			// An index entry must fit a page: only the compressible one.
			c.domain = append(c.domain, longInline)
		default:
			c.domain = append(c.domain, longInline, longExternal)
		}
	case tBool:
		c.sqlType = "boolean"
		c.domain = []string{"true", "false"}
	case tFloat:
		c.sqlType = "float8"
		if key {
			c.domain = []string{"0", "'-0'", "0.5", "1", "2", "'NaN'"}
		} else {
			c.domain = []string{"0", "0.5", "-1.25", "3", "1e12", "-1e12", "'Infinity'", "'-Infinity'", "'NaN'", "'-0'"}
		}
	case tDate:
		c.sqlType = "date"
		if key {
			c.domain = []string{"'2000-01-01'", "'2000-01-02'", "'2024-02-29'", "'infinity'"}
		} else {
			c.domain = []string{"'2000-01-01'", "'1999-12-31'", "'2024-02-29'", "'infinity'", "'-infinity'", "'0044-03-15 BC'"}
		}
	}
	// Small domains make keys and groups collide.
	if !key && len(c.domain) > 3 && r.IntN(2) == 0 {
		r.Shuffle(len(c.domain), func(i, j int) { c.domain[i], c.domain[j] = c.domain[j], c.domain[i] })
		c.domain = c.domain[:3+r.IntN(len(c.domain)-3)]
	}
	return c
}

// newTable draws a table with 1–3 key columns and 1–5 other columns.
func newTable(r *rand.Rand, name string) *table {
	t := &table{name: name}
	nkey := 1
	switch x := r.IntN(10); {
	case x < 3:
		nkey = 2
	case x < 4:
		nkey = 3
	}
	keyTypes := []typ{tInt, tInt, tInt, tBigint, tText, tDate, tNumeric, tFloat, tBool}
	nval := 1 + r.IntN(5)
	names := map[string]bool{}
	colName := func(i int) string {
		if r.IntN(12) == 0 {
			n := weirdColumnNames[r.IntN(len(weirdColumnNames))]
			if !names[n] {
				names[n] = true
				return n
			}
		}
		n := fmt.Sprintf("c%d", i)
		names[n] = true
		return n
	}
	i := 0
	for k := 0; k < nkey; k++ {
		ty := keyTypes[r.IntN(len(keyTypes))]
		if k == 0 && ty == tBool {
			ty = tInt // a boolean alone is too small a key
		}
		c := newColumn(r, colName(i), ty, true)
		i++
		t.key = append(t.key, c)
		t.cols = append(t.cols, c)
	}
	for v := 0; v < nval; v++ {
		c := newColumn(r, colName(i), typ(r.IntN(int(numTypes))), false)
		i++
		t.cols = append(t.cols, c)
	}
	// Interleave key and other columns now and then.
	if r.IntN(3) == 0 {
		r.Shuffle(len(t.cols), func(i, j int) { t.cols[i], t.cols[j] = t.cols[j], t.cols[i] })
	}
	for _, k := range t.key {
		if k.typ.integer() {
			t.shiftKey = k
			break
		}
	}
	return t
}

// createSQL is the table's CREATE TABLE statement.
func (t *table) createSQL() string {
	var parts []string
	for _, c := range t.cols {
		s := c.name + " " + c.sqlType
		if c.notNull && !t.isKey(c) {
			s += " NOT NULL"
		}
		parts = append(parts, s)
	}
	var keys []string
	for _, k := range t.key {
		keys = append(keys, k.name)
	}
	parts = append(parts, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
	return "CREATE TABLE " + t.name + " (" + strings.Join(parts, ", ") + ")"
}
