package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// adminClient opens the database (requiring a migrated schema) and returns an insert-only client on it.
func (r *runner) adminClient(ctx context.Context) (*pronto.Client, *database, error) {
	db, err := r.open(ctx, openOptions{})
	if err != nil {
		return nil, nil, err
	}
	c, err := pronto.NewClient(db.store, nil)
	if err != nil {
		db.Close()
		return nil, nil, errorf("%v", err)
	}
	return c, db, nil
}

// parseJobID checks a job id argument; ids are case-insensitive on the command line.
func parseJobID(arg string) (string, error) { return parseID("job", arg) }

// parseID checks the id of a noun ("job", "workflow"): both are UUIDv7s.
func parseID(noun, arg string) (string, error) {
	id := strings.ToLower(strings.TrimSpace(arg))
	if !uuidv7.Valid(id) {
		return "", usageErrorf("invalid %s id %q: %s ids are UUIDv7s such as 0190d4b2-6c1e-7f3a-9b2c-4d5e6f708192", noun, arg, noun)
	}
	return id, nil
}

// jobError turns an admin error about one job into a message and an exit code.
func jobError(op, id string, err error) error {
	var te *pronto.TransitionError
	switch {
	case errors.Is(err, pronto.ErrNotFound):
		return notFoundf("job %s not found", id)
	case errors.As(err, &te):
		why := ""
		switch op {
		case "retry":
			why = " (only discarded or cancelled jobs can be retried)"
		case "cancel":
			return errorf("cannot cancel job %s: it is already %s", id, te.From)
		case "activate":
			why = " (only pending jobs can be activated)"
		case "change the priority of":
			why = " (only available, scheduled or pending jobs can change priority)"
		case "delete":
			if te.From == pronto.StateActive {
				why = " (it is running: cancel it first with 'pronto jobs cancel " + id + "')"
			}
		}
		return errorf("cannot %s job %s: it is %s%s", op, id, te.From, why)
	case errors.Is(err, pronto.ErrInvalidArgs):
		return usageErrorf("%v", err)
	}
	return errorf("%v", err) // names the operation and the job
}

func cmdJobsList(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto jobs list [flags]",
		"List jobs, newest first (--asc for oldest first), one page at a time. Filters may be repeated\n"+
			"or comma-separated: --state discarded,cancelled --queue email. A job matches when it is in one of\nthe states, one of the queues and of one of the kinds given, and has every tag given.\n"+
			"--tenant lists one tenant's jobs across queues (read from the tenant's own index).").withDatabase()
	var states, queues, kinds listValue
	fs.Var(&states, "state", "only jobs in these `STATES`: "+stateNames())
	fs.Var(&queues, "queue", "only jobs in these `QUEUES`")
	fs.Var(&kinds, "kind", "only jobs of these `KINDS`")
	var tags listValue
	fs.Var(&tags, "tag", "only jobs that have every one of these `TAGS`")
	tenant := fs.String("tenant", "", "only the jobs of `TENANT` (see 'pronto tenants')")
	limit := fs.Int("limit", 50, "at most `N` jobs (1 to 10000)")
	cursor := fs.String("cursor", "", "continue after job `ID` (printed at the end of a full page)")
	asc := fs.Bool("asc", false, "oldest first")
	asJSON := fs.Bool("json", false, `print {"jobs": [...], "next": CURSOR} as JSON ("next" is "" on the last page)`)
	createdAfter := fs.time("created-after", "only jobs created at or after `TIME` (RFC 3339, or how long ago: 90m, 24h)")
	createdBefore := fs.time("created-before", "only jobs created before `TIME`")
	finishedAfter := fs.time("finished-after", "only finished jobs (completed, cancelled, discarded) that finished at or after `TIME`")
	finishedBefore := fs.time("finished-before", "only finished jobs that finished before `TIME`")
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	if err := checkNames(r.current, queues, kinds); err != nil {
		return err
	}
	if *tenant != "" && !pronto.ValidTenant(*tenant) {
		return usageErrorf("jobs list: --tenant %q: must be 1 to 255 printable ASCII characters without spaces", *tenant)
	}
	p := &pronto.JobListParams{Queues: queues, Kinds: kinds, Tags: tags, Tenant: *tenant, Limit: *limit, Descending: !*asc,
		CreatedAfter: createdAfter.lower(), CreatedBefore: createdBefore.upper(), FinishedAfter: finishedAfter.lower(), FinishedBefore: finishedBefore.upper()}
	for _, s := range states {
		st := pronto.State(strings.ToLower(s))
		if !st.Valid() {
			return usageErrorf("jobs list: unknown state %q (states: %s)", s, stateNames())
		}
		p.States = append(p.States, st)
	}
	if *limit < 1 || *limit > 10000 {
		return usageErrorf("jobs list: --limit %d: must be between 1 and 10000", *limit)
	}
	if *cursor != "" {
		id, err := parseJobID(*cursor)
		if err != nil {
			return usageErrorf("jobs list: --cursor %q is not a job id", *cursor)
		}
		p.Cursor = id
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := c.JobList(ctx, p)
	if err != nil {
		if errors.Is(err, pronto.ErrInvalidArgs) {
			return usageErrorf("jobs list: %v", err)
		}
		return errorf("listing jobs in %s: %v", db.t.display, err)
	}
	if *asJSON {
		out := make([]*jobJSON, 0, len(res.Jobs))
		for _, j := range res.Jobs {
			out = append(out, toJSON(j))
		}
		return writeList(r.env.Stdout, "jobs", out, res.Next)
	}
	if len(res.Jobs) == 0 {
		fmt.Fprintln(r.env.Stderr, "no jobs match")
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tPRI\tCREATED\tDUE\tLAST ERROR")
	for _, j := range res.Jobs {
		due := "-"
		if j.State == pronto.StateScheduled || j.State == pronto.StateRetryable {
			due = until(j.ScheduledAt, now)
		}
		errText := truncate(lastError(j), 60)
		if errText == "" {
			errText = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\n",
			j.ID, j.Kind, j.Queue, j.State, j.Attempt, j.MaxAttempts, j.Priority, ago(j.CreatedAt, now), due, errText)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.Next != "" {
		fmt.Fprintf(r.env.Stderr, "more jobs: add --cursor %s for the next page\n", res.Next)
	}
	return nil
}

// stateNames lists the job states in lifecycle order.
func stateNames() string {
	names := make([]string, len(store.AllStates))
	for i, s := range store.AllStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// idCommand runs a command on one job or workflow given by its id: it parses the flags and the id,
// opens an admin client, runs do, and prints the result as JSON (--json, through asJSON) or as text.
// fail turns do's error into the command's error.
func idCommand[T any](ctx context.Context, r *runner, args []string, about string,
	do func(ctx context.Context, c *pronto.Client, id string) (T, error),
	fail func(id string, err error) error, asJSON func(T) any, print func(T),
) error {
	fs := r.newFlagSet("pronto "+r.current+" ID [flags]", about).withDatabase()
	wantJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	noun := "job"
	if strings.HasPrefix(r.current, "workflows ") {
		noun = "workflow"
	}
	id, err := parseID(noun, pos[0])
	if err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := do(ctx, c, id)
	if err != nil {
		return fail(id, err)
	}
	if *wantJSON {
		return writeJSON(r.env.Stdout, asJSON(v))
	}
	print(v)
	return nil
}

// jobCommand runs a command on one job given by id: get, retry, cancel, delete.
func (r *runner) jobCommand(ctx context.Context, args []string, about string,
	do func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error),
	print func(j *pronto.JobRow),
) error {
	op := strings.TrimPrefix(r.current, "jobs ")
	return idCommand(ctx, r, args, about, do,
		func(id string, err error) error { return jobError(op, id, err) },
		func(j *pronto.JobRow) any { return toJSON(j) }, print)
}

func cmdJobsGet(ctx context.Context, r *runner, args []string) error {
	return r.jobCommand(ctx, args, "Show a job in full: args, state, attempts, timestamps, result and error history.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error) {
			return c.JobGet(ctx, id)
		},
		func(j *pronto.JobRow) { printJob(r.env.Stdout, j, time.Now()) })
}

func cmdJobsRetry(ctx context.Context, r *runner, args []string) error {
	return r.jobCommand(ctx, args,
		"Make a discarded or cancelled job available again: its attempts start over, its error history\nis kept.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error) {
			return c.JobRetry(ctx, id)
		},
		func(j *pronto.JobRow) {
			fmt.Fprintf(r.env.Stdout, "job %s retried: now %s (attempts start over, 0 of %d used)\n", j.ID, j.State, j.MaxAttempts)
		})
}

