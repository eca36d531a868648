package bench

// The latency scenario (issue 11, item 5): how long a committed row takes
// to show in its target.
//
// A fresh database holds lat(id bigint primary key, w int, v int, pad
// text) and a row transform lat_t (SELECT id, w, v FROM lat) maintained by
// an embedded instance with logical capture. First the sustainable rate is
// measured: Writers connections insert one row per commit (autocommit) as
// fast as they go for Probe, with the instance live; the rate is the rows
// they committed per second. Then, for each fraction of that rate
// (Fractions, default 10%, 50%, 90%), the writers insert paced rows (each
// writer on its own fixed schedule) for Duration and record when each
// commit returned, while an observer polls the target every PollInterval
// for the ids not yet seen and records the start of the poll that first
// returned each row. A row's latency is from its commit's return to that
// poll's start (an upper bound: the row became visible between the two
// polls before). The figures are p50, p95, p99 and max per point; the
// target is compared with its query at the end.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	trellis "github.com/trellis-repl/trellis-repl"
)

// LatencyConfig configures the latency scenario.
type LatencyConfig struct {
	// Writers is how many connections write (default 4).
	Writers int
	// Probe is how long the writers write at full speed to measure the
	// sustainable rate (default 5s).
	Probe time.Duration
	// Duration is how long each paced point writes (default 10s).
	Duration time.Duration
	// Fractions of the sustainable rate measured (default 0.1, 0.5, 0.9).
	Fractions []float64
	// PollInterval is the observer's (default 5ms).
	PollInterval time.Duration
}

func (c *LatencyConfig) defaults() {
	if c.Writers <= 0 {
		c.Writers = 4
	}
	if c.Probe <= 0 {
		c.Probe = 5 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if len(c.Fractions) == 0 {
		c.Fractions = []float64{0.1, 0.5, 0.9}
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Millisecond
	}
}

// PointSustainable is the latency scenario's full-speed probe.
const PointSustainable = "sustainable"

const latInsertSQL = `INSERT INTO lat (id, w, v, pad) VALUES ($1::bigint, $2::int, $3::int, repeat('x', 32))`

func latencyShape() Shape {
	return Shape{Name: "lat_t", Query: `SELECT id, w, v FROM lat`, Columns: []string{"id", "w", "v"}}
}

func (s *suiteRun) latency(ctx context.Context, round int) (err error) {
	cfg := s.cfg.Latency
	dsn, conn, cleanup, err := newDatabase(ctx, s.dbs)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cleanup()) }()
	if err := execAll(ctx, conn, "create lat",
		`CREATE TABLE lat (id bigint PRIMARY KEY, w int NOT NULL, v int NOT NULL, pad text NOT NULL)`); err != nil {
		return err
	}
	sh := latencyShape()
	in, err := openInstance(ctx, s.ec, dsn, fmt.Sprintf("trellis_lat_%d", round), trellis.CaptureLogical, []Shape{sh}, true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, in.close()) }()

	conns := make([]*pgx.Conn, cfg.Writers+1) // the writers', then the observer's
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, dsn); err != nil {
			return fmt.Errorf("bench: connect: %w", err)
		}
	}
	var nextID atomic.Int64
	n, elapsed, err := latWrite(ctx, conns[:cfg.Writers], &nextID, 0, cfg.Probe, nil)
	if err != nil {
		return errors.Join(err, in.run.cause())
	}
	rate := float64(n) / elapsed.Seconds()
	s.emit(Point{Scenario: ScenarioLatency, Point: PointSustainable, Round: round,
		Metrics: map[string]float64{"rate_per_second": rate, "rows": float64(n), "writers": float64(cfg.Writers)}})
	s.progressf("latency round %d sustainable: %.0f rows/s (%d writers, one row per commit)", round, rate, cfg.Writers)
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: converge after the probe: %w", err)
	}

	for _, f := range cfg.Fractions {
		target := rate * f
		lat, achieved, err := latPoint(ctx, conns, &nextID, target, cfg, in)
		if err != nil {
			return fmt.Errorf("%.0f%%: %w", f*100, err)
		}
		name := fmt.Sprintf("%.0f%%", f*100)
		p := Point{Scenario: ScenarioLatency, Point: name, Round: round, Metrics: map[string]float64{
			"fraction": f, "rate_target_per_second": target, "rate_per_second": achieved, "rows": float64(len(lat)),
			"p50_ms": ms(percentile(lat, 0.50)), "p95_ms": ms(percentile(lat, 0.95)),
			"p99_ms": ms(percentile(lat, 0.99)), "max_ms": ms(percentile(lat, 1)),
		}}
		s.emit(p)
		s.progressf("latency round %d %4s: %6.0f rows/s, commit -> visible p50 %6.1f ms, p95 %6.1f ms, p99 %6.1f ms, max %6.1f ms",
			round, name, achieved, p.Metrics["p50_ms"], p.Metrics["p95_ms"], p.Metrics["p99_ms"], p.Metrics["max_ms"])
	}
	if err := in.run.converge(ctx, s.ec); err != nil {
		return fmt.Errorf("bench: converge: %w", err)
	}
	_, err = in.verifyAll(ctx, s.ec, conn)
	return err
}

