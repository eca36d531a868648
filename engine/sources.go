package engine

// sources.go owns the source tables in the catalog: a FROM item resolved to
// a Source with its key (resolveSource, sourceKey), its columns (sourceColumn,
// notNullColumn), the check before a rebuild that it is still the same table
// (Revalidate), and the catalog checks below.
//
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

// resolveSource finds a FROM table in the catalog with its key.
func resolveSource(ctx context.Context, db DB, name, instanceSchema string, t TableRef) (Source, error) {
	lookup := pgx.Identifier{t.Name}.Sanitize()
	if t.Schema != "" {
		lookup = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	var src Source
	var relkind string
	err := db.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname, c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, lookup).
		Scan(&src.OID, &src.Schema, &src.Name, &relkind)
	if errors.Is(err, pgx.ErrNoRows) {
		return src, terr.New(terr.NotFound, "transform %q: FROM table %s does not exist; create it first or fix the name", name, lookup)
	}
	if err != nil {
		return src, fmt.Errorf("resolve source %s: %w", lookup, err)
	}
	if relkind != "r" && relkind != "p" {
		return src, terr.New(terr.Validation, "transform %q: FROM %s is not a table (relkind %q); a transform reads ordinary or partitioned tables", name, lookup, relkind)
	}
	if instanceSchema != "" && src.Schema == instanceSchema {
		return src, terr.New(terr.Validation, "transform %q: FROM %s is in the trellis-repl instance schema; transforms read user tables", name, lookup)
	}
	// Primary key (or replica identity index) of the source.
	if src.Key, err = sourceKey(ctx, db, src.OID); err != nil {
		return src, err
	}
	if len(src.Key) == 0 {
		return src, terr.New(terr.Validation, "transform %q: FROM table %s has no primary key; add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or make a unique index over NOT NULL columns its replica identity (ALTER TABLE %[2]s REPLICA IDENTITY USING INDEX ...), so changed rows can be identified (REPLICA IDENTITY FULL names no key)",
			name, src.Ident(), src.Ident())
	}
	if err := checkWholeSource(ctx, db, name, src.OID, src.Ident(), t.Only); err != nil {
		return src, err
	}
	src.Ref = t.RefName()
	src.From = src.Ident() + " AS " + pgx.Identifier{src.Ref}.Sanitize()
	if t.Only {
		src.From = "ONLY " + src.From
	}
	return src, nil
}

// sourceKey returns the primary key (else replica identity index) columns of
// a table in index order, with their types.
func sourceKey(ctx context.Context, db DB, oid uint32) ([]Col, error) {
	rows, err := db.Query(ctx, `
		WITH idx AS (
			SELECT i.indexrelid, i.indkey FROM pg_index i
			WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)
			ORDER BY i.indisprimary DESC LIMIT 1)
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM idx, unnest(idx.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = $1 AND a.attnum = k.attnum
		ORDER BY k.ord`, oid)
	if err != nil {
		return nil, fmt.Errorf("read key of table %d: %w", oid, err)
	}
	defer rows.Close()
	var out []Col
	for rows.Next() {
		var c Col
		if err := rows.Scan(&c.Name, &c.Type); err != nil {
			return nil, err
		}
		c.NotNull = true
		out = append(out, c)
	}
	return out, rows.Err()
}

// notNullColumn reports whether a column reference (ref "" when
// unqualified) always has a value: a NOT NULL column of a source that no
// outer join NULL-extends. An unqualified name is resolved as PostgreSQL
// does, to the one source that has such a column.
func notNullColumn(ctx context.Context, db DB, sources []Source, ref, column string) (bool, error) {
	found := false
	for _, src := range sources {
		if ref != "" && src.Ref != ref {
			continue
		}
		col, err := sourceColumn(ctx, db, src, column)
		if err != nil {
			return false, err
		}
		if !col.found {
			continue
		}
		if found {
			return false, nil // ambiguous: PostgreSQL refuses the query anyway
		}
		found = true
		if !col.notNull || src.Nullable {
			return false, nil
		}
	}
	return found, nil
}

// Revalidate checks, before a rebuild, that a stored plan still matches the
// database: the source exists with the same identity and key.
func Revalidate(ctx context.Context, db DB, name string, p *Plan) error {
	for _, src := range p.Tables() {
		if err := revalidateSource(ctx, db, name, src); err != nil {
			return err
		}
	}
	var ok bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, p.Target.Ident()).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return terr.New(terr.NotFound, "transform %q: its target table %s was dropped; DROP TRANSFORM %s and create it again", name, p.Target.Ident(), name)
	}
	return nil
}

// revalidateSource checks that one source table still exists with the
// same identity and key.
func revalidateSource(ctx context.Context, db DB, name string, src Source) error {
	_, err := findSource(ctx, db, name, src, func(oid uint32) error {
		if oid != src.OID {
			return terr.New(terr.Validation, "transform %q: its FROM table %s.%s was dropped and recreated; DROP TRANSFORM %s and create it again",
				name, src.Schema, src.Name, name)
		}
		return nil
	})
	return err
}

// findSource finds a source table by its schema-qualified name and
// checks its key is the plan's; same judges the OID found before the key
// is read (nil: any OID).
func findSource(ctx context.Context, db DB, name string, src Source, same func(oid uint32) error) (uint32, error) {
	var oid uint32
	err := db.QueryRow(ctx, `SELECT coalesce(to_regclass($1)::oid, 0)`, src.Ident()).Scan(&oid)
	if err != nil {
		return 0, fmt.Errorf("look for source: %w", err)
	}
	if oid == 0 {
		return 0, terr.New(terr.NotFound, "transform %q: its FROM table %s.%s no longer exists; recreate it, or DROP TRANSFORM %s",
			name, src.Schema, src.Name, name)
	}
	if same != nil {
		if err := same(oid); err != nil {
			return 0, err
		}
	}
	key, err := sourceKey(ctx, db, oid)
	if err != nil {
		return 0, err
	}
	ok := len(key) == len(src.Key)
	for i := 0; ok && i < len(key); i++ {
		ok = key[i].Name == src.Key[i].Name && key[i].Type == src.Key[i].Type
	}
	if !ok {
		return 0, terr.New(terr.Validation, "transform %q: the primary key of %s.%s changed; DROP TRANSFORM %s and create it again", name, src.Schema, src.Name, name)
	}
	return oid, nil
}
