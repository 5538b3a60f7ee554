package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store/memory"
)

// TestDeadLetterViewAgreesWithAPI: the dead-letter view listed every discarded job, while the OJS
// API's dead letter queue leaves out those a handler ended with DISCARD or FAIL and, without a
// DEAD_LETTER code, those whose retry policy said on_exhaustion "discard" (ojs-retry.md 7.2,
// ojs-dead-letter.md). The view, and the count behind "Replay every dead-letter job", list the same
// jobs as GET /ojs/v1/dead-letter.
func TestDeadLetterViewAgreesWithAPI(t *testing.T) {
	c, err := pronto.NewClient(memory.New(), &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	api, err := server.New(server.Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	h, err := dashboard.New(dashboard.Config{Client: c, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })

	ojs := func(method, path, body string) map[string]any {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/openjobspec+json")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return out
	}
	// discard enqueues a job into its own queue and nacks it once with errCode ("" for none).
	discard := func(queue, onExhaustion, errCode string, maxAttempts int) string {
		t.Helper()
		ojs("POST", "/ojs/v1/jobs", fmt.Sprintf(`{"type":"dl.job","args":[],"options":{"queue":%q,"retry":{"max_attempts":%d,"on_exhaustion":%q}}}`, queue, maxAttempts, onExhaustion))
		jobs := ojs("POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"w"}`)["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("fetch %s: %v", queue, jobs)
		}
		j := jobs[0].(map[string]any)
		e := `{"message":"boom","type":"Boom"}`
		if errCode != "" {
			e = `{"code":"` + errCode + `","message":"boom","type":"Boom"}`
		}
		n := ojs("POST", "/ojs/v1/workers/nack", fmt.Sprintf(`{"job_id":%q,"worker_id":"w","claim_token":%q,"error":%s}`, j["id"], j["claim_token"], e))
		if n["state"] != "discarded" {
			t.Fatalf("nack in %s: %v", queue, n)
		}
		return j["id"].(string)
	}
	exhausted := discard("dl-exhausted", "dead_letter", "", 1)
	discard("dl-policy-discard", "discard", "", 1)
	discard("dl-code-discard", "dead_letter", "DISCARD", 5)
	discard("dl-code-fail", "dead_letter", "FAIL", 5)
	forced := discard("dl-code-dead", "discard", "DEAD_LETTER", 5)
	want := []string{exhausted, forced}
	slices.Sort(want)

	var fromAPI []string
	for _, j := range ojs("GET", "/ojs/v1/dead-letter", "")["jobs"].([]any) {
		fromAPI = append(fromAPI, j.(map[string]any)["id"].(string))
	}
	slices.Sort(fromAPI)
	if !slices.Equal(fromAPI, want) {
		t.Fatalf("GET /ojs/v1/dead-letter: %v, want %v", fromAPI, want)
	}

	b := newBrowser(t, srv.URL)
	get := func(path string, into any) {
		t.Helper()
		code, body := b.do("GET", path, "", nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if err := json.Unmarshal([]byte(body), into); err != nil {
			t.Fatal(err)
		}
	}
	var page struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
		Next string `json:"next"`
	}
	get("/api/deadletter", &page)
	var fromView []string
	for _, j := range page.Jobs {
		fromView = append(fromView, j.ID)
	}
	slices.Sort(fromView)
	if !slices.Equal(fromView, want) || page.Next != "" {
		t.Fatalf("dashboard dead-letter view: %v (next %q), want %v as the OJS API lists", fromView, page.Next, want)
	}
	var count struct {
		Count int      `json:"count"`
		IDs   []string `json:"ids"`
	}
	get("/api/count?deadletter=1", &count)
	slices.Sort(count.IDs)
	if count.Count != 2 || !slices.Equal(count.IDs, want) {
		t.Fatalf("count of dead-letter jobs: %d %v, want %v", count.Count, count.IDs, want)
	}
}