// latWrite runs one writer per connection inserting one row per commit,
// ids from nextID, for d: at full speed when rate is 0, else together at
// rate rows per second (each writer on its own schedule of rate/writers).
// onCommit, when set, is called with each row's id and commit return
// time. It returns the rows committed within d and d.
func latWrite(ctx context.Context, conns []*pgx.Conn, nextID *atomic.Int64, rate float64, d time.Duration,
	onCommit func(id int64, at time.Time)) (int64, time.Duration, error) {
	var total atomic.Int64
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	var every time.Duration
	if rate > 0 {
		every = time.Duration(float64(time.Second) * float64(len(conns)) / rate)
	}
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Writers start staggered over one interval.
			next := start.Add(every * time.Duration(w) / time.Duration(len(conns)))
			for {
				if every > 0 {
					if next.After(deadline) {
						return
					}
					if wait := time.Until(next); wait > 0 {
						select {
						case <-ctx.Done():
							errs[w] = ctx.Err()
							return
						case <-time.After(wait):
						}
					}
					next = next.Add(every)
				} else if !time.Now().Before(deadline) {
					return
				}
				id := nextID.Add(1)
				if _, err := c.Exec(ctx, latInsertSQL, id, w, int(id%1000)); err != nil {
					errs[w] = fmt.Errorf("bench: insert row %d: %w", id, err)
					return
				}
				at := time.Now()
				if onCommit != nil {
					onCommit(id, at)
				}
				if !at.After(deadline) || every > 0 {
					total.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return total.Load(), d, errors.Join(errs...)
}

// latPoint writes paced rows at rate for cfg.Duration while the last of
// conns observes the target, and returns every row's commit-to-visible
// latency and the rate achieved.
func latPoint(ctx context.Context, conns []*pgx.Conn, nextID *atomic.Int64, rate float64, cfg LatencyConfig, in *instance) ([]time.Duration, float64, error) {
	first := nextID.Load() + 1
	var mu sync.Mutex
	committed := map[int64]time.Time{}
	seen := map[int64]time.Time{}
	var writing atomic.Bool
	writing.Store(true)
	obsErr := make(chan error, 1)
	obs := conns[len(conns)-1]
	go func() {
		obsErr <- latObserve(ctx, obs, first, nextID, &writing, seen, cfg.PollInterval, in)
	}()
	n, d, werr := latWrite(ctx, conns[:len(conns)-1], nextID, rate, cfg.Duration, func(id int64, at time.Time) {
		mu.Lock()
		committed[id] = at
		mu.Unlock()
	})
	writing.Store(false)
	if err := errors.Join(werr, <-obsErr); err != nil {
		return nil, 0, err
	}
	lat := make([]time.Duration, 0, len(committed))
	for id, c := range committed {
		v, ok := seen[id]
		if !ok {
			return nil, 0, fmt.Errorf("bench: row %d committed but never seen in the target", id)
		}
		lat = append(lat, max(v.Sub(c), 0))
	}
	if len(lat) == 0 {
		return nil, 0, errors.New("bench: no row written")
	}
	return lat, float64(n) / d.Seconds(), nil
}

// latObserve polls the target for ids from first on until the writers
// have stopped and every id they took is seen (or 60 s after they
// stopped), recording in seen when each id was first returned.
func latObserve(ctx context.Context, conn *pgx.Conn, first int64, nextID *atomic.Int64, writing *atomic.Bool,
	seen map[int64]time.Time, every time.Duration, in *instance) error {
	lo := first // every id below lo is seen
	var stoppedAt time.Time
	for {
		done := !writing.Load()
		hi := nextID.Load() // ids taken so far; a taken id may not be committed yet
		if done && stoppedAt.IsZero() {
			stoppedAt = time.Now()
		}
		if done && lo > hi {
			return nil
		}
		if !stoppedAt.IsZero() && time.Since(stoppedAt) > time.Minute {
			return fmt.Errorf("bench: rows %d..%d not visible in the target 60s after the writers stopped", lo, hi)
		}
		if err := in.run.cause(); err != nil {
			return err
		}
		if lo <= hi {
			at := time.Now()
			rows, err := conn.Query(ctx, `SELECT id FROM public.lat_t WHERE id BETWEEN $1 AND $2`, lo, hi)
			if err != nil {
				return fmt.Errorf("bench: poll the target: %w", err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return fmt.Errorf("bench: poll the target: %w", err)
			}
			for _, id := range ids {
				if _, ok := seen[id]; !ok {
					seen[id] = at
				}
			}
			for {
				if _, ok := seen[lo]; !ok {
					break
				}
				lo++
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
