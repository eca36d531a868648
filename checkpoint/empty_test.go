package checkpoint

import "testing"

// TestEmpty: Empty is exact for a transform read from Pebble and for one
// with a mirror, TRUNCATE markers included (which Pending does not
// count), and RecordedMoved signals each move of RecordedLSN.
func TestEmpty(t *testing.T) {
	s := openTest(t, t.TempDir())
	empty := func(tr int64) bool {
		t.Helper()
		ok, err := s.Empty(tr)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	moved := func() bool {
		select {
		case <-s.RecordedMoved():
			return true
		default:
			return false
		}
	}
	if !empty(1) || !empty(2) {
		t.Fatal("a transform never recorded is not empty")
	}
	// Transforms 1 and 2 were never taken: no mirror, their entries are
	// in Pebble.
	if err := s.RecordMany([]Txn{{LSN: 10, Keys: []DirtyKey{dk(1, 7, "a")}, Truncs: []TableRef{{Transform: 2, Table: 7}}}}); err != nil {
		t.Fatal(err)
	}
	if !moved() {
		t.Error("RecordedLSN moved to 10 without a signal")
	}
	if empty(1) {
		t.Error("transform 1 holds a key and is empty")
	}
	if empty(2) || mustPending(t, s, 2) != 0 {
		t.Errorf("transform 2 holds a TRUNCATE marker: empty %v, pending %d (want false, 0)", empty(2), mustPending(t, s, 2))
	}
	for _, tr := range []int64{1, 2} {
		if err := s.Done(tr, mustTake(t, s, tr, 0)); err != nil {
			t.Fatal(err)
		}
		if !empty(tr) {
			t.Errorf("transform %d is not empty after its whole set was done", tr)
		}
	}
	// Taken whole, both now have a mirror: the same answers from it.
	if err := s.RecordMany([]Txn{{LSN: 20, Keys: []DirtyKey{dk(1, 7, "b")}, Truncs: []TableRef{{Transform: 2, Table: 7}}}}); err != nil {
		t.Fatal(err)
	}
	if !moved() || moved() {
		t.Error("one move of RecordedLSN did not give exactly one signal")
	}
	if empty(1) || empty(2) {
		t.Errorf("after new entries: transform 1 empty %v, 2 empty %v (want false, false)", empty(1), empty(2))
	}
	for _, tr := range []int64{1, 2} {
		if err := s.Done(tr, mustTake(t, s, tr, 0)); err != nil {
			t.Fatal(err)
		}
		if !empty(tr) {
			t.Errorf("transform %d is not empty after its whole set was done (mirrored)", tr)
		}
	}
	// A position that does not move does not signal.
	if err := s.RecordMany([]Txn{{LSN: 15, Keys: []DirtyKey{dk(1, 7, "c")}}}); err != nil {
		t.Fatal(err)
	}
	if moved() {
		t.Error("a record below RecordedLSN signalled a move")
	}
}
