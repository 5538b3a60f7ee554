package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// queueJSON is the JSON form of a queue printed by 'queues list --json'. Counts has every state.
type queueJSON struct {
	Name   string                 `json:"name"`
	Paused bool                   `json:"paused"`
	Counts map[pronto.State]int64 `json:"counts"`
	Total  int64                  `json:"total"`
}

func cmdQueuesList(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto queues list [flags]",
		"List every queue that has jobs or is paused, with its job counts per state.").withDatabase()
	asJSON := fs.Bool("json", false, `print {"queues": [...], "next": ""} as JSON`)
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	qs, err := c.QueueList(ctx)
	if err != nil {
		return errorf("listing queues in %s: %v", db.t.display, err)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	if *asJSON {
		out := make([]queueJSON, 0, len(qs))
		for _, q := range qs {
			qj := queueJSON{Name: q.Name, Paused: q.Paused, Counts: make(map[pronto.State]int64, len(store.AllStates))}
			for _, s := range store.AllStates {
				qj.Counts[s] = q.Counts[s]
				qj.Total += q.Counts[s]
			}
			out = append(out, qj)
		}
		return writeList(r.env.Stdout, "queues", out, "")
	}
	if len(qs) == 0 {
		fmt.Fprintln(r.env.Stderr, "no queues yet: a queue appears when a job is inserted into it")
		return nil
	}
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "QUEUE\tSTATUS\t")
	for _, s := range store.AllStates {
		fmt.Fprintf(tw, "%s\t", strings.ToUpper(string(s)))
	}
	fmt.Fprint(tw, "TOTAL\n")
	for _, q := range qs {
		status := "running"
		if q.Paused {
			status = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t", q.Name, status)
		var total int64
		for _, s := range store.AllStates {
			fmt.Fprintf(tw, "%d\t", q.Counts[s])
			total += q.Counts[s]
		}
		fmt.Fprintf(tw, "%d\n", total)
	}
	return tw.Flush()
}

// queueAdmin parses the command's one argument, a queue name, checks it, and opens the admin
// client; the caller closes db.
func (r *runner) queueAdmin(ctx context.Context, fs *flagSet, args []string) (string, *pronto.Client, *database, error) {
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return "", nil, nil, err
	}
	q := pos[0]
	if !pronto.ValidQueueName(q) {
		return "", nil, nil, usageErrorf("%s: invalid queue name %q: queue names are %s", r.current, q, pronto.QueueNameRule)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	return q, c, db, nil
}

// queueCommand pauses or resumes one queue.
func (r *runner) queueCommand(ctx context.Context, args []string, about string,
	do func(ctx context.Context, c *pronto.Client, q string) error, done string,
) error {
	fs := r.newFlagSet("pronto "+r.current+" QUEUE [flags]", about).withDatabase()
	q, c, db, err := r.queueAdmin(ctx, fs, args)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := do(ctx, c, q); err != nil {
		if errors.Is(err, pronto.ErrInvalidArgs) {
			return usageErrorf("%v", err)
		}
		return errorf("%v", err)
	}
	fmt.Fprintf(r.env.Stdout, "queue %s %s\n", q, done)
	return nil
}

func cmdQueuesPause(ctx context.Context, r *runner, args []string) error {
	return r.queueCommand(ctx, args,
		"Pause a queue: no client claims its jobs until it is resumed (running jobs finish). Inserts into\n"+
			"a paused queue still succeed. A queue that has no jobs yet may be paused too.",
		func(ctx context.Context, c *pronto.Client, q string) error { return c.QueuePause(ctx, q) },
		"paused")
}

func cmdQueuesResume(ctx context.Context, r *runner, args []string) error {
	return r.queueCommand(ctx, args, "Resume a paused queue: clients claim its jobs again at once.",
		func(ctx context.Context, c *pronto.Client, q string) error { return c.QueueResume(ctx, q) },
		"resumed")
}

// priorityCountsJSON is what 'queues priorities --json' prints: ojs-priority.md §10.3's shape, as
// GET /ojs/v1/queues/{name}/priority-stats answers.
type priorityCountsJSON struct {
	Queue  string           `json:"queue"`
	Counts map[string]int64 `json:"counts_by_priority"`
	Total  int64            `json:"total"`
}

func cmdQueuesPriorities(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto queues priorities QUEUE [flags]",
		"Count a queue's available jobs per priority, highest (claimed first) first.").withDatabase()
	asJSON := fs.Bool("json", false, `print {"queue", "counts_by_priority": {"<priority>": n}, "total"} as JSON`)
	q, c, db, err := r.queueAdmin(ctx, fs, args)
	if err != nil {
		return err
	}
	defer db.Close()
	counts, err := c.QueueAvailableByPriority(ctx, q)
	if err != nil {
		return errorf("counting the available jobs of queue %s in %s: %v", q, db.t.display, err)
	}
	prios := make([]int, 0, len(counts))
	var total int64
	for p, n := range counts {
		prios = append(prios, p)
		total += n
	}
	sort.Sort(sort.Reverse(sort.IntSlice(prios)))
	if *asJSON {
		out := priorityCountsJSON{Queue: q, Counts: make(map[string]int64, len(counts)), Total: total}
		for p, n := range counts {
			out.Counts[strconv.Itoa(p)] = n
		}
		return writeJSON(r.env.Stdout, out)
	}
	if len(prios) == 0 {
		fmt.Fprintf(r.env.Stderr, "queue %s has no available jobs\n", q)
		return nil
	}
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "PRIORITY\tAVAILABLE\n")
	for _, p := range prios {
		fmt.Fprintf(tw, "%d\t%d\n", p, counts[p])
	}
	fmt.Fprintf(tw, "total\t%d\n", total)
	return tw.Flush()
}
