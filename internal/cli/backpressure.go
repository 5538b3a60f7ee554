package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/pronto-jobs/pronto"
)

// cmdQueuesSetMaxDepth bounds a queue (backpressure): inserts beyond the bound fail with "queue is
// full" until jobs finish.
func cmdQueuesSetMaxDepth(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto queues set-max-depth QUEUE N [flags]",
		"Bound a queue: an insert that would take it beyond N jobs that have not finished (available,\n"+
			"scheduled, retryable, pending, active) fails with \"queue is full\" (HTTP: 429 queue_full).\n"+
			"0 lifts the bound. Every client sees a new bound within about a second.").withDatabase()
	pos, err := fs.parse(args, 2, 2)
	if err != nil {
		return err
	}
	q := pos[0]
	if !pronto.ValidQueueName(q) {
		return usageErrorf("%s: invalid queue name %q: queue names are %s", r.current, q, pronto.QueueNameRule)
	}
	n, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || n < 0 {
		return usageErrorf("%s: max depth %q: must be a whole number ≥ 0 (0 lifts the bound: pronto queues set-max-depth %s 0)", r.current, pos[1], q)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := c.QueueSetMaxDepth(ctx, q, n); err != nil {
		if errors.Is(err, pronto.ErrInvalidArgs) {
			return usageErrorf("%v", err)
		}
		return errorf("%v", err)
	}
	if n == 0 {
		fmt.Fprintf(r.env.Stdout, "queue %s unbounded\n", q)
	} else {
		fmt.Fprintf(r.env.Stdout, "queue %s bounded to %d jobs\n", q, n)
	}
	return nil
}
