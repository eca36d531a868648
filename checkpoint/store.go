// Package checkpoint is trellis-repl's local durable store (Pebble): one
// coalescing dirty-key set per transform, the received and confirmed slot
// positions, visibility entries for recorded transactions, and spilled
// chunks of in-progress streamed transactions (docs/architecture.md §2, §3.6).
//
// Durability contract:
//   - ReceivedLSN only ever reports a position that is fsynced, together with
//     every key of every transaction at or below it. The caller may confirm
//     the slot up to it.
//   - CommitSpill, MarkDirty, SetConfirmedLSN and DropTransform are synced.
//     Record/RecordMany are synced too, or, with Options.SyncInterval, at
//     most once per interval (group commit across calls): their keys can
//     be taken at once, and ReceivedLSN reports their position once the
//     sync that covers them is done. Done, ResolveXids and the spill calls are
//     not: losing them only causes a harmless re-derive, a repeated
//     visibility check, or a spill the server re-streams anyway. Because
//     Pebble's WAL is sequential, every synced write also makes all earlier
//     writes durable.
//
// Concurrency: Record, AdvanceReceived and the spill calls are meant for the
// single replication goroutine (they must be issued in LSN order); Take, Done
// and Pending may run concurrently from one applier goroutine per transform.
//
// The methods take no context.Context: each is a bounded local-disk
// operation that Pebble cannot interrupt part-way.
package checkpoint

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("checkpoint: store is closed")

// advanceSyncInterval bounds how often AdvanceReceived fsyncs on its own.
const advanceSyncInterval = time.Second

// Store is the local checkpoint store. It is safe for concurrent use within
// the limits described in the package documentation.
type Store struct {
	db      *pebble.DB
	log     *slog.Logger
	storeID string
	created bool

	// life is held shared by every operation and exclusively by Close, so
	// Close waits for in-flight calls and later calls fail with ErrClosed.
	life   sync.RWMutex
	closed bool

	// mu serializes every read-modify-write of dirty entries (so Done's
	// version compare and its delete are atomic with respect to Record) and
	// guards the fields below.
	mu      sync.Mutex
	pending map[int64]int64 // dirty key count per transform
	// watch holds, per transform with a Take outstanding, the keys marked
	// since and their versions (see Take and Done).
	watch    map[int64]*watch
	watchSeq uint64
	cursors  map[int64][]byte // where each transform's next Take starts
	// low holds, per transform, a key at or below every dirty key: Take
	// starts there instead of at the front of the key space, where Done's
	// deletions leave tombstones until Pebble compacts them (in a long
	// catch-up, a third of the process's CPU went to stepping over them).
	// Absent: not known yet (after Open), the front.
	low map[int64][]byte
	// mirrors holds the exact in-memory copy of each small dirty set
	// (mirror.go); absent: read the set from Pebble.
	mirrors   map[int64]mirror
	mirrorCap int
	// held counts the dirty-set entries kept in memory for every
	// transform together: mirror entries and the marks of watches. It
	// stays within memBudget (ADR 0029): a mirror or a watch that would
	// pass it is dropped, whatever the number of transforms.
	held        int
	memBudget   int
	nextVersion uint64
	recvWritten uint64 // highest received LSN written to any batch
	recvDefer   uint64 // AdvanceReceived value not yet written
	// recvUnsynced is the received position of a RecordMany
	// whose sync was deferred (0: none); syncScheduled says a timer will
	// sync it; syncErr is that timer's failure: the next RecordMany then
	// syncs by itself (and reports the disk's error if it persists).
	syncEvery     time.Duration
	staged        map[string]int64 // staged dirty-set key -> transform (mirror.go)
	stagedXids    []XidEntry
	recvUnsynced  uint64
	syncScheduled bool
	syncErr       error
	lastSync      time.Time
	// written counts the batches applied whose durability the contract
	// promises (commitDeferred's, commitSynced's); synced is the count
	// covered by a finished sync. Flush owes a sync while they differ: a
	// batch applied at a position already written (recvUnsynced then
	// adds nothing), or one whose sync another caller is still waiting
	// for, is in Pebble's WAL buffer, which a killed process loses.
	written, synced uint64

	// xids mirrors the visibility entries (see xids.go).
	xids xidLog

	received atomic.Uint64 // durable received LSN
	// recorded is the newest position such that every key of every
	// transaction at or below it is recorded here, durably or with its
	// sync still deferred: what a Take covers. It runs ahead of received
	// by at most the sync interval (or advanceSyncInterval when idle).
	recorded atomic.Uint64
	// recordedMoved has a signal when recorded moved since it was last
	// read (RecordedMoved).
	recordedMoved chan struct{}
	confirmMu     sync.Mutex // orders SetConfirmedLSN calls
	confirmed     atomic.Uint64
	spillSeq      atomic.Uint64
}

