package catalog

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestBackgroundUpdatesSkipHeldRows: the runner's statements over many
// progress rows (RecordIdleProgress, SetKeysWaiting) neither wait on nor
// change a row another transaction holds — a DROP or apply of an owner
// and its levels holds several, and a background statement waiting on one
// while holding another could deadlock with it — and RecordIdleProgress
// names only the rows it held, so the skipped one is recorded later.
func TestBackgroundUpdatesSkipHeldRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := New("trellis_test")
	if _, err := pool.Exec(ctx, c.InstallSQL()); err != nil {
		t.Fatalf("install the catalog: %v", err)
	}
	var ids []int64
	for _, name := range []string{"a", "b", "c"} {
		id, err := c.Insert(ctx, pool, &Transform{Schema: "public", Name: name, Definition: "SELECT 1",
			Shape: "rows", Plan: []byte(`{}`), SourceTable: "public.t", SourceOID: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	// Another transaction holds b's row, as a DROP's cascade would.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+c.T("progress")+` WHERE transform_id = $1 FOR UPDATE`, ids[1]); err != nil {
		t.Fatal(err)
	}

	quick, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	held, err := c.RecordIdleProgress(quick, pool, ids, []uint64{100, 200, 300})
	if err != nil {
		t.Fatalf("RecordIdleProgress waited on or failed over a held row: %v", err)
	}
	slices.Sort(held)
	if want := []int64{ids[0], ids[2]}; !slices.Equal(held, want) {
		t.Fatalf("RecordIdleProgress held %v, want %v (b is held elsewhere)", held, want)
	}
	if err := c.SetKeysWaiting(quick, pool, ids, []int64{1, 2, 3}); err != nil {
		t.Fatalf("SetKeysWaiting waited on or failed over a held row: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	read := func() (lsns []string, waiting []int64) {
		rows, err := pool.Query(ctx, `SELECT applied_lsn::text, keys_waiting FROM `+c.T("progress")+` WHERE transform_id = ANY($1) ORDER BY transform_id`, ids)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var l string
			var n int64
			if err := rows.Scan(&l, &n); err != nil {
				t.Fatal(err)
			}
			lsns, waiting = append(lsns, l), append(waiting, n)
		}
		return lsns, waiting
	}
	lsns, waiting := read()
	if want := []string{FormatLSN(100), "0/0", FormatLSN(300)}; !slices.Equal(lsns, want) {
		t.Fatalf("applied positions %v, want %v", lsns, want)
	}
	if want := []int64{1, 0, 3}; !slices.Equal(waiting, want) {
		t.Fatalf("keys waiting %v, want %v", waiting, want)
	}

	// Released, the skipped row is recorded; a row already at or past its
	// position is held and named, and not moved back.
	held, err = c.RecordIdleProgress(ctx, pool, ids, []uint64{50, 200, 300})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(held)
	if !slices.Equal(held, ids) {
		t.Fatalf("RecordIdleProgress held %v, want %v", held, ids)
	}
	if lsns, _ = read(); !slices.Equal(lsns, []string{FormatLSN(100), FormatLSN(200), FormatLSN(300)}) {
		t.Fatalf("applied positions %v after the second record", lsns)
	}
}
