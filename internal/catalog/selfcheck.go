package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// States of a self-check job.
const (
	JobQueued  = "queued"
	JobRunning = "running"
	JobDone    = "done"
	JobFailed  = "failed"
)

// SelfCheckJob is one row of selfcheck_jobs.
type SelfCheckJob struct {
	ID          int64
	Transform   string
	TransformID int64
	RequestedAt time.Time
	Options     json.RawMessage
	State       string
	ClaimedBy   string
	ClaimedPID  int
	StartedAt   *time.Time
	FinishedAt  *time.Time
	Report      json.RawMessage
	Error       string
}

const jobCols = `id, transform, transform_id, requested_at, options, state, coalesce(claimed_by, ''), coalesce(claimed_pid, 0),
	started_at, finished_at, report, coalesce(error, '')`

func scanJob(row pgx.Row) (*SelfCheckJob, error) {
	var j SelfCheckJob
	if err := row.Scan(&j.ID, &j.Transform, &j.TransformID, &j.RequestedAt, &j.Options, &j.State, &j.ClaimedBy, &j.ClaimedPID,
		&j.StartedAt, &j.FinishedAt, &j.Report, &j.Error); err != nil {
		return nil, err
	}
	return &j, nil
}

// InsertSelfCheck queues a self-check job of a transform.
func (c Catalog) InsertSelfCheck(ctx context.Context, q Querier, transform string, transformID int64, options []byte) (*SelfCheckJob, error) {
	j, err := scanJob(q.QueryRow(ctx, `INSERT INTO `+c.T("selfcheck_jobs")+` (transform, transform_id, options) VALUES ($1, $2, $3)
		RETURNING `+jobCols, transform, transformID, options))
	if err != nil {
		return nil, fmt.Errorf("queue a self-check of %s: %w", transform, err)
	}
	return j, nil
}

// GetSelfCheck reads one job; nil when absent.
func (c Catalog) GetSelfCheck(ctx context.Context, q Querier, id int64) (*SelfCheckJob, error) {
	j, err := scanJob(q.QueryRow(ctx, `SELECT `+jobCols+` FROM `+c.T("selfcheck_jobs")+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read self-check job %d: %w", id, err)
	}
	return j, nil
}

// ClaimSelfCheck claims the oldest job that is queued, or running under a
// session that is gone (its claimer died), for the session pid: job id,
// or any when id is 0. It returns nil when there is none to claim (or
// another session holds it: FOR UPDATE SKIP LOCKED).
func (c Catalog) ClaimSelfCheck(ctx context.Context, q Querier, id int64, by string, pid int) (*SelfCheckJob, error) {
	j, err := scanJob(q.QueryRow(ctx, `UPDATE `+c.T("selfcheck_jobs")+` SET state = 'running', claimed_by = $2, claimed_pid = $3, started_at = now()
		WHERE id = (SELECT id FROM `+c.T("selfcheck_jobs")+`
			WHERE ($1 = 0 OR id = $1) AND (state = 'queued' OR state = 'running'
				AND NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.pid = claimed_pid))
			ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+jobCols, id, by, pid))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim a self-check job: %w", err)
	}
	return j, nil
}

// FinishSelfCheck stores a claimed job's end: done with its report, or
// failed with an error. It applies only while the session pid holds the
// claim.
func (c Catalog) FinishSelfCheck(ctx context.Context, q Querier, id int64, pid int, state string, report []byte, errText string) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("selfcheck_jobs")+` SET state = $3, report = $4, error = nullif($5, ''), finished_at = now()
		WHERE id = $1 AND claimed_pid = $2 AND state = 'running'`, id, pid, state, report, errText)
	if err != nil {
		return fmt.Errorf("record the end of self-check job %d: %w", id, err)
	}
	return nil
}

// RequeueSelfCheck gives a claimed job back to the queue (its claimer is
// stopping): another process claims it.
func (c Catalog) RequeueSelfCheck(ctx context.Context, q Querier, id int64, pid int) error {
	_, err := q.Exec(ctx, `UPDATE `+c.T("selfcheck_jobs")+` SET state = 'queued', claimed_by = NULL, claimed_pid = NULL, started_at = NULL
		WHERE id = $1 AND claimed_pid = $2 AND state = 'running'`, id, pid)
	if err != nil {
		return fmt.Errorf("give self-check job %d back: %w", id, err)
	}
	return nil
}
