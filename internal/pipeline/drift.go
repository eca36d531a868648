package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// driftInterval is how often the runner looks for DDL on what running
// transforms read. The stream's Relation messages ask for a look at once;
// the periodic one catches what the stream cannot show (a source dropped
// with no further change, trigger capture).
const driftInterval = 2 * time.Second

// watchDrift pauses transforms whose sources or definition changed under
// them, with capture_failure.kind = capture and the columns involved (or
// halt, when the definition fails to plan for a reason other than DDL on
// a source: a function it calls dropped), until ctx ends.
//
// A look costs one statement for the whole instance (catalogSignatures):
// a signature of each source's catalog rows and of the user-defined
// objects a definition may call. Only the transforms that read a source
// whose signature changed (all of them when user objects changed, and
// each transform the first time it is seen) are checked against the
// catalog in full (engine.CheckDrift): an idle instance with a thousand
// transforms does not describe a thousand queries every interval.
func (r *runner) watchDrift(ctx context.Context) {
	tick := time.NewTicker(driftInterval)
	defer tick.Stop()
	// A check that keeps failing logs when it starts and when it ends,
	// not every driftInterval.
	partitions := retry.NewEpisode(r.t.log, "check the partitions of the sources fails; retrying", "check the partitions of the sources recovered")
	looks := retry.NewEpisode(r.t.log, "look for DDL on the sources fails; retrying", "look for DDL on the sources recovered")
	checks := map[int64]*retry.Episode{}
	var last map[uint32]string // the signatures of the last look
	lastObjects := ""
	checked := map[int64]bool{} // transforms checked in full since they started
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.driftNow:
		}
		// The list reconcile last read: it reads the catalog whenever a
		// transform changes, and a second reading here would cost an idle
		// instance every transform's row every interval.
		listed := r.listed.Load()
		if listed == nil {
			continue
		}
		ts := *listed
		if err := r.checkPartitions(ctx, ts); err != nil {
			if ctx.Err() == nil {
				partitions.Fail(err, driftInterval)
			}
		} else {
			partitions.Recover()
		}
		type running struct {
			tr   *catalog.Transform
			plan *engine.Plan
		}
		var rs []running
		var oids []uint32
		for _, tr := range ts {
			if catalog.Frozen(tr.State) {
				continue
			}
			e, err := r.plans.Get(tr)
			if err != nil {
				continue
			}
			rs = append(rs, running{tr, e.Plan})
			for _, src := range e.Tables {
				oids = append(oids, src.OID)
			}
			for _, v := range e.Plan.Views {
				oids = append(oids, v.OID)
			}
		}
		sigs, objects, err := catalogSignatures(ctx, r.t.pool, oids)
		if err != nil {
			if ctx.Err() == nil {
				looks.Fail(err, driftInterval)
			}
			// Blind: every transform is checked in full, as if all changed.
			checked = map[int64]bool{}
		} else {
			looks.Recover()
		}
		seen := map[int64]bool{}
		for _, x := range rs {
			id := x.tr.ID
			seen[id] = true
			changed := !checked[id] || objects != lastObjects
			for _, src := range x.plan.Tables() {
				changed = changed || sigs[src.OID] != last[src.OID]
			}
			for _, v := range x.plan.Views {
				changed = changed || sigs[v.OID] != last[v.OID]
			}
			if !changed {
				continue
			}
			e := checks[id]
			if e == nil {
				e = retry.NewEpisode(r.t.log.With("transform", x.tr.Name), "check the transform against the catalog fails; retrying", "check the transform against the catalog recovered")
				checks[id] = e
			}
			if _, err := r.pauseOnDrift(ctx, id, x.tr.Name, x.plan); err != nil {
				if ctx.Err() == nil {
					e.Fail(err, driftInterval)
				}
				checked[id] = false // checked again at the next look
				continue
			}
			e.Recover()
			checked[id] = true
		}
		for id := range checked {
			if !seen[id] {
				delete(checked, id)
				delete(checks, id)
			}
		}
		last, lastObjects = sigs, objects
	}
}

