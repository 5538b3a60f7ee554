package pronto_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// blockingCronHook returns a SystemHook that blocks the first cron trigger it sees until release is
// closed (a leader stalled between reading its due schedules and firing one), closing blocked when it
// starts and sending the trigger's outcome on ended when it ends. Other passes go through.
func blockingCronHook() (hook pronto.SystemHook, blocked, release chan struct{}, ended chan error) {
	blocked, release, ended = make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	hook = func(ctx context.Context, p pronto.SystemPass) (context.Context, func(int, error)) {
		if p.Op != pronto.SystemOpCronTrigger {
			return ctx, func(int, error) {}
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return ctx, func(int, error) {}
		}
		close(blocked)
		select { // or the test ended without releasing it: let RunCron return
		case <-release:
		case <-ctx.Done():
		}
		return ctx, func(_ int, err error) { ended <- err }
	}
	return hook, blocked, release, ended
}

// TestCronStalledLeaderDoesNotRefire: a cron leader that stalls past its TTL (a SystemHook blocks
// its first trigger) loses office; the new leader fires the occurrence (or, several being missed by
// then, the latest of them), whose job is worked and, on a RemoveCompleted queue, deleted. The stalled leader, resumed, finds the occurrence fired and
// inserts nothing. It used to fire it again from its stale read: the occurrence's job id was free
// again, so the job ran twice.
func TestCronStalledLeaderDoesNotRefire(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		hook, blocked, release, ended := blockingCronHook()
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		// Every job a's inserts write, as the store answered them.
		var imu sync.Mutex
		var aInserted []string
		record := func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
			rows, err := next(ctx, ps)
			imu.Lock()
			for _, r := range rows {
				aInserted = append(aInserted, r.ID)
			}
			imu.Unlock()
			return rows, err
		}
		a := startClient(t, ts.reopen(t), &pronto.Config{LeaderTTL: time.Second, SystemHook: hook,
			InsertMiddleware: []pronto.InsertMiddleware{record}})

		runs := newRunLog()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			runs.add(j.ID)
			return nil
		}))
		b := startClient(t, ts.reopen(t), fastConfig(workers, map[string]pronto.QueueConfig{
			"ticks": {MaxWorkers: 2, RemoveCompleted: true},
		}))

		_, err := a.CronRegister(ctx, pronto.CronJob{Name: "tick", Expression: "@every 1s", Kind: "test.echo",
			Args: json.RawMessage(`[{"message":"tick"}]`), // OverlapPolicy: skip, the default
			Opts: pronto.InsertOpts{Queue: "ticks"}})
		require.NoError(t, err)

		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.RunCron(ctx, nil) }()
		select {
		case <-blocked:
		case <-time.After(30 * time.Second):
			t.Fatal("leader a never triggered the schedule")
		}
		reg, err := a.CronGet(ctx, "tick")
		require.NoError(t, err)
		stalledAt := reg.NextRunAt // the occurrence a is about to fire

		var mu sync.Mutex
		var firstJob string
		bctx, bcancel := context.WithCancel(ctx)
		defer bcancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = b.RunCron(bctx, &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
				mu.Lock()
				defer mu.Unlock()
				if !f.ScheduledAt.Before(stalledAt) && f.Job != nil && firstJob == "" {
					firstJob = f.Job.ID
				}
			}})
		}()
		// b takes office once a's term lapses and fires the stalled occurrence; its job is worked and
		// removed.
		var x string
		require.Eventually(t, func() bool {
			mu.Lock()
			x = firstJob
			mu.Unlock()
			if x == "" {
				return false
			}
			_, m := runs.snapshot()
			_, err := b.JobGet(ctx, x)
			return m[x] == 1 && errors.Is(err, pronto.ErrNotFound)
		}, 60*time.Second, 20*time.Millisecond, "b fires the occurrence and its job is worked and removed")
		bcancel()

		// a resumes from its stale snapshot.
		close(release)
		released = true
		select {
		case err := <-ended:
			t.Logf("a's stale trigger ended: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("a's stalled trigger never ended")
		}
		imu.Lock()
		again := slices.Contains(aInserted, x)
		imu.Unlock()
		_, m := runs.snapshot()
		_, err = b.JobGet(ctx, x)
		require.False(t, again || m[x] != 1 || !errors.Is(err, pronto.ErrNotFound),
			"the occurrence at %s fired again after the hand-over: the stale leader inserted its job %s again (%v); it ran %d times so far, get after the stale trigger: %v",
			stalledAt, x, again, m[x], err)
	})
}

