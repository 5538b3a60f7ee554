package webhook_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/webhook"
)

// TestRegistrations: on every store, Put makes a registration with an id, replaces it keeping its
// creation time and secret, refuses invalid ones naming the field, and Delete removes it.
func TestRegistrations(t *testing.T) {
	for _, kind := range teststore.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ss := teststore.Open(t, kind).(store.SettingStore)
			hooks, err := webhook.List(ctx, ss)
			require.NoError(t, err)
			require.Empty(t, hooks)

			w, err := webhook.Put(ctx, ss, webhook.Webhook{URL: "https://example.com/hook", Secret: "s3cret", Types: []string{"job.*"}})
			require.NoError(t, err)
			require.NotEmpty(t, w.ID)
			require.False(t, w.CreatedAt.IsZero())
			got, err := webhook.Get(ctx, ss, w.ID)
			require.NoError(t, err)
			require.Equal(t, "s3cret", got.Secret)
			require.Empty(t, got.Redacted().Secret)
			require.True(t, got.HasSecret())

			w2, err := webhook.Put(ctx, ss, webhook.Webhook{ID: w.ID, URL: "https://example.com/v2", Queues: []string{"email"}})
			require.NoError(t, err)
			require.Equal(t, "s3cret", w2.Secret, "a replacement without a secret keeps the old one")
			require.True(t, w2.CreatedAt.Equal(w.CreatedAt))
			other, err := webhook.Put(ctx, ss, webhook.Webhook{URL: "http://127.0.0.1:9/other"})
			require.NoError(t, err)
			hooks, err = webhook.List(ctx, ss)
			require.NoError(t, err)
			require.Len(t, hooks, 2)
			require.Equal(t, []string{w.ID, other.ID}, []string{hooks[0].ID, hooks[1].ID}, "oldest first")
			require.Equal(t, "https://example.com/v2", hooks[0].URL)

			for field, bad := range map[string]webhook.Webhook{
				"url":          {URL: "ftp://example.com/x"},
				"types[1]":     {URL: "https://example.com", Types: []string{"job.*", " "}},
				"timeout":      {URL: "https://example.com", Timeout: time.Hour},
				"max_attempts": {URL: "https://example.com", MaxAttempts: 99},
				"id":           {ID: "nope", URL: "https://example.com"},
			} {
				_, err := webhook.Put(ctx, ss, bad)
				var fe *webhook.FieldError
				require.ErrorAs(t, err, &fe, field)
				require.Equal(t, field, fe.Field)
				require.ErrorIs(t, err, webhook.ErrInvalid)
			}

			require.NoError(t, webhook.Delete(ctx, ss, w.ID))
			require.ErrorIs(t, webhook.Delete(ctx, ss, w.ID), pronto.ErrNotFound)
			_, err = webhook.Get(ctx, ss, w.ID)
			require.ErrorIs(t, err, pronto.ErrNotFound)
			hooks, err = webhook.List(ctx, ss)
			require.NoError(t, err)
			require.Len(t, hooks, 1)
		})
	}
}

// receiver is an endpoint that records what it is sent and answers the statuses it is given, in
// turn (then 200).
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []*http.Request
	bodies   [][]byte
	arrived  chan struct{}
}

func newReceiver(statuses ...int) *receiver {
	return &receiver{statuses: statuses, arrived: make(chan struct{}, 100)}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, r)
	rc.bodies = append(rc.bodies, body)
	status := http.StatusOK
	if len(rc.statuses) > 0 {
		status, rc.statuses = rc.statuses[0], rc.statuses[1:]
	}
	rc.mu.Unlock()
	w.WriteHeader(status)
	_, _ = w.Write([]byte("answer body"))
	rc.arrived <- struct{}{}
}

// wait waits for n more requests.
func (rc *receiver) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-rc.arrived:
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery within 20 s")
		}
	}
}

