package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// DirtyKey is one row key to re-derive for one transform.
type DirtyKey struct {
	Transform int64
	Table     uint32 // source relation OID
	Key       []byte // EncodeKey of the row's key columns
}

// TableRef names one source table of one transform (a TRUNCATE marker).
type TableRef struct {
	Transform int64
	Table     uint32
}

// Txn is one committed transaction to record: its commit end LSN, its
// (32-bit) xid for the visibility check, and what it made dirty. Xid 0
// means no visibility check is needed (trigger capture).
type Txn struct {
	LSN    uint64
	Xid    uint32
	Keys   []DirtyKey
	Truncs []TableRef
}

// Entry is one dirty key as returned by Take.
type Entry struct {
	Table uint32
	Key   []byte
	// LSN is the newest LSN that dirtied the key.
	LSN uint64
	// Version is an opaque stamp that changes on every write of the key;
	// Done deletes the key only if it still carries this stamp.
	Version uint64
}

// Truncation is a TRUNCATE marker of one source table, as returned by Take.
type Truncation struct {
	Table   uint32
	LSN     uint64
	Version uint64
}

// Batch is what Take returns for one transform.
type Batch struct {
	Keys      []Entry
	Truncated []Truncation
	// UpTo is RecordedLSN when the batch was read: every key of every
	// transaction at or below UpTo is in this batch, or was removed by an
	// earlier Done, or is still in the set (only if All is false).
	// Keys may also carry LSNs above UpTo.
	UpTo uint64
	// All is true when Keys and Truncated are the transform's whole dirty
	// set at the moment of reading.
	All bool

	watch uint64 // the Take's watch (see Done)
}

// MaxLSN returns the largest LSN among the batch's keys and markers: the
// visibility check must cover every PendingXids entry at or below it.
func (b Batch) MaxLSN() uint64 {
	var m uint64
	for _, e := range b.Keys {
		m = max(m, e.LSN)
	}
	for _, t := range b.Truncated {
		m = max(m, t.LSN)
	}
	return m
}

// Record records one committed transaction; see RecordMany.
func (s *Store) Record(lsn uint64, xid uint32, keys []DirtyKey, truncs []TableRef) error {
	return s.RecordMany([]Txn{{LSN: lsn, Xid: xid, Keys: keys, Truncs: truncs}})
}

