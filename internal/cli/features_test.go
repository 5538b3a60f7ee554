package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// openClient opens the database named by the flags db, as the commands do, and returns a client on it.
func openClient(t *testing.T, db []string) *pronto.Client {
	t.Helper()
	r := &runner{env: Env{SharedMemory: true}}
	fs := r.newFlagSet("", "").withDatabase()
	if err := fs.Parse(db); err != nil {
		t.Fatal(err)
	}
	d, err := r.open(context.Background(), openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	c, err := pronto.NewClient(d.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWorkflowsCommands(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		c := openClient(t, db)
		wf := pronto.NewChain("nightly",
			pronto.WorkflowJob{Args: echoArgs{Msg: "one"}},
			pronto.WorkflowJob{Args: echoArgs{Msg: "two"}},
		).OnComplete(pronto.WorkflowJob{Args: echoArgs{Msg: "done"}})
		if _, err := c.WorkflowInsert(context.Background(), wf); err != nil {
			t.Fatal(err)
		}
		out := run(t, with(db, "workflows", "get", wf.ID())...).ok(t).stdout
		if !strings.Contains(out, "running, 0 of 2 steps completed") || !strings.Contains(out, "pending") {
			t.Fatalf("workflows get:\n%s", out)
		}
		table := run(t, with(db, "workflows", "jobs", wf.ID())...).ok(t).stdout
		if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 4 || !strings.Contains(table, "on_complete") {
			t.Fatalf("workflows jobs:\n%s", table)
		}
		var got workflowJSON
		run(t, with(db, "workflows", "cancel", wf.ID(), "--json")...).ok(t).decode(t, &got)
		if got.State != pronto.WorkflowCancelled || got.Counts[pronto.StateCancelled] != 2 || got.Total != 2 {
			t.Fatalf("workflows cancel: %+v", got)
		}
		run(t, with(db, "workflows", "get", "01a208c4-315b-705a-bc19-a2f30fe201c6")...).fails(t, ExitNotFound, "not found")
		run(t, with(db, "workflows", "get", "nope")...).fails(t, ExitUsage, "invalid workflow id")
	})
}

func TestRateLimitsCommands(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		res := run(t, with(db, "rate-limits", "list")...).ok(t)
		if res.stdout != "" || !strings.Contains(res.stderr, "no rate limits") {
			t.Fatalf("empty list:\n%s", res)
		}
		run(t, with(db, "rate-limits", "set", "partner-api", "--max-active", "3", "--rate", "10", "--period", "1s")...).ok(t)
		var list struct {
			RateLimits []rateLimitJSON `json:"rate_limits"`
		}
		run(t, with(db, "rate-limits", "list", "--json")...).ok(t).decode(t, &list)
		got := list.RateLimits
		if len(got) != 1 || got[0].Key != "partner-api" || got[0].MaxActive != 3 || got[0].Rate != 10 || got[0].Period != "PT1S" || got[0].OnLimit != "wait" {
			t.Fatalf("list: %+v", got)
		}
		run(t, with(db, "rate-limits", "set", "partner-api", "--rate", "10")...).fails(t, ExitUsage, "--rate and --period go together")
		run(t, with(db, "rate-limits", "set", "bad key", "--max-active", "1")...).fails(t, ExitUsage, "rate key")
		run(t, with(db, "rate-limits", "delete", "partner-api")...).ok(t)
		run(t, with(db, "rate-limits", "delete", "partner-api")...).fails(t, ExitNotFound, "no rate limit")
	})
}
