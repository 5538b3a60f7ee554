package pronto_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/redistest"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
)

type clusterFetch struct {
	N int `json:"n"`
}

func (clusterFetch) Kind() string { return "cluster.fetch" }

type clusterSum struct{}

func (clusterSum) Kind() string { return "cluster.sum" }

type clusterMail struct{}

func (clusterMail) Kind() string { return "cluster.mail" }

// TestClientWorkflowAcrossClusterQueues runs workflows whose steps are in three queues of a local
// 3-master Redis Cluster, through two clients (as two processes would: one serves the fetch queue,
// the other the sum and mail queues), each opened from a URL naming one node: every workflow
// completes, each sum step receives its fetch steps' results from the other client's queue, and
// each success callback runs once.
func TestClientWorkflowAcrossClusterQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addrs := redistest.StartCluster(t)
	prefix := "clientwf:" + uuidv7.New() + ":"
	open := func(addr string) *redisstore.Store {
		st, err := redisstore.Open(ctx, "redis://"+addr+"?key_prefix="+prefix, redisstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}

	var mu sync.Mutex
	sums := map[string]string{} // workflow id -> the parent results its sum step saw
	mails := map[string]int{}
	fetchers := pronto.NewWorkers()
	pronto.AddWorker(fetchers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[clusterFetch]) error {
		return pronto.RecordResult(ctx, map[string]int{"n": job.Args.N})
	}))
	others := pronto.NewWorkers()
	pronto.AddWorker(others, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[clusterSum]) error {
		results, err := pronto.ParentResults(job.JobRow)
		if err != nil {
			return err
		}
		parts := make([]string, len(results))
		for i, r := range results {
			parts[i] = string(r)
		}
		mu.Lock()
		sums[job.WorkflowID] = strings.Join(parts, " ")
		mu.Unlock()
		return nil
	}))
	pronto.AddWorker(others, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[clusterMail]) error {
		mu.Lock()
		mails[job.WorkflowID]++
		mu.Unlock()
		return nil
	}))
	a := startClient(t, open(addrs[0]), fastConfig(fetchers, map[string]pronto.QueueConfig{"fetch": {MaxWorkers: 10}}))
	startClient(t, open(addrs[2]), fastConfig(others, map[string]pronto.QueueConfig{"sum": {MaxWorkers: 10}, "mail": {MaxWorkers: 10}}))

	var ids []string
	for i := range 20 {
		wf := pronto.NewWorkflow("across").
			Add("one", clusterFetch{N: i}, &pronto.InsertOpts{Queue: "fetch"}).
			Add("two", clusterFetch{N: i + 100}, &pronto.InsertOpts{Queue: "fetch"}).
			Add("sum", clusterSum{}, &pronto.InsertOpts{Queue: "sum"}, "one", "two").
			OnSuccess(pronto.WorkflowJob{Args: clusterMail{}, Opts: &pronto.InsertOpts{Queue: "mail"}})
		_, err := a.WorkflowInsert(ctx, wf)
		require.NoError(t, err)
		ids = append(ids, wf.ID())
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(mails) == len(ids)
	}, 30*time.Second, 10*time.Millisecond, "every workflow's callback runs")
	for i, id := range ids {
		// The callback's handler has run; its completion, which ends the workflow, is saved just after.
		var info *pronto.WorkflowInfo
		require.Eventually(t, func() bool {
			var err error
			info, err = a.WorkflowGet(ctx, id)
			require.NoError(t, err)
			return info.State != pronto.WorkflowRunning
		}, 30*time.Second, 10*time.Millisecond, "workflow %d ends once its callback completed", i)
		require.Equal(t, pronto.WorkflowCompleted, info.State, "workflow %d", i)
		var one, two map[string]int
		mu.Lock()
		got := strings.Fields(sums[id])
		n := mails[id]
		mu.Unlock()
		require.Len(t, got, 2, "workflow %d's sum saw both parents", i)
		require.NoError(t, json.Unmarshal([]byte(got[0]), &one))
		require.NoError(t, json.Unmarshal([]byte(got[1]), &two))
		require.Equal(t, map[string]int{"n": i}, one)
		require.Equal(t, map[string]int{"n": i + 100}, two)
		require.Equal(t, 1, n, "workflow %d's callback ran once", i)
	}
}
