package pipeline

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestObjectsSignature: the signature of the user-defined objects a
// definition may call moves with a new domain or function, not with a
// table made or dropped, temporary or not: the appliers make temporary
// tables as transforms take turns on their sessions, and each used to
// have the drift watch check every transform in full.
func TestObjectsSignature(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	objects := func() string {
		t.Helper()
		_, o, err := catalogSignatures(ctx, conn, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	before := objects()
	exec(`CREATE TEMP TABLE applier_k (k int)`)
	exec(`CREATE TABLE app_orders (id int PRIMARY KEY, total numeric)`)
	exec(`DROP TABLE pg_temp.applier_k`)
	if after := objects(); after != before {
		t.Errorf("tables made and dropped moved the objects' signature: %s, then %s", before, after)
	}
	exec(`CREATE DOMAIN positive AS int CHECK (VALUE > 0)`)
	if after := objects(); after == before {
		t.Error("a new domain did not move the objects' signature")
	}
	before = objects()
	exec(`CREATE FUNCTION twice(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2'`)
	if after := objects(); after == before {
		t.Error("a new function did not move the objects' signature")
	}
}
