package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// mustCall sends a request and fails unless the status is want; every answer carries a request id.
func mustCall(t *testing.T, s *Server, want int, method, path string, body any, hdr ...string) *response {
	t.Helper()
	r := call(t, s, method, path, body, hdr...)
	if r.status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.raw)
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Fatalf("%s %s: no X-Request-Id", method, path)
	}
	return r
}

func enqueueJob(t *testing.T, s *Server, body string) string {
	t.Helper()
	r := mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs", body)
	return r.body["job"].(map[string]any)["id"].(string)
}

// TestProgressAPI: PUT and GET /ojs/v1/jobs/{id}/progress on every store.
func TestProgressAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"prog"}}`)
			path := "/ojs/v1/jobs/" + id + "/progress"

			r := mustCall(t, s, 200, "GET", path, nil)
			if r.body["progress"] != nil || r.body["data"] != nil || r.body["state"] != "available" || r.body["job_id"] != id {
				t.Fatalf("progress before any report: %s", r.raw)
			}
			// Not active: accepted and ignored.
			mustCall(t, s, 204, "PUT", path, `{"progress":0.5}`)
			if r := mustCall(t, s, 200, "GET", path, nil); r.body["progress"] != nil {
				t.Fatalf("a report on a job that is not active was recorded: %s", r.raw)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"prog"}, "worker_id": "w1"})
			mustCall(t, s, 204, "PUT", path, `{"progress":1.7,"data":{"rows":14000}}`)
			r = mustCall(t, s, 200, "GET", path, nil)
			if r.body["progress"] != 1.0 || r.body["data"].(map[string]any)["rows"] != 14000.0 || r.body["updated_at"] == nil {
				t.Fatalf("progress after a report (clamped to 1): %s", r.raw)
			}
			if h := r.header.Get("X-OJS-Progress"); h != "1" {
				t.Fatalf("X-OJS-Progress %q", h)
			}
			if r.header.Get("Cache-Control") != "no-cache" || r.header.Get("Last-Modified") == "" {
				t.Fatalf("headers: %v", r.header)
			}
			job := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
			if job["progress"] != 1.0 || job["progress_data"].(map[string]any)["rows"] != 14000.0 {
				t.Fatalf("the job view lacks the progress: %v", job)
			}

			checkErrorBody(t, call(t, s, "PUT", path, `{}`), 400, CodeInvalidRequest)
			bad := call(t, s, "PUT", path, `{"progress":"half"}`)
			checkErrorBody(t, bad, 400, CodeInvalidRequest)
			if e := bad.body["error"].(map[string]any); e["details"].(map[string]any)["field"] != "progress" ||
				strings.Contains(e["message"].(string), "float64") {
				t.Fatalf("a progress of the wrong type: %s", bad.raw)
			}
			checkErrorBody(t, call(t, s, "PUT", path, `{"data":[1,2]}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "PUT", path, `not json`), 400, CodeInvalidPayload)
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/jobs/019539a4-0000-7000-8000-000000000000/progress", `{"progress":0.1}`), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/not-an-id/progress", nil), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", path, `{"progress":0.1}`), 405, CodeMethodNotAllowed)
		})
	}
}