// Open opens the store in dir, creating dir and a new store (with a fresh
// random StoreID) if there is none. Spilled chunks left by a previous
// process are discarded: the server re-streams in-progress transactions
// after a reconnect. The store uses about 100 MB of memory at most: a
// 64 MB block cache (which also accounts for the 16 MB memtables; a smaller
// cache would be eaten by them and every lookup would hit the disk).
func Open(dir string, logger *slog.Logger) (*Store, error) {
	return OpenWith(dir, Options{Logger: logger})
}

// Options tune a Store.
type Options struct {
	// Logger receives the store's and Pebble's messages; nil discards them.
	Logger *slog.Logger
	// SyncInterval, when > 0, lets RecordMany leave its sync to a timer
	// that fires at most an interval after the last sync (at once when
	// that is overdue): keys can be taken before the fsync ends, and keys
	// of mirrored sets applied before it are never written (mirror.go). It
	// bounds how far ReceivedLSN (and so the slot's confirmed position)
	// trails what was recorded, not how soon keys can be taken. 0 syncs
	// every call.
	SyncInterval time.Duration
	// fs is the filesystem Pebble runs on (nil: the disk). Tests give a
	// crashable in-memory one, which loses what was not synced.
	fs vfs.FS
}

// OpenWith is Open with options.
func OpenWith(dir string, o Options) (*Store, error) {
	return open(dir, o, defaultMirrorCap)
}

// open is OpenWith with the mirror bound as a parameter (tests run the
// store with no mirror, a tiny one and the default).
func open(dir string, o Options, mirrorCap int) (*Store, error) {
	return openBudget(dir, o, mirrorCap, defaultMemBudget)
}

// openBudget is open with the store-wide bound on in-memory entries as a
// parameter too.
func openBudget(dir string, o Options, mirrorCap, memBudget int) (*Store, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fs := o.fs
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: create %s: %w", dir, err)
	}
	opts := &pebble.Options{
		FS:                 fs,
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       16 << 20,
		CacheSize:          64 << 20,
		Logger:             pebbleLogger{logger},
	}
	for i := range opts.Levels {
		// Record looks up every key it writes, and most are absent.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open pebble in %s: %w", dir, err)
	}
	s := &Store{db: db, log: logger, pending: make(map[int64]int64), watch: make(map[int64]*watch), nextVersion: 1, cursors: make(map[int64][]byte), low: make(map[int64][]byte),
		mirrors: make(map[int64]mirror), mirrorCap: mirrorCap, memBudget: memBudget, syncEvery: o.SyncInterval,
		staged: make(map[string]int64), recordedMoved: make(chan struct{}, 1)}
	if err := s.load(); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return s, nil
}

