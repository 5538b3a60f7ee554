package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store"
)

// recordingArchive is a DeadLetterArchive that keeps what it is given in memory, and refuses
// while fail is set.
type recordingArchive struct {
	fail  atomic.Bool
	calls atomic.Int64
	mu    sync.Mutex
	jobs  map[string]*pronto.JobRow
}

func (a *recordingArchive) ArchiveDeadLetter(_ context.Context, jobs []*pronto.JobRow) error {
	a.calls.Add(1)
	if a.fail.Load() {
		return errors.New("archive unavailable")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range jobs {
		a.jobs[j.ID] = j
	}
	return nil
}

func (a *recordingArchive) queues() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for _, j := range a.jobs {
		out[j.Queue]++
	}
	return out
}

// TestDeadLetterArchive, on every store: with the archive pruning policy (ojs-dead-letter.md 8.2)
// the jobs retention prunes go to the archive first, and nothing is deleted while the archive
// refuses; a queue whose own retention says delete is pruned meanwhile; the policy is checked where
// it is set, and the pruned events say which jobs were archived.
func TestDeadLetterArchive(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[noopArgs]) error {
			return errors.New("always")
		}))
		queues := []string{"ar-del", "ar-own", "ar-all"}
		qc := map[string]pronto.QueueConfig{}
		for _, q := range queues {
			qc[q] = pronto.QueueConfig{MaxWorkers: 2}
		}

		cfg := fastConfig(workers, qc)
		cfg.DeadLetterPruningPolicy = pronto.PruneArchive
		_, err := pronto.NewClient(ts.Store, cfg)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, "archive without an archive")
		cfg.DeadLetterPruningPolicy = "shred"
		_, err = pronto.NewClient(ts.Store, cfg)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, "an unknown policy")
		cfg.DeadLetterPruningPolicy = ""
		plain, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		require.ErrorIs(t, plain.DeadLetterRetentionsSet(ctx, map[string]pronto.DeadLetterRetention{
			"ar-own": {MaxCount: 1, PruningPolicy: pronto.PruneArchive}}), pronto.ErrInvalidArgs,
			"a client without an archive cannot set a policy it could not apply")

		archive := &recordingArchive{jobs: map[string]*pronto.JobRow{}}
		archive.fail.Store(true)
		cfg.DeadLetterArchive = archive
		cfg.DeadLetterPruningPolicy = pronto.PruneArchive
		cfg.DiscardedMaxCount = 1
		c, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		pronto.SetCleanupInterval(c, 20*time.Millisecond)
		want := map[string]pronto.DeadLetterRetention{
			"ar-del": {MaxCount: 1, PruningPolicy: pronto.PruneDelete},
			"ar-own": {MaxCount: 1}, // follows the client's policy: archive
		}
		require.ErrorIs(t, c.DeadLetterRetentionsSet(ctx, map[string]pronto.DeadLetterRetention{
			"ar-own": {MaxCount: 1, PruningPolicy: "shred"}}), pronto.ErrInvalidArgs)
		require.NoError(t, c.DeadLetterRetentionsSet(ctx, want))
		got, err := c.DeadLetterRetentions(ctx)
		require.NoError(t, err)
		require.Equal(t, want, got)

		pruned, unsubscribe := c.Subscribe(pronto.EventDeadLetterPruned)
		defer unsubscribe()
		for i := range 3 {
			for _, q := range queues {
				_, err := c.Insert(ctx, noopArgs{N: i}, &pronto.InsertOpts{Queue: q, MaxAttempts: 1})
				require.NoError(t, err)
			}
		}
		discarded := func(q string) []*pronto.JobRow {
			page, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{q}, States: []pronto.State{pronto.StateDiscarded}})
			require.NoError(t, err)
			return page.Jobs
		}
		all := map[string][]*pronto.JobRow{}
		startBuilt(t, c)
		require.Eventually(t, func() bool {
			for _, q := range []string{"ar-own", "ar-all"} {
				all[q] = discarded(q)
			}
			return len(all["ar-own"]) == 3 && len(all["ar-all"]) == 3 && len(discarded("ar-del")) == 1
		}, 30*time.Second, 10*time.Millisecond, "ar-del pruned by delete while the archive refuses")
		from := archive.calls.Load()
		require.Eventually(t, func() bool { return archive.calls.Load() >= from+4 }, 30*time.Second, 10*time.Millisecond)
		require.Len(t, discarded("ar-own"), 3, "nothing deleted while the archive refuses")
		require.Len(t, discarded("ar-all"), 3)

		archive.fail.Store(false)
		require.Eventually(t, func() bool { return len(discarded("ar-own")) == 1 && len(discarded("ar-all")) == 1 },
			30*time.Second, 10*time.Millisecond)
		require.Equal(t, map[string]int{"ar-own": 2, "ar-all": 2}, archive.queues(), "the pruned jobs, and no others")
		for _, q := range []string{"ar-own", "ar-all"} {
			left := discarded(q)[0]
			for _, j := range all[q] {
				a, ok := archive.jobs[j.ID]
				if j.ID == left.ID {
					require.False(t, ok, "the newest is kept, not archived")
					continue
				}
				require.True(t, ok, "job %s archived", j.ID)
				require.Equal(t, pronto.StateDiscarded, a.State)
				require.Equal(t, j.Kind, a.Kind)
				require.JSONEq(t, string(j.Args), string(a.Args))
				require.NotEmpty(t, a.Errors, "with its error history")
				require.False(t, a.CompletedAt.After(left.CompletedAt), "the oldest are pruned")
			}
		}

		counts := map[string]int{}
		archived := map[string]bool{}
		require.Eventually(t, func() bool {
			for {
				select {
				case e := <-pruned:
					counts[e.Job.Queue] += e.Count
					archived[e.Job.Queue] = e.Archived
					continue
				default:
				}
				return len(counts) == 3 && counts["ar-own"] == 2 && counts["ar-all"] == 2
			}
		}, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, map[string]int{"ar-del": 2, "ar-own": 2, "ar-all": 2}, counts)
		require.Equal(t, map[string]bool{"ar-del": false, "ar-own": true, "ar-all": true}, archived)
	})
}

