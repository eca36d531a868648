package trellis_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

// roleSetups are the README's privilege setups (section "Privileges"), as
// the statements a superuser and the tables' owner run. The instance role
// is named like the instance schema ("trellis"), which must not make
// unqualified names resolve there.
var roleSetups = []struct {
	name string
	// admin runs as a superuser, owner as the application role app.
	admin, owner []string
	cfg          trellis.Config
	wantMode     string
	// addTable is what the owner runs for a table added later (setup a).
	addTable string
	// doctor is what `doctor` must find: publish_sources and
	// trigger_sources results.
	doctor [2]string
}{
	{
		name: "owner-managed publication",
		admin: []string{
			`CREATE ROLE trellis LOGIN REPLICATION PASSWORD 'role-test-pw'`,
			`GRANT CREATE ON DATABASE {db} TO trellis`,
			`GRANT USAGE, CREATE ON SCHEMA public TO trellis`,
			`GRANT CREATE ON DATABASE {db} TO app`,
		},
		owner: []string{
			`GRANT SELECT ON orders, items TO trellis`,
			`CREATE PUBLICATION app_pub FOR TABLE orders WITH (publish_via_partition_root = true)`,
		},
		cfg:      trellis.Config{Publication: "app_pub"},
		wantMode: trellis.CaptureLogical,
		addTable: `ALTER PUBLICATION app_pub ADD TABLE public.items`,
		doctor:   [2]string{"fail", "fail"},
	},
	{
		name: "membership in the owning role",
		admin: []string{
			`CREATE ROLE trellis LOGIN REPLICATION PASSWORD 'role-test-pw'`,
			`GRANT CREATE ON DATABASE {db} TO trellis`,
			`GRANT USAGE, CREATE ON SCHEMA public TO trellis`,
			`GRANT app TO trellis`,
		},
		wantMode: trellis.CaptureLogical,
		doctor:   [2]string{"ok", "ok"},
	},
	{
		name: "trigger privilege",
		admin: []string{
			`CREATE ROLE trellis LOGIN PASSWORD 'role-test-pw'`,
			`GRANT CREATE ON DATABASE {db} TO trellis`,
			`GRANT USAGE, CREATE ON SCHEMA public TO trellis`,
		},
		owner:    []string{`GRANT SELECT, TRIGGER ON orders, items TO trellis`},
		wantMode: trellis.CaptureTrigger,
		doctor:   [2]string{"fail", "ok"},
	},
}

// roleDB is a test database with its superuser connection, for tests that
// create roles: run executes statements ({db} is the database's name), and
// the roles named are dropped (with what they own) before and after.
type roleDB struct {
	t     *testing.T
	dsn   string
	admin *pgx.Conn
	db    string
}

func newRoleDB(t *testing.T, roles ...string) *roleDB {
	t.Helper()
	ctx := context.Background()
	r := &roleDB{t: t, dsn: pgtest.NewDatabase(t)}
	admin, err := pgx.Connect(ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	r.admin = admin
	if err := admin.QueryRow(ctx, `SELECT current_database()`).Scan(&r.db); err != nil {
		t.Fatal(err)
	}
	drop := func(c *pgx.Conn) {
		for _, role := range roles {
			_, _ = c.Exec(context.Background(), `DROP OWNED BY `+role)
			_, _ = c.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
		}
	}
	drop(admin)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), r.dsn); err == nil {
			drop(c)
			c.Close(context.Background())
		}
		admin.Close(context.Background())
	})
	return r
}

