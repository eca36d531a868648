package checkpoint

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Reset discards everything the store holds — every dirty set and
// truncation marker, visibility entry, spill, named state, the received
// and confirmed positions — and gives it a new StoreID, as if it had just
// been created (Created reports true). A runner resets its store when the
// server it runs against is not the one the store's positions and keys
// came from (a promoted standby, a point-in-time restore, a copy of the
// database; ADR 0039): ReceivedLSN never goes backwards, so a store whose
// positions lie in a future the server never had would start streaming
// past the server's own new transactions.
//
// Reset must not run concurrently with any other call: the runner calls
// it before capture and workers start.
func (s *Store) Reset() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("checkpoint: generate store id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	b := s.db.NewBatch()
	defer b.Close()
	for _, ns := range []byte{nsDirty, nsXid, nsSpill} {
		_ = b.DeleteRange([]byte{ns}, []byte{ns + 1}, nil)
	}
	_ = b.Delete(metaKey(metaReceived), nil)
	_ = b.Delete(metaKey(metaConfirmed), nil)
	pfx := metaKey(metaStatePfx)
	_ = b.DeleteRange(pfx, prefixEnd(pfx), nil)
	_ = b.Set(metaKey(metaStoreID), []byte(id), nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("checkpoint: reset the store: %w", err)
	}
	s.storeID, s.created = id, true
	s.pending, s.watch = make(map[int64]int64), make(map[int64]*watch)
	s.cursors, s.low = make(map[int64][]byte), make(map[int64][]byte)
	s.mirrors, s.held = make(map[int64]mirror), 0
	s.staged, s.stagedXids = make(map[string]int64), nil
	s.recvWritten, s.recvDefer, s.recvUnsynced = 0, 0, 0
	s.received.Store(0)
	s.recorded.Store(0)
	s.confirmed.Store(0)
	s.xids.mu.Lock()
	s.xids.entries, s.xids.resolved, s.xids.persisted = nil, 0, 0
	s.xids.mu.Unlock()
	s.log.Info("checkpoint store reset", "store_id", id)
	return nil
}