// catalogSignatures reads, in one statement, a signature of each source's
// catalog rows (its name, schema, kind and replica identity; its columns'
// names, types, modifiers, NOT NULL and collations; its primary, unique
// and replica-identity indexes; a view's rule, which CREATE OR REPLACE
// VIEW rewrites), "missing" for a dropped one, and a
// signature of the user-defined functions, types, operators and schemas
// a definition may depend on. DDL that could make a transform drift
// changes one of them. A table's row type and its array type, and the
// schemas of sessions' temporary tables, are not among those objects:
// every CREATE TABLE (the appliers' temporary tables among them, made and
// dropped as transforms take turns on the sessions) would otherwise have
// every transform checked in full at the next look: at 1,000 transforms,
// thousands of statements a second on an instance that only applies a few
// rows (bench many).
func catalogSignatures(ctx context.Context, q catalog.Querier, oids []uint32) (map[uint32]string, string, error) {
	rows, err := q.Query(ctx, `
		SELECT s.oid, coalesce((
			SELECT md5(concat_ws('|', c.relname, c.relnamespace, c.relkind, c.relreplident,
				(SELECT string_agg(concat_ws(':', a.attname, a.atttypid, a.atttypmod, a.attnotnull, a.attcollation), ',' ORDER BY a.attnum)
					FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
				(SELECT string_agg(concat_ws(':', i.indexrelid, i.indisprimary, i.indisreplident, i.indisunique, i.indkey), ',' ORDER BY i.indexrelid)
					FROM pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident OR i.indisunique)),
				(SELECT r.xmin::text FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename = '_RETURN')))
			FROM pg_class c WHERE c.oid = s.oid), 'missing')
		FROM (SELECT DISTINCT unnest($1::oid[]) AS oid) s
		UNION ALL
		SELECT 0, md5(concat_ws('|',
			(SELECT concat_ws(':', count(*), sum(xmin::text::bigint)) FROM pg_proc WHERE pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)),
			(SELECT concat_ws(':', count(*), sum(xmin::text::bigint)) FROM pg_type t WHERE typnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace) AND typtype <> 'c'
				AND NOT (typcategory = 'A' AND EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = t.typelem AND e.typtype = 'c'))),
			(SELECT concat_ws(':', count(*), sum(xmin::text::bigint)) FROM pg_operator WHERE oprnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)),
			(SELECT concat_ws(':', count(*), sum(xmin::text::bigint)) FROM pg_namespace
				WHERE nspname NOT LIKE 'pg\_temp\_%' AND nspname NOT LIKE 'pg\_toast\_temp\_%')))`, oids)
	if err != nil {
		return nil, "", fmt.Errorf("read the catalog signatures of %d sources: %w", len(oids), err)
	}
	defer rows.Close()
	sigs := map[uint32]string{}
	objects := ""
	for rows.Next() {
		var oid uint32
		var sig string
		if err := rows.Scan(&oid, &sig); err != nil {
			return nil, "", err
		}
		if oid == 0 {
			objects = sig
		} else {
			sigs[oid] = sig
		}
	}
	return sigs, objects, rows.Err()
}

// pauseOnDrift checks one transform against the catalog and, when DDL
// changed what it reads, pauses it with a capture failure; it reports
// whether it paused. The look uses the plan as the watch listed it; a
// drift found is confirmed on the transform's row as it is now, locked, in
// the transaction that pauses it: a RESUME or an ALTER TRANSFORM that
// re-typed the plan after the list was read (TestInnerLevels: a RESUME
// re-types an owner with its levels) commits first, and its new plan is
// what is checked — the old one would pause a transform that is exact.
func (r *runner) pauseOnDrift(ctx context.Context, id int64, name string, p *engine.Plan) (bool, error) {
	d, err := r.driftOf(ctx, name, p)
	if err != nil || d == nil {
		return false, err
	}
	paused := false
	err = pgx.BeginFunc(ctx, r.t.pool, func(tx pgx.Tx) error {
		var raw []byte
		err := tx.QueryRow(ctx, `SELECT plan FROM `+r.t.cat.T("transforms")+` WHERE id = $1 AND state NOT IN ($2, $3) FOR UPDATE`,
			id, catalog.StatePaused, catalog.StateQuarantined).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // dropped or frozen since
		}
		if err != nil {
			return err
		}
		now, err := engine.Decode(raw)
		if err != nil {
			return err
		}
		if d, err = engine.CheckDrift(ctx, tx, name, now); err != nil || d == nil {
			return err
		}
		f := &catalog.Failure{Kind: d.Kind, Error: d.Error, Columns: d.Columns, DetectedAt: time.Now().UTC()}
		if err := r.t.cat.Pause(ctx, tx, id, "system", f); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, r.t.cat.NotifyChannel()); err != nil {
			return err
		}
		paused = true
		return nil
	})
	if err != nil || !paused {
		return false, err
	}
	r.t.log.Error("transform paused: what it reads changed", "transform", name, "columns", d.Columns, "reason", d.Error)
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
