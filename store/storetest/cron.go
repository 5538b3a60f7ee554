package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// testCron: schedules are created once per name, read back as written, listed by name and due by
// time; an occurrence is advanced once, guarded by the registration and the stored due time; a
// delete returns what it removed; a paused schedule is never due and resumes from the next run given.
func testCron(t *testing.T, st store.Store) {
	s, ok := st.(store.CronStore)
	require.True(t, ok, "every pronto store keeps cron schedules (store.CronStore)")
	ctx := ctx(t)
	now := time.Now()
	mk := func(name string, next time.Time, enabled bool) *store.CronSchedule {
		return &store.CronSchedule{
			Name: name, ID: uuidv7.New(), Expression: "*/5 * * * *", Timezone: "Europe/Paris",
			OverlapPolicy: "skip", Template: json.RawMessage(`{"kind":"report", "args":[1]}`),
			Description: "every five minutes", Enabled: enabled, NextRunAt: next, CreatedAt: now,
		}
	}
	b := mk("b", now.Add(-time.Minute), true)
	a := mk("a", now.Add(-2*time.Minute), true)
	later := mk("later", now.Add(time.Hour), true)
	off := mk("off", now.Add(-time.Hour), false)
	for _, c := range []*store.CronSchedule{b, a, later, off} {
		require.NoError(t, s.CronCreate(ctx, c))
	}
	require.ErrorIs(t, s.CronCreate(ctx, mk("a", now, true)), store.ErrDuplicate)

	got, err := s.CronGet(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, a.ID, got.ID)
	require.Equal(t, string(a.Template), string(got.Template), "the template is kept byte for byte")
	require.Equal(t, "Europe/Paris", got.Timezone)
	require.Equal(t, "skip", got.OverlapPolicy)
	require.True(t, got.Enabled)
	require.WithinDuration(t, a.NextRunAt, got.NextRunAt, time.Microsecond)
	require.WithinDuration(t, time.Now(), got.CreatedAt, near)
	require.True(t, got.LastRunAt.IsZero())
	_, err = s.CronGet(ctx, "missing")
	require.ErrorIs(t, err, store.ErrNotFound)

	list, err := s.CronList(ctx)
	require.NoError(t, err)
	require.Len(t, list, 4)
	require.Equal(t, "a", list[0].Name)

	due, err := s.CronDue(ctx, now, 0)
	require.NoError(t, err)
	require.Len(t, due, 2)
	require.Equal(t, []string{"a", "b"}, []string{due[0].Name, due[1].Name})
	due, err = s.CronDue(ctx, now, 1)
	require.NoError(t, err)
	require.Len(t, due, 1)

	// Advance from the stored due time, once: a second leader with the same guard loses.
	adv := store.CronAdvance{Name: "a", ID: a.ID, From: due[0].NextRunAt, Next: now.Add(5 * time.Minute), RunAt: now, JobID: uuidv7.New()}
	ok, err = s.CronAdvance(ctx, adv)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.CronAdvance(ctx, adv)
	require.NoError(t, err)
	require.False(t, ok)
	// The caller's own nanosecond time works as a guard too.
	ok, err = s.CronAdvance(ctx, store.CronAdvance{Name: "b", ID: b.ID, From: b.NextRunAt, Next: now.Add(time.Hour), RunAt: now})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.CronAdvance(ctx, store.CronAdvance{Name: "later", ID: "other-registration", From: later.NextRunAt, Next: now})
	require.NoError(t, err)
	require.False(t, ok)

	got, err = s.CronGet(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 1, got.RunCount)
	require.Equal(t, adv.JobID, got.LastJobID)
	require.WithinDuration(t, now, got.LastRunAt, time.Microsecond)
	got, err = s.CronGet(ctx, "b")
	require.NoError(t, err)
	require.EqualValues(t, 0, got.RunCount, "a skipped occurrence is not counted")
	require.Empty(t, got.LastJobID)

	testCronPause(t, s, b, now)

	deleted, err := s.CronDelete(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, a.ID, deleted.ID)
	_, err = s.CronDelete(ctx, "a")
	require.ErrorIs(t, err, store.ErrNotFound)
	due, err = s.CronDue(ctx, now, 0)
	require.NoError(t, err)
	require.Empty(t, due)
}

// testCronPause pauses schedule b (due since a minute ago before it was advanced) and resumes it.
func testCronPause(t *testing.T, s store.CronStore, b *store.CronSchedule, now time.Time) {
	p, ok := s.(store.CronPauser)
	require.True(t, ok, "every pronto store pauses cron schedules (store.CronPauser)")
	ctx := ctx(t)
	dueNames := func(at time.Time) []string {
		due, err := s.CronDue(ctx, at, 0)
		require.NoError(t, err)
		var names []string
		for _, c := range due {
			names = append(names, c.Name)
		}
		return names
	}
	require.Contains(t, dueNames(now.Add(2*time.Hour)), "b")

	got, err := p.CronSetEnabled(ctx, "b", false, time.Time{})
	require.NoError(t, err)
	require.False(t, got.Enabled)
	require.Equal(t, b.ID, got.ID)
	require.WithinDuration(t, now.Add(time.Hour), got.NextRunAt, time.Microsecond, "a zero next keeps NextRunAt")
	require.NotContains(t, dueNames(now.Add(2*time.Hour)), "b", "a paused schedule is never due")
	got, err = s.CronGet(ctx, "b")
	require.NoError(t, err)
	require.False(t, got.Enabled, "the pause is stored")

	// A paused schedule does not come back through CronAdvance (an old leader's guard still holds).
	ok, err = s.CronAdvance(ctx, store.CronAdvance{Name: "b", ID: b.ID, From: got.NextRunAt, Next: now.Add(-time.Minute), RunAt: now})
	require.NoError(t, err)
	require.True(t, ok)
	require.NotContains(t, dueNames(now.Add(2*time.Hour)), "b", "advancing a paused schedule keeps it paused")

	resume := now.Add(30 * time.Minute)
	got, err = p.CronSetEnabled(ctx, "b", true, resume)
	require.NoError(t, err)
	require.True(t, got.Enabled)
	require.WithinDuration(t, resume, got.NextRunAt, time.Microsecond, "a resumed schedule starts from the next run given")
	require.NotContains(t, dueNames(now), "b", "resumed from its next occurrence, not the missed one")
	require.Contains(t, dueNames(resume), "b")

	_, err = p.CronSetEnabled(ctx, "missing", false, time.Time{})
	require.ErrorIs(t, err, store.ErrNotFound)
}
