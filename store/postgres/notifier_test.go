package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
)

// waitFor waits, boundedly, for cond.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond)
}

// settle gives stray notifications time to arrive before a test asserts there are none.
func settle() { time.Sleep(150 * time.Millisecond) }

func TestInsertPgxTxRollbackAndCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)

	for _, n := range []int{1, 3, 25, arraysMax + 1} { // each way of writing a batch
		// Rolled back: no job, no notification.
		tx, err := s.Pool().Begin(ctx)
		require.NoError(t, err)
		batch := make([]*store.InsertParams, n)
		for i := range batch {
			batch[i] = params("q1")
			if i%2 == 1 {
				batch[i].Queue = "q2"
			}
		}
		jobs, err := s.InsertPgxTx(ctx, tx, batch)
		require.NoError(t, err)
		require.Len(t, jobs, n)
		require.NoError(t, tx.Rollback(ctx))
		_, err = s.GetJob(ctx, jobs[0].ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		settle()
		require.Empty(t, rec.of(store.NotifyInsert), "a rolled-back insert announced something")

		// Committed: the jobs, and exactly one notification per queue, only after commit.
		tx, err = s.Pool().Begin(ctx)
		require.NoError(t, err)
		for i := range batch {
			batch[i].ID = params("").ID
		}
		jobs, err = s.InsertPgxTx(ctx, tx, batch)
		require.NoError(t, err)
		settle()
		require.Empty(t, rec.of(store.NotifyInsert), "notified before commit")
		require.NoError(t, tx.Commit(ctx))
		for _, j := range jobs {
			_, err := s.GetJob(ctx, j.ID)
			require.NoError(t, err)
		}
		queues := 1
		if n > 1 {
			queues = 2
		}
		waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == queues })
		settle()
		notes := rec.of(store.NotifyInsert)
		require.Len(t, notes, queues, "batch of %d", n)
		seen := map[string]bool{}
		for _, note := range notes {
			require.False(t, seen[note.Queue], "queue %s announced twice", note.Queue)
			seen[note.Queue] = true
			require.True(t, note.DueAt.IsZero())
		}
		rec.mu.Lock()
		rec.notes = nil
		rec.mu.Unlock()
	}
}

func TestPendingInsertAnnouncesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)
	p := params("q")
	p.State = store.StatePending
	_, err := s.Insert(ctx, []*store.InsertParams{p})
	require.NoError(t, err)
	settle()
	require.Empty(t, rec.of(store.NotifyInsert))

	_, err = s.ActivateJob(ctx, p.ID)
	require.NoError(t, err)
	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 1 })
}

func TestListenerReconnectsAfterKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)
	waitFor(t, func() bool { return len(rec.of(store.NotifyReconnect)) == 1 })

	pid := s.ListenerPID()
	var killed bool
	require.NoError(t, testdb.Pool(t).QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&killed))
	require.True(t, killed)

	waitFor(t, func() bool { p := s.ListenerPID(); return p != 0 && p != pid })
	waitFor(t, func() bool { return len(rec.of(store.NotifyReconnect)) == 2 })

	_, err := s.Insert(ctx, []*store.InsertParams{params("after")})
	require.NoError(t, err)
	waitFor(t, func() bool {
		notes := rec.of(store.NotifyInsert)
		return len(notes) == 1 && notes[0].Queue == "after"
	})
}

func TestNotificationWithOddQueueName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)
	odd := "we\"ird 'q' \\ ✓ <&>\n\ttab {json}"
	_, err := s.Insert(ctx, []*store.InsertParams{params(odd)})
	require.NoError(t, err)
	require.NoError(t, s.PauseQueue(ctx, odd))
	require.NoError(t, s.ResumeQueue(ctx, odd))
	jobs, err := s.Claim(ctx, claimParams(odd, 1))
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	// Finish announces through SQL-built JSON: the queue name must survive that too.
	_, err = s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateAvailable}})
	require.NoError(t, err)

	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 2 && len(rec.of(store.NotifyResume)) == 1 })
	for _, n := range rec.of(store.NotifyInsert) {
		require.Equal(t, odd, n.Queue)
	}
	require.Equal(t, odd, rec.of(store.NotifyPause)[0].Queue)

	// A foreign, malformed payload on the channel is ignored, and delivery goes on.
	_, err = s.Pool().Exec(ctx, "SELECT pg_notify($1, $2)", s.Channel(), `{not json`)
	require.NoError(t, err)
	_, err = s.Pool().Exec(ctx, "SELECT pg_notify($1, $2)", s.Channel(), `{"k":"zzz"}`)
	require.NoError(t, err)
	_, err = s.Insert(ctx, []*store.InsertParams{params("next")})
	require.NoError(t, err)
	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 3 })
}

func TestCancelNotifiesActiveJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)
	a, b := params("q"), params("q")
	_, err := s.Insert(ctx, []*store.InsertParams{a})
	require.NoError(t, err)
	_, err = s.Claim(ctx, claimParams("q", 1))
	require.NoError(t, err)
	_, err = s.Insert(ctx, []*store.InsertParams{b})
	require.NoError(t, err)

	j, err := s.CancelJob(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, j.State)
	require.True(t, j.LeaseExpiresAt.IsZero())
	_, err = s.CancelJob(ctx, b.ID) // not active: no cancel notification
	require.NoError(t, err)
	waitFor(t, func() bool { return len(rec.of(store.NotifyCancel)) == 1 })
	settle()
	notes := rec.of(store.NotifyCancel)
	require.Len(t, notes, 1)
	require.Equal(t, a.ID, notes[0].JobID)
}

func TestListenerStopsWithLastSubscriber(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.Zero(t, s.ListenerPID())
	un1 := s.Notifier().Subscribe(func(store.Notification) {})
	un2 := s.Notifier().Subscribe(func(store.Notification) {})
	pid := s.ListenerPID()
	require.NotZero(t, pid)
	un1()
	un1() // idempotent
	require.Equal(t, pid, s.ListenerPID())
	un2()
	require.Zero(t, s.ListenerPID())
	// The backend goes away too.
	waitFor(t, func() bool {
		var n int
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
		return n == 0
	})
	// And comes back for a new subscriber.
	un3 := s.Notifier().Subscribe(func(store.Notification) {})
	require.NotZero(t, s.ListenerPID())
	un3()
}

func TestCloseStopsListener(t *testing.T) {
	t.Parallel()
	s, err := New(testdb.Pool(t), Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)
	unsub := s.Notifier().Subscribe(func(store.Notification) {})
	require.NotZero(t, s.ListenerPID())
	require.NoError(t, s.Close()) // waits for the listener goroutine
	require.Zero(t, s.ListenerPID())
	unsub()
	unsub = s.Notifier().Subscribe(func(store.Notification) {})
	require.Zero(t, s.ListenerPID(), "a closed store starts no listener")
	unsub()
}

func TestListenerSurvivesIdleChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	s.notifier.idleCheck = 20 * time.Millisecond
	rec := subscribe(t, s)
	pid := s.ListenerPID()
	time.Sleep(200 * time.Millisecond) // several idle checks, each a ping
	_, err := s.Insert(ctx, []*store.InsertParams{params("q")})
	require.NoError(t, err)
	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 1 })
	require.Equal(t, pid, s.ListenerPID(), "idle checks keep the connection")
	require.Len(t, rec.of(store.NotifyReconnect), 1)
}

// TestInsertsCarryANonceAndSQLAnnouncementsNone: every Insert's notification carries a fresh
// non-zero nonce (one client claims it), while announcements made by SQL (here a job returned to
// available by Finish) carry none (every client claims). Client signals keep every field through
// the payload, odd characters included.
func TestInsertsCarryANonceAndSQLAnnouncementsNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	rec := subscribe(t, s)
	for _, n := range []int{1, 5, 100, arraysMax + 1} {
		ps := make([]*store.InsertParams, n)
		for i := range ps {
			ps[i] = params("nonce")
		}
		_, err := s.Insert(ctx, ps)
		require.NoError(t, err)
	}
	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 4 })
	seen := map[uint32]bool{}
	for _, n := range rec.of(store.NotifyInsert) {
		require.NotZero(t, n.Nonce)
		require.False(t, seen[n.Nonce], "each insert has its own nonce")
		seen[n.Nonce] = true
	}

	jobs, err := s.Claim(ctx, claimParams("nonce", 1))
	require.NoError(t, err)
	_, err = s.Finish(ctx, []store.Completion{{ID: jobs[0].ID, Attempt: 1, State: store.StateAvailable}})
	require.NoError(t, err)
	waitFor(t, func() bool { return len(rec.of(store.NotifyInsert)) == 5 })
	require.Zero(t, rec.of(store.NotifyInsert)[4].Nonce, "SQL announcements carry no nonce")

	odd := "c\"lient ✓ {json}\n"
	sig := store.Notification{Kind: store.NotifyPresence, Client: odd, Queue: odd, Fingerprint: "9a"}
	require.NoError(t, s.Notifier().Signal(ctx, []store.Notification{sig}))
	waitFor(t, func() bool { return len(rec.of(store.NotifyPresence)) == 1 })
	require.Equal(t, sig, rec.of(store.NotifyPresence)[0])
}
