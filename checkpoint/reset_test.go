package checkpoint

import (
	"testing"
)

// TestReset discards keys, markers, visibility entries, positions and
// named state, gives the store a new id, keeps it usable, and persists the
// reset: a reopen finds the new id and nothing else.
func TestReset(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	old := s.StoreID()
	must(s.Record(10, 1, []DirtyKey{dk(1, 1, "a"), dk(2, 3, "x")}, []TableRef{{1, 4}}))
	must(s.Record(900, 2, []DirtyKey{dk(1, 1, "b")}, nil))
	must(s.SetConfirmedLSN(800))
	must(s.PutState("server", []byte(`{"timeline":1}`)))
	must(s.SpillKeys(7, 7, []DirtyKey{dk(1, 1, "spilled")}))
	must(s.Flush())
	taken := mustTake(t, s, 1, 0) // a Take outstanding is forgotten too

	must(s.Reset())
	check := func(when string, s *Store) {
		t.Helper()
		if !s.Created() || s.StoreID() == old || s.StoreID() == "" {
			t.Errorf("%s: Created=%v StoreID=%q (old %q), want a new store", when, s.Created(), s.StoreID(), old)
		}
		if s.ReceivedLSN() != 0 || s.RecordedLSN() != 0 || s.ConfirmedLSN() != 0 {
			t.Errorf("%s: positions received=%d recorded=%d confirmed=%d, want 0", when, s.ReceivedLSN(), s.RecordedLSN(), s.ConfirmedLSN())
		}
		for _, tr := range []int64{1, 2} {
			if n := mustPending(t, s, tr); n != 0 {
				t.Errorf("%s: Pending(%d) = %d, want 0", when, tr, n)
			}
			if b := mustTake(t, s, tr, 0); len(b.Keys) != 0 || len(b.Truncated) != 0 || !b.All {
				t.Errorf("%s: Take(%d) = %+v, want nothing", when, tr, b)
			}
		}
		if x, err := s.PendingXids(^uint64(0), 0); err != nil || len(x) != 0 {
			t.Errorf("%s: PendingXids = %v, %v, want none", when, x, err)
		}
		if v, err := s.State("server"); err != nil || v != nil {
			t.Errorf("%s: State(server) = %q, %v, want none", when, v, err)
		}
	}
	check("after Reset", s)
	id := s.StoreID()
	must(s.Done(1, taken)) // a batch taken before the reset is harmless
	must(s.CommitSpill(7, 20))
	if n := mustPending(t, s, 1); n != 0 {
		t.Errorf("a spill from before the reset came back: Pending(1) = %d", n)
	}
	// Usable afterwards, from positions below the discarded ones.
	must(s.Record(50, 3, []DirtyKey{dk(1, 1, "c")}, nil))
	if s.ReceivedLSN() != 50 {
		t.Errorf("ReceivedLSN after a record at 50 = %d", s.ReceivedLSN())
	}
	if b := mustTake(t, s, 1, 0); len(b.Keys) != 1 || b.UpTo != 50 {
		t.Errorf("Take after the reset = %+v, want one key up to 50", b)
	}
	must(s.Close())

	s = openTest(t, dir)
	if s.Created() || s.StoreID() != id {
		t.Errorf("reopened: Created=%v StoreID=%q, want false %q", s.Created(), s.StoreID(), id)
	}
	if s.ReceivedLSN() != 50 || mustPending(t, s, 1) != 1 || mustPending(t, s, 2) != 0 {
		t.Errorf("reopened: received %d, pending %d/%d, want 50, 1/0", s.ReceivedLSN(), mustPending(t, s, 1), mustPending(t, s, 2))
	}
}
