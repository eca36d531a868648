package trellis_test

import (
	"context"
	"strings"
	"testing"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestReadOnlyOpen: a read-only open of an absent instance is not_found
// and creates nothing; of an instance, it reads and refuses every call
// that writes, changing nothing.
func TestReadOnlyOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	if _, err := trellis.Open(ctx, trellis.Config{DSN: dsn, ReadOnly: true}); trellis.CodeOf(err) != trellis.CodeNotFound ||
		!strings.Contains(err.Error(), `instance schema "trellis" does not exist on this database`) {
		t.Fatalf("read-only open of no instance: %v", err)
	}
	e := newEnvOn(t, dsn, trellis.Config{})
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, price int)`)
	e.apply(`CREATE TRANSFORM items_copy AS SELECT id, price FROM items`)
	ro, err := trellis.Open(ctx, trellis.Config{DSN: dsn, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if st, err := ro.Status(ctx); err != nil || len(st) != 1 || st[0].State != "waiting_to_backfill" || st[0].Build != nil {
		t.Fatalf("read-only status: %v %+v", err, st)
	}
	if d, err := ro.Definitions(ctx, "items_copy"); err != nil || len(d) != 1 || d[0].State != "waiting_to_backfill" || d[0].Sources[0] != `"public"."items"` {
		t.Fatalf("read-only definitions: %v %+v", err, d)
	}
	_, applyErr := ro.Apply(ctx, `DROP TRANSFORM items_copy`)
	_, releaseErr := ro.ReleaseAll(ctx, "items_copy")
	for what, err := range map[string]error{"Apply": applyErr, "ReleaseAll": releaseErr, "Run": ro.Run(ctx),
		"ReleaseKey": ro.ReleaseKey(ctx, "items_copy", "items", []string{"1"})} {
		if trellis.CodeOf(err) != trellis.CodeValidation || !strings.Contains(err.Error(), "opened read-only") {
			t.Errorf("read-only %s: %v", what, err)
		}
	}
	if st, err := ro.Status(ctx); err != nil || len(st) != 1 {
		t.Fatalf("after the refused writes: %v %+v", err, st)
	}
}
