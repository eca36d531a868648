package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Index roles of a join probe: which side of the join as written must be
// found through the index. A change to the other side re-derives its rows
// by looking up their partners here.
const (
	// RoleJoinJoined: the table joined to (the later FROM item) is probed
	// when a row of an earlier one changes.
	RoleJoinJoined = "join_joined"
	// RoleJoinFrom: the earlier FROM item is probed when a row of the table
	// joined to it changes (a dimension change finding its facts).
	RoleJoinFrom = "join_from"
)

// Probe is a lookup the re-derive makes through a join: the rows of
// source Source whose Columns equal a changed partner's values.
type Probe struct {
	Source  int      `json:"source"`
	Columns []string `json:"columns"`
	Role    string   `json:"role"`
}

// IndexGap is a probe that no index of the source table serves: the
// re-derive then reads the whole table for a one-row change of its
// partner. Fix is the statement that closes the gap; trellis-repl never
// creates indexes on user tables.
type IndexGap struct {
	Table    string   `json:"table"`
	Columns  []string `json:"columns"`
	Role     string   `json:"role"`
	OptedOut bool     `json:"opted_out"`
	Fix      string   `json:"fix"`
}

// planProbes resolves the query's join equalities to the lookups the
// re-derive makes: for a = b between sources i < j, j is probed by b when
// i changes (join_joined) and i by a when j changes (join_from).
func planProbes(ctx context.Context, db DB, sources []Source, eqs []Equality) ([]Probe, error) {
	type pair struct{ from, to int }
	cols := map[pair][]string{}
	var order []pair
	for _, e := range eqs {
		l, err := resolveColumn(ctx, db, sources, e.Left, e.LeftIn)
		if err != nil {
			return nil, err
		}
		r, err := resolveColumn(ctx, db, sources, e.Right, e.RightIn)
		if err != nil {
			return nil, err
		}
		if l < 0 || r < 0 || l == r {
			continue
		}
		for _, pr := range []struct {
			p   pair
			col string
		}{{pair{l, r}, e.Right.Column}, {pair{r, l}, e.Left.Column}} {
			if _, ok := cols[pr.p]; !ok {
				order = append(order, pr.p)
			}
			if !contains(cols[pr.p], pr.col) {
				cols[pr.p] = append(cols[pr.p], pr.col)
			}
		}
	}
	var out []Probe
	for _, pr := range order {
		role := RoleJoinJoined
		if pr.to < pr.from {
			role = RoleJoinFrom
		}
		out = append(out, Probe{Source: pr.to, Columns: cols[pr], Role: role})
	}
	return out, nil
}

// resolveColumn finds the source a column reference names (within the
// given sources, all when nil), as PostgreSQL resolves it: by qualifier,
// else the one source with a column of that name; -1 when unknown.
func resolveColumn(ctx context.Context, db DB, sources []Source, cn ColumnName, within []int) (int, error) {
	found := -1
	for i, src := range sources {
		if within != nil && !containsInt(within, i) {
			continue
		}
		if cn.Ref != "" {
			if src.Ref == cn.Ref {
				return i, nil
			}
			continue
		}
		col, err := sourceColumn(ctx, db, src, cn.Column)
		if err != nil {
			return -1, err
		}
		if col.found {
			if found >= 0 {
				return -1, nil // ambiguous, or a USING column of both
			}
			found = i
		}
	}
	return found, nil
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// IndexGaps lists the probes of a plan that no valid index of their table
// serves: one whose first column is one of the probe's columns. It reads
// the catalog as it is now, so an index created later closes the gap.
func IndexGaps(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, p *Plan) ([]IndexGap, error) {
	var oids []uint32
	for _, pr := range p.Probes {
		oids = append(oids, p.Sources[pr.Source].OID)
	}
	lead, err := LeadingIndexColumns(ctx, db, oids)
	if err != nil {
		return nil, err
	}
	return GapsOf(p, lead), nil
}

// LeadingIndexColumns reads, in one statement, the first column of every
// valid, non-partial index of the tables oids: what GapsOf needs to judge
// the probes of any number of plans over them.
func LeadingIndexColumns(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, oids []uint32) (map[uint32]map[string]bool, error) {
	out := map[uint32]map[string]bool{}
	if len(oids) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT i.indrelid, a.attname FROM pg_index i JOIN pg_attribute a
		ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = ANY ($1::oid[]) AND i.indisvalid AND i.indpred IS NULL`, oids)
	if err != nil {
		return nil, fmt.Errorf("read source indexes: %w", err)
	}
	var oid uint32
	var col string
	if _, err := pgx.ForEachRow(rows, []any{&oid, &col}, func() error {
		if out[oid] == nil {
			out[oid] = map[string]bool{}
		}
		out[oid][col] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read source indexes: %w", err)
	}
	return out, nil
}

// GapsOf is IndexGaps with the indexes read already (LeadingIndexColumns
// of at least p's probed tables).
func GapsOf(p *Plan, leading map[uint32]map[string]bool) []IndexGap {
	out := []IndexGap{}
	seen := map[string]bool{}
	for _, pr := range p.Probes {
		src := p.Sources[pr.Source]
		served := false
		for _, c := range pr.Columns {
			served = served || leading[src.OID][c]
		}
		key := src.Ident() + "|" + strings.Join(pr.Columns, ",")
		if served || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, IndexGap{Table: src.Ident(), Columns: pr.Columns, Role: pr.Role, OptedOut: p.NoSourceIndex,
			Fix: "CREATE INDEX ON " + src.Ident() + " (" + identList(pr.Columns) + ")"})
	}
	return out
}
