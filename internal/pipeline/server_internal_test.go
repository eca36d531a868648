package pipeline

import (
	"strings"
	"testing"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
)

// TestClassifyServer walks every case of ADR 0039's table: which server
// change the recorded identity, the current one, the timeline history and
// the store's newest position make, and what its sentence says.
func TestClassifyServer(t *testing.T) {
	base := catalog.Server{SystemID: "7001", Timeline: 1, DatabaseOID: 16384, Database: "app", Version: 150004, InsertLSN: "0/5000000"}
	with := func(f func(*catalog.Server)) catalog.Server {
		s := base
		f(&s)
		return s
	}
	lsn := func(s string) uint64 {
		v, err := catalog.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name    string
		f       serverFacts
		kind    string // "" : no change
		says    []string
		copied  bool
		timelin bool
	}{
		{name: "nothing recorded, store behind", f: serverFacts{cur: base, stored: lsn("0/4000000")}},
		{name: "nothing recorded, nothing stored", f: serverFacts{cur: base}},
		{name: "same server", f: serverFacts{cur: base, rec: &base, stored: lsn("0/5000000")}},
		{name: "same server, recorded earlier", f: serverFacts{cur: base, rec: ptr(with(func(s *catalog.Server) { s.InsertLSN = "0/100" }))}},
		{name: "renamed database", f: serverFacts{cur: with(func(s *catalog.Server) { s.Database = "app2" }), rec: &base}},
		{
			name: "upgrade", kind: ChangeUpgraded, copied: true,
			f:    serverFacts{cur: with(func(s *catalog.Server) { s.SystemID, s.Version = "7002", 170002 }), rec: &base},
			says: []string{"upgraded (PostgreSQL 15 → 17", "7001 → 7002"},
		},
		{
			name: "restore into another cluster", kind: ChangeCopiedCluster, copied: true,
			f:    serverFacts{cur: with(func(s *catalog.Server) { s.SystemID = "7003" }), rec: &base, stored: lsn("9/0")},
			says: []string{"copied into another cluster", "7001 → 7003"},
		},
		{
			name: "restore into another database", kind: ChangeCopiedDatabase, copied: true,
			f:    serverFacts{cur: with(func(s *catalog.Server) { s.DatabaseOID, s.Database = 20000, "copy" }), rec: &base},
			says: []string{"copied into another database", `"app", oid 16384 → "copy", oid 20000`},
		},
		{
			name: "promoted standby, history unreadable, store behind", kind: ChangePromoted, timelin: true,
			f:    serverFacts{cur: with(func(s *catalog.Server) { s.Timeline = 2 }), rec: &base, stored: lsn("0/4000000")},
			says: []string{"the primary changed (promoted standby, timeline 1 → 2)"},
		},
		{
			name: "promoted standby that had not received the old primary's last WAL", kind: ChangePromoted, timelin: true,
			f: serverFacts{cur: with(func(s *catalog.Server) { s.Timeline = 2 }), rec: &base, stored: lsn("0/4800000"),
				sw: &timelineSwitch{At: lsn("0/4000000"), Reason: "no recovery target specified"}},
			says: []string{"promoted standby, timeline 1 → 2", "up to 0/4800000, past 0/4000000", "lost with the old primary"},
		},
		{
			name: "point-in-time restore, history readable", kind: ChangeRestored, timelin: true,
			f: serverFacts{cur: with(func(s *catalog.Server) { s.Timeline = 3 }), rec: ptr(with(func(s *catalog.Server) { s.Timeline = 2 })),
				sw: &timelineSwitch{At: lsn("0/3000000"), Reason: "before 0/3000028"}},
			says: []string{"restored to an earlier point (point-in-time recovery, timeline 2 → 3", "recovery stopped before 0/3000028"},
		},
		{
			name: "point-in-time restore, history unreadable: the store holds a future", kind: ChangeRestored, timelin: true,
			f:    serverFacts{cur: with(func(s *catalog.Server) { s.Timeline = 2 }), rec: &base, stored: lsn("0/9000000")},
			says: []string{"point-in-time recovery, timeline 1 → 2", "up to 0/9000000, past 0/5000000"},
		},
		{
			name: "older timeline", kind: ChangeOlderCopy, timelin: true,
			f:    serverFacts{cur: base, rec: ptr(with(func(s *catalog.Server) { s.Timeline = 2 }))},
			says: []string{"on timeline 1", "last ran on timeline 2", "old primary after a failover"},
		},
		{
			name: "a sibling timeline: not in the history", kind: ChangeOlderCopy, timelin: true,
			f:    serverFacts{cur: with(func(s *catalog.Server) { s.Timeline = 3 }), rec: ptr(with(func(s *catalog.Server) { s.Timeline = 2 })), ancient: true},
			says: []string{"timeline 3", "timeline 2, which is not in its history"},
		},
		{
			name: "same timeline, recorded past the server's WAL", kind: ChangeRewound,
			f:    serverFacts{cur: base, rec: ptr(with(func(s *catalog.Server) { s.InsertLSN = "0/6000000" }))},
			says: []string{"behind where the runner last started", "0/5000000", "0/6000000"},
		},
		{
			name: "same timeline, the store past the server's WAL", kind: ChangeRewound,
			f:    serverFacts{cur: base, rec: &base, stored: lsn("0/5000001")},
			says: []string{"behind what the runner had received (up to 0/5000001; this server's WAL is at 0/5000000)"},
		},
		{
			name: "nothing recorded, the store past the server's WAL", kind: ChangeRewound,
			f:    serverFacts{cur: base, stored: lsn("1/0")},
			says: []string{"up to 1/0"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classifyServer(c.f)
			if c.kind == "" {
				if got != nil {
					t.Fatalf("classifyServer = %+v, want no change", got)
				}
				return
			}
			if got == nil || got.Kind != c.kind {
				t.Fatalf("classifyServer = %+v, want kind %s", got, c.kind)
			}
			for _, w := range c.says {
				if !strings.Contains(got.Sentence, w) {
					t.Errorf("sentence %q does not say %q", got.Sentence, w)
				}
			}
			if got.Copied() != c.copied || got.NewTimeline() != c.timelin {
				t.Errorf("Copied=%v NewTimeline=%v, want %v %v", got.Copied(), got.NewTimeline(), c.copied, c.timelin)
			}
		})
	}
	var none *ServerChange
	if none.Copied() || none.NewTimeline() {
		t.Error("a nil change reports a copy or a timeline")
	}
}

func ptr(s catalog.Server) *catalog.Server { return &s }

// TestParseHistory reads the switch point and reason of a timeline from a
// history file as PostgreSQL writes it.
func TestParseHistory(t *testing.T) {
	file := "1\t0/3000158\tno recovery target specified\n\n2\t0/5000A0\tbefore 0/5000A0\n# a comment\n"
	for _, c := range []struct {
		from   uint32
		ok     bool
		at     string
		reason string
	}{
		{1, true, "0/3000158", "no recovery target specified"},
		{2, true, "0/5000A0", "before 0/5000A0"},
		{3, false, "", ""},
	} {
		sw, ok := parseHistory(file, c.from)
		if ok != c.ok {
			t.Fatalf("timeline %d: ok = %v", c.from, ok)
		}
		if !ok {
			continue
		}
		if catalog.FormatLSN(sw.At) != c.at || sw.Reason != c.reason {
			t.Errorf("timeline %d: %s %q, want %s %q", c.from, catalog.FormatLSN(sw.At), sw.Reason, c.at, c.reason)
		}
	}
	if _, ok := parseHistory("2\tnot-an-lsn\tx\n", 2); ok {
		t.Error("a malformed switch point was read")
	}
}