func (s *Store) load() error {
	id, ok, err := s.getMeta(metaStoreID)
	if err != nil {
		return err
	}
	if !ok {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return fmt.Errorf("checkpoint: generate store id: %w", err)
		}
		s.storeID = hex.EncodeToString(raw[:])
		s.created = true
		b := s.db.NewBatch()
		defer b.Close()
		_ = b.Set(metaKey(metaFormat), binary.BigEndian.AppendUint32(nil, formatVersion), nil)
		_ = b.Set(metaKey(metaStoreID), []byte(s.storeID), nil)
		if err := b.Commit(pebble.Sync); err != nil {
			return fmt.Errorf("checkpoint: initialize store: %w", err)
		}
		s.log.Info("checkpoint store created", "store_id", s.storeID)
	} else {
		s.storeID = string(id)
		f, _, err := s.getMeta(metaFormat)
		if err != nil {
			return err
		}
		if len(f) != 4 || binary.BigEndian.Uint32(f) != formatVersion {
			return fmt.Errorf("checkpoint: unsupported store format %x (want %d)", f, formatVersion)
		}
	}
	for name, dst := range map[string]*atomic.Uint64{metaReceived: &s.received, metaConfirmed: &s.confirmed} {
		v, ok, err := s.getMeta(name)
		if err != nil {
			return err
		}
		if ok {
			if len(v) != 8 {
				return fmt.Errorf("checkpoint: corrupt %s", name)
			}
			dst.Store(binary.BigEndian.Uint64(v))
		}
	}
	s.recvWritten = s.received.Load()
	s.recorded.Store(s.recvWritten)

	// Rebuild the per-transform counters, the version counter and the
	// mirrors of the sets small enough to have one.
	over := map[int64]bool{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{nsDirty}, UpperBound: []byte{nsDirty + 1}})
	if err != nil {
		return fmt.Errorf("checkpoint: scan dirty sets: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 14 {
			return errors.Join(fmt.Errorf("checkpoint: corrupt dirty key %x", k), it.Close())
		}
		lsn, ver, err := decodeValue(it.Value())
		if err != nil {
			return errors.Join(err, it.Close())
		}
		if ver >= s.nextVersion {
			s.nextVersion = ver + 1
		}
		tr := transformFromBytes(k[1:9])
		if k[9] == tagKey {
			s.pending[tr]++
		}
		if !over[tr] {
			m := s.mirrors[tr]
			if m == nil {
				m = mirror{}
				s.mirrors[tr] = m
			}
			m[string(k)] = mirrorEntry{lsn: lsn, ver: ver, stored: true}
			s.held++
			if len(m) > s.mirrorCap || s.held > s.memBudget {
				s.held -= len(m)
				delete(s.mirrors, tr)
				over[tr] = true
			}
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("checkpoint: scan dirty sets: %w", err)
	}
	if err := s.loadXids(); err != nil {
		return err
	}
	if err := s.db.DeleteRange([]byte{nsSpill}, []byte{nsSpill + 1}, pebble.NoSync); err != nil {
		return fmt.Errorf("checkpoint: clear spills: %w", err)
	}
	s.log.Debug("checkpoint store opened", "store_id", s.storeID, "received_lsn", s.received.Load(),
		"confirmed_lsn", s.confirmed.Load(), "transforms_pending", len(s.pending))
	return nil
}

// Close persists a deferred AdvanceReceived and resolved visibility
// entries, and closes the store. It waits
// for calls in progress; later calls return ErrClosed.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := errors.Join(s.flushDeferred(), s.persistResolved())
	return errors.Join(err, s.db.Close())
}

