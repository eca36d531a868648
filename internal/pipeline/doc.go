// Package pipeline is trellis-repl's runtime: what the root package's Run
// does for one open instance (a Host), from the runner lock to the rows
// written in the targets. It never parses or plans a definition (that is
// internal/define and engine) and never applies a WAL row image: changes
// only say which keys are dirty, and each transform's worker re-derives
// them from the source (docs/architecture.md §3.1).
//
//	supervise.go   runner lock (one active runner, standbys), restart after a lost connection
//	     │
//	run.go         one run in one capture mode: prepare (continuity), loop, reconcile, heartbeat,
//	     │         confirm policy; switch.go moves between logical and trigger capture
//	     │
//	capture ──▶ decode.Sink ──▶ intake.go ──▶ checkpoint store (dirty keys, visibility, spills)
//	(slot or triggers)          routes by source OID,            │ Take / Done
//	                            group commit                     ▼
//	                                                        worker.go, one per transform:
//	                                                        waiting → build → live, halts,
//	                                                        drift.go, partitions.go, swap.go
//	                                                             │ a turn on a session lent by
//	                                                             │ appliers.go (bounded, ADR 0028)
//	                                                             ▼
//	                                                        engine.Applier: one transaction per
//	                                                        batch; isolate.go bisects a failing
//	                                                        batch and holds the keys that fail
//
// Beside the flow: selfcheck.go and selfcheck_run.go (jobs, audits and
// repair, on the runner's sessions), release.go (held keys released by an
// operator), readiness.go, report.go and latency.go (what the run tells
// its Observer, observer.go), budget.go (the connection budget every
// connection comes out of).
package pipeline
