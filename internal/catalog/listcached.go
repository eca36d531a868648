package catalog

import (
	"context"
	"fmt"
	"sync"
)

// PlanCache keeps the stored plan of each transform by the version of its
// catalog row, for ListCached. Safe for concurrent use.
type PlanCache struct {
	mu sync.Mutex
	m  map[int64]cachedPlan
}

// cachedPlan is a plan's bytes and the row version they were read at.
type cachedPlan struct {
	version string
	plan    []byte
}

// ListCached is List for callers that list again and again (a wait
// polling positions): it reads every transform's row without its plan
// and reads the plans only of the rows whose version differs from the one
// cached, so a poll does not have the server send every plan (kilobytes
// each) for a transform that did not change. The plans it returns are
// the cache's: read-only.
func (c Catalog) ListCached(ctx context.Context, q Querier, pc *PlanCache) ([]*Transform, error) {
	ts, err := c.listWith(ctx, q, transformColsNoPlan)
	if err != nil {
		return nil, err
	}
	if missing := pc.fill(ts); len(missing) > 0 {
		if err := pc.load(ctx, c, q, missing); err != nil {
			return nil, err
		}
		if pc.fill(ts) != nil {
			// A row changed between the two reads: read every plan with
			// its row, as List does, so each plan is its row version's.
			return c.List(ctx, q)
		}
	}
	pc.keep(ts)
	return ts, nil
}

// fill sets each transform's plan from the cache and returns the ids whose
// row version it does not hold.
func (pc *PlanCache) fill(ts []*Transform) []int64 {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	var missing []int64
	for _, t := range ts {
		if e, ok := pc.m[t.ID]; ok && e.version == t.RowVersion {
			t.Plan = e.plan
		} else {
			missing = append(missing, t.ID)
		}
	}
	return missing
}

// load reads the plans of ids with their row versions into the cache.
func (pc *PlanCache) load(ctx context.Context, c Catalog, q Querier, ids []int64) error {
	rows, err := q.Query(ctx, `SELECT id, xmin::text, plan FROM `+c.T("transforms")+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("read the plans of %d transforms: %w", len(ids), err)
	}
	defer rows.Close()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.m == nil {
		pc.m = map[int64]cachedPlan{}
	}
	for rows.Next() {
		var id int64
		var e cachedPlan
		if err := rows.Scan(&id, &e.version, &e.plan); err != nil {
			return fmt.Errorf("read the plans of %d transforms: %w", len(ids), err)
		}
		pc.m[id] = e
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the plans of %d transforms: %w", len(ids), err)
	}
	return nil
}

// keep forgets the plans of transforms not in ts (dropped ones).
func (pc *PlanCache) keep(ts []*Transform) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.m) <= len(ts) {
		return
	}
	ids := make(map[int64]bool, len(ts))
	for _, t := range ts {
		ids[t.ID] = true
	}
	for id := range pc.m {
		if !ids[id] {
			delete(pc.m, id)
		}
	}
}
