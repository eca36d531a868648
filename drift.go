package trellis

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// driftInterval is how often the runner compares every running
// transform's plan with the catalog. The stream's Relation messages ask
// for a check at once; the periodic one catches what the stream cannot
// show (a source dropped with no further change, trigger capture).
const driftInterval = 2 * time.Second

// watchDrift pauses transforms whose sources or definition changed under
// them, with capture_failure.kind = capture and the columns involved (or
// halt, when the definition fails to plan for a reason other than DDL on
// a source: a function it calls dropped), until ctx ends.
func (r *runner) watchDrift(ctx context.Context) {
	tick := time.NewTicker(driftInterval)
	defer tick.Stop()
	// A check that keeps failing logs when it starts and when it ends,
	// not every driftInterval.
	partitions := retry.NewEpisode(r.t.log, "check the partitions of the sources fails; retrying", "check the partitions of the sources recovered")
	checks := map[int64]*retry.Episode{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.driftNow:
		}
		ts, err := r.t.cat.List(ctx, r.t.pool)
		if err != nil {
			continue
		}
		if err := r.checkPartitions(ctx, ts); err != nil {
			if ctx.Err() == nil {
				partitions.Fail(err, driftInterval)
			}
		} else {
			partitions.Recover()
		}
		for _, tr := range ts {
			if catalog.Frozen(tr.State) {
				continue
			}
			p, err := engine.Decode(tr.Plan)
			if err != nil {
				continue
			}
			e := checks[tr.ID]
			if e == nil {
				e = retry.NewEpisode(r.t.log.With("transform", tr.Name), "check the transform against the catalog fails; retrying", "check the transform against the catalog recovered")
				checks[tr.ID] = e
			}
			if _, err := r.pauseOnDrift(ctx, tr.ID, tr.Name, p); err != nil {
				if ctx.Err() == nil {
					e.Fail(err, driftInterval)
				}
			} else {
				e.Recover()
			}
		}
	}
}

// pauseOnDrift checks one transform against the catalog and, when DDL
// changed what it reads, pauses it with a capture failure; it reports
// whether it paused.
func (r *runner) pauseOnDrift(ctx context.Context, id int64, name string, p *engine.Plan) (bool, error) {
	d, err := r.driftOf(ctx, name, p)
	if err != nil || d == nil {
		return false, err
	}
	f := &catalog.Failure{Kind: d.Kind, Error: d.Error, Columns: d.Columns, DetectedAt: time.Now().UTC()}
	tag, err := r.t.pool.Exec(ctx, `SELECT 1 FROM `+r.t.cat.T("transforms")+` WHERE id = $1 AND state NOT IN ($2, $3)`,
		id, catalog.StatePaused, catalog.StateQuarantined)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if err := r.t.cat.Pause(ctx, r.t.pool, id, "system", f); err != nil {
		return false, err
	}
	r.t.log.Error("transform paused: what it reads changed", "transform", name, "columns", d.Columns, "reason", d.Error)
	if _, err := r.t.pool.Exec(ctx, `SELECT pg_notify($1, '')`, r.t.cat.NotifyChannel()); err != nil {
		return true, err
	}
	return true, nil
}

// driftOf compares a plan with the catalog in a transaction of its own
// that changes nothing.
func (r *runner) driftOf(ctx context.Context, name string, p *engine.Plan) (*engine.Drift, error) {
	tx, err := r.t.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	return engine.CheckDrift(ctx, tx, name, p)
}

// checkDriftSoon asks for a drift check now (the stream described a
// relation again: its columns may have changed).
func (r *runner) checkDriftSoon() { signal(r.driftNow) }