// harness is a client working Queue with the delivery worker, and a Dispatcher, on a fresh store of
// kind.
func harness(t *testing.T, kind string) (store.SettingStore, *pronto.Client, *webhook.Dispatcher) {
	t.Helper()
	st := teststore.Open(t, kind)
	ss := st.(store.SettingStore)
	workers := pronto.NewWorkers()
	require.NoError(t, webhook.AddWorker(workers, ss, nil))
	c, err := pronto.NewClient(st, &pronto.Config{Workers: workers,
		Queues: map[string]pronto.QueueConfig{webhook.Queue: {MaxWorkers: 4}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	d := webhook.NewDispatcher(c, ss, &webhook.DispatcherOptions{RetryInterval: 10 * time.Millisecond, MaxRetryInterval: 20 * time.Millisecond})
	t.Cleanup(func() { d.Close(context.Background()) })
	return ss, c, d
}

// waitJob waits until the only delivery job of the queue is in state st, and returns it.
func waitJob(t *testing.T, c *pronto.Client, st pronto.State) *pronto.JobRow {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := c.JobList(context.Background(), &pronto.JobListParams{Queues: []string{webhook.Queue}, States: []pronto.State{st}})
		require.NoError(t, err)
		if len(res.Jobs) == 1 {
			return res.Jobs[0]
		}
		require.True(t, time.Now().Before(deadline), "no delivery job %s within 20 s", st)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDelivery: on every store, a published event that a webhook takes is posted to it with its
// envelope as the body, signed with the webhook's secret, with the event's headers; a 500 is
// retried, and the delivery job completes on the 200 that follows. Events the filters refuse, and
// events of the delivery queue itself, are not delivered.
func TestDelivery(t *testing.T) {
	for _, kind := range teststore.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ss, c, d := harness(t, kind)
			rc := newReceiver(http.StatusInternalServerError)
			srv := httptest.NewServer(rc)
			t.Cleanup(srv.Close)
			w, err := webhook.Put(ctx, ss, webhook.Webhook{URL: srv.URL + "/hook", Secret: "s3cret",
				Types: []string{"job.completed", "workflow.*"}, Queues: []string{"email"}})
			require.NoError(t, err)
			d.Refresh(ctx)
			require.True(t, d.Wants("job.completed", "email", "mail.send"), "once Refresh returns")
			require.False(t, d.Wants("job.failed", "email", "mail.send"), "a type no filter takes")
			require.False(t, d.Wants("job.completed", "billing", "mail.send"), "a queue no filter takes")
			require.False(t, d.Wants("job.completed", webhook.Queue, webhook.Kind), "the delivery queue's own events")

			body := json.RawMessage(`{"specversion":"1.0","id":"evt_1","type":"job.completed","data":{"job_id":"j1"}}`)
			d.Publish(webhook.Event{ID: "evt_0", Type: "job.failed", Queue: "email", JobType: "mail.send", Body: json.RawMessage(`{}`)})
			d.Publish(webhook.Event{ID: "evt_1", Type: "job.completed", Queue: "email", JobType: "mail.send", Body: body})
			rc.wait(t, 2) // the 500, then the retry's 200
			done := waitJob(t, c, pronto.StateCompleted)
			require.Equal(t, 2, done.Attempt)

			rc.mu.Lock()
			defer rc.mu.Unlock()
			require.Len(t, rc.got, 2, "one event taken, delivered twice (a 500, then a 200)")
			for i, r := range rc.got {
				require.Equal(t, "/hook", r.URL.Path)
				require.JSONEq(t, string(body), string(rc.bodies[i]))
				require.Equal(t, "application/json", r.Header.Get("Content-Type"))
				require.Equal(t, "evt_1", r.Header.Get("X-OJS-Event-ID"))
				require.Equal(t, "job.completed", r.Header.Get("X-OJS-Event-Type"))
				require.Equal(t, w.ID, r.Header.Get("X-OJS-Webhook-ID"))
				require.True(t, hmac.Equal([]byte(webhook.Signature("s3cret", rc.bodies[i])), []byte(r.Header.Get("X-OJS-Signature"))))
			}
			require.Equal(t, "2", rc.got[1].Header.Get("X-OJS-Delivery-Attempt"))
		})
	}
}

// TestDeliveryRefusedOrGone: a 4xx discards the delivery at once (it lands in the dead letter queue
// with the answer in its error); a delivery of a webhook deleted before its turn is cancelled
// without a request.
func TestDeliveryRefusedOrGone(t *testing.T) {
	ctx := context.Background()
	ss, c, d := harness(t, "memory")
	rc := newReceiver(http.StatusBadRequest)
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	w, err := webhook.Put(ctx, ss, webhook.Webhook{URL: srv.URL})
	require.NoError(t, err)
	d.Refresh(ctx)
	require.True(t, d.Wants("job.failed", "q", "k"))
	d.Publish(webhook.Event{ID: "evt_2", Type: "job.failed", Queue: "q", JobType: "k", Body: json.RawMessage(`{"id":"evt_2"}`)})
	rc.wait(t, 1)
	j := waitJob(t, c, pronto.StateDiscarded)
	require.Equal(t, 1, j.Attempt, "a 4xx is not retried")
	require.Contains(t, j.Errors[len(j.Errors)-1].Message, "400 Bad Request")
	require.Contains(t, j.Errors[len(j.Errors)-1].Message, `"answer body"`)

	// A webhook deleted while its delivery waits: the delivery is cancelled, nothing is sent.
	_, err = c.JobDelete(ctx, j.ID)
	require.NoError(t, err)
	require.NoError(t, c.QueuePause(ctx, webhook.Queue))
	d.Publish(webhook.Event{ID: "evt_3", Type: "job.failed", Queue: "q", JobType: "k", Body: json.RawMessage(`{"id":"evt_3"}`)})
	waitJob(t, c, pronto.StateAvailable)
	require.NoError(t, webhook.Delete(ctx, ss, w.ID))
	require.NoError(t, c.QueueResume(ctx, webhook.Queue))
	j = waitJob(t, c, pronto.StateCancelled)
	require.Contains(t, j.Errors[len(j.Errors)-1].Message, "was deleted")
	rc.mu.Lock()
	require.Len(t, rc.got, 1, "no request for the deleted webhook")
	rc.mu.Unlock()
	require.Zero(t, d.Dropped())
}
