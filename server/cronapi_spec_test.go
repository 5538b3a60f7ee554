package server

// The cron endpoints and scheduler against ojs-cron.md (and ojs-events.md), over HTTP, on the
// memory store and PostgreSQL.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// cronSpecStores are the stores the firing tests run on: memory and one durable store.
var cronSpecStores = []string{"memory", "postgres"}

// waitCronEvent polls the event log until an event of type typ (for cron name) is there, and
// returns the data of the first one.
func waitCronEvent(t *testing.T, e *ojsEnv, typ, name string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(ojsWait)
	for {
		r := e.must(200, "GET", "/ojs/v1/events?types=cron.*&limit=1000", nil)
		evs, _ := r.body["events"].([]any)
		for _, ev := range evs {
			m, _ := ev.(map[string]any)
			d, _ := m["data"].(map[string]any)
			if m["type"] == typ && d != nil && d["cron_name"] == name {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event for %s within %v: %s", typ, name, ojsWait, r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cronSkipScenario registers an every-second schedule with the default overlap policy (skip),
// takes its first job (so it stays active) and waits until the next occurrence is skipped. It
// returns the cron.triggered and cron.skipped event data.
func cronSkipScenario(t *testing.T, e *ojsEnv, name, queue string) (triggered, skipped map[string]any) {
	t.Helper()
	e.must(201, "POST", "/ojs/v1/cron", `{"name":"`+name+`","cron":"* * * * * *","type":"cron.spec",
		"args":[],"options":{"queue":"`+queue+`"}}`)
	e.fetchWhenDue(queue) // the first occurrence's job: active, never acked
	triggered = waitCronEvent(t, e, "cron.triggered", name)
	skipped = waitCronEvent(t, e, "cron.skipped", name)
	return triggered, skipped
}

// ojs-cron.md 2.2 lists options.meta ("Extensible key-value metadata passed to each triggered
// job") among a cron job's options: each fired job carries it, under the template's own meta
// (whose keys win), with options.metadata (the OpenAPI alias) merged under both.
func TestCronOptionsMetaReachesJobs(t *testing.T) {
	for _, kind := range cronSpecStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newOJSEnv(t, kind)
			r := e.must(201, "POST", "/ojs/v1/cron", `{"name":"meta-opt","cron":"* * * * * *","type":"cron.spec",
				"args":[],"meta":{"owner":"top"},"options":{"queue":"cronmeta",
				"meta":{"team":"billing","owner":"options"},"metadata":{"team":"alias","tier":"gold"}}}`)
			job, _ := e.fetchWhenDue("cronmeta")
			meta, _ := job["meta"].(map[string]any)
			want := map[string]string{"team": "billing", "owner": "top", "tier": "gold", "cron_name": "meta-opt"}
			for k, v := range want {
				if meta[k] != v {
					t.Errorf("fired job's meta.%s = %v, want %s: %v (registration answered %s)", k, meta[k], v, job["meta"], r.raw)
				}
			}
		})
	}
}

// options.meta is an enqueue's option too (ojs-cron.md 2.2: a cron job's options are the enqueue
// request's), and is checked as meta is.
func TestEnqueueOptionsMeta(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"cron.spec","args":[],"meta":{"a":1},"options":{"meta":{"a":2,"b":3}}}`)
	if r.status != 201 {
		t.Fatalf("enqueue: %d %s", r.status, r.raw)
	}
	meta, _ := jobOf(t, r)["meta"].(map[string]any)
	if meta["a"] != float64(1) || meta["b"] != float64(3) {
		t.Errorf("meta %v, want a from meta (1) and b from options.meta (3)", meta)
	}
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"cron.spec","args":[],"options":{"meta":["not","an","object"]}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	r = call(t, s, "POST", "/ojs/v1/jobs", `{"type":"cron.spec","args":[],"options":{"meta":{"_pronto":{}}}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
}

// ojs-cron.md 9.2: the reason of cron.skipped MUST be one of overlap_skip, disabled, dst_skip; an
// occurrence skipped by the overlap policy says overlap_skip.
func TestCronSkippedEventReason(t *testing.T) {
	for _, kind := range cronSpecStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newOJSEnv(t, kind)
			_, skipped := cronSkipScenario(t, e, "skip-reason", "cronreason")
			if skipped["reason"] != "overlap_skip" {
				t.Errorf("cron.skipped reason %q, want overlap_skip (ojs-cron.md 9.2): %v", skipped["reason"], skipped)
			}
		})
	}
}

