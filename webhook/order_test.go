package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/webhook"
)

// post is one request an orderedReceiver answered.
type post struct {
	event   string
	status  int
	attempt string
}

// orderedReceiver answers each event id the statuses it is given for it, in turn (then 200), and
// records the requests in the order they came. An event in holdFor is answered its 200 only once
// the event named there has come (or after 20 s).
type orderedReceiver struct {
	mu       sync.Mutex
	statuses map[string][]int
	holdFor  map[string]string
	posts    []post
	came     sync.Map // event id -> chan struct{}, closed when it comes
}

func (rc *orderedReceiver) arrival(id string) chan struct{} {
	ch, _ := rc.came.LoadOrStore(id, make(chan struct{}))
	return ch.(chan struct{})
}

func (rc *orderedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-OJS-Event-ID")
	rc.mu.Lock()
	status := http.StatusOK
	if s := rc.statuses[id]; len(s) > 0 {
		status, rc.statuses[id] = s[0], s[1:]
	}
	wait := rc.holdFor[id]
	rc.mu.Unlock()
	if wait != "" && status == http.StatusOK {
		select {
		case <-rc.arrival(wait):
		case <-time.After(20 * time.Second):
		}
	}
	rc.mu.Lock()
	rc.posts = append(rc.posts, post{event: id, status: status, attempt: r.Header.Get("X-OJS-Delivery-Attempt")})
	select {
	case <-rc.arrival(id):
	default:
		close(rc.arrival(id)) // under mu: closed once
	}
	rc.mu.Unlock()
	w.WriteHeader(status)
}

// of returns the requests for the events in ids, in the order they came.
func (rc *orderedReceiver) of(ids ...string) []post {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []post
	for _, p := range rc.posts {
		for _, id := range ids {
			if p.event == id {
				out = append(out, p)
			}
		}
	}
	return out
}

// TestDeliveryInSubjectOrder: on every store, the events of one subject reach a webhook in the order
// they were published, each once the one before it is delivered or given up: the second and third
// events wait while the first is retried after a 500, and the fifth waits for the fourth, which a
// 400 gives up. Another subject's event is not held up by the first subject's delivery, and the
// delivery attempt a waiting event reports does not count its waits.
func TestDeliveryInSubjectOrder(t *testing.T) {
	for _, kind := range teststore.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ss, _, d := harness(t, kind)
			rc := &orderedReceiver{statuses: map[string][]int{
				"evt_1": {http.StatusInternalServerError, http.StatusServiceUnavailable},
				"evt_4": {http.StatusBadRequest},
			}, holdFor: map[string]string{"evt_1": "evt_other"}}
			srv := httptest.NewServer(rc)
			t.Cleanup(srv.Close)
			_, err := webhook.Put(ctx, ss, webhook.Webhook{URL: srv.URL})
			require.NoError(t, err)
			d.Refresh(ctx)
			publish := func(id, subject string) {
				d.Publish(webhook.Event{ID: id, Type: "job.completed", Queue: "q", JobType: "k", Subject: subject,
					Body: json.RawMessage(`{"id":"` + id + `"}`)})
			}
			publish("evt_1", "job-a")
			publish("evt_2", "job-a")
			publish("evt_3", "job-a")
			publish("evt_other", "job-b")
			publish("evt_4", "job-c")
			publish("evt_5", "job-c")
			require.Eventually(t, func() bool {
				return len(rc.of("evt_1", "evt_2", "evt_3")) == 5 && len(rc.of("evt_4", "evt_5")) == 2 && len(rc.of("evt_other")) == 1
			}, 20*time.Second, 5*time.Millisecond)

			require.Equal(t, []post{
				{"evt_1", 500, "1"}, {"evt_1", 503, "2"}, {"evt_1", 200, "3"}, {"evt_2", 200, "1"}, {"evt_3", 200, "1"},
			}, rc.of("evt_1", "evt_2", "evt_3"))
			require.Equal(t, []post{{"evt_4", 400, "1"}, {"evt_5", 200, "1"}}, rc.of("evt_4", "evt_5"))
			// evt_1's 200 waited for evt_other, which must not have waited for evt_1.
			all := rc.of("evt_1", "evt_other")
			require.Equal(t, "evt_1", all[len(all)-1].event, "evt_other came before evt_1's last try: %v", all)
			require.Zero(t, d.Dropped())
		})
	}
}

// TestDispatcherStoresAnInsertOnceWhenItsAnswerIsLost: an insert that stored the delivery jobs but
// whose answer was lost is tried again without storing them twice (the jobs' ids were chosen
// before the first attempt), and no event counts as dropped.
func TestDispatcherStoresAnInsertOnceWhenItsAnswerIsLost(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: memory.New()}
	c, d := dispatcherOn(t, st)
	t.Cleanup(func() { d.Close(context.Background()) })
	st.loseAnswers.Store(1)
	d.Publish(event("evt_1"))
	require.Eventually(t, func() bool { return st.lost.Load() == 1 && len(deliveredEvents(t, c)) >= 1 }, 20*time.Second, time.Millisecond)
	require.Equal(t, []string{"evt_1"}, deliveredEvents(t, c))
	st.loseAnswers.Store(1)
	d.Publish(event("evt_2"))
	d.Publish(event("evt_3"))
	require.Eventually(t, func() bool { return st.lost.Load() == 2 && len(deliveredEvents(t, c)) >= 3 }, 20*time.Second, time.Millisecond)
	d.Close(context.Background())
	require.Equal(t, []string{"evt_1", "evt_2", "evt_3"}, deliveredEvents(t, c))
	require.Zero(t, d.Dropped())
}

// TestDeliveryAfterAGoneJob: a delivery whose predecessor's job is gone (deleted, or pruned by
// retention) is not held up by it.
func TestDeliveryAfterAGoneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ss, c, d := harness(t, "memory")
	rc := &orderedReceiver{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	_, err := webhook.Put(ctx, ss, webhook.Webhook{URL: srv.URL})
	require.NoError(t, err)
	d.Refresh(ctx)
	require.NoError(t, c.QueuePause(ctx, webhook.Queue))
	d.Publish(webhook.Event{ID: "evt_1", Type: "job.started", Subject: "job-a", Body: json.RawMessage(`{}`)})
	first := waitJob(t, c, pronto.StateAvailable)
	_, err = c.JobDelete(ctx, first.ID)
	require.NoError(t, err)
	d.Publish(webhook.Event{ID: "evt_2", Type: "job.completed", Subject: "job-a", Body: json.RawMessage(`{}`)})
	second := waitJob(t, c, pronto.StateAvailable)
	require.NotEqual(t, first.ID, second.ID)
	require.Contains(t, string(second.Args), first.ID, "the second delivery names the first as the one before it")
	require.NoError(t, c.QueueResume(ctx, webhook.Queue))
	waitJob(t, c, pronto.StateCompleted)
	require.Equal(t, []post{{"evt_2", 200, "1"}}, rc.of("evt_1", "evt_2"))
}
