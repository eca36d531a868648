package pipeline

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/decode"
)

// partsIntake is an intake over store with table 1 routed to transforms
// 1 and 2 (every row is two dirty keys).
func partsIntake(store *checkpoint.Store) *intake {
	tr := &Host{log: slog.New(slog.NewTextHandler(io.Discard, nil)), obs: NopObserver{}}
	r := &runner{t: tr, obs: tr.obs, store: store, workers: map[int64]*worker{}}
	in := newIntake(r, false)
	in.rels[1] = &decode.Relation{ID: 1, Namespace: "public", Name: "t", KeyColumns: []string{"id"}}
	in.routes[1] = []route{{transform: 1, keyNames: []string{"id"}, table: 1}, {transform: 2, keyNames: []string{"id"}, table: 1}}
	return in
}

// TestIntakeRecordsInParts: a transaction of more rows than a group
// commit takes (a trigger drain's batch) is recorded in parts of
// groupCommitKeys rows, after what was queued before it (LSN order), and
// its position moves only with its last part: after a crash between parts
// the store still reports the position before it, and the transaction
// sent again is recorded exactly once (ADR 0029).
func TestIntakeRecordsInParts(t *testing.T) {
	dir := t.TempDir()
	store, err := checkpoint.OpenWith(dir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { store.Close() }()
	rows := 2*groupCommitKeys + 123
	txn := &decode.Txn{Xid: 7, EndLSN: 100}
	for i := range rows {
		txn.Keys = append(txn.Keys, decode.RowKey{Rel: 1, Values: []string{fmt.Sprint(i)}})
	}
	pending := func(s *checkpoint.Store, want int64) {
		t.Helper()
		for tr := int64(1); tr <= 2; tr++ {
			n, err := s.Pending(tr)
			if err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Fatalf("transform %d: %d keys pending, want %d", tr, n, want)
			}
		}
	}

	// The parts alone, as a crash before the last one leaves them.
	in := partsIntake(store)
	rest, err := in.recordParts(txn)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 123 || rest[0].Values[0] != fmt.Sprint(2*groupCommitKeys) {
		t.Fatalf("recordParts left %d rows, want the last 123", len(rest))
	}
	pending(store, 2*groupCommitKeys)
	if store.ReceivedLSN() != 0 || store.RecordedLSN() != 0 {
		t.Fatalf("after the parts: received %d, recorded %d, want 0 until the last part", store.ReceivedLSN(), store.RecordedLSN())
	}
	if x, _ := store.PendingXids(100, 0); !slices.Equal(x, []checkpoint.XidEntry{{LSN: 100, Xid: 7}}) {
		t.Fatalf("after the parts: visibility entries %v, want (100, 7)", x)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if store, err = checkpoint.OpenWith(dir, checkpoint.Options{}); err != nil {
		t.Fatal(err)
	}
	if store.ReceivedLSN() != 0 {
		t.Fatalf("reopened after the parts: received %d, want 0", store.ReceivedLSN())
	}

	// The transaction again, behind one the group commit still queues.
	in = partsIntake(store)
	in.pending = append(in.pending, checkpoint.Txn{LSN: 90, Xid: 3, Keys: []checkpoint.DirtyKey{{Transform: 1, Table: 1, Key: checkpoint.EncodeKey([]string{"early"})}}})
	in.nkeys = 1
	if err := in.Commit(t.Context(), txn); err != nil {
		t.Fatal(err)
	}
	if got := store.ReceivedLSN(); got < 90 {
		t.Fatalf("the queued transaction at 90 was not recorded before the parts at 100 (received %d)", got)
	}
	if err := in.close(); err != nil {
		t.Fatal(err)
	}
	if store.ReceivedLSN() != 100 {
		t.Fatalf("after the last part: received %d, want 100", store.ReceivedLSN())
	}
	n1, err := store.Pending(1)
	if err != nil {
		t.Fatal(err)
	}
	if n1 != int64(rows)+1 {
		t.Fatalf("transform 1: %d keys pending, want %d (every row once, and the earlier one)", n1, rows+1)
	}
	if n2, _ := store.Pending(2); n2 != int64(rows) {
		t.Fatalf("transform 2: %d keys pending, want %d", n2, rows)
	}
	if x, _ := store.PendingXids(^uint64(0), 0); !slices.Equal(x, []checkpoint.XidEntry{{LSN: 90, Xid: 3}, {LSN: 100, Xid: 7}}) {
		t.Fatalf("visibility entries %v, want (90, 3) and (100, 7)", x)
	}
}