// hangingArchive keeps the first batch it is given and then hangs until its context ends, as an
// archive whose storage stopped answering would, or a leader stopped in the middle of a pass.
type hangingArchive struct {
	called chan []*pronto.JobRow
}

func (a *hangingArchive) ArchiveDeadLetter(ctx context.Context, jobs []*pronto.JobRow) error {
	select {
	case a.called <- jobs:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestDeadLetterArchiveLeaderStopsMidPass, on every store, with two clients: the leader's archive
// hangs and the leader is stopped in the middle of its pass; nothing is deleted, and the client
// that takes office archives the same jobs again and only then deletes them.
func TestDeadLetterArchiveLeaderStopsMidPass(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[noopArgs]) error {
			return errors.New("always")
		}))
		failer := fastConfig(workers, map[string]pronto.QueueConfig{"arl": {MaxWorkers: 1}})
		failer.DisableMaintenance = true
		c0, err := pronto.NewClient(ts.Store, failer)
		require.NoError(t, err)
		for i := range 5 {
			_, err := c0.Insert(ctx, noopArgs{N: i}, &pronto.InsertOpts{Queue: "arl", MaxAttempts: 1})
			require.NoError(t, err)
		}
		discarded := func() []*pronto.JobRow {
			page, err := c0.JobList(ctx, &pronto.JobListParams{Queues: []string{"arl"}, States: []pronto.State{pronto.StateDiscarded}})
			require.NoError(t, err)
			return page.Jobs
		}
		startBuilt(t, c0)
		require.Eventually(t, func() bool { return len(discarded()) == 5 }, 30*time.Second, 10*time.Millisecond)

		leaderConfig := func(a pronto.DeadLetterArchive) *pronto.Config {
			cfg := fastConfig(nil, nil)
			cfg.DeadLetterArchive = a
			cfg.DeadLetterPruningPolicy = pronto.PruneArchive
			cfg.DiscardedMaxCount = 2
			return cfg
		}
		hanging := &hangingArchive{called: make(chan []*pronto.JobRow, 1)}
		a, err := pronto.NewClient(ts.Store, leaderConfig(hanging))
		require.NoError(t, err)
		pronto.SetCleanupInterval(a, 20*time.Millisecond)
		require.NoError(t, a.Start(ctx))
		var offered []*pronto.JobRow
		select {
		case offered = <-hanging.called:
		case <-time.After(30 * time.Second):
			t.Fatal("the leader never offered a batch to its archive")
		}
		require.Len(t, offered, 3, "the three oldest beyond the newest 2")
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		require.NoError(t, a.Stop(stopCtx))
		cancel()
		require.Len(t, discarded(), 5, "a batch the archive did not accept is not deleted")

		kept := &recordingArchive{jobs: map[string]*pronto.JobRow{}}
		b, err := pronto.NewClient(ts.Store, leaderConfig(kept))
		require.NoError(t, err)
		pronto.SetCleanupInterval(b, 20*time.Millisecond)
		startBuilt(t, b)
		require.Eventually(t, func() bool { return len(discarded()) == 2 }, 30*time.Second, 10*time.Millisecond)
		kept.mu.Lock()
		defer kept.mu.Unlock()
		require.Len(t, kept.jobs, 3)
		for _, j := range offered {
			require.Contains(t, kept.jobs, j.ID, "the new leader archived the same jobs again before deleting them")
		}
		for _, j := range discarded() {
			require.NotContains(t, kept.jobs, j.ID, "the newest two are kept, not archived")
		}
	})
}