// TestAdminAPI: the /ojs/v1/admin endpoints, dead-letter statistics and readiness on every store.
func TestAdminAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			dead := enqueueJob(t, s, `{"type":"mail.send","args":[],"options":{"queue":"q1","retry":{"max_attempts":1}}}`)
			kept := enqueueJob(t, s, `{"type":"mail.bounce","args":[],"options":{"queue":"q1"}}`)
			other := enqueueJob(t, s, `{"type":"report.build","args":[],"options":{"queue":"q2"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"q1"}, "worker_id": "w1", "count": 1})
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+dead+`","worker_id":"w1","error":{"type":"SMTPError","message":"refused"}}`)

			// Queues.
			r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues", nil)
			items := r.body["items"].([]any)
			if len(items) != 2 || r.body["pagination"].(map[string]any)["total"] != 2.0 {
				t.Fatalf("admin queues: %s", r.raw)
			}
			q1 := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/q1", nil).body
			if q1["state"] != "active" || q1["counts"].(map[string]any)["discarded"] != 1.0 || q1["counts"].(map[string]any)["available"] != 1.0 {
				t.Fatalf("queue q1: %v", q1)
			}
			if p := mustCall(t, s, 200, "POST", "/ojs/v1/admin/queues/q1/pause", nil).body; p["paused"] != true || p["paused_at"] == nil {
				t.Fatalf("pause: %v", p)
			}
			if q := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/q1", nil).body; q["state"] != "paused" {
				t.Fatalf("paused queue: %v", q)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/admin/queues/q1/resume", nil)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/queues/Bad_Name", nil), 400, CodeInvalidRequest)

			// Jobs.
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?queue=q1", nil)
			if len(r.body["items"].([]any)) != 2 || r.body["pagination"].(map[string]any)["total"] != 2.0 {
				t.Fatalf("admin jobs of q1: %s", r.raw)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?type=mail.*&order=asc", nil)
			if its := r.body["items"].([]any); len(its) != 2 || its[0].(map[string]any)["id"] != dead {
				t.Fatalf("admin jobs by type prefix, oldest first: %s", r.raw)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?per_page=1&page=2&order=asc", nil)
			if its := r.body["items"].([]any); len(its) != 1 || its[0].(map[string]any)["id"] != kept || r.body["pagination"].(map[string]any)["has_more"] != true {
				t.Fatalf("admin jobs page 2: %s", r.raw)
			}
			for _, bad := range []string{"state=bogus", "per_page=0", "per_page=101", "page=0", "order=up", "sort=priority", "since=yesterday", "until=2026-13-01T00:00:00Z", "type=Not%20A%20Type", "queue=Q!"} {
				checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/jobs?"+bad, nil), 400, CodeInvalidRequest)
			}
			if its := mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z", nil).body["items"].([]any); len(its) != 3 {
				t.Fatalf("jobs created between 2000 and 2999: %v", its)
			}
			if its := mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?until=2000-01-01T00:00:00Z", nil).body["items"].([]any); len(its) != 0 {
				t.Fatalf("jobs created before 2000: %v", its)
			}
			if j := mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs/"+kept, nil).body; j["id"] != kept || j["type"] != "mail.bounce" {
				t.Fatalf("admin job: %v", j)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/jobs/019539a4-0000-7000-8000-000000000000", nil), 404, CodeNotFound)

			// Stats and workers.
			st := mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats", nil).body
			jobs := st["jobs"].(map[string]any)
			if st["queues"] != 2.0 || jobs["available"] != 2.0 || jobs["discarded"] != 1.0 || st["uptime_seconds"] == nil {
				t.Fatalf("stats: %v", st)
			}
			ws := mustCall(t, s, 200, "GET", "/ojs/v1/admin/workers", nil).body["items"].([]any)
			ids := map[any]any{}
			for _, it := range ws {
				ids[it.(map[string]any)["id"]] = it.(map[string]any)["kind"]
			}
			if len(ws) != 2 || ids[s.client.ID()] != "server" || ids["w1"] != "remote" {
				t.Fatalf("workers (this server's client and w1, which fetched): %v", ws)
			}

			// Dead letter.
			for _, path := range []string{"/ojs/v1/dead-letter/stats", "/ojs/v1/admin/dead-letter/stats"} {
				d := mustCall(t, s, 200, "GET", path, nil).body
				if d["total"] != 1.0 || d["by_queue"].(map[string]any)["q1"] != 1.0 || d["by_error_type"].(map[string]any)["SMTPError"] != 1.0 || d["oldest_at"] == nil {
					t.Fatalf("%s: %v", path, d)
				}
			}
			if its := mustCall(t, s, 200, "GET", "/ojs/v1/admin/dead-letter", nil).body["items"].([]any); len(its) != 1 || its[0].(map[string]any)["id"] != dead {
				t.Fatalf("admin dead letter: %v", its)
			}

			// Bulk by filter, purges.
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/cancel", `{"filter":{"queue":"q2"}}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/cancel", `{}`), 400, CodeInvalidRequest)
			b := mustCall(t, s, 200, "POST", "/ojs/v1/admin/jobs/bulk/cancel", `{"filter":{"queue":"q2"},"confirm":true}`).body
			if b["matched"] != 1.0 || b["succeeded"] != 1.0 {
				t.Fatalf("bulk cancel: %v", b)
			}
			if b := mustCall(t, s, 200, "POST", "/ojs/v1/admin/jobs/bulk/retry", map[string]any{"ids": []string{other}}).body; b["succeeded"] != 1.0 {
				t.Fatalf("bulk retry by ids: %v", b)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/admin/jobs/"+other+"/cancel", nil)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/queues/q2/jobs", `{"states":["cancelled"]}`), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/queues/q2/jobs", `{"states":["active"],"confirm":true}`), 400, CodeInvalidRequest)
			if p := mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/queues/q2/jobs", `{"states":["cancelled"],"confirm":true}`).body; p["purged_count"] != 1.0 {
				t.Fatalf("purge q2: %v", p)
			}
			if p := mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/dead-letter", `{"confirm":true,"older_than":"2000-01-01T00:00:00Z"}`).body; p["purged_count"] != 0.0 {
				t.Fatalf("purge of dead letters older than 2000: %v", p)
			}
			if p := mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/dead-letter", `{"confirm":true}`).body; p["purged_count"] != 1.0 {
				t.Fatalf("purge dead letter: %v", p)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/nothing", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/stats", nil), 405, CodeMethodNotAllowed)

			// Health and readiness.
			h := mustCall(t, s, 200, "GET", "/ojs/v1/health", nil).body
			if h["backend"].(map[string]any)["status"] != "connected" {
				t.Fatalf("health: %v", h)
			}
			mustCall(t, s, 200, "GET", "/ojs/v1/ready", nil)
			s.Drain()
			if r := mustCall(t, s, 503, "GET", "/ojs/v1/ready", nil); fmt.Sprint(r.body["reasons"]) == "" {
				t.Fatalf("not ready without reasons: %s", r.raw)
			}
		})
	}
}

