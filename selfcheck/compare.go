// Package selfcheck audits derived tables: it compares a target table with
// a fresh run of the query that defines it, inside PostgreSQL, and reports
// the rows that differ.
//
// The comparison is a two-way EXCEPT ALL, so it is exact for every column
// type with an equality operator, counts duplicate rows by multiplicity,
// and treats NULLs as equal to each other, as the query's own result would.
package selfcheck

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// SampleSize is how many differing rows of each direction Compare returns.
const SampleSize = 5

// Querier opens transactions; *pgx.Conn and *pgxpool.Pool satisfy it.
type Querier interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Diff is the result of a two-way EXCEPT ALL comparison.
type Diff struct {
	// Missing counts rows the query produces but the target lacks
	// (a row present twice in the query and once in the target counts 1).
	Missing int64
	// Extra counts rows in the target that the query does not produce.
	Extra int64
	// MissingSample and ExtraSample hold up to SampleSize of those rows in
	// PostgreSQL's row text form, e.g. `(1,"a b",)`, in text order, so that
	// a report can show what differs. They are nil when there is none.
	MissingSample []string
	ExtraSample   []string
}

// Equal reports whether the target matched the query exactly.
func (d Diff) Equal() bool { return d.Missing == 0 && d.Extra == 0 }

// Compare compares table target, restricted to columns, with the result of
// query, a SELECT producing the same columns in the same order. Both are
// read in one REPEATABLE READ, read-only transaction, so they are compared
// as of one snapshot; concurrent writes cannot show up as differences on
// one side only.
//
// Every column type must have an equality operator (json and point do not;
// cast them, e.g. to jsonb or text, in both the target and the query).
func Compare(ctx context.Context, conn Querier, target pgx.Identifier, columns []string, query string) (Diff, error) {
	return CompareUnder(ctx, conn, target, columns, query, nil)
}

// CompareUnder is Compare with the query evaluated under settings (name,
// value pairs set for the comparison's transaction): the settings the
// definition recorded, which its built-ins read (TimeZone, DateStyle, …).
func CompareUnder(ctx context.Context, conn Querier, target pgx.Identifier, columns []string, query string, settings [][2]string) (Diff, error) {
	if len(target) == 0 {
		return Diff{}, terr.New(terr.Validation, "self-check: no target table given")
	}
	if len(columns) == 0 {
		return Diff{}, terr.New(terr.Validation, "self-check of %s: no columns to compare", target.Sanitize())
	}
	query = strings.TrimRight(strings.TrimSpace(query), "; \t\r\n")
	if query == "" {
		return Diff{}, terr.New(terr.Validation, "self-check of %s: empty defining query", target.Sanitize())
	}

	cols := make([]string, len(columns))
	for i, c := range columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	// The query runs as a subquery; a newline before the closing
	// parenthesis keeps a trailing "-- comment" in it from swallowing it.
	fromQuery := "SELECT * FROM (" + query + "\n) AS q"
	fromTarget := "SELECT " + strings.Join(cols, ", ") + " FROM " + target.Sanitize()

	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Diff{}, fmt.Errorf("self-check of %s: begin: %w", target.Sanitize(), err)
	}
	// Read-only: rolling back discards nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if len(settings) > 0 {
		// One statement for them all: a comparison is often one of many.
		names, values := make([]string, len(settings)), make([]string, len(settings))
		for i, kv := range settings {
			names[i], values[i] = kv[0], kv[1]
		}
		if _, err := tx.Exec(ctx, `SELECT set_config(n, v, true) FROM unnest($1::text[], $2::text[]) AS s(n, v)`, names, values); err != nil {
			return Diff{}, fmt.Errorf("self-check of %s: set the definition's settings: %w", target.Sanitize(), err)
		}
	}

	var d Diff
	if d.Missing, d.MissingSample, err = exceptAll(ctx, tx, fromQuery, fromTarget); err != nil {
		return Diff{}, fmt.Errorf("self-check of %s: rows missing from the target: %w", target.Sanitize(), err)
	}
	if d.Extra, d.ExtraSample, err = exceptAll(ctx, tx, fromTarget, fromQuery); err != nil {
		return Diff{}, fmt.Errorf("self-check of %s: extra rows in the target: %w", target.Sanitize(), err)
	}
	return d, nil
}

// exceptAll counts the rows of left EXCEPT ALL right and samples them. The
// CTE is materialised once because it is referenced twice.
func exceptAll(ctx context.Context, tx pgx.Tx, left, right string) (int64, []string, error) {
	sql := fmt.Sprintf(`WITH d AS MATERIALIZED ((%s) EXCEPT ALL (%s))
SELECT (SELECT count(*) FROM d),
       ARRAY(SELECT s.r FROM (SELECT d::text AS r FROM d) AS s ORDER BY s.r LIMIT %d)`,
		left, right, SampleSize)
	var (
		n      int64
		sample []string
	)
	if err := tx.QueryRow(ctx, sql).Scan(&n, &sample); err != nil {
		return 0, nil, err
	}
	if len(sample) == 0 {
		sample = nil // so that an equal result is the zero Diff
	}
	return n, sample, nil
}
