package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
)

// churnResp is one recorded answer, safe to take from any goroutine (no t.Fatal).
type churnResp struct {
	status int
	raw    []byte
	body   map[string]any
}

// churnDo sends one request to s from any goroutine.
func churnDo(s *Server, method, path, body string) churnResp {
	req := httptest.NewRequest(method, path, nil)
	if body != "" {
		req = httptest.NewRequest(method, path, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/openjobspec+json")
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	out := churnResp{status: rec.Code, raw: rec.Body.Bytes()}
	_ = json.Unmarshal(out.raw, &out.body)
	return out
}

// churnWant fails unless r has status want.
func churnWant(t *testing.T, what string, r churnResp, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, want, r.raw)
	}
}

// TestConfigChurnUnderTraffic changes a queue's pause state, max depth and retention, a rate limit
// and the type's schema while enqueuers (single, batch, bulk, workflow) and fetch/ack workers run on
// the same queue, on every store. No answer may be a 5xx; every schema change, once answered,
// applies on every enqueue path at once; no accepted job is lost. Run it under -race.
func TestConfigChurnUnderTraffic(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s, _ := storeServer(t, kind, Config{})
			single := `{"type":"live.s","args":[%s],"meta":{"tenant_id":"acme"},"options":{"queue":"live","rate_limit_key":"livekey"}}`
			var accepted sync.Map // id -> true
			var wg sync.WaitGroup
			stop := make(chan struct{})
			fail := make(chan string, 100)
			report := func(format string, a ...any) {
				select {
				case fail <- fmt.Sprintf(format, a...):
				default:
				}
			}
			record := func(r churnResp, path string) {
				if r.status >= 500 || r.status == 0 {
					report("%s: %d %s", path, r.status, r.raw)
					return
				}
				if job, ok := r.body["job"].(map[string]any); ok && r.status == 201 {
					accepted.Store(job["id"], true)
				}
				if jobs, ok := r.body["jobs"].([]any); ok && r.status == 201 {
					for _, j := range jobs {
						if m, ok := j.(map[string]any); ok {
							accepted.Store(m["id"], true)
						}
					}
				}
			}
			enq := func(mode int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					arg := `"x"`
					if i%7 == 0 {
						arg = `1`
					}
					one := fmt.Sprintf(single, arg)
					switch mode {
					case 0:
						record(churnDo(s, "POST", "/ojs/v1/jobs", one), "single")
					case 1:
						record(churnDo(s, "POST", "/ojs/v1/jobs/batch", `{"jobs":[`+one+`,`+one+`]}`), "batch")
					case 2:
						record(churnDo(s, "POST", "/ojs/v1/jobs/bulk", `{"jobs":[`+one+`,`+one+`]}`), "bulk")
					case 3:
						r := churnDo(s, "POST", "/ojs/v1/workflows", `{"type":"chain","steps":[`+one+`]}`)
						if r.status >= 500 {
							report("workflow: %d %s", r.status, r.raw)
						}
					}
				}
			}
			for mode := range 4 {
				wg.Add(1)
				go enq(mode)
			}
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					worker := fmt.Sprintf("w%d", w)
					for {
						select {
						case <-stop:
							return
						default:
						}
						r := churnDo(s, "POST", "/ojs/v1/workers/fetch", `{"queues":["live"],"worker_id":"`+worker+`","count":5}`)
						if r.status != 200 {
							report("fetch: %d %s", r.status, r.raw)
							continue
						}
						jobs, _ := r.body["jobs"].([]any)
						for _, j := range jobs {
							m := j.(map[string]any)
							a := churnDo(s, "POST", "/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":%q,"claim_token":%q}`, m["id"], worker, m["claim_token"]))
							if a.status != 200 {
								report("ack: %d %s", a.status, a.raw)
							}
						}
					}
				}()
			}
			bad := fmt.Sprintf(single, "1")
			paths := []struct{ name, path, body string }{
				{"single", "/ojs/v1/jobs", bad},
				{"batch", "/ojs/v1/jobs/batch", `{"jobs":[` + bad + `]}`},
				{"bulk", "/ojs/v1/jobs/bulk", `{"atomicity":"atomic","jobs":[` + bad + `]}`},
				{"workflow", "/ojs/v1/workflows", `{"type":"chain","steps":[` + bad + `]}`},
			}
			for round := range 8 {
				uri := fmt.Sprintf("urn:live:v%d", round)
				r := churnDo(s, "POST", "/ojs/v1/schemas", fmt.Sprintf(`{"uri":%q,"type":"live.s","version":%d,"schema":%s}`, uri, round, stringArgSchema))
				churnWant(t, "register schema", r, 201)
				for _, p := range paths {
					if r := churnDo(s, "POST", p.path, p.body); !bytes.Contains(r.raw, []byte(CodeSchemaValidationFailed)) && !bytes.Contains(r.raw, []byte("limit")) && !bytes.Contains(r.raw, []byte(CodeQueueFull)) {
						t.Errorf("round %d: %s with args [1] right after the schema was registered: %d %s", round, p.name, r.status, r.raw)
					} else if r.status == 201 {
						record(r, p.name)
					}
				}
				for _, c := range []struct{ m, p, b string }{
					{"POST", "/ojs/v1/queues/live/pause", ""},
					{"PUT", "/ojs/v1/admin/queues/live/config", fmt.Sprintf(`{"backpressure":{"max_depth":%d},"retention":{"completed":"PT%dM"}}`, []int{0, 40, 200}[round%3], round+1)},
					{"PUT", "/ojs/v1/rate-limits/livekey", fmt.Sprintf(`{"concurrency":%d}`, round%4+1)},
					{"POST", "/ojs/v1/queues/live/resume", ""},
					{"DELETE", "/ojs/v1/rate-limits/livekey", ""},
				} {
					if r := churnDo(s, c.m, c.p, c.b); r.status >= 300 {
						t.Errorf("round %d: %s %s: %d %s", round, c.m, c.p, r.status, r.raw)
					}
				}
				r = churnDo(s, "DELETE", "/ojs/v1/schemas/"+url.PathEscape(uri), "")
				churnWant(t, "delete schema", r, 200)
				// No schema now: args [1] are accepted by every path (unless a bound refuses).
				for _, p := range paths {
					r := churnDo(s, "POST", p.path, p.body)
					switch {
					case r.status == 422 && bytes.Contains(r.raw, []byte(CodeSchemaValidationFailed)):
						t.Errorf("round %d: %s with args [1] right after the schema was deleted: %d %s", round, p.name, r.status, r.raw)
					case r.status >= 500:
						t.Errorf("round %d: %s: %d %s", round, p.name, r.status, r.raw)
					default:
						record(r, p.name)
					}
				}
			}
			close(stop)
			wg.Wait()
			close(fail)
			for f := range fail {
				t.Error(f)
			}
			// Every accepted job is still there.
			n := 0
			accepted.Range(func(k, _ any) bool {
				n++
				id, _ := k.(string)
				if r := churnDo(s, "GET", "/ojs/v1/jobs/"+id, ""); r.status != 200 {
					t.Errorf("accepted job %s: %d %s", id, r.status, r.raw)
					return false
				}
				return true
			})
			t.Logf("%d accepted jobs checked", n)
		})
	}
}
