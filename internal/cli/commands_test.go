package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

type jobList struct {
	Jobs []*jobJSON `json:"jobs"`
	Next string     `json:"next"`
}

func getJob(t *testing.T, db []string, id string) *jobJSON {
	t.Helper()
	var j jobJSON
	run(t, with(db, "jobs", "get", id, "--json")...).ok(t).decode(t, &j)
	return &j
}

// TestJobLifecycle walks one job through enqueue, list, get, cancel, retry and delete on every store.
func TestJobLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		res := run(t, with(db, "enqueue", "email.send", "--args", `{"to":"ada@example.com"}`, "--queue", "email",
			"--priority", "7", "--max-attempts", "5", "--tag", "welcome,vip")...).ok(t)
		id := strings.TrimSpace(res.stdout)
		if _, err := parseJobID(id); err != nil || strings.Contains(id, "\n") {
			t.Fatalf("enqueue should print only the new job's id:\n%s", res)
		}

		// jobs list: the table and the JSON both show it, with its fields.
		table := run(t, with(db, "jobs", "list")...).ok(t).stdout
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") {
			t.Fatalf("expected a header and one row:\n%s", table)
		}
		for _, want := range []string{id, "email.send", "email", "available", "0/5", "7"} {
			if !strings.Contains(lines[1], want) {
				t.Fatalf("row lacks %q:\n%s", want, table)
			}
		}
		var list jobList
		run(t, with(db, "jobs", "list", "--json")...).ok(t).decode(t, &list)
		if len(list.Jobs) != 1 || list.Jobs[0].ID != id || list.Next != "" {
			t.Fatalf("jobs list --json: %+v", list)
		}

		// jobs get: the args are stored as a one-element OJS array.
		j := getJob(t, db, id)
		if j.Kind != "email.send" || j.Queue != "email" || j.State != pronto.StateAvailable || j.Priority != 7 ||
			j.MaxAttempts != 5 || j.Attempt != 0 || !slices.Equal(j.Tags, []string{"welcome", "vip"}) {
			t.Fatalf("unexpected job: %+v", j)
		}
		if compactJSON(j.Args) != `[{"to":"ada@example.com"}]` {
			t.Fatalf("args = %s, want the object wrapped in an array", j.Args)
		}
		text := run(t, with(db, "jobs", "get", strings.ToUpper(id))...).ok(t).stdout
		for _, want := range []string{"ID:           " + id, "State:        available", "Attempt:      0 of 5", `Args:         [{"to":"ada@example.com"}]`} {
			if !strings.Contains(text, want) {
				t.Fatalf("jobs get lacks %q:\n%s", want, text)
			}
		}

		// cancel, then cancelling again is refused; retry brings it back.
		res = run(t, with(db, "jobs", "cancel", id)...).ok(t)
		if res.stdout != "job "+id+" cancelled\n" {
			t.Fatalf("cancel output:\n%s", res)
		}
		if j := getJob(t, db, id); j.State != pronto.StateCancelled || j.CompletedAt == nil {
			t.Fatalf("after cancel: %+v", j)
		}
		run(t, with(db, "jobs", "cancel", id)...).fails(t, ExitError, "cannot cancel job "+id+": it is already cancelled")
		run(t, with(db, "jobs", "list", "--state", "available")...).ok(t)
		var avail jobList
		run(t, with(db, "jobs", "list", "--state", "available", "--json")...).ok(t).decode(t, &avail)
		if len(avail.Jobs) != 0 {
			t.Fatalf("a cancelled job is listed as available: %+v", avail)
		}

		var retried jobJSON
		run(t, with(db, "jobs", "retry", id, "--json")...).ok(t).decode(t, &retried)
		if retried.ID != id || retried.State != pronto.StateAvailable || retried.Attempt != 0 {
			t.Fatalf("after retry: %+v", retried)
		}
		run(t, with(db, "jobs", "retry", id)...).fails(t, ExitError, "cannot retry job "+id+": it is available")

		// delete, after which the job is not found (exit 3) by every command.
		res = run(t, with(db, "jobs", "delete", id)...).ok(t)
		if res.stdout != "job "+id+" deleted (it was available)\n" {
			t.Fatalf("delete output:\n%s", res)
		}
		for _, cmd := range []string{"get", "cancel", "retry", "delete"} {
			run(t, with(db, "jobs", cmd, id)...).fails(t, ExitNotFound, "job "+id+" not found")
		}
		res = run(t, with(db, "jobs", "list")...).ok(t)
		if res.stdout != "" || !strings.Contains(res.stderr, "no jobs match") {
			t.Fatalf("empty list:\n%s", res)
		}
	})
}

