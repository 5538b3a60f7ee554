package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// requireInserted requires j to be the freshly inserted job p, every field as given.
func requireInserted(t testing.TB, p *store.InsertParams, j *store.Job) {
	t.Helper()
	require.Equal(t, p.ID, j.ID)
	require.Equal(t, p.Kind, j.Kind)
	require.Equal(t, p.Queue, j.Queue)
	requireJSON(t, p.Args, j.Args, "args")
	requireJSON(t, p.Meta, j.Meta, "meta")
	require.Equal(t, p.Priority, j.Priority)
	require.Equal(t, p.State, j.State)
	require.Equal(t, 0, j.Attempt, "a new job has made no attempt")
	require.Equal(t, p.MaxAttempts, j.MaxAttempts)
	require.Empty(t, j.Errors)
	require.Empty(t, j.Result)
	requireJSON(t, p.RetryPolicy, j.RetryPolicy, "retry policy")
	require.Equal(t, p.Timeout, j.Timeout)
	if len(p.Tags) == 0 {
		require.Empty(t, j.Tags)
	} else {
		require.Equal(t, p.Tags, j.Tags)
	}
	requireNow(t, j.CreatedAt, "created_at")
	if p.ScheduledAt.IsZero() {
		requireNow(t, j.ScheduledAt, "scheduled_at of a job inserted without one")
	} else {
		requireTimeEqual(t, p.ScheduledAt, j.ScheduledAt, "scheduled_at")
	}
	require.True(t, j.StartedAt.IsZero(), "a new job has not started")
	require.True(t, j.CompletedAt.IsZero(), "a new job has not completed")
	requireTimeEqual(t, p.ExpiresAt, j.ExpiresAt, "expires_at")
	require.True(t, j.LeaseExpiresAt.IsZero(), "a new job has no lease")
	require.Empty(t, j.WorkerID)
	require.Equal(t, p.UniqueKey, j.UniqueKey)
	if len(p.UniqueStates) > 0 {
		require.ElementsMatch(t, p.UniqueStates, j.UniqueStates)
	}
	requireTimeEqual(t, p.UniqueUntil, j.UniqueUntil, "unique_until")
	require.False(t, j.Duplicate, "an inserted job is not a duplicate")
	require.Equal(t, p.Tenant, j.Tenant)
	require.Equal(t, p.RateKey, j.RateKey)
	require.Equal(t, p.WorkflowID, j.WorkflowID)
	if len(p.ParentIDs) == 0 {
		require.Empty(t, j.ParentIDs)
	} else {
		require.Equal(t, p.ParentIDs, j.ParentIDs)
	}
	require.Equal(t, p.RunOn, j.RunOn)
	require.Empty(t, j.ParentResults, "a new job has not been released by its parents")
}

// fullJob returns parameters with every field Insert accepts set, scheduled an hour from now. The
// workflow fields, which only InsertWorkflow accepts, are left empty.
func fullJob(queue string) *store.InsertParams {
	now := time.Now()
	return &store.InsertParams{
		ID:           uuidv7.New(),
		Kind:         "email.send",
		Queue:        queue,
		Args:         json.RawMessage(`[{"to":"ada@example.com","n":42,"tags":["x","y"]}]`),
		Meta:         json.RawMessage(`{"trace_id":"abc123","nested":{"list":[1,2,3]}}`),
		Priority:     7,
		State:        store.StateScheduled,
		MaxAttempts:  9,
		RetryPolicy:  json.RawMessage(`{"max_attempts":9,"initial_interval":"PT2S","backoff_coefficient":2.5}`),
		Timeout:      1500 * time.Millisecond,
		Tags:         []string{"billing", "urgent"},
		ScheduledAt:  now.Add(time.Hour).Truncate(time.Millisecond),
		ExpiresAt:    now.Add(2 * time.Hour).Truncate(time.Millisecond),
		UniqueKey:    "9f86d081884c7d659a2feaa0c55ad015",
		UniqueStates: []store.State{store.StateScheduled, store.StateAvailable, store.StateActive},
		UniqueUntil:  now.Add(3 * time.Hour).Truncate(time.Millisecond),
		Tenant:       "tenant-a",
		RateKey:      "rate:smtp",
	}
}

