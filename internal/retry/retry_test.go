package retry

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	var b Backoff
	var got []time.Duration
	for i := 0; i < 9; i++ {
		got = append(got, b.Next())
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("after Reset: %v", d)
	}
}

// TestEpisode: many failures log one warning, the recovery one info line,
// and a second episode warns again.
func TestEpisode(t *testing.T) {
	var buf bytes.Buffer
	e := NewEpisode(slog.New(slog.NewTextHandler(&buf, nil)), "lost it", "got it back")
	e.Recover() // no episode: nothing
	for i := 0; i < 5; i++ {
		e.Fail(errors.New("boom"), time.Second)
	}
	if !e.Down() {
		t.Fatal("not down after failures")
	}
	e.Recover()
	e.Recover()
	e.Fail(errors.New("again"), time.Second)
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Errorf("%d warnings, want 2 (one per episode):\n%s", n, out)
	}
	if n := strings.Count(out, `msg="got it back"`); n != 1 || !strings.Contains(out, "failed_attempts=5") {
		t.Errorf("recovery lines:\n%s", out)
	}
	e.Recover()
	buf.Reset()
	e.Note()
	e.Note()
	if !e.Down() {
		t.Fatal("not down after noted failures")
	}
	e.Recover()
	if buf.Len() != 0 {
		t.Errorf("an episode reported elsewhere logged:\n%s", buf.String())
	}
}
