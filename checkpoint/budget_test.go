package checkpoint

import (
	"fmt"
	"testing"
	"time"
)

// TestMemoryBudget: the entries the store keeps in memory (mirrors and
// the marks watched since a Take) stay within its budget whatever the
// number of transforms and the size of what is recorded while their
// Takes are outstanding (ADR 0029), and a Done after its watch was
// dropped still keeps the keys dirtied again since its Take.
func TestMemoryBudget(t *testing.T) {
	const (
		transforms = 10
		mirrorCap  = 100
		budget     = 300
	)
	s, err := openBudget(t.TempDir(), Options{SyncInterval: time.Millisecond}, mirrorCap, budget)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	lsn := uint64(0)
	record := func(tr int64, from, n int) {
		t.Helper()
		var keys []DirtyKey
		for i := from; i < from+n; i++ {
			keys = append(keys, dk(tr, 1, fmt.Sprint(i)))
		}
		lsn++
		if err := s.RecordMany([]Txn{{LSN: lsn, Xid: 1, Keys: keys}}); err != nil {
			t.Fatal(err)
		}
		if got := s.InMemory(); got > budget {
			t.Fatalf("after recording %d keys for transform %d: %d entries in memory, over the budget of %d", n, tr, got, budget)
		}
	}
	// Small sets first: mirrored until the budget is spent.
	for tr := int64(1); tr <= transforms; tr++ {
		record(tr, 0, 50)
	}
	// Every transform takes a batch, then many more keys arrive for each
	// (the watches would hold all of them), one key of each batch among
	// them again.
	batches := map[int64]Batch{}
	for tr := int64(1); tr <= transforms; tr++ {
		batches[tr] = mustTake(t, s, tr, 20)
	}
	for round := 0; round < 10; round++ {
		for tr := int64(1); tr <= transforms; tr++ {
			record(tr, 1000+round*100, 100)
		}
	}
	redirtied := map[int64]string{}
	for tr, b := range batches {
		k, err := DecodeKey(b.Keys[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		redirtied[tr] = k[0]
		record(tr, mustAtoi(t, k[0]), 1)
	}
	for tr, b := range batches {
		if err := s.Done(tr, b); err != nil {
			t.Fatal(err)
		}
		if got := s.InMemory(); got > budget {
			t.Fatalf("after Done: %d entries in memory, over the budget of %d", got, budget)
		}
		// 50 + 1000 recorded, 20 done, one of them dirtied again.
		if n := mustPending(t, s, tr); n != 50+1000-20+1 {
			t.Fatalf("transform %d: %d keys pending after Done, want %d", tr, n, 50+1000-20+1)
		}
		all := keyNames(t, mustTake(t, s, tr, 0))
		found := false
		for _, k := range all {
			found = found || k == redirtied[tr]
		}
		if !found {
			t.Fatalf("transform %d: key %s, dirtied again after its Take, was removed by Done", tr, redirtied[tr])
		}
	}
}

// TestWatchBoundedUnderHugeCommit: a Take outstanding while a streamed
// transaction of far more keys than the watch may hold commits (a
// bisecting worker while a huge transaction arrives) keeps at most the
// store's budget in memory, and its Done is still exact.
func TestWatchBoundedUnderHugeCommit(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.Record(1, 1, []DirtyKey{dk(7, 1, "first")}, nil); err != nil {
		t.Fatal(err)
	}
	b := mustTake(t, s, 7, 10)
	const n = 3 * watchCap
	var keys []DirtyKey
	for i := 0; i < n; i++ {
		keys = append(keys, dk(7, 1, fmt.Sprint(i)))
		if len(keys) == 10_000 || i == n-1 {
			if err := s.SpillKeys(9, 9, keys); err != nil {
				t.Fatal(err)
			}
			keys = nil
		}
	}
	// The first key again, in the same transaction.
	if err := s.SpillKeys(9, 9, []DirtyKey{dk(7, 1, "first")}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitSpill(9, 100); err != nil {
		t.Fatal(err)
	}
	if got := s.InMemory(); got > testMemBudget(t) {
		t.Fatalf("%d entries in memory after a commit of %d keys with a Take outstanding, over the budget of %d", got, n, testMemBudget(t))
	}
	if err := s.Done(7, b); err != nil {
		t.Fatal(err)
	}
	if got := mustPending(t, s, 7); got != n+1 {
		t.Fatalf("%d keys pending, want %d (the key dirtied again since its Take kept)", got, n+1)
	}
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
