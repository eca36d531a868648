package generative

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Kind names what a Step does.
type Kind string

// The step kinds. Each renders as one "@kind" directive line in the text
// format; statements follow on their own lines.
const (
	// StepSQL runs its statements one by one, outside any explicit
	// transaction, on the control connection (DDL, setup data).
	StepSQL Kind = "sql"
	// StepApply runs its statements as one definition script (Apply).
	StepApply Kind = "apply"
	// StepStart starts the runner; StepStop stops it gracefully.
	StepStart Kind = "start"
	StepStop  Kind = "stop"
	// StepKill crashes the runner (SIGKILL of the CLI child, or an abrupt
	// cancel in process) and starts it again after Arg milliseconds.
	StepKill Kind = "kill"
	// StepLoseStore crashes the runner, deletes its local checkpoint store
	// and starts it again.
	StepLoseStore Kind = "lose-store"
	// StepRestartPG restarts PostgreSQL (no-op on an external server).
	StepRestartPG Kind = "restart-pg"
	// StepTxn runs its statements in one transaction on a writer session.
	StepTxn Kind = "txn"
	// StepHeld runs its statements in one transaction whose commit is held
	// in flight, as under synchronous replication, for Arg milliseconds
	// after the runner has received it.
	StepHeld Kind = "held"
	// StepConcurrent runs its Lanes at the same time, each on its own
	// session.
	StepConcurrent Kind = "concurrent"
	// StepWait sleeps Arg milliseconds.
	StepWait Kind = "wait"
	// StepStall holds an EXCLUSIVE lock on every target for Arg
	// milliseconds, as a user's long transaction would: appliers wait
	// while changes keep arriving.
	StepStall Kind = "stall"
	// StepCheck waits for convergence and compares every target with its
	// query.
	StepCheck Kind = "check"
	// StepSwitch stops the runner (gracefully, or abruptly with Crash) and
	// starts it again in capture mode Mode, then waits until the switch is
	// done: after a switch to trigger no replication slot is left, after a
	// switch to logical no capture trigger (ADR 0012).
	StepSwitch Kind = "switch"
	// StepDDL runs its statements (ALTER TABLE on a source) with the
	// runner running and checks what the drift watch paused: nothing for
	// Mode "lossless", only capture pauses (then resumed) for "retype"
	// (ddl.go).
	StepDDL Kind = "ddl"
	// StepAlter runs its ALTER TRANSFORM statements (ADR 0041) once each
	// transform is live, and takes each edited definition as the
	// transform's SELECT (alterops.go).
	StepAlter Kind = "alter"
	// StepBackfill runs its REQUEST BACKFILL OF statements (ADR 0040).
	StepBackfill Kind = "backfill"
)

// Step is one element of a program.
type Step struct {
	Kind  Kind
	Stmts []string
	// Arg is a duration in milliseconds (kill, held, wait).
	Arg int
	// AfterConfirm makes a kill or lose-store wait (at most 3s) until the slot's
	// confirmed position advances (the server has processed a standby
	// status update) and crash right then: whatever the runner confirmed
	// must already be durable, and under --confirm=applied applied.
	AfterConfirm bool
	// Rollback ends a txn with ROLLBACK instead of COMMIT.
	Rollback bool
	// NoSavepoints runs a txn's statements without a savepoint each, so one
	// failing statement aborts the whole transaction.
	NoSavepoints bool
	// Open makes a held step hold its transaction open (not its commit in
	// flight) for Arg milliseconds before COMMIT.
	Open bool
	// Mode is the capture mode a switch moves to (logical or trigger).
	Mode string
	// Crash makes a switch crash the runner instead of stopping it.
	Crash bool
	// Lanes are the concurrent sequences of a StepConcurrent.
	Lanes [][]Step
}

// Config is how a program runs the system under test.
type Config struct {
	Confirm string // local or applied
	Runner  string // inproc or cli
	// Batch is Config.BatchSize for an in-process runner (0 = default).
	Batch int
	// Stream lowers logical_decoding_work_mem so the server streams
	// in-progress transactions.
	Stream bool
	// Capture is the capture mode the runner starts in (CaptureLogical or
	// CaptureTrigger; "" in a file written before modes existed reads as
	// logical). A StepSwitch changes it for the rest of the program.
	Capture string
}

