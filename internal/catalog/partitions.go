package catalog

import (
	"context"
	"fmt"
	"time"
)

// Correction kinds: the rows of a partition attached under a source, or
// of one detached from it (still a table), re-derived key by key; or,
// for a partition gone without a trace (dropped), every stored identity.
const (
	CorrectAttach = "attach"
	CorrectDetach = "detach"
	CorrectLost   = "lost"
)

// Correction is a partition whose rows a transform re-derives because it
// joined or left a partitioned source (ADR 0015).
type Correction struct {
	TransformID   int64
	RootOID       uint32
	NodeOID       uint32
	Node          string // qualified, quoted
	Kind          string
	Since         time.Time
	Cursor        []string
	KeysRemaining *int64
}

// PartitionNodes are the tables last seen in the partition tree of root
// (nil: never recorded).
func (c Catalog) PartitionNodes(ctx context.Context, q Querier, root uint32) (map[uint32]bool, error) {
	rows, err := q.Query(ctx, `SELECT node_oid FROM `+c.T("partition_nodes")+` WHERE root_oid = $1`, root)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of %d: %w", root, err)
	}
	defer rows.Close()
	var out map[uint32]bool
	for rows.Next() {
		var oid uint32
		if err := rows.Scan(&oid); err != nil {
			return nil, err
		}
		if out == nil {
			out = map[uint32]bool{}
		}
		out[oid] = true
	}
	return out, rows.Err()
}

// SetPartitionNodes records the tables of root's partition tree (root
// itself included, so a tree recorded empty still reads as recorded).
func (c Catalog) SetPartitionNodes(ctx context.Context, q Querier, root uint32, nodes []uint32) error {
	if _, err := q.Exec(ctx, `DELETE FROM `+c.T("partition_nodes")+` WHERE root_oid = $1`, root); err != nil {
		return fmt.Errorf("record the partitions of %d: %w", root, err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO `+c.T("partition_nodes")+` (root_oid, node_oid) SELECT $1, unnest($2::oid[]) ON CONFLICT DO NOTHING`, root, nodes); err != nil {
		return fmt.Errorf("record the partitions of %d: %w", root, err)
	}
	return nil
}

// QueueCorrection records a correction (replacing one of the same node).
func (c Catalog) QueueCorrection(ctx context.Context, q Querier, k Correction) error {
	_, err := q.Exec(ctx, `INSERT INTO `+c.T("corrections")+` (transform_id, root_oid, node_oid, node, kind, keys_remaining)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (transform_id, node_oid) DO UPDATE SET kind = excluded.kind,
		since = now(), cursor = NULL, keys_remaining = excluded.keys_remaining`,
		k.TransformID, k.RootOID, k.NodeOID, k.Node, k.Kind, k.KeysRemaining)
	if err != nil {
		return fmt.Errorf("queue correction of %s: %w", k.Node, err)
	}
	return nil
}

// Corrections lists the corrections queued for a transform (every
// transform's when id is 0), oldest first.
func (c Catalog) Corrections(ctx context.Context, q Querier, id int64) ([]Correction, error) {
	rows, err := q.Query(ctx, `SELECT transform_id, root_oid, node_oid, node, kind, since, cursor, keys_remaining FROM `+c.T("corrections")+`
		WHERE $1 = 0 OR transform_id = $1 ORDER BY since, node_oid`, id)
	if err != nil {
		return nil, fmt.Errorf("read corrections: %w", err)
	}
	defer rows.Close()
	var out []Correction
	for rows.Next() {
		var k Correction
		if err := rows.Scan(&k.TransformID, &k.RootOID, &k.NodeOID, &k.Node, &k.Kind, &k.Since, &k.Cursor, &k.KeysRemaining); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// AdvanceCorrection records a correction's progress: the last key done
// and n more keys re-derived.
func (c Catalog) AdvanceCorrection(ctx context.Context, q Querier, id int64, node uint32, cursor []string, n int64) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("corrections")+` SET cursor = $3, keys_remaining = greatest(keys_remaining - $4, 0)
		WHERE transform_id = $1 AND node_oid = $2`, id, node, cursor, n)
	return err
}

// FinishCorrection removes a correction that is done.
func (c Catalog) FinishCorrection(ctx context.Context, q Querier, id int64, node uint32) error {
	_, err := q.Exec(ctx, `DELETE FROM `+c.T("corrections")+` WHERE transform_id = $1 AND node_oid = $2`, id, node)
	return err
}

// TreesChanged reports whether any of the partitioned tables among roots
// has a partition tree other than the one recorded (a correction the
// runner has yet to queue).
func (c Catalog) TreesChanged(ctx context.Context, q Querier, roots []uint32) (bool, error) {
	var changed bool
	err := q.QueryRow(ctx, `SELECT EXISTS (
		SELECT FROM unnest($1::oid[]) r(oid) JOIN pg_class c ON c.oid = r.oid AND c.relkind = 'p'
		WHERE EXISTS (SELECT FROM `+c.T("partition_nodes")+` n WHERE n.root_oid = r.oid)
		  AND (SELECT array_agg(node_oid ORDER BY node_oid) FROM `+c.T("partition_nodes")+` n WHERE n.root_oid = r.oid)
		      IS DISTINCT FROM (SELECT array_agg(t.relid::oid ORDER BY t.relid::oid) FROM pg_partition_tree(c.oid) t))`, roots).Scan(&changed)
	if err != nil {
		return false, fmt.Errorf("compare partition trees: %w", err)
	}
	return changed, nil
}
