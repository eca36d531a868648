package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// route says how one transform reads one source table: which relation key
// column feeds each of the transform's key columns.
type route struct {
	transform int64
	keyNames  []string
	// table is the source the keys are dirty in: the changed table
	// itself, or a partition read as a source when the change arrives as
	// its partitioned ancestor's (publish_via_partition_root, or the
	// ancestor's statement triggers for rows routed into the partition).
	table uint32
	// lag is the transform's latency queue (latency.go); nil when nothing
	// observes the run.
	lag *lagQueue
}

// intake is the decode.Sink of the slot stream: it turns row keys into
// dirty keys of the transforms that read each table and records them in the
// local store, several transactions per synced write (group commit).
type intake struct {
	r *runner

	mu      sync.Mutex
	rels    map[uint32]*decode.Relation
	routes  map[uint32][]route // by source OID
	pending []checkpoint.Txn
	nkeys   int
	since   time.Time
	// flushed is when the queue was last written: a transaction after a
	// quiet period is written at once rather than after groupCommitWait.
	flushed time.Time
	stopped chan struct{}
	closed  bool // set by close: the store may be gone

	// lags are the transforms' latency queues while routed (nil: latency
	// is not tracked). stamp identifies the transaction being routed;
	// touched are the queues it marked, listed those with a bucket to
	// publish at the next group commit, streamed the queues each streamed
	// transaction marked, by xid. All reused, not allocated per
	// transaction.
	lags     map[int64]*lagQueue
	stamp    uint64
	touched  []*lagQueue
	listed   []*lagQueue
	streamed map[uint32][]*lagQueue
}

const (
	groupCommitKeys = 5000
	groupCommitTxns = 1000
	groupCommitWait = 2 * time.Millisecond
)

func newIntake(r *runner, trackLatency bool) *intake {
	in := &intake{r: r, rels: map[uint32]*decode.Relation{}, routes: map[uint32][]route{}}
	if trackLatency {
		in.lags, in.streamed = map[int64]*lagQueue{}, map[uint32][]*lagQueue{}
	}
	return in
}

// streamStamp marks the routing of a streamed transaction's chunk; commit
// positions never reach bit 63, so it is never a transaction's end LSN.
func streamStamp(xid uint32) uint64 { return 1<<63 | uint64(xid) }

// addRoute routes the changes of every table the plan reads to the
// transform (a table read twice, by a self-join, once: the worker fans its
// keys out to both sources), and the changes of the partitioned ancestors
// of a source that is a partition (ancestors, by source OID) as that
// source's: a change to the ancestor's key may be a row of the partition,
// and re-deriving one that is not changes nothing. It returns the
// transform's latency queue (nil when latency is not tracked).
func (in *intake) addRoute(id int64, p *engine.Plan, ancestors map[uint32][]uint32) *lagQueue {
	in.mu.Lock()
	defer in.mu.Unlock()
	var q *lagQueue
	if in.lags != nil {
		if q = in.lags[id]; q == nil {
			q = new(lagQueue)
			in.lags[id] = q
		}
	}
	for _, src := range p.Tables() {
		names := make([]string, len(src.Key))
		for i, k := range src.Key {
			names[i] = k.Name
		}
	rels:
		for _, rel := range append([]uint32{src.OID}, ancestors[src.OID]...) {
			for _, rt := range in.routes[rel] {
				if rt.transform == id && rt.table == src.OID {
					continue rels
				}
			}
			in.routes[rel] = append(in.routes[rel], route{transform: id, keyNames: names, table: src.OID, lag: q})
		}
	}
	return q
}

func (in *intake) removeRoute(id int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for oid, rts := range in.routes {
		out := rts[:0]
		for _, rt := range rts {
			if rt.transform != id {
				out = append(out, rt)
			}
		}
		in.routes[oid] = out
	}
	if in.lags != nil {
		delete(in.lags, id)
	}
}

// touch marks q touched by the transaction being routed (in.stamp);
// called with in.mu held, once per routed key, so it only compares.
func (in *intake) touch(q *lagQueue) {
	if q != nil && q.seen != in.stamp {
		q.seen = in.stamp
		in.touched = append(in.touched, q)
	}
}

