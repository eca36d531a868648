package checkpoint

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// crashDir is where the crash tests keep their store, on an in-memory
// filesystem.
const crashDir = "/store"

// openCrashable opens a store with a deferred sync on fs.
func openCrashable(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := open(crashDir, Options{SyncInterval: time.Hour, fs: fs}, defaultMirrorCap)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// crash is what a crash would leave of mem: everything not synced lost.
func crash(mem *vfs.MemFS) *vfs.MemFS { return mem.CrashClone(vfs.CrashCloneCfg{}) }

// keysIn opens the store left on fs and returns the keys of transform tr.
func keysIn(t *testing.T, fs vfs.FS, tr int64) []string {
	t.Helper()
	c, err := open(crashDir, Options{fs: fs}, defaultMirrorCap)
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	defer c.Close()
	return keyNames(t, mustTake(t, c, tr, 0))
}

// startSynced gives s a synced position 10 (the first record after a quiet
// period is synced by the timer at once), so that the next record's sync
// is deferred by the interval.
func startSynced(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Record(10, 0, []DirtyKey{dk(1, 1, "a")}, nil); err != nil {
		t.Fatal(err)
	}
	awaitReceived(t, s, 10)
}

// TestFlushSyncsAtAnUnchangedPosition: keys recorded at the position
// already written (a trigger drain capped at BatchRows, or the rows a ring
// recycle moves: both record at the last drained position) of a transform
// with no mirror are applied without a sync; Flush must sync them though
// the position does not move — the drain deletes their capture-log rows
// once it returns. A crash after Flush keeps them.
func TestFlushSyncsAtAnUnchangedPosition(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s := openCrashable(t, mem)
	defer s.Close()
	startSynced(t, s)
	// Transform 2 was never taken: it has no mirror, so its keys go to
	// Pebble at once, unsynced, rather than being staged.
	if err := s.RecordMany([]Txn{{LSN: 10, Keys: []DirtyKey{dk(2, 1, "b")}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := keysIn(t, crash(mem), 2); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a crash after Flush lost a key recorded before it: transform 2 holds %v, want [b]", got)
	}
}

// TestFlushWaitsForASyncInProgress: when another caller's sync (here the
// timer's) took what was deferred and waits for the disk, Flush must not
// return before that data is durable. The disk's WAL sync is held until
// Flush returns (or a second has passed): a Flush that returned while it
// was held left the key to a sync that a crash then would not finish.
func TestFlushWaitsForASyncInProgress(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		isSync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
		if isSync && strings.HasSuffix(op.Path, ".log") && hold.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}))
	s := openCrashable(t, fs)
	defer s.Close()
	defer once.Do(func() { close(release) })
	startSynced(t, s)
	if err := s.Record(20, 0, []DirtyKey{dk(2, 1, "b")}, nil); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	timer := make(chan struct{})
	go func() {
		defer close(timer)
		s.syncDeferred() // what the timer runs, now
	}()
	<-held // the timer's sync took what was deferred and waits for the disk
	type result struct {
		err  error
		left *vfs.MemFS // what a crash at Flush's return leaves
	}
	flushed := make(chan result, 1)
	go func() {
		err := s.Flush()
		flushed <- result{err, crash(mem)}
	}()
	var r result
	select {
	case r = <-flushed:
	case <-time.After(time.Second):
		// Flush waits for the disk, as it must: let the disk go on.
		once.Do(func() { close(release) })
		r = <-flushed
	}
	once.Do(func() { close(release) })
	<-timer
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := keysIn(t, r.left, 2); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a crash at Flush's return lost a key recorded before it: transform 2 holds %v, want [b]", got)
	}
}
