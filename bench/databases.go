package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/pgserver"
)

// ServerDatabases creates each case's database on the server AdminDSN
// points at (a superuser, or a role with CREATEDB and REPLICATION).
type ServerDatabases struct {
	AdminDSN string
}

// NewDatabase creates an empty database named trellis_bench_<random>.
func (s ServerDatabases) NewDatabase(ctx context.Context) (string, func(context.Context) error, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("bench: random name: %w", err)
	}
	name := "trellis_bench_" + hex.EncodeToString(b[:])
	dsn, err := withDatabase(s.AdminDSN, name)
	if err != nil {
		return "", nil, err
	}
	conn, err := pgx.Connect(ctx, s.AdminDSN)
	if err != nil {
		return "", nil, fmt.Errorf("bench: connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := pgserver.CreateDatabaseOn(ctx, conn, name); err != nil {
		return "", nil, err
	}
	drop := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, s.AdminDSN)
		if err != nil {
			return fmt.Errorf("bench: connect to the server: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return pgserver.DropDatabaseOn(ctx, conn, name)
	}
	return dsn, drop, nil
}

// withDatabase returns dsn (a URL or keyword/value string) naming dbname.
func withDatabase(dsn, dbname string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("bench: parse DSN: %w", err)
		}
		u.Path, u.RawPath = "/"+dbname, ""
		q := u.Query()
		q.Del("dbname") // would override the path
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In keyword/value form a later keyword overrides an earlier one.
	out := strings.TrimSpace(dsn) + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(dbname) + "'"
	if _, err := pgconn.ParseConfig(out); err != nil {
		return "", fmt.Errorf("bench: derive DSN: %w", err)
	}
	return out, nil
}
