package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// Every started client is listed by every client of the store, with its queues and worker counts;
// exactly one leads; a stopped client is gone at once.
func TestClientList(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		release := make(chan struct{})
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[blockArgs]) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}))
		cfg := heldConfig(workers, map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 3}, "mail": {MaxWorkers: 2}})
		cfg.ID = "a-worker"
		worker := startClient(t, ts.Store, cfg)
		other, err := pronto.NewClient(ts.reopen(t), &pronto.Config{ID: "b-inserter", LeaderTTL: time.Second, DisableMaintenance: true})
		require.NoError(t, err)
		require.NoError(t, other.Start(context.Background()))
		defer close(release)

		_, err = other.Insert(context.Background(), blockArgs{Key: "x"}, nil)
		require.NoError(t, err)
		var list []pronto.ClientInfo
		require.Eventually(t, func() bool {
			list, err = other.ClientList(context.Background())
			require.NoError(t, err)
			return len(list) == 2 && list[0].Leader && len(list[0].Queues) == 2 && list[0].Queues[0].Running == 1
		}, 15*time.Second, 20*time.Millisecond, "the worker is listed, leading, running its job: %+v", list)
		w := list[0]
		require.Equal(t, "a-worker", w.ID)
		require.Equal(t, []pronto.ClientQueueInfo{{Name: pronto.DefaultQueue, MaxWorkers: 3, Running: 1}, {Name: "mail", MaxWorkers: 2}}, w.Queues)
		require.NotZero(t, w.PID)
		require.NotEmpty(t, w.Version)
		require.False(t, w.StartedAt.IsZero())
		require.Equal(t, "b-inserter", list[1].ID)
		require.False(t, list[1].Leader, "a client without maintenance never leads")
		require.Empty(t, list[1].Queues)

		// Seen from the worker's side too.
		mine, err := worker.ClientList(context.Background())
		require.NoError(t, err)
		require.Len(t, mine, 2)

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, other.Stop(ctx))
		mine, err = worker.ClientList(context.Background())
		require.NoError(t, err)
		require.Len(t, mine, 1, "a stopped client removes its record")
		require.Equal(t, "a-worker", mine[0].ID)
	})
}

// JobList's time windows and WorkflowList, through the client.
func TestJobListWindowsAndWorkflowList(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		old, err := c.Insert(ctx, echoArgs{}, &pronto.InsertOpts{ID: "01890a5d-ac96-7000-8000-000000000001"}) // 2023
		require.NoError(t, err)
		fresh, err := c.Insert(ctx, echoArgs{}, nil)
		require.NoError(t, err)
		res, err := c.JobList(ctx, &pronto.JobListParams{CreatedAfter: time.Now().Add(-time.Hour)})
		require.NoError(t, err)
		require.Equal(t, []string{fresh.ID}, jobIDs(res.Jobs))
		res, err = c.JobList(ctx, &pronto.JobListParams{CreatedBefore: time.Now().Add(-time.Hour), Descending: true})
		require.NoError(t, err)
		require.Equal(t, []string{old.ID}, jobIDs(res.Jobs))
		_, err = c.JobCancel(ctx, old.ID)
		require.NoError(t, err)
		res, err = c.JobList(ctx, &pronto.JobListParams{FinishedAfter: time.Now().Add(-time.Hour)})
		require.NoError(t, err)
		require.Equal(t, []string{old.ID}, jobIDs(res.Jobs))

		var ids []string
		for range 3 {
			r, err := c.WorkflowInsert(ctx, pronto.NewChain("listed", pronto.WorkflowJob{Args: echoArgs{}}))
			require.NoError(t, err)
			ids = append(ids, r.Workflow.ID)
		}
		page, err := c.WorkflowList(ctx, &pronto.WorkflowListParams{Limit: 2})
		require.NoError(t, err)
		require.Len(t, page.Workflows, 2)
		require.Equal(t, []string{ids[2], ids[1]}, []string{page.Workflows[0].ID, page.Workflows[1].ID}, "newest first")
		require.Equal(t, "listed", page.Workflows[0].Name)
		page, err = c.WorkflowList(ctx, &pronto.WorkflowListParams{Limit: 2, Cursor: page.Next})
		require.NoError(t, err)
		require.Len(t, page.Workflows, 1)
		require.Equal(t, ids[0], page.Workflows[0].ID)
		require.Empty(t, page.Next)
		_, err = c.WorkflowList(ctx, &pronto.WorkflowListParams{Cursor: "nope"})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
	})
}

func jobIDs(jobs []*pronto.JobRow) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}