// noteTouched merges the transaction that touched in.touched into their
// queues; called with in.mu held.
func (in *intake) noteTouched(lsn uint64, commit time.Time) {
	if len(in.touched) == 0 {
		return
	}
	if commit.IsZero() {
		commit = time.Now()
	}
	at := commit.UnixNano()
	for _, q := range in.touched {
		if q.note(lsn, at) {
			in.listed = append(in.listed, q)
		}
	}
	clear(in.touched)
	in.touched = in.touched[:0]
}

// publishLags publishes the listed queues' open buckets; called with in.mu
// held, before the transactions' keys are recorded.
func (in *intake) publishLags() {
	for _, q := range in.listed {
		q.publish()
		q.listed = false
	}
	clear(in.listed)
	in.listed = in.listed[:0]
}

// Relation caches the table description.
func (in *intake) Relation(ctx context.Context, rel *decode.Relation) error {
	in.mu.Lock()
	in.rels[rel.ID] = rel
	in.mu.Unlock()
	in.r.checkDriftSoon()
	return nil
}

// dirty maps row keys to dirty keys; called with in.mu held. A transform
// whose key cannot be read from a change (its table's replica identity no
// longer contains the key) stops being fed and is paused with a capture
// failure; the others go on.
func (in *intake) dirty(keys []decode.RowKey) ([]checkpoint.DirtyKey, error) {
	var out []checkpoint.DirtyKey
	for _, k := range keys {
		rts := in.routes[k.Rel]
		if len(rts) == 0 {
			// No transform reads the table now: nothing to record. A
			// transform without its routes loses no change this drops
			// (the trigger drain deletes the rows, the slot confirms past
			// them). Its routes are gone only while it is frozen (paused or
			// quarantined: reconcile removes them once its worker ended),
			// and between reconcile's removeRoute of a worker that paused
			// its own transform and addRoute of the one that replaces it
			// (or a reconcile that failed in between, until the next).
			// Every way out of frozen (Catalog.Resume, Repair) asks for a
			// full rebuild (rebuild, phase 0), which the new worker starts
			// only after addRoute: each build chunk's snapshot is taken
			// after every change dropped here committed, so it re-derives
			// them, and every change after is routed. A transform not
			// started yet builds the same way; a redefinition is a
			// transform of its own, routed from its start, and the
			// routes swap removes are those of the transform it replaces.
			// stopRoute removes one table's routes of a running worker:
			// it ends that worker once the pause is written, so the next
			// reconcile removes the rest and — RESUMEd or not — routes
			// again before any new worker rebuilds.
			continue
		}
		rel := in.rels[k.Rel]
		if rel == nil {
			return nil, fmt.Errorf("change for relation %d arrived before its Relation message", k.Rel)
		}
	routes:
		for _, rt := range rts {
			vals := make([]string, len(rt.keyNames))
			for i, name := range rt.keyNames {
				j := indexOf(rel.KeyColumns, name)
				if j < 0 || j >= len(k.Values) || (k.Missing != nil && k.Missing[j]) {
					in.stopRoute(rt.transform, k.Rel, fmt.Sprintf(
						"changes of %s.%s no longer carry key column %q (replica identity %v); restore the primary key as the table's replica identity, then RESUME the transform",
						rel.Namespace, rel.Name, name, rel.KeyColumns), name)
					continue routes
				}
				vals[i] = k.Values[j]
			}
			out = append(out, checkpoint.DirtyKey{Transform: rt.transform, Table: rt.table, Key: checkpoint.EncodeKey(vals)})
			in.touch(rt.lag)
		}
	}
	return out, nil
}

// stopRoute unroutes a transform and pauses it (in the background: the
// caller holds in.mu). Called with in.mu held. The transform's worker is
// then ended, whether the pause was written or not: a worker left running
// without one of its routes would rebuild after a RESUME committed before
// reconcile saw the pause, and that table's changes would be dropped for
// good; an ended worker is replaced by reconcile, which routes it first
// (and a failed pause meets the same change again and retries).
func (in *intake) stopRoute(id int64, rel uint32, why, column string) {
	rts := in.routes[rel]
	out := rts[:0]
	for _, rt := range rts {
		if rt.transform != id {
			out = append(out, rt)
		}
	}
	in.routes[rel] = out
	go func() {
		f := &catalog.Failure{Kind: catalog.FailureCapture, Error: why, Columns: []string{column}, DetectedAt: time.Now().UTC()}
		if err := in.r.t.cat.Pause(context.Background(), in.r.t.pool, id, "system", f); err != nil {
			in.r.t.log.Error("pause transform after a capture failure", "transform", id, "err", err)
		}
		in.r.endWorker(id)
	}()
}

