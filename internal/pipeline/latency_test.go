package pipeline

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-repl/trellis-repl/checkpoint"
	"github.com/trellis-repl/trellis-repl/decode"
)

// TestLagQueue: transactions within 10 ms merge into one entry timed from
// the earliest; entries are visible only once published; the applied
// position pops what it passes; a full queue keeps its oldest entry.
func TestLagQueue(t *testing.T) {
	ms := int64(time.Millisecond)
	q := new(lagQueue)
	if !q.note(100, 0) || q.note(110, 3*ms) {
		t.Fatal("a queue is listed once until published")
	}
	if q.oldest(50*ms) != 0 {
		t.Fatal("an unpublished bucket is not visible")
	}
	q.publish()
	q.listed = false
	if got := q.oldest(50 * ms); got != 50*time.Millisecond {
		t.Fatalf("oldest = %v, want 50ms (from the bucket's first commit)", got)
	}
	q.note(120, 5*ms) // same bucket, published again: extends it
	q.publish()
	q.listed = false
	q.note(200, 20*ms) // a new bucket
	q.note(300, 40*ms) // closes the last before a publish: published then
	q.publish()
	q.listed = false
	if q.n != 3 || q.ring[0].lsn != 120 || q.ring[1].lsn != 200 || q.ring[2].lsn != 300 {
		t.Fatalf("entries %v (n %d), want 120@0 200@20ms 300@40ms", q.ring[:3], q.n)
	}
	var seen []time.Duration
	q.passed(200, 60*ms, func(d time.Duration) { seen = append(seen, d) })
	if len(seen) != 2 || seen[0] != 60*time.Millisecond || seen[1] != 40*time.Millisecond {
		t.Fatalf("samples %v, want [60ms 40ms]", seen)
	}
	if got := q.oldest(100 * ms); got != 60*time.Millisecond {
		t.Fatalf("oldest = %v, want 60ms", got)
	}
	q.passed(300, 0, func(d time.Duration) {
		if d != 0 {
			t.Fatalf("a commit after now (clock skew) is %v, want 0", d)
		}
	})
	if q.oldest(100*ms) != 0 {
		t.Fatal("caught up: no lag")
	}

	full := new(lagQueue)
	for i := 0; i < lagCap+10; i++ {
		full.note(uint64(i+1), int64(i)*int64(lagBucket))
		full.publish()
		full.listed = false
	}
	if full.n != lagCap || full.ring[full.head].at != 0 || full.ring[(full.head+full.n-1)%lagCap].lsn != lagCap+10 {
		t.Fatalf("a full queue keeps its oldest entry and extends its newest: n %d", full.n)
	}
}

// benchIntake is an intake over a real local store with one route from
// table 1 to transform 1, tracking latency or not.
func benchIntake(b *testing.B, track bool) *intake {
	b.Helper()
	store, err := checkpoint.OpenWith(b.TempDir(), checkpoint.Options{SyncInterval: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := &Host{log: log, obs: NopObserver{}}
	if track {
		tr.obs = &countingObserver{}
	}
	r := &runner{t: tr, obs: tr.obs, store: store, workers: map[int64]*worker{}}
	in := newIntake(r, track)
	in.rels[1] = &decode.Relation{ID: 1, Namespace: "public", Name: "t", KeyColumns: []string{"id"}}
	lag := &route{transform: 1, keyNames: []string{"id"}, table: 1}
	if track {
		q := new(lagQueue)
		in.lags[1] = q
		lag.lag = q
	}
	in.routes[1] = []route{*lag}
	return in
}

// countingObserver counts the latencies it is given: an observer that is
// not NopObserver, so the intake keeps its latency queues (the runtime
// cannot import the root package's Prometheus observer).
type countingObserver struct {
	NopObserver
	n atomic.Int64
}

func (c *countingObserver) LatencyObserved(string, time.Duration) { c.n.Add(1) }

// BenchmarkIntakeCommit is the per-transaction cost of the intake (routing,
// group commit, the store's write) with and without the latency queues.
func BenchmarkIntakeCommit(b *testing.B) {
	for _, keys := range []int{1, 20} {
		for _, track := range []bool{false, true} {
			name := "keys=1"
			if keys > 1 {
				name = "keys=20"
			}
			if track {
				name += "/observed"
			} else {
				name += "/nop"
			}
			b.Run(name, func(b *testing.B) {
				in := benchIntake(b, track)
				txn := &decode.Txn{Keys: make([]decode.RowKey, keys)}
				vals := make([][]string, keys)
				for i := range vals {
					vals[i] = []string{""}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for k := range txn.Keys {
						vals[k][0] = "k"
						txn.Keys[k] = decode.RowKey{Rel: 1, Values: vals[k]}
					}
					txn.EndLSN, txn.Xid, txn.CommitTime = uint64(i+1)*100, uint32(i+1), time.Now()
					if err := in.Commit(b.Context(), txn); err != nil {
						b.Fatal(err)
					}
				}
				if err := in.close(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
