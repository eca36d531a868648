package checkpoint

import (
	"encoding/binary"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// defaultMirrorCap bounds the entries (keys and TRUNCATE markers) of one
// transform's in-memory mirror (Store.mirrorCap): a live transform's dirty
// set holds a few keys, a catch-up's millions (ADR 0016).
const defaultMirrorCap = 1 << 16

// watchCap bounds the marks one watch records (see watch): a Take whose
// batch takes long while a huge transaction is recorded (a bisection,
// ADR 0013) would otherwise keep every key of it. Past the cap the watch
// is dropped and Done reads each entry of its batch instead.
const watchCap = 1 << 16

// defaultMemBudget bounds the entries the store keeps in memory for all
// transforms together (Store.held: mirror entries and watched marks), at
// about 100 bytes each (ADR 0029). A mirror or a watch that would pass it
// is dropped, as one that passes its own cap.
const defaultMemBudget = 1 << 17

// mirrorEntry is what a dirty entry's value holds: the newest LSN that
// dirtied it and its version stamp; stored says Pebble holds the entry
// (some version of it), so removing it takes a deletion.
type mirrorEntry struct {
	lsn, ver uint64
	stored   bool
}

// mirror is an exact in-memory copy of one transform's dirty set, by
// dirty-set key (dirtyKey or truncKey). While a transform has one, Take
// reads it instead of Pebble — where Done's deletions leave tombstones at
// random places of the key range that every scan steps over until a
// compaction, three quarters of the runner's CPU at one row per commit —
// Record learns from it whether a key is new, and Done compares versions
// against it. Pebble remains the durable copy (written at once, or by
// the next sync when staged: see below).
// Guarded by Store.mu.
type mirror map[string]mirrorEntry

// Staging. While a transform has a mirror, a RecordMany whose sync is
// deferred (Options.SyncInterval) does not write its keys to Pebble: it
// stages them (Store.staged, and its visibility entries in
// Store.stagedXids), and the sync that reports their position writes the
// staged entries still dirty, with that position, in one batch. A key
// applied before then (its Done came first) is never written nor deleted:
// at one row per commit that was four memtable inserts per transaction
// (ADR 0016). The durability contract holds: ReceivedLSN reports a
// position only after the sync that wrote every staged key at or below
// it, and a key removed by Done is already reflected in PostgreSQL.

// dropMirror stops mirroring a transform whose set outgrew s.mirrorCap
// (it is then read from Pebble until a full Take finds it small again);
// its staged entries are written to the writer's batch first, as Pebble
// must then hold the whole set, and noted as written by it (later keys of
// the batch are looked up in the store, which does not have them yet).
// The transform's watch goes too: while the mirror existed it recorded
// nothing (Done compared versions against the mirror), so Done must now
// read each entry. Called with s.mu held.
func (w *writer) dropMirror(transform int64) {
	s := w.s
	m := s.mirrors[transform]
	s.held -= len(m)
	s.dropWatch(transform)
	for k, tr := range s.staged {
		if tr != transform {
			continue
		}
		e := m[k]
		_ = w.b.Set([]byte(k), encodeValue(e.lsn, e.ver), nil)
		if _, ok := w.seen[k]; !ok {
			w.seen[k] = e.lsn
		}
		delete(s.staged, k)
	}
	delete(s.mirrors, transform)
}

// writeStaged adds every staged entry to b, which the caller syncs
// together with the received position: the entries still dirty (staged
// keys Done removed are no longer staged), and the visibility entries not
// resolved meanwhile. Called with s.mu held.
func (s *Store) writeStaged(b *pebble.Batch) {
	for k, tr := range s.staged {
		m := s.mirrors[tr]
		e := m[k]
		_ = b.Set([]byte(k), encodeValue(e.lsn, e.ver), nil)
		e.stored = true
		m[k] = e
		delete(s.staged, k)
	}
	if len(s.stagedXids) > 0 {
		s.xids.mu.Lock()
		resolved := s.xids.resolved
		s.xids.mu.Unlock()
		for _, x := range s.stagedXids {
			if x.LSN > resolved {
				_ = b.Set(xidKey(x.LSN), binary.BigEndian.AppendUint32(nil, x.Xid), nil)
			}
		}
		s.stagedXids = s.stagedXids[:0]
	}
}

// takeMirror fills out from the mirror as Take's scan would: every
// marker, and up to limit keys in key order going round the key space
// from the transform's cursor. Called with s.mu held.
func (s *Store) takeMirror(transform int64, m mirror, limit int, out *Batch) {
	kp := len(keyPrefix(transform))
	keys := make([]string, 0, len(m))
	for k, e := range m {
		if k[kp-1] == tagTrunc {
			out.Truncated = append(out.Truncated, Truncation{Table: binary.BigEndian.Uint32([]byte(k[kp : kp+4])), LSN: e.lsn, Version: e.ver})
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(out.Truncated, func(a, b Truncation) int { return int(int64(a.Table) - int64(b.Table)) })
	slices.Sort(keys)
	start := 0
	if from := s.cursors[transform]; from != nil {
		start, _ = slices.BinarySearch(keys, string(from))
	}
	n := len(keys)
	if limit > 0 && limit < n {
		n = limit
	}
	out.Keys = make([]Entry, 0, n)
	for i := range n {
		k := keys[(start+i)%len(keys)]
		e := m[k]
		out.Keys = append(out.Keys, Entry{Table: binary.BigEndian.Uint32([]byte(k[kp : kp+4])), Key: []byte(k[kp+4:]), LSN: e.lsn, Version: e.ver})
	}
	out.All = n == len(keys)
	if out.All {
		delete(s.cursors, transform)
	} else {
		s.cursors[transform] = append([]byte(keys[(start+n-1)%len(keys)]), 0) // the next key after the last
	}
}

// rebuildMirror makes the mirror of a transform whose whole set a Take
// just read from Pebble: what it read, and what its watch saw marked
// since it was registered (before the scan's view was opened), the newer
// version winning. Nothing else can have changed the set: only Done
// deletes, from the same goroutine as Take. Called with s.mu held.
func (s *Store) rebuildMirror(transform int64, b *Batch, w *watch) {
	n := len(b.Keys) + len(b.Truncated) + len(w.marked)
	if n > s.mirrorCap || s.held+n > s.memBudget {
		return
	}
	m := make(mirror, len(b.Keys)+len(b.Truncated)+len(w.marked))
	// Without a mirror nothing was staged: Pebble holds every entry.
	for _, e := range b.Keys {
		m[string(dirtyKey(transform, e.Table, e.Key))] = mirrorEntry{lsn: e.LSN, ver: e.Version, stored: true}
	}
	for _, t := range b.Truncated {
		m[string(truncKey(transform, t.Table))] = mirrorEntry{lsn: t.LSN, ver: t.Version, stored: true}
	}
	for k, e := range w.marked {
		if cur, ok := m[k]; !ok || e.ver > cur.ver {
			e.stored = true
			m[k] = e
		}
	}
	s.mirrors[transform] = m
	s.held += len(m)
}

// dropWatch forgets transform's watch: Done then reads each entry of the
// batch the watch was for. Called with s.mu held.
func (s *Store) dropWatch(transform int64) {
	if w := s.watch[transform]; w != nil {
		s.held -= len(w.marked)
		delete(s.watch, transform)
	}
}

// InMemory is how many dirty-set entries the store keeps in memory for
// every transform together (mirrors and watches): at most about
// defaultMemBudget (ADR 0029).
func (s *Store) InMemory() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}
