package trellis

import (
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/pipeline"
)

// The types and constants below are what the runtime (internal/pipeline)
// and the definition path (internal/define) produce and the API hands
// out; they are defined there and named here, so that a program sees one
// surface (docs/architecture.md §2).

// Result says what Apply did for one statement: Statement ("CREATE
// TRANSFORM", "PAUSE TRANSFORM", …), Name, Action (created, redefining,
// exists, paused, resumed, dropped, absent or unchanged) and Notes (what
// the statement did not keep as written, one sentence each).
type Result = define.Result

// Token is a watermark: AwaitConverged(token) returns once every target
// reflects every write committed before the token was taken. String
// renders it as a PostgreSQL LSN.
type Token = pipeline.Token

// Observer receives the runtime's events (ADR 0017 §1): slot reads,
// batches applied, errors by kind, state changes, latency. Metrics is
// one; FanOut combines several. Implementations must be safe for
// concurrent use and must not block.
type Observer = pipeline.Observer

// SlotStats is what the slot's last read found (Observer.SlotRead).
type SlotStats = pipeline.SlotStats

// AppliedBatch is one batch a transform applied (Observer.BatchApplied).
type AppliedBatch = pipeline.AppliedBatch

// ErrorKind is the fixed enumeration of errors Observer.Error reports.
type ErrorKind = pipeline.ErrorKind

// NopObserver ignores every event; embed it to implement only some.
type NopObserver = pipeline.NopObserver

// The error kinds (ErrorKind).
const (
	ErrorData      = pipeline.ErrorData      // about the rows being written: a key is isolated and held
	ErrorHalt      = pipeline.ErrorHalt      // every key reproduces it: the transform pauses on its second occurrence
	ErrorTransient = pipeline.ErrorTransient // may pass by itself: retried with backoff
	ErrorCapture   = pipeline.ErrorCapture   // capture broke off (retried) or lost continuity (a disruption)
	ErrorBuild     = pipeline.ErrorBuild     // a build step failed: retried, paused after five in a row
)

// ErrorKinds returns every ErrorKind, so an implementation can report
// each as zero before the first occurs.
func ErrorKinds() []ErrorKind { return pipeline.ErrorKinds() }

// FanOut is an Observer that passes every event to each of obs, in
// order; nil entries are skipped, and none at all is NopObserver.
func FanOut(obs ...Observer) Observer { return pipeline.FanOut(obs...) }

// Readiness is what Run in this process is doing and whether it is ready
// (ADR 0017 §4): the runner state, each check, and since when.
type Readiness = pipeline.Readiness

// ReadinessCheck is one condition of readiness: its name (a Check…
// constant), whether it holds, and if not, why.
type ReadinessCheck = pipeline.ReadinessCheck

// Runner states Readiness reports.
const (
	RunnerStopped      = pipeline.RunnerStopped      // Run is not running in this process
	RunnerStarting     = pipeline.RunnerStarting     // connecting, taking the runner lock or preparing capture
	RunnerStandby      = pipeline.RunnerStandby      // another runner holds the instance; this one waits
	RunnerActive       = pipeline.RunnerActive       // this process maintains the instance
	RunnerReconnecting = pipeline.RunnerReconnecting // the run lost its connection and starts again after a backoff
)

// The checks Readiness lists, in this order.
const (
	CheckActiveRunner = pipeline.CheckActiveRunner // this process is the active runner
	CheckConnected    = pipeline.CheckConnected    // the last query did not fail for a lost connection
	CheckCapture      = pipeline.CheckCapture      // capture is streaming (logical) or draining (trigger)
	CheckNoDisruption = pipeline.CheckNoDisruption // capture is not recovering from lost continuity
	CheckCatalog      = pipeline.CheckCatalog      // the catalog answered a recent heartbeat
)

// BuildProgress is how far a build has come (TransformStatus.Build).
type BuildProgress = pipeline.BuildProgress

// SelfCheckOptions choose how a self-check runs (strict, repair,
// timeout, wait).
type SelfCheckOptions = pipeline.SelfCheckOptions

// SelfCheckReport is what a self-check found.
type SelfCheckReport = pipeline.SelfCheckReport

// SelfCheckRepair is what a self-check's repair did.
type SelfCheckRepair = pipeline.SelfCheckRepair

// Divergence is one difference between a target and a fresh run of its
// query: a missing row, an extra row, or a cell.
type Divergence = pipeline.Divergence

// Outcomes of a self-check (SelfCheckReport.Outcome).
const (
	OutcomeConverged   = pipeline.OutcomeConverged   // the target equals a fresh run of its query
	OutcomeDiverged    = pipeline.OutcomeDiverged    // it differs after catching up (and again at the re-check)
	OutcomeNotCaughtUp = pipeline.OutcomeNotCaughtUp // it did not catch up in time, or no runner and it differs
	OutcomeNotLive     = pipeline.OutcomeNotLive     // the transform is building, paused or quarantined
)

// States of a self-check job.
const (
	SelfCheckQueued  = pipeline.SelfCheckQueued
	SelfCheckRunning = pipeline.SelfCheckRunning
	SelfCheckDone    = pipeline.SelfCheckDone
	SelfCheckFailed  = pipeline.SelfCheckFailed
)

// Kinds of divergence.
const (
	DivergenceMissingRow = pipeline.DivergenceMissingRow
	DivergenceExtraRow   = pipeline.DivergenceExtraRow
	DivergenceCell       = pipeline.DivergenceCell
)

// Defaults of a self-check.
const (
	// DefaultSelfCheckTimeout bounds each wait for convergence.
	DefaultSelfCheckTimeout = pipeline.DefaultSelfCheckTimeout
	// DefaultSelfCheckSample is the share of each target a periodic audit
	// (Config.SelfCheckEvery) compares.
	DefaultSelfCheckSample = pipeline.DefaultSelfCheckSample
	// SelfCheckListed is how many divergences a report lists.
	SelfCheckListed = pipeline.SelfCheckListed
)

// Connection budget (Config.MaxConnections, ADR 0028).
const (
	// DefaultMaxConnections is Config.MaxConnections' default: 10% of
	// PostgreSQL's default max_connections.
	DefaultMaxConnections = pipeline.DefaultMaxConnections
	// MinRunnerConnections is the smallest budget a runner runs on: the
	// lock session, capture, one control connection and one applier.
	MinRunnerConnections = pipeline.MinRunnerConnections
)
