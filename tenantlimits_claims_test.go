package pronto_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestTenantMaxActiveConcurrentClaims: a tenant's MaxActive holds across queues while several
// claimers take and finish its jobs at once (one store, claims on separate connections where the
// store has them); on every store, Redis too.
func TestTenantMaxActiveConcurrentClaims(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		const maxActive, total, claimers = 2, 60, 6
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.TenantSetLimit(ctx, "acme", pronto.RateLimit{MaxActive: maxActive}))
		queues := []string{"ta", "tb", "tc"}
		var ps []pronto.InsertManyParams
		for i := range total {
			ps = append(ps, pronto.InsertManyParams{Args: bpArgs{N: i}, Opts: &pronto.InsertOpts{Queue: queues[i%len(queues)], Tenant: "acme"}})
		}
		_, err = c.InsertMany(ctx, ps)
		require.NoError(t, err)

		var running, peak, done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, claimers)
		for w := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q := queues[w%len(queues)]
				deadline := time.Now().Add(time.Minute)
				for done.Load() < total {
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("claimer %d: jobs not drained", w)
						return
					}
					jobs, err := ts.Store.Claim(ctx, store.ClaimParams{Queue: q, Limit: 3, WorkerID: fmt.Sprintf("w%d", w), LeaseDuration: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if len(jobs) == 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					n := running.Add(int64(len(jobs)))
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(time.Millisecond)
					running.Add(-int64(len(jobs)))
					cs := make([]store.Completion, len(jobs))
					for i, j := range jobs {
						cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateCompleted}
					}
					if _, err := ts.Store.Finish(ctx, cs); err != nil {
						errs <- err
						return
					}
					done.Add(int64(len(jobs)))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(total), done.Load())
		require.LessOrEqual(t, peak.Load(), int64(maxActive), "jobs of acme active at once")
		require.Positive(t, peak.Load())
	})
}
