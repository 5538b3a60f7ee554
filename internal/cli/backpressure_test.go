package cli

import "testing"

// TestQueuesSetMaxDepth bounds a queue from the command line: enqueueing beyond the bound fails with
// a message naming the queue; 0 lifts it.
func TestQueuesSetMaxDepth(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		if res := run(t, with(db, "queues", "set-max-depth", "mail", "1")...).ok(t); res.stdout != "queue mail bounded to 1 jobs\n" {
			t.Fatalf("set-max-depth output:\n%s", res)
		}
		run(t, with(db, "enqueue", "email.send", "--queue", "mail")...).ok(t)
		run(t, with(db, "enqueue", "email.send", "--queue", "mail")...).fails(t, ExitError, `queue "mail" is full`)
		run(t, with(db, "queues", "set-max-depth", "mail", "0")...).ok(t)
		run(t, with(db, "enqueue", "email.send", "--queue", "mail")...).ok(t)

		run(t, with(db, "queues", "set-max-depth", "mail", "ten")...).fails(t, ExitUsage, "must be a whole number")
		run(t, with(db, "queues", "set-max-depth", "Mail!", "1")...).fails(t, ExitUsage, "invalid queue name")
		run(t, with(db, "queues", "set-max-depth", "mail")...).fails(t, ExitUsage, "")
	})
}
