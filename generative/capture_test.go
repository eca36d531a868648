package generative

import (
	"reflect"
	"strings"
	"testing"
)

// captureFeatures names what a program draws of capture modes: the mode it
// starts in, switches to each mode (and within concurrent writers, and by
// a crash), and held transactions in trigger mode (commits in flight and
// open transactions, with writers committing meanwhile).
func captureFeatures(p *Program) map[string]bool {
	out := map[string]bool{"start " + p.Config.Capture: true}
	mode := p.Config.Capture
	var walk func(ss []Step, lane bool)
	walk = func(ss []Step, lane bool) {
		for _, s := range ss {
			switch s.Kind {
			case StepSwitch:
				out["switch to "+s.Mode] = true
				if lane {
					out["switch with writers"] = true
				}
				if s.Crash {
					out["switch by crash"] = true
				}
				mode = s.Mode
			case StepHeld:
				if mode == CaptureTrigger && lane && s.Arg > 1000 {
					if s.Open {
						out["trigger held open"] = true
					} else {
						out["trigger held commit"] = true
					}
				}
			case StepLoseStore:
				if mode == CaptureTrigger {
					out["trigger lose-store"] = true
				}
			}
			for _, l := range s.Lanes {
				walk(l, true)
			}
		}
	}
	walk(p.Steps, false)
	return out
}

var captureFeatureNames = []string{"start logical", "start trigger", "switch to logical", "switch to trigger",
	"switch with writers", "switch by crash", "trigger held open", "trigger held commit", "trigger lose-store"}

// TestCapturePrograms: across seeds, programs start in both modes (about
// a third in trigger mode outside profile "trigger"), switch both ways
// (with writers, by a crash), hold transactions in trigger mode and lose
// the store there; the fast lane's fixed cases start in trigger mode,
// switch both ways and hold transactions in trigger mode.
func TestCapturePrograms(t *testing.T) {
	all := map[string]bool{}
	trig, n := 0, 0
	for _, prof := range Profiles() {
		for seed := int64(0); seed < 30; seed++ {
			p := Generate(seed, prof)
			for f := range captureFeatures(p) {
				all[f] = true
			}
			if prof.Capture == "" {
				n++
				if p.Config.Capture == CaptureTrigger {
					trig++
				}
			}
		}
	}
	for _, f := range captureFeatureNames {
		if !all[f] {
			t.Errorf("no program has %s", f)
		}
	}
	if trig*5 < n || trig*2 > n {
		t.Errorf("%d of %d programs start in trigger mode; want about a third", trig, n)
	}
	lane := map[string]bool{}
	for _, c := range FastLaneCases() {
		p, err := c.Program()
		if err != nil {
			t.Fatal(err)
		}
		for f := range captureFeatures(p) {
			lane[f] = true
		}
	}
	for _, f := range []string{"start trigger", "switch to logical", "switch to trigger", "switch with writers", "trigger held open", "trigger held commit"} {
		if !lane[f] {
			t.Errorf("the fast lane's fixed cases have no %s", f)
		}
	}
}

// TestFastLaneCaptureDraws: the fixed cases that predate capture modes
// still run in logical mode without a switch, so they draw what they drew
// and catch the planted bugs of the slot they were chosen for.
func TestFastLaneCaptureDraws(t *testing.T) {
	for _, c := range FastLaneCases() {
		if c.Profile == "trigger" {
			continue
		}
		p, err := c.Program()
		if err != nil {
			t.Fatal(err)
		}
		f := captureFeatures(p)
		if p.Config.Capture != CaptureLogical || f["switch to trigger"] || f["switch to logical"] {
			t.Errorf("%s: capture %s, features %v: the capture stream changed a fixed case", c, p.Config.Capture, f)
		}
	}
}

func TestCaptureFormatParse(t *testing.T) {
	text := `@config confirm=applied runner=cli batch=0 stream=false capture=trigger
@start
@concurrent
  @lane
    @held 1200 open
      INSERT INTO s0 (c0) VALUES (1);
  @lane
    @wait 100
    @switch logical crash
@end
@switch trigger
@check
`
	p, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if p.Config.Capture != CaptureTrigger {
		t.Fatalf("capture = %q", p.Config.Capture)
	}
	held := p.Steps[1].Lanes[0][0]
	sw := p.Steps[1].Lanes[1][1]
	want := Step{Kind: StepSwitch, Mode: CaptureLogical, Crash: true}
	if !held.Open || held.Arg != 1200 || !reflect.DeepEqual(sw, want) || p.Steps[2].Mode != CaptureTrigger || p.Steps[2].Crash {
		t.Fatalf("parsed %+v, %+v, %+v", held, sw, p.Steps[2])
	}
	q, err := Parse(p.Format())
	if err != nil || q.Format() != p.Format() {
		t.Fatalf("round trip: %v\n%s\n----\n%s", err, p.Format(), q.Format())
	}
	if !strings.Contains(p.Format(), "@switch logical crash\n") || !strings.Contains(p.Format(), "@held 1200 open\n") {
		t.Fatalf("format:\n%s", p.Format())
	}
	// A file written before capture modes reads as logical.
	if old, err := Parse("@config confirm=local runner=inproc batch=0 stream=false\n@check\n"); err != nil || old.Config.Capture != CaptureLogical {
		t.Fatalf("old config: %v, %+v", err, old)
	}
	for _, bad := range []string{"@switch", "@switch sideways", "@config capture=auto", "@kill 3 trigger"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}
