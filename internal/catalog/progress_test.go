package catalog

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newCatalog installs a catalog in a fresh database and returns a pool on
// it, all released when the test ends.
func newCatalog(t *testing.T) (context.Context, *pgxpool.Pool, Catalog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c := New("trellis_test")
	if _, err := pool.Exec(ctx, c.InstallSQL()); err != nil {
		t.Fatalf("install the catalog: %v", err)
	}
	return ctx, pool, c
}

// TestBackgroundUpdatesSkipHeldRows: the runner's statements over many
// progress rows (RecordIdleProgress, SetKeysWaiting) neither wait on nor
// change a row another transaction holds — a DROP or apply of an owner
// and its levels holds several, and a background statement waiting on one
// while holding another could deadlock with it — and RecordIdleProgress
// names only the rows it held, so the skipped one is recorded later.
func TestBackgroundUpdatesSkipHeldRows(t *testing.T) {
	ctx, pool, c := newCatalog(t)
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
	held, err = c.SetKeysWaiting(quick, pool, ids, []int64{1, 2, 3})
	if err != nil {
		t.Fatalf("SetKeysWaiting waited on or failed over a held row: %v", err)
	}
	slices.Sort(held)
	if want := []int64{ids[0], ids[2]}; !slices.Equal(held, want) {
		t.Fatalf("SetKeysWaiting held %v, want %v (b is held elsewhere)", held, want)
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

// TestStamp: the catalog stamp moves with every change reconcile acts on
// (a transform defined, its row changed, dropped; released keys) and
// stays put through what an idle runner writes every interval (progress,
// backlog counts) and through nothing at all.
func TestStamp(t *testing.T) {
	ctx, pool, c := newCatalog(t)
	stamp := func() Stamp {
		t.Helper()
		s, err := c.Stamp(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var ids []int64
	define := func() error {
		id, err := c.Insert(ctx, pool, &Transform{Schema: "public", Name: "t" + strconv.Itoa(len(ids)), Definition: "SELECT 1",
			Shape: "rows", Plan: []byte(`{}`), SourceTable: "public.t", SourceOID: 1})
		ids = append(ids, id)
		return err
	}
	exec := func(sql string, args ...any) func() error {
		return func() error { _, err := pool.Exec(ctx, sql, args...); return err }
	}
	steps := []struct {
		name  string
		do    func() error
		moves bool
	}{
		{"nothing", func() error { return nil }, false},
		{"define", define, true},
		{"define another", define, true},
		{"record idle progress", func() error { _, err := c.RecordIdleProgress(ctx, pool, ids, []uint64{10, 20}); return err }, false},
		{"record backlogs", func() error { _, err := c.SetKeysWaiting(ctx, pool, ids, []int64{5, 6}); return err }, false},
		{"pause", func() error { return c.Pause(ctx, pool, ids[0], "user", nil) }, true},
		{"update in place", exec(`UPDATE ` + c.T("transforms") + ` SET plan = plan WHERE id = (SELECT min(id) FROM ` + c.T("transforms") + `)`), true},
		{"hold a key", exec(`INSERT INTO ` + c.T("held_keys") + ` (transform_id, table_oid, source_table, key_id, key, error, attempts, poisoned_at)
			SELECT min(id), 1, 'public.t', '\x01', '{}', 'e', 1, now() FROM ` + c.T("transforms")), false},
		{"release it", exec(`UPDATE ` + c.T("held_keys") + ` SET released = true`), true},
		{"forget it", exec(`DELETE FROM ` + c.T("held_keys")), true},
		{"drop", exec(`DELETE FROM ` + c.T("transforms") + ` WHERE id = (SELECT min(id) FROM ` + c.T("transforms") + `)`), true},
		{"nothing again", func() error { return nil }, false},
	}
	before := stamp()
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		after := stamp()
		if moved := after != before; moved != s.moves {
			t.Errorf("%s: stamp %+v -> %+v, moved %v, want %v", s.name, before, after, moved, s.moves)
		}
		before = after
	}
}

// TestListCached: ListCached returns every transform with the plan of the
// row version it lists, reads a plan again only when its row changed, and
// forgets dropped transforms.
func TestListCached(t *testing.T) {
	ctx, pool, c := newCatalog(t)
	var ids []int64
	for _, name := range []string{"a", "b"} {
		id, err := c.Insert(ctx, pool, &Transform{Schema: "public", Name: name, Definition: "SELECT 1",
			Shape: "rows", Plan: []byte(`{"n": "` + name + `"}`), SourceTable: "public.t", SourceOID: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var pc PlanCache
	list := func() map[string]*Transform {
		t.Helper()
		ts, err := c.ListCached(ctx, pool, &pc)
		if err != nil {
			t.Fatal(err)
		}
		full, err := c.List(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*Transform{}
		for i, tr := range ts {
			if string(tr.Plan) != string(full[i].Plan) || tr.State != full[i].State {
				t.Errorf("%s: ListCached gave plan %s state %s, List %s %s", tr.Name, tr.Plan, tr.State, full[i].Plan, full[i].State)
			}
			out[tr.Name] = tr
		}
		return out
	}
	first := list()
	second := list()
	if &first["a"].Plan[0] != &second["a"].Plan[0] {
		t.Error("an unchanged row's plan was read again")
	}
	if err := c.SetPlan(ctx, pool, ids[1], []byte(`{"n": "b2"}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, pool, ids[0], "user", nil); err != nil {
		t.Fatal(err)
	}
	third := list()
	if string(third["b"].Plan) != `{"n": "b2"}` || third["a"].State != StatePaused {
		t.Fatalf("after the changes: b's plan %s, a's state %s", third["b"].Plan, third["a"].State)
	}
	if err := c.Delete(ctx, pool, ids[0]); err != nil {
		t.Fatal(err)
	}
	if fourth := list(); len(fourth) != 1 || len(pc.m) != 1 {
		t.Fatalf("after the drop: %d transforms listed, %d plans cached", len(fourth), len(pc.m))
	}
}
