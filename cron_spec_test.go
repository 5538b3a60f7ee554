package pronto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store"
)

// Cron behaviour the OJS cron specification fixes: daylight-saving changes, day-of-week names,
// timezones, pausing as seen over HTTP, overlap across a registration made again, and catch-up.

// walkCron returns the n occurrences of expr in tz after from.
func walkCron(t *testing.T, expr, tz string, from time.Time, n int) []time.Time {
	t.Helper()
	s, err := pronto.ParseCron(expr, tz)
	require.NoError(t, err)
	var out []time.Time
	for range n {
		from = s.Next(from)
		out = append(out, from)
	}
	return out
}

// TestCronFallBackTwoTimesInRepeatedHour: "0,30 1 * * *" in America/New_York names its minute and
// hour, so across the fall-back (ojs-cron.md 5.2, CRON-17) each of its times runs once, at the first
// of the two 01:00s and 01:30s. The second 01:30 (EST) used to fire again: only the first time in
// the repeated hour was checked.
func TestCronFallBackTwoTimesInRepeatedHour(t *testing.T) {
	edt, est := time.FixedZone("EDT", -4*3600), time.FixedZone("EST", -5*3600)
	require.Equal(t, []time.Time{
		time.Date(2026, 11, 1, 1, 0, 0, 0, edt).UTC(),
		time.Date(2026, 11, 1, 1, 30, 0, 0, edt).UTC(),
		time.Date(2026, 11, 2, 1, 0, 0, 0, est).UTC(), // not 01:30 EST on Nov 1, a second 01:30
		time.Date(2026, 11, 2, 1, 30, 0, 0, est).UTC(),
	}, walkCron(t, "0,30 1 * * *", "America/New_York", time.Date(2026, 10, 31, 12, 0, 0, 0, edt), 4))
	// From inside the repeated hour, after the first 01:30 ran: the next is the next day's.
	require.Equal(t, []time.Time{time.Date(2026, 11, 2, 1, 0, 0, 0, est).UTC()},
		walkCron(t, "0,30 1 * * *", "America/New_York", time.Date(2026, 11, 1, 1, 10, 0, 0, est), 1))
	// Two times in the hour the spring change skips run once, at the jump.
	require.Equal(t, []time.Time{
		time.Date(2026, 3, 8, 3, 0, 0, 0, edt).UTC(),
		time.Date(2026, 3, 9, 2, 0, 0, 0, edt).UTC(),
	}, walkCron(t, "0,30 2 * * *", "America/New_York", time.Date(2026, 3, 8, 0, 0, 0, 0, est), 2))
}

// TestCronLordHoweHalfHourChange: Australia/Lord_Howe sets its clocks back 30 minutes (02:00 +11 ->
// 01:30 +10:30) on 2026-04-05 and forward 30 minutes (02:00 +10:30 -> 02:30 +11) on 2026-10-04.
// 02:00 on the first day exists once, and @daily's midnights exist; robfig's stepping by hours
// skipped whole days.
func TestCronLordHoweHalfHourChange(t *testing.T) {
	lh, err := time.LoadLocation("Australia/Lord_Howe")
	require.NoError(t, err)
	require.Equal(t, []time.Time{
		time.Date(2026, 4, 5, 2, 0, 0, 0, time.FixedZone("", 10*3600+1800)).UTC(),
		time.Date(2026, 4, 6, 2, 0, 0, 0, lh).UTC(),
	}, walkCron(t, "0 2 * * *", "Australia/Lord_Howe", time.Date(2026, 4, 4, 2, 0, 0, 0, lh), 2))
	require.Equal(t, []time.Time{
		time.Date(2026, 4, 6, 0, 0, 0, 0, lh).UTC(),
		time.Date(2026, 4, 7, 0, 0, 0, 0, lh).UTC(),
	}, walkCron(t, "@daily", "Australia/Lord_Howe", time.Date(2026, 4, 5, 0, 0, 0, 0, lh), 2))
	// 01:45 repeats on the first day (once, the first time) and 02:15 is skipped on the second (at
	// the jump).
	require.Equal(t, []time.Time{
		time.Date(2026, 4, 5, 1, 45, 0, 0, time.FixedZone("", 11*3600)).UTC(),
		time.Date(2026, 4, 6, 1, 45, 0, 0, lh).UTC(),
	}, walkCron(t, "45 1 * * *", "Australia/Lord_Howe", time.Date(2026, 4, 4, 12, 0, 0, 0, lh), 2))
	require.Equal(t, []time.Time{
		time.Date(2026, 10, 4, 2, 30, 0, 0, time.FixedZone("", 11*3600)).UTC(),
		time.Date(2026, 10, 5, 2, 15, 0, 0, lh).UTC(),
	}, walkCron(t, "15 2 * * *", "Australia/Lord_Howe", time.Date(2026, 10, 3, 12, 0, 0, 0, lh), 2))
}