func (in *intake) truncs(rels []uint32) []checkpoint.TableRef {
	var out []checkpoint.TableRef
	for _, rel := range rels {
		for _, rt := range in.routes[rel] {
			out = append(out, checkpoint.TableRef{Transform: rt.transform, Table: rt.table})
			in.touch(rt.lag)
		}
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// Commit queues a committed transaction; the queue is written as one batch
// when it is large or a little time has passed. A transaction of more than
// groupCommitKeys row keys (a trigger drain's batch, a transaction the
// walsender did not stream) is recorded in parts of that many first, so
// that its dirty keys — one per row and transform reading the row — are
// never all in memory at once (ADR 0029).
func (in *intake) Commit(ctx context.Context, txn *decode.Txn) error {
	if len(txn.Keys) > groupCommitKeys {
		if err := in.flush(); err != nil {
			return err
		}
		rest, err := in.recordParts(txn)
		if err != nil {
			return err
		}
		part := *txn
		part.Keys = rest
		txn = &part
	}
	in.mu.Lock()
	in.stamp = txn.EndLSN
	keys, err := in.dirty(txn.Keys)
	if err != nil {
		clear(in.touched)
		in.touched = in.touched[:0]
		in.mu.Unlock()
		return err
	}
	if len(in.pending) == 0 {
		in.since = time.Now()
	}
	in.pending = append(in.pending, checkpoint.Txn{LSN: txn.EndLSN, Xid: txn.Xid, Keys: keys, Truncs: in.truncs(txn.Truncated)})
	in.noteTouched(txn.EndLSN, txn.CommitTime)
	in.nkeys += len(keys)
	if plant.Active(plant.ConfirmBeforeRecord) {
		in.r.confirmed.Store(max(in.r.confirmed.Load(), txn.EndLSN))
	}
	full := in.nkeys >= groupCommitKeys || len(in.pending) >= groupCommitTxns || time.Since(in.since) >= groupCommitWait ||
		len(in.pending) == 1 && time.Since(in.flushed) >= groupCommitWait
	in.mu.Unlock()
	in.r.obs.TransactionReceived()
	if full {
		return in.flush()
	}
	in.ensureFlusher()
	return nil
}

// recordParts records the row keys of txn but its last groupCommitKeys in
// parts (checkpoint.RecordPart), and returns those last ones: the
// transaction's position moves with them.
func (in *intake) recordParts(txn *decode.Txn) ([]decode.RowKey, error) {
	rows := txn.Keys
	for len(rows) > groupCommitKeys {
		in.mu.Lock()
		in.stamp = txn.EndLSN
		keys, err := in.dirty(rows[:groupCommitKeys])
		if err == nil {
			// Held while writing, as flush does: parts and batches reach
			// the store in LSN order.
			err = in.r.store.RecordPart(txn.EndLSN, txn.Xid, keys, nil)
		}
		in.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("record part of a transaction of %d rows in the local store: %w", len(txn.Keys), err)
		}
		in.wake([]checkpoint.Txn{{Keys: keys}})
		rows = rows[groupCommitKeys:]
	}
	return rows, nil
}

// ensureFlusher writes a queue that no later Commit will push out.
func (in *intake) ensureFlusher() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopped != nil {
		return
	}
	done := make(chan struct{})
	in.stopped = done
	go func() {
		time.Sleep(groupCommitWait)
		in.mu.Lock()
		in.stopped = nil
		in.mu.Unlock()
		if err := in.flush(); err != nil {
			in.r.t.log.Error("record changes", "err", err)
		}
		close(done)
	}()
}

// close writes what is queued and stops later flushes.
func (in *intake) close() error {
	err := in.flush()
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	return err
}

