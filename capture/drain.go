package capture

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/plant"
	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// Stream drains the capture log into sink until ctx ends, reconnecting
// after failures with capped backoff. Trigger capture has no continuity to
// lose while running, so disrupted is never called.
func (t *Trigger) Stream(ctx context.Context, sink Sink, disrupted func(context.Context, Disruption) error) error {
	var backoff retry.Backoff
	failing := retry.NewEpisode(t.cfg.Logger, "trigger capture drain failed; retrying", "trigger capture drain recovered")
	health := t.cfg.Health
	if health == nil {
		health = func(bool, string) {}
	}
	up := false
	for {
		started := time.Now()
		err := t.session(ctx, sink, func() {
			failing.Recover()
			if !up {
				// Once per recovery, not after every poll.
				up = true
				health(true, "")
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		up = false
		if err != nil {
			health(false, err.Error())
		}
		if time.Since(started) > 30*time.Second {
			backoff.Reset()
		}
		d := backoff.Next()
		failing.Fail(err, d)
		if !retry.Sleep(ctx, d) {
			return nil
		}
	}
}

// drainer is one drain connection and what it knows.
type drainer struct {
	t    *Trigger
	conn *pgx.Conn
	sink Sink
	// announced holds the relations sent to the sink, by OID.
	announced map[uint32]bool
	// clean marks partitions truncated since they were last current.
	clean [ringSize]bool
	// written: the current partition had rows since the last rotation.
	written bool
	// drained is the position of the last drain that took everything
	// committed: the only position the sink is ever given. A drain capped
	// at BatchRows, or of one partition, left committed rows behind and
	// records its keys at this position without advancing it.
	drained uint64
	// ceiling, when not 0, caps every position given to the sink (a final
	// drain before a switch to a slot that starts there).
	ceiling uint64
	// cut is the planted bug drain_skips_open_txn's position per partition.
	cut [ringSize]string
	// first is the partition the next drain reads first.
	first int
}

// tidColumn is what the drain reads besides a row: its TID where a planted
// bug may need it, else nothing.
func tidColumn() string {
	if plant.Enabled {
		return "ctid::text"
	}
	return "''::text"
}

// after is the planted bug drain_skips_open_txn: a position-based cut
// that only takes rows after the last one taken (never true otherwise).
func (d *drainer) after(i int) string {
	if !plant.Active(plant.DrainSkipsOpenTxn) || d.cut[i] == "" {
		return ""
	}
	return fmt.Sprintf(" AND ctid > '%s'::tid", d.cut[i])
}

// pos is lsn under the ceiling.
func (d *drainer) pos(lsn uint64) uint64 {
	if d.ceiling > 0 {
		return min(lsn, d.ceiling)
	}
	return lsn
}

// DrainAll moves every committed row of the capture log into sink once,
// giving positions no higher than ceiling (0: no cap). Used when trigger
// capture hands over to a slot that starts at ceiling: rows of
// transactions still open stay in the log and commit after the slot's
// start, so the slot delivers them.
func (t *Trigger) DrainAll(ctx context.Context, sink Sink, ceiling uint64) error {
	conn, err := pgx.ConnectConfig(ctx, t.cfg.Conn)
	if err != nil {
		return fmt.Errorf("connect the drain: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := t.cfg.Position.ReceivedLSN()
	if ceiling > 0 {
		start = min(start, ceiling)
	}
	d := &drainer{t: t, conn: conn, sink: sink, announced: map[uint32]bool{}, drained: start, ceiling: ceiling}
	_, err = d.drainAll(ctx)
	return err
}

// session drains on one connection until ctx ends or it fails; up is
// called after every drain that worked (the end of a failure episode).
func (t *Trigger) session(ctx context.Context, sink Sink, up func()) error {
	conn, err := pgx.ConnectConfig(ctx, t.cfg.Conn)
	if err != nil {
		return fmt.Errorf("connect the drain: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	d := &drainer{t: t, conn: conn, sink: sink, announced: map[uint32]bool{}, drained: t.cfg.Position.ReceivedLSN()}
	wait := t.cfg.PollMin
	lastRotate := time.Now()
	for ctx.Err() == nil {
		n, err := d.drainAll(ctx)
		if err != nil {
			return err
		}
		up()
		if n > 0 {
			d.written = true
			wait = t.cfg.PollMin
		} else {
			wait = min(wait*2, t.cfg.PollMax)
		}
		if time.Since(lastRotate) >= t.cfg.RotateEvery {
			if err := d.recycle(ctx); err != nil {
				return err
			}
			lastRotate = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// drainAll moves every committed row of the log into the sink, a batch per
// transaction, and reports how many it moved.
func (d *drainer) drainAll(ctx context.Context) (int, error) {
	total := 0
	for {
		n, full, err := d.drainOnce(ctx)
		total += n
		if err != nil || !full {
			return total, err
		}
	}
}

// drainOnce moves up to BatchRows committed rows of the ring in one
// transaction: DELETE … RETURNING sees exactly the rows of committed
// transactions and removes exactly those, so rows of a transaction still
// open stay for a later drain (never skipped, never taken twice). The rows
// are durable in the local store before the DELETE commits; should the
// commit fail, they are taken again, which re-deriving makes harmless.
func (d *drainer) drainOnce(ctx context.Context) (n int, full bool, err error) {
	tx, err := d.conn.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("drain: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// The position is read before the DELETE's snapshot: every transaction
	// visible when it was read is visible to the DELETE. It is a moment,
	// not a WAL cut (a commit record precedes its transaction's visibility),
	// so trigger-mode tokens are positions after a commit of their own
	// (ADR 0023).
	lsn, err := currentLSN(ctx, tx)
	if err != nil {
		return 0, false, err
	}
	// The rows carry no commit time: the drain's is the earliest this
	// path can know (ADR 0017 §3), so latency counts from here.
	txn := decode.Txn{CommitTime: time.Now()}
	// BatchRows bounds the whole drain, not each partition: what one drain
	// holds in memory is at most BatchRows keys however a large
	// transaction's rows are spread over the ring. The first partition
	// read turns with every drain, so a partition that keeps filling does
	// not starve the others.
	left := d.t.cfg.BatchRows
	for j := 0; j < ringSize && left > 0; j++ {
		i := (d.first + j) % ringSize
		// Planned afresh each time (simple protocol): a cached plan made
		// while the partition was nearly empty scans it whole, comparing
		// every row with the array, instead of fetching the rows by TID.
		rows, err := tx.Query(ctx, fmt.Sprintf(`DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE true%s LIMIT %d))
			RETURNING rel, key, truncated, %s`, d.t.part(i), d.after(i), left, tidColumn()), pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return 0, false, fmt.Errorf("drain %s: %w", d.t.part(i), err)
		}
		m, last, err := collect(rows, &txn)
		if err != nil {
			return 0, false, fmt.Errorf("drain %s: %w", d.t.part(i), err)
		}
		if plant.Active(plant.DrainSkipsOpenTxn) && last != "" {
			d.cut[i] = last
		}
		n += m
		left -= m
	}
	d.first = (d.first + 1) % ringSize
	// Rows may remain only where a partition's read was cut short by the
	// budget or never made.
	full = left <= 0
	if n == 0 {
		// Nothing moved, but everything committed before lsn is drained.
		if err := tx.Commit(ctx); err != nil {
			return 0, false, fmt.Errorf("drain: %w", err)
		}
		d.drained = max(d.drained, d.pos(lsn))
		return 0, false, d.sink.Idle(ctx, d.drained)
	}
	txn.EndLSN = d.drained
	if !full {
		txn.EndLSN = max(d.drained, d.pos(lsn))
	}
	if err := d.deliver(ctx, tx, &txn); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("drain: commit: %w", err)
	}
	d.drained = txn.EndLSN
	return n, full, nil
}

// collect adds the log rows (rel, key, truncated, ctid) to txn and
// returns how many there were and the highest ctid.
func collect(rows pgx.Rows, txn *decode.Txn) (n int, last string, err error) {
	defer rows.Close()
	var lastTID [2]int64
	for rows.Next() {
		var rel uint32
		var key []string
		var truncated bool
		var tid string
		if err := rows.Scan(&rel, &key, &truncated, &tid); err != nil {
			return n, last, err
		}
		var b, o int64
		if plant.Enabled {
			if _, err := fmt.Sscanf(tid, "(%d,%d)", &b, &o); err == nil && (b > lastTID[0] || b == lastTID[0] && o > lastTID[1]) {
				lastTID, last = [2]int64{b, o}, tid
			}
		}
		n++
		if truncated {
			txn.Truncated = append(txn.Truncated, rel)
			continue
		}
		txn.Keys = append(txn.Keys, decode.RowKey{Rel: rel, Values: key})
	}
	return n, last, rows.Err()
}

// deliver sends the relations the sink has not seen, then the batch as one
// committed transaction, and makes it durable (Sync) before the caller
// deletes the rows it moved.
func (d *drainer) deliver(ctx context.Context, q Querier, txn *decode.Txn) error {
	for _, k := range txn.Keys {
		if err := d.announce(ctx, q, k.Rel); err != nil {
			return err
		}
	}
	for _, rel := range txn.Truncated {
		if err := d.announce(ctx, q, rel); err != nil {
			return err
		}
	}
	if err := d.sink.Commit(ctx, txn); err != nil {
		return err
	}
	if err := d.sink.Idle(ctx, txn.EndLSN); err != nil {
		return err
	}
	return d.sink.Sync(ctx)
}

// announce sends a table's Relation (its key columns in the order the
// triggers write them) from the registry the first time it is seen.
func (d *drainer) announce(ctx context.Context, q Querier, rel uint32) error {
	if d.announced[rel] {
		return nil
	}
	r := &decode.Relation{ID: rel}
	err := q.QueryRow(ctx, `SELECT schema_name, table_name, key_columns FROM `+d.t.obj("capture_tables")+` WHERE rel = $1`, rel).
		Scan(&r.Namespace, &r.Name, &r.KeyColumns)
	if err == pgx.ErrNoRows {
		// Capture of the table was removed: nobody reads it any more, but
		// the sink needs a description to skip its rows.
		r.Namespace, r.Name = "", fmt.Sprint(rel)
	} else if err != nil {
		return fmt.Errorf("drain: look up captured table %d: %w", rel, err)
	}
	for _, k := range r.KeyColumns {
		r.Columns = append(r.Columns, decode.Column{Name: k, Key: true})
	}
	if err := d.sink.Relation(ctx, r); err != nil {
		return err
	}
	d.announced[rel] = true
	return nil
}

// recycle moves the ring to its next partition when the current one was
// written, and truncates the partitions no writer uses any more: a
// partition is locked (briefly: LockTimeout, retried at the next
// rotation), its last rows are moved, and it is truncated, so the log never
// needs a vacuum. A writer that still holds a partition (a long
// transaction) only delays its truncation; the DELETE drain takes its
// rows whenever it commits.
func (d *drainer) recycle(ctx context.Context) error {
	var cur int
	if err := d.conn.QueryRow(ctx, `SELECT current FROM `+d.t.obj("capture_ring")).Scan(&cur); err != nil {
		return fmt.Errorf("read the capture ring: %w", err)
	}
	for i := 0; i < ringSize; i++ {
		if i != cur && !d.clean[i] {
			ok, err := d.truncate(ctx, i)
			if err != nil {
				return err
			}
			d.clean[i] = ok
		}
	}
	next := (cur + 1) % ringSize
	if !d.written || !d.clean[next] {
		return nil
	}
	if _, err := d.conn.Exec(ctx, `UPDATE `+d.t.obj("capture_ring")+` SET current = $1`, next); err != nil {
		return fmt.Errorf("move the capture ring: %w", err)
	}
	d.clean[next] = false
	d.written = false
	return nil
}

// truncate empties partition i if its lock can be taken at once.
func (d *drainer) truncate(ctx context.Context, i int) (bool, error) {
	tx, err := d.conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", d.t.cfg.LockTimeout.Milliseconds())); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+d.t.part(i)+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		if isLockTimeout(err) {
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", d.t.part(i), err)
	}
	// With the lock held no writer has rows in flight here: what is left
	// is committed, and moved before the TRUNCATE. Other partitions may
	// hold committed rows still, so the position does not move.
	txn := decode.Txn{EndLSN: d.drained}
	rows, err := tx.Query(ctx, `SELECT rel, key, truncated, `+tidColumn()+` FROM `+d.t.part(i)+` WHERE true`+d.after(i))
	if err != nil {
		return false, fmt.Errorf("read %s: %w", d.t.part(i), err)
	}
	n, _, err := collect(rows, &txn)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", d.t.part(i), err)
	}
	if n > 0 {
		if err := d.deliver(ctx, tx, &txn); err != nil {
			return false, err
		}
	}
	if _, err := tx.Exec(ctx, `TRUNCATE `+d.t.part(i)); err != nil {
		return false, fmt.Errorf("truncate %s: %w", d.t.part(i), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("truncate %s: %w", d.t.part(i), err)
	}
	d.cut[i] = ""
	return true, nil
}

// currentLSN is the WAL insert position: a token's own commit record is
// counted as soon as it is inserted, without waiting for the WAL writer.
func currentLSN(ctx context.Context, q Querier) (uint64, error) {
	var s string
	if err := q.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("read the current WAL position: %w", err)
	}
	return catalog.ParseLSN(s)
}
