package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/store"
)

// workflowJSON is the JSON form of a workflow printed by 'workflows get|cancel --json'.
type workflowJSON struct {
	ID          string               `json:"id"`
	Name        string               `json:"name"`
	Type        string               `json:"type"`
	State       pronto.WorkflowState `json:"state"`
	Total       int                  `json:"total"`
	Counts      map[pronto.State]int `json:"counts"`
	CreatedAt   time.Time            `json:"created_at"`
	CancelledAt *time.Time           `json:"cancelled_at,omitempty"`
	FinishedAt  *time.Time           `json:"finished_at,omitempty"`
}

func toWorkflowJSON(w *pronto.WorkflowInfo) workflowJSON {
	out := workflowJSON{ID: w.ID, Name: w.Name, Type: w.Type, State: w.State, Total: w.Total,
		Counts: make(map[pronto.State]int, len(store.AllStates)), CreatedAt: w.CreatedAt,
		CancelledAt: timePtr(w.CancelledAt), FinishedAt: timePtr(w.FinishedAt)}
	for _, s := range store.AllStates {
		out.Counts[s] = w.Counts[s]
	}
	return out
}

func printWorkflow(w io.Writer, wf *pronto.WorkflowInfo) {
	fmt.Fprintf(w, "workflow %s (%s %q): %s, %d of %d steps completed\n",
		wf.ID, wf.Type, wf.Name, wf.State, wf.Counts[pronto.StateCompleted], wf.Total)
	for _, s := range store.AllStates {
		if n := wf.Counts[s]; n > 0 {
			fmt.Fprintf(w, "  %-10s %d\n", s, n)
		}
	}
}

// workflowError turns an error about one workflow into a message and an exit code.
func workflowError(id string, err error) error {
	if errors.Is(err, pronto.ErrNotFound) {
		return notFoundf("workflow %s not found", id)
	}
	return errorf("%v", err)
}

// workflowCommand runs a command on one workflow given by id: get, cancel.
func (r *runner) workflowCommand(ctx context.Context, args []string, about string,
	do func(ctx context.Context, c *pronto.Client, id string) (*pronto.WorkflowInfo, error),
) error {
	return idCommand(ctx, r, args, about, do, workflowError,
		func(w *pronto.WorkflowInfo) any { return toWorkflowJSON(w) },
		func(w *pronto.WorkflowInfo) { printWorkflow(r.env.Stdout, w) })
}

func cmdWorkflowsGet(ctx context.Context, r *runner, args []string) error {
	return r.workflowCommand(ctx, args, "Show a workflow's state and its steps' counts per job state.",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.WorkflowInfo, error) {
			return c.WorkflowGet(ctx, id)
		})
}

