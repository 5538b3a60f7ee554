package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/producer"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// handoffPair returns two stores on one schema, a (whose producers wait, its listener up) and b (the
// inserting process), and a's notifications.
func handoffPair(t *testing.T) (a, b *Store, notes chan store.Notification) {
	t.Helper()
	schema := testdb.Schema(t)
	a = newStore(t, testdb.NewPool(t, 3), schema)
	b = newStore(t, testdb.NewPool(t, 3), schema)
	// Handed jobs stay handed while the test looks at them, however slow the machine, and every
	// single insert tries the hand-off.
	a.handoff.serveWithin = time.Minute
	b.handoff.quietFor = 0
	notes = make(chan store.Notification, 100)
	t.Cleanup(a.Notifier().Subscribe(func(n store.Notification) { notes <- n }))
	require.True(t, a.handoff.listening.Load())
	return a, b, notes
}

var loop = producer.LoopContext(context.Background())

func loopClaim(queue string) store.ClaimParams {
	return store.ClaimParams{Queue: queue, Limit: 4, WorkerID: "w1", LeaseDuration: time.Minute}
}

// waitNote waits for a notification that ok accepts.
func waitNote(t *testing.T, notes <-chan store.Notification, ok func(store.Notification) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-notes:
			if ok(n) {
				return
			}
		case <-deadline:
			t.Fatal("no such notification")
		}
	}
}

// handed waits for a job handed to a's waiter of p and claims it in p's loop: no round trip, so the
// claim returns what the hand-off buffered.
func handed(t *testing.T, a *Store, p store.ClaimParams, notes <-chan store.Notification) *store.Job {
	t.Helper()
	w := a.handoff.waiterFor(&p)
	require.NotNil(t, w)
	require.Eventually(t, func() bool { return !w.empty() }, 10*time.Second, time.Millisecond)
	jobs := w.take(p.Limit)
	require.Len(t, jobs, 1)
	return jobs[0]
}

// stateAfterInsert inserts in through s and returns the state the job is in right after.
func stateAfterInsert(t *testing.T, s *Store, in *store.InsertParams) store.State {
	t.Helper()
	_, err := s.Insert(context.Background(), []*store.InsertParams{in})
	require.NoError(t, err)
	got, err := s.GetJob(context.Background(), in.ID)
	require.NoError(t, err)
	return got.State
}

func adsOf(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+s.expand.Replace("{schema}")+`.waiters`).Scan(&n))
	return n
}

// TestHandoff: after a producer's claim leaves slots free, an insert from another process claims
// the job for it in the insert's transaction, as a claim would (active, attempt 1, the producer's
// worker, a fresh token, a lease), and the notification carries the job whole: every column reads as
// GetJob reads it. The outcome is fenced by the token, and the next insert is handed too.
func TestHandoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("ho")
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs)
	require.Equal(t, 1, adsOf(t, a))

	in := params("ho")
	in.Meta = json.RawMessage(`{"trace":"x"}`)
	in.Tags = []string{"t1", "t2"}
	in.Priority = 3
	in.Timeout = 1500 * time.Millisecond
	in.RetryPolicy = json.RawMessage(`{"initial_interval":"PT1S"}`)
	in.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Microsecond)
	in.Args = json.RawMessage(`[{"s":"é \" \\ \n"}]`)
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitNote(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == "ho" })
	jobs, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	j := jobs[0]
	require.Equal(t, in.ID, j.ID)
	require.Equal(t, store.StateActive, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "w1", j.WorkerID)
	require.NotEmpty(t, j.ClaimToken)
	require.True(t, j.LeaseExpiresAt.After(time.Now().Add(p.LeaseDuration-time.Second)))

	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State)
	// The handed job is the row: compare it with GetJob's, times by instant.
	for _, pair := range [][2]*time.Time{{&j.CreatedAt, &got.CreatedAt}, {&j.ScheduledAt, &got.ScheduledAt},
		{&j.StartedAt, &got.StartedAt}, {&j.ExpiresAt, &got.ExpiresAt}, {&j.LeaseExpiresAt, &got.LeaseExpiresAt}} {
		require.True(t, pair[0].Equal(*pair[1]), "%v != %v", *pair[0], *pair[1])
		*pair[0], *pair[1] = time.Time{}, time.Time{}
	}
	require.Equal(t, got, j)

	res, err := a.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: 1, Token: uuidv7.New(), State: store.StateCompleted}})
	require.NoError(t, err)
	require.False(t, res[0].Applied, "another token is refused")
	res, err = a.Finish(ctx, []store.Completion{{ID: j.ID, Attempt: 1, Token: j.ClaimToken, State: store.StateCompleted}})
	require.NoError(t, err)
	require.True(t, res[0].Applied)

	in2 := params("ho")
	_, err = b.Insert(ctx, []*store.InsertParams{in2})
	require.NoError(t, err)
	require.Equal(t, in2.ID, handed(t, a, p, notes).ID)
}