// RecordMany records several committed transactions in one Pebble batch
// (group commit), synced at once or, with Options.SyncInterval, by a timer
// that also writes what it staged (commitDeferred, mirror.go): each key
// joins its transform's dirty set
// (an already dirty key just takes the newer LSN), each truncation becomes
// a marker, each transaction with keys and a non-zero xid gets a
// visibility entry, and ReceivedLSN advances to the largest LSN (never
// backwards). Transactions must be given in commit order.
func (s *Store) RecordMany(txns []Txn) error {
	if len(txns) == 0 {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	b := s.db.NewBatch()
	s.mu.Lock()
	w := s.newWriter(b)
	defer w.release()
	deferred := s.deferSync()
	w.stage = deferred
	var top uint64
	for _, t := range txns {
		top = max(top, t.LSN)
		for _, k := range t.Keys {
			if err := w.markKey(k.Transform, k.Table, k.Key, t.LSN); err != nil {
				return w.abort(err)
			}
		}
		for _, r := range t.Truncs {
			if err := w.markTrunc(r.Transform, r.Table, t.LSN); err != nil {
				return w.abort(err)
			}
		}
		if t.Xid != 0 && len(t.Keys)+len(t.Truncs) > 0 {
			e := XidEntry{LSN: t.LSN, Xid: t.Xid}
			if deferred {
				s.stagedXids = append(s.stagedXids, e)
			} else {
				_ = b.Set(xidKey(t.LSN), binary.BigEndian.AppendUint32(nil, t.Xid), nil)
			}
			s.xids.add(e)
		}
	}
	w.publishCounts()
	if deferred {
		return s.commitDeferred(b, top)
	}
	return s.commitSynced(b, top)
}

// RecordPart records part of a committed transaction that RecordMany (or
// further parts) will finish: its keys and truncations join the dirty sets
// at lsn, and its visibility entry is written with them, so that an
// applier taking any of them checks xid. Neither ReceivedLSN nor
// RecordedLSN moves: the transaction's last part, given to RecordMany,
// moves them. Not synced (that last part's sync makes it durable); after
// a crash before it the server sends the transaction again, and the keys
// already recorded cost only re-derives. A caller splits a transaction
// that would otherwise need one Pebble batch, and the keys of every
// transform reading it, in memory at once (ADR 0029).
func (s *Store) RecordPart(lsn uint64, xid uint32, keys []DirtyKey, truncs []TableRef) error {
	if len(keys)+len(truncs) == 0 {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	b := s.db.NewBatch()
	s.mu.Lock()
	w := s.newWriter(b)
	if xid != 0 {
		_ = b.Set(xidKey(lsn), binary.BigEndian.AppendUint32(nil, xid), nil)
		s.xids.add(XidEntry{LSN: lsn, Xid: xid})
	}
	for _, k := range keys {
		if err := w.markKey(k.Transform, k.Table, k.Key, lsn); err != nil {
			return w.abort(err)
		}
	}
	for _, r := range truncs {
		if err := w.markTrunc(r.Transform, r.Table, lsn); err != nil {
			return w.abort(err)
		}
	}
	w.publishCounts()
	w.release()
	err := b.Commit(pebble.NoSync)
	s.mu.Unlock()
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: record part of the transaction at %d: %w", lsn, err)
	}
	return nil
}

// MarkDirty durably adds keys to dirty sets at the current ReceivedLSN
// (backfill, rebuild). It records no visibility entry and does not move
// ReceivedLSN. Every key's Transform must equal transform.
func (s *Store) MarkDirty(transform int64, keys []DirtyKey) error {
	if len(keys) == 0 {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	b := s.db.NewBatch()
	s.mu.Lock()
	w := s.newWriter(b)
	defer w.release()
	lsn := s.received.Load()
	for _, k := range keys {
		if k.Transform != transform {
			return w.abort(fmt.Errorf("checkpoint: MarkDirty(%d) given a key of transform %d", transform, k.Transform))
		}
		if err := w.markKey(transform, k.Table, k.Key, lsn); err != nil {
			return w.abort(err)
		}
	}
	w.publishCounts()
	return s.commitSynced(b, 0)
}

// Take returns up to limit dirty keys of a transform (limit <= 0: no
// limit), with all of its truncation markers. It does not remove them: call
// Done once they are applied.
//
// Successive calls go round the key space from where the previous one
// stopped, wrapping at the end: the keys Done just deleted leave tombstones
// at the front that a scan from the start would step over on every call
// until Pebble compacts them (quadratic in a long catch-up).
func (s *Store) Take(transform int64, limit int) (Batch, error) {
	if err := s.enter(); err != nil {
		return Batch{}, err
	}
	defer s.life.RUnlock()
	// Read the recorded position first: everything at or below it was
	// readable before it was published, so the iterator (a consistent
	// point-in-time view opened after) and the mirror see all of it.
	out := Batch{UpTo: s.recorded.Load()}
	// From here on, Record notes the keys it marks for this transform, so
	// Done knows which of the batch's keys changed without reading each.
	// Registered before the iterator opens: a mark is either in its view or
	// in the watch.
	s.mu.Lock()
	if s.watch[transform] == nil {
		s.watchSeq++
		s.watch[transform] = &watch{id: s.watchSeq, marked: make(map[string]mirrorEntry)}
	}
	out.watch = s.watch[transform].id
	kp := keyPrefix(transform)
	start := s.keysStart(transform)
	from := s.cursors[transform]
	if m := s.mirrors[transform]; m != nil {
		s.takeMirror(transform, m, limit, &out)
		s.mu.Unlock()
		return out, nil
	}
	s.mu.Unlock()
	// The markers' range has an upper bound of its own: a seek past the
	// last marker would otherwise step over every tombstone at the front
	// of the keys to find the first live one.
	tp := truncPrefix(transform)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tp, UpperBound: prefixEnd(tp)})
	if err != nil {
		return Batch{}, fmt.Errorf("checkpoint: take %d: %w", transform, err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		lsn, ver, err := decodeValue(it.Value())
		if err != nil {
			return Batch{}, errors.Join(err, it.Close())
		}
		out.Truncated = append(out.Truncated, Truncation{Table: binary.BigEndian.Uint32(k[len(tp):]), LSN: lsn, Version: ver})
	}
	// Same iterator, same point-in-time view.
	it.SetBounds(kp, prefixEnd(kp))
	if from == nil {
		from = start
	}
	// [from, end of the keys), then [start, from).
	full := true
	var last, first []byte
	collect := func(lo, end []byte) error {
		for it.SeekGE(lo); it.Valid() && (end == nil || bytes.Compare(it.Key(), end) < 0); it.Next() {
			if limit > 0 && len(out.Keys) >= limit {
				full = false
				return nil
			}
			k := it.Key()
			if len(k) < len(kp)+4 {
				return fmt.Errorf("checkpoint: corrupt dirty key %x", k)
			}
			lsn, ver, err := decodeValue(it.Value())
			if err != nil {
				return err
			}
			out.Keys = append(out.Keys, Entry{
				Table:   binary.BigEndian.Uint32(k[len(kp):]),
				Key:     append([]byte(nil), k[len(kp)+4:]...),
				LSN:     lsn,
				Version: ver,
			})
			if first == nil || bytes.Compare(k, first) < 0 {
				first = append([]byte(nil), k...)
			}
			last = append(last[:0], k...)
		}
		return nil
	}
	err = collect(from, nil)
	if err == nil && full && bytes.Compare(start, from) < 0 {
		err = collect(start, from)
	}
	if err != nil {
		return Batch{}, errors.Join(err, it.Close())
	}
	if err := it.Close(); err != nil {
		return Batch{}, fmt.Errorf("checkpoint: take %d: %w", transform, err)
	}
	out.All = full
	s.mu.Lock()
	if full || last == nil {
		delete(s.cursors, transform)
	} else {
		s.cursors[transform] = append(last, 0) // the next key after last
	}
	// A whole scan found every dirty key but those marked since the watch
	// was registered: the smallest of both is the new low-water mark.
	if w := s.watch[transform]; full && w != nil && w.id == out.watch {
		s.low[transform] = lowest(prefixEnd(kp), first, w.min)
		s.rebuildMirror(transform, &out, w)
	}
	s.mu.Unlock()
	return out, nil
}

// Done removes the batch's keys and markers from the transform's dirty set,
// except those written again since Take (their Version differs): a key
// re-dirtied meanwhile stays for the next Take. Not synced: a lost Done
// only repeats a re-derive.
func (s *Store) Done(transform int64, b Batch) error {
	if len(b.Keys)+len(b.Truncated) == 0 {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	pb := s.db.NewBatch()
	defer pb.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]struct{}, len(b.Keys))
	removed := int64(0)
	// The keys marked since this batch's Take, when that watch is still
	// the transform's; otherwise every entry is read.
	var marked map[string]mirrorEntry
	// A batch with every dirty key leaves only the keys marked since its
	// Take, each of them in the watch: their smallest is the new
	// low-water mark, once the deletions are committed.
	var low []byte
	if w := s.watch[transform]; w != nil && w.id == b.watch {
		marked = w.marked
		s.dropWatch(transform)
		if b.All {
			low = lowest(prefixEnd(keyPrefix(transform)), w.min)
		}
	}
	setLow := func() {
		if low != nil {
			s.low[transform] = low
		}
	}
	m := s.mirrors[transform]
	del := func(k []byte, version uint64) (bool, error) {
		if _, dup := seen[string(k)]; dup {
			return false, nil
		}
		// The planted done_clears_redirtied_key bug (test builds only)
		// forgets that a key may have been dirtied again since Take.
		redirtied := func(cur uint64) bool { return cur != version && !plant.Active(plant.DoneClearsRedirtied) }
		if m != nil {
			if cur, ok := m[string(k)]; !ok || redirtied(cur.ver) {
				return false, nil // dirtied again since Take
			}
		} else if cur, again := marked[string(k)]; again {
			if redirtied(cur.ver) {
				return false, nil // dirtied again since Take
			}
		} else if marked == nil {
			v, ok, err := s.get(k)
			if err != nil || !ok {
				return false, err
			}
			_, cur, err := decodeValue(v)
			if err != nil || redirtied(cur) {
				return false, err
			}
		}
		seen[string(k)] = struct{}{}
		if m != nil && !m[string(k)].stored {
			return true, nil // only staged: nothing to delete from Pebble
		}
		return true, pb.Delete(k, nil)
	}
	for _, e := range b.Keys {
		ok, err := del(dirtyKey(transform, e.Table, e.Key), e.Version)
		if err != nil {
			return err
		}
		if ok {
			removed++
		}
	}
	for _, t := range b.Truncated {
		if _, err := del(truncKey(transform, t.Table), t.Version); err != nil {
			return err
		}
	}
	if !pb.Empty() {
		if err := pb.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("checkpoint: done %d: %w", transform, err)
		}
	}
	for k := range seen {
		if _, ok := m[k]; ok {
			delete(m, k)
			s.held--
		}
		delete(s.staged, k)
	}
	if m != nil && len(m) == 0 {
		// A map keeps the buckets of its largest size, and Take iterates
		// them all: a drained set starts afresh.
		s.mirrors[transform] = mirror{}
	}
	setLow()
	s.addPending(transform, -removed)
	return nil
}

