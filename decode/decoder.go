package decode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pglogrepl"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// StreamChunkKeys is how many keys of a streamed transaction the Decoder
// buffers before forwarding them through Sink.StreamChunk, so that a huge
// in-progress transaction never sits in memory (docs/architecture.md §2).
// A transaction the walsender did not stream (under the server's
// logical_decoding_work_mem, or any size before PostgreSQL 14) goes to
// the sink the same way once it has that many keys: its chunks, then a
// StreamCommit instead of a Commit (ADR 0029).
const StreamChunkKeys = 10000

// KeyError reports a change whose key cannot be read from the message: the
// relation has no replica-identity columns, or a key column arrived as NULL,
// as an unchanged TOAST value without data, or in binary form. The decoder
// never guesses a key, so the caller must surface this (docs/architecture.md §3.9, kind
// `capture`) rather than skip the change.
type KeyError struct {
	Table  string // schema-qualified table name
	Column string // "" when the relation has no key columns at all
	Reason string
}

// Error names the table, the column and what was wrong.
func (e *KeyError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("decode: table %s: %s", e.Table, e.Reason)
	}
	return fmt.Sprintf("decode: table %s, key column %q: %s", e.Table, e.Column, e.Reason)
}

// relEntry is a cached Relation plus the positions of its key columns in
// tuple data, so key extraction does not search by name for every change.
type relEntry struct {
	rel    *Relation
	keyIdx []int
}

// Decoder turns pgoutput messages (proto_version 1 or 2) into Sink calls. It
// keeps the relation cache and the state of the open transaction and stream
// block. It is not safe for concurrent use: feed it from one goroutine, in
// stream order, and create a new one for each replication connection (the
// server re-sends Relation messages and restarts open transactions then).
type Decoder struct {
	sink Sink
	log  *slog.Logger
	rels map[uint32]*relEntry

	txn *Txn // open non-streamed transaction, nil between Commit and Begin
	// txnChunked: the open non-streamed transaction passed chunkLimit
	// keys, and what it had went to the sink as a stream chunk.
	txnChunked bool

	inStream   bool   // between Stream Start and Stream Stop
	streamXid  uint32 // top-level xid of the open stream block
	chunkKeys  []RowKey
	chunkTrunc []uint32
	chunkLimit int
}

// NewDecoder returns a Decoder that reports to sink. A nil logger discards.
func NewDecoder(sink Sink, logger *slog.Logger) *Decoder {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Decoder{
		sink:       sink,
		log:        logger,
		rels:       make(map[uint32]*relEntry),
		chunkLimit: StreamChunkKeys,
	}
}

// InTxn reports whether a non-streamed transaction is open (a Begin was
// decoded without its Commit). While it is, a keepalive must not advance the
// position: the transaction's keys are not delivered yet.
func (d *Decoder) InTxn() bool { return d.txn != nil }

// InStream reports whether a stream block is open (Stream Start without its
// Stream Stop); some of its keys may still be buffered in the Decoder.
func (d *Decoder) InStream() bool { return d.inStream }

// Relation returns the cached Relation for a relation OID, or nil if no
// Relation message for it was decoded yet.
func (d *Decoder) Relation(id uint32) *Relation {
	if e := d.rels[id]; e != nil {
		return e.rel
	}
	return nil
}

