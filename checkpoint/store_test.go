package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := openBudget(dir, Options{}, testMirrorCap(t), testMemBudget(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func key(vals ...string) []byte { return EncodeKey(vals) }

func dk(tr int64, table uint32, vals ...string) DirtyKey {
	return DirtyKey{Transform: tr, Table: table, Key: key(vals...)}
}

func mustTake(t testing.TB, s *Store, tr int64, limit int) Batch {
	t.Helper()
	b, err := s.Take(tr, limit)
	if err != nil {
		t.Fatalf("Take(%d): %v", tr, err)
	}
	return b
}

func mustPending(t testing.TB, s *Store, tr int64) int64 {
	t.Helper()
	n, err := s.Pending(tr)
	if err != nil {
		t.Fatalf("Pending(%d): %v", tr, err)
	}
	return n
}

func TestEncodeKey(t *testing.T) {
	tests := [][]string{
		{"1"},
		{"a", "b"},
		{""},
		{"", ""},
		{"héllo wörld", "42", "2024-01-01 00:00:00+00"},
		{string(bytes.Repeat([]byte("x"), 1000)), "y"},
		{"with\x00nul", "\xff\xff"},
	}
	for _, vals := range tests {
		got, err := DecodeKey(EncodeKey(vals))
		if err != nil {
			t.Fatalf("DecodeKey(EncodeKey(%q)): %v", vals, err)
		}
		if !slices.Equal(got, vals) {
			t.Errorf("round trip %q -> %q", vals, got)
		}
	}
	if !bytes.Equal(EncodeKey([]string{"ab"}), EncodeKey([]string{"ab"})) ||
		bytes.Equal(EncodeKey([]string{"a", "b"}), EncodeKey([]string{"ab"})) {
		t.Error("encoding not deterministic or ambiguous")
	}
	for _, bad := range [][]byte{{5, 'a'}, {0x80}, {1}} {
		if _, err := DecodeKey(bad); err == nil {
			t.Errorf("DecodeKey(%x): want error", bad)
		}
	}
}

func TestCreatedAndStoreID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "store")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Created() {
		t.Error("first Open: Created() = false")
	}
	id := s.StoreID()
	if len(id) != 32 {
		t.Errorf("StoreID %q: want 32 hex chars", id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Take after Close: %v, want ErrClosed", err)
	}
	s = openTest(t, dir)
	if s.Created() {
		t.Error("second Open: Created() = true")
	}
	if s.StoreID() != id {
		t.Errorf("StoreID changed: %q -> %q", id, s.StoreID())
	}
	other := openTest(t, t.TempDir())
	if other.StoreID() == id {
		t.Error("two stores share a StoreID")
	}
}

func TestCoalescing(t *testing.T) {
	s := openTest(t, t.TempDir())
	txns := []Txn{
		{LSN: 100, Xid: 10, Keys: []DirtyKey{dk(1, 7, "a"), dk(1, 7, "b")}},
		{LSN: 200, Xid: 11, Keys: []DirtyKey{dk(1, 7, "a"), dk(1, 8, "a"), dk(2, 7, "a")}},
		{LSN: 300, Xid: 12, Keys: []DirtyKey{dk(1, 7, "a"), dk(1, 7, "a")}}, // twice in one txn
	}
	for _, tx := range txns {
		if err := s.Record(tx.LSN, tx.Xid, tx.Keys, tx.Truncs); err != nil {
			t.Fatal(err)
		}
	}
	// Coalescing inside one group commit as well.
	if err := s.RecordMany([]Txn{
		{LSN: 400, Xid: 13, Keys: []DirtyKey{dk(3, 1, "k")}},
		{LSN: 500, Xid: 14, Keys: []DirtyKey{dk(3, 1, "k")}},
	}); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 500 {
		t.Errorf("ReceivedLSN = %d, want 500", got)
	}
	want := map[int64]map[string]uint64{
		1: {"7/a": 300, "7/b": 100, "8/a": 200},
		2: {"7/a": 200},
		3: {"1/k": 500},
		4: {},
	}
	for tr, keys := range want {
		if n := mustPending(t, s, tr); n != int64(len(keys)) {
			t.Errorf("Pending(%d) = %d, want %d", tr, n, len(keys))
		}
		b := mustTake(t, s, tr, 0)
		got := map[string]uint64{}
		for _, e := range b.Keys {
			v, err := DecodeKey(e.Key)
			if err != nil {
				t.Fatal(err)
			}
			got[fmt.Sprintf("%d/%s", e.Table, v[0])] = e.LSN
		}
		if fmt.Sprint(got) != fmt.Sprint(keys) {
			t.Errorf("Take(%d) = %v, want %v", tr, got, keys)
		}
		if !b.All || b.UpTo != 500 {
			t.Errorf("Take(%d): All=%v UpTo=%d, want true 500", tr, b.All, b.UpTo)
		}
	}
}

func TestTakeLimitAndAll(t *testing.T) {
	s := openTest(t, t.TempDir())
	var keys []DirtyKey
	for i := range 10 {
		keys = append(keys, dk(5, 1, fmt.Sprint(i)))
	}
	if err := s.Record(1000, 1, keys, []TableRef{{Transform: 5, Table: 2}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit    int
		wantKeys int
		wantAll  bool
	}{
		{limit: 0, wantKeys: 10, wantAll: true},
		{limit: -1, wantKeys: 10, wantAll: true},
		{limit: 1, wantKeys: 1, wantAll: false},
		{limit: 9, wantKeys: 9, wantAll: false},
		{limit: 10, wantKeys: 10, wantAll: true},
		{limit: 11, wantKeys: 10, wantAll: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("limit=", tc.limit), func(t *testing.T) {
			b := mustTake(t, s, 5, tc.limit)
			if len(b.Keys) != tc.wantKeys || b.All != tc.wantAll {
				t.Errorf("got %d keys All=%v, want %d %v", len(b.Keys), b.All, tc.wantKeys, tc.wantAll)
			}
			if len(b.Truncated) != 1 || b.Truncated[0].Table != 2 || b.Truncated[0].LSN != 1000 {
				t.Errorf("Truncated = %+v, want table 2 at 1000 regardless of limit", b.Truncated)
			}
			if b.UpTo != 1000 || b.MaxLSN() != 1000 {
				t.Errorf("UpTo=%d MaxLSN=%d, want 1000", b.UpTo, b.MaxLSN())
			}
		})
	}
	// Draining in pages empties the set.
	for {
		b := mustTake(t, s, 5, 3)
		if err := s.Done(5, b); err != nil {
			t.Fatal(err)
		}
		if b.All {
			break
		}
	}
	if b := mustTake(t, s, 5, 0); len(b.Keys)+len(b.Truncated) != 0 || !b.All {
		t.Errorf("after draining: %+v", b)
	}
	if n := mustPending(t, s, 5); n != 0 {
		t.Errorf("Pending = %d after draining", n)
	}
}

func TestDoneKeepsRedirtied(t *testing.T) {
	tests := []struct {
		name    string
		redirty func(s *Store) error
		wantLSN uint64 // LSN of the key that must survive Done; 0: none
	}{
		{name: "nothing", redirty: func(*Store) error { return nil }},
		{name: "newer txn", wantLSN: 20, redirty: func(s *Store) error {
			return s.Record(20, 2, []DirtyKey{dk(1, 1, "k")}, nil)
		}},
		{name: "MarkDirty at the same LSN", wantLSN: 10, redirty: func(s *Store) error {
			return s.MarkDirty(1, []DirtyKey{dk(1, 1, "k")})
		}},
		{name: "redelivered older txn", wantLSN: 10, redirty: func(s *Store) error {
			return s.Record(5, 1, []DirtyKey{dk(1, 1, "k")}, nil)
		}},
		{name: "done and re-added", wantLSN: 30, redirty: func(s *Store) error {
			if err := s.Done(1, mustTake(t, s, 1, 0)); err != nil {
				return err
			}
			return s.Record(30, 3, []DirtyKey{dk(1, 1, "k")}, nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, t.TempDir())
			if err := s.Record(10, 1, []DirtyKey{dk(1, 1, "k")}, []TableRef{{1, 9}}); err != nil {
				t.Fatal(err)
			}
			b := mustTake(t, s, 1, 0)
			if err := tc.redirty(s); err != nil {
				t.Fatal(err)
			}
			if err := s.Done(1, b); err != nil {
				t.Fatal(err)
			}
			after := mustTake(t, s, 1, 0)
			if len(after.Truncated) != 0 {
				t.Errorf("truncation marker survived Done: %+v", after.Truncated)
			}
			var want []uint64
			if tc.wantLSN != 0 {
				want = []uint64{tc.wantLSN}
			}
			var got []uint64
			for _, e := range after.Keys {
				got = append(got, e.LSN)
			}
			if !slices.Equal(got, want) {
				t.Errorf("keys left: LSNs %v, want %v", got, want)
			}
			if n := mustPending(t, s, 1); n != int64(len(want)) {
				t.Errorf("Pending = %d, want %d", n, len(want))
			}
			// A second Done of the same batch changes nothing.
			if err := s.Done(1, b); err != nil {
				t.Fatal(err)
			}
			if n := mustPending(t, s, 1); n != int64(len(want)) {
				t.Errorf("Pending after repeated Done = %d, want %d", n, len(want))
			}
		})
	}
}

func TestTruncationMarkerRedirtied(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.Record(10, 1, nil, []TableRef{{1, 9}, {1, 8}}); err != nil {
		t.Fatal(err)
	}
	b := mustTake(t, s, 1, 0)
	if len(b.Truncated) != 2 || len(b.Keys) != 0 {
		t.Fatalf("Take = %+v", b)
	}
	if err := s.Record(20, 2, nil, []TableRef{{1, 9}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Done(1, b); err != nil {
		t.Fatal(err)
	}
	after := mustTake(t, s, 1, 0)
	if len(after.Truncated) != 1 || after.Truncated[0].Table != 9 || after.Truncated[0].LSN != 20 {
		t.Errorf("after Done: %+v, want table 9 at 20", after.Truncated)
	}
}

func TestDropTransform(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.Record(10, 1, []DirtyKey{dk(1, 1, "a"), dk(2, 1, "a"), dk(-1, 1, "a")}, []TableRef{{1, 3}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DropTransform(1); err != nil {
		t.Fatal(err)
	}
	if b := mustTake(t, s, 1, 0); len(b.Keys)+len(b.Truncated) != 0 {
		t.Errorf("dropped transform still has %+v", b)
	}
	for _, tr := range []int64{2, -1} {
		if n := mustPending(t, s, tr); n != 1 {
			t.Errorf("Pending(%d) = %d, want 1", tr, n)
		}
	}
	if n := mustPending(t, s, 1); n != 0 {
		t.Errorf("Pending(1) = %d after drop", n)
	}
}

func TestXids(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, tx := range []Txn{
		{LSN: 10, Xid: 100, Keys: []DirtyKey{dk(1, 1, "a")}},
		{LSN: 20, Xid: 0, Keys: []DirtyKey{dk(1, 1, "b")}}, // trigger capture: no check
		{LSN: 30, Xid: 102}, // nothing dirty: no check
		{LSN: 40, Xid: 103, Truncs: []TableRef{{1, 1}}},
		{LSN: 50, Xid: 104, Keys: []DirtyKey{dk(2, 1, "a")}},
	} {
		if err := s.Record(tx.LSN, tx.Xid, tx.Keys, tx.Truncs); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		resolve uint64
		want    []XidEntry
	}{
		{resolve: 0, want: []XidEntry{{10, 100}, {40, 103}, {50, 104}}},
		{resolve: 39, want: []XidEntry{{40, 103}, {50, 104}}},
		{resolve: 40, want: []XidEntry{{50, 104}}},
		{resolve: ^uint64(0), want: nil},
	}
	for _, st := range steps {
		if err := s.ResolveXids(st.resolve); err != nil {
			t.Fatal(err)
		}
		got, err := s.PendingXids(^uint64(0), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("after ResolveXids(%d): %v, want %v", st.resolve, got, st.want)
		}
	}
}

func TestAdvanceReceived(t *testing.T) {
	s := openTest(t, t.TempDir())
	// The first advance syncs at once (no sync yet in this process).
	if err := s.AdvanceReceived(100); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 100 {
		t.Fatalf("ReceivedLSN = %d, want 100", got)
	}
	// Within the throttle interval: deferred, not reported until durable.
	if err := s.AdvanceReceived(200); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 100 {
		t.Errorf("deferred advance reported: %d", got)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 200 {
		t.Errorf("after Flush: %d, want 200", got)
	}
	// Never backwards, through any path.
	if err := s.AdvanceReceived(150); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(120, 1, []DirtyKey{dk(1, 1, "a")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 200 {
		t.Errorf("moved backwards to %d", got)
	}
	// A deferred advance rides along with the next Record.
	if err := s.AdvanceReceived(300); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(250, 1, []DirtyKey{dk(1, 1, "b")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 300 {
		t.Errorf("after Record: %d, want 300", got)
	}
	// And after the interval, AdvanceReceived syncs by itself.
	s.mu.Lock()
	s.lastSync = time.Now().Add(-2 * advanceSyncInterval)
	s.mu.Unlock()
	if err := s.AdvanceReceived(400); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 400 {
		t.Errorf("after interval: %d, want 400", got)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := s.StoreID()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Record(10, 1, []DirtyKey{dk(1, 1, "a"), dk(1, 1, "b"), dk(2, 3, "x", "y")}, []TableRef{{1, 4}}))
	must(s.Record(20, 2, []DirtyKey{dk(1, 1, "a")}, nil))
	must(s.SetConfirmedLSN(15))
	must(s.SetConfirmedLSN(5)) // ignored: backwards
	must(s.PutState("relations", []byte("cache")))
	must(s.SpillKeys(77, 77, []DirtyKey{dk(1, 1, "spilled")}))
	must(s.AdvanceReceived(25)) // deferred by the throttle, persisted by Close
	before1 := mustTake(t, s, 1, 0)
	before2 := mustTake(t, s, 2, 0)
	must(s.Close())

	s = openTest(t, dir)
	if s.Created() || s.StoreID() != id {
		t.Errorf("reopened: Created=%v StoreID=%q, want false %q", s.Created(), s.StoreID(), id)
	}
	if s.ReceivedLSN() != 25 || s.ConfirmedLSN() != 15 {
		t.Errorf("LSNs received=%d confirmed=%d, want 25 15", s.ReceivedLSN(), s.ConfirmedLSN())
	}
	if v, err := s.State("relations"); err != nil || string(v) != "cache" {
		t.Errorf("State = %q, %v", v, err)
	}
	if v, err := s.State("missing"); err != nil || v != nil {
		t.Errorf("State(missing) = %q, %v", v, err)
	}
	for tr, before := range map[int64]Batch{1: before1, 2: before2} {
		after := mustTake(t, s, tr, 0)
		after.UpTo, before.UpTo = 0, 0
		after.watch, before.watch = 0, 0 // per process
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("transform %d: %+v, want %+v", tr, after, before)
		}
		if n := mustPending(t, s, tr); n != int64(len(before.Keys)) {
			t.Errorf("Pending(%d) = %d after reopen, want %d", tr, n, len(before.Keys))
		}
	}
	xids, err := s.PendingXids(^uint64(0), 0)
	must(err)
	if !slices.Equal(xids, []XidEntry{{10, 1}, {20, 2}}) {
		t.Errorf("PendingXids = %v", xids)
	}
	// Spills do not survive a restart (the server re-streams).
	must(s.CommitSpill(77, 30))
	if n := mustPending(t, s, 1); n != 2 {
		t.Errorf("stale spill resurrected: Pending(1) = %d", n)
	}
	// Versions keep increasing across restarts: a write after reopen is
	// distinguishable from the entry a pre-restart Take saw.
	must(s.Record(40, 3, []DirtyKey{dk(1, 1, "b")}, nil))
	must(s.Done(1, before1))
	if n := mustPending(t, s, 1); n != 1 {
		t.Errorf("Pending(1) = %d, want 1 (re-dirtied b)", n)
	}
}

func TestSpill(t *testing.T) {
	const xid, sub1, sub2, other = 500, 501, 502, 600
	setup := func(t *testing.T) *Store {
		s := openTest(t, t.TempDir())
		for _, sp := range []struct {
			xid, sub uint32
			key      string
		}{{xid, xid, "top"}, {xid, sub1, "s1"}, {xid, sub2, "s2"}, {other, other, "o"}} {
			if err := s.SpillKeys(sp.xid, sp.sub, []DirtyKey{dk(1, 1, sp.key)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SpillTruncate(xid, sub2, []TableRef{{1, 2}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name      string
		abort     []uint32 // subxids of xid to abort before commit
		wantKeys  []string
		wantTrunc int
		wantXid   bool
	}{
		{name: "commit all", wantKeys: []string{"s1", "s2", "top"}, wantTrunc: 1, wantXid: true},
		{name: "abort one subxact", abort: []uint32{sub2}, wantKeys: []string{"s1", "top"}, wantXid: true},
		{name: "abort two subxacts", abort: []uint32{sub1, sub2}, wantKeys: []string{"top"}, wantXid: true},
		{name: "abort whole xid", abort: []uint32{xid}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := setup(t)
			for _, sub := range tc.abort {
				if err := s.AbortSpill(xid, sub); err != nil {
					t.Fatal(err)
				}
			}
			if got := mustTake(t, s, 1, 0); len(got.Keys) != 0 {
				t.Fatalf("spilled keys visible before commit: %+v", got)
			}
			if err := s.CommitSpill(xid, 1000); err != nil {
				t.Fatal(err)
			}
			if s.ReceivedLSN() != 1000 {
				t.Errorf("ReceivedLSN = %d, want 1000", s.ReceivedLSN())
			}
			b := mustTake(t, s, 1, 0)
			var got []string
			for _, e := range b.Keys {
				v, _ := DecodeKey(e.Key)
				got = append(got, v[0])
				if e.LSN != 1000 {
					t.Errorf("key %q at LSN %d, want 1000", v[0], e.LSN)
				}
			}
			if !slices.Equal(got, tc.wantKeys) || len(b.Truncated) != tc.wantTrunc {
				t.Errorf("keys %v truncs %d, want %v %d", got, len(b.Truncated), tc.wantKeys, tc.wantTrunc)
			}
			xids, err := s.PendingXids(^uint64(0), 0)
			if err != nil {
				t.Fatal(err)
			}
			if (len(xids) == 1 && xids[0] == XidEntry{1000, xid}) != tc.wantXid || len(xids) > 1 {
				t.Errorf("PendingXids = %v, want entry: %v", xids, tc.wantXid)
			}
			// The other transaction is untouched; the committed one is gone.
			if err := s.CommitSpill(xid, 1100); err != nil {
				t.Fatal(err)
			}
			if n := mustPending(t, s, 1); n != int64(len(tc.wantKeys)) {
				t.Errorf("committing twice added keys: Pending = %d", n)
			}
			if err := s.CommitSpill(other, 1200); err != nil {
				t.Fatal(err)
			}
			if n := mustPending(t, s, 1); n != int64(len(tc.wantKeys))+1 {
				t.Errorf("other xid lost: Pending = %d", n)
			}
		})
	}
	t.Run("clear", func(t *testing.T) {
		s := setup(t)
		if err := s.ClearSpills(); err != nil {
			t.Fatal(err)
		}
		for _, x := range []uint32{xid, other} {
			if err := s.CommitSpill(x, 2000); err != nil {
				t.Fatal(err)
			}
		}
		if n := mustPending(t, s, 1); n != 0 {
			t.Errorf("Pending = %d after ClearSpills", n)
		}
	})
}

// keyNames are the first values of a batch's one-column keys, in order.
func keyNames(t *testing.T, b Batch) []string {
	t.Helper()
	var out []string
	for _, e := range b.Keys {
		k, err := DecodeKey(e.Key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k[0])
	}
	return out
}

// TestTakeGoesRound: paged Takes continue after the previous page and wrap
// at the end, so a key dirtied again behind the cursor is still taken, and
// All is only reported by a page that saw the whole set.
func TestTakeGoesRound(t *testing.T) {
	s := openTest(t, t.TempDir())
	var keys []DirtyKey
	for i := range 10 {
		keys = append(keys, dk(1, 1, fmt.Sprintf("k%02d", i)))
	}
	if err := s.Record(100, 1, keys, nil); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		redirty string // recorded before the Take
		want    []string
		all     bool
	}{
		{want: []string{"k00", "k01", "k02", "k03"}},
		{redirty: "k01", want: []string{"k04", "k05", "k06", "k07"}},
		{want: []string{"k08", "k09", "k01"}, all: true},
		{},
	}
	lsn := uint64(100)
	for i, st := range steps {
		if st.redirty != "" {
			lsn++
			if err := s.Record(lsn, 2, []DirtyKey{dk(1, 1, st.redirty)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		b := mustTake(t, s, 1, 4)
		if got := keyNames(t, b); !slices.Equal(got, st.want) || b.All != (st.all || len(st.want) == 0) {
			t.Fatalf("take %d: %v All=%v, want %v All=%v", i, got, b.All, st.want, st.all)
		}
		if err := s.Done(1, b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResolvedXidsSurviveClose: resolved entries are persisted lazily, but
// at the latest by Close.
func TestResolvedXidsSurviveClose(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for i := uint64(1); i <= 5; i++ {
		if err := s.Record(i*10, uint32(i), []DirtyKey{dk(1, 1, fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, upTo := range []uint64{10, 30} { // the second is not persisted at once
		if err := s.ResolveXids(upTo); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.PendingXids(40, 0); !slices.Equal(got, []XidEntry{{40, 4}}) {
		t.Fatalf("PendingXids(40) = %v", got)
	}
	if got, _ := s.PendingXids(^uint64(0), 1); !slices.Equal(got, []XidEntry{{40, 4}}) {
		t.Fatalf("PendingXids(limit 1) = %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir)
	if got, _ := s2.PendingXids(^uint64(0), 0); !slices.Equal(got, []XidEntry{{40, 4}, {50, 5}}) {
		t.Fatalf("after reopen: %v", got)
	}
}

// TestTakeFromLowWaterMark: after a whole-set Take and its Done, the next
// Take starts at the smallest key marked since (not at the front, where the
// done keys' tombstones are), and still finds every dirty key: those marked
// while a batch was out, below everything taken before, or re-marked.
func TestTakeFromLowWaterMark(t *testing.T) {
	steps := []struct {
		before, during []string // recorded before the Take; between Take and Done
		want           []string
		all            bool
	}{
		{before: []string{"k10", "k11", "k12", "k13"}, during: []string{"k05"}, want: []string{"k10", "k11", "k12", "k13"}, all: true},
		{want: []string{"k05"}, all: true},
		{all: true},
		{before: []string{"k20", "k01"}, want: []string{"k01", "k20"}, all: true},
		{before: []string{"k30", "k31", "k32", "k33", "k34"}, during: []string{"k31", "k00"}, want: []string{"k30", "k31", "k32", "k33"}},
		{want: []string{"k34", "k00", "k31"}, all: true},
		{before: []string{"k02"}, during: []string{"k02"}, want: []string{"k02"}, all: true},
		{want: []string{"k02"}, all: true},
		{all: true},
	}
	s := openTest(t, t.TempDir())
	lsn := uint64(100)
	record := func(names []string) {
		t.Helper()
		if len(names) == 0 {
			return
		}
		var keys []DirtyKey
		for _, n := range names {
			keys = append(keys, dk(1, 1, n))
		}
		lsn++
		if err := s.Record(lsn, uint32(lsn), keys, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range steps {
		record(st.before)
		b := mustTake(t, s, 1, 4)
		if got := keyNames(t, b); !slices.Equal(got, st.want) || b.All != st.all {
			t.Fatalf("take %d: %v All=%v, want %v All=%v", i, got, b.All, st.want, st.all)
		}
		record(st.during)
		if err := s.Done(1, b); err != nil {
			t.Fatal(err)
		}
	}
	if n := mustPending(t, s, 1); n != 0 {
		t.Errorf("Pending = %d after draining", n)
	}
}

// TestDeferredSync: with a sync interval, a Record soon after a sync is
// applied at once (its key can be taken) but ReceivedLSN reports it only
// once the timer has synced it; Close syncs what is still deferred.
func TestDeferredSync(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenWith(dir, Options{SyncInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(10, 1, []DirtyKey{dk(1, 1, "a")}, nil); err != nil {
		t.Fatal(err)
	}
	awaitReceived(t, s, 10) // after a quiet period the timer syncs at once
	if err := s.Record(20, 2, []DirtyKey{dk(1, 1, "b")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 10 {
		t.Fatalf("record within the interval: ReceivedLSN %d, want 10 until synced", got)
	}
	b := mustTake(t, s, 1, 0)
	if got := keyNames(t, b); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("take before the sync: %v, want both keys", got)
	}
	// The batch covers what was recorded, synced or not: applying it makes
	// the target reflect position 20 (RecordedLSN), while the slot may
	// only be told 10 (ReceivedLSN).
	if b.UpTo != 20 || s.RecordedLSN() != 20 {
		t.Fatalf("take before the sync: UpTo %d, RecordedLSN %d, want 20", b.UpTo, s.RecordedLSN())
	}
	awaitReceived(t, s, 20)
	// An idle position throttled by advanceSyncInterval is recorded at
	// once (no keys wait on it) but durable only later.
	if err := s.AdvanceReceived(25); err != nil {
		t.Fatal(err)
	}
	if s.RecordedLSN() != 25 || s.ReceivedLSN() != 20 {
		t.Fatalf("throttled idle advance: RecordedLSN %d, ReceivedLSN %d, want 25 and 20", s.RecordedLSN(), s.ReceivedLSN())
	}
	if err := s.Record(30, 3, []DirtyKey{dk(1, 1, "c")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir)
	if got := s2.ReceivedLSN(); got != 30 {
		t.Fatalf("after Close and reopen: ReceivedLSN %d, want 30", got)
	}
}

// awaitReceived waits until the store reports lsn as received.
func awaitReceived(t *testing.T, s *Store, lsn uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.ReceivedLSN() != lsn {
		if time.Now().After(deadline) {
			t.Fatalf("ReceivedLSN %d long after the interval, want %d", s.ReceivedLSN(), lsn)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStagedKeys: with a sync interval, keys recorded soon after a sync
// are staged in memory; a key applied (Done) before the sync is never
// written, one still dirty at the sync is, with its position, and Close
// writes what is still staged. Reopened, the store holds exactly the keys
// that were not done.
func TestStagedKeys(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenWith(dir, Options{SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// A first full Take gives the transform its mirror; the first Record
	// after the quiet period is synced at once, by the timer.
	if err := s.Done(1, mustTake(t, s, 1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(10, 1, []DirtyKey{dk(1, 1, "a")}, nil); err != nil {
		t.Fatal(err)
	}
	awaitReceived(t, s, 10)
	if err := s.Record(20, 2, []DirtyKey{dk(1, 1, "b"), dk(1, 1, "c")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.ReceivedLSN(); got != 10 {
		t.Fatalf("ReceivedLSN %d before the sync, want 10", got)
	}
	if _, ok, _ := s.get(dirtyKey(1, 1, key("b"))); ok {
		t.Fatal("a staged key is in Pebble before the sync")
	}
	b := mustTake(t, s, 1, 2) // a, b
	if got := keyNames(t, b); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("take: %v", got)
	}
	if err := s.Done(1, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir)
	if got := s2.ReceivedLSN(); got != 20 {
		t.Fatalf("reopened: ReceivedLSN %d, want 20", got)
	}
	if got := keyNames(t, mustTake(t, s2, 1, 0)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("reopened: dirty keys %v, want [c]", got)
	}
	if n := mustPending(t, s2, 1); n != 1 {
		t.Fatalf("reopened: Pending %d, want 1", n)
	}
	if got, _ := s2.PendingXids(^uint64(0), 0); len(got) != 2 {
		t.Fatalf("reopened: visibility entries %v, want both", got)
	}
}

// TestRecordPart: a transaction recorded in parts (RecordPart) then
// finished by RecordMany. The parts make their keys dirty, takeable and
// visibility-checked at once, but neither the received nor the recorded
// position moves before the last part, not even across a close (a crash
// after some parts: the server sends the transaction again). Replayed
// whole, its keys count once; finished, the position is its LSN.
func TestRecordPart(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	keys := func(tr int64, from, to int) []DirtyKey {
		var out []DirtyKey
		for i := from; i < to; i++ {
			out = append(out, dk(tr, 1, fmt.Sprint(i)))
		}
		return out
	}
	must(s.Record(10, 1, []DirtyKey{dk(1, 1, "0")}, nil))
	parts := func(s *Store) {
		t.Helper()
		must(s.RecordPart(100, 7, append(keys(1, 0, 50), keys(2, 0, 50)...), nil))
		must(s.RecordPart(100, 7, append(keys(1, 50, 100), keys(2, 50, 100)...), []TableRef{{Transform: 2, Table: 1}}))
		if s.ReceivedLSN() != 10 || s.RecordedLSN() != 10 {
			t.Fatalf("after the parts: received %d, recorded %d, want 10 until the last part", s.ReceivedLSN(), s.RecordedLSN())
		}
		if n1, n2 := mustPending(t, s, 1), mustPending(t, s, 2); n1 != 100 || n2 != 100 {
			t.Fatalf("after the parts: %d and %d keys pending, want 100 each", n1, n2)
		}
		if x, _ := s.PendingXids(100, 0); !slices.Contains(x, XidEntry{LSN: 100, Xid: 7}) {
			t.Fatalf("after the parts: visibility entries %v, want (100, 7)", x)
		}
	}
	parts(s)
	b := mustTake(t, s, 2, 0)
	if len(b.Keys) != 100 || len(b.Truncated) != 1 || b.UpTo != 10 || b.MaxLSN() != 100 {
		t.Fatalf("take after the parts: %d keys, %d markers, up to %d, newest %d", len(b.Keys), len(b.Truncated), b.UpTo, b.MaxLSN())
	}
	// A crash after the parts: the position did not move.
	must(s.Close())
	s = openTest(t, dir)
	if s.ReceivedLSN() != 10 {
		t.Fatalf("reopened after the parts: received %d, want 10", s.ReceivedLSN())
	}
	// The server sends the transaction again: parts, then the last one.
	parts(s)
	must(s.RecordMany([]Txn{{LSN: 100, Xid: 7, Keys: append(keys(1, 100, 120), dk(2, 1, "7"))}}))
	if s.ReceivedLSN() != 100 || s.RecordedLSN() != 100 {
		t.Fatalf("after the last part: received %d, recorded %d, want 100", s.ReceivedLSN(), s.RecordedLSN())
	}
	if n1, n2 := mustPending(t, s, 1), mustPending(t, s, 2); n1 != 120 || n2 != 100 {
		t.Fatalf("after the last part: %d and %d keys pending, want 120 and 100", n1, n2)
	}
	if x, _ := s.PendingXids(^uint64(0), 0); !slices.Equal(x, []XidEntry{{10, 1}, {100, 7}}) {
		t.Fatalf("visibility entries %v, want (10, 1) and (100, 7) once", x)
	}
	b = mustTake(t, s, 1, 0)
	if b.UpTo != 100 || !b.All || len(b.Keys) != 120 {
		t.Fatalf("take after the last part: %d keys, up to %d, all %v", len(b.Keys), b.UpTo, b.All)
	}
	must(s.Done(1, b))
	if n := mustPending(t, s, 1); n != 0 {
		t.Fatalf("%d keys pending after Done", n)
	}
}
