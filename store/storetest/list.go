package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// listAll pages through ListJobs with p (Limit as given) and returns every job id in page order,
// failing on a page larger than the limit, a repeated id, or a runaway cursor.
func listAll(t *testing.T, s store.Store, p store.ListParams) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for page := 0; ; page++ {
		require.Less(t, page, 1000, "ListJobs cursor never ends")
		jobs, next, err := s.ListJobs(ctx(t), p)
		require.NoError(t, err)
		require.LessOrEqual(t, len(jobs), p.Limit, "a page holds at most Limit jobs")
		for _, j := range jobs {
			require.False(t, seen[j.ID], "job %s listed twice", j.ID)
			seen[j.ID] = true
			out = append(out, j.ID)
		}
		if next == "" {
			return out
		}
		require.NotEmpty(t, jobs, "a page with a next cursor has jobs")
		require.Equal(t, jobs[len(jobs)-1].ID, next, "the cursor is the last id of the page")
		p.After = next
	}
}

// listFixture inserts 25 jobs across queues, kinds and states and returns their params.
func listFixture(t *testing.T, s store.Store) []*store.InsertParams {
	var params []*store.InsertParams
	for i := range 25 {
		p := job(fmt.Sprintf("list-%d", i%3))
		p.Kind = fmt.Sprintf("kind-%d", i%2)
		if i%5 == 0 {
			p.State = store.StatePending
		}
		params = append(params, p)
	}
	insert(t, s, params...)
	return params
}

func filterIDs(params []*store.InsertParams, keep func(*store.InsertParams) bool) []string {
	var out []string
	for _, p := range params {
		if keep(p) {
			out = append(out, p.ID)
		}
	}
	return sortedIDs(out)
}

