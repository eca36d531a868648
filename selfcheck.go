package trellis

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pipeline"
	"github.com/trellis-repl/trellis-repl/internal/terr"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// SelfCheckJob is a self-check request and, once done, its report.
type SelfCheckJob struct {
	ID          int64            `json:"id"`
	Transform   string           `json:"transform"`
	RequestedAt time.Time        `json:"requested_at"`
	Options     SelfCheckOptions `json:"options"`
	// State is queued, running, done (Report says what it found) or
	// failed (Error says why it could not finish).
	State string `json:"state"`
	// ClaimedBy names the process running it: the runner, or the
	// requesting process when no runner was attached.
	ClaimedBy  *string          `json:"claimed_by"`
	StartedAt  *time.Time       `json:"started_at"`
	FinishedAt *time.Time       `json:"finished_at"`
	Report     *SelfCheckReport `json:"report"`
	Error      *string          `json:"error"`
}

// SelfCheck queues a self-check of transform name and returns the job;
// with opts.Wait, it returns the job finished, run by the runner or, with
// no runner attached, by this process. An unknown transform or a bad
// option changes nothing.
func (t *Trellis) SelfCheck(ctx context.Context, name string, opts SelfCheckOptions) (SelfCheckJob, error) {
	if opts.Timeout < 0 {
		return SelfCheckJob{}, terr.New(terr.Validation, "self-check timeout %s is negative; give a positive duration such as 1m, or none for the default (%s)", opts.Timeout, DefaultSelfCheckTimeout)
	}
	if opts.PageSize < 0 {
		return SelfCheckJob{}, terr.New(terr.Validation, "self-check page size %d is negative; give a positive number of rows, or none for the default (%d)", opts.PageSize, selfcheck.DefaultPageSize)
	}
	wait := opts.Wait
	opts.Wait = false
	if opts.Timeout == 0 {
		opts.Timeout = DefaultSelfCheckTimeout
	}
	raw, err := json.Marshal(opts)
	if err != nil {
		return SelfCheckJob{}, terr.Wrap(terr.Internal, err, "encode self-check options: %v", err)
	}
	var job *catalog.SelfCheckJob
	err = t.bounded(ctx, "SelfCheck", func(ctx context.Context, tx pgx.Tx) error {
		tr, err := t.findTransform(ctx, tx, name)
		if err != nil {
			return err
		}
		if job, err = t.cat.InsertSelfCheck(ctx, tx, tr.Name, tr.ID, raw); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		return t.notifyRunner(ctx, tx)
	})
	if err != nil {
		return SelfCheckJob{}, err
	}
	if !wait {
		return publicJob(job)
	}
	return t.awaitJob(ctx, job.ID)
}

// SelfCheckJob reads self-check job id.
func (t *Trellis) SelfCheckJob(ctx context.Context, id int64) (SelfCheckJob, error) {
	var j *catalog.SelfCheckJob
	err := t.bounded(ctx, "SelfCheckJob", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if j, err = t.cat.GetSelfCheck(ctx, tx, id); err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		return nil
	})
	if err != nil {
		return SelfCheckJob{}, err
	}
	if j == nil {
		return SelfCheckJob{}, terr.New(terr.NotFound, "self-check job %d does not exist; `trellis-repl self-check NAME` starts one and prints its id", id)
	}
	return publicJob(j)
}

// AwaitSelfCheckJob waits for job id to finish, and runs it in this
// process when no runner is attached to run it. It is a wait: ctx alone
// bounds it, not Config.CallTimeout.
func (t *Trellis) AwaitSelfCheckJob(ctx context.Context, id int64) (SelfCheckJob, error) {
	if _, err := t.SelfCheckJob(ctx, id); err != nil {
		return SelfCheckJob{}, err
	}
	return t.awaitJob(ctx, id)
}

func publicJob(j *catalog.SelfCheckJob) (SelfCheckJob, error) {
	out := SelfCheckJob{ID: j.ID, Transform: j.Transform, RequestedAt: j.RequestedAt, State: j.State, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}
	if err := json.Unmarshal(j.Options, &out.Options); err != nil {
		return out, terr.Wrap(terr.Internal, err, "self-check job %d has unreadable options: %v", j.ID, err)
	}
	if j.ClaimedBy != "" {
		by := j.ClaimedBy
		out.ClaimedBy = &by
	}
	if len(j.Report) > 0 {
		out.Report = new(SelfCheckReport)
		if err := json.Unmarshal(j.Report, out.Report); err != nil {
			return out, terr.Wrap(terr.Internal, err, "self-check job %d has an unreadable report: %v", j.ID, err)
		}
	}
	if j.Error != "" {
		e := j.Error
		out.Error = &e
	}
	return out, nil
}

// awaitJob polls job id until it is done or failed. While no runner is
// attached it claims the job and runs it here.
func (t *Trellis) awaitJob(ctx context.Context, id int64) (SelfCheckJob, error) {
	delay := 10 * time.Millisecond
	for {
		j, err := t.SelfCheckJob(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return j, terr.Wrap(terr.Timeout, ctx.Err(), "gave up waiting for self-check job %d; it goes on: `trellis-repl self-check --job %d` reads it", id, id)
			}
			return j, err
		}
		if j.State == SelfCheckDone || j.State == SelfCheckFailed {
			return j, nil
		}
		if st, err := pipeline.InspectLock(ctx, t.pool, t.cat.LockKey()); err == nil && st.PID == 0 {
			// No runner to run it: this process does, unless another
			// process (waiting for it too) is running it.
			ran, err := t.rt.RunJobHere(ctx, id)
			if err != nil {
				return j, err
			}
			if ran {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return j, terr.Wrap(terr.Timeout, ctx.Err(), "gave up waiting for self-check job %d; it goes on: `trellis-repl self-check --job %d` reads it", id, id)
		case <-time.After(delay):
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}
