package capture

import (
	"strings"
	"testing"

	"github.com/trellis-repl/trellis-repl/replication"
)

// TestAfterServerChange judges a slot found on a server that is not the
// one the instance last ran on (ADR 0039): kept without a disruption only
// when it still delivers everything after what every live transform
// applied.
func TestAfterServerChange(t *testing.T) {
	const changed = "the primary changed (promoted standby, timeline 1 → 2)"
	prev := Continuity{Changed: changed, Applied: 1000, AppliedComplete: true}
	slot := replication.Slot{Exists: true, WALStatus: "reserved", ConfirmedFlush: 900}
	cases := []struct {
		name    string
		prev    func(*Continuity)
		slot    func(*replication.Slot)
		disrupt string // "" : none
		restart bool
	}{
		{name: "a failover slot behind every applied position"},
		{name: "at the applied position", slot: func(s *replication.Slot) { s.ConfirmedFlush = 1000 }},
		{name: "builds restart", prev: func(p *Continuity) { p.Building = true }, restart: true},
		{name: "missing", slot: func(s *replication.Slot) { s.Exists = false }, disrupt: `replication slot "s" does not exist on this server (a logical slot is not carried to a promoted standby before PostgreSQL 17`},
		{name: "lost", slot: func(s *replication.Slot) { s.WALStatus = "lost" }, disrupt: "does not exist on this server"},
		{name: "past what was applied", slot: func(s *replication.Slot) { s.ConfirmedFlush = 1001 }, disrupt: "confirmed at 0/3E9, past 0/3E8"},
		{name: "a live transform recorded nothing", prev: func(p *Continuity) { p.AppliedComplete = false }, disrupt: "not every live transform recorded what it applied"},
		{name: "nothing live", prev: func(p *Continuity) { p.Applied = 0 }, disrupt: "cannot say what the transforms missed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, s := prev, slot
			if c.prev != nil {
				c.prev(&p)
			}
			if c.slot != nil {
				c.slot(&s)
			}
			d, restart := afterServerChange(p, "s", s)
			if c.disrupt == "" && d != "" || c.disrupt != "" && !strings.Contains(d, c.disrupt) {
				t.Fatalf("disruption %q, want one saying %q", d, c.disrupt)
			}
			if d != "" && !strings.HasPrefix(d, changed+"; ") {
				t.Errorf("disruption %q does not start with the change", d)
			}
			if restart != c.restart {
				t.Errorf("restart builds = %v, want %v", restart, c.restart)
			}
		})
	}
}