func testListJobsFilters(t *testing.T, s store.Store) {
	params := listFixture(t, s)
	all := filterIDs(params, func(*store.InsertParams) bool { return true })

	require.Equal(t, all, listAll(t, s, store.ListParams{Limit: 100}), "no filter: every job, in id order")
	require.Equal(t,
		filterIDs(params, func(p *store.InsertParams) bool { return p.Queue == "list-1" }),
		listAll(t, s, store.ListParams{Queues: []string{"list-1"}, Limit: 100}))
	require.Equal(t,
		filterIDs(params, func(p *store.InsertParams) bool { return p.Queue != "list-1" }),
		listAll(t, s, store.ListParams{Queues: []string{"list-0", "list-2"}, Limit: 100}))
	require.Equal(t,
		filterIDs(params, func(p *store.InsertParams) bool { return p.Kind == "kind-0" }),
		listAll(t, s, store.ListParams{Kinds: []string{"kind-0"}, Limit: 100}))
	require.Equal(t,
		filterIDs(params, func(p *store.InsertParams) bool { return p.State == store.StatePending }),
		listAll(t, s, store.ListParams{States: []store.State{store.StatePending}, Limit: 100}))
	require.Equal(t,
		filterIDs(params, func(p *store.InsertParams) bool {
			return p.State == store.StateAvailable && p.Queue == "list-2" && p.Kind == "kind-1"
		}),
		listAll(t, s, store.ListParams{States: []store.State{store.StateAvailable}, Queues: []string{"list-2"},
			Kinds: []string{"kind-1"}, Limit: 100}), "filters combine")
	require.Empty(t, listAll(t, s, store.ListParams{States: []store.State{store.StateActive}, Limit: 100}))
	require.Empty(t, listAll(t, s, store.ListParams{Queues: []string{"no-such-queue"}, Limit: 100}))

	// States follow the jobs.
	claimed := claim(t, s, "list-0", 2)
	require.Len(t, claimed, 2)
	require.Equal(t, sortedIDs(ids(claimed)), listAll(t, s, store.ListParams{States: []store.State{store.StateActive}, Limit: 100}))

	// The listed jobs are whole.
	jobs, _, err := s.ListJobs(ctx(t), store.ListParams{Queues: []string{"list-1"}, Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	for _, p := range params {
		if p.ID == jobs[0].ID {
			requireInserted(t, p, jobs[0])
		}
	}
}

func testListJobsPagination(t *testing.T, s store.Store) {
	params := listFixture(t, s)
	all := filterIDs(params, func(*store.InsertParams) bool { return true })
	desc := slices.Clone(all)
	slices.Reverse(desc)

	for _, limit := range []int{1, 7, 25, 100} {
		require.Equal(t, all, listAll(t, s, store.ListParams{Limit: limit}),
			"ascending pages of %d: every job once, in id order", limit)
		require.Equal(t, desc, listAll(t, s, store.ListParams{Limit: limit, Descending: true}),
			"descending pages of %d: every job once, in reverse id order", limit)
	}

	// A page of exactly the remaining jobs.
	first, next, err := s.ListJobs(ctx(t), store.ListParams{Limit: 20})
	require.NoError(t, err)
	require.Equal(t, all[:20], ids(first))
	require.Equal(t, all[19], next)
	rest, next, err := s.ListJobs(ctx(t), store.ListParams{Limit: 5, After: next})
	require.NoError(t, err)
	require.Equal(t, all[20:], ids(rest))
	if next != "" {
		empty, last, err := s.ListJobs(ctx(t), store.ListParams{Limit: 5, After: next})
		require.NoError(t, err)
		require.Empty(t, empty)
		require.Empty(t, last)
	}

	// Paging with filters.
	queue1 := filterIDs(params, func(p *store.InsertParams) bool { return p.Queue == "list-1" })
	require.Equal(t, queue1, listAll(t, s, store.ListParams{Queues: []string{"list-1"}, Limit: 3}))
	queue1Desc := slices.Clone(queue1)
	slices.Reverse(queue1Desc)
	require.Equal(t, queue1Desc, listAll(t, s, store.ListParams{Queues: []string{"list-1"}, Limit: 3, Descending: true}))

	// A cursor from the middle continues after it; descending, before it.
	mid := all[12]
	require.Equal(t, all[13:], listAll(t, s, store.ListParams{After: mid, Limit: 4}))
	require.Equal(t, desc[13:], listAll(t, s, store.ListParams{After: mid, Limit: 4, Descending: true}))

	// Jobs deleted between pages leave no gap and no repeat among the rest.
	page, next, err := s.ListJobs(ctx(t), store.ListParams{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, all[:10], ids(page))
	for _, id := range []string{all[9], all[10]} {
		_, err := s.DeleteJob(ctx(t), id)
		require.NoError(t, err)
	}
	require.Equal(t, all[11:], listAll(t, s, store.ListParams{After: next, Limit: 10}))
}

func testListQueues(t *testing.T, s store.Store) {
	qs, err := s.ListQueues(ctx(t))
	require.NoError(t, err)
	require.Empty(t, qs, "an empty store has no queues")

	for _, st := range store.AllStates {
		inState(t, s, "counts", st)
	}
	inState(t, s, "counts", store.StateAvailable)
	inState(t, s, "counts-other", store.StateCompleted)
	require.NoError(t, s.PauseQueue(ctx(t), "counts-other"))
	require.NoError(t, s.PauseQueue(ctx(t), "counts-idle"))

	qs, err = s.ListQueues(ctx(t))
	require.NoError(t, err)
	byName := map[string]store.QueueInfo{}
	for _, q := range qs {
		require.NotContains(t, byName, q.Name, "queue %s listed twice", q.Name)
		byName[q.Name] = q
	}
	require.Len(t, byName, 3)

	q := byName["counts"]
	require.False(t, q.Paused)
	require.Len(t, q.Counts, len(store.AllStates), "every state has a count, zero or not")
	for _, st := range store.AllStates {
		want := int64(1)
		if st == store.StateAvailable {
			want = 2
		}
		require.Equal(t, want, q.Counts[st], "jobs of queue counts in state %s", st)
	}

	other := byName["counts-other"]
	require.True(t, other.Paused)
	require.Len(t, other.Counts, len(store.AllStates))
	require.Equal(t, int64(1), other.Counts[store.StateCompleted])
	require.Equal(t, int64(0), other.Counts[store.StateAvailable])

	idle := byName["counts-idle"]
	require.True(t, idle.Paused)
	require.Len(t, idle.Counts, len(store.AllStates))
	for _, st := range store.AllStates {
		require.Zero(t, idle.Counts[st])
	}

	require.NoError(t, s.ResumeQueue(ctx(t), "counts-idle"))
	_, listed := queueInfo(t, s, "counts-idle")
	require.False(t, listed, "a resumed queue without jobs is not listed")
	other, _ = queueInfo(t, s, "counts-other")
	require.True(t, other.Paused, "resuming one queue leaves the others paused")
}

// testListJobsByTags: a tag filter lists the jobs that have every given tag, in both orders, with the
// other filters.
func testListJobsByTags(t *testing.T, s store.Store) {
	tagSets := [][]string{nil, {"vip"}, {"vip", "eu"}, {"eu"}, {"eu", "vip", "beta"}, {"beta"}}
	var params []*store.InsertParams
	for i := range 12 {
		p := job(fmt.Sprintf("tags-%d", i%2))
		p.Tags = tagSets[i%len(tagSets)]
		params = append(params, p)
	}
	insert(t, s, params...)
	has := func(p *store.InsertParams, want ...string) bool {
		for _, w := range want {
			if !slices.Contains(p.Tags, w) {
				return false
			}
		}
		return true
	}
	for _, want := range [][]string{{"vip"}, {"eu", "vip"}, {"beta"}, {"vip", "eu", "beta"}, {"none"}} {
		exp := filterIDs(params, func(p *store.InsertParams) bool { return has(p, want...) })
		require.Equal(t, exp, listAll(t, s, store.ListParams{Tags: want, Limit: 2}), "tags %v", want)
		desc := slices.Clone(exp)
		slices.Reverse(desc)
		require.Equal(t, desc, listAll(t, s, store.ListParams{Tags: want, Limit: 100, Descending: true}), "tags %v, descending", want)
	}
	require.Equal(t,
		filterIDs(params, func(p *store.InsertParams) bool { return p.Queue == "tags-1" && has(p, "eu") }),
		listAll(t, s, store.ListParams{Tags: []string{"eu"}, Queues: []string{"tags-1"}, Limit: 100}), "tags combine with queues")
}
