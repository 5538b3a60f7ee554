package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// cronJSON is the JSON form of a cron schedule printed by the cron commands' --json.
type cronJSON struct {
	Name          string          `json:"name"`
	Expression    string          `json:"expression"`
	Timezone      string          `json:"timezone,omitempty"`
	Kind          string          `json:"kind"`
	Args          json.RawMessage `json:"args"`
	Queue         string          `json:"queue"`
	Priority      int             `json:"priority,omitempty"`
	MaxAttempts   int             `json:"max_attempts,omitempty"`
	Timeout       string          `json:"timeout,omitempty"`
	Tags          []string        `json:"tags,omitempty"`
	OverlapPolicy string          `json:"overlap_policy"`
	Description   string          `json:"description,omitempty"`
	Paused        bool            `json:"paused"`
	CreatedAt     time.Time       `json:"created_at"`
	NextRunAt     *time.Time      `json:"next_run_at,omitempty"`
	LastRunAt     *time.Time      `json:"last_run_at,omitempty"`
	RunCount      int64           `json:"run_count"`
	LastJobID     string          `json:"last_job_id,omitempty"`
}

func toCronJSON(j *pronto.CronJob) cronJSON {
	out := cronJSON{Name: j.Name, Expression: j.Expression, Timezone: j.Timezone, Kind: j.Kind, Args: j.Args,
		Queue: j.Opts.Queue, Priority: j.Opts.Priority, MaxAttempts: j.Opts.MaxAttempts, Tags: j.Opts.Tags,
		OverlapPolicy: string(j.OverlapPolicy), Description: j.Description, Paused: j.Paused,
		CreatedAt: j.CreatedAt, NextRunAt: timePtr(j.NextRunAt), LastRunAt: timePtr(j.LastRunAt),
		RunCount: j.RunCount, LastJobID: j.LastJobID}
	if len(out.Args) == 0 {
		out.Args = json.RawMessage("[]")
	}
	if out.Queue == "" {
		out.Queue = pronto.DefaultQueue
	}
	if out.OverlapPolicy == "" {
		out.OverlapPolicy = string(pronto.CronSkip)
	}
	if j.Opts.Timeout > 0 {
		out.Timeout = isodur.Format(j.Opts.Timeout)
	}
	return out
}

// printCron writes a schedule in full, one field a line.
func printCron(w io.Writer, j *pronto.CronJob, now time.Time) {
	c := toCronJSON(j)
	row := func(k, v string) { fmt.Fprintf(w, "%-13s %s\n", k+":", v) }
	row("Name", c.Name)
	sched := c.Expression
	if c.Timezone != "" {
		sched += " (" + c.Timezone + ")"
	}
	row("Schedule", sched)
	row("Kind", c.Kind)
	row("Args", compactJSON(c.Args))
	row("Queue", c.Queue)
	row("Overlap", c.OverlapPolicy)
	if c.Description != "" {
		row("Description", c.Description)
	}
	status := "active"
	if c.Paused {
		status = "paused"
	}
	row("Status", status)
	if !j.Paused {
		row("Next run", fmt.Sprintf("%s (%s)", j.NextRunAt.Local().Format("2006-01-02 15:04:05 -0700"), until(j.NextRunAt, now)))
	}
	row("Last run", formatTime(j.LastRunAt, now))
	row("Runs", fmt.Sprint(j.RunCount))
}

// cronError turns an error about one schedule into a message and an exit code.
func cronError(name string, err error) error {
	switch {
	case errors.Is(err, pronto.ErrNotFound):
		return notFoundf("no cron schedule named %q", name)
	case errors.Is(err, pronto.ErrInvalidArgs):
		return usageErrorf("%v", err)
	}
	return errorf("%v", err)
}

func cmdCronList(ctx context.Context, r *runner, args []string) error {
	return listCommand[*pronto.CronJob, cronJSON]{
		synopsis: "pronto cron list [flags]", about: "List every cron schedule, by name, with its next run.",
		key: "cron", empty: "no cron schedules: add one with 'pronto cron add NAME --schedule EXPR --kind KIND'",
		list: (*pronto.Client).CronList, toJSON: toCronJSON, table: printCrons,
	}.run(ctx, r, args)
}