// TestHandoffBatchAndSlots: a batch of single-row inserts is handed up to the free slots the
// producer advertised; the rest is announced, and the producer's claim that takes the handed jobs
// claims the announced ones too.
func TestHandoffBatchAndSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("slots")
	p.Limit = 2
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	batch := []*store.InsertParams{params("slots"), params("slots"), params("slots")}
	_, err = b.Insert(ctx, batch)
	require.NoError(t, err)
	w := a.handoff.waiterFor(&p)
	require.Eventually(t, func() bool { return w.notified.Load() }, 10*time.Second, time.Millisecond,
		"the queue is announced for the job no slot took")
	waitNote(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == "slots" })
	states := map[store.State]int{}
	for _, in := range batch {
		got, err := b.GetJob(ctx, in.ID)
		require.NoError(t, err)
		states[got.State]++
	}
	require.Equal(t, map[store.State]int{store.StateActive: 2, store.StateAvailable: 1}, states)

	// The producer has three slots now: the two handed jobs and the announced one, in one claim.
	p.Limit = 3
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Len(t, jobs, 3)
}

// TestHandoffOnlyToLoops: a claim outside a producer's loop (a remote fetch) is never advertised,
// so an insert after it leaves the job available.
func TestHandoffOnlyToLoops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	jobs, err := a.Claim(ctx, loopClaim("fetch"))
	require.NoError(t, err)
	require.Empty(t, jobs)
	require.Zero(t, adsOf(t, a))
	require.Equal(t, store.StateAvailable, stateAfterInsert(t, b, params("fetch")))
}

// TestHandoffFollowsClaimRules: the insert's claim for a waiting producer follows the claim's rules:
// a job of a kind the producer does not work, of a paused queue, of a tenant or scheduled later is
// not handed and is announced as usual; a full claim withdraws the advertisement.
func TestHandoffFollowsClaimRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	announced := func(queue string) {
		waitNote(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == queue })
	}
	requireState := func(id string, want store.State) {
		t.Helper()
		got, err := b.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got.State)
	}

	p := loopClaim("rules")
	p.Kinds = []string{"other"}
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	in := params("rules") // kind "k"
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	announced("rules")
	requireState(in.ID, store.StateAvailable)
	other := params("rules")
	other.Kind = "other"
	_, err = b.Insert(ctx, []*store.InsertParams{other})
	require.NoError(t, err)
	require.Equal(t, other.ID, handed(t, a, p, notes).ID, "a kind it works is handed")

	p = loopClaim("paused")
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.NoError(t, b.PauseQueue(ctx, "paused"))
	in = params("paused")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	announced("paused")
	requireState(in.ID, store.StateAvailable)

	p = loopClaim("later")
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	in = params("later")
	in.State, in.ScheduledAt = store.StateScheduled, time.Now().Add(time.Hour)
	tenant := params("later")
	tenant.Tenant = "acme"
	_, err = b.Insert(ctx, []*store.InsertParams{in, tenant})
	require.NoError(t, err)
	announced("later")
	requireState(in.ID, store.StateScheduled)
	requireState(tenant.ID, store.StateAvailable)

	// Only the job the claim would take first is handed: not one behind an available job of its
	// priority or above, but one ahead of them.
	p = loopClaim("prio")
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	var backlog []*store.InsertParams
	for range pipelineMax + 1 { // more than a single insert: announced, never handed
		older := params("prio")
		older.Priority = 5
		backlog = append(backlog, older)
	}
	_, err = b.Insert(ctx, backlog)
	require.NoError(t, err)
	requireState(backlog[0].ID, store.StateAvailable)
	same, high := params("prio"), params("prio")
	same.Priority, high.Priority = 5, 9
	_, err = b.Insert(ctx, []*store.InsertParams{same})
	require.NoError(t, err)
	requireState(same.ID, store.StateAvailable)
	_, err = b.Insert(ctx, []*store.InsertParams{high})
	require.NoError(t, err)
	requireState(high.ID, store.StateActive)

	// A claim that fills every slot withdraws the producer.
	p = loopClaim("full")
	p.Limit = 1
	_, err = a.Claim(loop, p)
	require.NoError(t, err)
	before := adsOf(t, a)
	_, err = b.Insert(ctx, []*store.InsertParams{params("full")})
	require.NoError(t, err)
	handed(t, a, p, notes)
	_, err = b.Insert(ctx, []*store.InsertParams{params("full")})
	require.NoError(t, err)
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, before-1, adsOf(t, a))
}

