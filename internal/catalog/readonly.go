package catalog

import (
	"context"
	"fmt"
)

// Presence is what a database holds of an instance schema, read without
// creating anything (ADR 0017 §5): whether the schema exists, whether it
// holds a catalog, and the catalog's version.
type Presence struct {
	SchemaExists bool
	HasCatalog   bool
	Version      int
}

// Probe reads the Presence of the instance schema. It looks the schema and
// its tables up in pg_namespace and pg_class (readable by every role), and
// reads the version only when the catalog exists: that read needs USAGE on
// the schema and SELECT on its tables.
func (c Catalog) Probe(ctx context.Context, q Querier) (Presence, error) {
	var p Presence
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1),
		(SELECT count(*) = 2 FROM pg_class k JOIN pg_namespace n ON n.oid = k.relnamespace
		 WHERE n.nspname = $1 AND k.relname IN ('schema_migrations', 'transforms'))`, c.Schema).Scan(&p.SchemaExists, &p.HasCatalog)
	if err != nil {
		return p, fmt.Errorf("look for instance schema %s: %w", c.Schema, err)
	}
	if !p.HasCatalog {
		return p, nil
	}
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+c.T("schema_migrations")).Scan(&p.Version); err != nil {
		return p, fmt.Errorf("read the catalog version of %s: %w", c.Schema, err)
	}
	return p, nil
}

// Instances lists the schemas of the current database that hold a
// trellis-repl catalog, by name.
func Instances(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname::text FROM pg_namespace n
		WHERE EXISTS (SELECT FROM pg_class k WHERE k.relnamespace = n.oid AND k.relname = 'schema_migrations')
		  AND EXISTS (SELECT FROM pg_class k WHERE k.relnamespace = n.oid AND k.relname = 'transforms')
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list instance schemas: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
