package cli

import (
	"strings"
	"testing"
)

// TestQueuesPriorities: 'queues priorities QUEUE' counts the queue's available jobs per priority,
// highest first, with a total (not a scheduled job, nor another queue's); --json gives
// ojs-priority.md §10.3's shape; an empty queue says so; a bad name is a usage error. On every
// backend.
func TestQueuesPriorities(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		res := run(t, with(db, "queues", "priorities", "pq")...).ok(t)
		if res.stdout != "" || !strings.Contains(res.stderr, "queue pq has no available jobs") {
			t.Fatalf("empty queue:\n%s", res)
		}
		for _, args := range [][]string{
			{"--priority", "high"}, {"--priority", "-20"}, {"--priority", "-20"}, {},
			{"--priority", "-20", "--tenant", "acme"},
			{"--priority", "50", "--delay", "1h"},
		} {
			run(t, with(db, append([]string{"enqueue", "p.job", "--queue", "pq"}, args...)...)...).ok(t)
		}
		run(t, with(db, "enqueue", "p.job", "--queue", "other", "--priority", "7")...).ok(t)

		out := run(t, with(db, "queues", "priorities", "pq")...).ok(t).stdout
		if want := "PRIORITY  AVAILABLE\n10        1\n0         1\n-20       3\ntotal     5\n"; out != want {
			t.Fatalf("queues priorities: want\n%s\ngot\n%s", want, out)
		}
		var got priorityCountsJSON
		run(t, with(db, "queues", "priorities", "pq", "--json")...).ok(t).decode(t, &got)
		if got.Queue != "pq" || got.Total != 5 || len(got.Counts) != 3 || got.Counts["10"] != 1 || got.Counts["0"] != 1 || got.Counts["-20"] != 3 {
			t.Fatalf("queues priorities --json: %+v", got)
		}
		run(t, with(db, "queues", "priorities", "Bad")...).fails(t, ExitUsage, `queues priorities: invalid queue name "Bad"`)
	})
}
