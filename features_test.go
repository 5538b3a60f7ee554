package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

type stepArgs struct {
	Step int  `json:"step"`
	Fail bool `json:"fail,omitempty"`
}

func (stepArgs) Kind() string { return "test.step" }

type notifyArgs struct {
	Outcome string `json:"outcome"`
}

func (notifyArgs) Kind() string { return "test.notify" }

// TestUniqueInsertsFromManyClients proves the database, not the client, enforces uniqueness: many
// goroutines on two clients insert the same unique job at once, and exactly one wins.
func TestUniqueInsertsFromManyClients(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		clients := []*pronto.Client{}
		for _, s := range []store.Store{ts.Store, ts.reopen(t)} {
			c, err := pronto.NewClient(s, &pronto.Config{})
			require.NoError(t, err)
			clients = append(clients, c)
		}
		unique := &pronto.UniqueOpts{ByArgs: true}
		const perClient = 8
		var won, conflicts atomic.Int32
		var wg sync.WaitGroup
		for _, c := range clients {
			for range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := c.Insert(ctx, echoArgs{Message: "once"}, &pronto.InsertOpts{Unique: unique})
					switch {
					case err == nil:
						won.Add(1)
					case errors.Is(err, pronto.ErrUniqueConflict):
						var uc *pronto.UniqueConflictError
						require.ErrorAs(t, err, &uc)
						require.NotEmpty(t, uc.ExistingID)
						conflicts.Add(1)
					default:
						t.Errorf("insert: %v", err)
					}
				}()
			}
		}
		wg.Wait()
		require.EqualValues(t, 1, won.Load(), "exactly one insert wins")
		require.EqualValues(t, 2*perClient-1, conflicts.Load())
		list, err := clients[0].JobList(ctx, &pronto.JobListParams{Kinds: []string{"test.echo"}})
		require.NoError(t, err)
		require.Len(t, list.Jobs, 1)

		// Ignore hands back the holder; different args are another fingerprint.
		dup, err := clients[1].Insert(ctx, echoArgs{Message: "once"}, &pronto.InsertOpts{
			Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueIgnore}})
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		require.Equal(t, list.Jobs[0].ID, dup.ID)
		other, err := clients[1].Insert(ctx, echoArgs{Message: "twice"}, &pronto.InsertOpts{Unique: unique})
		require.NoError(t, err)
		require.False(t, other.Duplicate)
	})
}

// TestUniqueFingerprint checks which dimensions make two jobs the same.
func TestUniqueFingerprint(t *testing.T) {
	ctx := context.Background()
	c, err := pronto.NewClient(newTestStore(t, kindMemory).Store, &pronto.Config{})
	require.NoError(t, err)
	byN := &pronto.UniqueOpts{ArgsKeys: []string{"n"}}
	_, err = c.Insert(ctx, echoArgs{Message: "a", N: 1}, &pronto.InsertOpts{Unique: byN})
	require.NoError(t, err)
	_, err = c.Insert(ctx, echoArgs{Message: "b", N: 1}, &pronto.InsertOpts{Unique: byN})
	require.ErrorIs(t, err, pronto.ErrUniqueConflict, "only n is in the fingerprint")
	_, err = c.Insert(ctx, echoArgs{Message: "a", N: 2}, &pronto.InsertOpts{Unique: byN})
	require.NoError(t, err)

	// Without ByQueue the queue does not matter; with it, it does.
	_, err = c.Insert(ctx, echoArgs{N: 1}, &pronto.InsertOpts{Queue: "other", Unique: byN})
	require.ErrorIs(t, err, pronto.ErrUniqueConflict)
	_, err = c.Insert(ctx, echoArgs{N: 1}, &pronto.InsertOpts{Queue: "other", Unique: &pronto.UniqueOpts{ArgsKeys: []string{"n"}, ByQueue: true}})
	require.NoError(t, err)

	// Meta keys.
	byTenant := &pronto.UniqueOpts{MetaKeys: []string{"tenant"}}
	_, err = c.Insert(ctx, notifyArgs{}, &pronto.InsertOpts{Meta: map[string]any{"tenant": "t1", "trace": "x"}, Unique: byTenant})
	require.NoError(t, err)
	_, err = c.Insert(ctx, notifyArgs{}, &pronto.InsertOpts{Meta: map[string]any{"tenant": "t1", "trace": "y"}, Unique: byTenant})
	require.ErrorIs(t, err, pronto.ErrUniqueConflict)

	// Bad policies are refused before anything is stored.
	for name, u := range map[string]*pronto.UniqueOpts{
		"missing args key": {ArgsKeys: []string{"nope"}},
		"missing meta key": {MetaKeys: []string{"nope"}},
		"bad policy":       {OnConflict: "overwrite"},
		"bad state":        {States: []pronto.State{"done"}},
		"negative period":  {Period: -time.Second},
	} {
		_, err := c.Insert(ctx, echoArgs{Message: name}, &pronto.InsertOpts{Unique: u})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, name)
	}
}