// lowest is the smallest of the non-nil keys, or none when all are nil.
func lowest(none []byte, keys ...[]byte) []byte {
	var min []byte
	for _, k := range keys {
		if k != nil && (min == nil || bytes.Compare(k, min) < 0) {
			min = k
		}
	}
	if min == nil {
		return none
	}
	return min
}

// Pending returns the number of dirty keys of a transform (markers not
// counted). It reads an in-memory counter.
func (s *Store) Pending(transform int64) (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[transform], nil
}

// Empty reports whether a transform's dirty set holds nothing: no key and
// no TRUNCATE marker. It is exact, unlike Pending (which counts no
// markers): read after RecordedLSN, an empty set means every change at or
// below that position was applied and done (ADR 0044).
func (s *Store) Empty(transform int64) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.life.RUnlock()
	s.mu.Lock()
	if m := s.mirrors[transform]; m != nil {
		n := len(m)
		s.mu.Unlock()
		return n == 0, nil
	}
	// Without a mirror every entry is in Pebble: the markers first, then
	// the keys from the low-water mark.
	start := s.keysStart(transform)
	s.mu.Unlock()
	tp := truncPrefix(transform)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tp, UpperBound: prefixEnd(tp)})
	if err != nil {
		return false, fmt.Errorf("checkpoint: look at %d's dirty set: %w", transform, err)
	}
	found := it.First()
	if !found {
		kp := keyPrefix(transform)
		it.SetBounds(kp, prefixEnd(kp))
		found = it.SeekGE(start)
	}
	if err := it.Close(); err != nil {
		return false, fmt.Errorf("checkpoint: look at %d's dirty set: %w", transform, err)
	}
	return !found, nil
}

