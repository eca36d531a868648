package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// XidEntry is a recorded transaction not yet known to be visible to new
// snapshots (docs/architecture.md §3.4).
type XidEntry struct {
	LSN uint64 // commit end LSN
	Xid uint32
}

// resolvePersistInterval bounds how often resolved visibility entries are
// deleted from Pebble. Each deletion is a range tombstone that every later
// read of the range must fragment; a resolve lost in a crash only repeats
// a visibility check.
const resolvePersistInterval = time.Second

// xidLog is the in-memory mirror of the visibility entries, in LSN order,
// so that appliers and the pruner read them without iterating Pebble.
type xidLog struct {
	mu          sync.Mutex
	entries     []XidEntry // unresolved, ascending LSN
	resolved    uint64     // highest LSN resolved in memory
	persisted   uint64     // highest LSN whose resolve reached Pebble
	lastPersist time.Time
}

// add inserts an entry recorded in Pebble. Entries normally arrive in LSN
// order; a replayed transaction may arrive late and is put in its place.
func (l *xidLog) add(e XidEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.entries)
	if n == 0 || l.entries[n-1].LSN < e.LSN {
		l.entries = append(l.entries, e)
		return
	}
	i := sort.Search(n, func(i int) bool { return l.entries[i].LSN >= e.LSN })
	if i < n && l.entries[i].LSN == e.LSN {
		l.entries[i] = e
		return
	}
	l.entries = append(l.entries, XidEntry{})
	copy(l.entries[i+1:], l.entries[i:])
	l.entries[i] = e
}

// loadXids fills the mirror from Pebble at open.
func (s *Store) loadXids() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsXid}, UpperBound: []byte{nsXid + 1}})
	if err != nil {
		return fmt.Errorf("checkpoint: load visibility entries: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 9 || len(v) != 4 {
			return errors.Join(fmt.Errorf("checkpoint: corrupt visibility entry %x", k), it.Close())
		}
		s.xids.entries = append(s.xids.entries, XidEntry{LSN: binary.BigEndian.Uint64(k[1:]), Xid: binary.BigEndian.Uint32(v)})
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("checkpoint: load visibility entries: %w", err)
	}
	return nil
}

// PendingXids returns the unresolved visibility entries with LSN <= upTo,
// in LSN order, at most limit of them (limit <= 0: all).
func (s *Store) PendingXids(upTo uint64, limit int) ([]XidEntry, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	l := &s.xids
	l.mu.Lock()
	defer l.mu.Unlock()
	n := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].LSN > upTo })
	if limit > 0 && n > limit {
		n = limit
	}
	if n == 0 {
		return nil, nil
	}
	return append([]XidEntry(nil), l.entries[:n]...), nil
}

// ResolveXids drops the visibility entries with LSN <= upToLSN, once the
// caller has seen them visible. Entries are recorded in LSN order, so this
// never removes one the caller has not read. The deletion reaches Pebble
// at most once per resolvePersistInterval and is not synced: a lost
// resolve only repeats a check.
func (s *Store) ResolveXids(upToLSN uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	l := &s.xids
	l.mu.Lock()
	n := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].LSN > upToLSN })
	l.entries = l.entries[n:]
	l.resolved = max(l.resolved, upToLSN)
	persist := l.resolved > l.persisted && time.Since(l.lastPersist) >= resolvePersistInterval
	l.mu.Unlock()
	if !persist {
		return nil
	}
	return s.persistResolved()
}

// persistResolved deletes the resolved visibility entries from Pebble.
func (s *Store) persistResolved() error {
	l := &s.xids
	l.mu.Lock()
	upTo := l.resolved
	if upTo <= l.persisted {
		l.mu.Unlock()
		return nil
	}
	l.persisted, l.lastPersist = upTo, time.Now()
	l.mu.Unlock()
	end := []byte{nsXid + 1}
	if upTo < math.MaxUint64 {
		end = xidKey(upTo + 1)
	}
	if err := s.db.DeleteRange(xidKey(0), end, pebble.NoSync); err != nil {
		return fmt.Errorf("checkpoint: resolve xids: %w", err)
	}
	return nil
}
