package main

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// TestDoctor runs `doctor` where logical replication works, on a server
// with wal_level=replica, as a role without REPLICATION, and on a server
// with max_replication_slots=0: each failing check names its fix, and
// auto picks triggers wherever one fails. Doctor changes nothing.
func TestDoctor(t *testing.T) {
	ctx := context.Background()
	withRole := func(t *testing.T, dsn string) string {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for _, s := range []string{`DROP ROLE IF EXISTS doctor_app`, `CREATE ROLE doctor_app LOGIN PASSWORD 'doctor-secret'`} {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			c, err := pgx.Connect(ctx, dsn)
			if err == nil {
				_, _ = c.Exec(ctx, `DROP ROLE IF EXISTS doctor_app`)
				c.Close(ctx)
			}
		})
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("doctor_app", "doctor-secret")
		return u.String()
	}
	cases := []struct {
		name     string
		dsn      func(t *testing.T) string
		failed   []string // checks that must fail (nothing else may)
		fixWords string   // in the printed fixes
	}{
		{"logical available", func(t *testing.T) string { return pgtest.NewDatabase(t) }, nil, ""},
		{"wal_level replica", func(t *testing.T) string {
			return pgtest.NewDatabaseOn(t, pgtest.ExtraServer(t, "wal_level=replica", map[string]string{"wal_level": "replica"}))
		}, []string{"wal_level"}, "wal_level = logical"},
		{"role without REPLICATION", func(t *testing.T) string { return withRole(t, pgtest.NewDatabase(t)) },
			[]string{"replication_privilege", "create_publication", "replication_connection"}, `ALTER ROLE "doctor_app" REPLICATION`},
		{"no replication slots", func(t *testing.T) string {
			return pgtest.NewDatabaseOn(t, pgtest.ExtraServer(t, "max_replication_slots=0", map[string]string{"max_replication_slots": "0"}))
		}, []string{"replication_slots"}, "max_replication_slots = 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn := c.dsn(t)
			code, out, stderr := cli("doctor", "--dsn", dsn, "--json")
			if code != 0 {
				t.Fatalf("doctor --json: exit %d: %s", code, stderr)
			}
			var r trellis.DoctorReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("doctor --json printed %q: %v", out, err)
			}
			var failed []string
			for _, f := range r.Checks {
				if f.Result == "fail" {
					failed = append(failed, f.Check)
					if f.Fix == "" {
						t.Errorf("check %s failed without a fix", f.Check)
					}
				}
			}
			if strings.Join(failed, ",") != strings.Join(c.failed, ",") {
				t.Fatalf("failed checks %v, want %v\n%s", failed, c.failed, out)
			}
			want := trellis.CaptureLogical
			if len(c.failed) > 0 {
				want = trellis.CaptureTrigger
			}
			if r.AutoMode != want {
				t.Fatalf("auto mode %s (%s), want %s", r.AutoMode, r.Reason, want)
			}
			code, text, stderr := cli("doctor", "--dsn", dsn)
			if code != 0 {
				t.Fatalf("doctor: exit %d: %s", code, stderr)
			}
			if !strings.Contains(text, "--capture=auto would use: "+want) || c.fixWords != "" && !strings.Contains(text, c.fixWords) {
				t.Fatalf("doctor printed:\n%s\nwant the mode %s and the fix %q", text, want, c.fixWords)
			}
			if strings.Contains(text, "doctor-secret") || strings.Contains(out, "doctor-secret") {
				t.Fatalf("doctor printed the password:\n%s", text)
			}
			// Nothing was created: no schema, slot or publication.
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var n int
			if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'trellis')
				+ (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication)`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("doctor created %d object(s)", n)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"10GB": 10 << 30, "512MB": 512 << 20, "1tb": 1 << 40, "100kB": 100 << 10, "4096": 4096, "7 B": 7} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GB", "10XB", "-1GB", "0"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}