func testInsertRoundTrip(t *testing.T, s store.Store) {
	p := fullJob("mailers")
	jobs := insert(t, s, p)
	requireInserted(t, p, jobs[0])
	requireInserted(t, p, get(t, s, p.ID))
}

func testInsertDefaults(t *testing.T, s store.Store) {
	p := &store.InsertParams{
		ID: uuidv7.New(), Kind: "minimal", Queue: "default", Args: json.RawMessage(`[]`),
		State: store.StateAvailable, MaxAttempts: 1,
	}
	before := time.Now()
	insert(t, s, p)
	j := get(t, s, p.ID)
	requireInserted(t, p, j)
	require.True(t, j.ExpiresAt.IsZero(), "no expiry given: never expires")
	require.False(t, j.ScheduledAt.After(time.Now().Add(near)), "a zero scheduled_at is now, not later")
	require.False(t, j.ScheduledAt.Before(before.Add(-near)), "a zero scheduled_at is now, not earlier")

	got := claim(t, s, "default", 1)
	require.Equal(t, []string{p.ID}, ids(got), "a job inserted without scheduled_at is claimable at once")
}

// testInsertBatch inserts batches of several sizes (a store may write small and large batches
// differently) mixing states, priorities and every optional field, some set and some not, and
// requires every job back as given.
func testInsertBatch(t *testing.T, s store.Store) {
	states := []store.State{store.StateAvailable, store.StateScheduled, store.StatePending}
	tagSets := [][]string{nil, {"billing"}, {"a,b", `"quoted"`, "{braces}", "back\\slash", "ünï"}}
	for _, n := range []int{5, 100, 600} {
		var params []*store.InsertParams
		prefix := fmt.Sprintf("batch%d-", n)
		for i := range n {
			p := fullJob(fmt.Sprintf("%s%d", prefix, i%3))
			p.UniqueKey, p.UniqueStates, p.UniqueUntil = "", nil, time.Time{}
			p.Priority = i % 5
			p.Args = json.RawMessage(fmt.Sprintf(`[{"i":%d}]`, i))
			p.State = states[i%3]
			if p.State != store.StateScheduled {
				p.ScheduledAt = time.Time{}
			}
			p.Tags = tagSets[i%len(tagSets)]
			if i%4 == 0 {
				p.Meta, p.RetryPolicy, p.Tenant, p.RateKey = nil, nil, "", ""
				p.ExpiresAt, p.Timeout = time.Time{}, 0
			}
			params = append(params, p)
		}
		jobs := insert(t, s, params...)
		require.Len(t, jobs, n)
		for i, j := range jobs {
			requireInserted(t, params[i], j)
			requireInserted(t, params[i], get(t, s, params[i].ID))
		}
		for i, st := range states {
			q, ok := queueInfo(t, s, fmt.Sprintf("%s%d", prefix, i))
			require.True(t, ok)
			want := int64((n - i + 2) / 3)
			require.Equal(t, want, q.Counts[st], "batch of %d: queue %d holds its %s jobs", n, i, st)
		}
		require.Len(t, claim(t, s, prefix+"0", 1000), (n+2)/3, "batch of %d: every available job is claimable", n)
		require.Empty(t, claim(t, s, prefix+"1", 1000), "batch of %d: scheduled jobs are not due", n)
		require.Empty(t, claim(t, s, prefix+"2", 1000), "batch of %d: pending jobs are not claimable", n)
	}
}