// TestDeadLetterFileArchiveRoundTrip, on every store: a dead-letter job pruned under the archive
// policy reaches server.FileArchive with its args, meta, tags, attempt, error history and tenant. The
// tenant was set through Go (store.Job.Tenant, not meta.tenant_id): the archive, the only record left
// of the job, names it as meta.tenant_id, as GET /ojs/v1/jobs/{id} does.
func TestDeadLetterFileArchiveRoundTrip(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		dir := t.TempDir()
		arch, err := server.NewFileArchive(dir)
		require.NoError(t, err)
		cfg := &pronto.Config{DiscardedRetention: time.Millisecond, DeadLetterArchive: arch,
			DeadLetterPruningPolicy: pronto.PruneArchive, LeaderTTL: time.Second}

		p := &store.InsertParams{ID: uuidv7.New(), Kind: "archive.roundtrip", Queue: "archive-rt",
			Args: json.RawMessage(`[{"n":1}]`), Meta: json.RawMessage(`{"m":"x"}`), State: store.StateAvailable, MaxAttempts: 1,
			Tags: []string{"t1", "t2"}, Tenant: "ten1", Priority: 2, Timeout: 5 * time.Second}
		_, err = ts.Store.Insert(ctx, []*store.InsertParams{p})
		require.NoError(t, err)
		cl, err := ts.Store.Claim(ctx, store.ClaimParams{Queue: p.Queue, Kinds: []string{p.Kind}, Limit: 1, WorkerID: "w1", LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Len(t, cl, 1)
		res, err := ts.Store.Finish(ctx, []store.Completion{{ID: p.ID, Attempt: 1, Token: cl[0].ClaimToken, State: store.StateDiscarded,
			Error: &store.AttemptError{Attempt: 1, At: time.Now(), Type: "Boom", Message: "boom"}}})
		require.NoError(t, err)
		require.True(t, res[0].Applied)

		c, err := pronto.NewClient(ts.Store, cfg)
		require.NoError(t, err)
		pronto.SetCleanupInterval(c, 20*time.Millisecond)
		startBuilt(t, c)
		require.Eventually(t, func() bool {
			_, err := ts.Store.GetJob(ctx, p.ID)
			return errors.Is(err, store.ErrNotFound)
		}, 15*time.Second, 20*time.Millisecond, "the dead-letter job is pruned")
		files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		require.NoError(t, err)
		require.Len(t, files, 1)
		raw, err := os.ReadFile(files[0])
		require.NoError(t, err)
		var line struct {
			Job map[string]json.RawMessage `json:"job"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.SplitN(string(raw), "\n", 2)[0]), &line), "%s", raw)
		require.JSONEq(t, string(p.Args), string(line.Job["args"]), "args")
		require.JSONEq(t, `["t1","t2"]`, string(line.Job["tags"]), "tags")
		require.JSONEq(t, `1`, string(line.Job["attempt"]), "attempt")
		require.JSONEq(t, `{"tenant_id":"ten1","m":"x"}`, string(line.Job["meta"]), "meta, with the tenant (%s store)", ts.kind)
		var errs []map[string]any
		require.NoError(t, json.Unmarshal(line.Job["errors"], &errs), "errors: %s", raw)
		require.Len(t, errs, 1, "error history")
	})
}
