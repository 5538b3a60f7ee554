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