// An occurrence the template's unique policy refused (overlap allowed, the first occurrence's job
// still holding the key) is reported with a reason ojs-cron.md 9.2 allows, overlap_skip, and
// pronto's unique_conflict: true telling it apart, existing_job_id naming the holder.
func TestCronSkippedByUniqueKeepsSpecReason(t *testing.T) {
	for _, kind := range cronSpecStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newOJSEnv(t, kind)
			e.must(201, "POST", "/ojs/v1/cron", `{"name":"skip-unique","cron":"* * * * * *","type":"cron.spec",
				"args":[],"overlap_policy":"allow","options":{"queue":"cronuniq",
				"unique":{"keys":["type","args"],"on_conflict":"reject"}}}`)
			job, _ := e.fetchWhenDue("cronuniq")
			skipped := waitCronEvent(t, e, "cron.skipped", "skip-unique")
			if skipped["reason"] != "overlap_skip" || skipped["unique_conflict"] != true {
				t.Errorf("cron.skipped of a unique conflict: %v, want reason overlap_skip and unique_conflict true", skipped)
			}
			if skipped["existing_job_id"] != job["id"] {
				t.Errorf("existing_job_id %v, want the key's holder %v", skipped["existing_job_id"], job["id"])
			}
		})
	}
}

// ojs-cron.md 2.2: last_run_at is "the most recent trigger". A skipped occurrence inserts no job
// and leaves it where the last trigger put it: a schedule that has skipped for days (a stuck
// previous job) does not look as if it fired a second ago.
func TestCronLastRunAtStaysOnSkip(t *testing.T) {
	for _, kind := range cronSpecStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newOJSEnv(t, kind)
			triggered, skipped := cronSkipScenario(t, e, "skip-lastrun", "cronlastrun")
			r := e.must(200, "GET", "/ojs/v1/cron/skip-lastrun", nil)
			c, _ := r.body["cron_job"].(map[string]any)
			last, _ := c["last_run_at"].(string)
			lt, err1 := time.Parse(time.RFC3339Nano, last)
			ft, err2 := time.Parse(time.RFC3339Nano, triggered["scheduled_at"].(string))
			if err1 != nil || err2 != nil {
				t.Fatalf("times: %v %v: %s", err1, err2, r.raw)
			}
			if !lt.Equal(ft) || c["run_count"] != float64(1) {
				t.Errorf("last_run_at %s, run_count %v: want the one trigger (%s); skipped from %v",
					last, c["run_count"], triggered["scheduled_at"], skipped["scheduled_at"])
			}
		})
	}
}

// ojs-cron.md 5.2 (CRON-17): on the night the clocks go back, a time in the repeated hour fires
// once, at the first reading, however the schedule names it: "*/30 1 * * *" as "0,30 1 * * *".
// A schedule with "*" in its hour still runs once per real hour.
func TestCronFallBackRepeatedHourOnce(t *testing.T) {
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// Fall back at 2:00 EDT -> 1:00 EST; the occurrences strictly after from and before to.
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, loc)
	to := from.Add(5 * time.Hour)
	fires := func(expr string) string {
		s, err := pronto.ParseCron(expr, "America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for at := s.Next(from); !at.IsZero() && at.Before(to); at = s.Next(at) {
			out = append(out, at.In(loc).Format("15:04 MST"))
		}
		return strings.Join(out, ",")
	}
	for expr, want := range map[string]string{
		"0,30 1 * * *":   "01:00 EDT,01:30 EDT",
		"*/30 1 * * *":   "01:00 EDT,01:30 EDT",
		"*/20 0-3 * * *": "00:20 EDT,00:40 EDT,01:00 EDT,01:20 EDT,01:40 EDT,02:00 EST,02:20 EST,02:40 EST,03:00 EST,03:20 EST,03:40 EST",
		"0 * * * *":      "01:00 EDT,01:00 EST,02:00 EST,03:00 EST",
		"0 */2 * * *":    "02:00 EST",
	} {
		if got := fires(expr); got != want {
			t.Errorf("%q on the fall-back night: %s, want %s", expr, got, want)
		}
	}
}

