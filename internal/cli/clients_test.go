package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestJobsListTimeWindows: --created-after/--created-before and --finished-after/--finished-before
// take RFC 3339 times or durations ago, filter as the Go API does, and bad values are usage errors.
func TestJobsListTimeWindows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
		listed := func(args ...string) []string {
			var out struct {
				Jobs []jobJSON `json:"jobs"`
			}
			run(t, with(db, append([]string{"jobs", "list", "--json"}, args...)...)...).ok(t).decode(t, &out)
			var ids []string
			for _, j := range out.Jobs {
				ids = append(ids, j.ID)
			}
			return ids
		}
		if got := listed("--created-after", "1h"); len(got) != 1 || got[0] != id {
			t.Fatalf("--created-after 1h: %v", got)
		}
		if got := listed("--created-before", "1h"); len(got) != 0 {
			t.Fatalf("--created-before 1h lists a job created now: %v", got)
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if got := listed("--created-before", future); len(got) != 1 {
			t.Fatalf("--created-before %s: %v", future, got)
		}
		if got := listed("--finished-after", "1h"); len(got) != 0 {
			t.Fatalf("--finished-after lists an unfinished job: %v", got)
		}
		run(t, with(db, "jobs", "cancel", id)...).ok(t)
		if got := listed("--finished-after", "1h"); len(got) != 1 || got[0] != id {
			t.Fatalf("--finished-after 1h after cancel: %v", got)
		}
		run(t, with(db, "jobs", "list", "--created-after", "yesterday")...).fails(t, ExitUsage, "not a time")
		run(t, with(db, "jobs", "list", "--finished-before", "-5m")...).fails(t, ExitUsage, "not a time")
	})
}

// TestJobsListFinishedAfterZeroTime: the zero time is a bound like any other, so --finished-after
// 0001-01-01T00:00:00Z lists the finished jobs only, as the README says.
func TestJobsListFinishedAfterZeroTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		waiting := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
		done := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
		run(t, with(db, "jobs", "cancel", done)...).ok(t)
		var l struct {
			Jobs []struct{ ID, State string }
		}
		run(t, with(db, "jobs", "list", "--json", "--finished-after", "0001-01-01T00:00:00Z")...).ok(t).decode(t, &l)
		if len(l.Jobs) != 1 || l.Jobs[0].ID != done {
			t.Fatalf("--finished-after 0001-01-01T00:00:00Z: want only the cancelled job %s (not the waiting %s), got %+v", done, waiting, l.Jobs)
		}
	})
}

// TestJobsRunNow: a scheduled job is made due at once; a job that is not scheduled is refused.
func TestJobsRunNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b", "--delay", "1h")...).ok(t).stdout)
		if j := getJob(t, db, id); j.State != pronto.StateScheduled {
			t.Fatalf("enqueued with --delay: %s", j.State)
		}
		out := run(t, with(db, "jobs", "run-now", id)...).ok(t).stdout
		if !strings.Contains(out, "is due now: available") {
			t.Fatalf("jobs run-now:\n%s", out)
		}
		if j := getJob(t, db, id); j.State != pronto.StateAvailable || j.ScheduledAt.After(time.Now()) {
			t.Fatalf("after run-now: %s due %v", j.State, j.ScheduledAt)
		}
		res := run(t, with(db, "jobs", "run-now", id)...)
		if res.code == 0 {
			t.Fatalf("run-now of an available job succeeded:\n%s", res.stdout)
		}
		run(t, with(db, "jobs", "run-now", "01a208c4-315b-705a-bc19-a2f30fe201c6")...).fails(t, ExitNotFound, "not found")
	})
}

// TestWorkflowsList: workflows are listed newest first, paged by cursor, in a table and as JSON.
func TestWorkflowsList(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		run(t, with(db, "workflows", "list")...).ok(t)
		c := openClient(t, db)
		var ids []string
		for _, name := range []string{"first", "second", "third"} {
			wf := pronto.NewChain(name, pronto.WorkflowJob{Args: echoArgs{Msg: name}})
			if _, err := c.WorkflowInsert(context.Background(), wf); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, wf.ID())
		}
		table := run(t, with(db, "workflows", "list")...).ok(t).stdout
		if !strings.HasPrefix(table, "ID") || strings.Index(table, "third") > strings.Index(table, "first") ||
			!strings.Contains(table, "0/1") {
			t.Fatalf("workflows list:\n%s", table)
		}
		var page struct {
			Workflows []workflowJSON `json:"workflows"`
			Next      string         `json:"next"`
		}
		run(t, with(db, "workflows", "list", "--json", "--limit", "2")...).ok(t).decode(t, &page)
		if len(page.Workflows) != 2 || page.Workflows[0].ID != ids[2] || page.Workflows[1].ID != ids[1] || page.Next == "" {
			t.Fatalf("first page: %+v", page)
		}
		run(t, with(db, "workflows", "list", "--json", "--limit", "2", "--cursor", page.Next)...).ok(t).decode(t, &page)
		if len(page.Workflows) != 1 || page.Workflows[0].ID != ids[0] || page.Next != "" {
			t.Fatalf("second page: %+v", page)
		}
		run(t, with(db, "workflows", "list", "--limit", "0")...).fails(t, ExitUsage, "--limit 0")
		run(t, with(db, "workflows", "list", "--cursor", "nope")...).fails(t, ExitUsage, "not a workflow id")
	})
}

// TestClientsList: a started client with a queue is listed with its workers and as leader; it is
// gone once it stops.
func TestClientsList(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		ctx := context.Background()
		r := &runner{env: Env{SharedMemory: true}}
		fs := r.newFlagSet("", "").withDatabase()
		if err := fs.Parse(db); err != nil {
			t.Fatal(err)
		}
		d, err := r.open(ctx, openOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[echoArgs]) error { return nil }))
		client, err := pronto.NewClient(d.store, &pronto.Config{
			Queues: map[string]pronto.QueueConfig{"work": {MaxWorkers: 3}}, Workers: workers,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := client.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var list struct {
			Clients []clientJSON `json:"clients"`
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			run(t, with(db, "clients", "list", "--json")...).ok(t).decode(t, &list)
			if len(list.Clients) == 1 && list.Clients[0].Leader || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(list.Clients) != 1 || !list.Clients[0].Leader || len(list.Clients[0].Queues) != 1 ||
			list.Clients[0].Queues[0].Name != "work" || list.Clients[0].Queues[0].Workers != 3 || list.Clients[0].PID == 0 {
			t.Fatalf("clients list: %+v", list)
		}
		table := run(t, with(db, "clients", "list")...).ok(t).stdout
		if !strings.Contains(table, "work 0/3") || !strings.Contains(table, "yes") {
			t.Fatalf("clients list table:\n%s", table)
		}
		if err := client.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		run(t, with(db, "clients", "list", "--json")...).ok(t).decode(t, &list)
		if len(list.Clients) != 0 {
			t.Fatalf("a stopped client is still listed: %+v", list)
		}
	})
}
