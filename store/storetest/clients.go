package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// testClients: records are listed while live, in id order, with the live leader marked; replaced,
// removed, and gone once their time to live has passed.
func testClients(t *testing.T, s store.Store) {
	a, b := "a-"+uniq("client"), "b-"+uniq("client")
	started := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	before := time.Now()
	require.NoError(t, s.PutClient(ctx(t), store.ClientRecord{ID: b, Host: "web-1", PID: 42, Version: "v1",
		Queues:    []store.ClientQueue{{Name: "default", MaxWorkers: 10, Running: 3}, {Name: "mail", MaxWorkers: 2}},
		StartedAt: started}, time.Minute))
	require.NoError(t, s.PutClient(ctx(t), store.ClientRecord{ID: a, StartedAt: started}, time.Minute))
	list, err := s.ListClients(ctx(t), "storetest-leader")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{a, b}, []string{list[0].ID, list[1].ID}, "in id order")
	got := list[1]
	require.Equal(t, "web-1", got.Host)
	require.Equal(t, 42, got.PID)
	require.Equal(t, "v1", got.Version)
	require.Equal(t, []store.ClientQueue{{Name: "default", MaxWorkers: 10, Running: 3}, {Name: "mail", MaxWorkers: 2}}, got.Queues)
	require.WithinDuration(t, started, got.StartedAt, time.Millisecond)
	requireBetween(t, before, time.Now(), got.SeenAt, "SeenAt")
	require.Empty(t, list[0].Queues, "an insert-only client works no queue")
	require.False(t, list[0].Leader || list[1].Leader, "nobody leads yet")

	// The live leader of the asked leadership is marked; another leadership's is not.
	ok, err := s.Elect(ctx(t), "storetest-leader", b, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	list, err = s.ListClients(ctx(t), "storetest-leader")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.False(t, list[0].Leader)
	require.True(t, list[1].Leader, "b leads")
	list, err = s.ListClients(ctx(t), "another-leadership")
	require.NoError(t, err)
	require.False(t, list[1].Leader)

	// A new record replaces the old one.
	require.NoError(t, s.PutClient(ctx(t), store.ClientRecord{ID: b, Host: "web-2", StartedAt: started,
		Queues: []store.ClientQueue{{Name: "default", MaxWorkers: 10, Running: 9}}}, time.Minute))
	list, err = s.ListClients(ctx(t), "storetest-leader")
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "web-2", list[1].Host)
	require.Equal(t, []store.ClientQueue{{Name: "default", MaxWorkers: 10, Running: 9}}, list[1].Queues)

	// Removed, it is gone; removing it again is no error.
	require.NoError(t, s.RemoveClient(ctx(t), a))
	require.NoError(t, s.RemoveClient(ctx(t), a))
	list, err = s.ListClients(ctx(t), "storetest-leader")
	require.NoError(t, err)
	require.Equal(t, []string{b}, clientIDs(list))

	// A record not rewritten within its time to live is gone.
	c := "c-" + uniq("client")
	require.NoError(t, s.PutClient(ctx(t), store.ClientRecord{ID: c, StartedAt: started}, 300*time.Millisecond))
	list, err = s.ListClients(ctx(t), "storetest-leader")
	require.NoError(t, err)
	require.Contains(t, clientIDs(list), c)
	require.Eventually(t, func() bool {
		list, err := s.ListClients(ctx(t), "storetest-leader")
		return err == nil && !slices.Contains(clientIDs(list), c)
	}, 10*time.Second, 20*time.Millisecond, "an expired record is not listed")
	list, err = s.ListClients(ctx(t), "storetest-leader")
	require.NoError(t, err)
	require.Equal(t, []string{b}, clientIDs(list), "the live record stays")
}

func clientIDs(list []store.ClientRecord) []string {
	out := make([]string, len(list))
	for i, r := range list {
		out[i] = r.ID
	}
	return out
}

// idAt returns a fresh UUIDv7 whose timestamp is at.
func idAt(at time.Time) string {
	id := uuidv7.New()
	ms := fmt.Sprintf("%012x", at.UnixMilli())
	return ms[:8] + "-" + ms[8:] + id[13:]
}

