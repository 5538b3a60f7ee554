package pronto_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// heldByMany returns the ids of the jobs of queue q in a state that holds the key every one of them
// has (all of them are one kind, unique by queue), when there is more than one.
func heldByMany(ctx context.Context, s store.Store, q string) ([]string, error) {
	jobs, _, err := s.ListJobs(ctx, store.ListParams{Queues: []string{q}, States: store.NonTerminalStates, Limit: 100})
	if err != nil || len(jobs) < 2 {
		return nil, err
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, fmt.Sprintf("%s(%s)", j.ID, j.State))
	}
	return ids, nil
}

// TestUniqueKeyOneHolderUnderRaces: inserts under every policy, claims finishing their jobs in every
// terminal way, and retries of cancelled and discarded jobs, all at once on one unique key: never two
// jobs hold it; on every store (Redis at the end only: its listing is not one snapshot).
func TestUniqueKeyOneHolderUnderRaces(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		const q, ops = "uq", 120
		policies := []pronto.UniqueConflict{pronto.UniqueReject, pronto.UniqueIgnore, pronto.UniqueReplace}
		outcomes := []store.State{store.StateCompleted, store.StateCancelled, store.StateDiscarded}
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		stop := make(chan struct{})
		run := func(f func(rng *rand.Rand) error, seed uint64) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 3))
				for range ops {
					if err := f(rng); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for w := range 3 {
			run(func(rng *rand.Rand) error {
				_, err := c.Insert(ctx, bpArgs{N: rng.IntN(1000)}, &pronto.InsertOpts{Queue: q,
					Unique: &pronto.UniqueOpts{ByQueue: true, OnConflict: policies[rng.IntN(len(policies))]}})
				if err != nil && !errors.Is(err, pronto.ErrUniqueConflict) {
					return err
				}
				return nil
			}, uint64(w))
		}
		for w := range 2 {
			run(func(rng *rand.Rand) error {
				jobs, err := ts.Store.Claim(ctx, store.ClaimParams{Queue: q, Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
				if err != nil || len(jobs) == 0 {
					return err
				}
				_, err = ts.Store.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: jobs[0].Attempt, State: outcomes[rng.IntN(len(outcomes))]}})
				return err
			}, uint64(10+w))
		}
		run(func(rng *rand.Rand) error {
			jobs, _, err := ts.Store.ListJobs(ctx, store.ListParams{Queues: []string{q}, States: []store.State{store.StateCancelled, store.StateDiscarded}, Limit: 20})
			if err != nil || len(jobs) == 0 {
				return err
			}
			_, err = ts.Store.RetryJob(ctx, jobs[rng.IntN(len(jobs))].ID)
			if err != nil && !errors.Is(err, pronto.ErrUniqueConflict) {
				var te *store.TransitionError
				if !errors.As(err, &te) {
					return err
				}
			}
			return nil
		}, 20)
		var checker sync.WaitGroup
		if ts.kind != kindRedis {
			checker.Add(1)
			go func() {
				defer checker.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ids, err := heldByMany(ctx, ts.Store, q)
					if err != nil {
						errs <- err
						return
					}
					if ids != nil {
						errs <- fmt.Errorf("jobs holding one unique key at once: %v", ids)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		checker.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		ids, err := heldByMany(ctx, ts.Store, q)
		require.NoError(t, err)
		require.Nil(t, ids)
	})
}
