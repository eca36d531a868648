// Package decode turns pgoutput messages into per-transaction change batches
// that carry only which rows changed: (relation, key values, commit end LSN).
// Row values other than the key are never decoded (docs/architecture.md §3.1).
package decode

import (
	"context"
	"time"
)

// Relation is the cached description of a published table, from the most
// recent Relation message for its OID.
type Relation struct {
	ID        uint32
	Namespace string
	Name      string
	// KeyColumns are the names of the replica-identity columns, in the order
	// RowKey.Values lists them (the relation's column order).
	KeyColumns []string
	// Columns are all published columns in relation order.
	Columns []Column
}

// Column is one column of a Relation message.
type Column struct {
	Name    string
	TypeOID uint32
	Key     bool
}

// RowKey identifies one changed row: its relation and the text form of its
// replica-identity columns, in Relation.KeyColumns order.
type RowKey struct {
	Rel    uint32
	Values []string
	// Xid is the (sub)transaction xid for streamed changes; 0 otherwise.
	Xid uint32
	// Missing, when not nil, marks values that were NULL or unchanged-TOAST
	// (Values holds "" there). It is only set under REPLICA IDENTITY FULL,
	// where every column counts as key and the consumer picks its own.
	Missing []bool
}

// Txn is one committed transaction: every row key it touched (an UPDATE that
// changes the key yields both old and new keys; duplicates are allowed) and
// every relation it truncated.
type Txn struct {
	Xid        uint32 // top-level xid from Begin (32 bits, as pgoutput sends it)
	CommitLSN  uint64
	EndLSN     uint64 // the transaction's position
	CommitTime time.Time
	Keys       []RowKey
	Truncated  []uint32
}

// Sink receives decoded events in stream order. Every method is called from
// the replication goroutine; an error stops the stream (it is retried from
// the last confirmed position after a reconnect).
type Sink interface {
	// Relation reports a (re)sent Relation message.
	Relation(ctx context.Context, rel *Relation) error
	// Commit delivers a whole non-streamed transaction.
	Commit(ctx context.Context, txn *Txn) error
	// StreamChunk delivers part of an in-progress streamed transaction
	// (top-level xid); each key carries its subtransaction xid.
	StreamChunk(ctx context.Context, xid uint32, keys []RowKey, truncated []uint32) error
	// StreamCommit says streamed transaction xid committed at endLSN.
	StreamCommit(ctx context.Context, xid uint32, commitLSN, endLSN uint64, commitTime time.Time) error
	// StreamAbort drops subxid's changes (all of xid's when subxid == xid).
	StreamAbort(ctx context.Context, xid, subxid uint32) error
	// Idle reports a keepalive position walEnd while no transaction is open
	// in the decoder: nothing at or before walEnd is still to be delivered.
	Idle(ctx context.Context, walEnd uint64) error
}