// testListJobsTimeWindows: the creation-time bounds select by the time in the id, the finish-time
// bounds by CompletedAt; both page by cursor in either order, and combine with the other filters.
func testListJobsTimeWindows(t *testing.T, s store.Store) {
	queue := uniq("window")
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var params []*store.InsertParams
	for i := range 10 {
		p := job(queue)
		p.ID = idAt(base.Add(time.Duration(i) * time.Minute)) // minute i
		params = append(params, p)
	}
	insert(t, s, params...)
	minute := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }
	window := func(from, to int) []string { // ids created in minutes [from, to)
		var out []string
		for i := from; i < to; i++ {
			out = append(out, params[i].ID)
		}
		return out
	}
	reversed := func(v []string) []string { v = slices.Clone(v); slices.Reverse(v); return v }

	for _, limit := range []int{1, 3, 100} {
		p := store.ListParams{Queues: []string{queue}, CreatedAfter: minute(2), CreatedBefore: minute(7), Limit: limit}
		require.Equal(t, window(2, 7), listAll(t, s, p), "created in [2, 7), pages of %d", limit)
		p.Descending = true
		require.Equal(t, reversed(window(2, 7)), listAll(t, s, p), "created in [2, 7), newest first, pages of %d", limit)
	}
	require.Equal(t, window(8, 10), listAll(t, s, store.ListParams{Queues: []string{queue}, CreatedAfter: minute(8), Limit: 2}))
	require.Equal(t, reversed(window(0, 3)), listAll(t, s, store.ListParams{Queues: []string{queue},
		CreatedBefore: minute(3), Descending: true, Limit: 2}))
	require.Equal(t, window(4, 5), listAll(t, s, store.ListParams{Queues: []string{queue},
		CreatedAfter: minute(4), CreatedBefore: minute(4).Add(time.Millisecond), Limit: 10}), "to the millisecond")
	require.Empty(t, listAll(t, s, store.ListParams{Queues: []string{queue}, CreatedAfter: minute(7), CreatedBefore: minute(2), Limit: 10}))

	// A cursor outside the window: the window wins.
	jobs, _, err := s.ListJobs(ctx(t), store.ListParams{Queues: []string{queue}, CreatedAfter: minute(5), After: params[1].ID, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, window(5, 10), ids(jobs))
	jobs, _, err = s.ListJobs(ctx(t), store.ListParams{Queues: []string{queue}, CreatedAfter: minute(5), After: params[7].ID, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, window(8, 10), ids(jobs))

	// Finish times: complete jobs 0..3 now, in two batches around a mark.
	claimed := claim(t, s, queue, 4)
	require.Len(t, claimed, 4)
	finishAll(t, s, claimed[:2])
	// The mark falls after the first batch's finish, by the store's clock, and before the second's.
	var mark time.Time
	for _, j := range claimed[:2] {
		if c := get(t, s, j.ID).CompletedAt; c.After(mark) {
			mark = c
		}
	}
	mark = mark.Add(time.Millisecond)
	require.Eventually(t, func() bool { return time.Now().After(mark.Add(time.Millisecond)) }, 5*time.Second, time.Millisecond)
	finishAll(t, s, claimed[2:])
	first, second := sortedIDs(ids(claimed[:2])), sortedIDs(ids(claimed[2:]))
	all := sortedIDs(ids(claimed))
	require.Equal(t, all, listAll(t, s, store.ListParams{Queues: []string{queue}, FinishedAfter: base, Limit: 3}),
		"finished since an hour ago: only the finished jobs")
	require.Equal(t, second, listAll(t, s, store.ListParams{Queues: []string{queue}, FinishedAfter: mark, Limit: 1}))
	require.Equal(t, first, listAll(t, s, store.ListParams{Queues: []string{queue}, FinishedBefore: mark, Limit: 1}))
	require.Equal(t, reversed(first), listAll(t, s, store.ListParams{Queues: []string{queue}, FinishedBefore: mark,
		Descending: true, Limit: 1}))
	require.Empty(t, listAll(t, s, store.ListParams{Queues: []string{queue}, FinishedAfter: time.Now().Add(time.Hour), Limit: 10}))
	// Combined with the creation window and a state.
	require.Equal(t, window(2, 4), listAll(t, s, store.ListParams{Queues: []string{queue}, FinishedAfter: base,
		CreatedAfter: minute(2), CreatedBefore: minute(6), States: []store.State{store.StateCompleted}, Limit: 10}))
}

// testWorkflowList: workflows page by cursor in id order, newest first by default, with their
// counts as GetWorkflow gives them.
func testWorkflowList(t *testing.T, s store.Store) {
	l, ok := s.(store.WorkflowLister)
	require.True(t, ok, "%T implements store.WorkflowLister", s)
	var wfIDs []string
	for range 5 {
		wf := uuidv7.New()
		parent := member(wf, uniq("wflist"))
		insertWorkflow(t, s, wf, parent, member(wf, parent.Queue, parent))
		wfIDs = append(wfIDs, wf)
	}
	listWF := func(p store.WorkflowListParams) []string {
		var out []string
		for page := 0; ; page++ {
			require.Less(t, page, 100, "ListWorkflows cursor never ends")
			ws, next, err := l.ListWorkflows(ctx(t), p)
			require.NoError(t, err)
			require.LessOrEqual(t, len(ws), p.Limit)
			for _, w := range ws {
				if slices.Contains(wfIDs, w.ID) { // other workflows may share the store
					out = append(out, w.ID)
					require.Equal(t, getWorkflow(t, s, w.ID), w)
				}
			}
			if next == "" {
				return out
			}
			require.Equal(t, ws[len(ws)-1].ID, next, "the cursor is the last id of the page")
			p.After = next
		}
	}
	newest := slices.Clone(wfIDs)
	slices.Reverse(newest)
	for _, limit := range []int{1, 2, 100} {
		require.Equal(t, newest, listWF(store.WorkflowListParams{Limit: limit}), "newest first, pages of %d", limit)
		require.Equal(t, wfIDs, listWF(store.WorkflowListParams{Limit: limit, Ascending: true}), "oldest first, pages of %d", limit)
	}
	w := getWorkflow(t, s, wfIDs[0])
	require.Equal(t, 2, w.Total)
}

// testRunJobNow: a scheduled or retryable job becomes available and claimable at once, keeping its
// attempts; other states are refused, a missing job is not found.
func testRunJobNow(t *testing.T, s store.Store) {
	queue := uniq("runnow")
	later := job(queue)
	later.State, later.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	insert(t, s, later)
	require.Empty(t, claim(t, s, queue, 10), "not due yet")
	j, err := s.RunJobNow(ctx(t), later.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.Equal(t, 0, j.Attempt)
	require.False(t, j.ScheduledAt.After(time.Now().Add(time.Second)), "due now")
	got := claim(t, s, queue, 10)
	require.Equal(t, []string{later.ID}, ids(got), "claimable at once")

	// A retryable job keeps the attempt it used.
	require.True(t, finish(t, s, store.Completion{ID: got[0].ID, Attempt: got[0].Attempt, State: store.StateRetryable,
		ScheduledAt: time.Now().Add(time.Hour), Error: &store.AttemptError{Attempt: 1, At: time.Now(), Message: "later"}}))
	require.Empty(t, claim(t, s, queue, 10))
	j, err = s.RunJobNow(ctx(t), later.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Len(t, j.Errors, 1)
	again := claim(t, s, queue, 10)
	require.Equal(t, []string{later.ID}, ids(again))
	require.Equal(t, 2, again[0].Attempt)

	// Active, available and finished jobs are refused.
	_, err = s.RunJobNow(ctx(t), later.ID)
	var te *store.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, store.StateActive, te.From)
	now := job(queue)
	insert(t, s, now)
	_, err = s.RunJobNow(ctx(t), now.ID)
	require.ErrorIs(t, err, store.ErrInvalidTransition)
	_, err = s.RunJobNow(ctx(t), uuidv7.New())
	require.ErrorIs(t, err, store.ErrNotFound)
}