// TestHandoffNotTakenReturns: a handed job the producer does not claim in time (it is busy or
// stopped) goes back to available with its attempt refunded, and the advertisement is withdrawn.
func TestHandoffNotTakenReturns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	a.handoff.serveWithin = serveWithin
	_, err := a.Claim(loop, loopClaim("late"))
	require.NoError(t, err)
	in := params("late")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	// Handed (the advertisement stays until the job goes back), then returned.
	require.Eventually(t, func() bool {
		got, err := b.GetJob(ctx, in.ID)
		return err == nil && got.State == store.StateAvailable && got.MaxAttempts == in.MaxAttempts+1
	}, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, adsOf(t, a))
	require.Equal(t, store.StateAvailable, stateAfterInsert(t, b, params("late")))
}

// TestHandoffNotTakenReturnsEach: jobs handed one after another while the first one's expiry is
// pending (one timer watches a waiter, re-armed for the next oldest job) all go back when nobody
// takes them, not only the first.
func TestHandoffNotTakenReturnsEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	a.handoff.serveWithin = 300 * time.Millisecond
	_, err := a.Claim(loop, loopClaim("late2"))
	require.NoError(t, err)
	var ins []*store.InsertParams
	for range 3 {
		in := params("late2")
		_, err = b.Insert(ctx, []*store.InsertParams{in})
		require.NoError(t, err)
		ins = append(ins, in)
	}
	handed := 0
	for _, in := range ins {
		got, err := b.GetJob(ctx, in.ID)
		require.NoError(t, err)
		if got.State == store.StateActive {
			handed++
		}
	}
	require.GreaterOrEqual(t, handed, 2, "at least two of the three jobs were handed before the first went back")
	for _, in := range ins {
		require.Eventually(t, func() bool {
			got, err := b.GetJob(ctx, in.ID)
			return err == nil && got.State == store.StateAvailable
		}, 10*time.Second, 10*time.Millisecond, "job %s is back (its lease is a minute)", in.ID)
	}
}

// TestHandoffCloseReturnsJobs: closing a store withdraws its producers' advertisements and returns
// the jobs handed to them and not taken to available.
func TestHandoffCloseReturnsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("close")
	p.LeaseDuration = time.Hour // the job must come back by the close, not by a lease's end
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	in := params("close")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	waitNote(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == "close" })
	require.NoError(t, a.Close())
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State)
	require.Equal(t, in.MaxAttempts+1, got.MaxAttempts, "the attempt is refunded")
	require.Zero(t, adsOf(t, b), "no advertisement is left")
}

// advertise writes an advertisement for queue as a producer's claim would, its listener's backend
// being pid, with a lease of 100 ms.
func advertise(t *testing.T, s *Store, queue string, pid uint32) {
	t.Helper()
	_, err := s.pool.Exec(context.Background(), `INSERT INTO `+s.expand.Replace("{schema}")+`.waiters
		(id, queue, channel, listener_pid, worker_id, kinds, lease_us, free, expires_at)
		VALUES ($1, $1, 'pronto_h_nobody', $2, 'w-'||$1, NULL, 100000, 5, now() + interval '1 hour')`, queue, int32(pid))
	require.NoError(t, err)
}

