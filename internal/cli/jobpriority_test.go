package cli

import (
	"strings"
	"testing"
)

// TestJobsSetPriority: 'jobs set-priority ID PRIORITY' takes a number (negative ones too) or a name,
// prints the change as text or JSON, and refuses bad priorities (usage), unknown jobs (not found)
// and jobs no longer waiting.
func TestJobsSetPriority(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
		out := run(t, with(db, "jobs", "set-priority", id, "high")...).ok(t).stdout
		if want := "job " + id + " priority 10 (was 0): available"; !strings.Contains(out, want) {
			t.Fatalf("jobs set-priority: want %q in:\n%s", want, out)
		}
		if j := getJob(t, db, id); j.Priority != 10 {
			t.Fatalf("after set-priority high: priority %d", j.Priority)
		}
		var got setPriorityJSON
		run(t, with(db, "jobs", "set-priority", id, "-5", "--json")...).ok(t).decode(t, &got)
		if got.ID != id || got.Priority != -5 || got.PreviousPriority != 10 || got.Job == nil || got.Job.Priority != -5 {
			t.Fatalf("--json: %+v", got)
		}

		run(t, with(db, "jobs", "set-priority", id, "101")...).fails(t, ExitUsage, "between -100 and 100")
		run(t, with(db, "jobs", "set-priority", id, "urgent")...).fails(t, ExitUsage, "high, normal, low")
		run(t, with(db, "jobs", "set-priority", id)...).fails(t, ExitUsage, "missing argument")
		run(t, with(db, "jobs", "set-priority", "01a208c4-315b-705a-bc19-a2f30fe201c6", "1")...).fails(t, ExitNotFound, "not found")
		run(t, with(db, "jobs", "cancel", id)...).ok(t)
		run(t, with(db, "jobs", "set-priority", id, "1")...).fails(t, ExitError, "it is cancelled (only available, scheduled or pending")
		if j := getJob(t, db, id); j.Priority != -5 {
			t.Fatalf("a refused set-priority changed the priority to %d", j.Priority)
		}
	})
}
