package generative

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	trellis "github.com/trellis-repl/trellis-repl"
	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// undecodableSlot is how the disruption of a slot the server cannot decode
// reads (replication.SlotUndecodable's sentence).
const undecodableSlot = "cannot decode the WAL of replication slot"

// check is the oracle: wait for convergence to "now", then every target
// that is not paused by a user must equal its query, both as the engine's
// plan renders it and as the program wrote it; a transform whose rows can
// fail (poisoncheck.go) must hold exactly its failing rows' keys and equal
// its query without them, and no other may hold any.
func (r *run) check(ctx context.Context, path string) *Failure {
	r.sup.ensureRunning()
	ctx, cancel := r.convergeContext(ctx)
	defer cancel()
	fail := func(kind, format string, args ...any) *Failure {
		return &Failure{Kind: kind, Step: path, Msg: fmt.Sprintf(format, args...)}
	}
	err := r.await(ctx)
	r.mu.Lock()
	disrupt := r.disrupt
	r.disrupt = false
	retyped := r.retyped
	r.mu.Unlock()
	disruption := err != nil && trellis.CodeOf(err) == trellis.CodeConflict && strings.Contains(err.Error(), "disruption")
	if retyped && err != nil && trellis.CodeOf(err) == trellis.CodeConflict && strings.Contains(err.Error(), "capture:") {
		// A RESUME that re-typed a target changes the source of a chain
		// reading it: that level pauses for the retype in its turn.
		disruption, disrupt = true, true
	}
	if disruption && !disrupt && strings.Contains(err.Error(), undecodableSlot) {
		// PostgreSQL failed to decode its own WAL (15.x, rarely, with
		// TRUNCATE and savepoints in concurrent transactions; it does not
		// replay deterministically). The engine's answer is the one to
		// check: a disruption, a new slot, and exact targets after RESUME.
		r.note("server fault at step %s (slot re-created, transforms rebuilt): %v", path, err)
		disrupt = true
	}
	resumed := map[string]bool{}
	for disruption && disrupt {
		// Losing the store under --confirm=local is a disruption by design:
		// the transforms pause and RESUME rebuilds them. The runner pauses
		// them one by one, so a RESUME may come before the last is paused:
		// then the next wait meets that one's disruption, and it is resumed
		// too. One paused again after its RESUME is a failure.
		r.logf("step %s: expected disruption: %v", path, err)
		names, err2 := r.resumeSystemPaused(ctx)
		if err2 != nil {
			return fail("setup", "resume after the expected disruption: %v", err2)
		}
		again := len(names) == 0
		for _, n := range names {
			again = again || resumed[n]
			resumed[n] = true
		}
		err = r.await(ctx)
		disruption = !again && err != nil && trellis.CodeOf(err) == trellis.CodeConflict &&
			(strings.Contains(err.Error(), "disruption") || retyped && strings.Contains(err.Error(), "capture:"))
	}
	if err == nil {
		// Converged: what the triggers took before a switch is applied.
		r.mu.Lock()
		r.fromTrigger = false
		r.mu.Unlock()
	}
	if err != nil {
		kind := "conflict"
		if trellis.CodeOf(err) == trellis.CodeTimeout || ctx.Err() != nil {
			kind = "timeout"
		}
		return fail(kind, "AwaitConverged: %v", err)
	}
	if f := r.awaitCapture(ctx, path, captureSettle); f != nil {
		return f
	}
	var problems []string
	for attempt := 0; ; attempt++ {
		problems, err = r.compareAll(ctx)
		if err == nil {
			break
		}
		if !isConnError(err) || attempt == 3 || ctx.Err() != nil {
			return fail("setup", "%v", err)
		}
		// The control session may predate a server restart.
		r.ctl.close()
		time.Sleep(100 * time.Millisecond)
	}
	if len(problems) > 0 {
		return fail("diverged", "%s", strings.Join(problems, "\n  "))
	}
	return nil
}

