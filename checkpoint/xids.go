package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// XidEntry is a recorded transaction not yet known to be visible to new
// snapshots (DESIGN §2 "Visible before re-derived").
type XidEntry struct {
	LSN uint64 // commit end LSN
	Xid uint32
}

// PendingXids returns the unresolved visibility entries in LSN order.
func (s *Store) PendingXids() ([]XidEntry, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsXid}, UpperBound: []byte{nsXid + 1}})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: pending xids: %w", err)
	}
	var out []XidEntry
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 9 || len(v) != 4 {
			return nil, errors.Join(fmt.Errorf("checkpoint: corrupt visibility entry %x", k), it.Close())
		}
		out = append(out, XidEntry{LSN: binary.BigEndian.Uint64(k[1:]), Xid: binary.BigEndian.Uint32(v)})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("checkpoint: pending xids: %w", err)
	}
	return out, nil
}

// ResolveXids deletes the visibility entries with LSN <= upToLSN, once the
// caller has seen them visible. Entries are recorded in LSN order, so this
// never removes one the caller has not read. Not synced: a lost resolve
// only repeats a check.
func (s *Store) ResolveXids(upToLSN uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	end := []byte{nsXid + 1}
	if upToLSN < math.MaxUint64 {
		end = xidKey(upToLSN + 1)
	}
	if err := s.db.DeleteRange(xidKey(0), end, pebble.NoSync); err != nil {
		return fmt.Errorf("checkpoint: resolve xids: %w", err)
	}
	return nil
}