// TestHandoffToHungProcessIsRescued: a job handed to a process that stopped reading (its listener's
// connection still open, its advertisement standing) is active under a lease like any claimed job,
// and the rescuer takes it back when the lease ends.
func TestHandoffToHungProcessIsRescued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	s.handoff.quietFor = 0
	hung, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { _ = hung.Close(context.Background()) })
	advertise(t, s, "hung", hung.PgConn().PID())
	in := params("hung")
	_, err = s.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	got, err := s.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateActive, got.State, "handed to the hung process")
	require.Equal(t, "w-hung", got.WorkerID)
	require.Eventually(t, func() bool {
		r, err := s.Rescue(ctx, store.RescueParams{Limit: 10})
		return err == nil && len(r.Requeued) == 1 && r.Requeued[0].ID == in.ID
	}, 10*time.Second, 50*time.Millisecond)
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "hung", Limit: 10, WorkerID: "w2", LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, 2, jobs[0].Attempt)
}

// TestHandoffNotToDeadProcess: a producer whose listener's backend is gone (its process was killed,
// and its connections with it) is handed nothing, although its advertisement still stands: the
// job stays available for the living.
func TestHandoffNotToDeadProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	s.handoff.quietFor = 0
	dead, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	pid := dead.PgConn().PID()
	require.NoError(t, dead.Close(ctx))
	require.Eventually(t, func() bool {
		var alive bool
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_get_activity($1))`, int32(pid)).Scan(&alive)
		return err == nil && !alive
	}, 10*time.Second, 10*time.Millisecond)
	advertise(t, s, "dead", pid)
	require.Equal(t, store.StateAvailable, stateAfterInsert(t, s, params("dead")))
}

// TestHandoffLargeJob: a job too large for a notification is handed by id and claim token, and the
// listener reads it.
func TestHandoffLargeJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("large")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	in := params("large")
	in.Args = json.RawMessage(`["` + strings.Repeat("x", 20000) + `"]`)
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	j := handed(t, a, p, notes)
	require.Equal(t, in.ID, j.ID)
	require.JSONEq(t, string(in.Args), string(j.Args))
	require.NotEmpty(t, j.ClaimToken)
}

// TestHandoffListenerLoss: when the listener's connection dies, the store withdraws its
// advertisements (notifications sent meanwhile would be lost), so inserts are announced, not
// handed; once it listens again the producer's next claim advertises it and hand-offs resume.
func TestHandoffListenerLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("loss")
	_, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Equal(t, 1, adsOf(t, a))
	pid := a.ListenerPID()
	_, err = b.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return adsOf(t, a) == 0 }, 10*time.Second, 10*time.Millisecond)
	// Listening again on a new connection (the notes hold the first connection's reconnect too).
	require.Eventually(t, func() bool {
		now := a.ListenerPID()
		return now != 0 && now != pid && a.handoff.listening.Load()
	}, 10*time.Second, 10*time.Millisecond)
	in := params("loss")
	_, err = b.Insert(ctx, []*store.InsertParams{in})
	require.NoError(t, err)
	jobs, err := a.Claim(loop, p) // claims it the usual way, and advertises again
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, in.ID, jobs[0].ID)
	in2 := params("loss")
	_, err = b.Insert(ctx, []*store.InsertParams{in2})
	require.NoError(t, err)
	require.Equal(t, in2.ID, handed(t, a, p, notes).ID)
}

// TestHandoffQuietAfterAMiss: a single insert that finds nobody waiting makes the next single
// inserts of its queue and kind skip the hand-off for a while (they cost more than plain ones), and
// leaves other kinds alone; after the while they try again.
func TestHandoffQuietAfterAMiss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	b.handoff.quietFor = time.Hour
	miss := params("quiet")
	_, err := b.Insert(ctx, []*store.InsertParams{miss}) // nobody waits yet
	require.NoError(t, err)
	p := loopClaim("quiet")
	jobs, err := a.Claim(loop, p) // takes it, and advertises
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	skipped := params("quiet")
	_, err = b.Insert(ctx, []*store.InsertParams{skipped})
	require.NoError(t, err)
	got, err := b.GetJob(ctx, skipped.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateAvailable, got.State, "quiet: not tried")
	other := params("quiet")
	other.Kind, other.Priority = "k2", 1 // ahead of the skipped job, which the claim would take first
	_, err = b.Insert(ctx, []*store.InsertParams{other})
	require.NoError(t, err)
	require.Equal(t, other.ID, handed(t, a, p, notes).ID, "another kind is tried")
	b.handoff.quiet.Clear() // the while has passed
	jobs, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	again := params("quiet")
	_, err = b.Insert(ctx, []*store.InsertParams{again})
	require.NoError(t, err)
	require.Equal(t, again.ID, handed(t, a, p, notes).ID)
}

// TestHandoffAdvertisementKeptFresh: once half the advertised slots have been handed jobs, the
// producer's next Claim also claims of its own, which advertises its free slots afresh; before
// that, handed jobs are returned with no round trip and the advertisement only shrinks.
func TestHandoffAdvertisementKeptFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	free := func() int {
		t.Helper()
		var n int
		require.NoError(t, a.pool.QueryRow(ctx,
			`SELECT free FROM `+a.expand.Replace("{schema}")+`.waiters`).Scan(&n))
		return n
	}
	p := loopClaim("fresh") // 4 free slots
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs)
	require.Equal(t, 4, free())
	w := a.handoff.waiterFor(&p)
	takeHanded := func() {
		t.Helper()
		in := params("fresh")
		require.Equal(t, store.StateActive, stateAfterInsert(t, b, in))
		require.Eventually(t, func() bool { return !w.empty() }, 10*time.Second, time.Millisecond)
		// Each handed job has run by the next claim: the producer has its 4 slots free again.
		jobs, err := a.Claim(loop, p)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, in.ID, jobs[0].ID)
	}
	takeHanded()
	require.Equal(t, 3, free(), "one of four slots handed: taken with no claim of its own")
	takeHanded()
	require.Equal(t, 3, free(), "two of four handed: the claim advertised its 3 slots left afresh, not the 2 the insert left")
}

// TestHandoffPassedOverIsNoMiss: a single insert that passes over a producer with free slots (its
// advertisement locked by a concurrent insert, or a claimable job ahead of the new one) is
// announced as usual but does not make the next inserts skip the hand-off, as an insert that
// finds nobody waiting does (TestHandoffQuietAfterAMiss).
func TestHandoffPassedOverIsNoMiss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := handoffPair(t)
	b.handoff.quietFor = time.Hour
	p := loopClaim("passed")
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs)

	// A concurrent insert holds the advertisement: this one passes it over.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+b.expand.Replace("{schema}")+`.waiters FOR UPDATE`)
	require.NoError(t, err)
	state := stateAfterInsert(t, b, params("passed"))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, store.StateAvailable, state, "advertisement locked")
	// A claimable job ahead of the new one (written in a transaction, which never hands off).
	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	ahead := params("passed")
	ahead.Priority = 5
	_, err = b.InsertPgxTx(ctx, tx, []*store.InsertParams{ahead})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, store.StateAvailable, stateAfterInsert(t, b, params("passed")), "a job ahead")

	jobs, err = a.Claim(loop, p) // the producer takes the three
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	require.Equal(t, store.StateActive, stateAfterInsert(t, b, params("passed")),
		"the next insert still tries the hand-off")
}

// TestHandoffCancelledNeverStarts: a job cancelled while handed and not yet taken leaves the
// waiter's buffer, so the producer's next claim does not start it; a handed job whose cancellation
// was heard before it arrived (one read by fetch, say) is dropped on arrival.
func TestHandoffCancelledNeverStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, notes := handoffPair(t)
	p := loopClaim("hocancel")
	jobs, err := a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs)

	in := params("hocancel")
	require.Equal(t, store.StateActive, stateAfterInsert(t, b, in), "handed")
	w := a.handoff.waiterFor(&p)
	require.NotNil(t, w)
	require.Eventually(t, func() bool { return !w.empty() }, 10*time.Second, time.Millisecond)
	_, err = b.CancelJob(ctx, in.ID)
	require.NoError(t, err)
	// The listener drops the job before it publishes the cancellation to the subscribers.
	waitNote(t, notes, func(n store.Notification) bool { return n.Kind == store.NotifyCancel && n.JobID == in.ID })
	jobs, err = a.Claim(loop, p)
	require.NoError(t, err)
	require.Empty(t, jobs, "a cancelled job is not started")
	got, err := b.GetJob(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, store.StateCancelled, got.State)

	a.handoff.heardCancel("early", "t1")
	w.keep(&store.Job{ID: "early", Queue: "hocancel", ClaimToken: "t1"})
	require.True(t, w.empty(), "dropped on arrival")
	w.keep(&store.Job{ID: "early", Queue: "hocancel", ClaimToken: "t2"})
	taken := w.take(4)
	require.Len(t, taken, 1, "another run of the job is kept")
	require.Equal(t, "t2", taken[0].ClaimToken)
}
