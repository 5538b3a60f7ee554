package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// testClaimTokenFencesRuns: every claim gives the job a new claim token, and an outcome or a
// heartbeat naming an older claim's token is refused even when the attempt number is the same, as
// after a manual retry (or a claim a database crash rolled back).
func testClaimTokenFencesRuns(t *testing.T, s store.Store) {
	p := job("fence")
	first := activeFor(t, s, p, "worker", time.Hour)
	require.NotEmpty(t, first.ClaimToken, "a claimed job carries its claim token")
	require.Equal(t, first.ClaimToken, get(t, s, first.ID).ClaimToken, "GetJob shows the active job's token")

	// The same attempt number again: cancel, retry (attempts reset), claim.
	_, err := s.CancelJob(ctx(t), first.ID)
	require.NoError(t, err)
	require.Empty(t, get(t, s, first.ID).ClaimToken, "a job that is not active has no claim token")
	_, err = s.RetryJob(ctx(t), first.ID)
	require.NoError(t, err)
	second := reclaim(t, s, p.Queue, p.Kind, p.ID, "worker", time.Hour)
	require.Equal(t, first.Attempt, second.Attempt, "the retry reset the attempt count")
	require.NotEmpty(t, second.ClaimToken)
	require.NotEqual(t, first.ClaimToken, second.ClaimToken, "each claim draws a new token")

	lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{
		WorkerID: "worker", IDs: []string{p.ID}, Tokens: []string{first.ClaimToken}, LeaseDuration: time.Hour,
	})
	require.NoError(t, err)
	require.Equal(t, []string{p.ID}, lost, "a heartbeat of the old claim is refused though the worker id matches")

	require.False(t, finish(t, s, store.Completion{ID: p.ID, Attempt: first.Attempt, Token: first.ClaimToken,
		State: store.StateCompleted}), "the old claim's outcome is refused though the attempt matches")
	require.False(t, finish(t, s, store.Completion{ID: p.ID, Attempt: first.Attempt, Token: "not-a-token",
		State: store.StateCompleted}), "an outcome with a token no claim drew is refused")
	require.Equal(t, store.StateActive, get(t, s, p.ID).State)

	lost, err = s.Heartbeat(ctx(t), store.HeartbeatParams{
		WorkerID: "worker", IDs: []string{p.ID}, Tokens: []string{second.ClaimToken}, LeaseDuration: time.Hour,
	})
	require.NoError(t, err)
	require.Empty(t, lost, "the current claim's heartbeat extends the lease")
	require.True(t, finish(t, s, store.Completion{ID: p.ID, Attempt: second.Attempt, Token: second.ClaimToken,
		State: store.StateCompleted}), "the current claim decides the outcome")
	require.Equal(t, store.StateCompleted, get(t, s, p.ID).State)
}

