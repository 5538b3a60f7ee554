package cli

import (
	"strings"
	"testing"
)

// TestCronCommands: add, list, get, pause, resume and delete a schedule on every store.
func TestCronCommands(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		res := run(t, with(db, "cron", "list")...).ok(t)
		if res.stdout != "" || !strings.Contains(res.stderr, "no cron schedules") {
			t.Fatalf("empty list:\n%s", res)
		}
		res = run(t, with(db, "cron", "add", "nightly-report", "--schedule", "30 2 * * *", "--timezone", "Europe/Paris",
			"--kind", "report.build", "--args", `{"period":"day"}`, "--queue", "reports", "--tag", "cron",
			"--overlap", "allow", "--description", "the daily report")...).ok(t)
		if !strings.HasPrefix(res.stdout, "cron schedule nightly-report added: next run ") {
			t.Fatalf("add:\n%s", res)
		}
		var got cronJSON
		run(t, with(db, "cron", "get", "nightly-report", "--json")...).ok(t).decode(t, &got)
		if got.Kind != "report.build" || got.Queue != "reports" || compactJSON(got.Args) != `[{"period":"day"}]` ||
			got.Timezone != "Europe/Paris" || got.OverlapPolicy != "allow" || got.Paused || got.NextRunAt == nil ||
			got.Description != "the daily report" || len(got.Tags) != 1 {
			t.Fatalf("get: %+v", got)
		}
		table := run(t, with(db, "cron", "list")...).ok(t).stdout
		if !strings.Contains(table, "nightly-report") || !strings.Contains(table, "active") {
			t.Fatalf("list:\n%s", table)
		}

		run(t, with(db, "cron", "pause", "nightly-report")...).ok(t)
		run(t, with(db, "cron", "get", "nightly-report", "--json")...).ok(t).decode(t, &got)
		if !got.Paused {
			t.Fatalf("after pause: %+v", got)
		}
		if table := run(t, with(db, "cron", "list")...).ok(t).stdout; !strings.Contains(table, "paused") {
			t.Fatalf("list after pause:\n%s", table)
		}
		run(t, with(db, "cron", "resume", "nightly-report")...).ok(t)
		run(t, with(db, "cron", "get", "nightly-report", "--json")...).ok(t).decode(t, &got)
		if got.Paused {
			t.Fatalf("after resume: %+v", got)
		}

		run(t, with(db, "cron", "add", "nightly-report", "--schedule", "@daily", "--kind", "a.b")...).fails(t, ExitError, "exists already")
		run(t, with(db, "cron", "add", "x", "--schedule", "bad", "--kind", "a.b")...).fails(t, ExitUsage, `cron expression "bad"`)
		run(t, with(db, "cron", "add", "x", "--schedule", "@daily")...).fails(t, ExitUsage, "--kind is required")
		run(t, with(db, "cron", "add", "x", "--kind", "a.b")...).fails(t, ExitUsage, "--schedule is required")
		run(t, with(db, "cron", "add", "x", "--schedule", "@daily", "--kind", "a.b", "--timezone", "EST")...).fails(t, ExitUsage, `timezone "EST"`)
		run(t, with(db, "cron", "add", "x", "--schedule", "@daily", "--kind", "a.b", "--overlap", "never")...).fails(t, ExitUsage, `--overlap "never"`)
		run(t, with(db, "cron", "add", "Bad", "--schedule", "@daily", "--kind", "a.b")...).fails(t, ExitUsage, `invalid name "Bad": cron names are [a-z0-9][a-z0-9.-]* (at most 255 characters), such as nightly-report`)
		run(t, with(db, "cron", "get", "Bad")...).fails(t, ExitUsage, "cron names are [a-z0-9][a-z0-9.-]* (at most 255 characters), such as nightly-report")

		run(t, with(db, "cron", "delete", "nightly-report")...).ok(t)
		for _, cmd := range []string{"get", "delete", "pause", "resume"} {
			run(t, with(db, "cron", cmd, "nightly-report")...).fails(t, ExitNotFound, `no cron schedule named "nightly-report"`)
		}
	})
}
