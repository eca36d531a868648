package generative

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Capture modes in programs (ADR 0012): the mode a program starts in and
// its switches are drawn from a stream of their own, the capture stream,
// so that a program in logical mode without a switch is what its seed drew
// before modes existed.

// captureSalt seeds the capture stream. It is chosen so that the fast
// lane's fixed cases that predate capture modes still draw logical mode
// and no switch (TestFastLaneCaptureDraws), and keep catching the planted
// bugs of the slot they were chosen for.
const captureSalt = 0x63618098

// drawCapture draws the mode the program starts in: the profile's, or
// trigger one time in three.
func (g *gen) drawCapture() string {
	g.mode = g.prof.Capture
	if g.mode == "" {
		g.mode = CaptureLogical
		if g.cr.IntN(3) == 0 {
			g.mode = CaptureTrigger
		}
	}
	return g.mode
}

// switchPlan draws after which body events (of n) the program switches
// capture mode: none, one, or (a quarter of those that do) two.
func (g *gen) switchPlan(n int) []int {
	if g.cr.IntN(100) >= g.prof.Switch {
		return nil
	}
	out := []int{g.cr.IntN(n)}
	if g.cr.IntN(4) == 0 {
		out = append(out, g.cr.IntN(n))
	}
	return out
}

// switchSteps switches to the other capture mode: on its own now and
// then, usually in a control lane while writer lanes keep committing
// (fresh rows nothing later re-touches, and ordinary transactions) across
// the stop, the switch's overlap of the two paths and the start; the
// runner is crashed rather than stopped one time in four. Drawn from the
// capture stream.
func (g *gen) switchSteps() []Step {
	cr := g.cr
	to := CaptureTrigger
	if g.mode == CaptureTrigger {
		to = CaptureLogical
	}
	g.mode = to
	sw := Step{Kind: StepSwitch, Mode: to, Crash: cr.IntN(4) == 0}
	if cr.IntN(4) == 0 {
		return []Step{sw}
	}
	saved := g.ops.r
	g.ops.r = cr
	defer func() { g.ops.r = saved }()
	cands := g.bulkTables()
	s := Step{Kind: StepConcurrent}
	for i := 1 + cr.IntN(2); i > 0; i-- {
		var lane []Step
		for j := 6 + cr.IntN(10); j > 0; j-- {
			if len(cands) > 0 && cr.IntN(3) > 0 {
				lane = append(lane, g.freshBulk(cands[cr.IntN(len(cands))], 10+cr.IntN(150)))
			} else {
				lane = append(lane, g.ops.txn())
			}
			if cr.IntN(3) == 0 {
				lane = append(lane, Step{Kind: StepWait, Arg: 20 + cr.IntN(120)})
			}
		}
		s.Lanes = append(s.Lanes, lane)
	}
	s.Lanes = append(s.Lanes, []Step{{Kind: StepWait, Arg: 50 + cr.IntN(300)}, sw})
	out := []Step{s}
	if cr.IntN(2) == 0 {
		out = append(out, Step{Kind: StepCheck})
	}
	return out
}

// heldTrigger is a held transaction in trigger mode: it holds its commit
// in flight (or, half the time, the transaction open) for more than a
// second, so that the drain runs and the capture ring rotates meanwhile,
// while a writer lane commits fresh rows and ordinary transactions into
// the same log partition after it. A drain that cut the log by position
// (the planted drain_skips_open_txn) would then skip the held rows when
// they commit; the check right after finds them missing before anything
// re-touches them.
func (g *gen) heldTrigger(held Step) []Step {
	r := g.r
	held.Arg = 1100 + r.IntN(700)
	held.Open = r.IntN(2) == 0
	cands := g.bulkTables()
	// The writer starts once the held statements ran (a held commit first
	// reconfigures the server); fresh rows, when a transform reads a table
	// that takes them, never wait for the held transaction's locks.
	writer := []Step{{Kind: StepWait, Arg: 250 + r.IntN(150)}}
	for i := 4 + r.IntN(4); i > 0; i-- {
		if len(cands) > 0 {
			writer = append(writer, g.freshBulk(cands[r.IntN(len(cands))], 2+r.IntN(30)))
		} else {
			writer = append(writer, g.ops.txn())
		}
		writer = append(writer, Step{Kind: StepWait, Arg: 60 + r.IntN(120)})
	}
	return []Step{{Kind: StepConcurrent, Lanes: [][]Step{{held}, writer}}, {Kind: StepCheck}}
}

// switchMode stops (or crashes) the runner, starts it again in the step's
// capture mode and waits until the switch is done.
func (r *run) switchMode(ctx context.Context, path string, s Step) *Failure {
	how := "stop"
	if s.Crash {
		how = "crash"
	}
	r.logf("step %s: switch capture to %s (%s the runner)", path, s.Mode, how)
	r.sup.stop(!s.Crash)
	if s.Crash {
		r.logPositions(ctx)
	}
	r.mu.Lock()
	r.fromTrigger = r.fromTrigger || r.mode == CaptureTrigger && s.Mode == CaptureLogical
	r.mode = s.Mode
	r.mu.Unlock()
	r.sup.start()
	return r.awaitCapture(ctx, path, switchTimeout)
}

// switchTimeout bounds how long a switch may take to leave the catalog as
// its mode requires; captureSettle how long a check waits for it.
const (
	switchTimeout = 60 * time.Second
	captureSettle = 15 * time.Second
)

// awaitCapture waits until the catalog shows the run's capture mode and
// nothing of the other (captureState), and fails the program otherwise.
func (r *run) awaitCapture(ctx context.Context, path string, within time.Duration) *Failure {
	deadline := time.Now().Add(within)
	var msg string
	for {
		conn, err := connectRetry(ctx, r.dsn)
		if err == nil {
			msg, err = captureState(ctx, conn, r.captureMode())
			conn.Close(context.WithoutCancel(ctx))
		}
		if err != nil {
			msg = err.Error()
		} else if msg == "" {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return &Failure{Kind: "capture", Step: path, Msg: fmt.Sprintf("capture mode %s not in place after %v: %s", r.captureMode(), within, msg)}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// captureState checks with catalog queries that capture is in mode: the
// instance records it, and in trigger mode no replication slot of the
// database is left, in logical mode no capture trigger on any table. It
// returns what is wrong, "" when nothing is.
func captureState(ctx context.Context, conn *pgx.Conn, mode string) (string, error) {
	var recorded, slots, triggers string
	err := conn.QueryRow(ctx, `SELECT
		coalesce((SELECT capture_mode FROM trellis.instance WHERE id = 1), ''),
		coalesce((SELECT string_agg(slot_name, ', ') FROM pg_replication_slots WHERE database = current_database()), ''),
		coalesce((SELECT string_agg(tgrelid::regclass::text || '.' || tgname, ', ') FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'trellis\_%'), '')`).
		Scan(&recorded, &slots, &triggers)
	if err != nil {
		return "", fmt.Errorf("read the capture state: %w", err)
	}
	var problems []string
	if recorded != mode {
		problems = append(problems, fmt.Sprintf("the instance records capture mode %q", recorded))
	}
	if mode == CaptureTrigger && slots != "" {
		problems = append(problems, "replication slots left: "+slots)
	}
	if mode == CaptureLogical && triggers != "" {
		problems = append(problems, "capture triggers left: "+triggers)
	}
	return strings.Join(problems, "; "), nil
}
