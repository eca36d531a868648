// Package plancache keeps transforms' decoded plans by the bytes the
// catalog stores, for the passes that read every transform's plan again
// and again (the runner's reconcile, drift watch and partition check; a
// wait polling positions).
package plancache

import (
	"bytes"
	"sync"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// Cache keeps the decoded plan of each transform, by the plan's stored
// bytes. Decoding 1,000 plans at each pass of an idle runner was half of
// its CPU (bench many). A plan is decoded again only when its bytes
// changed (a redefinition, an ALTER, a RESUME that re-typed it). Safe for
// concurrent use; the zero value is ready.
//
// The plans it returns are shared and read-only: a worker, which may
// rebind its plan, decodes its own.
type Cache struct {
	mu sync.Mutex
	m  map[int64]Entry
}

// Entry is one transform's plan and what the passes read of it.
type Entry struct {
	raw []byte
	// Plan is the decoded plan: shared, read-only.
	Plan *engine.Plan
	// Tables are the plan's sources as capture names them
	// (CaptureTables).
	Tables []capture.Table
}

// Get is tr's plan, decoded once per version of its bytes.
func (c *Cache) Get(tr *catalog.Transform) (Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[tr.ID]; ok && bytes.Equal(e.raw, tr.Plan) {
		return e, nil
	}
	p, err := engine.Decode(tr.Plan)
	if err != nil {
		return Entry{}, err
	}
	if c.m == nil {
		c.m = map[int64]Entry{}
	}
	e := Entry{raw: tr.Plan, Plan: p, Tables: CaptureTables(p)}
	c.m[tr.ID] = e
	return e, nil
}

// CaptureTables are the tables a plan reads, as capture names them.
func CaptureTables(p *engine.Plan) []capture.Table {
	var out []capture.Table
	for _, src := range p.Tables() {
		key := make([]string, len(src.Key))
		for i, k := range src.Key {
			key[i] = k.Name
		}
		out = append(out, capture.Table{Schema: src.Schema, Name: src.Name, OID: src.OID, Key: key})
	}
	return out
}

// Keep forgets the plans of transforms not in ts (dropped ones).
func (c *Cache) Keep(ts []*catalog.Transform) {
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
