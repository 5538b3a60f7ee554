package pronto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/server"
)

// remoteFenceCall sends one request to the OJS server h and decodes its JSON answer (nil for none).
func remoteFenceCall(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any, string) {
	t.Helper()
	var req *http.Request
	if body != "" {
		req = httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/openjobspec+json")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	raw := rec.Body.Bytes()
	if len(bytes.TrimSpace(raw)) > 0 {
		_ = json.Unmarshal(raw, &m)
	}
	return rec.Code, m, string(raw)
}

// remoteFenceServer is an OJS server over ts whose client's leader rescues expired leases quickly.
func remoteFenceServer(t *testing.T, ts *testStore) (*server.Server, *pronto.Client) {
	t.Helper()
	c, err := pronto.NewClient(ts, &pronto.Config{RescueInterval: 50 * time.Millisecond, LeaderTTL: time.Second})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	s, err := server.New(server.Config{Client: c})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
		_ = s.Close()
	})
	return s, c
}

// remoteFenceFetch fetches from queue as worker (visibility 300 ms) until it gets a job, and returns it.
func remoteFenceFetch(t *testing.T, s http.Handler, queue, worker string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		code, body, raw := remoteFenceCall(t, s, "POST", "/ojs/v1/workers/fetch",
			`{"queues":["`+queue+`"],"worker_id":"`+worker+`","visibility_timeout_ms":300}`)
		require.Equal(t, 200, code, raw)
		if jobs, _ := body["jobs"].([]any); len(jobs) == 1 {
			return jobs[0].(map[string]any)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s fetched nothing from %s", worker, queue)
	return nil
}

// TestStaleProgressRefused: OJS worker w1 fetches a job, its lease runs out, the rescuer takes the job
// back and w2 fetches it (attempt 2, a new claim token). w1, still at work, then reports progress and a
// checkpoint, naming its claim (or naming none). The report is refused with 409 stale_claim, as a stale
// ack is: it neither becomes attempt 2's progress, nor the checkpoint the next attempt resumes from,
// nor extends w2's lease. It used to do all three: the endpoint ignored the claim, wrote under the
// job's current claim and heartbeat it, pushing w2's 300 ms lease out to DefaultRemoteLease (30
// minutes), so a dead w2 would have held the job that long. w2's own report is recorded.
func TestStaleProgressRefused(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		s, c := remoteFenceServer(t, ts)
		ctx := context.Background()
		code, body, raw := remoteFenceCall(t, s, "POST", "/ojs/v1/jobs", `{"type":"fence.args","args":[],"options":{"queue":"fenceprog"}}`)
		require.Equal(t, 201, code, raw)
		id := body["job"].(map[string]any)["id"].(string)

		w1 := remoteFenceFetch(t, s, "fenceprog", "w1")
		require.Equal(t, id, w1["id"])
		w2 := remoteFenceFetch(t, s, "fenceprog", "w2") // once the rescuer took the job back from w1
		require.Equal(t, id, w2["id"])
		require.Equal(t, 2.0, w2["attempt"])
		require.NotEqual(t, w1["claim_token"], w2["claim_token"])

		before, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pronto.StateActive, before.State)
		require.Equal(t, "w2", before.WorkerID)

		for name, ref := range map[string]string{
			"token":     `,"worker_id":"w1","claim_token":"` + w1["claim_token"].(string) + `","attempt":1`,
			"worker":    `,"worker_id":"w1"`,
			"attempt":   `,"attempt":1`,
			"anonymous": ``,
		} {
			code, body, raw = remoteFenceCall(t, s, "PUT", "/ojs/v1/jobs/"+id+"/progress",
				`{"progress":0.9,"data":{"by":"w1"},"checkpoint":{"by":"w1"}`+ref+`}`)
			require.Equal(t, http.StatusConflict, code, "%s: w1's stale report: %s", name, raw)
			require.Equal(t, "stale_claim", body["error"].(map[string]any)["details"].(map[string]any)["reason"], raw)
		}
		after, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, before.LeaseExpiresAt, after.LeaseExpiresAt, "a refused report extended w2's lease")

		// w2's own report, naming its claim, is recorded (the throttle writes it shortly).
		code, _, raw = remoteFenceCall(t, s, "PUT", "/ojs/v1/jobs/"+id+"/progress",
			`{"progress":0.5,"data":{"by":"w2"},"checkpoint":{"by":"w2"},"worker_id":"w2","claim_token":"`+w2["claim_token"].(string)+`"}`)
		require.Equal(t, http.StatusNoContent, code, raw)
		require.Eventually(t, func() bool {
			j, err := c.JobGet(ctx, id)
			return err == nil && j.Progress != nil && bytes.Contains(j.Progress.Data, []byte("w2"))
		}, 30*time.Second, 20*time.Millisecond)
		j, err := c.JobGet(ctx, id)
		require.NoError(t, err)
		require.Contains(t, string(j.LastCheckpoint), "w2")
		require.NotContains(t, string(j.Progress.Data), "w1")
	})
}

type fenceArgs struct{}

func (fenceArgs) Kind() string { return "fence.args" }

// TestAnonymousAckOfCancelledClaimRefused: an OJS worker w1 fetches a job; an operator cancels it
// while w1 runs (w1's claim is gone: it would learn so at its next heartbeat), then retries it
// (attempts reset), and w2 fetches it: a new claim, attempt 1 again. w1, finishing its work, acks
// naming the job and its attempt (no worker id, no claim token), as OJS clients that send only the
// job id do. The ack is refused, as it is when an earlier claim lost its lease: a claim cancelled
// while it ran leaves a "cancelled" entry in the job's errors. It used to leave nothing, so w1's stale
// ack completed the job with w1's result under w2's claim, and w2's own ack was then refused.
func TestAnonymousAckOfCancelledClaimRefused(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts, &pronto.Config{})
		require.NoError(t, err)
		row, err := c.Insert(ctx, fenceArgs{}, &pronto.InsertOpts{Queue: "fencecancel"})
		require.NoError(t, err)

		got, err := c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"fencecancel"}, WorkerID: "w1", Lease: time.Hour})
		require.NoError(t, err)
		require.Len(t, got, 1)
		w1 := got[0]

		_, err = c.JobCancel(ctx, row.ID)
		require.NoError(t, err)
		_, err = c.JobRetry(ctx, row.ID)
		require.NoError(t, err)
		got, err = c.RemoteFetch(ctx, pronto.RemoteFetchParams{Queues: []string{"fencecancel"}, WorkerID: "w2", Lease: time.Hour})
		require.NoError(t, err)
		require.Len(t, got, 1)
		w2 := got[0]
		require.NotEqual(t, w1.ClaimToken, w2.ClaimToken)

		// w1's late ack, naming the job and its attempt (which the retry reset: w2 runs attempt 1 too).
		_, staleErr := c.RemoteAck(ctx, pronto.RemoteAckParams{ID: row.ID, Attempt: w1.Attempt, Result: json.RawMessage(`"w1"`)})
		j, err := c.JobGet(ctx, row.ID)
		require.NoError(t, err)
		require.Error(t, staleErr, "the ack of w1, whose claim was cancelled, decided the job w2 now runs: state %s, result %s, attempt %d, worker of the claim %q",
			j.State, j.Result, j.Attempt, w2.WorkerID)
		require.Equal(t, pronto.StateActive, j.State)
	})
}