// TestCronSundayAsSeven: ojs-cron.md 3.1/3.4: day of week is 0-7, "both 0 and 7 represent Sunday",
// in values, ranges, steps and names. "7" and "5-7" were refused.
func TestCronSundayAsSeven(t *testing.T) {
	monday := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	weekdays := func(expr string) []time.Weekday {
		var out []time.Weekday
		for _, n := range walkCron(t, expr, "", monday, 3) {
			out = append(out, n.Weekday())
		}
		return out
	}
	sun, fri, sat := time.Sunday, time.Friday, time.Saturday
	require.Equal(t, []time.Weekday{sun, sun, sun}, weekdays("0 0 * * 7"))
	require.Equal(t, []time.Weekday{sun, sun, sun}, weekdays("0 0 * * 0"))
	require.Equal(t, []time.Weekday{fri, sat, sun}, weekdays("0 0 * * 5-7"))
	require.Equal(t, []time.Weekday{fri, sat, sun}, weekdays("0 0 * * fri-sun"))
	require.Equal(t, []time.Weekday{fri, sat, sun}, weekdays("0 0 * * FRI-7"))
	require.Equal(t, []time.Weekday{sat, sun, sat}, weekdays("0 0 * * 6-7,0"))
	require.Equal(t, []time.Weekday{time.Wednesday, fri, sun}, weekdays("0 0 * * 1-7/2")) // 1,3,5,7
	require.Equal(t, []time.Weekday{sun, sun, sun}, weekdays("0 0 0 * * 7"))              // seconds first
	for _, bad := range []string{"0 0 * * 8", "0 0 * * 7-5", "0 0 * * 5-8", "0 0 * * 5-7/0"} {
		_, err := pronto.ParseCron(bad, "")
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, bad)
	}
}

// TestCronTimezones: ojs-cron.md 5.1 (CRON-14) refuses fixed offsets and abbreviations. Etc/GMT+5
// is a fixed offset written as a zone and was accepted; EST5EDT follows daylight saving time and
// was refused only for having no "/".
func TestCronTimezones(t *testing.T) {
	for _, tz := range []string{"", "UTC", "Etc/UTC", "America/New_York", "EST5EDT", "Australia/Lord_Howe"} {
		_, err := pronto.ParseCron("0 9 * * *", tz)
		require.NoError(t, err, tz)
	}
	for _, tz := range []string{"EST", "+05:00", "UTC+5", "Etc/GMT+5", "Etc/GMT-14", "Mars/Olympus", "est5edt"} {
		_, err := pronto.ParseCron("0 9 * * *", tz)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, tz)
		_, err = pronto.CronLocation(tz)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, tz)
	}
}

// TestCronTimezoneCopiesOfFixedOffsetsRefused: the system zoneinfo's "posix/" and "right/" trees
// hold the zones again, and "posix/Etc/GMT+5", "right/Etc/GMT+5" and "posix/EST" were accepted
// (also over HTTP): the fixed-offset check looked only for the "Etc/" prefix. A posix/ name is read
// as the zone it copies, so it is refused for the zone's reason (whether or not the machine has the
// posix/ tree); a right/ one is refused as counting leap seconds. A place's zone keeps working
// under posix/, even one that keeps no daylight saving time (Asia/Kolkata, America/Phoenix).
func TestCronTimezoneCopiesOfFixedOffsetsRefused(t *testing.T) {
	for tz, reason := range map[string]string{
		"posix/Etc/GMT+5":        "fixed UTC offset",
		"posix/Etc/GMT-14":       "fixed UTC offset",
		"posix/EST":              "IANA zone name",
		"right/Etc/GMT+5":        "leap seconds",
		"right/America/New_York": "leap seconds",
	} {
		_, err := pronto.CronLocation(tz)
		require.ErrorIs(t, err, pronto.ErrInvalidArgs, tz)
		require.ErrorContains(t, err, reason, tz)
	}
	for _, tz := range []string{"posix/America/New_York", "Asia/Kolkata", "America/Phoenix", "posix/Etc/UTC", "Etc/GMT"} {
		_, err := pronto.ParseCron("0 9 * * *", tz)
		require.NoError(t, err, tz)
	}

	srv, _ := cronServer(t)
	for i, tz := range []string{"posix/Etc/GMT+5", "right/Etc/GMT+5", "posix/EST"} {
		code, body := cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron",
			fmt.Sprintf(`{"name":"tz-copy-%d","cron":"0 9 * * *","timezone":%q,"type":"report.generate"}`, i, tz))
		require.Equal(t, http.StatusBadRequest, code, tz)
		d, _ := body["error"].(map[string]any)["details"].(map[string]any)
		require.Equal(t, "timezone", d["field"], tz)
	}
}