// Capture modes of a program (trellis.CaptureLogical, CaptureTrigger).
const (
	CaptureLogical = "logical"
	CaptureTrigger = "trigger"
)

// Runner kinds.
const (
	RunnerInProc = "inproc"
	RunnerCLI    = "cli"
)

// Program is one generated (or replayed) test case.
type Program struct {
	// Seed and Profile say how the program was generated (informational).
	Seed    int64
	Profile string
	// Note is a free comment kept in the text form.
	Note   string
	Config Config
	Steps  []Step
}

// Clone returns a deep copy.
func (p *Program) Clone() *Program {
	q := *p
	q.Steps = cloneSteps(p.Steps)
	return &q
}

func cloneSteps(ss []Step) []Step {
	if ss == nil {
		return nil
	}
	out := make([]Step, len(ss))
	for i, s := range ss {
		out[i] = s
		out[i].Stmts = append([]string(nil), s.Stmts...)
		if s.Lanes != nil {
			out[i].Lanes = make([][]Step, len(s.Lanes))
			for j, l := range s.Lanes {
				out[i].Lanes[j] = cloneSteps(l)
			}
		}
	}
	return out
}

// Ops counts the program's operations: statements plus actions.
func (p *Program) Ops() int { return countOps(p.Steps) }

func countOps(ss []Step) int {
	n := 0
	for _, s := range ss {
		switch s.Kind {
		case StepConcurrent:
			for _, l := range s.Lanes {
				n += countOps(l)
			}
		case StepSQL, StepApply, StepTxn, StepHeld, StepAlter, StepBackfill:
			n += len(s.Stmts)
		case StepWait:
		default:
			n++
		}
	}
	return n
}

// Format renders the program in the regression-file format: directive
// lines "@kind args", each followed by its statements, one per line.
func (p *Program) Format() string {
	var b strings.Builder
	b.WriteString("# trellis-repl generative program\n")
	fmt.Fprintf(&b, "# seed=%d profile=%s ops=%d\n", p.Seed, p.Profile, p.Ops())
	for _, l := range strings.Split(strings.TrimSpace(p.Note), "\n") {
		if l != "" {
			b.WriteString("# " + l + "\n")
		}
	}
	fmt.Fprintf(&b, "@config confirm=%s runner=%s batch=%d stream=%t capture=%s\n", p.Config.Confirm, p.Config.Runner, p.Config.Batch, p.Config.Stream, p.Config.Capture)
	formatSteps(&b, p.Steps, "")
	return b.String()
}

func formatSteps(b *strings.Builder, ss []Step, indent string) {
	for _, s := range ss {
		b.WriteString(indent + "@" + string(s.Kind))
		switch s.Kind {
		case StepKill, StepHeld, StepWait, StepStall:
			fmt.Fprintf(b, " %d", s.Arg)
		case StepSwitch, StepDDL:
			b.WriteString(" " + s.Mode)
		}
		if s.Open {
			b.WriteString(" open")
		}
		if s.Crash {
			b.WriteString(" crash")
		}
		if s.AfterConfirm {
			b.WriteString(" confirmed")
		}
		if s.Rollback {
			b.WriteString(" rollback")
		}
		if s.NoSavepoints {
			b.WriteString(" nosp")
		}
		b.WriteString("\n")
		for _, st := range s.Stmts {
			b.WriteString(indent + "  " + st + ";\n")
		}
		if s.Kind == StepConcurrent {
			for _, l := range s.Lanes {
				b.WriteString(indent + "  @lane\n")
				formatSteps(b, l, indent+"    ")
			}
			b.WriteString(indent + "@end\n")
		}
	}
}

