package cli

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto"
)

// setPriorityJSON is what 'jobs set-priority --json' prints: the shape of the HTTP API's answer to
// PATCH /ojs/v1/jobs/{id}.
type setPriorityJSON struct {
	ID               string   `json:"id"`
	Priority         int      `json:"priority"`
	PreviousPriority int      `json:"previous_priority"`
	Job              *jobJSON `json:"job"`
}

func cmdJobsSetPriority(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto jobs set-priority ID PRIORITY [flags]",
		"Change the priority of a job waiting to run (available, scheduled or pending): an integer from\n"+
			"-100 to 100, higher runs first, or high (10), normal (0), low (-10). An available job is\n"+
			"claimed in its new order at once. Running, retryable and finished jobs keep theirs.").withDatabase()
	wantJSON := fs.Bool("json", false, `print {"id", "priority", "previous_priority", "job"} as JSON`)
	pos, err := fs.parse(args, 2, 2)
	if err != nil {
		return err
	}
	id, err := parseJobID(pos[0])
	if err != nil {
		return err
	}
	priority, err := pronto.ParsePriority(pos[1])
	if err != nil {
		return usageErrorf("jobs set-priority: %v", err)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	j, prev, err := c.JobSetPriority(ctx, id, priority)
	if err != nil {
		return jobError("change the priority of", id, err)
	}
	if *wantJSON {
		return writeJSON(r.env.Stdout, &setPriorityJSON{ID: j.ID, Priority: j.Priority, PreviousPriority: prev, Job: toJSON(j)})
	}
	fmt.Fprintf(r.env.Stdout, "job %s priority %d (was %d): %s\n", j.ID, j.Priority, prev, j.State)
	return nil
}
