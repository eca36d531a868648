package engine

// describe.go owns column typing: the types and collations PostgreSQL gives
// a query's columns without running it (describe, describeStored), a stored
// column's type in DDL (typeDDL), and which types sum exactly.

import (
	"context"
	"fmt"
	"strings"
)

type colType struct {
	oid  uint32
	name string
	// collation: see Col.Collation.
	collation string
}

// describe asks PostgreSQL for the result types of a SELECT without
// running it.
func describe(ctx context.Context, db DB, sql string) ([]colType, error) {
	out, _, err := describeTypes(ctx, db, sql)
	return out, err
}

// describeStored is describe plus the collations of the collatable
// columns: what a stored column of the plan needs (the drift watch, which
// compares types only, spares the extra query).
func describeStored(ctx context.Context, db DB, sql string) ([]colType, error) {
	out, collatable, err := describeTypes(ctx, db, sql)
	if err == nil && len(collatable) > 0 {
		err = describeCollations(ctx, db, sql, out, collatable)
	}
	return out, err
}

// describeTypes is describe, and which columns are collatable.
func describeTypes(ctx context.Context, db DB, sql string) ([]colType, []int, error) {
	sd, err := db.Conn().PgConn().Prepare(ctx, "", sql, nil)
	if err != nil {
		return nil, nil, err
	}
	out := make([]colType, len(sd.Fields))
	var collatable []int
	for i, f := range sd.Fields {
		var coll bool
		if err := db.QueryRow(ctx, `SELECT format_type($1::oid, nullif($2::int, -1)), coalesce((SELECT typcollation <> 0 FROM pg_type WHERE oid = $1::oid), false)`,
			f.DataTypeOID, f.TypeModifier).Scan(&out[i].name, &coll); err != nil {
			return nil, nil, fmt.Errorf("format type %d: %w", f.DataTypeOID, err)
		}
		if coll {
			collatable = append(collatable, i)
		}
		// Without a length, "character" and "bit" name one-character types
		// in DDL; an expression's char/bit value can be any length.
		if f.TypeModifier < 0 {
			switch f.DataTypeOID {
			case 1042:
				out[i].name = "bpchar"
			case 1560:
				out[i].name = "bit varying"
			}
		}
		out[i].oid = f.DataTypeOID
	}
	return out, collatable, nil
}

// describeCollations sets the collation of the columns at idx of sql's
// result: pg_collation_for over the columns of one NULL-extended row, so
// the query is planned but reads nothing.
func describeCollations(ctx context.Context, db DB, sql string, out []colType, idx []int) error {
	names := make([]string, len(out))
	for i := range out {
		names[i] = fmt.Sprintf("c%d", i)
	}
	calls := make([]string, len(idx))
	for k, i := range idx {
		calls[k] = "pg_collation_for(__q.c" + fmt.Sprint(i) + ")"
	}
	q := "SELECT " + strings.Join(calls, ", ") + " FROM (" + sql + ") AS __q(" + strings.Join(names, ", ") + ") RIGHT JOIN (SELECT) AS __one ON false"
	colls := make([]*string, len(idx))
	dest := make([]any, len(idx))
	for k := range colls {
		dest[k] = &colls[k]
	}
	if err := db.QueryRow(ctx, q).Scan(dest...); err != nil {
		return fmt.Errorf("read the collations of the query's columns: %w", err)
	}
	for k, i := range idx {
		if colls[k] != nil && *colls[k] != `"default"` {
			out[i].collation = *colls[k]
		}
	}
	return nil
}

// typeDDL is a stored column's type with its collation.
func typeDDL(typ, collation string) string {
	if collation == "" {
		return typ
	}
	return typ + " COLLATE " + collation
}

// exactNumeric reports whether sums of this type are exact (and so can be
// maintained by deltas): smallint, integer, bigint, numeric.
func exactNumeric(oid uint32) bool {
	switch oid {
	case 20, 21, 23, 1700:
		return true
	}
	return false
}
