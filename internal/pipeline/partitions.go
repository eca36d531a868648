package pipeline

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// Partition corrections (ADR 0015): a table attached to or detached from a
// partitioned source changes the source's rows without a row change to
// capture. The drift watch compares each partitioned source's tree with the
// one recorded and queues, for every transform reading it, a correction
// that re-derives the keys of the table that joined or left.

// partitionTree lists the tables of oid's partition tree (oid first), or
// nil when oid is not a partitioned table.
func partitionTree(ctx context.Context, q catalog.Querier, oid uint32) ([]uint32, error) {
	rows, err := q.Query(ctx, `SELECT t.relid::oid FROM pg_class c, pg_partition_tree(c.oid) t
		WHERE c.oid = $1 AND c.relkind = 'p' ORDER BY t.level, t.relid`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the partition tree of %d: %w", oid, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uint32])
}

// partitionTrees are the partition trees (partitionTree) of the roots
// that are partitioned tables, read in one statement.
func partitionTrees(ctx context.Context, q catalog.Querier, roots []uint32) (map[uint32][]uint32, error) {
	rows, err := q.Query(ctx, `SELECT c.oid, t.relid::oid FROM pg_class c, pg_partition_tree(c.oid) t
		WHERE c.oid = ANY($1) AND c.relkind = 'p' ORDER BY c.oid, t.level, t.relid`, roots)
	if err != nil {
		return nil, fmt.Errorf("read the partition trees of the sources: %w", err)
	}
	defer rows.Close()
	out := map[uint32][]uint32{}
	for rows.Next() {
		var root, node uint32
		if err := rows.Scan(&root, &node); err != nil {
			return nil, err
		}
		out[root] = append(out[root], node)
	}
	return out, rows.Err()
}

// ancestorsOf maps each source of the plans that is a partition to its
// partitioned ancestors (intake.addRoute).
func ancestorsOf(ctx context.Context, q catalog.Querier, ps ...*engine.Plan) (map[uint32][]uint32, error) {
	var oids []uint32
	for _, p := range ps {
		for _, src := range p.Tables() {
			oids = append(oids, src.OID)
		}
	}
	rows, err := q.Query(ctx, `SELECT c.oid, a.relid::oid FROM pg_class c, pg_partition_ancestors(c.oid) a
		WHERE c.oid = ANY($1) AND c.relispartition AND a.relid::oid <> c.oid`, oids)
	if err != nil {
		return nil, fmt.Errorf("read the partition ancestors of the sources: %w", err)
	}
	defer rows.Close()
	out := map[uint32][]uint32{}
	for rows.Next() {
		var oid, anc uint32
		if err := rows.Scan(&oid, &anc); err != nil {
			return nil, err
		}
		out[oid] = append(out[oid], anc)
	}
	return out, rows.Err()
}

// reroute routes every running transform again with the partition
// ancestors there are now (a tree changed).
func (r *runner) reroute(ctx context.Context) error {
	for _, w := range r.workerList() {
		anc, err := ancestorsOf(ctx, r.t.pool, w.plan)
		if err != nil {
			return err
		}
		r.intake.addRoute(w.id, w.plan, anc)
	}
	return nil
}

// recordPartitions records the partition tree of every partitioned source
// of p not recorded yet (at install, before the build reads them).
func (r *runner) recordPartitions(ctx context.Context, p *engine.Plan) error {
	for _, src := range p.Tables() {
		tree, err := partitionTree(ctx, r.t.pool, src.OID)
		if err != nil || tree == nil {
			return err
		}
		have, err := r.t.cat.PartitionNodes(ctx, r.t.pool, src.OID)
		if err != nil {
			return err
		}
		if have == nil {
			if err := r.t.cat.SetPartitionNodes(ctx, r.t.pool, src.OID, tree); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPartitions queues corrections for partitions attached to or
// detached from the partitioned sources of running transforms.
func (r *runner) checkPartitions(ctx context.Context, ts []*catalog.Transform) error {
	readers := map[uint32][]*catalog.Transform{}
	tables := map[uint32]capture.Table{}
	for _, tr := range ts {
		if catalog.Frozen(tr.State) || tr.State == catalog.StateWaiting {
			continue
		}
		e, err := r.plans.Get(tr)
		if err != nil {
			continue
		}
		for _, t := range e.Tables {
			readers[t.OID] = append(readers[t.OID], tr)
			tables[t.OID] = t
		}
	}
	roots := make([]uint32, 0, len(readers))
	for root := range readers {
		roots = append(roots, root)
	}
	// One statement for every source: most are not partitioned.
	trees, err := partitionTrees(ctx, r.t.pool, roots)
	if err != nil {
		return err
	}
	for root, tree := range trees {
		trs := readers[root]
		have, err := r.t.cat.PartitionNodes(ctx, r.t.pool, root)
		if err != nil {
			return err
		}
		if have == nil {
			if err := r.t.cat.SetPartitionNodes(ctx, r.t.pool, root, tree); err != nil {
				return err
			}
			continue
		}
		var joined, left []uint32
		for _, n := range tree {
			if !have[n] {
				joined = append(joined, n)
			}
		}
		for n := range have {
			if !slices.Contains(tree, n) {
				left = append(left, n)
			}
		}
		if len(joined) == 0 && len(left) == 0 {
			continue
		}
		if len(joined) > 0 && r.mode == capture.ModeTrigger {
			// Triggers on the new tables first, then the correction reads
			// them: nothing written to them in between is missed (as a
			// build, §3.5). A publication of the root covers them already.
			if err := r.capture.Install(ctx, []capture.Table{tables[root]}, func(*capture.Wait) {}); err != nil {
				return err
			}
		}
		if err := r.queueCorrections(ctx, root, tree, joined, left, trs); err != nil {
			return err
		}
		if err := r.reroute(ctx); err != nil {
			return err
		}
	}
	return nil
}

// queueCorrections queues the corrections of one tree change for every
// reader and records the new tree, in one transaction.
func (r *runner) queueCorrections(ctx context.Context, root uint32, tree, joined, left []uint32, trs []*catalog.Transform) error {
	tx, err := r.t.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	type node struct {
		oid  uint32
		kind string
		name string
		est  *int64
	}
	var nodes []node
	for _, n := range append(append([]uint32(nil), joined...), left...) {
		kind := catalog.CorrectAttach
		if !slices.Contains(joined, n) {
			kind = catalog.CorrectDetach
		}
		var name *string
		var est *int64
		if err := tx.QueryRow(ctx, `SELECT c.oid::regclass::text, CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END
			FROM pg_class c WHERE c.oid = $1 AND c.relkind IN ('r', 'p')`, n).Scan(&name, &est); err != nil && err != pgx.ErrNoRows {
			return err
		}
		if name == nil {
			if kind == catalog.CorrectAttach {
				continue // a partitioned table's own entry, or gone already
			}
			kind, name = catalog.CorrectLost, new(string)
			*name = fmt.Sprintf("table %d (dropped)", n)
		}
		nodes = append(nodes, node{n, kind, *name, est})
	}
	for _, tr := range trs {
		for _, n := range nodes {
			if err := r.t.cat.QueueCorrection(ctx, tx, catalog.Correction{TransformID: tr.ID, RootOID: root, NodeOID: n.oid,
				Node: n.name, Kind: n.kind, KeysRemaining: n.est}); err != nil {
				return err
			}
			r.t.log.Info("partition correction queued", "transform", tr.Name, "node", n.name, "kind", n.kind)
		}
	}
	if err := r.t.cat.SetPartitionNodes(ctx, tx, root, tree); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	for _, tr := range trs {
		if w, ok := r.workers[tr.ID]; ok {
			w.corrections.Store(true)
			w.notify()
		}
	}
	r.mu.Unlock()
	return nil
}

// correct runs the transform's queued corrections to their end.
func (w *worker) correct(ctx context.Context, a *engine.Applier) error {
	if !w.corrections.Swap(false) {
		return nil
	}
	ks, err := w.r.t.cat.Corrections(ctx, w.r.t.pool, w.id)
	if err != nil {
		w.corrections.Store(true)
		return err
	}
	for _, k := range ks {
		if err := w.turn(ctx, a, false, func() error { return w.correctNode(ctx, a, k) }); err != nil {
			w.corrections.Store(true)
			return err
		}
		w.log().Info("partition correction done", "node", k.Node, "kind", k.Kind)
	}
	return nil
}

// correctNode re-derives the keys of one table that joined or left a
// partitioned source, a chunk per transaction, then removes the
// correction.
func (w *worker) correctNode(ctx context.Context, a *engine.Applier, k catalog.Correction) error {
	cat, pool := w.r.t.cat, w.r.t.pool
	if k.Kind == catalog.CorrectLost {
		if err := w.rederiveStored(ctx, a, nil); err != nil {
			return err
		}
		return cat.FinishCorrection(ctx, pool, w.id, k.NodeOID)
	}
	srcs := w.plan.SourcesOf(k.RootOID)
	if len(srcs) == 0 {
		return cat.FinishCorrection(ctx, pool, w.id, k.NodeOID)
	}
	var name string
	if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT oid::regclass::text FROM pg_class WHERE oid = $1), '')`, k.NodeOID).Scan(&name); err != nil {
		return err
	}
	if name == "" {
		// Dropped since it was queued: its rows are gone from everywhere.
		if err := w.rederiveStored(ctx, a, nil); err != nil {
			return err
		}
		return cat.FinishCorrection(ctx, pool, w.id, k.NodeOID)
	}
	cursor := k.Cursor
	for ctx.Err() == nil {
		keys, err := a.EnumerateTable(ctx, srcs[0], name, cursor, buildChunk)
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return cat.FinishCorrection(ctx, pool, w.id, k.NodeOID)
		}
		units := make([]unit, len(keys))
		for i, key := range keys {
			units[i] = unit{table: k.RootOID, keyID: checkpoint.EncodeKey(key), key: key, sources: srcs}
		}
		end, n := keys[len(keys)-1], int64(len(keys))
		if _, err := w.applyUnits(ctx, a, units, nil, 0, func(ctx context.Context, tx pgx.Tx) error {
			return cat.AdvanceCorrection(ctx, tx, w.id, k.NodeOID, end, n)
		}); err != nil {
			return err
		}
		cursor = end
	}
	return ctx.Err()
}