// keysStart is where a transform's dirty keys start in Pebble (s.mu
// held): every dirty key is at or after its low-water mark, and the keys
// before it are the tombstones of batches already done, which an
// iterator would step over one by one.
func (s *Store) keysStart(transform int64) []byte {
	if low, ok := s.low[transform]; ok {
		return low
	}
	return keyPrefix(transform)
}

// DropTransform durably deletes a transform's whole dirty set and markers.
func (s *Store) DropTransform(transform int64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	pfx := dirtyPrefix(transform)
	b := s.db.NewBatch()
	_ = b.DeleteRange(pfx, prefixEnd(pfx), nil)
	s.mu.Lock()
	delete(s.cursors, transform)
	delete(s.low, transform)
	delete(s.pending, transform)
	s.dropWatch(transform)
	s.held -= len(s.mirrors[transform])
	s.mirrors[transform] = mirror{}
	for k, tr := range s.staged {
		if tr == transform {
			delete(s.staged, k)
		}
	}
	return s.commitSynced(b, 0)
}

func (s *Store) addPending(transform int64, d int64) {
	if n := s.pending[transform] + d; n > 0 {
		s.pending[transform] = n
	} else {
		delete(s.pending, transform)
	}
}

// writer adds dirty entries to a batch while s.mu is held, keeping the
// per-transform counters exact: it looks every key up (in the batch so far,
// then in the DB) to know whether the key is new.
type writer struct {
	s *Store
	b *pebble.Batch
	// stage: keys of transforms with a mirror are staged instead of
	// written to b (a RecordMany whose sync is deferred).
	stage bool
	seen  map[string]uint64 // keys already in b -> their LSN
	delta map[int64]int64
	// it reads the keys of transforms without a mirror (a catch-up's
	// backlog): one iterator for the writer's whole batch instead of a
	// Get per key, whose iterator setup and teardown were a sixth of the
	// runner's CPU catching up a million keys. Closed by release.
	it *pebble.Iterator
}

// newWriter starts a writer; the caller must release it.
func (s *Store) newWriter(b *pebble.Batch) *writer {
	return &writer{s: s, b: b, seen: make(map[string]uint64), delta: make(map[int64]int64)}
}

// release closes what the writer opened (its batch is the caller's).
func (w *writer) release() {
	if w.it != nil {
		_ = w.it.Close()
		w.it = nil
	}
}