// Parse reads the format Format writes. Statements are single lines ending
// in ';'; lines starting with '#' are comments; indentation is ignored.
func Parse(text string) (*Program, error) {
	p := &Program{Config: Config{Confirm: "local", Runner: RunnerInProc, Capture: CaptureLogical}}
	type frame struct {
		steps *[]Step // where steps are appended
		conc  *Step   // the concurrent step being filled, nil at top level
	}
	stack := []frame{{steps: &p.Steps}}
	var cur *Step
	var notes []string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "#") {
			c := strings.TrimSpace(strings.TrimPrefix(l, "#"))
			if strings.HasPrefix(c, "seed=") {
				for _, f := range strings.Fields(c) {
					k, v, _ := strings.Cut(f, "=")
					switch k {
					case "seed":
						p.Seed, _ = strconv.ParseInt(v, 10, 64)
					case "profile":
						p.Profile = v
					}
				}
			} else if c != "trellis-repl generative program" {
				notes = append(notes, c)
			}
			continue
		}
		if !strings.HasPrefix(l, "@") {
			if cur == nil {
				return nil, fmt.Errorf("line %d: statement outside a step", line)
			}
			switch cur.Kind {
			case StepSQL, StepApply, StepTxn, StepHeld, StepDDL, StepAlter, StepBackfill:
			default:
				return nil, fmt.Errorf("line %d: @%s takes no statements", line, cur.Kind)
			}
			cur.Stmts = append(cur.Stmts, strings.TrimSuffix(l, ";"))
			continue
		}
		f := strings.Fields(l[1:])
		if len(f) == 0 {
			return nil, fmt.Errorf("line %d: empty directive", line)
		}
		top := &stack[len(stack)-1]
		switch f[0] {
		case "config":
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "confirm":
					p.Config.Confirm = v
				case "runner":
					p.Config.Runner = v
				case "batch":
					p.Config.Batch, _ = strconv.Atoi(v)
				case "stream":
					p.Config.Stream = v == "true"
				case "capture":
					if v != CaptureLogical && v != CaptureTrigger {
						return nil, fmt.Errorf("line %d: unknown capture mode %q", line, v)
					}
					p.Config.Capture = v
				default:
					return nil, fmt.Errorf("line %d: unknown config %q", line, k)
				}
			}
			cur = nil
			continue
		case "lane":
			if top.conc == nil {
				return nil, fmt.Errorf("line %d: @lane outside @concurrent", line)
			}
			top.conc.Lanes = append(top.conc.Lanes, nil)
			top.steps = &top.conc.Lanes[len(top.conc.Lanes)-1]
			cur = nil
			continue
		case "end":
			if len(stack) == 1 {
				return nil, fmt.Errorf("line %d: @end without @concurrent", line)
			}
			stack = stack[:len(stack)-1]
			cur = nil
			continue
		}
		s := Step{Kind: Kind(f[0])}
		switch s.Kind {
		case StepSQL, StepApply, StepStart, StepStop, StepKill, StepLoseStore, StepRestartPG,
			StepTxn, StepHeld, StepConcurrent, StepWait, StepStall, StepCheck, StepSwitch, StepDDL,
			StepAlter, StepBackfill:
		default:
			return nil, fmt.Errorf("line %d: unknown directive @%s", line, f[0])
		}
		for _, a := range f[1:] {
			switch a {
			case "rollback":
				s.Rollback = true
			case "confirmed":
				s.AfterConfirm = true
			case "nosp":
				s.NoSavepoints = true
			case "open":
				s.Open = true
			case "crash":
				s.Crash = true
			case ddlLossless, ddlRetype:
				if s.Kind != StepDDL {
					return nil, fmt.Errorf("line %d: @%s takes no DDL mode", line, s.Kind)
				}
				s.Mode = a
			case CaptureLogical, CaptureTrigger:
				if s.Kind != StepSwitch {
					return nil, fmt.Errorf("line %d: @%s takes no capture mode", line, s.Kind)
				}
				s.Mode = a
			default:
				n, err := strconv.Atoi(a)
				if err != nil {
					return nil, fmt.Errorf("line %d: bad argument %q", line, a)
				}
				s.Arg = n
			}
		}
		if s.Kind == StepDDL && s.Mode == "" {
			return nil, fmt.Errorf("line %d: @ddl needs a mode (lossless or retype)", line)
		}
		if s.Kind == StepSwitch && s.Mode == "" {
			return nil, fmt.Errorf("line %d: @switch needs a capture mode (logical or trigger)", line)
		}
		if top.steps == nil {
			return nil, fmt.Errorf("line %d: step inside @concurrent before its first @lane", line)
		}
		*top.steps = append(*top.steps, s)
		cur = &(*top.steps)[len(*top.steps)-1]
		if s.Kind == StepConcurrent {
			if top.conc != nil {
				return nil, fmt.Errorf("line %d: nested @concurrent", line)
			}
			stack = append(stack, frame{conc: cur})
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(stack) != 1 {
		return nil, fmt.Errorf("@concurrent without @end")
	}
	p.Note = strings.Join(notes, "\n")
	return p, nil
}
