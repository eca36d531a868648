package pipeline

import (
	"bytes"
	"sync"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// planCache keeps the decoded plan of each transform, by the plan's stored
// bytes, for the passes that read every transform's plan again and again:
// reconcile (every 500 ms), the drift watch and the partition check (every
// driftInterval). Decoding 1,000 plans at each of them was half of an idle
// runner's CPU (bench many). A plan is decoded again only when its bytes
// changed (a redefinition, an ALTER, a RESUME that re-typed it).
//
// The plans it returns are shared and read-only: a worker, which may
// rebind its plan, decodes its own.
type planCache struct {
	mu sync.Mutex
	m  map[int64]cachedPlan
}

// cachedPlan is one transform's plan and what the passes read of it.
type cachedPlan struct {
	raw  []byte
	plan *engine.Plan
	// tables are the plan's sources as capture names them
	// (captureTables).
	tables []capture.Table
}

// get is tr's plan, decoded once per version of its bytes.
func (c *planCache) get(tr *catalog.Transform) (cachedPlan, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[tr.ID]; ok && bytes.Equal(e.raw, tr.Plan) {
		return e, nil
	}
	p, err := engine.Decode(tr.Plan)
	if err != nil {
		return cachedPlan{}, err
	}
	if c.m == nil {
		c.m = map[int64]cachedPlan{}
	}
	e := cachedPlan{raw: tr.Plan, plan: p, tables: captureTables(p)}
	c.m[tr.ID] = e
	return e, nil
}

// keep forgets the plans of transforms not in ts (dropped ones).
func (c *planCache) keep(ts []*catalog.Transform) {
	ids := make(map[int64]bool, len(ts))
	for _, tr := range ts {
		ids[tr.ID] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if !ids[id] {
			delete(c.m, id)
		}
	}
}
