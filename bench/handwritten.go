package bench

// The hand-written baseline of the re-derive phase.
//
// The engine's apply time for a re-derive is only meaningful next to what a
// competent engineer would get from hand-written, set-based SQL doing the
// same job in the same database, measured in the same run (the machine is
// shared and noisy, so absolute times do not compare across runs). For each
// shape the baseline keeps its own hand-maintained copy of the target, built
// from the source before the re-derive update, and after the update
// re-derives exactly the keys the update changed, in one transaction:
//
//   - row: hand_row(id pk, g, v2); delete the changed ids, insert them again
//     from the source through the shape's filter.
//   - agg, agg1k: a ledger hand_ledger(id pk, g, v) indexed on g (one row
//     per source row, as the engine keeps) and a target
//     hand_agg(g pk, n, s, lo). Old contributions come from the ledger, new
//     ones from the source; count and sum are maintained by deltas, min is
//     recomputed from the ledger for the affected groups, groups left empty
//     are deleted.
//
// The list of changed ids is what the engineer is given: it is copied into
// a temporary table (and analyzed) before the timed transaction, and that
// load is timed separately (HandKeysSeconds), not as part of HandSeconds.
// The copies are compared with the shape's query afterwards (a two-way
// EXCEPT ALL; the ledger with the source), so the baseline is known to
// compute the same result.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// handKind says which hand-written re-derive fits a shape.
type handKind int

const (
	// handNone: no hand-written baseline for the shape.
	handNone handKind = iota
	// handRow: the row transform SELECT id, g, v * 2 AS v2 FROM src WHERE g >= 0.
	handRow
	// handAgg: the aggregate SELECT g, count(*), sum(v), min(v) FROM src GROUP BY g.
	handAgg
)

// handTable is the hand-maintained copy of a shape's target, compared with
// the shape's query (its columns are the shape's Columns).
func (k handKind) handTable() pgx.Identifier {
	if k == handRow {
		return pgx.Identifier{"public", "hand_row"}
	}
	return pgx.Identifier{"public", "hand_agg"}
}

// buildSQL builds the copies, untimed, from the source as it is before the
// re-derive update. They are analyzed, as an engineer would after a bulk
// load (and as autovacuum would shortly).
func (k handKind) buildSQL() []string {
	switch k {
	case handRow:
		return []string{
			`CREATE TABLE hand_row (id bigint PRIMARY KEY, g int NOT NULL, v2 numeric NOT NULL)`,
			`INSERT INTO hand_row (id, g, v2) SELECT id, g, v * 2 FROM src WHERE g >= 0`,
			`ANALYZE hand_row`,
		}
	case handAgg:
		return []string{
			`CREATE TABLE hand_ledger (id bigint PRIMARY KEY, g int NOT NULL, v numeric NOT NULL)`,
			`INSERT INTO hand_ledger (id, g, v) SELECT id, g, v FROM src`,
			// The engine's ledger has the same index: it finds a group's rows
			// when min has to be recomputed.
			`CREATE INDEX hand_ledger_g ON hand_ledger (g)`,
			`CREATE TABLE hand_agg (g int PRIMARY KEY, n bigint NOT NULL, s numeric, lo numeric)`,
			`INSERT INTO hand_agg (g, n, s, lo) SELECT g, count(*), sum(v), min(v) FROM hand_ledger GROUP BY g`,
			`ANALYZE hand_ledger, hand_agg`,
		}
	}
	return nil
}

// The changed ids, loaded (timed separately) before the re-derive.
const (
	handIDsCreateSQL  = `CREATE TEMP TABLE hand_ids (id bigint PRIMARY KEY)`
	handIDsAnalyzeSQL = `ANALYZE hand_ids`
)

