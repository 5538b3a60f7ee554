package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pronto-jobs/pronto"
)

func cmdWorkflowsList(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto workflows list [flags]",
		"List workflows, newest first (--asc for oldest first), one page at a time, with their state and\nhow many of their steps completed.").withDatabase()
	limit := fs.Int("limit", 50, "at most `N` workflows (1 to 1000)")
	cursor := fs.String("cursor", "", "continue after workflow `ID` (printed at the end of a full page)")
	asc := fs.Bool("asc", false, "oldest first")
	asJSON := fs.Bool("json", false, `print {"workflows": [...], "next": CURSOR} as JSON ("next" is "" on the last page)`)
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		return usageErrorf("workflows list: --limit %d: must be between 1 and 1000", *limit)
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := c.WorkflowList(ctx, &pronto.WorkflowListParams{Cursor: *cursor, Ascending: *asc, Limit: *limit})
	if err != nil {
		if errors.Is(err, pronto.ErrInvalidArgs) {
			return usageErrorf("workflows list: %v", err)
		}
		return errorf("listing workflows in %s: %v", db.t.display, err)
	}
	if *asJSON {
		out := make([]workflowJSON, len(res.Workflows))
		for i, w := range res.Workflows {
			out[i] = toWorkflowJSON(w)
		}
		return writeList(r.env.Stdout, "workflows", out, res.Next)
	}
	if len(res.Workflows) == 0 {
		fmt.Fprintln(r.env.Stderr, "no workflows")
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tNAME\tSTATE\tCOMPLETED\tCREATED")
	for _, w := range res.Workflows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", w.ID, w.Type, orDash(w.Name), w.State,
			w.Counts[pronto.StateCompleted], w.Total, ago(w.CreatedAt, now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.Next != "" {
		fmt.Fprintf(r.env.Stderr, "more workflows: add --cursor %s for the next page\n", res.Next)
	}
	return nil
}

// clientJSON is a live client as 'clients list --json' prints it.
type clientJSON struct {
	ID        string            `json:"id"`
	Host      string            `json:"host,omitempty"`
	PID       int               `json:"pid,omitempty"`
	Version   string            `json:"version,omitempty"`
	Leader    bool              `json:"leader"`
	Queues    []clientQueueJSON `json:"queues"`
	StartedAt time.Time         `json:"started_at"`
	SeenAt    time.Time         `json:"seen_at"`
}

type clientQueueJSON struct {
	Name    string `json:"name"`
	Workers int    `json:"workers"`
	Running int    `json:"running"`
}

func cmdClientsList(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto clients list [flags]",
		"List the clients using the database, from any process: each writes its record every 2 s while\n"+
			"it runs and removes it when it stops. Shows host and pid, version, which one leads maintenance,\n"+
			"and per queue its workers and the jobs it is running.").withDatabase()
	asJSON := fs.Bool("json", false, `print {"clients": [...], "next": ""} as JSON`)
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	list, err := c.ClientList(ctx)
	if err != nil {
		return errorf("listing clients of %s: %v", db.t.display, err)
	}
	if *asJSON {
		out := make([]clientJSON, len(list))
		for i, cl := range list {
			out[i] = clientJSON{ID: cl.ID, Host: cl.Host, PID: cl.PID, Version: cl.Version, Leader: cl.Leader,
				Queues: []clientQueueJSON{}, StartedAt: cl.StartedAt, SeenAt: cl.SeenAt}
			for _, q := range cl.Queues {
				out[i].Queues = append(out[i].Queues, clientQueueJSON{Name: q.Name, Workers: q.MaxWorkers, Running: q.Running})
			}
		}
		return writeList(r.env.Stdout, "clients", out, "")
	}
	if len(list) == 0 {
		fmt.Fprintln(r.env.Stderr, "no live clients")
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROCESS\tVERSION\tLEADER\tQUEUES (RUNNING/WORKERS)\tSTARTED")
	for _, cl := range list {
		proc := "-"
		if cl.Host != "" || cl.PID != 0 {
			proc = fmt.Sprintf("%s:%d", cl.Host, cl.PID)
		}
		var qs []string
		for _, q := range cl.Queues {
			qs = append(qs, fmt.Sprintf("%s %d/%d", q.Name, q.Running, q.MaxWorkers))
		}
		leader := "-"
		if cl.Leader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cl.ID, proc, orDash(cl.Version), leader,
			orDash(strings.Join(qs, ", ")), ago(cl.StartedAt, now))
	}
	return tw.Flush()
}

// orDash is s, or "-" when it is empty, for table cells.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
