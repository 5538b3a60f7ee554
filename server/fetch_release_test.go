package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// slowClaimStore is a real store whose claims of one queue take until their context ends, as a
// claim on a slow or loaded database does: the moment a worker's HTTP client may give up.
type slowClaimStore struct {
	store.Store
	slowQueue string

	once    sync.Once
	entered chan struct{} // closed when a claim of slowQueue started
}

func (s *slowClaimStore) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	if p.Queue == s.slowQueue {
		s.once.Do(func() { close(s.entered) })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.Claim(ctx, p)
}

// TestFetchReleasesEarlierQueuesJobsWhenClientLeaves: a worker fetches from two queues; the first
// queue's job is claimed, and while the second queue's claim is in flight the worker's HTTP client
// goes away. The first queue's job goes back to available at once, not held for the 30-minute
// default lease under a worker that never saw it (docs/http-api.md).
func TestFetchReleasesEarlierQueuesJobsWhenClientLeaves(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			st := &slowClaimStore{Store: openStore(t, kind), slowQueue: "second", entered: make(chan struct{})}
			client, err := pronto.NewClient(st, &pronto.Config{})
			require.NoError(t, err)
			s, _ := newTestServer(t, Config{Client: client})
			hs := httptest.NewServer(s)
			t.Cleanup(hs.Close)

			rows, err := client.InsertRaw(ctx, []pronto.RawJob{{Kind: "fetch.release", Args: []byte(`[1]`), Opts: pronto.InsertOpts{Queue: "first"}}})
			require.NoError(t, err)
			id, budget := rows[0].ID, rows[0].MaxAttempts

			reqCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			body := []byte(`{"queues": ["first", "second"], "count": 2, "worker_id": "w-gone"}`)
			req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, hs.URL+"/ojs/v1/workers/fetch", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/openjobspec+json")
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-st.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the fetch never claimed from the second queue")
			}
			cancel() // the worker's HTTP client gives up while the second queue's claim is in flight
			<-done

			var j *store.Job
			require.Eventually(t, func() bool {
				j, err = st.GetJob(ctx, id)
				require.NoError(t, err)
				return j.State == store.StateAvailable
			}, 15*time.Second, 20*time.Millisecond, "the first queue's job stays held by the gone worker")
			require.Equal(t, budget+1, j.MaxAttempts, "the released job's attempt is refunded")
		})
	}
}

// laterQueueFailsStore is a real store on which a fetch comes up short at first (the first queue's
// due job is held by another transaction), and on the fetch's next try the claim of the second
// queue fails after the first queue's job was claimed.
type laterQueueFailsStore struct {
	store.Store

	mu          sync.Mutex
	firstClaims int
}

func (s *laterQueueFailsStore) Claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	s.mu.Lock()
	if p.Queue == "first" {
		s.firstClaims++
	}
	n := s.firstClaims
	s.mu.Unlock()
	switch {
	case p.Queue == "first" && n == 1:
		return nil, nil // the due job is locked by a promotion: skipped
	case p.Queue == "second" && n > 1:
		return nil, errors.New("connection reset by peer")
	}
	return s.Store.Claim(ctx, p)
}

// NextDue says the first queue has a due job, which makes the fetch try again.
func (s *laterQueueFailsStore) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	if queue == "first" {
		return time.Now().Add(-time.Second), true, nil
	}
	return s.Store.NextDue(ctx, queue)
}

// TestFetchRetryKeepsJobsClaimedBeforeALaterQueueFails: when a fetch comes up short and tries
// again, and that try claims a job of the first queue before the second queue's claim fails, the
// job is handed to the worker, not held unseen for its lease.
func TestFetchRetryKeepsJobsClaimedBeforeALaterQueueFails(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			st := &laterQueueFailsStore{Store: openStore(t, kind)}
			client, err := pronto.NewClient(st, &pronto.Config{})
			require.NoError(t, err)
			s, _ := newTestServer(t, Config{Client: client})

			rows, err := client.InsertRaw(ctx, []pronto.RawJob{{Kind: "fetch.retry", Args: []byte(`[1]`), Opts: pronto.InsertOpts{Queue: "first"}}})
			require.NoError(t, err)
			id := rows[0].ID

			r := call(t, s, http.MethodPost, "/ojs/v1/workers/fetch", `{"queues": ["first", "second"], "count": 2, "worker_id": "w"}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
			jobs, _ := r.body["jobs"].([]any)
			require.Len(t, jobs, 1, "the job claimed before the second queue failed: %s", r.raw)
			require.Equal(t, id, jobs[0].(map[string]any)["id"])
			j, err := st.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.StateActive, j.State)
			require.Equal(t, "w", j.WorkerID)
		})
	}
}