// ojs-cron.md 8.2 (CRON-S06): GET /ojs/v1/cron?enabled= filters by enabled status before the
// paging, so totals and cursors count the filtered list; any other value is 400.
func TestCronListEnabledFilter(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for _, reg := range []string{`"name":"a-on","enabled":true`, `"name":"b-off","enabled":false`,
		`"name":"c-on"`, `"name":"d-off","enabled":false`, `"name":"e-on"`} {
		if r := call(t, s, "POST", "/ojs/v1/cron", `{`+reg+`,"cron":"0 9 * * *","type":"cron.spec"}`); r.status != 201 {
			t.Fatalf("register %s: %d %s", reg, r.status, r.raw)
		}
	}
	names := func(path string) (string, map[string]any) {
		r := call(t, s, "GET", path, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.raw)
		}
		var out []string
		list, _ := r.body["cron_jobs"].([]any)
		for _, c := range list {
			out = append(out, c.(map[string]any)["name"].(string))
		}
		p, _ := r.body["pagination"].(map[string]any)
		return strings.Join(out, ","), p
	}
	if got, p := names("/ojs/v1/cron?enabled=true"); got != "a-on,c-on,e-on" || p["total"] != float64(3) {
		t.Errorf("?enabled=true: %s (pagination %v)", got, p)
	}
	if got, _ := names("/ojs/v1/cron?enabled=false"); got != "b-off,d-off" {
		t.Errorf("?enabled=false: %s", got)
	}
	got, p := names("/ojs/v1/cron?enabled=true&limit=2")
	if got != "a-on,c-on" || p["has_more"] != true || p["next_cursor"] != "c-on" {
		t.Fatalf("?enabled=true&limit=2: %s (pagination %v)", got, p)
	}
	if got, p := names("/ojs/v1/cron?enabled=true&limit=2&cursor=c-on"); got != "e-on" || p["has_more"] != false {
		t.Errorf("second page: %s (pagination %v)", got, p)
	}
	if got, _ := names("/ojs/v1/cron"); got != "a-on,b-off,c-on,d-off,e-on" {
		t.Errorf("unfiltered: %s", got)
	}
	for _, bad := range []string{"yes", "1", "", "TRUE"} {
		r := call(t, s, "GET", "/ojs/v1/cron?enabled="+bad, nil)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
	}
}