func testInsertDuplicate(t *testing.T, s store.Store) {
	existing := job("dups")
	existing.Kind = "original"
	insert(t, s, existing)

	fresh1, fresh2 := job("dups-other"), job("dups-other")
	dup := job("dups-other")
	dup.ID = existing.ID
	dup.Kind = "impostor"
	_, err := s.Insert(ctx(t), []*store.InsertParams{fresh1, dup, fresh2})
	require.ErrorIs(t, err, store.ErrDuplicate)
	for _, id := range []string{fresh1.ID, fresh2.ID} {
		_, err := s.GetJob(ctx(t), id)
		require.ErrorIs(t, err, store.ErrNotFound, "a batch with a duplicate inserts nothing")
	}
	j := get(t, s, existing.ID)
	require.Equal(t, "original", j.Kind, "the existing job is untouched")
	require.Equal(t, "dups", j.Queue)
	_, listed := queueInfo(t, s, "dups-other")
	require.False(t, listed, "nothing of the refused batch is counted")
	require.Empty(t, claim(t, s, "dups-other", 10), "nothing of the refused batch is claimable")

	// Deep in a large batch too (a store may check the ids in chunks), and a large batch without one
	// is written whole, every job found by its id.
	large := make([]*store.InsertParams, 900)
	for i := range large {
		large[i] = job("dups-large")
	}
	deep := *dup
	deep.Queue = "dups-large" // one queue: a store may write such a batch in one step
	large[850] = &deep
	_, err = s.Insert(ctx(t), large)
	require.ErrorIs(t, err, store.ErrDuplicate)
	_, listed = queueInfo(t, s, "dups-large")
	require.False(t, listed, "nothing of the refused large batch is counted")
	large[850] = job("dups-large")
	_, err = s.Insert(ctx(t), large)
	require.NoError(t, err)
	for _, i := range []int{0, 399, 400, 401, 850, 899} {
		require.Equal(t, "dups-large", get(t, s, large[i].ID).Queue)
	}

	// The same id twice in one batch is a duplicate too.
	twice := job("dups-twice")
	_, err = s.Insert(ctx(t), []*store.InsertParams{twice, twice})
	require.ErrorIs(t, err, store.ErrDuplicate)
	_, err = s.GetJob(ctx(t), twice.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	// A single duplicate insert is refused.
	again := job("dups")
	again.ID = existing.ID
	_, err = s.Insert(ctx(t), []*store.InsertParams{again})
	require.ErrorIs(t, err, store.ErrDuplicate)
	q, _ := queueInfo(t, s, "dups")
	require.Equal(t, int64(1), q.Counts[store.StateAvailable])
}

func testJobsAreCopies(t *testing.T, s store.Store) {
	p := fullJob("copies")
	p.State = store.StateAvailable
	p.ScheduledAt = time.Time{}
	jobs := insert(t, s, p)

	// Changing what was passed in or handed out changes nothing stored.
	p.Args[2] = 'X'
	p.Tags[0] = "changed"
	p.UniqueStates[0] = store.StateCompleted
	jobs[0].Args[2] = 'Y'
	jobs[0].Tags[0] = "changed"
	jobs[0].Meta = append(jobs[0].Meta[:0], `{"x":1}`...)
	got := get(t, s, p.ID)
	got.Tags[1] = "changed"
	got.Args[3] = 'Z'

	j := get(t, s, p.ID)
	require.JSONEq(t, `[{"to":"ada@example.com","n":42,"tags":["x","y"]}]`, string(j.Args))
	require.JSONEq(t, `{"trace_id":"abc123","nested":{"list":[1,2,3]}}`, string(j.Meta))
	require.Equal(t, []string{"billing", "urgent"}, j.Tags)
	require.NotContains(t, j.UniqueStates, store.StateCompleted)

	claimed := claim(t, s, "copies", 1)
	require.Len(t, claimed, 1)
	claimed[0].Args[2] = 'W'
	require.JSONEq(t, `[{"to":"ada@example.com","n":42,"tags":["x","y"]}]`, string(get(t, s, p.ID).Args))
}
