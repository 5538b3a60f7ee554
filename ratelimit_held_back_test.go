package pronto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/server"
)

// ojsDo sends one request to h and returns the status and body.
func ojsDo(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// TestRateLimitHeldBackEvents: a job a fetch's claim drops for its rate limit (on_limit "drop") is
// heard of: EventDiscarded with an error matching ErrRateLimitDropped for the client's subscribers,
// and rate_limit.dropped and job.discarded in the OJS event window (ojs-rate-limiting.md 11.1); a
// job it reschedules (on_limit "reschedule") gives EventSnoozed with ErrRateLimitRescheduled, and
// job.scheduled. The claim used to do both silently.
func TestRateLimitHeldBackEvents(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		srv, err := server.New(server.Config{Client: c})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Stop(ctx)
			_ = srv.Close()
		})
		events, unsubscribe := c.Subscribe(pronto.EventDiscarded, pronto.EventSnoozed)
		defer unsubscribe()

		enqueue := func(queue, key, onLimit string, i int) string {
			code, out := ojsDo(t, srv, "POST", "/ojs/v1/jobs", fmt.Sprintf(`{"type":"rate.held","args":[%d],
				"options":{"queue":%q,"rate_limit":{"key":%q,"concurrency":1,"on_limit":%q}}}`, i, queue, key, onLimit))
			require.Equal(t, http.StatusCreated, code, out)
			var v struct {
				Job struct {
					ID string `json:"id"`
				} `json:"job"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &v))
			return v.Job.ID
		}
		fetch := func(queue string) string {
			code, out := ojsDo(t, srv, "POST", "/ojs/v1/workers/fetch", fmt.Sprintf(`{"queues":[%q],"count":2,"worker_id":"w1"}`, queue))
			require.Equal(t, http.StatusOK, code, out)
			return out
		}

		kept, dropped := enqueue("held-drop", "held-drop", "drop", 0), enqueue("held-drop", "held-drop", "drop", 1)
		out := fetch("held-drop")
		require.Contains(t, out, kept)
		require.NotContains(t, out, dropped)
		code, out := ojsDo(t, srv, "GET", "/ojs/v1/jobs/"+dropped, "")
		require.Equal(t, http.StatusOK, code, out)
		require.Contains(t, out, `"state":"discarded"`, "the second job is dropped")

		ran, moved := enqueue("held-resched", "held-resched", "reschedule", 0), enqueue("held-resched", "held-resched", "reschedule", 1)
		out = fetch("held-resched")
		require.Contains(t, out, ran)
		require.NotContains(t, out, moved)

		// The client's events.
		var sawDrop, sawResched bool
		timeout := time.After(10 * time.Second)
		for !sawDrop || !sawResched {
			select {
			case ev := <-events:
				switch {
				case ev.Kind == pronto.EventDiscarded && ev.Job.ID == dropped:
					require.ErrorIs(t, ev.Err, pronto.ErrRateLimitDropped)
					require.Equal(t, pronto.StateDiscarded, ev.Job.State)
					require.Zero(t, ev.Duration, "no attempt ran")
					sawDrop = true
				case ev.Kind == pronto.EventSnoozed && ev.Job.ID == moved:
					require.ErrorIs(t, ev.Err, pronto.ErrRateLimitRescheduled)
					require.Equal(t, pronto.StateScheduled, ev.Job.State)
					sawResched = true
				}
			case <-timeout:
				t.Fatalf("no event for the held-back jobs (dropped: %v, rescheduled: %v)", sawDrop, sawResched)
			}
		}

		// The OJS event window; its events are recorded asynchronously.
		type ojsEvent struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		find := func(typ, id string) *ojsEvent {
			var v struct {
				Events []ojsEvent `json:"events"`
			}
			var found *ojsEvent
			require.Eventually(t, func() bool {
				code, out := ojsDo(t, srv, "GET", "/ojs/v1/events?limit=1000", "")
				if code != http.StatusOK || json.Unmarshal([]byte(out), &v) != nil {
					return false
				}
				for i := range v.Events {
					if v.Events[i].Type == typ && strings.Contains(string(v.Events[i].Data), id) {
						found = &v.Events[i]
						return true
					}
				}
				return false
			}, 10*time.Second, 20*time.Millisecond, "no %s event for job %s", typ, id)
			return found
		}
		var data struct {
			Key     string `json:"key"`
			JobID   string `json:"job_id"`
			JobType string `json:"job_type"`
		}
		require.NoError(t, json.Unmarshal(find("rate_limit.dropped", dropped).Data, &data))
		require.Equal(t, "held-drop", data.Key)
		require.Equal(t, dropped, data.JobID)
		require.Equal(t, "rate.held", data.JobType)
		require.Contains(t, string(find("job.discarded", dropped).Data), `"rate_limited"`)
		find("job.scheduled", moved)
	})
}