// cronServer returns a server over a fresh memory store and its client.
func cronServer(t *testing.T) (*server.Server, *pronto.Client) {
	ts := newTestStore(t, kindMemory)
	c := startClient(t, ts.Store, &pronto.Config{})
	srv, err := server.New(server.Config{Client: c})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, c
}

// cronHTTP sends a request with a JSON body (none when empty) and returns the status and the
// decoded body.
func cronHTTP(t *testing.T, srv *server.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, bytes.NewBufferString(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	srv.ServeHTTP(rec, req)
	var m map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), rec.Body.String())
	return rec.Code, m
}

// TestCronPausedShownDisabledOverHTTP: a registration paused through the Go API or the CLI was
// listed and got over HTTP as "enabled": true, "status": "active", with a next_run_at. ojs-cron.md
// 8.5: a disabled cron job's next_run_at MUST be null (CRON-28), and its enabled is false.
func TestCronPausedShownDisabledOverHTTP(t *testing.T) {
	ctx := context.Background()
	srv, c := cronServer(t)
	_, err := c.CronRegister(ctx, pronto.CronJob{Name: "nightly", Expression: "30 2 * * *", Kind: "report.build"})
	require.NoError(t, err)
	p, err := c.CronPause(ctx, "nightly")
	require.NoError(t, err)
	require.True(t, p.Paused)

	get := func(path string) map[string]any {
		code, m := cronHTTP(t, srv, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, code, m)
		return m
	}
	one := get("/ojs/v1/cron/nightly")["cron_job"].(map[string]any)
	require.Equal(t, false, one["enabled"], "GET shows a paused registration enabled: %v", one)
	require.Equal(t, "paused", one["status"])
	require.Contains(t, one, "next_run_at")
	require.Nil(t, one["next_run_at"], "a disabled cron job's next_run_at must be null")
	list := get("/ojs/v1/cron")["cron_jobs"].([]any)
	require.Equal(t, false, list[0].(map[string]any)["enabled"])

	_, err = c.CronResume(ctx, "nightly")
	require.NoError(t, err)
	one = get("/ojs/v1/cron/nightly")["cron_job"].(map[string]any)
	require.Equal(t, true, one["enabled"])
	require.Equal(t, "active", one["status"])
	require.NotNil(t, one["next_run_at"])
}

// TestCronRegisteredDisabledOverHTTP: what a GET shows of a paused registration ("enabled": false)
// can be sent back: a registration created with "enabled": false is registered paused (it used to be
// a 422), and one created enabled, or without the member, is active.
func TestCronRegisteredDisabledOverHTTP(t *testing.T) {
	ctx := context.Background()
	srv, c := cronServer(t)
	code, body := cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron",
		`{"name": "held", "cron": "30 2 * * *", "type": "report.build", "enabled": false}`)
	require.Equal(t, http.StatusCreated, code, body)
	one := body["cron_job"].(map[string]any)
	require.Equal(t, false, one["enabled"], "%v", one)
	require.Equal(t, "paused", one["status"])
	require.Nil(t, one["next_run_at"])
	got, err := c.CronGet(ctx, "held")
	require.NoError(t, err)
	require.True(t, got.Paused, "the registration is paused in the store")

	code, body = cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron",
		`{"name": "live", "cron": "30 2 * * *", "type": "report.build", "enabled": true}`)
	require.Equal(t, http.StatusCreated, code, body)
	require.Equal(t, true, body["cron_job"].(map[string]any)["enabled"])
	got, err = c.CronGet(ctx, "live")
	require.NoError(t, err)
	require.False(t, got.Paused)
}