// flush records the queue in the store and wakes the affected workers.
func (in *intake) flush() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	txns := in.pending
	in.pending, in.nkeys = nil, 0
	in.flushed = time.Now()
	if len(txns) == 0 {
		in.mu.Unlock()
		return nil
	}
	in.publishLags()
	// Hold the lock while writing so batches reach the store in LSN order.
	err := in.r.store.RecordMany(txns)
	in.mu.Unlock()
	if err != nil {
		return fmt.Errorf("record %d transactions in the local store: %w", len(txns), err)
	}
	in.wake(txns)
	return nil
}

func (in *intake) wake(txns []checkpoint.Txn) {
	seen := map[int64]bool{}
	for _, t := range txns {
		for _, k := range t.Keys {
			seen[k.Transform] = true
		}
		for _, k := range t.Truncs {
			seen[k.Transform] = true
		}
	}
	in.r.mu.Lock()
	for id := range seen {
		if w := in.r.workers[id]; w != nil {
			w.notify()
		}
	}
	in.r.mu.Unlock()
}

// StreamChunk spills keys of an in-progress transaction to the store.
func (in *intake) StreamChunk(ctx context.Context, xid uint32, keys []decode.RowKey, truncated []uint32) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.stamp = streamStamp(xid)
	defer in.keepTouched(xid)
	bySub := map[uint32][]decode.RowKey{}
	for _, k := range keys {
		sub := k.Xid
		if sub == 0 {
			sub = xid
		}
		bySub[sub] = append(bySub[sub], k)
	}
	for sub, ks := range bySub {
		dk, err := in.dirty(ks)
		if err != nil {
			return err
		}
		if len(dk) > 0 {
			if err := in.r.store.SpillKeys(xid, sub, dk); err != nil {
				return err
			}
		}
	}
	if tr := in.truncs(truncated); len(tr) > 0 {
		return in.r.store.SpillTruncate(xid, xid, tr)
	}
	return nil
}

// keepTouched remembers the queues a streamed transaction's chunk marked,
// for its commit; called with in.mu held.
func (in *intake) keepTouched(xid uint32) {
	if len(in.touched) == 0 {
		return
	}
	in.streamed[xid] = append(in.streamed[xid], in.touched...)
	clear(in.touched)
	in.touched = in.touched[:0]
}

// StreamCommit moves a streamed transaction's spilled keys into the sets.
func (in *intake) StreamCommit(ctx context.Context, xid uint32, commitLSN, endLSN uint64, commitTime time.Time) error {
	if err := in.flush(); err != nil {
		return err
	}
	in.mu.Lock()
	if qs := in.streamed[xid]; len(qs) > 0 {
		delete(in.streamed, xid)
		in.stamp = endLSN
		for _, q := range qs {
			in.touch(q)
		}
		in.noteTouched(endLSN, commitTime)
		in.publishLags()
	}
	err := in.r.store.CommitSpill(xid, endLSN)
	in.mu.Unlock()
	if err != nil {
		return err
	}
	in.r.obs.TransactionReceived()
	in.r.mu.Lock()
	for _, w := range in.r.workers {
		w.notify()
	}
	in.r.mu.Unlock()
	return nil
}

// StreamAbort drops a subtransaction's (or the whole transaction's) spill.
func (in *intake) StreamAbort(ctx context.Context, xid, subxid uint32) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if subxid == xid && in.streamed != nil {
		delete(in.streamed, xid)
	}
	return in.r.store.AbortSpill(xid, subxid)
}

// Sync writes what is queued and makes everything recorded durable
// (capture.Sink: the trigger drain deletes the rows it moved only after).
func (in *intake) Sync(ctx context.Context) error {
	if err := in.flush(); err != nil {
		return err
	}
	return in.r.store.Flush()
}

// Idle advances the position over WAL that changed nothing we read. With
// transactions queued it rides with them (the group commit writes the
// largest position it is given) instead of writing them at once: the
// walsender sends a keepalive each time it catches up, at one row per
// commit after nearly every transaction, and a flush per keepalive undid
// the group commit (ADR 0016).
func (in *intake) Idle(ctx context.Context, walEnd uint64) error {
	in.mu.Lock()
	if len(in.pending) > 0 {
		in.pending = append(in.pending, checkpoint.Txn{LSN: walEnd})
		in.mu.Unlock()
		in.ensureFlusher()
		return nil
	}
	defer in.mu.Unlock()
	return in.r.store.AdvanceReceived(walEnd)
}
