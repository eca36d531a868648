package engine

// Catalog checks PlanCreate makes of every source table (FROM item) before
// it accepts a definition. Each refuses a definition the engine could
// accept but not keep exact: the target would drift from its query without
// any change arriving that says so.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// maxListedChildren bounds how many inheritance children an error names;
// a table with hundreds of children should not produce a page-long sentence.
const maxListedChildren = 5

// checkWholeSource refuses a FROM item that reads a table together with its
// inheritance children (plain FROM t, not FROM ONLY t, on a table that other
// tables INHERIT from). Such a scan returns the children's rows too, but the
// engine identifies a changed row by the relation it was written to: a
// change to a child arrives as a change to another table and would never
// reach this transform, so its target would silently go stale. FROM ONLY
// reads just the parent's own rows, which is what the engine can maintain.
//
// Partitioned tables (relkind 'p') are accepted: their partitions are in
// pg_inherits too, but the publication is created with
// publish_via_partition_root, so a partition's changes arrive as changes to
// the root. only is the FROM item's ONLY flag; qualified is the table as
// the sentence should name it (schema-qualified, quoted); oid is its
// pg_class oid, already resolved by the caller.
func checkWholeSource(ctx context.Context, db DB, transform string, oid uint32, qualified string, only bool) error {
	if only {
		return nil
	}
	// count(*) OVER () is computed before LIMIT, so it is the number of
	// all children while at most maxListedChildren rows come back.
	rows, err := db.Query(ctx, `
		SELECT n.nspname::text, c.relname::text, count(*) OVER ()
		FROM pg_inherits i
		JOIN pg_class p ON p.oid = i.inhparent
		JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE i.inhparent = $1 AND p.relkind <> 'p'
		ORDER BY n.nspname, c.relname
		LIMIT $2`, oid, maxListedChildren)
	if err != nil {
		return fmt.Errorf("read inheritance children of %s: %w", qualified, err)
	}
	defer rows.Close()
	var children []string
	var total int64
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name, &total); err != nil {
			return fmt.Errorf("read inheritance children of %s: %w", qualified, err)
		}
		children = append(children, pgx.Identifier{schema, name}.Sanitize())
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read inheritance children of %s: %w", qualified, err)
	}
	if len(children) == 0 {
		return nil
	}
	list := strings.Join(children, ", ")
	if more := total - int64(len(children)); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return terr.New(terr.Validation, "transform %q: %s has inheritance children (%s); changes to a child would not reach the transform — write FROM ONLY %s to read the parent's own rows, or select from each child",
		transform, qualified, list, qualified)
}

// isSystemColumn reports whether name is one of PostgreSQL's system
// columns: tableoid, xmin, cmin, xmax, cmax, ctid. Their values change
// without a row change being published (ctid moves under VACUUM FULL and
// CLUSTER, xmax under a row lock, cmin/cmax are per-command counters), so a
// transform reading them cannot be kept equal to its query. oid is not in
// the list: it stopped being a system column in PostgreSQL 12 (WITH OIDS
// was removed), so a column named oid is an ordinary user column.
//
// name is a column name as the parser resolved it (unquoted identifiers
// already folded to lower case), so "CTID" — which can only have been
// written quoted — is a user column and not matched.
func isSystemColumn(name string) bool {
	switch name {
	case "tableoid", "xmin", "cmin", "xmax", "cmax", "ctid":
		return true
	}
	return false
}

// systemColumnRefs returns the names among cols that are system columns,
// each once, in the order they first appear, so that the caller can pass
// every column reference of a definition and report them all in one
// sentence rather than one per attempt.
func systemColumnRefs(cols []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cols {
		if isSystemColumn(c) && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// systemColumnError is the refusal of a definition that reads system
// columns (see isSystemColumn for why they cannot be maintained); names are
// those columns, as systemColumnRefs returns them. It returns nil when names
// is empty, so a caller can write
//
//	if err := systemColumnError(name, systemColumnRefs(cols)); err != nil {
func systemColumnError(transform string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	return terr.New(terr.Validation, "transform %q: the query reads system column(s) %s; their values change with row locks, VACUUM FULL and CLUSTER without a change being published, so the target could not be kept equal — select a user column instead",
		transform, strings.Join(names, ", "))
}

// column is what the catalog says of one column of a source table.
type column struct {
	found   bool
	typ     string // format_type, with its modifier
	notNull bool
}

// sourceColumn looks a column of a source table up by name: the one
// catalog lookup behind column resolution, NOT NULL inference and the
// immutability scratch table.
func sourceColumn(ctx context.Context, db DB, src Source, name string) (column, error) {
	var c column
	err := db.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
		WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped`, src.OID, name).Scan(&c.typ, &c.notNull)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c, nil
	case err != nil:
		return c, fmt.Errorf("read column %s of %s: %w", name, src.Ident(), err)
	}
	c.found = true
	return c, nil
}