// Decode handles one XLogData payload (one pgoutput message). Errors are
// either the Sink's (wrapped) or a protocol/key problem (*KeyError, or a
// malformed or out-of-order message); none are transient, so the caller
// should stop rather than feed the same message again.
func (d *Decoder) Decode(ctx context.Context, walData []byte) error {
	msg, err := parse(walData, d.inStream)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if d.txn != nil {
			return fmt.Errorf("decode: Begin of xid %d while xid %d is still open", m.Xid, d.txn.Xid)
		}
		d.txn = &Txn{Xid: m.Xid, CommitLSN: uint64(m.FinalLSN), CommitTime: m.CommitTime}
		d.txnChunked = false
	case *pglogrepl.CommitMessage:
		if d.txn == nil {
			return errors.New("decode: Commit without Begin")
		}
		txn := d.txn
		d.txn = nil
		txn.CommitLSN = uint64(m.CommitLSN)
		txn.EndLSN = uint64(m.TransactionEndLSN)
		txn.CommitTime = m.CommitTime
		if d.txnChunked {
			if err := d.chunkTxn(ctx, txn); err != nil {
				return err
			}
			if err := d.sink.StreamCommit(ctx, txn.Xid, txn.CommitLSN, txn.EndLSN, txn.CommitTime); err != nil {
				return fmt.Errorf("decode: sink commit of xid %d: %w", txn.Xid, err)
			}
			return nil
		}
		if err := d.sink.Commit(ctx, txn); err != nil {
			return fmt.Errorf("decode: sink commit of xid %d: %w", txn.Xid, err)
		}
	case *pglogrepl.RelationMessageV2:
		return d.relation(ctx, &m.RelationMessage)
	case *pglogrepl.InsertMessageV2:
		e, err := d.entry(m.RelationID)
		if err != nil {
			return err
		}
		k, err := e.key(m.Tuple, nil)
		if err != nil {
			return err
		}
		return d.addKeys(ctx, m.Xid, k)
	case *pglogrepl.UpdateMessageV2:
		e, err := d.entry(m.RelationID)
		if err != nil {
			return err
		}
		newKey, err := e.key(m.NewTuple, m.OldTuple)
		if err != nil {
			return err
		}
		if m.OldTuple == nil {
			return d.addKeys(ctx, m.Xid, newKey)
		}
		oldKey, err := e.key(m.OldTuple, nil)
		if err != nil {
			return err
		}
		if equalValues(oldKey, newKey) || plant.Active(plant.DropOldKey) {
			return d.addKeys(ctx, m.Xid, newKey)
		}
		return d.addKeys(ctx, m.Xid, oldKey, newKey)
	case *pglogrepl.DeleteMessageV2:
		e, err := d.entry(m.RelationID)
		if err != nil {
			return err
		}
		k, err := e.key(m.OldTuple, nil)
		if err != nil {
			return err
		}
		return d.addKeys(ctx, m.Xid, k)
	case *pglogrepl.TruncateMessageV2:
		return d.truncate(m.RelationIDs)
	case *pglogrepl.StreamStartMessageV2:
		if d.inStream {
			return fmt.Errorf("decode: Stream Start of xid %d inside the stream block of xid %d", m.Xid, d.streamXid)
		}
		d.inStream = true
		d.streamXid = m.Xid
	case *pglogrepl.StreamStopMessageV2:
		if !d.inStream {
			return errors.New("decode: Stream Stop without Stream Start")
		}
		if err := d.flushChunk(ctx); err != nil {
			return err
		}
		d.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		if d.inStream {
			return fmt.Errorf("decode: Stream Commit of xid %d inside a stream block", m.Xid)
		}
		if err := d.sink.StreamCommit(ctx, m.Xid, uint64(m.CommitLSN), uint64(m.TransactionEndLSN), m.CommitTime); err != nil {
			return fmt.Errorf("decode: sink stream commit of xid %d: %w", m.Xid, err)
		}
	case *pglogrepl.StreamAbortMessageV2:
		if d.inStream {
			return fmt.Errorf("decode: Stream Abort of xid %d inside a stream block", m.Xid)
		}
		if err := d.sink.StreamAbort(ctx, m.Xid, m.SubXid); err != nil {
			return fmt.Errorf("decode: sink stream abort of xid %d/%d: %w", m.Xid, m.SubXid, err)
		}
	case *pglogrepl.TypeMessageV2, *pglogrepl.OriginMessage, *pglogrepl.LogicalDecodingMessageV2:
		// Values are never decoded, and our own writes are kept out of the
		// publication, so types, origins and messages carry nothing we use.
	default:
		return fmt.Errorf("decode: unexpected pgoutput message %T", msg)
	}
	return nil
}

// parse wraps pglogrepl.ParseV2, which indexes without bounds checks: a
// truncated message becomes an error instead of a panic.
func parse(data []byte, inStream bool) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, errors.New("decode: empty pgoutput message")
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("decode: malformed pgoutput message %q (%d bytes): %v", data[0], len(data), r)
		}
	}()
	msg, err = pglogrepl.ParseV2(data, inStream)
	if err != nil {
		return nil, fmt.Errorf("decode: pgoutput message %q: %w", data[0], err)
	}
	return msg, nil
}

func (d *Decoder) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	rel := &Relation{ID: m.RelationID, Namespace: m.Namespace, Name: m.RelationName}
	e := &relEntry{rel: rel}
	for i, c := range m.Columns {
		key := c.Flags&1 != 0
		rel.Columns = append(rel.Columns, Column{Name: c.Name, TypeOID: c.DataType, Key: key})
		if key {
			rel.KeyColumns = append(rel.KeyColumns, c.Name)
			e.keyIdx = append(e.keyIdx, i)
		}
	}
	d.rels[rel.ID] = e
	d.log.Debug("relation", "oid", rel.ID, "table", rel.qualified(), "key", rel.KeyColumns)
	if err := d.sink.Relation(ctx, rel); err != nil {
		return fmt.Errorf("decode: sink relation %s: %w", rel.qualified(), err)
	}
	return nil
}

func (d *Decoder) entry(id uint32) (*relEntry, error) {
	e := d.rels[id]
	if e == nil {
		return nil, fmt.Errorf("decode: change for relation OID %d before its Relation message", id)
	}
	return e, nil
}

