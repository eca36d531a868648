package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EnumerateTable lists up to limit keys of table (a partition of source
// src's table, named as regclass prints it), in key order after cursor
// (nil = from the start): the keys a correction re-derives when the table
// joins or leaves the source's partition tree (ADR 0015).
func (a *Applier) EnumerateTable(ctx context.Context, src int, table string, cursor []string, limit int) ([][]string, error) {
	key := a.Plan.Sources[src].Key
	cols := make([]string, len(key))
	texts := make([]string, len(key))
	params := make([]string, len(key))
	for i, k := range key {
		cols[i] = pgx.Identifier{k.Name}.Sanitize()
		// Aliased: ORDER BY a name an output column also has sorts the
		// output (text), not the key.
		texts[i] = fmt.Sprintf("%s::text AS __k%d", cols[i], i)
		params[i] = fmt.Sprintf("$%d::%s", i+1, k.Type)
	}
	sql := "SELECT " + strings.Join(texts, ", ") + " FROM " + table
	args := []any{}
	if cursor != nil {
		sql += " WHERE (" + strings.Join(cols, ", ") + ") > (" + strings.Join(params, ", ") + ")"
		for _, c := range cursor {
			args = append(args, c)
		}
	}
	sql += fmt.Sprintf(" ORDER BY %s LIMIT $%d", strings.Join(cols, ", "), len(args)+1)
	args = append(args, limit)
	rows, err := a.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("enumerate keys of %s for %s: %w", table, a.Plan.Target.Name, err)
	}
	return scanKeys(rows)
}