// enter guards an operation against a concurrent or earlier Close; the
// caller must call s.life.RUnlock when done.
func (s *Store) enter() error {
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// StoreID is the random identity given to the store at creation. The
// catalog remembers it, so a replaced or wiped directory is recognized.
func (s *Store) StoreID() string { return s.storeID }

// Created reports whether this Open created the store (the directory was
// missing or empty), which after a previous run means the store was lost.
func (s *Store) Created() bool { return s.created }

// ReceivedLSN is the newest slot position such that every key of every
// transaction at or below it is durable here. It never goes backwards.
func (s *Store) ReceivedLSN() uint64 { return s.received.Load() }

// RecordedLSN is the newest slot position such that every key of every
// transaction at or below it is recorded here, its sync perhaps still
// deferred: at or after ReceivedLSN. A batch that applied a transform's
// whole dirty set makes the target reflect every change up to it, durable
// or not, so Take's UpTo is this position; what the slot may be told is
// ReceivedLSN. A crash loses at most the keys above ReceivedLSN, which
// the slot sends again.
func (s *Store) RecordedLSN() uint64 { return s.recorded.Load() }

// noteRecorded moves RecordedLSN forward to lsn. Called once the keys at
// or below lsn are readable (applied to Pebble or in a mirror), so that a
// Take that reads the position first sees them.
func (s *Store) noteRecorded(lsn uint64) {
	for {
		cur := s.recorded.Load()
		if lsn <= cur {
			return
		}
		if s.recorded.CompareAndSwap(cur, lsn) {
			select {
			case s.recordedMoved <- struct{}{}:
			default:
			}
			return
		}
	}
}

// RecordedMoved has a value each time RecordedLSN moved since the last
// receive (several moves make one): the runner advances its idle
// transforms on it (ADR 0044). One receiver.
func (s *Store) RecordedMoved() <-chan struct{} { return s.recordedMoved }

// ConfirmedLSN is the last position passed to SetConfirmedLSN.
func (s *Store) ConfirmedLSN() uint64 { return s.confirmed.Load() }

// SetConfirmedLSN durably records the position confirmed to the slot. It
// only moves forward; a smaller value is ignored.
func (s *Store) SetConfirmedLSN(lsn uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	s.confirmMu.Lock()
	defer s.confirmMu.Unlock()
	if lsn <= s.confirmed.Load() {
		return nil
	}
	if err := s.db.Set(metaKey(metaConfirmed), be64(lsn), pebble.Sync); err != nil {
		return fmt.Errorf("checkpoint: set confirmed LSN: %w", err)
	}
	s.confirmed.Store(lsn)
	return nil
}

// AdvanceReceived moves ReceivedLSN forward to lsn when no transaction is
// pending (idle keepalives). To avoid an fsync per keepalive it syncs at
// most about once a second; a value deferred by that throttle is written by
// the next Record, AdvanceReceived past the interval, Flush or Close, and
// ReceivedLSN reports it only once durable.
func (s *Store) AdvanceReceived(lsn uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	s.mu.Lock()
	if lsn <= max(s.recvWritten, s.recvDefer) {
		s.mu.Unlock()
		return nil
	}
	if time.Since(s.lastSync) < advanceSyncInterval {
		s.recvDefer = lsn
		s.noteRecorded(lsn)
		s.mu.Unlock()
		return nil
	}
	b := s.db.NewBatch()
	return s.commitSynced(b, lsn)
}

// Flush makes everything recorded before it durable now: a position
// deferred by AdvanceReceived, what RecordMany staged or left to the
// timer (at a new position or not), and what another caller's sync, still
// in progress, is writing. The trigger drain deletes the rows it moved
// from the capture log once Flush returns.
func (s *Store) Flush() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	return s.flushDeferred()
}

func (s *Store) flushDeferred() error {
	s.mu.Lock()
	if !s.owesSync() {
		s.mu.Unlock()
		return nil
	}
	return s.commitSynced(s.db.NewBatch(), 0)
}

// owesSync says whether something recorded is not durable yet: a
// deferred position or staged entries to write, or an applied batch no
// finished sync covers. Called with s.mu held.
func (s *Store) owesSync() bool {
	return s.recvDefer > s.recvWritten || s.recvUnsynced != 0 || len(s.staged) > 0 || len(s.stagedXids) > 0 ||
		s.synced != s.written
}

