package checkpoint

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// commitChunkKeys bounds how many spilled records CommitSpill moves per
// Pebble batch, and so its memory.
const commitChunkKeys = 16384

// SpillKeys stores dirty keys of an in-progress streamed transaction xid
// (made by its subtransaction subxid; subxid == xid for the top level)
// until the stream commits or aborts. Not synced: after a crash the server
// re-streams an uncommitted transaction from the start.
func (s *Store) SpillKeys(xid, subxid uint32, keys []DirtyKey) error {
	if len(keys) == 0 {
		return nil
	}
	var chunk []byte
	for _, k := range keys {
		chunk = appendSpillKey(chunk, k)
	}
	return s.spill(xid, subxid, chunk)
}

// SpillTruncate stores TRUNCATE markers of an in-progress streamed
// transaction, like SpillKeys.
func (s *Store) SpillTruncate(xid, subxid uint32, truncs []TableRef) error {
	if len(truncs) == 0 {
		return nil
	}
	var chunk []byte
	for _, t := range truncs {
		chunk = appendSpillTrunc(chunk, t)
	}
	return s.spill(xid, subxid, chunk)
}

func (s *Store) spill(xid, subxid uint32, chunk []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if err := s.db.Set(spillKey(xid, subxid, s.spillSeq.Add(1)), chunk, pebble.NoSync); err != nil {
		return fmt.Errorf("checkpoint: spill xid %d: %w", xid, err)
	}
	return nil
}

// CommitSpill moves everything spilled for xid (all subtransactions) into
// the dirty sets, adds the visibility entry (lsn, xid) and advances
// ReceivedLSN to lsn. It streams the spill in bounded chunks: the
// visibility entry is written with the first chunk (so an applier that
// sees any of the keys also checks xid), and ReceivedLSN moves only with
// the last, synced one. After a failure part-way the keys already moved
// stay dirty, which only costs re-derives.
func (s *Store) CommitSpill(xid uint32, lsn uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	pfx := spillPrefix(xid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return fmt.Errorf("checkpoint: commit spill xid %d: %w", xid, err)
	}
	defer it.Close()
	valid := it.First()
	first := true
	for {
		b := s.db.NewBatch()
		s.mu.Lock()
		w := s.newWriter(b)
		if first && valid {
			_ = b.Set(xidKey(lsn), binary.BigEndian.AppendUint32(nil, xid), nil)
			s.xids.add(XidEntry{LSN: lsn, Xid: xid})
		}
		first = false
		n := 0
		for ; valid && n < commitChunkKeys; valid = it.Next() {
			err := decodeSpill(it.Value(), func(tag byte, tr int64, table uint32, key []byte) error {
				n++
				if tag == tagTrunc {
					return w.markTrunc(tr, table, lsn)
				}
				return w.markKey(tr, table, key, lsn)
			})
			if err != nil {
				return w.abort(fmt.Errorf("checkpoint: commit spill xid %d: %w", xid, err))
			}
		}
		if err := it.Error(); err != nil {
			return w.abort(fmt.Errorf("checkpoint: commit spill xid %d: %w", xid, err))
		}
		w.publishCounts()
		w.release()
		if !valid {
			_ = b.DeleteRange(pfx, prefixEnd(pfx), nil)
			return s.commitSynced(b, lsn)
		}
		err := b.Commit(pebble.NoSync)
		s.mu.Unlock()
		if cerr := b.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("checkpoint: commit spill xid %d: %w", xid, err)
		}
	}
}

// AbortSpill drops what was spilled for subtransaction subxid of xid, or
// everything of xid when subxid == xid.
func (s *Store) AbortSpill(xid, subxid uint32) error {
	pfx := spillSubPrefix(xid, subxid)
	if subxid == xid {
		pfx = spillPrefix(xid)
	}
	return s.deleteRange(pfx, prefixEnd(pfx))
}

// ClearSpills drops every spilled transaction; call it at (re)connect, since
// the server re-sends in-progress transactions from their start.
func (s *Store) ClearSpills() error {
	return s.deleteRange([]byte{nsSpill}, []byte{nsSpill + 1})
}

func (s *Store) deleteRange(start, end []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if err := s.db.DeleteRange(start, end, pebble.NoSync); err != nil {
		return fmt.Errorf("checkpoint: delete spill: %w", err)
	}
	return nil
}