// ojs-cron.md 3.5: syntactically malformed expressions MUST be refused (400 invalid_request). An
// empty list item ("1,,5", "1,5,") is one.
func TestCronMalformedListRefused(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	for i, expr := range []string{"0 9 1,,5 * *", "0,,30 9 * * *", "0 9 * * 1,5,", ",0 9 * * *", "*/10, * * * * *"} {
		body := `{"name":"bad-list-` + string(rune('a'+i)) + `","cron":"` + expr + `","type":"cron.spec"}`
		r := call(t, s, "POST", "/ojs/v1/cron", body)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if d, _ := r.body["error"].(map[string]any)["details"].(map[string]any); d["field"] != "expression" {
			t.Errorf("%q: field %v, want expression", expr, d["field"])
		}
	}
	if r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"good-list","cron":"0,30 9 1,15 * 1,5","type":"cron.spec"}`); r.status != 201 {
		t.Errorf("a well-formed list: %d %s", r.status, r.raw)
	}
}

// A guard: ojs-cron.md 3.1/3.4/3.5/4 and 5.1 over HTTP: 7 is Sunday, names in any case,
// out-of-range values, step 0, empty and 7-field expressions, fixed offsets and abbreviations
// refused as 400 invalid_request naming the field; system-managed fields ignored (CRON-06).
func TestCronRegistrationValidation(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	bad := map[string]string{
		`"cron":"60 9 * * *"`: "expression", `"cron":"0 9 32 * *"`: "expression", `"cron":"0 9 * 13 *"`: "expression",
		`"cron":"*/0 * * * *"`: "expression", `"cron":"5-1 * * * *"`: "expression", `"cron":"0 9 * * * * *"`: "expression",
		`"cron":"0 0 30 2 *"`:                    "expression",
		`"cron":"0 9 * * *","timezone":"+05:00"`: "timezone", `"cron":"0 9 * * *","timezone":"EST"`: "timezone",
		`"cron":"0 9 * * *","timezone":"UTC+5"`: "timezone", `"cron":"0 9 * * *","timezone":"Etc/GMT+5"`: "timezone",
	}
	i := 0
	for frag, field := range bad {
		i++
		r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"bad-`+string(rune('a'+i))+`",`+frag+`,"type":"cron.spec"}`)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if d, _ := r.body["error"].(map[string]any)["details"].(map[string]any); d["field"] != field {
			t.Errorf("%s: field %v, want %s", frag, d["field"], field)
		}
	}
	r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"good","cron":"0 9 * jan-MAR Sun-sat","type":"cron.spec",
		"last_run_at":"2020-01-01T00:00:00Z","next_run_at":"2020-01-01T00:00:00Z","run_count":7,"created_at":"2020-01-01T00:00:00Z"}`)
	if r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.raw)
	}
	c := r.body["cron_job"].(map[string]any)
	if c["run_count"] != float64(0) || c["last_run_at"] != nil || strings.HasPrefix(c["next_run_at"].(string), "2020") {
		t.Errorf("system-managed fields taken from the request: %s", r.raw)
	}
	sun, err := pronto.ParseCron("0 9 * * 7", "")
	if err != nil {
		t.Fatal(err)
	}
	if at := sun.Next(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)); at.Weekday() != time.Sunday {
		t.Errorf("7 is not Sunday: %v", at)
	}
}

// cronCreateProbe is a memory store that reports, from within CronCreate, whether the schedule it
// has just stored is due at its next occurrence: the window in which a second write (a pause after
// the create) would come too late. Its pauses fail, as a lost connection would make them.
type cronCreateProbe struct {
	*memory.Store
	dueAfterCreate atomic.Int32
	creates        atomic.Int32
}

func (s *cronCreateProbe) CronCreate(ctx context.Context, c *store.CronSchedule) error {
	if err := s.Store.CronCreate(ctx, c); err != nil {
		return err
	}
	s.creates.Add(1)
	due, err := s.Store.CronDue(ctx, c.NextRunAt, 100)
	if err != nil {
		return err
	}
	for _, d := range due {
		if d.Name == c.Name {
			s.dueAfterCreate.Add(1)
		}
	}
	return nil
}

func (s *cronCreateProbe) CronSetEnabled(context.Context, string, bool, time.Time) (*store.CronSchedule, error) {
	return nil, context.DeadlineExceeded
}

// ojs-cron.md 2.2: a cron job registered with "enabled": false does not fire. It is stored paused in
// the one write that creates it: it is never due, not even between two writes, and needs no
// second write that could fail after the create.
func TestCronDisabledRegistrationNeverDue(t *testing.T) {
	st := &cronCreateProbe{Store: memory.New()}
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"born-off","cron":"* * * * * *","type":"cron.spec",
		"args":[],"options":{"queue":"cronoff"},"enabled":false}`)
	if r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.raw)
	}
	if n := st.creates.Load(); n != 1 {
		t.Fatalf("%d creates, want 1", n)
	}
	if n := st.dueAfterCreate.Load(); n != 0 {
		t.Errorf("a registration sent with enabled:false was due at its next occurrence once created")
	}
	c := r.body["cron_job"].(map[string]any)
	if c["enabled"] != false || c["next_run_at"] != nil {
		t.Errorf("registered as %s, want enabled false and no next run", r.raw)
	}
	r = call(t, s, "GET", "/ojs/v1/cron/born-off", nil)
	if c, _ := r.body["cron_job"].(map[string]any); c["enabled"] != false {
		t.Errorf("stored as %s, want enabled false", r.raw)
	}
	// An enabled registration is due at its next occurrence: the probe sees what it should.
	if r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"born-on","cron":"* * * * * *","type":"cron.spec"}`); r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.raw)
	}
	if n := st.dueAfterCreate.Load(); n != 1 {
		t.Errorf("the probe saw %d due registrations, want 1 (born-on)", n)
	}
}

// A guard: cancel_previous (ojs-cron.md 6.1) cancels the active previous job and inserts the next,
// on memory and PostgreSQL; the cancelled job's late ack is refused.
func TestCronCancelPreviousOverHTTP(t *testing.T) {
	for _, kind := range cronSpecStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newOJSEnv(t, kind)
			e.must(201, "POST", "/ojs/v1/cron", `{"name":"cancel-prev","cron":"* * * * * *","type":"cron.spec",
				"args":[],"options":{"queue":"croncancel"},"overlap_policy":"cancel_previous"}`)
			j1, _ := e.fetchWhenDue("croncancel")
			j2, _ := e.fetchWhenDue("croncancel")
			if st := e.info(j1["id"].(string))["state"]; st != "cancelled" {
				t.Errorf("previous job %v: state %v, want cancelled", j1["id"], st)
			}
			if j2["id"] == j1["id"] {
				t.Fatalf("same job twice: %v", j1["id"])
			}
			checkErrorBody(t, e.do("POST", "/ojs/v1/workers/ack", `{"job_id":"`+j1["id"].(string)+`","worker_id":"w-ojs"}`), 409, "")
		})
	}
}
