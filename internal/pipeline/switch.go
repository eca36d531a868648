package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/plancache"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// switchCapture hands over from the capture mode of the previous run to
// the one chosen now, with the two paths overlapping so that no change
// falls between them (re-deriving makes the overlap harmless; ADR 0012):
// the new path is installed first, then the old one is emptied up to the
// point where the new one took over, then removed. Continuity of the old
// path is judged here: what it lost is reported as a disruption.
func (r *runner) switchCapture(ctx context.Context, from, to string, prev capture.Continuity, logical *capture.Logical, trigger *capture.Trigger) (capture.Prepared, error) {
	r.t.log.Info("switching capture mode", "from", from, "to", to)
	tables, err := r.routeAll(ctx)
	if err != nil {
		return capture.Prepared{}, err
	}
	var out capture.Prepared
	switch {
	case from == capture.ModeLogical && to == capture.ModeTrigger:
		out, err = r.logicalToTrigger(ctx, prev, tables, logical, trigger)
	case from == capture.ModeTrigger && to == capture.ModeLogical:
		out, err = r.triggerToLogical(ctx, prev, tables, logical, trigger)
	default:
		return capture.Prepared{}, terr.New(terr.Internal, "cannot switch capture from %q to %q", from, to)
	}
	if err != nil {
		return capture.Prepared{}, err
	}
	r.t.log.Info("capture mode switched", "from", from, "to", to)
	return out, nil
}

// logicalToTrigger installs the triggers, streams the slot until it has
// delivered everything committed before they existed, then drops the slot
// and the publication.
func (r *runner) logicalToTrigger(ctx context.Context, prev capture.Continuity, tables []capture.Table, logical *capture.Logical, trigger *capture.Trigger) (capture.Prepared, error) {
	if _, err := trigger.Prepare(ctx, capture.Continuity{}); err != nil {
		return capture.Prepared{}, err
	}
	if err := trigger.Install(ctx, tables, nil); err != nil {
		return capture.Prepared{}, err
	}
	handover, err := r.t.walPosition(ctx)
	if err != nil {
		return capture.Prepared{}, err
	}
	var p capture.Prepared
	exists, err := logical.SlotExists(ctx)
	if err != nil {
		return capture.Prepared{}, err
	}
	if !exists {
		if prev.RanBefore {
			p.Disruption = "replication slot disappeared before the switch to trigger capture (dropped, or lost in a failover or restore)"
		}
	} else if p, err = logical.Prepare(ctx, prev); err != nil {
		return capture.Prepared{}, err
	} else if p.Disruption == "" {
		r.confirmed.Store(p.Confirmed)
		if err := r.streamUntil(ctx, logical, handover, &p); err != nil {
			if ctx.Err() != nil {
				return capture.Prepared{}, ctx.Err()
			}
			p.Disruption = "switching to trigger capture, the replication slot could not be read up to where the triggers took over: " + err.Error()
		}
	}
	if err := logical.Remove(ctx); err != nil {
		return capture.Prepared{}, terr.Wrap(terr.Unavailable, err, "remove logical capture after switching to triggers: %v", err)
	}
	return p, nil
}

// streamUntil streams the slot into the intake until the received position
// reaches lsn (a disruption meanwhile is recorded in p and ends it).
func (r *runner) streamUntil(ctx context.Context, logical *capture.Logical, lsn uint64, p *capture.Prepared) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- logical.Stream(sctx, r.intake, func(_ context.Context, d capture.Disruption) error {
			p.Disruption = d.Reason
			cancel()
			return nil
		})
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p.Disruption != "" {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("the slot stream ended before position %s", catalog.FormatLSN(lsn))
			}
			return err
		case <-tick.C:
			if err := r.store.Flush(); err != nil {
				return err
			}
			if r.store.ReceivedLSN() >= lsn {
				cancel()
				<-done
				return nil
			}
		}
	}
}

// triggerToLogical publishes the tables, creates the slot, drains the
// capture log at positions no later than the slot's start (rows of
// transactions still open commit after it, so the slot has them), then
// removes the triggers and the log.
func (r *runner) triggerToLogical(ctx context.Context, prev capture.Continuity, tables []capture.Table, logical *capture.Logical, trigger *capture.Trigger) (capture.Prepared, error) {
	var out capture.Prepared
	if prev.StoreLost {
		out.Disruption = "the local checkpoint store is not the one this instance last used (lost or replaced), and trigger capture removed the changes it had moved into it from the capture log"
	}
	if err := logical.Publish(ctx, tables); err != nil {
		return capture.Prepared{}, err
	}
	p, err := logical.Prepare(ctx, capture.Continuity{ConfirmApplied: prev.ConfirmApplied})
	if err != nil {
		return capture.Prepared{}, err
	}
	r.confirmed.Store(p.Confirmed)
	if err := trigger.DrainAll(ctx, r.intake, r.store.ReceivedLSN()); err != nil {
		return capture.Prepared{}, terr.Wrap(terr.Unavailable, err, "empty the capture log before switching to logical replication: %v", err)
	}
	// Whatever is left (a table whose lock is held, a failure) reconcile
	// removes later (runner.retire): the slot already captures everything.
	if done, err := trigger.Remove(ctx, r.removalsOf(ctx, removalsRetired)); err != nil {
		r.t.log.Warn("remove trigger capture after switching to logical replication; retried at each reconcile", "err", err)
	} else if !done {
		r.t.log.Info("trigger capture is left where a lock is held; a later reconcile removes it once the lock is free (status: runner.capture_waits)")
	}
	return out, nil
}

// routeAll routes every transform that is not paused in the intake (as
// reconcile will, so nothing a switch delivers is dropped) and returns the
// tables every transform reads.
func (r *runner) routeAll(ctx context.Context) ([]capture.Table, error) {
	ts, err := r.t.cat.List(ctx, r.t.pool)
	if err != nil {
		return nil, terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	var tables []capture.Table
	for _, tr := range ts {
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			return nil, err
		}
		tables = append(tables, plancache.CaptureTables(p)...)
		if !catalog.Frozen(tr.State) {
			anc, err := ancestorsOf(ctx, r.t.pool, p)
			if err != nil {
				return nil, err
			}
			r.intake.addRoute(tr.ID, p, anc)
		}
	}
	return tables, nil
}