func cmdWorkflowsJobs(ctx context.Context, r *runner, args []string) error {
	return idCommand(ctx, r, args, "List every job of a workflow (steps and callbacks), in insertion order.",
		func(ctx context.Context, c *pronto.Client, id string) ([]*pronto.JobRow, error) {
			return c.WorkflowJobs(ctx, id)
		},
		workflowError,
		func(jobs []*pronto.JobRow) any {
			out := make([]*jobJSON, len(jobs))
			for i, j := range jobs {
				out[i] = toJSON(j)
			}
			return map[string]any{"jobs": out, "next": ""} // writeList's shape
		},
		func(jobs []*pronto.JobRow) {
			tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tPARENTS\tCALLBACK")
			for _, j := range jobs {
				cb := "-"
				if j.RunOn != "" {
					cb = "on_" + string(j.RunOn)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", j.ID, j.Kind, j.Queue, j.State, len(j.ParentIDs), cb)
			}
			_ = tw.Flush()
		})
}

func cmdWorkflowsCancel(ctx context.Context, r *runner, args []string) error {
	return r.workflowCommand(ctx, args,
		"Cancel a workflow: every job of it that has not finished is cancelled (running ones are told to stop).",
		func(ctx context.Context, c *pronto.Client, id string) (*pronto.WorkflowInfo, error) {
			return c.WorkflowCancel(ctx, id)
		})
}

// rateLimitJSON is the JSON form of a limit printed by 'rate-limits list --json'.
type rateLimitJSON struct {
	Key         string     `json:"key"`
	MaxActive   int        `json:"max_active,omitempty"`
	Rate        int        `json:"rate,omitempty"`
	Period      string     `json:"period,omitempty"` // ISO 8601, as every duration in the JSON output
	OnLimit     string     `json:"on_limit"`
	Active      int64      `json:"active"`
	WindowStart *time.Time `json:"window_start,omitempty"`
	WindowCount int64      `json:"window_count"`
	Waiting     int64      `json:"waiting"`
}

func onLimit(a pronto.LimitAction) string {
	if a == "" {
		return string(pronto.LimitWait)
	}
	return string(a)
}

func cmdRateLimitsList(ctx context.Context, r *runner, args []string) error {
	return listCommand[*pronto.RateLimitInfo, rateLimitJSON]{
		synopsis: "pronto rate-limits list [flags]", about: "List every stored rate limit with its current use.",
		key: "rate_limits", empty: "no rate limits stored",
		list: (*pronto.Client).RateLimitList, toJSON: toRateLimitJSON, table: printRateLimits,
	}.run(ctx, r, args)
}

// toRateLimitJSON is a stored limit as 'rate-limits list --json' prints it.
func toRateLimitJSON(in *pronto.RateLimitInfo) rateLimitJSON {
	out := rateLimitJSON{Key: in.Key, MaxActive: in.Limit.MaxActive, Rate: in.Limit.Rate,
		OnLimit: onLimit(in.Limit.OnLimit), Active: in.Active, WindowStart: timePtr(in.WindowStart),
		WindowCount: in.WindowCount, Waiting: in.Waiting}
	if in.Limit.Period > 0 {
		out.Period = isodur.Format(in.Limit.Period)
	}
	return out
}

// printRateLimits prints stored rate limits as a table.
func printRateLimits(r *runner, infos []*pronto.RateLimitInfo) error {
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMAX ACTIVE\tRATE\tON LIMIT\tACTIVE\tSTARTED IN WINDOW\tWAITING")
	for _, in := range infos {
		maxActive, rate := "-", "-"
		if in.Limit.MaxActive > 0 {
			maxActive = fmt.Sprint(in.Limit.MaxActive)
		}
		if in.Limit.Rate > 0 {
			rate = fmt.Sprintf("%d/%s", in.Limit.Rate, in.Limit.Period)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", in.Key, maxActive, rate, onLimit(in.Limit.OnLimit),
			in.Active, in.WindowCount, in.Waiting)
	}
	return tw.Flush()
}

func cmdRateLimitsSet(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto rate-limits set KEY [flags]",
		"Store (or replace) the limit of a rate key, for every client: jobs inserted with that key are held\n"+
			"to it from their next claim.").withDatabase()
	maxActive := fs.Int("max-active", 0, "at most `N` of the key's jobs running at once (0: no bound)")
	rate := fs.Int("rate", 0, "at most `N` of the key's jobs started per --period (0: no bound)")
	period := fs.duration("period", 0, "the rate's window, a `DURATION` such as 1s or 1m")
	action := fs.String("on-limit", "wait", "`ACTION` taken on a held-back job: wait, reschedule or drop")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	// Checked here to speak of the flags; the library checks the same in its own terms.
	switch {
	case *maxActive < 0 || *rate < 0 || *period < 0:
		return usageErrorf("rate-limits set: --max-active, --rate and --period must not be negative")
	case *rate > 0 && *period == 0 && fs.given("period"):
		return usageErrorf("rate-limits set: --period %s: the rate's window must be positive, for example 1s or 1m", *period)
	case (*rate > 0) != (*period > 0):
		return usageErrorf("rate-limits set: --rate and --period go together: give both (for example --rate 10 --period 1s) or neither")
	case *maxActive == 0 && *rate == 0:
		return usageErrorf("rate-limits set: no bound given: use --max-active N, or --rate N with --period DURATION")
	}
	switch pronto.LimitAction(*action) {
	case pronto.LimitWait, pronto.LimitReschedule, pronto.LimitDrop:
	default:
		return usageErrorf("rate-limits set: --on-limit %q: must be wait, reschedule or drop", *action)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	l := pronto.RateLimit{MaxActive: *maxActive, Rate: *rate, Period: *period, OnLimit: pronto.LimitAction(*action)}
	if err := c.RateLimitSet(ctx, pos[0], l); err != nil {
		if errors.Is(err, pronto.ErrInvalidArgs) {
			return usageErrorf("rate-limits set: %v", err)
		}
		return errorf("%v", err)
	}
	fmt.Fprintf(r.env.Stdout, "rate limit %s stored\n", pos[0])
	return nil
}

func cmdRateLimitsDelete(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto rate-limits delete KEY [flags]", "Remove a rate key's limit: its jobs run unlimited.").withDatabase()
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if !pronto.ValidRateKey(pos[0]) {
		// A name no job can have is a typo, not a key already removed.
		return usageErrorf("rate-limits delete: invalid rate key %q", pos[0])
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := c.RateLimitDelete(ctx, pos[0]); err != nil {
		if errors.Is(err, pronto.ErrNotFound) {
			return notFoundf("no rate limit stored under %q", pos[0])
		}
		return errorf("%v", err)
	}
	fmt.Fprintf(r.env.Stdout, "rate limit %s deleted\n", pos[0])
	return nil
}