// TestEnqueueArgsAndOptions checks how --args becomes the job's OJS args and how options are applied.
func TestEnqueueArgsAndOptions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		enqueue := func(args ...string) *jobJSON {
			t.Helper()
			var j jobJSON
			runWith(t, runOpts{stdin: `{"from": "stdin"}`}, with(db, append([]string{"enqueue"}, append(args, "--json")...)...)...).ok(t).decode(t, &j)
			return &j
		}
		cases := []struct {
			args []string
			want string
		}{
			{[]string{"a.b"}, `[{}]`},
			{[]string{"a.b", "--args", ` { "x" : 1 } `}, `[{"x":1}]`},
			{[]string{"a.b", "--args", `[1, "two", {"three": 3}]`}, `[1,"two",{"three":3}]`},
			{[]string{"a.b", "--args", `[]`}, `[]`},
			{[]string{"a.b", "--args", `"hello"`}, `["hello"]`},
			{[]string{"a.b", "--args", `-`}, `[{"from":"stdin"}]`},
		}
		for _, c := range cases {
			if j := enqueue(c.args...); compactJSON(j.Args) != c.want {
				t.Errorf("enqueue %q: args %s, want %s", c.args, j.Args, c.want)
			}
		}
		file := filepath.Join(t.TempDir(), "args.json")
		if err := os.WriteFile(file, []byte(`{"from": "file"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if j := enqueue("a.b", "--args", "@"+file); compactJSON(j.Args) != `[{"from":"file"}]` {
			t.Errorf("--args @file: %s", j.Args)
		}

		// Flags before the kind, negative priority, delay, meta, id.
		id := "01900000-0000-7000-8000-0000000000aa"
		j := enqueue("--queue", "low", "--priority", "-100", "report.build", "--delay", "1h", "--meta", `{"tenant":"acme"}`,
			"--id", id, "--timeout", "90s")
		if j.ID != id || j.Queue != "low" || j.Priority != -100 || j.State != pronto.StateScheduled ||
			compactJSON(j.Meta) != `{"tenant":"acme"}` || j.Timeout != "PT1M30S" {
			t.Fatalf("enqueue with options: %+v", j)
		}
		if d := time.Until(*j.ScheduledAt); d < 59*time.Minute || d > time.Hour {
			t.Fatalf("--delay 1h scheduled the job %s from now", d)
		}
		run(t, with(db, "enqueue", "report.build", "--id", id)...).fails(t, ExitError, "a job with id "+id+" already exists")

		// OJS's named priority levels.
		for name, want := range map[string]int{"high": 10, "LOW": -10, "normal": 0} {
			if j := enqueue("a.b", "--priority", name); j.Priority != want {
				t.Fatalf("--priority %s: priority %d, want %d", name, j.Priority, want)
			}
		}

		at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		j = enqueue("a.b", "--at", at.Format(time.RFC3339))
		if j.State != pronto.StateScheduled || !j.ScheduledAt.Equal(at) {
			t.Fatalf("--at: %+v (scheduled %v, want %v)", j, j.ScheduledAt, at)
		}
		pending := enqueue("a.b", "--pending")
		if pending.State != pronto.StatePending {
			t.Fatalf("--pending: state %s", pending.State)
		}
		if res := run(t, with(db, "jobs", "activate", pending.ID)...).ok(t); res.stdout != "job "+pending.ID+" activated: now available\n" {
			t.Fatalf("activate:\n%s", res)
		}
		if j := getJob(t, db, pending.ID); j.State != pronto.StateAvailable {
			t.Fatalf("after activate: %+v", j)
		}
		run(t, with(db, "jobs", "activate", pending.ID)...).fails(t, ExitError, "it is available (only pending jobs can be activated)")

		// Refused input: exit 2, nothing stored.
		var before jobList
		run(t, with(db, "jobs", "list", "--json", "--limit", "10000")...).ok(t).decode(t, &before)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"Email.Send"}, `invalid kind "Email.Send"`},
			{[]string{"a.b", "--args", `{"x":`}, "--args is not valid JSON"},
			{[]string{"a.b", "--args", `{} {}`}, "--args has text after its JSON value"},
			{[]string{"a.b", "--args", ``}, "--args is empty"},
			{[]string{"a.b", "--queue", "Bad Queue"}, `invalid queue name "Bad Queue"`},
			{[]string{"a.b", "--priority", "101"}, "--priority: priority 101: must be between -100 and 100"},
			{[]string{"a.b", "--priority", "urgent"}, "one of high, normal, low"},
			{[]string{"a.b", "--priority", "x"}, `invalid value "x" for flag --priority`},
			{[]string{"a.b", "--delay", "1m", "--at", "2030-01-01T00:00:00Z"}, "give --delay or --at, not both"},
			{[]string{"a.b", "--at", "tomorrow"}, `--at "tomorrow"`},
			{[]string{"a.b", "--meta", `[1]`}, "--meta must be a JSON object"},
			{[]string{"a.b", "--meta", `null`}, "--meta must be a JSON object"},
			{[]string{"a.b", "--meta", `{} {}`}, "--meta has text after its JSON object"},
			// Not rewritten to U+FFFD by a decoder: refused, as in --args.
			{[]string{"a.b", "--args", "{\"k\":\"x\xffy\"}"}, "args[0].k: string is not valid UTF-8"},
			{[]string{"a.b", "--meta", "{\"k\":\"x\xffy\"}"}, "meta.k: string is not valid UTF-8"},
			{[]string{"a.b", "--meta", `{"k":"\u0000"}`}, "meta.k: string contains a NUL character"},
			{[]string{"a.b", "--id", "123"}, `invalid job id "123"`},
			{[]string{"a.b", "--args", "@/does/not/exist.json"}, "/does/not/exist.json"},
			{[]string{"a.b", "extra"}, `unexpected argument "extra"`},
			{[]string{}, "missing argument"},
		} {
			run(t, with(db, append([]string{"enqueue"}, c.args...)...)...).fails(t, ExitUsage, c.want)
		}
		var after jobList
		run(t, with(db, "jobs", "list", "--json", "--limit", "10000")...).ok(t).decode(t, &after)
		if len(after.Jobs) != len(before.Jobs) {
			t.Fatalf("refused enqueues stored jobs: %d before, %d after", len(before.Jobs), len(after.Jobs))
		}
	})
}

// TestEnqueueMetaKeepsNumbers: --meta is stored as given, so an integer beyond float64's 53 bits is
// not rounded (as in --args).
func TestEnqueueMetaKeepsNumbers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		var j jobJSON
		run(t, with(db, "enqueue", "a.b", "--json",
			"--args", `{"order_id":9007199254740993}`, "--meta", ` {"order_id": 9007199254740993} `)...).ok(t).decode(t, &j)
		if got := compactJSON(j.Args); got != `[{"order_id":9007199254740993}]` {
			t.Fatalf("args changed: %s", got)
		}
		if got := compactJSON(j.Meta); got != `{"order_id":9007199254740993}` {
			t.Fatalf("--meta {\"order_id\":9007199254740993} was stored as %s", got)
		}
	})
}

// TestJobsListFiltersAndPages checks filters and that following the cursor visits every job once.
func TestJobsListFiltersAndPages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		var ids []string
		for i, spec := range [][2]string{{"email.send", "email"}, {"email.send", "email"}, {"image.resize", "media"},
			{"report.build", "reports"}, {"email.send", "bulk"}} {
			res := run(t, with(db, "enqueue", spec[0], "--queue", spec[1], "--args", `{"n":`+string(rune('0'+i))+`}`)...).ok(t)
			ids = append(ids, strings.TrimSpace(res.stdout))
		}
		run(t, with(db, "jobs", "cancel", ids[1])...).ok(t)

		list := func(args ...string) []string {
			t.Helper()
			var l jobList
			run(t, with(db, append(append([]string{"jobs", "list"}, args...), "--json")...)...).ok(t).decode(t, &l)
			var out []string
			for _, j := range l.Jobs {
				out = append(out, j.ID)
			}
			return out
		}
		if got, want := list(), []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; !slices.Equal(got, want) {
			t.Errorf("default order should be newest first: got %v want %v", got, want)
		}
		if got := list("--asc"); !slices.Equal(got, ids) {
			t.Errorf("--asc: got %v want %v", got, ids)
		}
		if got, want := list("--kind", "email.send", "--asc"), []string{ids[0], ids[1], ids[4]}; !slices.Equal(got, want) {
			t.Errorf("--kind: got %v want %v", got, want)
		}
		if got, want := list("--queue", "media", "--queue", "reports", "--asc"), []string{ids[2], ids[3]}; !slices.Equal(got, want) {
			t.Errorf("--queue twice: got %v want %v", got, want)
		}
		if got, want := list("--queue", "media,reports", "--asc"), []string{ids[2], ids[3]}; !slices.Equal(got, want) {
			t.Errorf("--queue a,b: got %v want %v", got, want)
		}
		if got, want := list("--state", "cancelled"), []string{ids[1]}; !slices.Equal(got, want) {
			t.Errorf("--state cancelled: got %v want %v", got, want)
		}
		if got, want := list("--state", "available", "--kind", "email.send", "--asc"), []string{ids[0], ids[4]}; !slices.Equal(got, want) {
			t.Errorf("--state and --kind: got %v want %v", got, want)
		}

		// Pages of two, following the cursor, newest first.
		var seen []string
		cursor := ""
		for page := 0; ; page++ {
			args := with(db, "jobs", "list", "--limit", "2", "--json")
			if cursor != "" {
				args = append(args, "--cursor", cursor)
			}
			var l jobList
			run(t, args...).ok(t).decode(t, &l)
			for _, j := range l.Jobs {
				seen = append(seen, j.ID)
			}
			if l.Next == "" {
				break
			}
			if page > 5 {
				t.Fatal("the cursor never ends")
			}
			cursor = l.Next
		}
		if want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; !slices.Equal(seen, want) {
			t.Fatalf("paging visited %v, want %v", seen, want)
		}
		// The table says how to get the next page.
		res := run(t, with(db, "jobs", "list", "--limit", "2")...).ok(t)
		if !strings.Contains(res.stderr, "--cursor "+ids[3]) || strings.Count(res.stdout, "\n") != 3 {
			t.Fatalf("a full page should name the next cursor:\n%s", res)
		}

		run(t, with(db, "jobs", "list", "--state", "done")...).fails(t, ExitUsage, `unknown state "done"`)
		run(t, with(db, "jobs", "list", "--limit", "0")...).fails(t, ExitUsage, "--limit 0")
		run(t, with(db, "jobs", "list", "--cursor", "abc")...).fails(t, ExitUsage, `--cursor "abc" is not a job id`)
		run(t, with(db, "jobs", "list", "extra")...).fails(t, ExitUsage, `unexpected argument "extra"`)
	})
}

type queueList struct {
	Queues []queueJSON `json:"queues"`
}

func queues(t *testing.T, db []string) map[string]queueJSON {
	t.Helper()
	var l queueList
	run(t, with(db, "queues", "list", "--json")...).ok(t).decode(t, &l)
	m := map[string]queueJSON{}
	for _, q := range l.Queues {
		m[q.Name] = q
	}
	return m
}

type echoArgs struct {
	Msg string `json:"msg"`
}

func (echoArgs) Kind() string { return "test.echo" }

// TestQueuesPauseResume pauses a queue, shows that a running client does not work it, and resumes it.
// It also proves that args given to 'enqueue' reach a typed Go worker.
func TestQueuesPauseResume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db []string) {
		ctx := context.Background()
		res := run(t, with(db, "queues", "list")...).ok(t)
		if res.stdout != "" || !strings.Contains(res.stderr, "no queues yet") {
			t.Fatalf("no queues:\n%s", res)
		}
		if res := run(t, with(db, "queues", "pause", "work")...).ok(t); res.stdout != "queue work paused\n" {
			t.Fatalf("pause output:\n%s", res)
		}
		if q := queues(t, db)["work"]; !q.Paused || q.Total != 0 {
			t.Fatalf("after pause: %+v", q)
		}

		// A client working the queue, on the same database.
		r := &runner{env: Env{SharedMemory: true}}
		fs := r.newFlagSet("", "").withDatabase()
		if err := fs.Parse(db); err != nil {
			t.Fatal(err)
		}
		d, err := r.open(ctx, openOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			return pronto.RecordResult(ctx, "echo: "+j.Args.Msg)
		}))
		client, err := pronto.NewClient(d.store, &pronto.Config{
			Queues: map[string]pronto.QueueConfig{"work": {MaxWorkers: 2}}, Workers: workers, PollInterval: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := client.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer client.Stop(ctx) //nolint:errcheck

		id := strings.TrimSpace(run(t, with(db, "enqueue", "test.echo", "--queue", "work", "--args", `{"msg":"hi"}`)...).ok(t).stdout)
		time.Sleep(500 * time.Millisecond)
		if j := getJob(t, db, id); j.State != pronto.StateAvailable {
			t.Fatalf("a job in a paused queue was worked: %+v", j)
		}
		if q := queues(t, db)["work"]; !q.Paused || q.Counts[pronto.StateAvailable] != 1 || q.Total != 1 {
			t.Fatalf("queues list while paused: %+v", q)
		}
		table := run(t, with(db, "queues", "list")...).ok(t).stdout
		if !strings.Contains(table, "work") || !strings.Contains(table, "paused") || !strings.HasPrefix(table, "QUEUE") {
			t.Fatalf("queues list table:\n%s", table)
		}

		if res := run(t, with(db, "queues", "resume", "work")...).ok(t); res.stdout != "queue work resumed\n" {
			t.Fatalf("resume output:\n%s", res)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			j := getJob(t, db, id)
			if j.State == pronto.StateCompleted {
				if compactJSON(j.Result) != `"echo: hi"` || j.Attempt != 1 {
					t.Fatalf("completed job: %+v (result %s)", j, j.Result)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the job was not worked after resume: %+v", j)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if q := queues(t, db)["work"]; q.Paused || q.Counts[pronto.StateCompleted] != 1 {
			t.Fatalf("after resume: %+v", q)
		}
		run(t, with(db, "queues", "pause", "Work!")...).fails(t, ExitUsage, `invalid queue name "Work!"`)
		run(t, with(db, "queues", "pause")...).fails(t, ExitUsage, "missing argument")
	})
}

// TestMigrate checks status, up, down and the refusal of other commands on a missing or outdated
// schema, on the stores that have one.
func TestMigrate(t *testing.T) {
	for _, b := range backends {
		if !b.migrated {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.setup(t)
			if b.name == "sqlite" {
				// No file yet: commands other than 'migrate up' say how to create it, and create nothing.
				path := strings.TrimPrefix(db[1], "sqlite:")
				run(t, with(db, "jobs", "list")...).fails(t, ExitError, "no database at "+path+"; create it with: pronto migrate up --database-url sqlite:"+path)
				run(t, with(db, "migrate", "status")...).fails(t, ExitError, "no database at")
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Fatalf("a read command created the database file (%v)", err)
				}
				run(t, with(db, "migrate", "down")...).fails(t, ExitError, "no database at")
			} else {
				status := run(t, with(db, "migrate", "status")...).ok(t).stdout
				if !strings.Contains(status, "pending") || !strings.Contains(status, "migrations pending; apply them with: pronto migrate up") {
					t.Fatalf("status of an empty schema:\n%s", status)
				}
				run(t, with(db, "queues", "list")...).fails(t, ExitError, "has no pronto schema yet; create it with: pronto migrate up")
				res := run(t, with(db, "migrate", "down")...).ok(t)
				if !strings.Contains(res.stdout, "nothing to roll back") {
					t.Fatalf("down on an empty schema:\n%s", res)
				}
			}

			up := run(t, with(db, "migrate", "up")...).ok(t).stdout
			applied := strings.Count(up, "applied 0")
			if applied == 0 || !strings.Contains(up, "is up to date") {
				t.Fatalf("migrate up:\n%s", up)
			}
			if again := run(t, with(db, "migrate", "up")...).ok(t).stdout; strings.Contains(again, "applied 0") || !strings.Contains(again, "is up to date") {
				t.Fatalf("a second migrate up should apply nothing:\n%s", again)
			}
			status := run(t, with(db, "migrate", "status")...).ok(t).stdout
			if strings.Contains(status, "pending") || strings.Count(status, "\n") != applied+2 || !strings.Contains(status, "up to date") {
				t.Fatalf("status after up:\n%s", status)
			}
			id := strings.TrimSpace(run(t, with(db, "enqueue", "a.b")...).ok(t).stdout)
			getJob(t, db, id)

			if applied > 1 {
				down := run(t, with(db, "migrate", "down")...).ok(t).stdout
				if strings.Count(down, "rolled back") != 1 {
					t.Fatalf("down rolls back one step by default:\n%s", down)
				}
				run(t, with(db, "jobs", "list")...).fails(t, ExitError, "is out of date (1 of")
				run(t, with(db, "migrate", "up")...).ok(t)
			}
			run(t, with(db, "migrate", "down", "--steps", "0")...).fails(t, ExitUsage, "--steps 0")
			run(t, with(db, "migrate", "down", "--all")...).fails(t, ExitError, "refusing to roll back") // it holds a job
			down := run(t, with(db, "migrate", "down", "--all", "--force")...).ok(t).stdout
			if strings.Count(down, "rolled back") != applied || !strings.Contains(down, "0 of") {
				t.Fatalf("down --all:\n%s", down)
			}
			status = run(t, with(db, "migrate", "status")...).ok(t).stdout
			if strings.Count(status, "pending") != applied+1 {
				t.Fatalf("status after down --all:\n%s", status)
			}
			run(t, with(db, "jobs", "get", id)...).fails(t, ExitError, "has no pronto schema yet")
			run(t, with(db, "migrate", "sideways")...).fails(t, ExitUsage, `unknown command "migrate sideways"`)
		})
	}
	t.Run("memory", func(t *testing.T) {
		for _, cmd := range []string{"up", "down", "status"} {
			res := run(t, "migrate", cmd, "--database-url", "memory:").ok(t)
			if !strings.Contains(res.stdout, "nothing to migrate") {
				t.Fatalf("migrate %s on memory:\n%s", cmd, res)
			}
		}
	})
}

// TestUsageAndErrors checks help, exit codes and one-line error messages.
func TestUsageAndErrors(t *testing.T) {
	t.Parallel()
	res := run(t)
	if res.code != ExitUsage || !strings.Contains(res.stderr, "Commands:") || !strings.Contains(res.stderr, "pronto: no command given") {
		t.Fatalf("no arguments:\n%s", res)
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		res := run(t, args...).ok(t)
		for _, cmd := range []string{"demo", "enqueue", "jobs list", "jobs get", "jobs retry", "jobs cancel", "jobs activate",
			"jobs delete", "queues list", "queues pause", "queues resume", "migrate up", "migrate down", "migrate status", "version"} {
			if !strings.Contains(res.stdout, "  "+cmd+" ") {
				t.Fatalf("%v does not list %q:\n%s", args, cmd, res)
			}
		}
	}
	// Every command documents itself and its flags, with -h, --help or 'help CMD'.
	for _, cmd := range [][]string{{"demo"}, {"enqueue"}, {"version"}, {"jobs", "list"}, {"jobs", "get"}, {"jobs", "retry"},
		{"jobs", "cancel"}, {"jobs", "activate"}, {"jobs", "delete"}, {"queues", "list"}, {"queues", "pause"}, {"queues", "resume"},
		{"migrate", "up"}, {"migrate", "down"}, {"migrate", "status"}} {
		for _, h := range []string{"-h", "--help"} {
			res := run(t, append(slices.Clone(cmd), h)...).ok(t)
			if !strings.HasPrefix(res.stdout, "Usage: pronto "+strings.Join(cmd, " ")) || res.stderr != "" {
				t.Fatalf("%v %s:\n%s", cmd, h, res)
			}
			if cmd[0] != "version" && !strings.Contains(res.stdout, "--database-url URL") {
				t.Fatalf("%v %s does not document --database-url:\n%s", cmd, h, res)
			}
		}
		if res := run(t, append([]string{"help"}, cmd...)...).ok(t); !strings.HasPrefix(res.stdout, "Usage: pronto "+strings.Join(cmd, " ")) {
			t.Fatalf("help %v:\n%s", cmd, res)
		}
	}
	if res := run(t, "jobs", "list", "--help").ok(t); !strings.Contains(res.stdout, "--state STATES") || !strings.Contains(res.stdout, "(default 50)") {
		t.Fatalf("jobs list --help:\n%s", res)
	}
	if res := run(t, "jobs", "--help").ok(t); !strings.Contains(res.stdout, "Subcommands:") || !strings.Contains(res.stdout, "  retry ") {
		t.Fatalf("jobs --help:\n%s", res)
	}
	res = run(t, "jobs")
	if res.code != ExitUsage || !strings.Contains(res.stderr, "pronto: jobs: no subcommand given") {
		t.Fatalf("jobs without a subcommand:\n%s", res)
	}

	run(t, "frobnicate").fails(t, ExitUsage, `unknown command "frobnicate"`)
	run(t, "jobs", "frob").fails(t, ExitUsage, `unknown command "jobs frob"`)
	run(t, "help", "frob").fails(t, ExitUsage, `unknown command "frob"`)
	res = run(t, "jobs", "list", "--bogus").fails(t, ExitUsage, "jobs list: unknown flag --bogus")
	if !strings.Contains(res.stderr, "Run 'pronto jobs list --help' for usage.") {
		t.Fatalf("usage errors point to the command's help:\n%s", res)
	}
	run(t, "--bogus").fails(t, ExitUsage, "unknown flag --bogus")
	run(t, "jobs", "list", "--limit").fails(t, ExitUsage, "flag --limit needs a value")
	run(t, "jobs", "get").fails(t, ExitUsage, "missing argument (usage: pronto jobs get ID [flags])")
	run(t, "jobs", "get", "a", "b").fails(t, ExitUsage, `unexpected argument "b"`)
	run(t, "jobs", "get", "not-an-id", "--database-url", "memory:").fails(t, ExitUsage, `invalid job id "not-an-id"`)
	run(t, "jobs", "get", "01900000-0000-7000-8000-000000000001", "--database-url", "memory:").
		fails(t, ExitNotFound, "job 01900000-0000-7000-8000-000000000001 not found")

	// Database URLs.
	run(t, "jobs", "list", "--database-url", "mysql://x").fails(t, ExitUsage, `unsupported database URL "mysql://x" (scheme "mysql"): use postgres://`)
	run(t, "--database-url", "mysql://x", "jobs", "list").fails(t, ExitUsage, `unsupported database URL "mysql://x"`)
	run(t, "jobs", "list", "--database-url", "sqlite:").fails(t, ExitUsage, "names no file")
	run(t, "jobs", "list", "--database-url", "mongodb://u:hunter2@h").fails(t, ExitUsage, "mongodb://u:xxxxx@h")
	res = run(t, "jobs", "list", "--database-url", "redis://u:hunter2@[::1").fails(t, ExitUsage, "invalid Redis URL")
	if strings.Contains(res.stderr, "hunter2") {
		t.Fatalf("the password leaked:\n%s", res)
	}
	res = run(t, "jobs", "list", "--database-url", "postgres://u:hunter2@[::1").fails(t, ExitUsage, "invalid PostgreSQL URL")
	if strings.Contains(res.stderr, "hunter2") {
		t.Fatalf("the password leaked:\n%s", res)
	}
	run(t, "jobs", "list", "--database-url", "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "p.db")).
		fails(t, ExitError, "does not exist")
	run(t, "jobs", "list", "--database-url", "memory:", "--schema", "x").fails(t, ExitUsage, "--schema applies to PostgreSQL only")
	run(t, "jobs", "list", "--database-url", "postgres://postgres@127.0.0.1:1/x", "--schema", "Bad-Name").
		fails(t, ExitUsage, `--schema "Bad-Name": postgres store: schema: "Bad-Name" is not a plain lowercase identifier`)

	// PostgreSQL that does not answer: one line, exit 1, within the connect timeout.
	start := time.Now()
	res = run(t, "queues", "list", "--database-url", "postgres://u:hunter2@127.0.0.1:1/db").
		fails(t, ExitError, "cannot connect to PostgreSQL at postgres://u:xxxxx@127.0.0.1:1/db: dial tcp 127.0.0.1:1")
	if strings.Contains(res.stderr, "hunter2") {
		t.Fatalf("the password leaked:\n%s", res)
	}
	if d := time.Since(start); d > connectTimeout+2*time.Second {
		t.Fatalf("giving up took %s", d)
	}

	// The environment variable selects the database; the flag wins over it.
	dir := t.TempDir()
	env := map[string]string{EnvDatabaseURL: "sqlite:" + filepath.Join(dir, "env.db")}
	runWith(t, runOpts{env: env}, "migrate", "up").ok(t)
	if _, err := os.Stat(filepath.Join(dir, "env.db")); err != nil {
		t.Fatalf("PRONTO_DATABASE_URL was not used: %v", err)
	}
	runWith(t, runOpts{env: env}, "jobs", "list", "--database-url", "mysql://x").fails(t, ExitUsage, "mysql")
	runWith(t, runOpts{env: map[string]string{EnvDatabaseURL: "oracle://x"}}, "jobs", "list").fails(t, ExitUsage, `"oracle://x"`)
}

func TestPostgresSchemaFlag(t *testing.T) {
	t.Parallel()
	db := backends[2].setup(t)
	run(t, "jobs", "list", "--database-url", db[1], "--schema", "Bad-Name").fails(t, ExitUsage, `--schema "Bad-Name"`)
	// The schema flag may also come before the command.
	run(t, "--database-url", db[1], "--schema", db[3], "migrate", "up").ok(t)
	run(t, with(db, "queues", "list")...).ok(t)
	// The migrate commands name the schema they report on.
	for _, cmd := range [][]string{{"migrate", "up"}, {"migrate", "status"}} {
		if out := run(t, with(db, cmd...)...).ok(t).stdout; !strings.Contains(out, " (schema "+db[3]+") is up to date: ") {
			t.Fatalf("%v does not name the schema %s:\n%s", cmd, db[3], out)
		}
	}
	// Another schema in the same database is a different, empty pronto.
	other := backends[2].setup(t)
	run(t, with(other, "queues", "list")...).fails(t, ExitError, "has no pronto schema yet; create it with: pronto migrate up --database-url")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		res := run(t, args...).ok(t)
		if !strings.HasPrefix(res.stdout, "pronto ") || !strings.Contains(res.stdout, "go1.") {
			t.Fatalf("%v:\n%s", args, res)
		}
	}
	run(t, "version", "extra").fails(t, ExitUsage, `unexpected argument "extra"`)
}

func TestJSONOutputIsStable(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "memory:json-test"}
	var raw map[string]json.RawMessage
	run(t, with(db, "enqueue", "a.b", "--json")...).ok(t).decode(t, &raw)
	for _, k := range []string{"id", "kind", "queue", "state", "args", "priority", "attempt", "max_attempts", "errors", "created_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("job JSON lacks %q: %v", k, raw)
		}
	}
	for _, k := range []string{"started_at", "completed_at", "worker_id", "result"} {
		if _, ok := raw[k]; ok {
			t.Errorf("job JSON has unset field %q", k)
		}
	}
}

// TestPostgresThatNeverAnswers connects to a port that accepts connections and never speaks: the
// command gives up after the connect timeout (5 s, or the URL's connect_timeout) with one line.
func TestPostgresThatNeverAnswers(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for _, c := range []struct {
		query string
		want  time.Duration
	}{{"", connectTimeout}, {"?connect_timeout=1", time.Second}} {
		start := time.Now()
		run(t, "jobs", "list", "--database-url", "postgres://u@"+l.Addr().String()+"/db"+c.query).
			fails(t, ExitError, "no answer within "+c.want.String()+" (is the server running and reachable?)")
		if d := time.Since(start); d < c.want || d > c.want+2*time.Second {
			t.Fatalf("gave up after %s, want about %s", d, c.want)
		}
	}
}
