package pgtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestContainerCmd(t *testing.T) {
	cmd := strings.Join(containerCmd(), " ")
	for _, want := range []string{"postgres ", "-c wal_level=logical", "-c max_replication_slots=20", "-c max_wal_senders=20", "-c fsync=off", "-c synchronous_commit=local", "-c jit=off"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("container command %q lacks %q", cmd, want)
		}
	}
}

// TestContainer starts the Docker fallback for real. It needs a Docker
// engine and skips without one.
func TestContainer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a container")
	}
	ctx := context.Background()
	if err := dockerReachable(ctx); err != nil {
		t.Skipf("no Docker engine reachable: %v", err)
	}
	image := os.Getenv(EnvImage)
	if image == "" {
		image = DefaultImage
	}
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	dsn, stop, err := startContainer(startCtx, image)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	conn, err := pgx.Connect(startCtx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var walLevel string
	if err := conn.QueryRow(startCtx, "SHOW wal_level").Scan(&walLevel); err != nil {
		t.Fatal(err)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical", walLevel)
	}
	for _, kv := range containerSettings() {
		var got string
		if err := conn.QueryRow(startCtx, "SELECT current_setting($1)", kv[0]).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != kv[1] {
			t.Errorf("%s = %q, want %q", kv[0], got, kv[1])
		}
	}
}
