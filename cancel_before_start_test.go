package pronto_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// cancelOnClaim is a real store whose first claim that returns jobs cancels the first of them
// through the store, and returns only once the client has heard the cancellation: the cancel lands
// between the claim and the run's start, the window a client cannot see through the store.
type cancelOnClaim struct {
	store.Store
	client    func() *pronto.Client
	once      sync.Once
	cancelled chan string
	err       error
}

func (s *cancelOnClaim) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	jobs, err := s.Store.Claim(ctx, p)
	if len(jobs) == 0 {
		return jobs, err
	}
	s.once.Do(func() {
		j := jobs[0]
		if _, s.err = s.Store.CancelJob(context.Background(), j.ID); s.err == nil {
			for deadline := time.Now().Add(30 * time.Second); !pronto.HeardCancel(s.client(), j.ID, j.ClaimToken); {
				if time.Now().After(deadline) {
					s.err = context.DeadlineExceeded
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		s.cancelled <- j.ID
	})
	return jobs, err
}

// TestCancelBetweenClaimAndStart: a job cancelled after a client claimed it and before the client
// registered its run never starts its worker (the cancellation names the run's claim token, and the
// client remembers it until the run arrives), and the client goes on working other jobs.
func TestCancelBetweenClaimAndStart(t *testing.T) {
	forEachStoreOf(t, storesWithRedis, func(t *testing.T, ts *testStore) {
		log := newRunLog()
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(_ context.Context, j *pronto.Job[echoArgs]) error {
			log.add(j.ID)
			return nil
		}))
		var c *pronto.Client
		s := &cancelOnClaim{Store: ts, client: func() *pronto.Client { return c }, cancelled: make(chan string, 1)}
		var err error
		c, err = pronto.NewClient(s, fastConfig(ws, defaultQueue(2)))
		require.NoError(t, err)
		startBuilt(t, c)

		first, err := c.Insert(context.Background(), echoArgs{Message: "cancelled"}, nil)
		require.NoError(t, err)
		var cancelled string
		select {
		case cancelled = <-s.cancelled:
		case <-time.After(30 * time.Second):
			t.Fatal("no job was claimed")
		}
		require.NoError(t, s.err)
		require.Equal(t, first.ID, cancelled)
		second, err := c.Insert(context.Background(), echoArgs{Message: "runs"}, nil)
		require.NoError(t, err)
		waitState(t, c, second.ID, pronto.StateCompleted)
		require.Equal(t, pronto.StateCancelled, waitState(t, c, first.ID, pronto.StateCancelled).State)
		_, runs := log.snapshot()
		require.Zero(t, runs[first.ID], "the cancelled run never started")
		require.Equal(t, 1, runs[second.ID])
	})
}
