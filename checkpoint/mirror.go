package checkpoint

import (
	"encoding/binary"
	"slices"
)

// defaultMirrorCap bounds the entries (keys and TRUNCATE markers) of one
// transform's in-memory mirror (Store.mirrorCap): a live transform's dirty
// set holds a few keys, a catch-up's millions (ADR 0016).
const defaultMirrorCap = 1 << 16

// mirrorEntry is what a dirty entry's value holds: the newest LSN that
// dirtied it and its version stamp.
type mirrorEntry struct{ lsn, ver uint64 }

// mirror is an exact in-memory copy of one transform's dirty set, by
// dirty-set key (dirtyKey or truncKey). While a transform has one, Take
// reads it instead of Pebble — where Done's deletions leave tombstones at
// random places of the key range that every scan steps over until a
// compaction, three quarters of the runner's CPU at one row per commit —
// Record learns from it whether a key is new, and Done compares versions
// against it. Pebble remains the durable copy and is written as before.
// Guarded by Store.mu.
type mirror map[string]mirrorEntry

// mirrorSet notes a write in the transform's mirror, dropping the mirror
// when the set outgrows s.mirrorCap (it is then read from Pebble until a
// full Take finds it small again). Called with s.mu held.
func (s *Store) mirrorSet(transform int64, k []byte, e mirrorEntry) {
	m := s.mirrors[transform]
	if m == nil {
		return
	}
	m[string(k)] = e
	if len(m) > s.mirrorCap {
		delete(s.mirrors, transform)
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
	if len(b.Keys)+len(b.Truncated)+len(w.marked) > s.mirrorCap {
		return
	}
	m := make(mirror, len(b.Keys)+len(b.Truncated)+len(w.marked))
	for _, e := range b.Keys {
		m[string(dirtyKey(transform, e.Table, e.Key))] = mirrorEntry{lsn: e.LSN, ver: e.Version}
	}
	for _, t := range b.Truncated {
		m[string(truncKey(transform, t.Table))] = mirrorEntry{lsn: t.LSN, ver: t.Version}
	}
	for k, e := range w.marked {
		if cur, ok := m[k]; !ok || e.ver > cur.ver {
			m[k] = e
		}
	}
	s.mirrors[transform] = m
}
