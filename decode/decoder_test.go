package decode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// recorder is a Sink that keeps everything it is told.
type recorder struct {
	rels    map[uint32]*Relation
	events  []string // readable trace: relations by name, keys by value
	txns    []*Txn
	chunks  [][]RowKey
	commits int
	// stream is every StreamChunk and StreamCommit in order.
	stream []streamEvent
	aborts [][2]uint32
	idle   []uint64
}

func newRecorder() *recorder { return &recorder{rels: map[uint32]*Relation{}} }

func (r *recorder) Relation(_ context.Context, rel *Relation) error {
	r.rels[rel.ID] = rel
	r.events = append(r.events, fmt.Sprintf("relation %s.%s %v", rel.Namespace, rel.Name, rel.KeyColumns))
	return nil
}

func (r *recorder) Commit(_ context.Context, txn *Txn) error {
	r.txns = append(r.txns, txn)
	r.events = append(r.events, "commit "+r.keys(txn.Keys, txn.Truncated))
	return nil
}

// streamEvent is one StreamChunk (keys, truncated) or StreamCommit
// (commit set, with its positions) the recorder saw.
type streamEvent struct {
	xid               uint32
	keys              int
	truncated         []uint32
	commit            bool
	commitLSN, endLSN uint64
}

func (r *recorder) StreamChunk(_ context.Context, xid uint32, keys []RowKey, truncated []uint32) error {
	r.chunks = append(r.chunks, keys)
	r.stream = append(r.stream, streamEvent{xid: xid, keys: len(keys), truncated: truncated})
	return nil
}

func (r *recorder) StreamCommit(_ context.Context, xid uint32, commitLSN, endLSN uint64, _ time.Time) error {
	r.commits++
	r.stream = append(r.stream, streamEvent{xid: xid, commit: true, commitLSN: commitLSN, endLSN: endLSN})
	return nil
}

func (r *recorder) StreamAbort(_ context.Context, xid, subxid uint32) error {
	r.aborts = append(r.aborts, [2]uint32{xid, subxid})
	return nil
}

func (r *recorder) Idle(_ context.Context, walEnd uint64) error {
	r.idle = append(r.idle, walEnd)
	return nil
}

func (r *recorder) keys(keys []RowKey, truncated []uint32) string {
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s(%s)", r.rels[k.Rel].Name, strings.Join(k.Values, ",")))
	}
	for _, id := range truncated {
		parts = append(parts, "truncate "+r.rels[id].Name)
	}
	return strings.Join(parts, " ")
}

type walMsg struct {
	lsn  uint64
	data []byte
}