// TestCronStalledLeaderKeepsSkip: the skip policy across a hand-over from a stalled leader. a fires
// T0 (job P, run by another client), then stalls on T1. b takes office, skips T1 (P still runs), and
// once P finishes fires T2 (job X2, still running). (b, taking office with several occurrences
// missed, handles the latest of them as T1.) a, resumed, finds T1 handled and inserts
// nothing; it used to fire T1 from its stale read, P being finished by then, beside X2.
func TestCronStalledLeaderKeepsSkip(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		var armed atomic.Bool
		blocked, release, ended := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		var once sync.Once
		hook := func(ctx context.Context, p pronto.SystemPass) (context.Context, func(int, error)) {
			if p.Op != pronto.SystemOpCronTrigger || !armed.Load() {
				return ctx, func(int, error) {}
			}
			first := false
			once.Do(func() { first = true })
			if !first {
				return ctx, func(int, error) {}
			}
			close(blocked)
			select { // or the test ended without releasing it: let RunCron return
			case <-release:
			case <-ctx.Done():
			}
			return ctx, func(_ int, err error) { ended <- err }
		}
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		a := startClient(t, ts.reopen(t), &pronto.Config{LeaderTTL: time.Second, SystemHook: hook})

		var fmu sync.Mutex
		finish := map[string]chan struct{}{}
		finishCh := func(id string) chan struct{} {
			fmu.Lock()
			defer fmu.Unlock()
			if finish[id] == nil {
				finish[id] = make(chan struct{})
			}
			return finish[id]
		}
		runs := newRunLog()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[blockArgs]) error {
			runs.add(j.ID)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-finishCh(j.ID):
				return nil
			}
		}))
		b := startClient(t, ts.reopen(t), fastConfig(workers, map[string]pronto.QueueConfig{"ticks": {MaxWorkers: 4}}))
		defer func() { // let the workers go so the clients stop
			fmu.Lock()
			defer fmu.Unlock()
			for _, ch := range finish {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		}()

		_, err := a.CronRegister(ctx, pronto.CronJob{Name: "tick", Expression: "@every 1s", Kind: "test.block",
			Args: json.RawMessage(`[{"key":"x"}]`), Opts: pronto.InsertOpts{Queue: "ticks"}})
		require.NoError(t, err)

		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.RunCron(ctx, nil) }()

		// a fires T0; its job P runs on b.
		var p string
		require.Eventually(t, func() bool {
			order, _ := runs.snapshot()
			if len(order) == 0 {
				return false
			}
			p = order[0]
			return true
		}, 60*time.Second, 20*time.Millisecond)
		armed.Store(true)
		select {
		case <-blocked:
		case <-time.After(30 * time.Second):
			t.Fatal("leader a never triggered the schedule again")
		}
		reg, err := a.CronGet(ctx, "tick")
		require.NoError(t, err)
		require.Equal(t, p, reg.LastJobID)
		t1 := reg.NextRunAt // the occurrence a stalls on, with P as the previous job

		var mu sync.Mutex
		var fires []pronto.CronFire
		bctx, bcancel := context.WithCancel(ctx)
		defer bcancel()
		bdone := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(bdone)
			_ = b.RunCron(bctx, &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
				mu.Lock()
				fires = append(fires, f)
				mu.Unlock()
			}})
		}()
		firedBy := func(pred func(pronto.CronFire) bool) *pronto.CronFire {
			mu.Lock()
			defer mu.Unlock()
			for i := range fires {
				if pred(fires[i]) {
					f := fires[i]
					return &f
				}
			}
			return nil
		}
		// b takes office and skips T1 (the latest occurrence missed by then): P is running.
		handled := func(f pronto.CronFire) bool { return !f.ScheduledAt.Before(t1) }
		require.Eventually(t, func() bool { return firedBy(handled) != nil }, 60*time.Second, 20*time.Millisecond, "b handles T1")
		f1 := firedBy(handled)
		require.True(t, f1.Skipped, "b skips T1 while P runs: %+v", f1)

		// P finishes; b fires a later occurrence, whose job X2 runs.
		close(finishCh(p))
		waitState(t, b, p, pronto.StateCompleted)
		var x2 string
		require.Eventually(t, func() bool {
			f := firedBy(func(f pronto.CronFire) bool { return f.Job != nil })
			if f == nil {
				return false
			}
			x2 = f.Job.ID
			_, m := runs.snapshot()
			return m[x2] == 1
		}, 60*time.Second, 20*time.Millisecond, "b fires after P finished")
		bcancel()
		<-bdone

		// a resumes from its stale snapshot of T1.
		close(release)
		released = true
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("a's stalled trigger never ended")
		}
		list, err := a.JobList(ctx, &pronto.JobListParams{Queues: []string{"ticks"}})
		require.NoError(t, err)
		var extra []string
		for _, j := range list.Jobs {
			if j.ID == p || j.ID == x2 {
				continue
			}
			var meta map[string]any
			_ = json.Unmarshal(j.Meta, &meta)
			extra = append(extra, j.ID+" (triggered at "+fmtAny(meta["cron_triggered_at"])+", state "+string(j.State)+")")
		}
		require.Empty(t, extra, "T1 (%s) was skipped by b, yet the stalled leader fired it while X2 %s runs", t1.Format(time.RFC3339), x2)
	})
}