func cmdJobsCancel(ctx context.Context, r *runner, args []string) error {
	return r.jobCommand(ctx, args,
		"Cancel a job that has not finished: a queued job never runs; a running one has its context\n"+
			"cancelled on whichever client runs it. 'pronto jobs retry' brings it back.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error) {
			return c.JobCancel(ctx, id)
		},
		func(j *pronto.JobRow) { fmt.Fprintf(r.env.Stdout, "job %s cancelled\n", j.ID) })
}

func cmdJobsActivate(ctx context.Context, r *runner, args []string) error {
	return r.jobCommand(ctx, args, "Make a pending job (inserted with 'enqueue --pending') available, so a worker can claim it.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error) {
			return c.JobActivate(ctx, id)
		},
		func(j *pronto.JobRow) { fmt.Fprintf(r.env.Stdout, "job %s activated: now %s\n", j.ID, j.State) })
}

func cmdJobsRunNow(ctx context.Context, r *runner, args []string) error {
	return r.jobCommand(ctx, args, "Make a scheduled or retryable job due now, so a worker can claim it at once.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error) {
			return c.JobRunNow(ctx, id)
		},
		func(j *pronto.JobRow) { fmt.Fprintf(r.env.Stdout, "job %s is due now: %s\n", j.ID, j.State) })
}

func cmdJobsDelete(ctx context.Context, r *runner, args []string) error {
	return r.jobCommand(ctx, args,
		"Delete a job for good. A running job must be cancelled first. With --json, prints the job as it\nwas.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.JobRow, error) {
			return c.JobDelete(ctx, id)
		},
		func(j *pronto.JobRow) { fmt.Fprintf(r.env.Stdout, "job %s deleted (it was %s)\n", j.ID, j.State) })
}

// checkNames refuses a filter by a queue name or kind that no job can have: "--queue Email" is a
// mistake to report, not a filter that matches nothing.
func checkNames(cmd string, queues, kinds []string) error {
	for _, q := range queues {
		if !pronto.ValidQueueName(q) {
			return usageErrorf("%s: --queue %q: not a queue name: queue names are %s", cmd, q, pronto.QueueNameRule)
		}
	}
	for _, k := range kinds {
		if !pronto.ValidKind(k) {
			return usageErrorf("%s: --kind %q: not a kind: kinds are %s", cmd, k, pronto.KindRule)
		}
	}
	return nil
}