// stepWorkers runs stepArgs jobs (recording each step's order and its parents' results) and
// notifyArgs callbacks.
func stepWorkers(log *runLog, parents *sync.Map) *pronto.Workers {
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[stepArgs]) error {
		log.add(job.ID)
		results, err := pronto.ParentResults(job.JobRow)
		if err != nil {
			return err
		}
		parents.Store(job.Args.Step, results)
		if job.Args.Fail {
			return pronto.Discard(errors.New("step fails for good"))
		}
		return pronto.RecordResult(ctx, map[string]int{"step": job.Args.Step})
	}))
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[notifyArgs]) error {
		log.add(job.Args.Outcome)
		return nil
	}))
	return workers
}

func waitWorkflow(t *testing.T, c *pronto.Client, id string, want pronto.WorkflowState) *pronto.WorkflowInfo {
	t.Helper()
	var info *pronto.WorkflowInfo
	require.Eventually(t, func() bool {
		var err error
		info, err = c.WorkflowGet(context.Background(), id)
		require.NoError(t, err)
		return info.State == want
	}, 15*time.Second, 10*time.Millisecond, "workflow never reached %s", want)
	return info
}

// TestWorkflowChainRunsInOrderAcrossClients runs a chain on two clients: each step starts only after
// the one before completed and receives its result.
func TestWorkflowChainRunsInOrderAcrossClients(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		log, parents := newRunLog(), &sync.Map{}
		a := startClient(t, ts.Store, fastConfig(stepWorkers(log, parents), defaultQueue(4)))
		startClient(t, ts.reopen(t), fastConfig(stepWorkers(log, parents), defaultQueue(4)))

		wf := pronto.NewChain("three-steps",
			pronto.WorkflowJob{Args: stepArgs{Step: 0}},
			pronto.WorkflowJob{Args: stepArgs{Step: 1}},
			pronto.WorkflowJob{Args: stepArgs{Step: 2}},
		).OnSuccess(pronto.WorkflowJob{Args: notifyArgs{Outcome: "success"}}).
			OnFailure(pronto.WorkflowJob{Args: notifyArgs{Outcome: "failure"}})
		res, err := a.WorkflowInsert(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, pronto.WorkflowRunning, res.Workflow.State)
		require.Equal(t, 3, res.Workflow.Total)
		require.Equal(t, pronto.StateAvailable, res.Jobs["0"].State)
		require.Equal(t, pronto.StatePending, res.Jobs["1"].State)

		info := waitWorkflow(t, a, wf.ID(), pronto.WorkflowCompleted)
		require.Equal(t, 3, info.Counts[pronto.StateCompleted])
		waitState(t, a, res.Jobs["on_success"].ID, pronto.StateCompleted)
		waitState(t, a, res.Jobs["on_failure"].ID, pronto.StateCancelled)

		order, runs := log.snapshot()
		require.Equal(t, []string{res.Jobs["0"].ID, res.Jobs["1"].ID, res.Jobs["2"].ID, "success"}, order)
		for _, n := range runs {
			require.Equal(t, 1, n, "no step runs twice")
		}
		got, _ := parents.Load(2)
		require.Len(t, got, 1)
		require.JSONEq(t, `{"step":1}`, string(got.([]json.RawMessage)[0]))

		jobs, err := a.WorkflowJobs(ctx, wf.ID())
		require.NoError(t, err)
		require.Len(t, jobs, 5, "three steps and two callbacks")
	})
}

