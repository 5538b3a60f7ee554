package pronto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// triggerCounter is a SystemHook that counts the cron triggers of each schedule, that is, how many
// times the leader found it due.
type triggerCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (tc *triggerCounter) hook(ctx context.Context, p pronto.SystemPass) (context.Context, func(int, error)) {
	if p.Op == pronto.SystemOpCronTrigger {
		tc.mu.Lock()
		tc.n[p.Name]++
		tc.mu.Unlock()
	}
	return ctx, func(int, error) {}
}

func (tc *triggerCounter) count(name string) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.n[name]
}

// halfHourAway is an hourly expression whose next occurrence is 29 to 30 minutes away.
func halfHourAway() string {
	return fmt.Sprintf("%d * * * *", (time.Now().Minute()+30)%60)
}

// TestCronClockSkewFastLeader: a cron leader whose own clock runs an hour ahead of the store's
// neither registers schedules an hour late nor fires an occurrence half an hour early: due
// occurrences are judged by the store's clock. It used to take its own clock for both.
func TestCronClockSkewFastLeader(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindRedis}, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tc := &triggerCounter{n: map[string]int{}}
		b := startClient(t, ts.reopen(t), &pronto.Config{}) // a process whose clock is right
		a := startClient(t, ts.reopen(t), &pronto.Config{SystemHook: tc.hook})
		pronto.SetProcessSkew(t, a, time.Hour)

		job := pronto.CronJob{Kind: "test.echo", Args: json.RawMessage(`[{"message":"tick"}]`)}
		early := job
		early.Name, early.Expression = "early", halfHourAway()
		_, err := b.CronRegister(ctx, early)
		require.NoError(t, err)
		before, err := b.CronGet(ctx, "early")
		require.NoError(t, err)

		// Registered by the fast process, the schedule still starts from the store's now.
		reg := job
		reg.Name, reg.Expression = "registered", halfHourAway()
		start := time.Now()
		got, err := a.CronRegister(ctx, reg)
		require.NoError(t, err)
		assert.True(t, got.NextRunAt.Before(start.Add(31*time.Minute)),
			"next run %s judged by the registering process's clock, an hour ahead (now %s)", got.NextRunAt, start)

		tick := job
		tick.Name, tick.Expression = "tick", "@every 1s"
		_, err = b.CronRegister(ctx, tick)
		require.NoError(t, err)

		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.RunCron(ctx, nil) }()
		// Three triggers of tick: two passes at least read the due schedules after a took office.
		require.Eventually(t, func() bool { return tc.count("tick") >= 3 }, time.Minute, 20*time.Millisecond,
			"the leader fires a schedule due by the store's clock")
		require.Zero(t, tc.count("early"), "an occurrence half an hour away was fired by the leader's fast clock")
		after, err := b.CronGet(ctx, "early")
		require.NoError(t, err)
		require.Equal(t, before.NextRunAt, after.NextRunAt)
		require.Zero(t, after.RunCount)
	})
}

// TestCronClockSkewSlowLeader: a cron leader whose own clock runs an hour behind the store's fires
// a due occurrence when it is due by the store's clock, not an hour late.
func TestCronClockSkewSlowLeader(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindRedis}, func(t *testing.T, ts *testStore) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tc := &triggerCounter{n: map[string]int{}}
		b := startClient(t, ts.reopen(t), &pronto.Config{})
		a := startClient(t, ts.reopen(t), &pronto.Config{SystemHook: tc.hook})
		pronto.SetProcessSkew(t, a, -time.Hour)

		_, err := b.CronRegister(ctx, pronto.CronJob{Name: "tick", Expression: "@every 1s", Kind: "test.echo",
			Args: json.RawMessage(`[{"message":"tick"}]`)})
		require.NoError(t, err)

		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.RunCron(ctx, nil) }()
		require.Eventually(t, func() bool { return tc.count("tick") >= 2 }, 15*time.Second, 20*time.Millisecond,
			"a schedule due by the store's clock waits for the leader's slow clock")
		cur, err := b.CronGet(ctx, "tick")
		require.NoError(t, err)
		require.True(t, cur.NextRunAt.Before(time.Now().Add(time.Minute)),
			"the next run %s was computed from the leader's slow clock", cur.NextRunAt)
	})
}
