package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

func claimParams(queue string, limit int) store.ClaimParams {
	return store.ClaimParams{Queue: queue, Limit: limit, WorkerID: "w1", LeaseDuration: time.Minute}
}

func TestInsertAndGet(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()

	p := params("default")
	p.Meta = json.RawMessage(`{"trace":"abc"}`)
	p.Priority = 7
	p.Tags = []string{"a", "b"}
	p.RetryPolicy = json.RawMessage(`{"max_attempts":5}`)
	p.Timeout = 1500 * time.Millisecond
	p.ExpiresAt = time.Now().Add(time.Hour)
	p.UniqueKey, p.Tenant, p.RateKey = "uk", "tenant", "rk"
	before := time.Now()
	jobs, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	got := jobs[0]
	require.Equal(t, p.ID, got.ID)
	require.Equal(t, store.StateAvailable, got.State)
	require.WithinDuration(t, before, got.CreatedAt, 2*time.Second)
	require.WithinDuration(t, got.CreatedAt, got.ScheduledAt, time.Millisecond)

	read, err := s.GetJob(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, p.ID, read.ID)
	require.Equal(t, "k", read.Kind)
	require.Equal(t, "default", read.Queue)
	require.JSONEq(t, string(p.Args), string(read.Args))
	require.JSONEq(t, string(p.Meta), string(read.Meta))
	require.JSONEq(t, string(p.RetryPolicy), string(read.RetryPolicy))
	require.Equal(t, 7, read.Priority)
	require.Equal(t, 3, read.MaxAttempts)
	require.Equal(t, 0, read.Attempt)
	require.Equal(t, []string{"a", "b"}, read.Tags)
	require.Equal(t, 1500*time.Millisecond, read.Timeout)
	require.Equal(t, "uk", read.UniqueKey)
	require.Equal(t, store.DefaultUniqueStates, read.UniqueStates)
	require.Equal(t, "tenant", read.Tenant)
	require.Equal(t, "rk", read.RateKey)
	require.True(t, got.CreatedAt.Equal(read.CreatedAt))
	require.True(t, got.ScheduledAt.Equal(read.ScheduledAt))
	require.True(t, got.ExpiresAt.Equal(read.ExpiresAt), "%v %v", got.ExpiresAt, read.ExpiresAt)
	require.Nil(t, read.Errors)
	require.Nil(t, read.Result)
	require.True(t, read.StartedAt.IsZero())

	_, err = s.GetJob(ctx, uuidv7.New())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetJob(ctx, "not-a-uuid")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestInsertDuplicateIsAtomic(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 5, pipelineMax + 1, 50, arraysMax + 1} {
		s := setup(t)
		ctx := context.Background()
		existing := params("default")
		_, err := s.Insert(ctx, []*store.InsertParams{existing})
		require.NoError(t, err)

		batch := make([]*store.InsertParams, n)
		for i := range batch {
			batch[i] = params("default")
		}
		batch[n/2] = &store.InsertParams{ID: existing.ID, Kind: "k", Queue: "default", State: store.StateAvailable, MaxAttempts: 1}
		_, err = s.Insert(ctx, batch)
		require.ErrorIs(t, err, store.ErrDuplicate, "batch of %d", n)
		jobs, _, err := s.ListJobs(ctx, store.ListParams{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, jobs, 1, "batch of %d inserted something", n)
	}
}

func TestInsertRejectsBadParams(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	bad := params("default")
	bad.ID = "nope"
	_, err := s.Insert(ctx, []*store.InsertParams{bad})
	require.Error(t, err)
	bad = params("default")
	bad.State = store.StateActive
	_, err = s.Insert(ctx, []*store.InsertParams{bad})
	require.Error(t, err)
	jobs, err := s.Insert(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, jobs)
}

func TestInsertCopyBulk(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	rec := subscribe(t, s)

	const n = 10_000
	batch := make([]*store.InsertParams, n)
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for i := range batch {
		batch[i] = params("bulk")
		if i%2 == 1 {
			batch[i].Queue = "later"
			batch[i].State = store.StateScheduled
			batch[i].ScheduledAt = future.Add(time.Duration(i) * time.Second)
		}
		batch[i].Tags = []string{"t"}
	}
	jobs, err := s.Insert(ctx, batch)
	require.NoError(t, err)
	require.Len(t, jobs, n)
	for i, j := range jobs {
		require.Equal(t, batch[i].ID, j.ID)
	}
	read, err := s.GetJob(ctx, jobs[0].ID)
	require.NoError(t, err)
	require.True(t, jobs[0].CreatedAt.Equal(read.CreatedAt))
	require.True(t, jobs[0].ScheduledAt.Equal(read.ScheduledAt))
	require.Equal(t, []string{"t"}, read.Tags)

	queues, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 2)
	require.Equal(t, "bulk", queues[0].Name)
	require.EqualValues(t, n/2, queues[0].Counts[store.StateAvailable])
	require.Equal(t, "later", queues[1].Name)
	require.EqualValues(t, n/2, queues[1].Counts[store.StateScheduled])

	// One notification per queue, the scheduled one carrying its earliest due time.
	require.Eventually(t, func() bool { return len(rec.of(store.NotifyInsert)) == 2 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	notes := rec.of(store.NotifyInsert)
	require.Len(t, notes, 2)
	byQueue := map[string]store.Notification{}
	for _, n := range notes {
		byQueue[n.Queue] = n
	}
	require.True(t, byQueue["bulk"].DueAt.IsZero())
	require.True(t, byQueue["later"].DueAt.Equal(future.Add(time.Second)), "%v", byQueue["later"].DueAt)
}

func TestClaimOrderAndFilters(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()

	mk := func(kind string, prio int, at time.Time, state store.State) *store.InsertParams {
		p := params("q")
		p.Kind, p.Priority, p.ScheduledAt, p.State = kind, prio, at, state
		return p
	}
	now := time.Now()
	low := mk("k", 0, now.Add(-time.Minute), store.StateAvailable)
	high := mk("k", 5, now.Add(-time.Second), store.StateAvailable)
	highEarlier := mk("k", 5, now.Add(-time.Hour), store.StateAvailable)
	other := mk("other", 10, time.Time{}, store.StateAvailable)
	future := mk("k", 100, now.Add(time.Hour), store.StateScheduled)
	dueScheduled := mk("k", 1, now.Add(-time.Millisecond), store.StateScheduled)
	pending := mk("k", 100, time.Time{}, store.StatePending)
	expired := mk("k", 100, time.Time{}, store.StateAvailable)
	expired.ExpiresAt = now.Add(-time.Second)
	elsewhere := params("elsewhere")
	_, err := s.Insert(ctx, []*store.InsertParams{low, high, highEarlier, other, future, dueScheduled, pending, expired, elsewhere})
	require.NoError(t, err)

	p := claimParams("q", 3)
	p.Kinds = []string{"k"}
	jobs, err := s.Claim(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []string{highEarlier.ID, high.ID, dueScheduled.ID}, ids(jobs))
	for _, j := range jobs {
		require.Equal(t, store.StateActive, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "w1", j.WorkerID)
		require.WithinDuration(t, time.Now().Add(time.Minute), j.LeaseExpiresAt, 5*time.Second)
		require.False(t, j.StartedAt.IsZero())
	}

	jobs, err = s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Equal(t, []string{other.ID, low.ID}, ids(jobs))

	jobs, err = s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Empty(t, jobs)

	due, ok, err := s.NextDue(ctx, "q")
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, future.ScheduledAt, due, time.Millisecond)
	_, ok, err = s.NextDue(ctx, "elsewhere")
	require.NoError(t, err)
	require.False(t, ok)

	gone, err := s.DiscardExpired(ctx, 100)
	require.NoError(t, err)
	require.Len(t, gone, 1)
	require.Equal(t, expired.ID, gone[0].ID)
	j, err := s.GetJob(ctx, expired.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateDiscarded, j.State)
	require.Len(t, j.Errors, 1)
	require.Equal(t, "expired", j.Errors[0].Type)
	require.False(t, j.CompletedAt.IsZero())
}

func ids(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestPauseBlocksClaims(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	rec := subscribe(t, s)
	_, err := s.Insert(ctx, []*store.InsertParams{params("q")})
	require.NoError(t, err)
	require.NoError(t, s.PauseQueue(ctx, "q"))
	require.NoError(t, s.PauseQueue(ctx, "empty"))
	jobs, err := s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Empty(t, jobs)

	queues, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 2)
	require.Equal(t, "empty", queues[0].Name)
	require.True(t, queues[0].Paused)
	require.Len(t, queues[0].Counts, 8)
	require.True(t, queues[1].Paused)

	require.NoError(t, s.ResumeQueue(ctx, "q"))
	require.NoError(t, s.ResumeQueue(ctx, "empty"))
	jobs, err = s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	queues, err = s.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1, "a resumed queue without jobs is not listed")

	require.Eventually(t, func() bool {
		return len(rec.of(store.NotifyPause)) == 2 && len(rec.of(store.NotifyResume)) == 2
	}, 5*time.Second, 5*time.Millisecond)
}

