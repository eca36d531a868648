package pipeline

// A copy of the database into another cluster or database (pg_dump and
// restore, CREATE DATABASE … TEMPLATE, pg_upgrade) brings the catalog and
// the targets but not the OIDs its plans name sources by (ADR 0039):
// rebind finds every transform's sources again by name and key before
// anything reads them (the capture choice reads their privileges by OID),
// pausing, with the fix, a transform whose source is missing or changed.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/capture"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// rebindCopy rebinds the transforms when the database is a copy of the
// one the catalog recorded (another cluster or database), before anything
// reads a source by its OID.
func (t *Host) rebindCopy(ctx context.Context) error {
	inst, err := t.cat.GetInstance(ctx, t.pool)
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "%v", err)
	}
	_, change, err := judgeServer(ctx, t.pool, inst.Server, 0)
	if err != nil || !change.Copied() {
		return err
	}
	return t.rebind(ctx, change.Sentence)
}

// rebind points every transform's plan at the tables that bear its
// sources' names in this copy of the database (why says what happened),
// forgets the partition trees recorded under the old OIDs, and drops the
// copied trigger capture registered under them.
func (t *Host) rebind(ctx context.Context, why string) error {
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		ts, err := t.cat.List(ctx, tx)
		if err != nil {
			return err
		}
		for _, tr := range ts {
			p, err := engine.Decode(tr.Plan)
			if err != nil {
				continue // a plan this version cannot read: left as it is
			}
			moved, err := engine.Rebind(ctx, tx, tr.Name, p)
			var te *terr.Error
			if errors.As(err, &te) && (te.Code == terr.NotFound || te.Code == terr.Validation) {
				f := &catalog.Failure{Kind: catalog.FailureCapture, DetectedAt: time.Now().UTC(),
					Error: why + "; " + te.Msg + " (the runner rebinds a transform to its sources by name and key when it first starts on a copy)"}
				if !catalog.Frozen(tr.State) || tr.PausedBy != "user" {
					if err := t.cat.Pause(ctx, tx, tr.ID, "system", f); err != nil {
						return err
					}
					if err := t.cat.SetDisruption(ctx, tx, tr.ID, &catalog.Disruption{Reason: why, DetectedAt: f.DetectedAt}); err != nil {
						return err
					}
				}
				t.log.Error("transform paused: its sources cannot be found in this copy of the database", "transform", tr.Name, "reason", te.Error())
				continue
			}
			if err != nil {
				return err
			}
			if len(moved) == 0 {
				continue
			}
			raw, err := p.Encode()
			if err != nil {
				return err
			}
			if err := t.cat.Rebind(ctx, tx, tr.ID, raw, p.Sources[0].OID, moved); err != nil {
				return err
			}
			t.log.Info("transform rebound to its sources in this copy of the database", "transform", tr.Name, "tables", len(moved))
		}
		return t.cat.ForgetPartitions(ctx, tx)
	})
	if err != nil {
		return terr.Wrap(terr.Unavailable, err, "rebind the transforms to this copy of the database: %v", err)
	}
	trig := capture.NewTrigger(capture.TriggerConfig{Schema: t.cat.Schema, Pool: t.pool, Logger: t.log})
	if _, err := trig.ForgetCopied(ctx); err != nil {
		return terr.Wrap(terr.Unavailable, err, "drop the trigger capture copied with the database: %v", err)
	}
	return nil
}

// errServerChanged ends a run whose server turned out to be another one
// while it ran (a proxy or DNS switched it): the supervisor starts the
// run again, and its start judges the new server.
type errServerChanged struct{ change *ServerChange }

func (e *errServerChanged) Error() string {
	return fmt.Sprintf("the server changed under the running runner: %s", e.change.Sentence)
}