// testClaimTokensDistinctInBatch: the jobs of one claim each get a token of their own, so a token
// names one job's claim and never another job's.
func testClaimTokensDistinctInBatch(t *testing.T, s store.Store) {
	const n = 6
	ps := make([]*store.InsertParams, n)
	for i := range ps {
		ps[i] = job("fence-batch")
		if i%2 == 1 { // claimed through the rate-limited path of the stores that have one
			ps[i].RateKey = "fence-key"
			ps[i].RateLimit = &store.RateLimit{MaxActive: n}
		}
	}
	insert(t, s, ps...)
	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: "fence-batch", Limit: n, WorkerID: "w", LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	seen := map[string]bool{}
	for _, j := range jobs {
		require.NotEmpty(t, j.ClaimToken)
		require.False(t, seen[j.ClaimToken], "token %s given twice in one claim", j.ClaimToken)
		seen[j.ClaimToken] = true
	}
	// Crossed tokens: each job named with another job's token of the same claim.
	ids := []string{jobs[0].ID, jobs[1].ID}
	lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{WorkerID: "w", IDs: ids,
		Tokens: []string{jobs[1].ClaimToken, jobs[0].ClaimToken}, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.ElementsMatch(t, ids, lost, "a job named with another job's token is not extended")
	require.False(t, finish(t, s, store.Completion{ID: jobs[0].ID, Attempt: 1, Token: jobs[1].ClaimToken,
		State: store.StateCompleted}))
}

// testClaimForWorkers: one claim made for several workers (ClaimParams.WorkerIDs) takes at most one
// job per entry and records the first entries on the jobs it returns, one each, whatever path the
// queue's claim takes (plain, kind-filtered, in turns across tenants); each worker then holds only
// its own jobs.
func testClaimForWorkers(t *testing.T, s store.Store) {
	workers := []string{"wa", "wa", "wb", "wc", "wd", "we", "wf"}
	for _, c := range []struct {
		name    string
		tenants bool
		kinds   bool
	}{{"plain", false, false}, {"kinds", false, true}, {"tenants", true, false}} {
		queue := uniq("for-workers")
		ps := make([]*store.InsertParams, 5)
		for i := range ps {
			ps[i] = job(queue)
			if c.tenants {
				ps[i].Tenant = []string{"t1", "t2"}[i%2]
			}
		}
		insert(t, s, ps...)
		p := store.ClaimParams{Queue: queue, WorkerIDs: workers, LeaseDuration: time.Hour,
			Limit: 1, WorkerID: "ignored"}
		if c.kinds {
			p.Kinds = []string{ps[0].Kind}
		}
		jobs, err := s.Claim(ctx(t), p)
		require.NoError(t, err, c.name)
		require.Len(t, jobs, len(ps), "%s: every job is claimed, one per worker entry, Limit ignored", c.name)
		checkWorkerEntries(t, s, jobs, workers, c.name)

		// Each worker's heartbeat extends its own jobs only.
		var ofB, ofA string
		for _, j := range jobs {
			switch j.WorkerID {
			case "wb":
				ofB = j.ID
			case "wa":
				ofA = j.ID
			}
		}
		lost, err := s.Heartbeat(ctx(t), store.HeartbeatParams{WorkerID: "wb", IDs: []string{ofB, ofA}, LeaseDuration: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []string{ofA}, lost, "%s: a worker cannot extend another worker's job of the same claim", c.name)
	}

	// A claim for more workers than jobs serves the first entries; an empty queue gives nothing.
	queue := uniq("for-workers-short")
	insert(t, s, job(queue), job(queue))
	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: queue, WorkerIDs: workers, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	checkWorkerEntries(t, s, jobs, workers, "short")
	jobs, err = s.Claim(ctx(t), store.ClaimParams{Queue: queue, WorkerIDs: workers, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Empty(t, jobs)
}

// testRateLimitClaimForWorkers: the rate-limited claim path records one worker entry per job too.
func testRateLimitClaimForWorkers(t *testing.T, s store.Store) {
	queue := uniq("for-workers-limited")
	ps := make([]*store.InsertParams, 4)
	for i := range ps {
		ps[i] = job(queue)
		if i%2 == 0 {
			ps[i].RateKey, ps[i].RateLimit = uniq("fw-key"), &store.RateLimit{MaxActive: 10}
		}
	}
	insert(t, s, ps...)
	workers := []string{"w1", "w2", "w3", "w4", "w5"}
	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: queue, WorkerIDs: workers, LeaseDuration: time.Hour})
	require.NoError(t, err)
	require.Len(t, jobs, len(ps))
	checkWorkerEntries(t, s, jobs, workers, "limited")
}

// checkWorkerEntries requires jobs to carry the first len(jobs) entries of workers, one each, as
// returned and as stored.
func checkWorkerEntries(t *testing.T, s store.Store, jobs []*store.Job, workers []string, name string) {
	t.Helper()
	got := make([]string, len(jobs))
	for i, j := range jobs {
		got[i] = j.WorkerID
		require.Equal(t, j.WorkerID, get(t, s, j.ID).WorkerID, "%s: the stored worker id is the returned one", name)
		require.Equal(t, store.StateActive, j.State)
	}
	require.ElementsMatch(t, workers[:len(jobs)], got, "%s: the first entries, one per job", name)
}
