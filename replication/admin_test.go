package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/pgtest"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestValidateSlotName(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"trellis_slot", true},
		{"s1", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"Upper", false},
		{"has-dash", false},
		{`x"; DROP`, false},
	}
	for _, tc := range cases {
		err := ValidateSlotName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateSlotName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && terr.CodeOf(err) != terr.Validation {
			t.Errorf("code %s, want validation", terr.CodeOf(err))
		}
	}
}

func TestPublication(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, pgtest.NewDatabase(t))
	exec(t, conn, `CREATE SCHEMA "Odd Schema";
		CREATE TABLE a (id int PRIMARY KEY);
		CREATE TABLE "Odd Schema"."B t" (id int PRIMARY KEY);
		CREATE TABLE c (id int PRIMARY KEY)`)
	const pub = `Trellis "pub"`

	created, err := EnsurePublication(ctx, conn, pub)
	if err != nil || !created {
		t.Fatalf("EnsurePublication = %v, %v", created, err)
	}
	if created, err = EnsurePublication(ctx, conn, pub); err != nil || created {
		t.Fatalf("second EnsurePublication = %v, %v", created, err)
	}
	var viaRoot, trunc bool
	if err := conn.QueryRow(ctx, `SELECT pubviaroot, pubtruncate FROM pg_publication WHERE pubname = $1`, pub).Scan(&viaRoot, &trunc); err != nil {
		t.Fatal(err)
	}
	if !viaRoot || !trunc {
		t.Errorf("pubviaroot=%v pubtruncate=%v", viaRoot, trunc)
	}
	// Options drift is repaired.
	exec(t, conn, `ALTER PUBLICATION "Trellis ""pub""" SET (publish = 'insert', publish_via_partition_root = false)`)
	if _, err := EnsurePublication(ctx, conn, pub); err != nil {
		t.Fatal(err)
	}
	var upd bool
	if err := conn.QueryRow(ctx, `SELECT pubviaroot, pubupdate FROM pg_publication WHERE pubname = $1`, pub).Scan(&viaRoot, &upd); err != nil {
		t.Fatal(err)
	}
	if !viaRoot || !upd {
		t.Errorf("options not repaired: pubviaroot=%v pubupdate=%v", viaRoot, upd)
	}

	a, b, c := pgx.Identifier{"public", "a"}, pgx.Identifier{"Odd Schema", "B t"}, pgx.Identifier{"c"}
	steps := []struct {
		name    string
		add     bool
		tables  []pgx.Identifier
		want    []pgx.Identifier
		errCode terr.Code
	}{
		{"add two", true, []pgx.Identifier{a, b}, []pgx.Identifier{b, a}, ""},
		{"add again, plus one unqualified", true, []pgx.Identifier{a, b, c}, []pgx.Identifier{b, a, {"public", "c"}}, ""},
		{"add a missing table", true, []pgx.Identifier{{"nope"}}, []pgx.Identifier{b, a, {"public", "c"}}, terr.NotFound},
		{"drop one, and one not in it", false, []pgx.Identifier{a, {"nope"}}, []pgx.Identifier{b, {"public", "c"}}, ""},
		{"drop again", false, []pgx.Identifier{a, b, c}, nil, ""},
	}
	for _, st := range steps {
		var err error
		if st.add {
			err = AddTables(ctx, conn, pub, st.tables)
		} else {
			err = DropTables(ctx, conn, pub, st.tables)
		}
		if st.errCode == "" && err != nil || st.errCode != "" && terr.CodeOf(err) != st.errCode {
			t.Fatalf("%s: err %v, want code %q", st.name, err, st.errCode)
		}
		got, err := PublishedTables(ctx, conn, pub)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, st.want, slices.Equal) {
			t.Errorf("%s: published %v, want %v", st.name, got, st.want)
		}
	}
	if _, err := PublishedTables(ctx, conn, "nope"); terr.CodeOf(err) != terr.NotFound {
		t.Errorf("PublishedTables of a missing publication: %v", err)
	}
	if err := AddTables(ctx, conn, "nope", []pgx.Identifier{a}); terr.CodeOf(err) != terr.NotFound {
		t.Errorf("AddTables to a missing publication: %v", err)
	}

	exec(t, conn, `CREATE PUBLICATION everything FOR ALL TABLES`)
	if _, err := EnsurePublication(ctx, conn, "everything"); terr.CodeOf(err) != terr.Conflict {
		t.Errorf("FOR ALL TABLES publication accepted: %v", err)
	}
}