// TestCronBadTimezoneNamesTimezone: a registration with a bad timezone and a good expression was
// refused with details.field "expression", so a client (or form) marked the wrong field.
func TestCronBadTimezoneNamesTimezone(t *testing.T) {
	srv, _ := cronServer(t)
	for _, tz := range []string{"EST", "+05:00", "Mars/Olympus", "Etc/GMT+5"} {
		code, body := cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron",
			`{"name": "tz-check", "cron": "0 9 * * *", "timezone": "`+tz+`", "type": "report.generate"}`)
		require.Equal(t, http.StatusBadRequest, code)
		e := body["error"].(map[string]any)
		d, _ := e["details"].(map[string]any)
		require.Equal(t, "timezone", d["field"], "%s: %v", tz, e)
	}
	code, body := cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron",
		`{"name": "expr-check", "cron": "0 25 * * *", "timezone": "Europe/Paris", "type": "report.generate"}`)
	require.Equal(t, http.StatusBadRequest, code)
	d, _ := body["error"].(map[string]any)["details"].(map[string]any)
	require.Equal(t, "expression", d["field"])
}

// TestCronReRegisterKeepsSkip: the documented way to change a registration is to delete it and
// register it again (CronRegister's doc). With the default skip policy, while the previous
// occurrence's job is unfinished the next occurrence is skipped (README; ojs-cron.md 6.3: overlap is
// detected by the cron name). After a delete + register under the same name the new registration
// used to insert a second job next to the unfinished one.
func TestCronReRegisterKeepsSkip(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := newTestStore(t, kindMemory)
	c := startClient(t, ts.Store, &pronto.Config{}) // no workers: each job stays available
	reg := pronto.CronJob{Name: "sync", Expression: "* * * * * *", Kind: "data.sync"}
	_, err := c.CronRegister(ctx, reg)
	require.NoError(t, err)

	var mu sync.Mutex
	var fires []pronto.CronFire
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.RunCron(ctx, &pronto.CronConfig{OnFire: func(f pronto.CronFire) {
			mu.Lock()
			fires = append(fires, f)
			mu.Unlock()
		}})
	}()
	defer func() { cancel(); <-done }()
	var first string
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range fires {
			if f.Job != nil {
				first = f.Job.ID
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)

	// Change the registration the documented way (here: the same schedule, a new description). The
	// old registration's occurrences are all at or before cut; the new one's after it.
	cut := time.Now()
	_, err = c.CronDelete(ctx, "sync")
	require.NoError(t, err)
	reg.Description = "v2"
	got, err := c.CronRegister(ctx, reg)
	require.NoError(t, err)
	require.Equal(t, first, got.LastJobID, "the new registration takes over the unfinished job")
	var next pronto.CronFire
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range fires {
			if f.ScheduledAt.After(cut) && (f.Job != nil || f.Skipped) {
				next = f
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)
	j, err := c.JobGet(ctx, first)
	require.NoError(t, err)
	require.False(t, j.State.Terminal())
	require.True(t, next.Skipped, "job %s of cron %q is still %s, yet the next occurrence inserted %v", first, "sync", j.State, next.Job)
	require.Equal(t, first, next.PreviousJobID)

	// Once that job is finished, a registration made again finds nothing to take over.
	_, err = c.JobCancel(ctx, first)
	require.NoError(t, err)
	_, err = c.CronDelete(ctx, "sync")
	require.NoError(t, err)
	got, err = c.CronRegister(ctx, reg)
	require.NoError(t, err)
	require.Empty(t, got.LastJobID)
}

// TestCronCatchUpFiresLatest: RunCron's doc and docs/http-api.md (maintenance mode) say that after a
// time without a leader "each schedule fires its latest missed occurrence once". A "*/5 * * * *"
// schedule whose leader was away for an hour fired the occurrence of an hour ago.
func TestCronCatchUpFiresLatest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := newTestStore(t, kindMemory)
	c := startClient(t, ts.Store, &pronto.Config{})
	_, err := c.CronRegister(ctx, pronto.CronJob{Name: "every5", Expression: "*/5 * * * *", Kind: "data.sync"})
	require.NoError(t, err)
	cs := ts.Store.(store.CronStore)
	s, err := cs.CronGet(ctx, "every5")
	require.NoError(t, err)
	// The leader was away: the schedule still waits for an occurrence of an hour ago.
	old := time.Now().UTC().Add(-time.Hour).Truncate(5 * time.Minute)
	ok, err := cs.CronAdvance(ctx, store.CronAdvance{Name: s.Name, ID: s.ID, From: s.NextRunAt, Next: old})
	require.NoError(t, err)
	require.True(t, ok)

	start := time.Now()
	fired := make(chan pronto.CronFire, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.RunCron(ctx, &pronto.CronConfig{OnFire: func(f pronto.CronFire) { fired <- f }})
	}()
	defer func() { cancel(); <-done }()
	var f pronto.CronFire
	select {
	case f = <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("no occurrence fired")
	}
	require.NotNil(t, f.Job)
	// The latest occurrence missed when RunCron started (a later one, if a boundary passed since, is
	// later still): the one fired must not be older.
	latest := start.UTC().Truncate(5 * time.Minute)
	require.False(t, f.ScheduledAt.Before(latest), "fired the occurrence of %s, not the latest missed one (%s or later)", f.ScheduledAt.UTC(), latest)
	var meta map[string]any
	require.NoError(t, json.Unmarshal(f.Job.Meta, &meta))
	at, err := time.Parse(time.RFC3339, meta["cron_triggered_at"].(string))
	require.NoError(t, err)
	require.True(t, at.Equal(f.ScheduledAt), "cron_triggered_at %s", at)
	// Fired once: the schedule waits for an occurrence after now, and the missed ones are gone.
	cur, err := c.CronGet(ctx, "every5")
	require.NoError(t, err)
	require.Equal(t, int64(1), cur.RunCount)
	require.True(t, cur.NextRunAt.After(f.ScheduledAt))
}

