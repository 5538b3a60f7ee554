package pronto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// TestConcurrentRemoteFetches fetches from many goroutines at once through one client, whose
// fetches of a queue share store claims: no job goes to two workers, every job is held by the
// worker it was handed to (its heartbeat extends it, another worker's does not, its ack decides
// it), of two concurrent acks of a job exactly one is applied, and no job is lost.
func TestConcurrentRemoteFetches(t *testing.T) {
	coalesceStores(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c, err := pronto.NewClient(s, nil)
		require.NoError(t, err)
		const jobs, fetchers = 60, 80
		ojs := make([]pronto.OJSJob, jobs)
		for i := range ojs {
			ojs[i] = pronto.OJSJob{Kind: "remote.shared", Args: json.RawMessage(fmt.Sprintf("[%d]", i)),
				Opts: pronto.InsertOpts{Queue: "shared"}}
		}
		_, err = c.InsertOJS(ctx, ojs)
		require.NoError(t, err)

		got := make([][]*pronto.JobRow, fetchers)
		errs := make([]error, fetchers)
		var wg sync.WaitGroup
		for i := range fetchers {
			wg.Go(func() {
				got[i], errs[i] = c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"shared"},
					Limit: 1 + i%2, WorkerID: fmt.Sprintf("w%d", i), Lease: time.Minute})
			})
		}
		wg.Wait()

		owner := map[string]int{}
		for i := range fetchers {
			require.NoError(t, errs[i])
			require.LessOrEqual(t, len(got[i]), 1+i%2, "a fetch gets at most its limit")
			for _, j := range got[i] {
				prev, dup := owner[j.ID]
				require.False(t, dup, "job %s handed to w%d and w%d", j.ID, prev, i)
				owner[j.ID] = i
				require.Equal(t, fmt.Sprintf("w%d", i), j.WorkerID)
			}
		}
		for id, i := range owner {
			worker, other := fmt.Sprintf("w%d", i), fmt.Sprintf("w%d", (i+1)%fetchers)
			lost, err := c.RemoteHeartbeat(ctx, other, []string{id}, time.Minute)
			require.NoError(t, err)
			require.Equal(t, []string{id}, lost, "another worker cannot extend %s", id)
			lost, err = c.RemoteHeartbeat(ctx, worker, []string{id}, time.Minute)
			require.NoError(t, err)
			require.Empty(t, lost, "the worker it was handed to holds %s", id)
		}
		// Every job acked twice at once (a worker retrying its request): concurrent outcomes share
		// writes, and exactly one of each pair is applied.
		var mu sync.Mutex
		applied := map[string]int{}
		for id, i := range owner {
			for range 2 {
				wg.Go(func() {
					_, err := c.RemoteAck(ctx, pronto.RemoteAckParams{ID: id, WorkerID: fmt.Sprintf("w%d", i)})
					if err != nil {
						require.ErrorIs(t, err, pronto.ErrInvalidTransition)
						return
					}
					mu.Lock()
					applied[id]++
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		for id := range owner {
			require.Equal(t, 1, applied[id], "one of the two acks of %s is applied", id)
		}
		// What no fetch got is still there to fetch (a claim skips rows another claim holds locked).
		rest, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"shared"}, Limit: jobs, WorkerID: "last"})
		require.NoError(t, err)
		require.Equal(t, jobs, len(owner)+len(rest), "every job was handed out exactly once")
	})
}

// TestRemoteFetchesAcrossServers: two clients over the same data (two servers), each sharing claims
// among its own concurrent fetches, never hand one job to two workers, and every job is handed out.
func TestRemoteFetchesAcrossServers(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		servers := []*pronto.Client{}
		for _, s := range []store.Store{ts.Store, ts.reopen(t)} {
			c, err := pronto.NewClient(s, nil)
			require.NoError(t, err)
			servers = append(servers, c)
		}
		const jobs, fetchers = 90, 60
		ojs := make([]pronto.OJSJob, jobs)
		for i := range ojs {
			ojs[i] = pronto.OJSJob{Kind: "remote.across", Args: json.RawMessage(`[]`), Opts: pronto.InsertOpts{Queue: "across"}}
		}
		_, err := servers[0].InsertOJS(ctx, ojs)
		require.NoError(t, err)

		var mu sync.Mutex
		owner := map[string]string{}
		var wg sync.WaitGroup
		for i := range fetchers {
			wg.Go(func() {
				worker := fmt.Sprintf("s%d-w%d", i%2, i)
				for {
					got, err := servers[i%2].RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"across"},
						Limit: 2, WorkerID: worker, Lease: time.Minute})
					require.NoError(t, err)
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, j := range got {
						prev, dup := owner[j.ID]
						require.False(t, dup, "job %s handed to %s and %s", j.ID, prev, worker)
						owner[j.ID] = worker
					}
					mu.Unlock()
					for _, j := range got {
						_, err := servers[i%2].RemoteAck(ctx, pronto.RemoteAckParams{ID: j.ID, WorkerID: worker, ClaimToken: j.ClaimToken})
						require.NoError(t, err)
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, owner, jobs, "every job handed out once")
	})
}