func TestSlot(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, pgtest.NewDatabase(t))

	info, err := SlotInfo(ctx, conn, "s")
	if err != nil || info.Exists {
		t.Fatalf("SlotInfo of a missing slot: %+v, %v", info, err)
	}
	created, lsn, err := EnsureSlot(ctx, conn, "s")
	if err != nil || !created || lsn == 0 {
		t.Fatalf("EnsureSlot = %v %s %v", created, lsn, err)
	}
	created, lsn2, err := EnsureSlot(ctx, conn, "s")
	if err != nil || created || lsn2 != lsn {
		t.Fatalf("second EnsureSlot = %v %s %v, want existing at %s", created, lsn2, err, lsn)
	}
	info, err = SlotInfo(ctx, conn, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Exists || info.Active || info.ActivePID != 0 || info.Plugin != "pgoutput" || info.SlotType != "logical" ||
		info.ConfirmedFlush != lsn || info.RestartLSN == 0 || info.RestartLSN > lsn || info.WALStatus != "reserved" ||
		info.SafeWALSize != -1 || info.ConfirmLagBytes < 0 || info.RetainedWALBytes < 0 {
		t.Errorf("SlotInfo = %+v", info)
	}

	exec(t, conn, `SELECT pg_create_logical_replication_slot('other', 'test_decoding')`)
	if _, _, err := EnsureSlot(ctx, conn, "other"); terr.CodeOf(err) != terr.Conflict {
		t.Errorf("EnsureSlot on a test_decoding slot: %v", err)
	}
	if _, _, err := EnsureSlot(ctx, conn, "Bad-Name"); terr.CodeOf(err) != terr.Validation {
		t.Errorf("EnsureSlot with a bad name: %v", err)
	}

	for _, slot := range []string{"s", "other", "s"} { // the second "s" is a no-op
		if err := DropSlot(ctx, conn, slot); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := SlotInfo(ctx, conn, "s"); err != nil || info.Exists {
		t.Errorf("slot still there: %+v %v", info, err)
	}
}

// TestAwaitSlotBeingCreated: a slot that another session is still creating
// (a runner killed in pg_create_logical_replication_slot leaves its backend
// finishing it) is listed without a confirmed position; AwaitSlot and
// EnsureSlot wait for its consistent point instead of reporting 0.
func TestAwaitSlotBeingCreated(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	holder, creator, conn := connect(t, dsn), connect(t, dsn), connect(t, dsn)
	exec(t, conn, `CREATE TABLE held (id int PRIMARY KEY)`)
	// An open transaction with an xid keeps the creation from reaching
	// its consistent point.
	exec(t, holder, `BEGIN`)
	exec(t, holder, `INSERT INTO held VALUES (1)`)
	created := make(chan string, 1)
	go func() {
		var lsn string
		if err := creator.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot('s', 'pgoutput')`).Scan(&lsn); err != nil {
			lsn = "error: " + err.Error()
		}
		created <- lsn
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := SlotInfo(ctx, conn, "s")
		if err != nil {
			t.Fatal(err)
		}
		if info.Exists {
			if info.ConfirmedFlush != 0 || !info.Active {
				t.Fatalf("slot being created: %+v, want active without a confirmed position", info)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot being created never appeared in pg_replication_slots")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A cancelled query closes its connection: use one of its own.
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, lsn, err := EnsureSlot(short, connect(t, dsn), "s")
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("EnsureSlot while the slot is being created = %s, %v; want it to wait (deadline exceeded)", lsn, err)
	}

	type result struct {
		info Slot
		err  error
	}
	got := make(chan result, 1)
	go func() {
		info, err := AwaitSlot(ctx, conn, "s")
		got <- result{info, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("AwaitSlot returned before the creation ended: %+v, %v", r.info, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	exec(t, holder, `COMMIT`)
	want := <-created
	r := <-got
	if r.err != nil || !r.info.Exists || r.info.ConfirmedFlush.String() != want {
		t.Fatalf("AwaitSlot = %+v, %v; want the created slot at %s", r.info, r.err, want)
	}
	if created, lsn, err := EnsureSlot(ctx, conn, "s"); err != nil || created || lsn.String() != want {
		t.Fatalf("EnsureSlot after the creation = %v %s %v, want existing at %s", created, lsn, err, want)
	}
	if err := DropSlot(ctx, conn, "s"); err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	conn := connect(t, dsn)
	a, err := Check(ctx, conn, WithSlot("s"), WithPublication("p"), WithReplicationProbe(dsn))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Possible() || a.Reason() != "" || a.WALLevel != "logical" || !a.ReplicationPrivilege || a.FreeReplicationSlots <= 0 {
		t.Errorf("test server should allow logical capture: %+v: %s", a, a.Reason())
	}

	// A role without REPLICATION cannot open a replication connection.
	exec(t, conn, `CREATE ROLE plain LOGIN`)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `DROP ROLE plain`)
	})
	plainDSN := strings.Replace(dsn, "postgres@", "plain@", 1)
	plain := connect(t, plainDSN)
	a, err = Check(ctx, plain, WithReplicationProbe(plainDSN))
	if err != nil {
		t.Fatal(err)
	}
	if a.Possible() || !strings.Contains(a.Reason(), "REPLICATION attribute") || a.ReplicationConnError == "" {
		t.Errorf("plain role: %+v: %s", a, a.Reason())
	}
	t.Log(a.Reason())
}

func TestAvailabilityReason(t *testing.T) {
	ok := Availability{ServerVersion: 150018, WALLevel: "logical", Role: "app", ReplicationPrivilege: true,
		CanCreatePublication: true, MaxReplicationSlots: 10, FreeReplicationSlots: 3, MaxWALSenders: 10, FreeWALSenders: 5}
	cases := []struct {
		name   string
		modify func(*Availability)
		want   []string // substrings; none = possible
	}{
		{"all fine", func(*Availability) {}, nil},
		{"wal_level", func(a *Availability) { a.WALLevel = "replica" }, []string{`wal_level is "replica"`}},
		{"standby", func(a *Availability) { a.InRecovery = true }, []string{"standby"}},
		{"no replication attribute", func(a *Availability) { a.ReplicationPrivilege = false }, []string{`ALTER ROLE "app" REPLICATION`}},
		{"no free slot", func(a *Availability) { a.FreeReplicationSlots = 0 }, []string{"max_replication_slots"}},
		{"no free slot but ours exists", func(a *Availability) { a.FreeReplicationSlots = 0; a.SlotExists = true }, nil},
		{"no walsender", func(a *Availability) { a.FreeWALSenders = 0 }, []string{"max_wal_senders"}},
		{"no CREATE", func(a *Availability) { a.CanCreatePublication = false }, []string{"GRANT CREATE"}},
		{"no CREATE, publication exists", func(a *Availability) { a.CanCreatePublication = false; a.PublicationExists = true }, nil},
		{"old server", func(a *Availability) { a.ServerVersion = 120005 }, []string{"PostgreSQL 12"}},
		{"probe failed", func(a *Availability) { a.ReplicationConnError = "no pg_hba.conf entry" }, []string{"pg_hba"}},
		{"several", func(a *Availability) { a.WALLevel = "minimal"; a.FreeWALSenders = 0 }, []string{"wal_level", "max_wal_senders"}},
	}
	for _, tc := range cases {
		a := ok
		tc.modify(&a)
		r := a.Reason()
		if (r == "") != (len(tc.want) == 0) || a.Possible() != (r == "") {
			t.Errorf("%s: Reason() = %q", tc.name, r)
		}
		for _, w := range tc.want {
			if !strings.Contains(r, w) {
				t.Errorf("%s: Reason() = %q, want it to mention %q", tc.name, r, w)
			}
		}
	}
}

func TestClassify(t *testing.T) {
	pg := func(code, msg string) error {
		return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code, Message: msg})
	}
	cases := []struct {
		name string
		err  error
		lost LostKind // "" = not a SlotLostError
		perm bool     // any permanent error
	}{
		{"slot missing", pg("42704", `replication slot "s" does not exist`), SlotMissing, true},
		{"publication missing", pg("42704", `publication "p" does not exist`), PublicationMissing, true},
		{"slot invalidated", pg("55000", `cannot read from logical replication slot "s"`), SlotInvalidated, true},
		{"slot invalidated, PG16 wording", pg("55000", `can no longer get changes from replication slot "s"`), SlotInvalidated, true},
		{"wal_level", pg("55000", `logical decoding requires wal_level >= logical`), "", true},
		{"no replication attribute", pg("42501", `must be superuser or replication role to start walsender`), "", true},
		{"pg_hba", pg("28000", `no pg_hba.conf entry`), "", true},
		{"bad setting in DSN", pg("42704", `unrecognized configuration parameter "x"`), "", true},
		{"slot active", pg("55006", `replication slot "s" is active for PID 42`), "", false},
		{"too many walsenders", pg("53300", `number of requested standby connections exceeds max_wal_senders`), "", false},
		{"terminated", pg("57P01", `terminating connection due to administrator command`), "", false},
		{"network", errors.New("read tcp: connection reset by peer"), "", false},
		{"already typed", &SlotLostError{Kind: SlotMissing}, SlotMissing, true},
	}
	for _, tc := range cases {
		got := classify(tc.err, "s", "p")
		if (got != nil) != tc.perm {
			t.Errorf("%s: classify = %v, want permanent=%v", tc.name, got, tc.perm)
			continue
		}
		var lost *SlotLostError
		isLost := errors.As(got, &lost)
		if isLost != (tc.lost != "") || isLost && lost.Kind != tc.lost {
			t.Errorf("%s: classify = %v, want lost kind %q", tc.name, got, tc.lost)
		}
		if got != nil && !isLost {
			var un *UnavailableError
			if !errors.As(got, &un) {
				t.Errorf("%s: classify = %T, want *UnavailableError", tc.name, got)
			}
		}
	}
}

func TestStatusInterval(t *testing.T) {
	cases := []struct{ configured, timeout, want time.Duration }{
		{time.Second, time.Minute, time.Second},
		{time.Second, 0, time.Second},
		{time.Second, 2 * time.Second, 2 * time.Second / 3},
		{30 * time.Second, time.Minute, 20 * time.Second},
		{time.Second, time.Millisecond, time.Millisecond},
	}
	for _, tc := range cases {
		if got := statusInterval(tc.configured, tc.timeout); got != tc.want {
			t.Errorf("statusInterval(%s, %s) = %s, want %s", tc.configured, tc.timeout, got, tc.want)
		}
	}
}

func TestEncodeStatus(t *testing.T) {
	now := time.Date(2000, 1, 1, 0, 0, 1, 0, time.UTC)
	buf := encodeStatus(0x30, 0x20, 0x10, now)
	want := []byte{'d', 0, 0, 0, 38, 'r',
		0, 0, 0, 0, 0, 0, 0, 0x30,
		0, 0, 0, 0, 0, 0, 0, 0x20,
		0, 0, 0, 0, 0, 0, 0, 0x10,
		0, 0, 0, 0, 0, 0x0f, 0x42, 0x40, // 1s in microseconds
		0}
	if !slices.Equal(buf, want) {
		t.Errorf("encodeStatus = %v\nwant %v", buf, want)
	}
}

// TestFenceWaitsForWriters: Fence returns only once every transaction that
// held an xid when it was called has ended — including one that took its
// xid after the publishing transaction's own.
func TestFenceWaitsForWriters(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	publisher, writer, conn := connect(t, dsn), connect(t, dsn), connect(t, dsn)
	exec(t, conn, `CREATE TABLE f (id int PRIMARY KEY)`)
	exec(t, conn, `CREATE PUBLICATION fp`)
	exec(t, publisher, `BEGIN`)
	exec(t, publisher, `ALTER PUBLICATION fp ADD TABLE f`) // takes its xid first
	exec(t, writer, `BEGIN`)
	exec(t, writer, `INSERT INTO f VALUES (1)`) // a later xid, before the commit
	exec(t, publisher, `COMMIT`)
	done := make(chan error, 1)
	go func() { done <- Fence(ctx, conn) }()
	select {
	case err := <-done:
		t.Fatalf("Fence returned while a writer that wrote before the publication's commit is open: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	exec(t, writer, `COMMIT`)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fence did not return after the writer committed")
	}
}
