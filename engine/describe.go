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
	if len(sd.Fields) == 0 {
		return out, nil, nil
	}
	// Every column's type in one statement: a definition describes many
	// queries (its own, its levels', the immutability test's), each a
	// round trip per column before.
	oids := make([]uint32, len(sd.Fields))
	mods := make([]int32, len(sd.Fields))
	for i, f := range sd.Fields {
		oids[i], mods[i] = f.DataTypeOID, f.TypeModifier
	}
	rows, err := db.Query(ctx, `SELECT format_type(t.oid, nullif(t.mod, -1)), coalesce((SELECT typcollation <> 0 FROM pg_type WHERE oid = t.oid), false)
		FROM unnest($1::oid[], $2::int[]) WITH ORDINALITY AS t(oid, mod, i) ORDER BY t.i`, oids, mods)
	if err != nil {
		return nil, nil, fmt.Errorf("format the types of %d columns: %w", len(sd.Fields), err)
	}
	n := 0
	for ; rows.Next() && n < len(out); n++ {
		var coll bool
		if err := rows.Scan(&out[n].name, &coll); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("format type %d: %w", oids[n], err)
		}
		if coll {
			collatable = append(collatable, n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("format the types of %d columns: %w", len(out), err)
	}
	if n != len(out) {
		return nil, nil, fmt.Errorf("format the types of %d columns: %d came back", len(out), n)
	}
	for i, f := range sd.Fields {
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