// run executes stmts on c, {db} standing for the database's name.
func (r *roleDB) run(c *pgx.Conn, stmts ...string) {
	r.t.Helper()
	for _, s := range stmts {
		if _, err := c.Exec(context.Background(), strings.ReplaceAll(s, "{db}", pgx.Identifier{r.db}.Sanitize())); err != nil {
			r.t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestRoleSetups runs each documented privilege setup as a non-superuser
// with exactly its statements: capture works in the expected mode, the
// targets stay exact, they land in the user's schema (not the instance
// schema the role is named like), and the application role keeps its own
// access to its tables.
func TestRoleSetups(t *testing.T) {
	for _, rs := range roleSetups {
		t.Run(rs.name, func(t *testing.T) {
			ctx := context.Background()
			rdb, app := newAppDB(t)
			adminDSN, admin, run := rdb.dsn, rdb.admin, rdb.run
			run(admin, rs.admin...)
			run(app, rs.owner...)

			cfg := rs.cfg
			cfg.DSN = asRole(t, adminDSN, "trellis", "role-test-pw")
			e := newEnvOn(t, cfg.DSN, cfg)
			e.conn = app // the application writes; checks read as it
			e.apply(`CREATE TRANSFORM big_orders AS SELECT id, customer, amount FROM orders WHERE amount > 10;
				CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer`)
			rep, err := trellis.Doctor(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Privileges) != 2 || rep.Privileges[0].Result != rs.doctor[0] || rep.Privileges[1].Result != rs.doctor[1] || rep.AutoMode != rs.wantMode {
				t.Fatalf("doctor: privileges %+v, auto %s; want %v and %s", rep.Privileges, rep.AutoMode, rs.doctor, rs.wantMode)
			}
			e.start()
			waitLive := func(name string) {
				t.Helper()
				s := waitStatus(t, e, name, "live", func(s trellis.TransformStatus) bool {
					return s.State == "live" || s.State == "paused"
				})
				if s.State != "live" {
					t.Fatalf("%s paused: %+v", name, s.CaptureFailure)
				}
				if s.CaptureMode == nil || *s.CaptureMode != rs.wantMode {
					t.Fatalf("%s: capture mode %v (%v), want %s", name, s.CaptureMode, s.CaptureReason, rs.wantMode)
				}
				if !strings.HasPrefix(s.Target, `"public".`) {
					t.Fatalf("%s: target %s, want it in schema public (not the instance schema)", name, s.Target)
				}
			}
			waitLive("big_orders")
			waitLive("by_customer")
			run(app, `UPDATE orders SET amount = amount + 15 WHERE id % 7 = 0`, `DELETE FROM orders WHERE id % 11 = 0`,
				`INSERT INTO orders SELECT g, g % 5, g FROM generate_series(200, 230) g`)
			e.converge("after the application's writes")

			// A transform on a table added later.
			e.apply(`CREATE TRANSFORM kinds AS SELECT kind, count(*) AS n FROM items GROUP BY kind`)
			if rs.addTable != "" {
				s := waitStatus(t, e, "kinds", "waiting for the owner", func(s trellis.TransformStatus) bool { return s.CaptureWait != nil })
				if !strings.Contains(s.CaptureWait.Statement, "ALTER PUBLICATION") || !strings.Contains(s.CaptureWait.Statement, "items") {
					t.Fatalf("capture_wait %+v; want the ALTER PUBLICATION the owner must run", *s.CaptureWait)
				}
				run(app, rs.addTable)
			}
			waitLive("kinds")
			run(app, `UPDATE items SET kind = 'z' WHERE id < 5`)
			e.converge("after writes to the added table")
			e.apply(`DROP TRANSFORM kinds`)
			e.stop()
			e.start()
			run(app, `INSERT INTO orders VALUES (999, 1, 99)`)
			e.converge("after a restart")

			// The application keeps its tables and its access to them.
			var owner string
			if err := app.QueryRow(ctx, `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'orders'::regclass`).Scan(&owner); err != nil {
				t.Fatal(err)
			}
			if owner != "app" {
				t.Fatalf("orders is owned by %s now", owner)
			}
			run(app, `INSERT INTO orders VALUES (1000, 2, 5)`, `UPDATE orders SET amount = 1 WHERE id = 1000`, `DELETE FROM orders WHERE id = 1000`,
				`SELECT count(*) FROM items`)
		})
	}
}

// newAppDB is a database with roles trellis (not created yet) and app,
// app's tables orders and items with rows, and a connection as app.
func newAppDB(t *testing.T) (*roleDB, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	rdb := newRoleDB(t, "trellis", "app")
	rdb.run(rdb.admin, `CREATE ROLE app LOGIN PASSWORD 'app-pw'`, `GRANT CREATE ON SCHEMA public TO app`)
	app, err := pgx.Connect(ctx, asRole(t, rdb.dsn, "app", "app-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close(context.Background()) })
	rdb.run(app, `CREATE TABLE orders (id int PRIMARY KEY, customer int, amount numeric)`,
		`CREATE TABLE items (id int PRIMARY KEY, kind text)`,
		`INSERT INTO orders SELECT g, g % 5, g % 40 FROM generate_series(1, 100) g`,
		`INSERT INTO items SELECT g, 'k' || (g % 3) FROM generate_series(1, 20) g`)
	return rdb, app
}

// asRole is dsn with another user and password.
func asRole(t *testing.T, dsn, user, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// TestMissingPrivilege: a role that may neither publish nor trigger on a
// source gets the missing privilege reported as one, with the statements
// that grant it, never as a data error: a transform defined while running
// is paused once (halt) naming them; at a start where no source can be
// published no slot is created.
func TestMissingPrivilege(t *testing.T) {
	ctx := context.Background()
	rdb := newRoleDB(t, "nopriv")
	adminDSN, admin := rdb.dsn, rdb.admin
	rdb.run(admin,
		`CREATE TABLE orders (id int PRIMARY KEY, amount numeric)`,
		`INSERT INTO orders SELECT g, g FROM generate_series(1, 20) g`,
		`CREATE ROLE nopriv LOGIN REPLICATION PASSWORD 'np-pw'`,
		`GRANT CREATE ON DATABASE {db} TO nopriv`,
		`GRANT USAGE, CREATE ON SCHEMA public TO nopriv`,
		`GRANT SELECT ON orders TO nopriv`)
	cfg := trellis.Config{Capture: trellis.CaptureLogical, DSN: asRole(t, adminDSN, "nopriv", "np-pw")}
	e := newEnvOn(t, cfg.DSN, cfg)
	e.conn = admin
	e.start()
	for deadline := time.Now().Add(waitTimeout); ; {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner never created its slot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.apply(`CREATE TRANSFORM big AS SELECT id, amount FROM orders WHERE amount > 5`)
	s := waitStatus(t, e, "big", "paused", func(s trellis.TransformStatus) bool { return s.State == "paused" })
	msg := s.CaptureFailure.Error
	if s.CaptureFailure.Kind != "halt" || !strings.Contains(msg, `role "nopriv" may not add "public"."orders" to publication`) ||
		!strings.Contains(msg, "GRANT TRIGGER ON") || !strings.Contains(msg, "--publication") || strings.Contains(msg, "fix the data") {
		t.Fatalf("capture_failure %+v; want a privilege sentence with the statements that grant it", *s.CaptureFailure)
	}
	e.stop()
	if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()`); err != nil {
		t.Fatal(err)
	}
	// A new instance whose only source cannot be published: no slot.
	cfg.Schema = "other"
	e2 := newEnvOn(t, cfg.DSN, cfg)
	e2.apply(`CREATE TRANSFORM big2 AS SELECT id FROM orders`)
	err := e2.tr.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `may not add "public"."orders" to publication`) {
		t.Fatalf("Run = %v; want the privilege error", err)
	}
	var slots int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Fatalf("%d slot(s) created although capture cannot work", slots)
	}
}

// TestPrivilegeRevokedHalts: SELECT on a source revoked from the runner's
// role while it runs is a failure every key reproduces: the transform
// reading it pauses once (halt, naming the privilege), the one reading
// another table keeps applying, and a RESUME after the GRANT rebuilds it.
func TestPrivilegeRevokedHalts(t *testing.T) {
	ctx := context.Background()
	rdb, app := newAppDB(t)
	run, admin := rdb.run, rdb.admin
	run(admin, roleSetups[0].admin...)
	run(app, `GRANT SELECT ON orders, items TO trellis`,
		`CREATE PUBLICATION app_pub FOR TABLE orders, items WITH (publish_via_partition_root = true)`)
	cfg := trellis.Config{Publication: "app_pub", DSN: asRole(t, rdb.dsn, "trellis", "role-test-pw")}
	e := newEnvOn(t, cfg.DSN, cfg)
	e.conn = app
	e.apply(`CREATE TRANSFORM by_customer AS SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer;
		CREATE TRANSFORM kinds AS SELECT kind, count(*) AS n FROM items GROUP BY kind`)
	e.start()
	e.converge("built")
	run(app, `REVOKE SELECT ON orders FROM trellis`)
	run(app, `UPDATE orders SET amount = amount + 1 WHERE id < 30`, `UPDATE items SET kind = 'z' WHERE id < 4`)
	s := waitStatus(t, e, "by_customer", "halted", func(s trellis.TransformStatus) bool { return s.State == "paused" })
	if f := s.CaptureFailure; f == nil || f.Kind != "halt" || !strings.Contains(f.Error, "42501") || !strings.Contains(f.Error, "grant") || s.HeldKeys != nil {
		t.Fatalf("by_customer: capture_failure %+v, held %+v; want one halt naming the privilege", s.CaptureFailure, s.HeldKeys)
	}
	e.awaitNamed("the other transform", "kinds")
	// Read as the runner's role: the application may not read the targets.
	mine, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close(ctx)
	e.conn = mine
	e.sameRows("kinds", "SELECT kind, n FROM kinds", "SELECT kind, count(*) FROM items GROUP BY kind")
	e.conn = app
	run(app, `GRANT SELECT ON orders TO trellis`)
	e.apply(`RESUME TRANSFORM by_customer`)
	e.converge("after the GRANT and RESUME")
}