// TestCronLatestEvery: an "@every" schedule's catch-up keeps counting its interval from the
// registration: the occurrence fired is on that grid.
func TestCronLatestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := newTestStore(t, kindMemory)
	c := startClient(t, ts.Store, &pronto.Config{})
	_, err := c.CronRegister(ctx, pronto.CronJob{Name: "every7", Expression: "@every 7s", Kind: "data.sync"})
	require.NoError(t, err)
	cs := ts.Store.(store.CronStore)
	s, err := cs.CronGet(ctx, "every7")
	require.NoError(t, err)
	old := s.NextRunAt.Add(-700 * time.Second)
	ok, err := cs.CronAdvance(ctx, store.CronAdvance{Name: s.Name, ID: s.ID, From: s.NextRunAt, Next: old})
	require.NoError(t, err)
	require.True(t, ok)
	start := time.Now()
	fired := make(chan pronto.CronFire, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.RunCron(ctx, &pronto.CronConfig{OnFire: func(f pronto.CronFire) { fired <- f }})
	}()
	defer func() { cancel(); <-done }()
	var f pronto.CronFire
	select {
	case f = <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("no occurrence fired")
	}
	require.Zero(t, f.ScheduledAt.Sub(old)%(7*time.Second), "%s is not on the grid of %s", f.ScheduledAt, old)
	require.False(t, f.ScheduledAt.Before(start.Add(-7*time.Second)), "fired %s, an old occurrence", f.ScheduledAt)
}

// TestCronOptionsTimeout: ojs-cron.md 2.1/2.2/8.1 give each occurrence's execution limit as
// options.timeout (integer seconds). POSTing the spec's own example registered the cron with no
// timeout at all (neither applied nor refused), so its jobs could run forever.
func TestCronOptionsTimeout(t *testing.T) {
	srv, c := cronServer(t)
	code, body := cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron", `{"name": "daily-report", "cron": "0 9 * * *",
		"timezone": "America/New_York", "type": "report.generate", "args": [{"report": "daily_summary"}],
		"options": {"queue": "reports", "timeout": 300}, "overlap_policy": "skip"}`)
	require.Equal(t, http.StatusCreated, code, body)
	got, err := c.CronGet(context.Background(), "daily-report")
	require.NoError(t, err)
	require.Equal(t, 300*time.Second, got.Opts.Timeout, "options.timeout 300 was dropped: %v", body)

	code, body = cronHTTP(t, srv, http.MethodPost, "/ojs/v1/cron", `{"name": "bad-timeout", "cron": "0 9 * * *",
		"type": "report.generate", "options": {"timeout": "5m"}}`)
	require.Equal(t, http.StatusBadRequest, code, body)
}