func TestFinishStates(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	rec := subscribe(t, s)

	batch := make([]*store.InsertParams, 7)
	for i := range batch {
		batch[i] = params("q")
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)
	jobs, err := s.Claim(ctx, claimParams("q", 7))
	require.NoError(t, err)
	require.Len(t, jobs, 7)

	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	attemptErr := &store.AttemptError{Attempt: 1, At: time.Now().UTC().Truncate(time.Microsecond), Type: "boom", Message: "it broke"}
	comps := []store.Completion{
		{ID: jobs[0].ID, Attempt: 1, State: store.StateCompleted, Result: json.RawMessage(`{"ok":true}`)},
		{ID: jobs[1].ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: later, Error: attemptErr},
		{ID: jobs[2].ID, Attempt: 1, State: store.StateScheduled, ScheduledAt: later, RefundAttempt: true},
		{ID: jobs[3].ID, Attempt: 1, State: store.StateDiscarded, Error: attemptErr},
		{ID: jobs[4].ID, Attempt: 1, State: store.StateCancelled},
		{ID: jobs[5].ID, Attempt: 1, State: store.StateAvailable, RefundAttempt: true},
		{ID: jobs[6].ID, Attempt: 2, State: store.StateCompleted}, // wrong attempt: not applied
		{ID: uuidv7.New(), Attempt: 1, State: store.StateCompleted},
		{ID: "not-a-uuid", Attempt: 1, State: store.StateCompleted},
	}
	res, err := s.Finish(ctx, comps)
	require.NoError(t, err)
	require.Len(t, res, len(comps))
	for i, r := range res {
		require.Equal(t, comps[i].ID, r.ID)
		require.Equal(t, i < 6, r.Applied, "completion %d", i)
	}

	get := func(id string) *store.Job {
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		return j
	}
	j := get(jobs[0].ID)
	require.Equal(t, store.StateCompleted, j.State)
	require.JSONEq(t, `{"ok":true}`, string(j.Result))
	require.False(t, j.CompletedAt.IsZero())
	require.True(t, j.LeaseExpiresAt.IsZero())
	require.Empty(t, j.WorkerID)

	j = get(jobs[1].ID)
	require.Equal(t, store.StateRetryable, j.State)
	require.True(t, later.Equal(j.ScheduledAt))
	require.Len(t, j.Errors, 1)
	require.Equal(t, attemptErr.Attempt, j.Errors[0].Attempt)
	require.True(t, attemptErr.At.Equal(j.Errors[0].At))
	require.Equal(t, attemptErr.Type, j.Errors[0].Type)
	require.Equal(t, attemptErr.Message, j.Errors[0].Message)
	require.True(t, j.CompletedAt.IsZero())

	j = get(jobs[2].ID)
	require.Equal(t, store.StateScheduled, j.State)
	require.Equal(t, 4, j.MaxAttempts)
	require.Equal(t, 1, j.Attempt)

	j = get(jobs[3].ID)
	require.Equal(t, store.StateDiscarded, j.State)
	require.False(t, j.CompletedAt.IsZero())
	require.Len(t, j.Errors, 1)

	j = get(jobs[4].ID)
	require.Equal(t, store.StateCancelled, j.State)

	j = get(jobs[5].ID)
	require.Equal(t, store.StateAvailable, j.State)
	require.WithinDuration(t, time.Now(), j.ScheduledAt, 5*time.Second)

	j = get(jobs[6].ID)
	require.Equal(t, store.StateActive, j.State)

	// One insert notification for queue q, due now (the available job).
	require.Eventually(t, func() bool { return len(rec.of(store.NotifyInsert)) >= 2 }, 5*time.Second, 5*time.Millisecond)
	notes := rec.of(store.NotifyInsert)
	require.Len(t, notes, 2) // the insert, then the finish
	require.Equal(t, "q", notes[1].Queue)
	require.True(t, notes[1].DueAt.IsZero())

	// Only the future ones: the notification carries the earliest due time.
	jobs2, err := s.Insert(ctx, []*store.InsertParams{params("r")})
	require.NoError(t, err)
	_, err = s.Claim(ctx, claimParams("r", 1))
	require.NoError(t, err)
	res, err = s.Finish(ctx, []store.Completion{{ID: jobs2[0].ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: later}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	require.Eventually(t, func() bool {
		for _, n := range rec.of(store.NotifyInsert) {
			if n.Queue == "r" && n.DueAt.Equal(later) {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)

	// A completed job announces nothing.
	res, err = s.Finish(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, res)
}

func TestFailedCopyLeavesConnectionClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, testdb.NewPool(t, 1), testdb.Schema(t)) // one connection: any leftover transaction shows
	first := params("q")
	_, err := s.Insert(ctx, []*store.InsertParams{first})
	require.NoError(t, err)
	for range 3 {
		batch := make([]*store.InsertParams, 20)
		for i := range batch {
			batch[i] = params("q")
		}
		batch[7].ID = first.ID
		_, err = s.Insert(ctx, batch)
		require.ErrorIs(t, err, store.ErrDuplicate)
	}
	batch := make([]*store.InsertParams, 20)
	for i := range batch {
		batch[i] = params("q")
	}
	_, err = s.Insert(ctx, batch)
	require.NoError(t, err)
	conn, err := s.Pool().Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "no transaction is left open")
	conn.Release()
	queues, err := s.ListQueues(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 21, queues[0].Counts[store.StateAvailable])
}

// TestClaimPlanIsPinned guards the claim's plan: an ordered scan of the claim index stopping at the
// LIMIT, whatever the planner's estimates. Right after a bulk insert, before the table is analyzed,
// the estimates can make a scan of the whole backlog and a sort look cheaper; here the cost
// settings are skewed the same way on purpose, and the plan must not move.
func TestClaimPlanIsPinned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	batch := make([]*store.InsertParams, 5000)
	for i := range batch {
		batch[i] = params("q")
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)

	for _, sql := range []string{s.q.claim, s.q.claimKinds} {
		args := []any{"q", 10, int64(60e6), "w"}
		if sql == s.q.claimKinds {
			args = append(args, []string{"k"})
		}
		explain := func(pinned bool) string {
			b := &pgx.Batch{}
			b.Queue(`SELECT set_config('random_page_cost', '1000', true), set_config('cpu_index_tuple_cost', '10', true)`)
			if pinned {
				b.Queue(s.q.claimPlan, "q", newClaimTag())
			}
			var plan []string
			b.Queue("EXPLAIN "+sql, args...).Query(func(rows pgx.Rows) error {
				var err error
				plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
				return err
			})
			require.NoError(t, s.Pool().SendBatch(ctx, b).Close())
			return strings.Join(plan, "\n")
		}
		skewed := explain(false)
		require.Contains(t, skewed, "Sort", "the skewed costs do tempt the planner into a sort:\n%s", skewed)
		pinned := explain(true)
		require.Contains(t, pinned, "Index Scan using jobs_claim_idx", pinned)
		require.NotContains(t, pinned, "Sort", pinned)
	}
	jobs, err := s.Claim(ctx, claimParams("q", 10))
	require.NoError(t, err)
	require.Equal(t, ids(jobs), paramIDs(batch[:10]))
}

// TestRescuePlanIsPinned guards the rescue's plan (sqlRescuePlan): an ordered scan of the leases'
// index stopping at the LIMIT, even when the statistics put many leases in the past, as they do
// after a busy spell (here: 3000 jobs claimed with leases already over, then analyzed), when the
// planner otherwise reads every such lease's row through a bitmap and sorts them (the costs are
// skewed as if the table were much larger).
func TestRescuePlanIsPinned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	batch := make([]*store.InsertParams, 3000)
	for i := range batch {
		batch[i] = params("q")
	}
	_, err := s.Insert(ctx, batch)
	require.NoError(t, err)
	claim := claimParams("q", 1000)
	claim.LeaseDuration = time.Microsecond
	for range 3 {
		jobs, err := s.Claim(ctx, claim)
		require.NoError(t, err)
		require.Len(t, jobs, 1000)
	}
	_, err = s.Pool().Exec(ctx, "ANALYZE "+s.Schema()+".jobs")
	require.NoError(t, err)

	explain := func(pinned bool) string {
		b := &pgx.Batch{}
		// Costs skewed against random reads, as TestClaimPlanIsPinned does: what a table much
		// larger than this test's, with many past leases in its statistics, looks like.
		b.Queue(`SELECT set_config('random_page_cost', '1000', true), set_config('cpu_index_tuple_cost', '10', true)`)
		if pinned {
			b.Queue(sqlRescuePlan)
		}
		var plan []string
		b.Queue("EXPLAIN "+s.q.rescue, 1000).Query(func(rows pgx.Rows) error {
			var err error
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		require.NoError(t, s.Pool().SendBatch(ctx, b).Close())
		// The CTE that finds the expired leases, up to the next CTE: the update's own sorts of the
		// ids found (at most the LIMIT) are not the scan's.
		all := strings.Join(plan, "\n")
		from := strings.Index(all, "CTE expired")
		require.GreaterOrEqual(t, from, 0, all)
		to := strings.Index(all[from:], "CTE updated")
		require.Greater(t, to, 0, all)
		return all[from : from+to]
	}
	free := explain(false)
	require.Regexp(t, "Sort|Bitmap|Seq Scan", free, "the statistics do tempt the planner away from the ordered scan:\n%s", free)
	pinned := explain(true)
	require.Contains(t, pinned, "Index Scan using jobs_lease_idx", pinned)
	for _, avoided := range []string{"Sort", "Bitmap", "Seq Scan"} {
		require.NotContains(t, pinned, avoided, pinned)
	}

	// The rescue itself takes the jobs back in lease order, a pass of 1000 at a time.
	for pass := range 3 {
		res, err := s.Rescue(ctx, store.RescueParams{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, res.Requeued, 1000, "pass %d", pass)
		require.Empty(t, res.Discarded)
		for _, j := range res.Requeued {
			require.Equal(t, store.StateAvailable, j.State)
		}
	}
	res, err := s.Rescue(ctx, store.RescueParams{Limit: 1000})
	require.NoError(t, err)
	require.Empty(t, res.Requeued)
}

func paramIDs(ps []*store.InsertParams) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// TestFirstPlansOnAnEmptyTableUseIndexes guards the plans a connection makes at its first claim and
// first Finish, which it keeps until the table is next analyzed: made on a new, empty table they
// must still reach rows through indexes, never by scanning the table, or every claim and Finish
// reads the whole table once it has grown (see sqlClaimPlan and sqlFinishPlan).
func TestFirstPlansOnAnEmptyTableUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	for _, c := range []struct {
		name, settings, sql, exec string
	}{
		{"claim", s.q.claimPlan, s.q.claim, "('q', 10, 60000000, 'w')"},
		{"claim by kind", s.q.claimPlan, s.q.claimKinds, "('q', 10, 60000000, 'w', '{k}')"},
		{"finish", s.q.finishPlan, s.q.finish, "('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')"},
		{"heartbeat", "SELECT 1", s.q.heartbeat, "('{}', 'w', 1000000, '{}')"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := s.Pool().Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			settings := c.settings
			if c.settings == s.q.claimPlan {
				// The claim's settings take the queue and the claim's tag as their parameters.
				settings = strings.NewReplacer("$1", "'q'", "$2", "'"+newClaimTag()+"'").Replace(settings)
			}
			_, err = tx.Exec(ctx, settings)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "PREPARE first_plan AS "+c.sql)
			require.NoError(t, err)
			rows, err := tx.Query(ctx, "EXPLAIN EXECUTE first_plan"+c.exec)
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			plan := strings.Join(lines, "\n")
			require.NotContains(t, plan, "Seq Scan", plan)
			require.Contains(t, plan, "jobs_pkey", "the jobs are updated through their primary key:\n%s", plan)
			_, err = tx.Exec(ctx, "DEALLOCATE first_plan")
			require.NoError(t, err)
		})
	}
}