// key reads the key values of tup. When a key column in tup is an unchanged
// TOAST value and the old tuple (REPLICA IDENTITY FULL 'O', or 'K') carries
// it, the old value is exact, so it is used; otherwise the change is refused.
func (e *relEntry) key(tup, old *pglogrepl.TupleData) (RowKey, error) {
	table := e.rel.qualified()
	if len(e.keyIdx) == 0 {
		return RowKey{}, &KeyError{Table: table, Reason: "the relation has no replica-identity columns (give it a primary key or REPLICA IDENTITY USING INDEX)"}
	}
	if tup == nil {
		return RowKey{}, &KeyError{Table: table, Reason: "the change carries no tuple with key columns"}
	}
	vals := make([]string, len(e.keyIdx))
	full := len(e.keyIdx) == len(e.rel.Columns) && len(e.keyIdx) > 1
	var missing []bool
	for i, idx := range e.keyIdx {
		name := e.rel.Columns[idx].Name
		c := column(tup, idx)
		if c != nil && c.DataType == pglogrepl.TupleDataTypeToast {
			if oc := column(old, idx); oc != nil && oc.DataType == pglogrepl.TupleDataTypeText {
				c = oc
			}
		}
		if c == nil {
			return RowKey{}, &KeyError{Table: table, Column: name, Reason: "the tuple has fewer columns than the Relation message"}
		}
		if full && c.DataType != pglogrepl.TupleDataTypeText {
			// Under REPLICA IDENTITY FULL every column is flagged as key, so
			// most of them are not the primary key: the consumer picks the
			// columns it needs and rejects a missing one.
			if missing == nil {
				missing = make([]bool, len(e.keyIdx))
			}
			missing[i] = true
			continue
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			vals[i] = string(c.Data)
		case pglogrepl.TupleDataTypeNull:
			return RowKey{}, &KeyError{Table: table, Column: name, Reason: "the key value is NULL; key columns must be NOT NULL"}
		case pglogrepl.TupleDataTypeToast:
			return RowKey{}, &KeyError{Table: table, Column: name, Reason: "the key value is an unchanged TOAST value sent without data; use a key column that is not stored out of line"}
		default:
			return RowKey{}, &KeyError{Table: table, Column: name, Reason: fmt.Sprintf("unsupported tuple data kind %q (binary mode is not used)", c.DataType)}
		}
	}
	return RowKey{Rel: e.rel.ID, Values: vals, Missing: missing}, nil
}

func column(tup *pglogrepl.TupleData, i int) *pglogrepl.TupleDataColumn {
	if tup == nil || i >= len(tup.Columns) {
		return nil
	}
	return tup.Columns[i]
}

func equalValues(a, b RowKey) bool {
	if len(a.Values) != len(b.Values) {
		return false
	}
	for i := range a.Values {
		if a.Values[i] != b.Values[i] {
			return false
		}
	}
	return true
}

// addKeys appends keys to the open stream chunk (stamped with the
// subtransaction xid the message carried) or to the open transaction.
func (d *Decoder) addKeys(ctx context.Context, xid uint32, keys ...RowKey) error {
	if d.inStream {
		for _, k := range keys {
			k.Xid = xid
			d.chunkKeys = append(d.chunkKeys, k)
		}
		if len(d.chunkKeys) >= d.chunkLimit {
			return d.flushChunk(ctx)
		}
		return nil
	}
	if d.txn == nil {
		return errors.New("decode: row change outside a transaction")
	}
	d.txn.Keys = append(d.txn.Keys, keys...)
	if len(d.txn.Keys) >= d.chunkLimit {
		d.txnChunked = true
		return d.chunkTxn(ctx, d.txn)
	}
	return nil
}

// chunkTxn hands what the open non-streamed transaction txn has so far to
// the sink as a chunk of a streamed one (its keys carry no subtransaction
// xid: every change of a transaction sent at its commit is committed).
func (d *Decoder) chunkTxn(ctx context.Context, txn *Txn) error {
	if len(txn.Keys) == 0 && len(txn.Truncated) == 0 {
		return nil
	}
	keys, trunc := txn.Keys, txn.Truncated
	txn.Keys, txn.Truncated = nil, nil
	if err := d.sink.StreamChunk(ctx, txn.Xid, keys, trunc); err != nil {
		return fmt.Errorf("decode: sink chunk of xid %d: %w", txn.Xid, err)
	}
	return nil
}

func (d *Decoder) truncate(relids []uint32) error {
	if d.inStream {
		d.chunkTrunc = append(d.chunkTrunc, relids...)
		return nil
	}
	if d.txn == nil {
		return errors.New("decode: Truncate outside a transaction")
	}
	d.txn.Truncated = append(d.txn.Truncated, relids...)
	return nil
}

// flushChunk hands the buffered stream keys to the sink. The slices are not
// reused afterwards, so the sink may keep them.
func (d *Decoder) flushChunk(ctx context.Context) error {
	if len(d.chunkKeys) == 0 && len(d.chunkTrunc) == 0 {
		return nil
	}
	keys, trunc := d.chunkKeys, d.chunkTrunc
	d.chunkKeys, d.chunkTrunc = nil, nil
	if err := d.sink.StreamChunk(ctx, d.streamXid, keys, trunc); err != nil {
		return fmt.Errorf("decode: sink stream chunk of xid %d: %w", d.streamXid, err)
	}
	return nil
}

func (r *Relation) qualified() string {
	return r.Namespace + "." + r.Name
}