// TestManifestDeclaresExtensions: the manifest names the progress and admin-api extensions.
func TestManifestDeclaresExtensions(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := mustCall(t, s, 200, "GET", "/ojs/manifest", nil)
	ext := fmt.Sprint(r.body["extensions"])
	if !strings.Contains(ext, "progress") || !strings.Contains(ext, "admin-api") {
		t.Fatalf("extensions: %s", ext)
	}
}

// TestReadyAndHealthNeedNoKey: probes work without the API key; the admin API needs it.
func TestReadyAndHealthNeedNoKey(t *testing.T) {
	s, _ := newTestServer(t, Config{APIKey: "k"})
	mustCall(t, s, 200, "GET", "/ojs/v1/ready", nil)
	mustCall(t, s, 200, "GET", "/ojs/v1/health", nil)
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/stats", nil), 401, CodeUnauthenticated)
	mustCall(t, s, 200, "GET", "/ojs/v1/admin/stats", nil, "Authorization", "Bearer k")
}

// TestProgressEvent: a progress report appears in the event log as progress.updated.
func TestProgressEvent(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	id := enqueueJob(t, s, `{"type":"a.b","args":[],"options":{"queue":"pe"}}`)
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"pe"}, "worker_id": "w1"})
	mustCall(t, s, 204, "PUT", "/ojs/v1/jobs/"+id+"/progress", `{"progress":0.25}`)
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := mustCall(t, s, 200, "GET", "/ojs/v1/events?type=progress.updated", nil)
		if strings.Contains(string(r.raw), `"progress":0.25`) && strings.Contains(string(r.raw), id) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress.updated event: %s", r.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// storeServer returns a server over a fresh store of kind .
func storeServer(t *testing.T, kind string, cfg Config) (*Server, *pronto.Client) {
	t.Helper()
	client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client = client
	return newTestServer(t, cfg)
}

// listOldArgs and listNewArgs are two job types for listing tests.
type listOldArgs struct{}

func (listOldArgs) Kind() string { return "list.old" }

type listNewArgs struct{}

func (listNewArgs) Kind() string { return "list.new" }