// printCrons prints cron schedules as a table.
func printCrons(r *runner, list []*pronto.CronJob) error {
	now := time.Now()
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCHEDULE\tKIND\tQUEUE\tSTATUS\tNEXT RUN\tLAST RUN\tRUNS")
	for _, j := range list {
		c := toCronJSON(j)
		sched := c.Expression
		if c.Timezone != "" {
			sched += " (" + c.Timezone + ")"
		}
		status, next := "active", until(j.NextRunAt, now)
		if j.Paused {
			status, next = "paused", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", c.Name, sched, c.Kind, c.Queue, status, next, ago(j.LastRunAt, now), j.RunCount)
	}
	return tw.Flush()
}

// cronNameRule is the rule pronto.ValidCronName checks: the characters of a queue name, with its own
// bound and examples.
const cronNameRule = "[a-z0-9][a-z0-9.-]* (at most 255 characters), such as nightly-report or cleanup.hourly"

func cmdCronAdd(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto cron add NAME --schedule EXPR --kind KIND [flags]",
		"Register a periodic job: on every occurrence of the schedule, one job of KIND is inserted.\n"+
			"Occurrences fire while a process runs the cron scheduler: 'pronto serve', or a Go client's\n"+
			"RunCron (any number of them; one leader fires each occurrence once). To change a schedule,\n"+
			"delete it and add it again.\n\n"+
			"EXPR is a 5-field cron expression (minute hour day-of-month month day-of-week), a 6-field one\n"+
			"with seconds first, or @hourly, @daily, @weekly, @monthly, @yearly, @every DURATION.\n\n"+
			"Example:\n"+
			"  pronto cron add nightly-report --schedule '30 2 * * *' --timezone Europe/Paris \\\n"+
			"    --kind report.build --args '{\"period\":\"day\"}' --queue reports").withDatabase()
	schedule := fs.String("schedule", "", "the cron `EXPR`ession (required)")
	timezone := fs.String("timezone", "", "the IANA `ZONE` the expression is read in, such as Europe/Paris (default UTC)")
	kind := fs.String("kind", "", "the `KIND` of job each occurrence inserts (required)")
	argsText := fs.String("args", "{}", "the job's args: `JSON`, @FILE to read a file, or - to read standard input")
	queue := fs.String("queue", pronto.DefaultQueue, "`QUEUE` to insert into")
	priority := fs.priority(fmt.Sprintf("`N` from %d to %d, or high (10), normal (0) or low (-10); higher runs first", pronto.PriorityMin, pronto.PriorityMax))
	maxAttempts := fs.Int("max-attempts", 0, "attempts before a job is discarded, `N` including the first (default 3)")
	timeout := fs.duration("timeout", 0, "bound each attempt to `DURATION` (default: none)")
	var tags listValue
	fs.Var(&tags, "tag", "label the jobs with `TAGS` (repeatable or comma-separated)")
	overlap := fs.String("overlap", string(pronto.CronSkip),
		"`POLICY` when the previous occurrence's job has not finished: skip, allow, cancel_previous or enqueue")
	description := fs.String("description", "", "free `TEXT` for people")
	asJSON := fs.Bool("json", false, "print the schedule as JSON")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	switch {
	case !pronto.ValidCronName(name):
		return usageErrorf("cron add: invalid name %q: cron names are %s", name, cronNameRule)
	case *schedule == "":
		return usageErrorf("cron add: --schedule is required, for example --schedule '*/5 * * * *' or --schedule @daily")
	case *kind == "":
		return usageErrorf("cron add: --kind is required: the kind of job each occurrence inserts")
	case !pronto.ValidKind(*kind):
		return usageErrorf("cron add: invalid kind %q: kinds are %s", *kind, pronto.KindRule)
	case !pronto.ValidQueueName(*queue):
		return usageErrorf("cron add: invalid queue name %q: queue names are %s", *queue, pronto.QueueNameRule)
	case *maxAttempts < 0 || *timeout < 0:
		return usageErrorf("cron add: --max-attempts and --timeout must not be negative")
	}
	switch pronto.CronOverlapPolicy(*overlap) {
	case pronto.CronSkip, pronto.CronAllow, pronto.CronCancelPrevious, pronto.CronEnqueue:
	default:
		return usageErrorf("cron add: --overlap %q: must be skip, allow, cancel_previous or enqueue", *overlap)
	}
	if _, err := pronto.ParseCron(*schedule, *timezone); err != nil {
		return usageErrorf("cron add: %v", err)
	}
	text, err := r.readArgsText(*argsText)
	if err != nil {
		return err
	}
	_, array, err := parseArgsJSON(text)
	if err != nil {
		return usageErrorf("cron add: %v", err)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	j, err := c.CronRegister(ctx, pronto.CronJob{
		Name: name, Expression: *schedule, Timezone: *timezone, Kind: *kind, Args: array,
		Opts: pronto.InsertOpts{Queue: *queue, Priority: *priority, MaxAttempts: *maxAttempts,
			Timeout: *timeout, Tags: tags},
		OverlapPolicy: pronto.CronOverlapPolicy(*overlap), Description: *description,
	})
	switch {
	case errors.Is(err, pronto.ErrDuplicate):
		return errorf("cron add: a schedule named %q exists already: delete it first to replace it", name)
	case errors.Is(err, pronto.ErrInvalidArgs):
		return usageErrorf("cron add: %v", err)
	case err != nil:
		return errorf("%v", err)
	}
	if *asJSON {
		return writeJSON(r.env.Stdout, toCronJSON(j))
	}
	fmt.Fprintf(r.env.Stdout, "cron schedule %s added: next run %s\n", j.Name,
		j.NextRunAt.Local().Format("2006-01-02 15:04:05 -0700"))
	return nil
}

// cronCommand runs a command on one schedule given by name: get, delete, pause, resume.
func (r *runner) cronCommand(ctx context.Context, args []string, about string,
	do func(ctx context.Context, c *pronto.Client, name string) (*pronto.CronJob, error), print func(j *pronto.CronJob),
) error {
	fs := r.newFlagSet("pronto "+r.current+" NAME [flags]", about).withDatabase()
	asJSON := fs.Bool("json", false, "print the schedule as JSON")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if !pronto.ValidCronName(name) {
		return usageErrorf("%s: invalid name %q: cron names are %s", r.current, name, cronNameRule)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	j, err := do(ctx, c, name)
	if err != nil {
		return cronError(name, err)
	}
	if *asJSON {
		return writeJSON(r.env.Stdout, toCronJSON(j))
	}
	print(j)
	return nil
}

func cmdCronGet(ctx context.Context, r *runner, args []string) error {
	return r.cronCommand(ctx, args, "Show a cron schedule: its expression, job, status and runs.",
		func(ctx context.Context, c *pronto.Client, name string) (*pronto.CronJob, error) {
			return c.CronGet(ctx, name)
		},
		func(j *pronto.CronJob) { printCron(r.env.Stdout, j, time.Now()) })
}

func cmdCronDelete(ctx context.Context, r *runner, args []string) error {
	return r.cronCommand(ctx, args, "Delete a cron schedule. Jobs it already inserted are not affected.",
		func(ctx context.Context, c *pronto.Client, name string) (*pronto.CronJob, error) {
			return c.CronDelete(ctx, name)
		},
		func(j *pronto.CronJob) { fmt.Fprintf(r.env.Stdout, "cron schedule %s deleted\n", j.Name) })
}

func cmdCronPause(ctx context.Context, r *runner, args []string) error {
	return r.cronCommand(ctx, args, "Pause a cron schedule: no occurrence fires until it is resumed.",
		func(ctx context.Context, c *pronto.Client, name string) (*pronto.CronJob, error) {
			return c.CronPause(ctx, name)
		},
		func(j *pronto.CronJob) { fmt.Fprintf(r.env.Stdout, "cron schedule %s paused\n", j.Name) })
}

func cmdCronResume(ctx context.Context, r *runner, args []string) error {
	return r.cronCommand(ctx, args,
		"Resume a paused cron schedule from its next occurrence; the ones missed while paused do not fire.",
		func(ctx context.Context, c *pronto.Client, name string) (*pronto.CronJob, error) {
			return c.CronResume(ctx, name)
		},
		func(j *pronto.CronJob) {
			fmt.Fprintf(r.env.Stdout, "cron schedule %s resumed: next run %s\n", j.Name,
				strings.TrimSpace(j.NextRunAt.Local().Format("2006-01-02 15:04:05 -0700")))
		})
}
