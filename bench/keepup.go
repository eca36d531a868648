package bench

// The keep-up scenario (issue 11, item 5): can the engine keep up with
// writers at full speed, and how soon does it converge once they stop?
//
// A fresh database is loaded by `pgbench -i -s Scale`; an embedded
// instance with logical capture maintains the write-tax scenario's two
// transforms (the row transform and the aggregate by branch) and is built
// and converged. Then pgbench runs at full speed (-c Clients -j Threads)
// for Duration while a sampler reads trellis.Status every second: the
// keys waiting (summed over the transforms) and the lag bytes (the
// largest) make one sample point each. Once pgbench exits, a watermark is
// taken and the time until AwaitConverged returns is the convergence
// time (goal ≤ 10 s). The backlog counts as bounded when the most keys
// waiting in the last third of the run is at most twice the most in the
// first third, or at most BoundedFloor keys. The targets are compared
// with their queries at the end.

import (
	"context"
	"errors"
	"fmt"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// KeepUpConfig configures the keep-up scenario.
type KeepUpConfig struct {
	// Scale is pgbench's scale factor (default 10).
	Scale int
	// Clients and Threads are pgbench's -c and -j (default 4 and 2).
	Clients int
	Threads int
	// Duration is how long pgbench writes (default 60s).
	Duration time.Duration
	// BoundedFloor is a backlog that always counts as bounded (default
	// 10,000 keys: one apply batch).
	BoundedFloor int64
}

func (c *KeepUpConfig) defaults() {
	if c.Scale <= 0 {
		c.Scale = 10
	}
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.Threads <= 0 {
		c.Threads = 2
	}
	if c.Duration <= 0 {
		c.Duration = 60 * time.Second
	}
	if c.BoundedFloor <= 0 {
		c.BoundedFloor = 10_000
	}
}

// The keep-up scenario's points.
const (
	// PointKeepUp is the scenario's summary.
	PointKeepUp = "keep-up"
	// PointKeepUpSample is one per-second sample of the backlog.
	PointKeepUpSample = "sample"
)

type keepUpSample struct {
	at       time.Duration // since pgbench started
	waiting  int64
	lagBytes int64
}

func (s *suiteRun) keepUp(ctx context.Context, round int) (err error) {
	cfg := s.cfg.KeepUp
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	if err := pgbenchInit(ctx, dsn, cfg.Scale); err != nil {
		return err
	}
	in, err := openInstance(ctx, s.ec, dsn, fmt.Sprintf("trellis_keepup_%d", round), trellis.CaptureLogical, pgbenchShapes(2), true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.close()) }()

	sctx, stopSampler := context.WithCancel(ctx)
	samplesDone := make(chan []keepUpSample, 1)
	start := time.Now()
	go func() {
		var out []keepUpSample
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				samplesDone <- out
				return
			case <-tick.C:
			}
			st, err := in.tr.Status(sctx, accountsTransform, branchTransform)
			if err != nil {
				continue // the context ended, or a transient error: the next tick tries again
			}
			smp := keepUpSample{at: time.Since(start)}
			for _, t := range st {
				smp.waiting += t.KeysWaiting
				if t.LagBytes != nil {
					smp.lagBytes = max(smp.lagBytes, *t.LagBytes)
				}
			}
			out = append(out, smp)
		}
	}()
	res, err := pgbenchRun(ctx, dsn, pgbenchLoad{Clients: cfg.Clients, Threads: cfg.Threads}, cfg.Duration)
	stopSampler()
	samples := <-samplesDone
	if err != nil {
		return errors.Join(err, in.run.cause())
	}
	convStart := time.Now()
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: converge after pgbench: %w", err)
	}
	converge := time.Since(convStart)
	verdict, err := in.verifyAll(ctx, s.ec, conn)
	if err != nil {
		return err
	}

	var maxWaiting, maxLag, first, last int64
	n := len(samples)
	for i, smp := range samples {
		s.emit(Point{Scenario: ScenarioKeepUp, Point: PointKeepUpSample, Round: round, Sample: true, Metrics: map[string]float64{
			"t_seconds": smp.at.Seconds(), "keys_waiting": float64(smp.waiting), "lag_bytes": float64(smp.lagBytes)}})
		maxWaiting, maxLag = max(maxWaiting, smp.waiting), max(maxLag, smp.lagBytes)
		if i < (n+2)/3 {
			first = max(first, smp.waiting)
		}
		if i >= n-(n+2)/3 {
			last = max(last, smp.waiting)
		}
	}
	bounded := 0.0
	if last <= 2*first || last <= cfg.BoundedFloor {
		bounded = 1
	}
	p := Point{Scenario: ScenarioKeepUp, Point: PointKeepUp, Round: round, Metrics: map[string]float64{
		"tps": res.TPS, "transactions": float64(res.Transactions), "samples": float64(n),
		"max_keys_waiting": float64(maxWaiting), "max_lag_bytes": float64(maxLag),
		"first_third_max_keys_waiting": float64(first), "last_third_max_keys_waiting": float64(last),
		"bounded": bounded, "converge_seconds": converge.Seconds()},
		Labels: map[string]string{"verified": verdict}}
	s.emit(p)
	s.progressf("keep-up round %d: %.0f tps for %s, keys waiting max %d (first third %d, last third %d), lag max %d bytes; converged %.2fs after pgbench stopped",
		round, res.TPS, cfg.Duration, maxWaiting, first, last, maxLag, converge.Seconds())
	return nil
}