// capture runs setup (tables and the publication p), creates slot s, runs
// writes (one transaction each), and returns the raw pgoutput messages the slot holds for them.
func capture(t *testing.T, setup string, writes []string, streaming bool) []walMsg {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, setup); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('s', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	// Each string is one simple-protocol query, so one transaction.
	for _, w := range writes {
		if _, err := conn.Exec(ctx, w); err != nil {
			t.Fatalf("writes: %v", err)
		}
	}
	args := `'proto_version', '2', 'publication_names', 'p'`
	if streaming {
		// The decoding session's memory limit decides when a transaction is
		// streamed, not the writer's.
		if _, err := conn.Exec(ctx, `SET logical_decoding_work_mem = '64kB'`); err != nil {
			t.Fatal(err)
		}
		args += `, 'streaming', 'on'`
	}
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, `+args+`)`)
	if err != nil {
		t.Fatal(err)
	}
	var out []walMsg
	for rows.Next() {
		var lsn string
		var data []byte
		if err := rows.Scan(&lsn, &data); err != nil {
			t.Fatal(err)
		}
		var hi, lo uint32
		if _, err := fmt.Sscanf(lsn, "%X/%X", &hi, &lo); err != nil {
			t.Fatal(err)
		}
		out = append(out, walMsg{lsn: uint64(hi)<<32 | uint64(lo), data: data})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecodeTransactions(t *testing.T) {
	const twoTables = `
		CREATE TABLE t (id int PRIMARY KEY, v text);
		CREATE TABLE u (a int, b text, v int, PRIMARY KEY (a, b));
		INSERT INTO t VALUES (1, 'a'), (2, 'b');
		INSERT INTO u VALUES (1, 'x', 0);
		CREATE PUBLICATION p FOR TABLE t, u;`
	cases := []struct {
		name   string
		setup  string
		writes []string
		want   []string
	}{
		{
			name:   "insert",
			setup:  twoTables,
			writes: []string{`INSERT INTO t VALUES (3, 'c'), (4, 'd')`, `INSERT INTO u VALUES (2, 'y z', 1)`},
			want: []string{
				"relation public.t [id]", "commit t(3) t(4)",
				"relation public.u [a b]", "commit u(2,y z)",
			},
		},
		{
			name:   "update keeps key",
			setup:  twoTables,
			writes: []string{`UPDATE t SET v = 'z' WHERE id = 1`},
			want:   []string{"relation public.t [id]", "commit t(1)"},
		},
		{
			name:   "update changes key",
			setup:  twoTables,
			writes: []string{`UPDATE t SET id = 20 WHERE id = 2`, `UPDATE u SET b = 'w' WHERE a = 1`},
			want: []string{
				"relation public.t [id]", "commit t(2) t(20)",
				"relation public.u [a b]", "commit u(1,x) u(1,w)",
			},
		},
		{
			name:   "delete",
			setup:  twoTables,
			writes: []string{`DELETE FROM t WHERE id = 1`, `DELETE FROM u`},
			want: []string{
				"relation public.t [id]", "commit t(1)",
				"relation public.u [a b]", "commit u(1,x)",
			},
		},
		{
			name:   "one transaction, several tables",
			setup:  twoTables,
			writes: []string{`BEGIN; INSERT INTO t VALUES (5, 'e'); DELETE FROM u; UPDATE t SET id = 6 WHERE id = 5; COMMIT`},
			want: []string{
				"relation public.t [id]", "relation public.u [a b]",
				"commit t(5) u(1,x) t(5) t(6)",
			},
		},
		{
			name:   "truncate",
			setup:  twoTables,
			writes: []string{`TRUNCATE t, u`},
			want: []string{
				"relation public.t [id]", "relation public.u [a b]",
				"commit truncate t truncate u",
			},
		},
		{
			name: "replica identity index",
			setup: `CREATE TABLE r (id int NOT NULL, code text NOT NULL, v int);
				CREATE UNIQUE INDEX r_code ON r (code);
				ALTER TABLE r REPLICA IDENTITY USING INDEX r_code;
				INSERT INTO r VALUES (1, 'k1', 0);
				CREATE PUBLICATION p FOR TABLE r;`,
			writes: []string{`UPDATE r SET code = 'k2' WHERE id = 1`, `DELETE FROM r`},
			want: []string{
				"relation public.r [code]", "commit r(k1) r(k2)",
				"commit r(k2)",
			},
		},
		{
			name: "replica identity full",
			setup: `CREATE TABLE f (id int PRIMARY KEY, v text NOT NULL);
				ALTER TABLE f REPLICA IDENTITY FULL;
				INSERT INTO f VALUES (1, 'a');
				CREATE PUBLICATION p FOR TABLE f;`,
			writes: []string{`UPDATE f SET v = 'b'`, `DELETE FROM f`},
			want: []string{
				"relation public.f [id v]", "commit f(1,a) f(1,b)",
				"commit f(1,b)",
			},
		},
		{
			name: "full identity, unchanged toasted column taken from old tuple",
			setup: `CREATE TABLE ft (id int PRIMARY KEY, big text NOT NULL, n int);
				ALTER TABLE ft ALTER COLUMN big SET STORAGE EXTERNAL;
				ALTER TABLE ft REPLICA IDENTITY FULL;
				INSERT INTO ft VALUES (1, repeat('q', 3000), 0);
				CREATE PUBLICATION p FOR TABLE ft;`,
			writes: []string{`UPDATE ft SET n = 1`},
			want: []string{
				"relation public.ft [id big n]",
				"commit ft(1," + strings.Repeat("q", 3000) + ",0) ft(1," + strings.Repeat("q", 3000) + ",1)",
			},
		},
		{
			// The server logs an out-of-line key as an old 'K' tuple even when
			// it did not change, so the 'u' in the new tuple is resolved.
			name: "unchanged toasted primary key",
			setup: `CREATE TABLE tk (k text PRIMARY KEY, n int);
				ALTER TABLE tk ALTER COLUMN k SET STORAGE EXTERNAL;
				INSERT INTO tk VALUES (repeat('k', 2500), 0);
				CREATE PUBLICATION p FOR TABLE tk;`,
			writes: []string{`UPDATE tk SET n = 1`},
			want:   []string{"relation public.tk [k]", "commit tk(" + strings.Repeat("k", 2500) + ")"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs := capture(t, tc.setup, tc.writes, false)
			rec := newRecorder()
			d := NewDecoder(rec, nil)
			for _, m := range msgs {
				if err := d.Decode(context.Background(), m.data); err != nil {
					t.Fatalf("decode %q: %v", m.data[0], err)
				}
				if m.data[0] == 'C' {
					last := rec.txns[len(rec.txns)-1]
					if last.EndLSN != m.lsn || last.CommitLSN >= last.EndLSN || last.Xid == 0 || last.CommitTime.IsZero() {
						t.Errorf("txn positions: commit %X end %X xid %d, message at %X", last.CommitLSN, last.EndLSN, last.Xid, m.lsn)
					}
				}
				if m.data[0] == 'B' && !d.InTxn() {
					t.Errorf("InTxn false after Begin")
				}
			}
			if d.InTxn() {
				t.Error("InTxn true after the last Commit")
			}
			if !slices.Equal(rec.events, tc.want) {
				t.Errorf("events:\n got %q\nwant %q", rec.events, tc.want)
			}
		})
	}
}

func TestDecodeUnusableKey(t *testing.T) {
	cases := []struct {
		name   string
		setup  string
		writes []string
		column string
	}{
		{
			name: "no replica identity",
			setup: `CREATE TABLE nk (a int);
				CREATE PUBLICATION p FOR TABLE nk WITH (publish = 'insert');`,
			writes: []string{`INSERT INTO nk VALUES (1)`},
			column: "",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs := capture(t, tc.setup, tc.writes, false)
			d := NewDecoder(newRecorder(), nil)
			var err error
			for _, m := range msgs {
				if err = d.Decode(context.Background(), m.data); err != nil {
					break
				}
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("want *KeyError, got %v", err)
			}
			if ke.Column != tc.column || !strings.HasPrefix(ke.Table, "public.") {
				t.Errorf("KeyError names %s/%q, want column %q: %v", ke.Table, ke.Column, tc.column, err)
			}
			t.Log(err)
		})
	}
}

func TestDecodeStreamed(t *testing.T) {
	msgs := capture(t,
		`CREATE TABLE big (id int PRIMARY KEY, pad text); CREATE PUBLICATION p FOR TABLE big;`,
		[]string{`BEGIN;
		 INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 3000) g;
		 SAVEPOINT s1;
		 INSERT INTO big SELECT g, repeat('y', 100) FROM generate_series(3001, 6000) g;
		 ROLLBACK TO SAVEPOINT s1;
		 UPDATE big SET id = 7000 WHERE id = 1;
		 COMMIT;`}, true)

	for _, limit := range []int{StreamChunkKeys, 500} {
		t.Run(fmt.Sprintf("chunk limit %d", limit), func(t *testing.T) {
			rec := newRecorder()
			d := NewDecoder(rec, nil)
			d.chunkLimit = limit
			sawStream := false
			for _, m := range msgs {
				if err := d.Decode(context.Background(), m.data); err != nil {
					t.Fatalf("decode %q: %v", m.data[0], err)
				}
				if d.InStream() {
					sawStream = true
				}
				if d.InTxn() {
					t.Fatal("a streamed transaction must not count as an open non-streamed one")
				}
			}
			if !sawStream || len(rec.txns) != 0 || rec.commits != 1 || len(rec.aborts) != 1 {
				t.Fatalf("want one streamed transaction with one subtransaction abort: stream=%v txns=%d commits=%d aborts=%v",
					sawStream, len(rec.txns), rec.commits, rec.aborts)
			}
			xid, subxid := rec.aborts[0][0], rec.aborts[0][1]
			if xid == subxid {
				t.Fatalf("abort of the whole transaction, want a subtransaction: %v", rec.aborts)
			}
			alive := map[string]bool{}
			for _, chunk := range rec.chunks {
				if len(chunk) > limit {
					t.Errorf("chunk of %d keys exceeds the limit %d", len(chunk), limit)
				}
				for _, k := range chunk {
					var id int
					fmt.Sscan(k.Values[0], &id)
					aborted := k.Xid == subxid
					if aborted != (id > 3000 && id <= 6000) {
						t.Fatalf("key %d carries xid %d (top %d, aborted sub %d)", id, k.Xid, xid, subxid)
					}
					if !aborted {
						alive[k.Values[0]] = true
					}
				}
			}
			if len(alive) != 3001 || !alive["1"] || !alive["3000"] || !alive["7000"] {
				t.Errorf("surviving keys: %d, want 1..3000 and 7000", len(alive))
			}
		})
	}
}

// TestDecodeUnstreamedChunked: a transaction the walsender sent whole at
// its commit (not streamed) goes to the sink in chunks of at most the
// chunk limit once it has that many keys, and ends with a StreamCommit of
// its xid at its commit's positions, after every key and its TRUNCATE went
// in its chunks, so the decoder never holds it whole (ADR 0029); a smaller
// one is one Commit; a transaction of exactly the limit is chunked too.
func TestDecodeUnstreamedChunked(t *testing.T) {
	msgs := capture(t,
		`CREATE TABLE big (id int PRIMARY KEY, pad text); CREATE TABLE other (id int PRIMARY KEY); CREATE PUBLICATION p FOR TABLE big, other;`,
		[]string{`BEGIN; INSERT INTO big SELECT g, 'x' FROM generate_series(1, 1200) g; TRUNCATE other; COMMIT;`,
			`BEGIN; INSERT INTO other VALUES (1); TRUNCATE other; COMMIT;`,
			`INSERT INTO big SELECT g, 'x' FROM generate_series(1201, 1300) g`,
			`INSERT INTO big SELECT g, 'x' FROM generate_series(1301, 1800) g`}, false)
	rec := newRecorder()
	d := NewDecoder(rec, nil)
	d.chunkLimit = 500
	var commits []uint64 // the commit positions of the messages, in order
	for _, m := range msgs {
		if err := d.Decode(context.Background(), m.data); err != nil {
			t.Fatalf("decode %q: %v", m.data[0], err)
		}
		if m.data[0] == 'C' {
			commits = append(commits, m.lsn)
		}
		if d.InStream() {
			t.Fatal("an unstreamed transaction opened a stream block")
		}
	}
	if d.InTxn() {
		t.Fatal("a transaction is still open after its commit")
	}
	if rec.commits != 2 || len(rec.txns) != 2 {
		t.Fatalf("want the 1,200-row and the 500-row transactions chunked (two stream commits) and two whole ones: %d stream commits, %d commits", rec.commits, len(rec.txns))
	}
	// The first transaction: 500, 500, then the rest with its TRUNCATE,
	// then its commit; the fourth: 500, then its commit.
	type want struct {
		keys   int
		trunc  int
		commit bool
	}
	wants := []want{{500, 0, false}, {500, 0, false}, {200, 1, false}, {0, 0, true}, {500, 0, false}, {0, 0, true}}
	if len(rec.stream) != len(wants) {
		t.Fatalf("stream events %+v, want %+v", rec.stream, wants)
	}
	for i, w := range wants {
		e := rec.stream[i]
		if e.keys != w.keys || len(e.truncated) != w.trunc || e.commit != w.commit {
			t.Errorf("stream event %d: %+v, want %+v", i, e, w)
		}
		first := rec.stream[0]
		if i >= 4 {
			first = rec.stream[4]
		}
		if e.xid != first.xid || e.xid == 0 {
			t.Errorf("stream event %d carries xid %d, want the transaction's %d", i, e.xid, first.xid)
		}
	}
	if rec.stream[0].xid == rec.stream[4].xid {
		t.Errorf("two transactions streamed under one xid %d", rec.stream[0].xid)
	}
	for _, i := range []int{3, 5} {
		e := rec.stream[i]
		if e.commitLSN == 0 || e.endLSN < e.commitLSN {
			t.Errorf("stream commit %d at commit %X, end %X", i, e.commitLSN, e.endLSN)
		}
	}
	// The slot reports a commit message at its transaction's end.
	if len(commits) != 4 || rec.stream[3].endLSN != commits[0] || rec.stream[5].endLSN != commits[3] {
		t.Errorf("stream commits end at %X and %X, the commit messages at %X", rec.stream[3].endLSN, rec.stream[5].endLSN, commits)
	}
	seen := map[string]bool{}
	for _, chunk := range rec.chunks {
		if len(chunk) > 500 {
			t.Errorf("chunk of %d keys exceeds the limit 500", len(chunk))
		}
		for _, k := range chunk {
			if k.Xid != 0 {
				t.Errorf("key %v of an unstreamed transaction carries subtransaction xid %d", k.Values, k.Xid)
			}
			if seen[k.Values[0]] {
				t.Errorf("key %v delivered twice", k.Values)
			}
			seen[k.Values[0]] = true
		}
	}
	for i := 1; i <= 1800; i++ {
		if in := i <= 1200 || i > 1300; seen[fmt.Sprint(i)] != in {
			t.Errorf("key %d: in a chunk %v, want %v", i, seen[fmt.Sprint(i)], in)
		}
	}
	if got := rec.keys(rec.txns[0].Keys, rec.txns[0].Truncated); got != "other(1) truncate other" {
		t.Errorf("the small transaction: %q", got)
	}
	if len(rec.txns[1].Keys) != 100 {
		t.Errorf("the 100-row transaction has %d keys, want 100", len(rec.txns[1].Keys))
	}
}

func TestDecodeMalformed(t *testing.T) {
	cases := []struct {
		name string
		msgs [][]byte
	}{
		{"empty", [][]byte{{}}},
		{"truncated relation", [][]byte{{'R', 0, 0, 0, 1, 'p', 0, 't', 0, 'd', 0, 5}}},
		{"insert before relation", [][]byte{{'B', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7},
			{'I', 0, 0, 0, 9, 'N', 0, 1, 'n'}}},
		{"commit without begin", [][]byte{append([]byte{'C'}, make([]byte, 25)...)}},
		{"change outside transaction", [][]byte{{'T', 0, 0, 0, 1, 0, 0, 0, 0, 9}}},
		{"unknown message", [][]byte{{'Z', 1, 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(newRecorder(), nil)
			var err error
			for _, m := range tc.msgs {
				if err = d.Decode(context.Background(), m); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("want an error")
			}
			t.Log(err)
		})
	}
}

// msgBuilder assembles pgoutput messages by hand, for shapes a server only
// sends in unusual states.
type msgBuilder []byte

func (b msgBuilder) u8(v byte) msgBuilder { return append(b, v) }
func (b msgBuilder) u16(v uint16) msgBuilder {
	return append(b, byte(v>>8), byte(v))
}
func (b msgBuilder) u32(v uint32) msgBuilder {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
func (b msgBuilder) u64(v uint64) msgBuilder { return b.u32(uint32(v >> 32)).u32(uint32(v)) }
func (b msgBuilder) str(s string) msgBuilder { return append(append(b, s...), 0) }
func (b msgBuilder) text(s string) msgBuilder {
	return append(b.u8('t').u32(uint32(len(s))), s...)
}

func TestDecodeUnchangedToastKeyWithoutOldTuple(t *testing.T) {
	rel := msgBuilder{'R'}.u32(42).str("public").str("docs").u8('d').u16(2).
		u8(1).str("id").u32(25).u32(0xffffffff).
		u8(0).str("body").u32(25).u32(0xffffffff)
	begin := msgBuilder{'B'}.u64(0x100).u64(0).u32(7)
	update := msgBuilder{'U'}.u32(42).u8('N').u16(2).u8('u').text("x")
	insert := msgBuilder{'I'}.u32(42).u8('N').u16(2).text("k1").u8('u')

	rec := newRecorder()
	d := NewDecoder(rec, nil)
	ctx := context.Background()
	for _, m := range [][]byte{rel, begin, insert} {
		if err := d.Decode(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	err := d.Decode(ctx, update)
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Table != "public.docs" || ke.Column != "id" {
		t.Fatalf("want a KeyError for public.docs.id, got %v", err)
	}
	if got := rec.rels[42]; got == nil || !slices.Equal(got.KeyColumns, []string{"id"}) || len(got.Columns) != 2 || got.Columns[1].Key {
		t.Errorf("relation %+v", got)
	}
}

// TestDecodeFullIdentityNull: under REPLICA IDENTITY FULL every column is
// flagged as key; a NULL in one of them is marked Missing, not an error,
// since the consumer picks the primary-key columns it needs.
func TestDecodeFullIdentityNull(t *testing.T) {
	msgs := capture(t, `CREATE TABLE f (id int PRIMARY KEY, v text);
		ALTER TABLE f REPLICA IDENTITY FULL;
		INSERT INTO f VALUES (1, NULL);
		CREATE PUBLICATION p FOR TABLE f;`, []string{`DELETE FROM f`}, false)
	rec := newRecorder()
	d := NewDecoder(rec, nil)
	for _, m := range msgs {
		if err := d.Decode(context.Background(), m.data); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.txns) != 1 || len(rec.txns[0].Keys) != 1 {
		t.Fatalf("got %+v, want one transaction with one key", rec.txns)
	}
	k := rec.txns[0].Keys[0]
	if k.Values[0] != "1" || len(k.Missing) != 2 || k.Missing[0] || !k.Missing[1] {
		t.Fatalf("key %+v: want id 1 present and v missing", k)
	}
}