// insertMany inserts n jobs of args into queue, in chunks.
func insertMany(t *testing.T, c *pronto.Client, args pronto.JobArgs, queue string, n int) {
	t.Helper()
	for n > 0 {
		k := min(n, 1000)
		ps := make([]pronto.InsertManyParams, k)
		for i := range ps {
			ps[i] = pronto.InsertManyParams{Args: args, Opts: &pronto.InsertOpts{Queue: queue}}
		}
		if _, err := c.InsertMany(context.Background(), ps); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

// TestAdminListPastScanLimit: GET /admin/jobs hands since/until to the store, so a job older than
// the newest adminScanLimit jobs is found by until; a type prefix, applied after the read, cannot
// reach it, and the page says so (has_more and truncated) rather than that nothing matches.
func TestAdminListPastScanLimit(t *testing.T) {
	s, c := storeServer(t, "memory", Config{})
	old, err := c.Insert(context.Background(), listOldArgs{}, &pronto.InsertOpts{Queue: "scan"})
	if err != nil {
		t.Fatal(err)
	}
	// the newer jobs must be created strictly later than the bound
	bound := old.CreatedAt.Add(time.Millisecond)
	for time.Now().Before(bound.Add(time.Millisecond)) {
		time.Sleep(time.Millisecond)
	}
	insertMany(t, c, listNewArgs{}, "scan", adminScanLimit)

	r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?queue=scan&until="+url.QueryEscape(bound.UTC().Format(time.RFC3339Nano)), nil)
	items := r.body["items"].([]any)
	pg := r.body["pagination"].(map[string]any)
	if len(items) != 1 || items[0].(map[string]any)["id"] != old.ID || pg["has_more"] != false || pg["truncated"] != false {
		t.Errorf("until %s: want job %s alone, has_more and truncated false: %s", bound, old.ID, r.raw)
	}

	r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?queue=scan&type="+url.QueryEscape("list.o*"), nil)
	pg = r.body["pagination"].(map[string]any)
	if len(r.body["items"].([]any)) == 0 && (pg["has_more"] != true || pg["truncated"] != true) {
		t.Errorf("type prefix past the %d-job read: an empty page must say has_more and truncated: %s", adminScanLimit, r.raw)
	}
}

// TestAdminBulkFilterTimeRange, on every store: a bulk action's filter takes since/until as the
// listing does (a cancel until 2000 touches nothing, one from the job's own created_at takes it),
// and refuses a member it does not know, naming it, rather than act on more jobs than meant.
func TestAdminBulkFilterTimeRange(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			id := enqueueJob(t, s, `{"type":"bulk.range","args":[],"options":{"queue":"bulkq"}}`)
			r := mustCall(t, s, 200, "POST", "/ojs/v1/admin/jobs/bulk/cancel",
				`{"filter":{"queue":"bulkq","state":"available","until":"2000-01-01T00:00:00Z"},"confirm":true}`)
			job := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
			if r.body["matched"] != 0.0 || job["state"] != "available" {
				t.Fatalf("bulk cancel until 2000-01-01: matched %v, job now %v: %s", r.body["matched"], job["state"], r.raw)
			}

			for _, filter := range []string{`{"queue":"bulkq","enqueued_before":"2000-01-01T00:00:00Z"}`, `{"queue":"bulkq","since":"yesterday"}`} {
				r = call(t, s, "POST", "/ojs/v1/admin/jobs/bulk/cancel", `{"filter":`+filter+`,"confirm":true}`)
				checkErrorBody(t, r, 400, "invalid_request")
				if field := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; !strings.HasPrefix(fmt.Sprint(field), "filter.") {
					t.Errorf("filter %s: 400 names field %v: %s", filter, field, r.raw)
				}
			}

			since := job["created_at"].(string)
			r = mustCall(t, s, 200, "POST", "/ojs/v1/admin/jobs/bulk/cancel",
				`{"filter":{"queue":"bulkq","since":"`+since+`"},"confirm":true}`)
			if r.body["matched"] != 1.0 || r.body["succeeded"] != 1.0 {
				t.Fatalf("bulk cancel since the job's created_at %s: %s", since, r.raw)
			}
		})
	}
}

// TestAdminTimeRangeAtShownMillisecond, on every store: since/until compare created_at as answers
// show it, to the millisecond: since = the shown created_at and until = it plus 1µs both list the
// job, and until = the shown created_at does not.
func TestAdminTimeRangeAtShownMillisecond(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			for i := 0; i < 20; i++ {
				queue := fmt.Sprint("rangeq", i)
				r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"range.ms","args":[],"options":{"queue":"`+queue+`"}}`)
				job := r.body["job"].(map[string]any)
				shown, err := time.Parse(time.RFC3339Nano, job["created_at"].(string))
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []struct {
					bound string
					at    time.Time
					want  int
				}{
					{"since", shown, 1},
					{"until", shown.Add(time.Microsecond), 1},
					{"until", shown, 0},
					{"since", shown.Add(time.Microsecond), 0},
				} {
					query := c.bound + "=" + url.QueryEscape(c.at.UTC().Format(time.RFC3339Nano))
					l := mustCall(t, s, 200, "GET", "/ojs/v1/admin/jobs?queue="+queue+"&"+query, nil)
					if n := len(l.body["items"].([]any)); n != c.want {
						t.Fatalf("job %s shown created_at %s: %s lists %d jobs, want %d: %s", job["id"], job["created_at"], query, n, c.want, l.raw)
					}
				}
			}
		})
	}
}
