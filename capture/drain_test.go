package capture

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// drainSink records what a drain delivers.
type drainSink struct{ commits [][]decode.RowKey }

func (s *drainSink) Relation(context.Context, *decode.Relation) error { return nil }
func (s *drainSink) Commit(_ context.Context, txn *decode.Txn) error {
	s.commits = append(s.commits, txn.Keys)
	return nil
}
func (s *drainSink) StreamChunk(context.Context, uint32, []decode.RowKey, []uint32) error {
	return nil
}
func (s *drainSink) StreamCommit(context.Context, uint32, uint64, uint64, time.Time) error {
	return nil
}
func (s *drainSink) StreamAbort(context.Context, uint32, uint32) error { return nil }
func (s *drainSink) Idle(context.Context, uint64) error                { return nil }
func (s *drainSink) Sync(context.Context) error                        { return nil }

// drainPosition is a received position that stays where it is.
type drainPosition struct{}

func (drainPosition) ReceivedLSN() uint64          { return 0 }
func (drainPosition) AdvanceReceived(uint64) error { return nil }
func (drainPosition) Flush() error                 { return nil }

// TestDrainBoundedOverRing: a drain moves at most BatchRows rows however a
// transaction's rows are spread over the capture-log ring (what one drain
// holds in memory), every row is moved once, and the partition read first
// turns with each drain, so a partition that keeps filling does not starve
// the others.
func TestDrainBoundedOverRing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	exec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE SCHEMA trellis_drain`)
	exec(`CREATE TABLE src (id int PRIMARY KEY)`)
	var oid uint32
	if err := pool.QueryRow(ctx, `SELECT 'src'::regclass::oid`).Scan(&oid); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	const batch, perPart = 7, 10
	tr := NewTrigger(TriggerConfig{Schema: "trellis_drain", Pool: pool, Conn: conn, Position: drainPosition{}, BatchRows: batch})
	if _, err := tr.Prepare(ctx, Continuity{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Install(ctx, []Table{{Schema: "public", Name: "src", OID: oid, Key: []string{"id"}}}, nil); err != nil {
		t.Fatal(err)
	}
	// Partition p holds ids p*100+1 … p*100+perPart.
	for p := range ringSize {
		exec(fmt.Sprintf(`UPDATE trellis_drain.capture_ring SET current = %d`, p))
		exec(fmt.Sprintf(`INSERT INTO src SELECT %d + g FROM generate_series(1, %d) g`, p*100, perPart))
	}
	sink := &drainSink{}
	if err := tr.DrainAll(ctx, sink, 0); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for i, keys := range sink.commits {
		if len(keys) > batch {
			t.Errorf("drain %d moved %d rows, over BatchRows %d", i, len(keys), batch)
		}
		for _, k := range keys {
			id, err := strconv.Atoi(k.Values[0])
			if err != nil {
				t.Fatal(err)
			}
			seen[id]++
		}
	}
	if len(seen) != ringSize*perPart {
		t.Errorf("moved %d distinct rows, want %d", len(seen), ringSize*perPart)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("row %d moved %d times", id, n)
		}
	}
	// The first drains each start at another partition.
	if len(sink.commits) < ringSize {
		t.Fatalf("%d drains, want at least %d", len(sink.commits), ringSize)
	}
	for i := range ringSize {
		id, _ := strconv.Atoi(sink.commits[i][0].Values[0])
		if got := id / 100; got != i {
			t.Errorf("drain %d read partition %d first, want %d", i, got, i)
		}
	}
}