// TestCronPauseDuringTrigger: a schedule paused while the leader is firing one of its occurrences
// (it read it as due just before) gets no job for it after CronPause returned (CronJob.Paused: no
// occurrence fires between CronPause and CronResume). It used to.
func TestCronPauseDuringTrigger(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hook, blocked, release, ended := blockingCronHook()
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		c := startClient(t, ts.Store, &pronto.Config{LeaderTTL: time.Second, SystemHook: hook})
		_, err := c.CronRegister(ctx, pronto.CronJob{Name: "tick", Expression: "@every 1s", Kind: "cron.tick",
			Opts: pronto.InsertOpts{Queue: "ticks"}})
		require.NoError(t, err)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.RunCron(ctx, nil) }()
		select {
		case <-blocked:
		case <-time.After(30 * time.Second):
			t.Fatal("the leader never triggered the schedule")
		}
		p, err := c.CronPause(ctx, "tick")
		require.NoError(t, err)
		require.True(t, p.Paused)
		close(release)
		released = true
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the stalled trigger never ended")
		}
		list, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{"ticks"}})
		require.NoError(t, err)
		require.Empty(t, list.Jobs, "a paused schedule fired an occurrence after CronPause returned")
	})
}

// TestCronDaylightSaving: a schedule that names its minute and hour runs once a day across both
// changes in America/New_York, as cron daemons run it: on 2026-03-08 (02:00 EST -> 03:00 EDT) a
// 02:30 schedule, whose time does not exist that day, runs at the jump (03:00 EDT), and on
// 2026-11-01 (02:00 EDT -> 01:00 EST) a 01:30 schedule runs at the first 01:30 only. A schedule with
// "*" in its hour runs by real time (an hourly one hourly). robfig's schedules skipped the day and
// fired twice.
func TestCronDaylightSaving(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	edt, est := time.FixedZone("EDT", -4*3600), time.FixedZone("EST", -5*3600)
	walk := func(expr string, from time.Time, n int) []time.Time {
		s, err := pronto.ParseCron(expr, "America/New_York")
		require.NoError(t, err)
		var out []time.Time
		for range n {
			from = s.Next(from)
			out = append(out, from)
		}
		return out
	}
	require.Equal(t, []time.Time{
		time.Date(2026, 3, 7, 2, 30, 0, 0, est).UTC(),
		time.Date(2026, 3, 8, 3, 0, 0, 0, edt).UTC(), // in the skipped hour: at the jump
		time.Date(2026, 3, 9, 2, 30, 0, 0, edt).UTC(),
	}, walk("30 2 * * *", time.Date(2026, 3, 6, 12, 0, 0, 0, ny), 3))
	require.Equal(t, []time.Time{
		time.Date(2026, 10, 31, 1, 30, 0, 0, edt).UTC(),
		time.Date(2026, 11, 1, 1, 30, 0, 0, edt).UTC(), // the first 01:30; not the second
		time.Date(2026, 11, 2, 1, 30, 0, 0, est).UTC(),
	}, walk("30 1 * * *", time.Date(2026, 10, 30, 12, 0, 0, 0, ny), 3))
	require.Equal(t, []time.Time{ // seconds first, same rule
		time.Date(2026, 11, 1, 1, 30, 5, 0, edt).UTC(),
		time.Date(2026, 11, 2, 1, 30, 5, 0, est).UTC(),
	}, walk("5 30 1 * * *", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), 2))
	// Hourly at :30 through the fall-back: every real hour, both 01:30s included.
	require.Equal(t, []time.Time{
		time.Date(2026, 11, 1, 0, 30, 0, 0, edt).UTC(),
		time.Date(2026, 11, 1, 1, 30, 0, 0, edt).UTC(),
		time.Date(2026, 11, 1, 1, 30, 0, 0, est).UTC(),
		time.Date(2026, 11, 1, 2, 30, 0, 0, est).UTC(),
	}, walk("30 * * * *", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), 4))
	// @daily (midnight) never meets a change in New York: one a day.
	d := walk("@daily", time.Date(2026, 3, 7, 12, 0, 0, 0, ny), 2)
	require.Equal(t, time.Date(2026, 3, 8, 0, 0, 0, 0, est).UTC(), d[0])
	require.Equal(t, time.Date(2026, 3, 9, 0, 0, 0, 0, edt).UTC(), d[1])
}

func fmtAny(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestCronEveryWholeSeconds: "@every" takes whole seconds: a duration that is not one is refused.
// It used to be accepted and rounded down ("@every 1500ms" fired every second).
func TestCronEveryWholeSeconds(t *testing.T) {
	for _, expr := range []string{"@every 1500ms", "@every 2.9s", "@every 1s1ms"} {
		_, err := pronto.ParseCron(expr, "")
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, expr)
		require.Contains(t, err.Error(), "whole seconds")
	}
	s, err := pronto.ParseCron("@every 90s", "")
	require.NoError(t, err)
	from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, 90*time.Second, s.Next(from).Sub(from))
}
