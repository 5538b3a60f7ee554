package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/webhook"
)

// failingStore is a memory store whose inserts fail while down is set, as an unreachable backend's
// do, and are refused, as too large a row is, when a job's args hold refuse. While loseAnswers is
// above zero, an insert stores its jobs and then fails, as one whose answer a broken connection
// lost.
type failingStore struct {
	*memory.Store
	down        atomic.Bool
	failures    atomic.Int64
	refuse      string
	loseAnswers atomic.Int64
	lost        atomic.Int64 // answers lost so far
}

func (s *failingStore) Insert(ctx context.Context, params []*store.InsertParams) ([]*store.Job, error) {
	if s.down.Load() {
		s.failures.Add(1)
		return nil, fmt.Errorf("insert: %w", store.ErrClosed)
	}
	for _, p := range params {
		if s.refuse != "" && bytes.Contains(p.Args, []byte(s.refuse)) {
			return nil, fmt.Errorf("%w: a job's row is too large", store.ErrInvalidParams)
		}
	}
	jobs, err := s.Store.Insert(ctx, params)
	if err == nil && s.loseAnswers.Add(-1) >= 0 {
		s.lost.Add(1)
		return nil, fmt.Errorf("insert: the answer was lost: %w", store.ErrClosed)
	}
	return jobs, err
}

// dispatcherOn is a Dispatcher inserting through a client of st, with one webhook taking every event.
func dispatcherOn(t *testing.T, st *failingStore) (*pronto.Client, *webhook.Dispatcher) {
	t.Helper()
	ctx := context.Background()
	_, err := webhook.Put(ctx, st, webhook.Webhook{URL: "http://127.0.0.1:9/hook"})
	require.NoError(t, err)
	c, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	return c, webhook.NewDispatcher(c, st, nil)
}

// deliveredEvents returns the event ids of the delivery jobs stored, sorted.
func deliveredEvents(t *testing.T, c *pronto.Client) []string {
	t.Helper()
	res, err := c.JobList(context.Background(), &pronto.JobListParams{Queues: []string{webhook.Queue}, Limit: 100})
	require.NoError(t, err)
	var ids []string
	for _, j := range res.Jobs {
		var args []struct {
			EventID string `json:"event_id"`
		}
		require.NoError(t, json.Unmarshal(j.Args, &args), "%s", j.Args)
		require.Len(t, args, 1)
		ids = append(ids, args[0].EventID)
	}
	sort.Strings(ids)
	return ids
}

func event(id string) webhook.Event {
	return webhook.Event{ID: id, Type: "job.completed", Queue: "email", JobType: "mail.send",
		Body: json.RawMessage(`{"id":"` + id + `"}`)}
}

// TestDispatcherRetriesWhileTheStoreFails: the delivery jobs of events published while the store
// cannot take inserts are stored once it can again; none is dropped.
func TestDispatcherRetriesWhileTheStoreFails(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: memory.New()}
	c, d := dispatcherOn(t, st)
	t.Cleanup(func() { d.Close(context.Background()) })
	st.down.Store(true)
	d.Publish(event("evt_1"))
	d.Publish(event("evt_2"))
	require.Eventually(t, func() bool { return st.failures.Load() >= 3 }, 20*time.Second, time.Millisecond,
		"the insert is tried again while the store fails")
	d.Publish(event("evt_3"))
	st.down.Store(false)
	require.Eventually(t, func() bool { return len(deliveredEvents(t, c)) == 3 }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"evt_1", "evt_2", "evt_3"}, deliveredEvents(t, c))
	require.Zero(t, d.Dropped())
}

// TestDispatcherDropsOnlyRefusedEvents: a batch the store refuses is split, so that only the event
// whose delivery job is refused is lost (and counted).
func TestDispatcherDropsOnlyRefusedEvents(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: memory.New(), refuse: "evt_bad"}
	c, d := dispatcherOn(t, st)
	t.Cleanup(func() { d.Close(context.Background()) })
	st.down.Store(true) // the three wait together, so that they go in as one batch
	for _, id := range []string{"evt_1", "evt_bad", "evt_2"} {
		d.Publish(event(id))
	}
	require.Eventually(t, func() bool { return st.failures.Load() >= 1 }, 20*time.Second, time.Millisecond)
	st.down.Store(false)
	require.Eventually(t, func() bool { return len(deliveredEvents(t, c)) == 2 }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"evt_1", "evt_2"}, deliveredEvents(t, c))
	// evt_2 went in after evt_bad was tried alone: by now its refusal is counted.
	require.EqualValues(t, 1, d.Dropped())
}

// TestDispatcherCloseInsertsWhatWaits: Close takes over the batch the Dispatcher was retrying and
// keeps trying, within its context, until the store takes it.
func TestDispatcherCloseInsertsWhatWaits(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: memory.New()}
	c, d := dispatcherOn(t, st)
	st.down.Store(true)
	d.Publish(event("evt_1"))
	require.Eventually(t, func() bool { return st.failures.Load() >= 1 }, 20*time.Second, time.Millisecond)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.Close(ctx)
	}()
	// Close's own attempts fail too until the store is back.
	before := st.failures.Load()
	require.Eventually(t, func() bool { return st.failures.Load() >= before+2 }, 20*time.Second, time.Millisecond)
	st.down.Store(false)
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return once the store was back")
	}
	require.Equal(t, []string{"evt_1"}, deliveredEvents(t, c))
	require.Zero(t, d.Dropped())
}

// TestDispatcherCloseGivesUpWithItsContext: events whose jobs the store has not taken when Close's
// context ends are counted as dropped, and Close returns.
func TestDispatcherCloseGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: memory.New()}
	c, d := dispatcherOn(t, st)
	st.down.Store(true)
	d.Publish(event("evt_1"))
	d.Publish(event("evt_2"))
	require.Eventually(t, func() bool { return st.failures.Load() >= 1 }, 20*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.Close(ctx)
	require.EqualValues(t, 2, d.Dropped())
	require.Empty(t, deliveredEvents(t, c))
}