// TestWorkflowFailureCancelsDependents: a step that fails for good cancels what comes after it, the
// workflow fails, and only the failure callback runs.
func TestWorkflowFailureCancelsDependents(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		log, parents := newRunLog(), &sync.Map{}
		c := startClient(t, ts.Store, fastConfig(stepWorkers(log, parents), defaultQueue(4)))
		wf := pronto.NewWorkflow("diamond").
			Add("root", stepArgs{Step: 0}, nil).
			Add("left", stepArgs{Step: 1, Fail: true}, nil, "root").
			Add("right", stepArgs{Step: 2}, nil, "root").
			Add("join", stepArgs{Step: 3}, nil, "left", "right").
			OnFailure(pronto.WorkflowJob{Args: notifyArgs{Outcome: "failure"}}).
			OnComplete(pronto.WorkflowJob{Args: notifyArgs{Outcome: "complete"}})
		res, err := c.WorkflowInsert(ctx, wf)
		require.NoError(t, err)

		info := waitWorkflow(t, c, wf.ID(), pronto.WorkflowFailed)
		require.Equal(t, 4, info.Total)
		require.Equal(t, 2, info.Counts[pronto.StateCompleted], "root and right")
		require.Equal(t, 1, info.Counts[pronto.StateDiscarded], "left")
		require.Equal(t, 1, info.Counts[pronto.StateCancelled], "join can never run")
		waitState(t, c, res.Jobs["on_failure"].ID, pronto.StateCompleted)
		waitState(t, c, res.Jobs["on_complete"].ID, pronto.StateCompleted)
		_, runs := log.snapshot()
		require.Zero(t, runs[res.Jobs["join"].ID])
	})
}

// TestWorkflowBuilderErrors: mistakes in the graph are reported by WorkflowInsert and store nothing.
func TestWorkflowBuilderErrors(t *testing.T) {
	ctx := context.Background()
	c, err := pronto.NewClient(newTestStore(t, kindMemory).Store, &pronto.Config{})
	require.NoError(t, err)
	for name, wf := range map[string]*pronto.Workflow{
		"unknown parent": pronto.NewWorkflow("w").Add("a", stepArgs{}, nil, "nope"),
		"repeated name":  pronto.NewWorkflow("w").Add("a", stepArgs{}, nil).Add("a", stepArgs{}, nil),
		"empty":          pronto.NewWorkflow("w"),
		"only callbacks": pronto.NewWorkflow("w").OnSuccess(pronto.WorkflowJob{Args: notifyArgs{}}),
		"bad kind":       pronto.NewChain("w", pronto.WorkflowJob{Args: badKind{}}),
		"unique step": pronto.NewChain("w", pronto.WorkflowJob{Args: stepArgs{},
			Opts: &pronto.InsertOpts{Unique: &pronto.UniqueOpts{}}}),
	} {
		_, err := c.WorkflowInsert(ctx, wf)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, name)
	}
	list, err := c.JobList(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, list.Jobs)
	_, err = c.WorkflowGet(ctx, "01a208c4-315b-705a-bc19-a2f30fe201c6")
	require.ErrorIs(t, err, pronto.ErrNotFound)
}

// TestRateLimitHoldsAcrossClients: two clients with five workers each never run more than MaxActive
// jobs of one key at once, and still run them all.
func TestRateLimitHoldsAcrossClients(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var running, peak atomic.Int32
		var done atomic.Int32
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, job *pronto.Job[blockArgs]) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			done.Add(1)
			return nil
		}))
		a := startClient(t, ts.Store, fastConfig(workers, defaultQueue(5)))
		startClient(t, ts.reopen(t), fastConfig(workers, defaultQueue(5)))
		const total = 20
		jobs := make([]pronto.InsertManyParams, total)
		for i := range jobs {
			jobs[i] = pronto.InsertManyParams{Args: blockArgs{Key: "api"}, Opts: &pronto.InsertOpts{
				RateKey: "partner-api", RateLimit: &pronto.RateLimit{MaxActive: 2}}}
		}
		_, err := a.InsertMany(ctx, jobs)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return done.Load() == total }, 30*time.Second, 10*time.Millisecond)
		require.LessOrEqual(t, peak.Load(), int32(2), "MaxActive holds across clients")
		require.EqualValues(t, 2, peak.Load(), "the limit is used, not just respected")

		// Completions are written in batches off the workers' path: wait for the last one.
		var info *pronto.RateLimitInfo
		require.Eventually(t, func() bool {
			var err error
			info, err = a.RateLimitGet(ctx, "partner-api")
			require.NoError(t, err)
			return info.Active == 0
		}, 10*time.Second, 10*time.Millisecond, "no job of the key stays active")
		require.Equal(t, 2, info.Limit.MaxActive)
		require.Zero(t, info.Waiting)

		require.ErrorIs(t, a.RateLimitSet(ctx, "bad key!", pronto.RateLimit{MaxActive: 1}), pronto.ErrInvalidArgs)
		require.ErrorIs(t, a.RateLimitSet(ctx, "k", pronto.RateLimit{Rate: 1}), pronto.ErrInvalidArgs, "rate without period")
		require.ErrorIs(t, a.RateLimitSet(ctx, "k", pronto.RateLimit{}), pronto.ErrInvalidArgs, "no bound")
	})
}