// rederiveSQL is the timed transaction, statement by statement.
func (k handKind) rederiveSQL() []string {
	switch k {
	case handRow:
		// A row transform maps each source row on its own: replace the
		// changed ids' rows by what the query makes of them now (deleted or
		// filtered out rows simply are not inserted again).
		return []string{
			`DELETE FROM hand_row r USING hand_ids i WHERE r.id = i.id`,
			`INSERT INTO hand_row (id, g, v2)
			SELECT s.id, s.g, s.v * 2 FROM src s JOIN hand_ids i ON i.id = s.id WHERE s.g >= 0`,
		}
	case handAgg:
		return []string{
			// 1. Each changed id's old contribution (from the ledger) and new
			//    one (from the source), captured before the ledger changes.
			//    had/has: the id was/is in the source.
			`CREATE TEMP TABLE hand_chg ON COMMIT DROP AS
			SELECT i.id, l.id IS NOT NULL AS had, s.id IS NOT NULL AS has, l.g AS og, l.v AS ov, s.g AS ng, s.v AS nv
			FROM hand_ids i LEFT JOIN hand_ledger l ON l.id = i.id LEFT JOIN src s ON s.id = i.id`,
			`ANALYZE hand_chg`,
			// 2. count and sum by deltas: -old, +new per group, net of rows
			//    that moved out and back in. A new group's row starts from its
			//    deltas (lo is filled in by step 4).
			`INSERT INTO hand_agg AS a (g, n, s)
			SELECT g, sum(dn), sum(ds) FROM (
				SELECT og AS g, -1 AS dn, -ov AS ds FROM hand_chg WHERE had
				UNION ALL
				SELECT ng, 1, nv FROM hand_chg WHERE has) d
			GROUP BY g HAVING sum(dn) <> 0 OR sum(ds) <> 0
			ON CONFLICT (g) DO UPDATE SET n = a.n + EXCLUDED.n, s = a.s + EXCLUDED.s`,
			// 3. The ledger follows the source: rows that left are deleted,
			//    changed or new rows upserted.
			`DELETE FROM hand_ledger l USING hand_chg c WHERE l.id = c.id AND NOT c.has`,
			`INSERT INTO hand_ledger (id, g, v)
			SELECT id, ng, nv FROM hand_chg WHERE has AND (NOT had OR (og, ov) IS DISTINCT FROM (ng, nv))
			ON CONFLICT (id) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v`,
			// 4. min is not invertible: recompute it from the (updated) ledger
			//    for every group a changed row left or entered.
			`UPDATE hand_agg a SET lo = m.lo
			FROM (SELECT l.g, min(l.v) AS lo FROM hand_ledger l
				WHERE l.g IN (SELECT og FROM hand_chg WHERE had UNION SELECT ng FROM hand_chg WHERE has)
				GROUP BY l.g) m
			WHERE a.g = m.g AND a.lo IS DISTINCT FROM m.lo`,
			// 5. Groups whose last row left.
			`DELETE FROM hand_agg a USING (SELECT DISTINCT og FROM hand_chg WHERE had) e WHERE a.g = e.og AND a.n = 0`,
		}
	}
	return nil
}

// handResult is one measured hand-written re-derive.
type handResult struct {
	keys     time.Duration // loading the changed ids
	rederive time.Duration // the re-derive transaction, commit included
	verified string        // "ok", "DIFFERS …" or "" (not checked)
}

// buildHand creates kind's hand-maintained copies from the source's
// current state (untimed). It must run before the re-derive update.
func buildHand(ctx context.Context, conn *pgx.Conn, kind handKind) error {
	for _, q := range kind.buildSQL() {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench: build hand-written copy: %w", err)
		}
	}
	return nil
}

// measureHand loads ids into a temporary table, then re-derives them into
// kind's copies in one timed transaction, and (when verify) compares the
// copy with the shape's query.
func measureHand(ctx context.Context, conn *pgx.Conn, kind handKind, sh Shape, ids []int64, verify bool) (handResult, error) {
	var hr handResult
	start := time.Now()
	if _, err := conn.Exec(ctx, handIDsCreateSQL); err != nil {
		return hr, fmt.Errorf("bench: hand-written baseline: create the id table: %w", err)
	}
	rows := make([][]any, len(ids))
	for i, id := range ids {
		rows[i] = []any{id}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"hand_ids"}, []string{"id"}, pgx.CopyFromRows(rows)); err != nil {
		return hr, fmt.Errorf("bench: hand-written baseline: load the ids: %w", err)
	}
	if _, err := conn.Exec(ctx, handIDsAnalyzeSQL); err != nil {
		return hr, fmt.Errorf("bench: hand-written baseline: analyze the ids: %w", err)
	}
	hr.keys = time.Since(start)

	start = time.Now()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, q := range kind.rederiveSQL() {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	hr.rederive = time.Since(start)
	if err != nil {
		return hr, fmt.Errorf("bench: hand-written re-derive: %w", err)
	}
	if !verify {
		return hr, nil
	}
	hr.verified, err = verifyHand(ctx, conn, kind, sh)
	return hr, err
}

// verifyHand compares kind's copy with the shape's query and, for an
// aggregate, the ledger with the source (a stale ledger row need not show
// in the target yet, but would corrupt a later re-derive).
func verifyHand(ctx context.Context, conn *pgx.Conn, kind handKind, sh Shape) (string, error) {
	type check struct {
		table   pgx.Identifier
		columns []string
		query   string
	}
	checks := []check{{kind.handTable(), sh.Columns, sh.Query}}
	if kind == handAgg {
		checks = append(checks, check{pgx.Identifier{"public", "hand_ledger"}, []string{"id", "g", "v"}, `SELECT id, g, v FROM src`})
	}
	for _, c := range checks {
		d, err := selfcheck.Compare(ctx, conn, c.table, c.columns, c.query)
		if err != nil {
			return "", fmt.Errorf("bench: hand-written copy self-check: %w", err)
		}
		if !d.Equal() {
			return fmt.Sprintf("DIFFERS: %s: %d missing %v, %d extra %v", c.table.Sanitize(), d.Missing, d.MissingSample, d.Extra, d.ExtraSample), nil
		}
	}
	return "ok", nil
}
