package pronto

import (
	"context"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// catchUpLimit bounds the pass JobCatchUp runs, as the leader's passes are bounded.
const catchUpLimit = 1000

// JobCatchUp brings job j's state up to date when the maintenance that would change it is due but
// the leader has not run it yet (it runs about every second): an expired job not yet started is
// discarded, a due scheduled or retryable job made available (unless maintenance mode holds
// promotion), an active job whose lease ran out rescued. The pass runs on this client, leader or not,
// over every job due (not j alone) and reports what it did as the leader's pass does
// (EventDiscarded, EventRescued), so it changes and tells nothing the leader would not a moment
// later. It returns the job as it is then, or j itself when nothing was due.
func (c *Client) JobCatchUp(ctx context.Context, j *JobRow) (*JobRow, error) {
	now := time.Now()
	switch {
	case !j.ExpiresAt.IsZero() && !j.ExpiresAt.After(now) && j.Attempt == 0 &&
		(j.State == StateAvailable || j.State == StateScheduled || j.State == StatePending || j.State == StateRetryable):
		jobs, err := c.store.DiscardExpired(ctx, catchUpLimit)
		c.onExpired(jobs) // those discarded before an error too
		if err != nil {
			return j, wrapOp("discard expired jobs", err)
		}
	case (j.State == StateScheduled || j.State == StateRetryable) && !j.ScheduledAt.After(now) && !c.maintenanceHeld(ctx):
		if _, err := c.store.Promote(ctx, catchUpLimit); err != nil {
			return j, wrapOp("promote due jobs", err)
		}
	case j.State == StateActive && !j.LeaseExpiresAt.IsZero() && j.LeaseExpiresAt.Before(now):
		res, err := c.store.Rescue(ctx, store.RescueParams{Limit: catchUpLimit})
		c.onRescue(res) // those rescued before an error too
		if err != nil {
			return j, wrapOp("rescue jobs", err)
		}
	default:
		return j, nil
	}
	fresh, err := c.store.GetJob(ctx, j.ID)
	if err != nil {
		return j, wrapOp("get job "+j.ID, err)
	}
	return fresh, nil
}