// lookup is k's stored value, through the writer's iterator: an exact
// match by prefix seek (the whole key is the prefix, so bloom filters
// apply as for a Get), and keys that arrive in order, as a transaction's
// often do, continue from the previous seek.
func (w *writer) lookup(k []byte) ([]byte, bool, error) {
	if w.it == nil {
		it, err := w.s.db.NewIter(nil)
		if err != nil {
			return nil, false, fmt.Errorf("checkpoint: read dirty keys: %w", err)
		}
		w.it = it
	}
	if !w.it.SeekPrefixGE(k) || !bytes.Equal(w.it.Key(), k) {
		if err := w.it.Error(); err != nil {
			return nil, false, fmt.Errorf("checkpoint: get %q: %w", k, err)
		}
		return nil, false, nil
	}
	v, err := w.it.ValueAndErr()
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: get %q: %w", k, err)
	}
	return append([]byte(nil), v...), true, nil
}

func (w *writer) markKey(transform int64, table uint32, key []byte, lsn uint64) error {
	k := dirtyKey(transform, table, key)
	isNew, err := w.set(transform, k, lsn)
	if isNew {
		w.delta[transform]++
	}
	// Keep the low-water mark below every dirty key (see Store.low). A
	// mark whose batch then fails only leaves it lower than it need be.
	if low, ok := w.s.low[transform]; ok && bytes.Compare(k, low) < 0 {
		w.s.low[transform] = k
	}
	if watch := w.s.watch[transform]; watch != nil && (watch.min == nil || bytes.Compare(k, watch.min) < 0) {
		watch.min = k
	}
	return err
}

func (w *writer) markTrunc(transform int64, table uint32, lsn uint64) error {
	_, err := w.set(transform, truncKey(transform, table), lsn)
	return err
}

func (w *writer) set(transform int64, k []byte, lsn uint64) (isNew bool, err error) {
	prev, inBatch := w.seen[string(k)]
	if m := w.s.mirrors[transform]; !inBatch && m != nil {
		// The mirror is the whole set: no read of the store.
		cur, ok := m[string(k)]
		prev, isNew = cur.lsn, !ok
	} else if !inBatch {
		v, ok, err := w.lookup(k)
		if err != nil {
			return false, err
		}
		if ok {
			if prev, _, err = decodeValue(v); err != nil {
				return false, err
			}
		}
		isNew = !ok
	}
	lsn = max(lsn, prev) // the newest LSN wins; the version always changes
	// One string for every map the key goes into: each conversion from
	// bytes is an allocation of its own.
	ks := string(k)
	w.seen[ks] = lsn
	ver := w.s.nextVersion
	w.s.nextVersion++
	e := mirrorEntry{lsn: lsn, ver: ver}
	m := w.s.mirrors[transform]
	if watch := w.s.watch[transform]; watch != nil && m == nil {
		// Only a set without a mirror needs its marks watched: Done
		// compares a mirrored set's versions against the mirror.
		if _, again := watch.marked[ks]; !again {
			w.s.held++
		}
		watch.marked[ks] = e
		if len(watch.marked) > watchCap || w.s.held > w.s.memBudget {
			w.s.dropWatch(transform)
		}
	}
	if m != nil && w.stage {
		// Staged: written by the sync that reports its position, unless a
		// Done removes it first (mirror.go).
		cur, had := m[ks]
		e.stored = cur.stored
		m[ks] = e
		w.s.staged[ks] = transform
		w.grewMirror(transform, m, had)
		return isNew, nil
	}
	e.stored = true
	delete(w.s.staged, ks)
	if m != nil {
		_, had := m[ks]
		m[ks] = e
		w.grewMirror(transform, m, had)
	}
	return isNew, w.b.Set(k, encodeValue(lsn, ver), nil)
}

// grewMirror counts an entry just written to transform's mirror m (had:
// it replaced one) and drops the mirror past its cap or the store's
// budget. Called with s.mu held.
func (w *writer) grewMirror(transform int64, m mirror, had bool) {
	if !had {
		w.s.held++
	}
	if len(m) > w.s.mirrorCap || w.s.held > w.s.memBudget {
		w.dropMirror(transform)
	}
}

// publishCounts applies the counted changes; called just before the batch
// is applied, still under s.mu (a failed apply is fatal to the store).
func (w *writer) publishCounts() {
	for tr, d := range w.delta {
		w.s.addPending(tr, d)
	}
}

// abort releases s.mu and the batch after a failure before applying.
func (w *writer) abort(err error) error {
	w.release()
	w.s.mu.Unlock()
	_ = w.b.Close()
	return err
}

// watch records the keys marked for a transform since a Take, so that Done
// can delete the batch's other keys without reading them.
type watch struct {
	id     uint64
	marked map[string]mirrorEntry // dirty-set key -> what was written
	min    []byte                 // the smallest dirty key in marked (nil: none)
}
