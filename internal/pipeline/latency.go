package pipeline

// End-to-end latency and apply lag from commit timestamps (ADR 0017 §3).
// Per transform, the intake queues (end position, commit time) of the
// transactions that touched its sources, merged per 10 ms so a burst costs
// one entry; the worker pops the entries its applied position passes and
// reports now − commit time of each, and the heartbeat reports the age of
// the oldest entry left as the apply lag. Nothing here is per key: the
// intake marks a transform touched with one comparison per routed key, and
// takes the queue's lock once per group commit.

import (
	"sync"
	"time"
)

const (
	// lagBucket is how close in commit time transactions merge into one
	// entry: the histogram's resolution, and its cost, one entry per 10 ms.
	lagBucket = 10 * time.Millisecond
	// lagCap bounds a queue (16 KiB): ~10 s of continuous changes at full
	// resolution. A full queue merges new transactions into its newest
	// entry, so the oldest entry, the apply lag, stays exact and only the
	// samples of a long backlog grow coarse.
	lagCap = 1024
)

// lagEntry is one bucket of transactions.
type lagEntry struct {
	// lsn is the end position of the newest transaction merged in; at the
	// commit time (unix ns) of the oldest, so lag and samples err on the
	// side of late by at most a bucket.
	lsn uint64
	at  int64
}

// lagQueue is one transform's queue of transactions not yet applied.
type lagQueue struct {
	// The intake side: written only under intake.mu.
	//
	// seen is the stamp of the transaction that last touched the queue,
	// so one transaction marks it once however many keys it routes here.
	seen uint64
	// open is the bucket being filled (lsn 0: none); listed says it is in
	// the intake's list to publish at the next group commit.
	open   lagEntry
	listed bool

	// The published entries, shared with the worker and the heartbeat.
	mu      sync.Mutex
	ring    [lagCap]lagEntry
	head, n int
}

// note merges a transaction into the open bucket (intake side) and
// reports whether the queue must be added to the intake's list.
func (q *lagQueue) note(lsn uint64, at int64) bool {
	if q.open.lsn != 0 && at-q.open.at < int64(lagBucket) {
		q.open.lsn = max(q.open.lsn, lsn)
	} else {
		if q.listed {
			// The bucket closes before a group commit published it.
			q.publish()
		}
		q.open = lagEntry{lsn: lsn, at: at}
	}
	add := !q.listed
	q.listed = true
	return add
}

// publish makes the open bucket visible to the worker (intake side). The
// intake publishes before it records the transactions' keys, so no worker
// can apply them, and pass their position, before the entry exists.
func (q *lagQueue) publish() {
	if q.open.lsn == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n > 0 {
		tail := &q.ring[(q.head+q.n-1)%lagCap]
		if tail.at == q.open.at || q.n == lagCap {
			// The same bucket published before, or no room: extend it.
			tail.lsn = max(tail.lsn, q.open.lsn)
			return
		}
	}
	q.ring[(q.head+q.n)%lagCap] = q.open
	q.n++
}

// passed pops the entries at or below applied and reports the latency of
// each as of now (unix ns); clocks of server and runner may differ, so a
// negative latency is reported as 0.
func (q *lagQueue) passed(applied uint64, now int64, observe func(time.Duration)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.n > 0 {
		e := q.ring[q.head]
		if e.lsn > applied {
			return
		}
		observe(time.Duration(max(now-e.at, 0)))
		q.head = (q.head + 1) % lagCap
		q.n--
	}
}

// oldest is the age at now (unix ns) of the oldest entry not yet applied;
// 0 when there is none.
func (q *lagQueue) oldest(now int64) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return 0
	}
	return time.Duration(max(now-q.ring[q.head].at, 0))
}