// commitSynced adds the received position (max of lsn, any deferred
// advance and what was written before) to b, applies it, releases s.mu,
// waits for the fsync and then publishes the new durable position. It
// must be called with s.mu held and closes b.
//
// Applying under s.mu and waiting for the fsync outside it keeps appliers'
// Done calls from queuing behind the disk.
func (s *Store) commitSynced(b *pebble.Batch, lsn uint64) error {
	// The sync also makes every earlier write durable, deferred ones too,
	// and writes what was staged.
	s.writeStaged(b)
	recv := max(s.recvWritten, s.recvDefer, s.recvUnsynced, lsn)
	s.recvDefer, s.recvUnsynced = 0, 0
	if recv > s.recvWritten {
		_ = b.Set(metaKey(metaReceived), be64(recv), nil)
		s.recvWritten = recv
	}
	if b.Empty() {
		// Pebble commits an empty batch without touching its WAL, so
		// without syncing it: the sync owed is for earlier batches.
		_ = b.LogData(nil, nil)
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		s.mu.Unlock()
		_ = b.Close()
		return fmt.Errorf("checkpoint: write batch: %w", err)
	}
	s.written++
	seq := s.written
	s.lastSync = time.Now()
	s.mu.Unlock()
	err := b.SyncWait()
	_ = b.Close()
	if err != nil {
		return fmt.Errorf("checkpoint: sync batch: %w", err)
	}
	// The WAL is sequential: this sync covers every batch applied before.
	s.mu.Lock()
	s.synced = max(s.synced, seq)
	s.mu.Unlock()
	s.noteRecorded(recv)
	for {
		cur := s.received.Load()
		if recv <= cur || s.received.CompareAndSwap(cur, recv) {
			return nil
		}
	}
}

// deferSync says whether a RecordMany leaves its sync to the timer: a sync
// interval is set (and the timer's last sync did not fail). The timer
// fires at once when the last sync is an interval ago or more, so a lone
// transaction is durable as soon as without the interval, but its keys can
// be taken before the fsync ends. Called with s.mu held.
func (s *Store) deferSync() bool {
	return s.syncEvery > 0 && s.syncErr == nil
}

// commitDeferred commits a RecordMany batch whose sync is deferred: the
// keys of mirrored transforms were staged (mirror.go), the rest is applied
// now without waiting for the disk, and a timer syncs everything, with the
// received position, by the end of the interval. The position is neither
// written nor reported before that sync. Called with s.mu held; releases
// it.
func (s *Store) commitDeferred(b *pebble.Batch, lsn uint64) error {
	var err error
	if !b.Empty() {
		if err = s.db.Apply(b, pebble.NoSync); err == nil {
			s.written++
		}
	}
	if err == nil {
		s.recvUnsynced = max(s.recvUnsynced, lsn)
		s.noteRecorded(lsn)
		if !s.syncScheduled {
			s.syncScheduled = true
			time.AfterFunc(max(0, s.syncEvery-time.Since(s.lastSync)), s.syncDeferred)
		}
	}
	s.mu.Unlock()
	_ = b.Close()
	if err != nil {
		return fmt.Errorf("checkpoint: write batch: %w", err)
	}
	return nil
}

// syncDeferred is the timer that syncs what commitDeferred deferred.
func (s *Store) syncDeferred() {
	if err := s.enter(); err != nil {
		return // closed: Close synced it
	}
	defer s.life.RUnlock()
	s.mu.Lock()
	s.syncScheduled = false
	if !s.owesSync() {
		s.mu.Unlock()
		return
	}
	if err := s.commitSynced(s.db.NewBatch(), 0); err != nil {
		s.log.Error("sync the checkpoint store", "err", err)
		s.mu.Lock()
		s.syncErr = err
		s.mu.Unlock()
	}
}

// PutState durably stores a small named value (for example the relation
// cache). A nil value deletes it.
func (s *Store) PutState(name string, value []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	var err error
	if value == nil {
		err = s.db.Delete(metaKey(metaStatePfx+name), pebble.Sync)
	} else {
		err = s.db.Set(metaKey(metaStatePfx+name), value, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: put state %q: %w", name, err)
	}
	return nil
}

// State returns the value stored by PutState, or nil if there is none.
func (s *Store) State(name string) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	v, _, err := s.getMeta(metaStatePfx + name)
	return v, err
}

func (s *Store) getMeta(name string) ([]byte, bool, error) {
	return s.get(metaKey(name))
}

// get returns a copy of the value stored under key.
func (s *Store) get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint: get %q: %w", key, err)
	}
	out := append([]byte(nil), v...)
	return out, true, closer.Close()
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// pebbleLogger routes Pebble's own messages to slog. Pebble's routine
// messages (WAL recovery, …) are debug level for us.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf must not return (Pebble's contract); a panic lets the process's
// own recovery or crash handling decide.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}

var _ io.Closer = (*Store)(nil)