// compareAll compares every target that is not paused with its queries
// and returns the differences found.
func (r *run) compareAll(ctx context.Context) ([]string, error) {
	var problems []string
	conn, err := r.ctl.get(ctx)
	if err != nil {
		return nil, err
	}
	sts, err := r.tr.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	held, err := r.heldKeys(ctx)
	if err != nil {
		return nil, err
	}
	paused := map[string]bool{}
	for _, st := range sts {
		var count int64
		if st.HeldKeys != nil {
			count = st.HeldKeys.Count
		}
		switch {
		case st.State == "paused":
			paused[st.Name] = true
			continue
		case st.State == "quarantined":
			// Generated programs hold fewer keys than any fuse allows. Its
			// target is frozen, like a paused one's: not compared.
			problems = append(problems, fmt.Sprintf("%s is quarantined, holding %d keys", st.Name, count))
			paused[st.Name] = true
		case count != int64(len(held[st.Name])):
			problems = append(problems, fmt.Sprintf("%s: status says it holds %d keys, PoisonedSince lists %d", st.Name, count, len(held[st.Name])))
		}
	}
	rows, err := conn.Query(ctx, `SELECT name, plan FROM trellis.transforms ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read transforms: %w", err)
	}
	type tp struct {
		name string
		plan []byte
	}
	var ps []tp
	for rows.Next() {
		var x tp
		if err := rows.Scan(&x.name, &x.plan); err != nil {
			rows.Close()
			return nil, err
		}
		ps = append(ps, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defs := make(map[string]string, len(r.defs))
	for k, v := range r.defs {
		defs[k] = v
	}
	r.mu.Unlock()
	for _, x := range ps {
		if paused[x.name] {
			continue
		}
		p, err := engine.Decode(x.plan)
		if err != nil {
			return nil, fmt.Errorf("decode plan of %s: %w", x.name, err)
		}
		target := pgx.Identifier{p.Target.Schema, p.Target.Name}
		pc, err := poisonOf(ctx, conn, p)
		if err != nil {
			return nil, err
		}
		if pc != nil {
			if sel, ok := defs[x.name]; ok {
				if msg, err := typesDiffer(ctx, conn, target, p.Visible, sel); err != nil {
					return nil, fmt.Errorf("column types of %s: %w", x.name, err)
				} else if msg != "" {
					problems = append(problems, fmt.Sprintf("%s: column types differ from its definition (%s): %s", x.name, sel, msg))
					continue
				}
			}
			msgs, err := pc.compare(ctx, conn, x.name, held[x.name])
			if err != nil {
				return nil, err
			}
			problems = append(problems, msgs...)
			r.mu.Lock()
			r.stats.PoisonCompares++
			r.stats.HeldKeys += len(held[x.name])
			r.mu.Unlock()
			continue
		}
		if hk := held[x.name]; len(hk) > 0 {
			shown := make([]string, len(hk))
			for i, k := range hk {
				shown[i] = showKey(k)
			}
			problems = append(problems, fmt.Sprintf("%s holds %d keys, though no row of it can fail: %s", x.name, len(hk), strings.Join(shown, " ")))
		}
		queries := []struct{ label, sql string }{{"plan query", p.QuerySQL()}}
		if sel, ok := defs[x.name]; ok {
			queries = append(queries, struct{ label, sql string }{"definition", sel})
		}
		if len(queries) > 1 {
			if msg, err := typesDiffer(ctx, conn, target, p.Visible, queries[1].sql); err != nil {
				return nil, fmt.Errorf("column types of %s: %w", x.name, err)
			} else if msg != "" {
				problems = append(problems, fmt.Sprintf("%s: column types differ from its definition (%s): %s", x.name, queries[1].sql, msg))
				continue
			}
		}
		if p.Multi() {
			r.mu.Lock()
			r.stats.JoinCompares++
			r.mu.Unlock()
		}
		for _, q := range queries {
			d, err := selfcheck.Compare(ctx, conn, target, p.Visible, q.sql)
			if err != nil {
				return nil, fmt.Errorf("compare %s with its %s: %w", x.name, q.label, err)
			}
			if !d.Equal() {
				problems = append(problems, fmt.Sprintf("%s differs from its %s (%s):\n    missing %d %v\n    extra   %d %v",
					x.name, q.label, q.sql, d.Missing, d.MissingSample, d.Extra, d.ExtraSample))
			}
		}
	}
	return problems, nil
}

// isConnError: the session failed, not the statement.
func isConnError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57") || strings.HasPrefix(pgErr.Code, "08")
	}
	return true
}

// convergeContext bounds a check's wait: it ends once the transforms'
// work (keys applied, build cursors) has not moved for the converge
// timeout, or at three times that in all. Applied positions are not work:
// an idle transform records a newer one every ProgressInterval while
// another is stuck. A runner that stops converging fails within the
// timeout as before; one that is only slow (a batch size of a few keys
// under the big lanes, a loaded machine) is given the time its work shows
// it needs.
func (r *run) convergeContext(parent context.Context) (context.Context, context.CancelFunc) {
	idle := r.env.convergeTimeout()
	ctx, cancel := context.WithTimeout(parent, 3*idle)
	go func() {
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		const q = `SELECT coalesce((SELECT string_agg(transform_id || ':' || keys_applied, ',' ORDER BY transform_id)
			FROM trellis.progress), '') || '/' || coalesce((SELECT string_agg(id || ':' || coalesce(build_cursor::text, '') || ':' || build_phase, ','
			ORDER BY id) FROM trellis.transforms), '')`
		var last string
		moved := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if conn == nil {
				if conn, _ = pgx.Connect(ctx, r.dsn); conn == nil {
					continue // the server restarting: no news
				}
			}
			var cur string
			if err := conn.QueryRow(ctx, q).Scan(&cur); err != nil {
				// A restarted server or a catalog mid-change: no news.
				conn.Close(context.Background())
				conn, cur = nil, last
			}
			if cur != last {
				last, moved = cur, time.Now()
			} else if time.Since(moved) >= idle {
				r.logf("no keys applied for %s; ending the wait", idle)
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}

// await waits for convergence to a fresh token, retrying while the server
// is unavailable (it may be restarting).
func (r *run) await(ctx context.Context) error {
	for {
		tok, err := r.tr.WatermarkToken(ctx)
		if err == nil {
			err = r.tr.AwaitConverged(ctx, tok)
		}
		if err == nil || trellis.CodeOf(err) != trellis.CodeUnavailable || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// resumeSystemPaused resumes every transform the system paused and
// returns their names.
func (r *run) resumeSystemPaused(ctx context.Context) ([]string, error) {
	sts, err := r.tr.Status(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	resumed := map[string]bool{}
	for _, st := range sts {
		if st.State == "paused" && st.PausedBy != nil && *st.PausedBy == "system" {
			// An inner level (ADR 0018) is resumed through its owner,
			// which resumes every frozen level of it at once.
			name := resumeName(st)
			if resumed[name] {
				continue
			}
			resumed[name] = true
			if _, err := r.tr.Apply(ctx, "RESUME TRANSFORM "+pgx.Identifier{name}.Sanitize()); err != nil {
				return names, err
			}
			names = append(names, name)
		}
	}
	return names, nil
}

// resumeName is the transform a RESUME of st names: st, or the owner of
// an inner level.
func resumeName(st trellis.TransformStatus) string {
	if st.Owner != nil {
		return *st.Owner
	}
	return st.Name
}

// typesDiffer compares the target's column types with the query's result
// types; a target must have the types PostgreSQL gives its query.
func typesDiffer(ctx context.Context, conn *pgx.Conn, target pgx.Identifier, cols []string, query string) (string, error) {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	types := func(sql string) ([]string, error) {
		rows, err := conn.Query(ctx, `SELECT * FROM (`+sql+"\n) AS q LIMIT 0")
		if err != nil {
			return nil, err
		}
		fds := rows.FieldDescriptions()
		rows.Close()
		var out []string
		for _, fd := range fds {
			name := fmt.Sprint(fd.DataTypeOID)
			if t, ok := conn.TypeMap().TypeForOID(fd.DataTypeOID); ok {
				name = t.Name
			}
			out = append(out, name)
		}
		return out, rows.Err()
	}
	tt, err := types(`SELECT ` + strings.Join(quoted, ", ") + ` FROM ` + target.Sanitize())
	if err != nil {
		return "", err
	}
	qt, err := types(query)
	if err != nil {
		return "", err
	}
	if len(tt) != len(qt) {
		return fmt.Sprintf("target has %d columns, query %d", len(tt), len(qt)), nil
	}
	var diffs []string
	for i := range tt {
		if tt[i] != qt[i] {
			diffs = append(diffs, fmt.Sprintf("%s is %s in the target, %s in the query", cols[i], tt[i], qt[i]))
		}
	}
	return strings.Join(diffs, "; "), nil
}
