package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func testNotifyInsertPerQueue(t *testing.T, s store.Store) {
	c := listen(t, s)
	qa, qb := uniq("notify-a"), uniq("notify-b")
	var params []*store.InsertParams
	for i := range 100 {
		q := qa
		if i%2 == 1 {
			q = qb
		}
		params = append(params, job(q))
	}
	insert(t, s, params...)
	eventually(t, "insert notifications of both queues", func() bool {
		return len(c.inserts(qa)) > 0 && len(c.inserts(qb)) > 0
	})
	settle(t, s, c)
	for _, q := range []string{qa, qb} {
		ns := c.inserts(q)
		require.Len(t, ns, 1, "a batch announces each queue it touches once, not once per job")
		require.True(t, ns[0].DueAt.IsZero(), "jobs due now are announced with a zero DueAt")
	}

	// A single insert announces its queue once more.
	insert(t, s, job(qa))
	eventually(t, "the second insert notification", func() bool { return len(c.inserts(qa)) == 2 })
}

func testNotifyDueAt(t *testing.T, s store.Store) {
	c := listen(t, s)
	scheduledQ, mixedQ := uniq("notify-later"), uniq("notify-mixed")
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	mk := func(queue string, due time.Duration) *store.InsertParams {
		p := job(queue)
		p.State, p.ScheduledAt = store.StateScheduled, base.Add(due)
		return p
	}
	now := job(mixedQ)
	insert(t, s, mk(scheduledQ, 20*time.Minute), mk(scheduledQ, 10*time.Minute), mk(mixedQ, time.Minute), now,
		mk(scheduledQ, 30*time.Minute))
	eventually(t, "insert notifications of both queues", func() bool {
		return len(c.inserts(scheduledQ)) > 0 && len(c.inserts(mixedQ)) > 0
	})
	settle(t, s, c)

	ns := c.inserts(scheduledQ)
	require.Len(t, ns, 1)
	require.WithinDuration(t, base.Add(10*time.Minute), ns[0].DueAt, precision,
		"scheduled jobs are announced with the earliest due time")
	ns = c.inserts(mixedQ)
	require.Len(t, ns, 1)
	require.True(t, ns[0].DueAt.IsZero(), "a queue with a job due now is announced as due now")
}

func testNotifyPendingSilent(t *testing.T, s store.Store) {
	c := listen(t, s)
	q := uniq("notify-pending")
	p := job(q)
	p.State = store.StatePending
	insert(t, s, p)
	settle(t, s, c)
	require.Empty(t, c.matching(func(n store.Notification) bool { return n.Queue == q }),
		"inserting pending jobs announces nothing")
}

func testNotifyFinish(t *testing.T, s store.Store) {
	retryQ, doneQ := uniq("notify-retry"), uniq("notify-done")
	r1, r2 := active(t, s, job(retryQ)), active(t, s, job(retryQ))
	d := active(t, s, job(doneQ))
	c := listen(t, s)
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	res, err := s.Finish(ctx(t), []store.Completion{
		{ID: r1.ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: due.Add(time.Minute)},
		{ID: d.ID, Attempt: 1, State: store.StateCompleted},
		{ID: r2.ID, Attempt: 1, State: store.StateRetryable, ScheduledAt: due},
	})
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Applied)
	}
	eventually(t, "the retry queue's notification", func() bool { return len(c.inserts(retryQ)) > 0 })
	settle(t, s, c)
	ns := c.inserts(retryQ)
	require.Len(t, ns, 1, "finishing announces each queue with jobs to run again once")
	require.WithinDuration(t, due, ns[0].DueAt, precision, "with the earliest due time")
	require.Empty(t, c.matching(func(n store.Notification) bool { return n.Queue == doneQ }),
		"completing a job announces nothing")
}

func testNotifyPauseResume(t *testing.T, s store.Store) {
	c := listen(t, s)
	q := uniq("notify-pause")
	is := func(kind store.NotificationKind) func(store.Notification) bool {
		return func(n store.Notification) bool { return n.Kind == kind && n.Queue == q }
	}
	require.NoError(t, s.PauseQueue(ctx(t), q))
	eventually(t, "the pause notification", func() bool { return len(c.matching(is(store.NotifyPause))) == 1 })
	require.Empty(t, c.matching(is(store.NotifyResume)))
	require.NoError(t, s.ResumeQueue(ctx(t), q))
	eventually(t, "the resume notification", func() bool { return len(c.matching(is(store.NotifyResume))) == 1 })
	settle(t, s, c)
	require.Len(t, c.matching(is(store.NotifyPause)), 1)
	require.Len(t, c.matching(is(store.NotifyResume)), 1)
}

func testNotifyUnsubscribe(t *testing.T, s store.Store) {
	kept := listen(t, s)
	gone := &collector{}
	unsubscribe := s.Notifier().Subscribe(gone.add)
	q := uniq("notify-unsub")
	insert(t, s, job(q))
	eventually(t, "both subscribers to hear the first insert", func() bool {
		return len(kept.inserts(q)) == 1 && len(gone.inserts(q)) == 1
	})
	unsubscribe()
	insert(t, s, job(q))
	eventually(t, "the remaining subscriber to hear the second insert", func() bool { return len(kept.inserts(q)) == 2 })
	settle(t, s, kept)
	require.Len(t, gone.inserts(q), 1, "an unsubscribed function hears nothing more")
}

func testNotifySignals(t *testing.T, s store.Store) {
	c := listen(t, s)
	ctx := context.Background()
	queue, client := uniq("signals"), uniq("client")
	sent := []store.Notification{
		{Kind: store.NotifyPresence, Client: client, Queue: queue, Fingerprint: "5f2a"},
		{Kind: store.NotifyOverflow, Client: client, Queue: queue},
		{Kind: store.NotifyGone, Client: client},
	}
	require.NoError(t, s.Notifier().Signal(ctx, sent))
	fromClient := func() []store.Notification {
		return c.matching(func(n store.Notification) bool { return n.Client == client })
	}
	eventually(t, "the three signals", func() bool { return len(fromClient()) == 3 })
	got := fromClient()
	for _, want := range sent {
		require.Contains(t, got, want, "every signal arrives with its fields")
	}

	// Anything but a client signal is refused, and nothing of the call is sent.
	err := s.Notifier().Signal(ctx, []store.Notification{
		{Kind: store.NotifyPresence, Client: client, Queue: queue},
		{Kind: store.NotifyInsert, Queue: queue},
	})
	require.ErrorContains(t, err, "not a client signal")
	err = s.Notifier().Signal(ctx, []store.Notification{{Kind: store.NotifyGone}})
	require.ErrorContains(t, err, "client is not named")
	require.NoError(t, s.Notifier().Signal(ctx, []store.Notification{{Kind: store.NotifyGone, Client: client}}))
	eventually(t, "the signal after the refused ones", func() bool { return len(fromClient()) == 4 })
	require.Empty(t, c.inserts(queue), "a refused call sends nothing")
	require.Len(t, c.matching(func(n store.Notification) bool {
		return n.Client == client && n.Kind == store.NotifyPresence
	}), 1, "a refused call sends nothing")
}
