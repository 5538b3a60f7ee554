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

// TestJobsListByTag: --tag lists the jobs that have every given tag.
func TestJobsListByTag(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		both := strings.TrimSpace(run(t, with(db, "enqueue", "a.b", "--tag", "vip,eu")...).ok(t).stdout)
		eu := strings.TrimSpace(run(t, with(db, "enqueue", "a.b", "--tag", "eu")...).ok(t).stdout)
		run(t, with(db, "enqueue", "a.b")...).ok(t)
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"--tag", "vip"}, []string{both}},
			{[]string{"--tag", "eu", "--asc"}, []string{both, eu}},
			{[]string{"--tag", "eu,vip"}, []string{both}},
			{[]string{"--tag", "eu", "--tag", "vip"}, []string{both}},
			{[]string{"--tag", "none"}, nil},
		} {
			var list jobList
			run(t, with(db, append([]string{"jobs", "list", "--json"}, c.args...)...)...).ok(t).decode(t, &list)
			var got []string
			for _, j := range list.Jobs {
				got = append(got, j.ID)
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("%v: got %v, want %v", c.args, got, c.want)
			}
		}
	})
}
