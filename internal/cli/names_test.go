package cli

import (
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestOneRuleForNames: the CLI accepts the kinds the HTTP API and Go accept (hyphens included), and a
// filter by a name no job can have is an error, not an empty listing.
func TestOneRuleForNames(t *testing.T) {
	db := []string{"--database-url", "sqlite:" + t.TempDir() + "/p.db"}
	run(t, with(db, "migrate", "up")...).ok(t)
	id := strings.TrimSpace(run(t, with(db, "enqueue", "email-x.send", "--queue", "batch-2")...).ok(t).stdout)
	var list jobList
	run(t, with(db, "jobs", "list", "--kind", "email-x.send", "--queue", "batch-2", "--json")...).ok(t).decode(t, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != id {
		t.Fatalf("listing by the hyphenated kind: %+v", list)
	}
	run(t, with(db, "jobs", "list", "--queue", "Email")...).fails(t, ExitUsage, `--queue "Email": not a queue name: queue names are `+pronto.QueueNameRule)
	run(t, with(db, "jobs", "list", "--kind", "Email.send")...).fails(t, ExitUsage, `--kind "Email.send": not a kind`)
	run(t, with(db, "enqueue", "Email.send")...).fails(t, ExitUsage, `invalid kind "Email.send": kinds are `+pronto.KindRule)
	run(t, with(db, "queues", "pause", "Email")...).fails(t, ExitUsage, `queues pause: invalid queue name "Email"`)
	for _, k := range []string{"email-x.send", "a.b_c", "dlq.manual-retry"} {
		if !pronto.ValidKind(k) || !pronto.ValidOJSType(k) {
			t.Errorf("%q: Go and OJS rules differ", k)
		}
	}
}
