package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/fault"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// TestLostConnection pins which errors end a run for a reconnect and which
// end Run: the server's own errors by SQLSTATE, however they are wrapped.
func TestLostConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, refused := pgx.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if refused == nil {
		t.Fatal("connected to port 1")
	}
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "x"} }
	wrap := func(err error) error {
		return terr.Wrap(terr.Unavailable, fmt.Errorf("listen: %w", err), "lost the runner connection: %v", err)
	}
	cases := []struct {
		err  error
		lost bool
	}{
		{refused, true},
		{wrap(io.ErrUnexpectedEOF), true},
		{wrap(io.EOF), true},
		{wrap(pgconn.ErrConnClosed), true},
		{wrap(pg("57P01")), true}, // admin shutdown, pg_terminate_backend
		{wrap(pg("57P02")), true}, // crash shutdown
		{wrap(pg("57P03")), true}, // cannot connect now (starting up)
		{wrap(pg("08006")), true},
		{wrap(pg("53300")), true},  // too many connections
		{wrap(pg("28P01")), false}, // password authentication failed
		{wrap(pg("42501")), false},
		{wrap(pg("23505")), false},
		{terr.New(terr.Conflict, "another runner"), false},
		{wrap(context.DeadlineExceeded), false},
		{errors.New("capture stopped"), false},
		{nil, false},
	}
	for _, c := range cases {
		if got := fault.Disconnected(c.err); got != c.lost {
			t.Errorf("fault.Disconnected(%v) = %v, want %v", c.err, got, c.lost)
		}
	}
}
