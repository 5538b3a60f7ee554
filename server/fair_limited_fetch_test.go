package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

// fairFetchResp is one recorded answer.
type fairFetchResp struct {
	status int
	raw    []byte
	body   map[string]any
}

// fairFetchDo sends one request to s.
func fairFetchDo(s *Server, method, path, body string) fairFetchResp {
	req := httptest.NewRequest(method, path, nil)
	if body != "" {
		req = httptest.NewRequest(method, path, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/openjobspec+json")
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	out := fairFetchResp{status: rec.Code, raw: rec.Body.Bytes()}
	_ = json.Unmarshal(out.raw, &out.body)
	return out
}

// fairFetchJobs fails unless r is a 200 and returns its jobs.
func fairFetchJobs(t *testing.T, what string, r fairFetchResp) []any {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("%s: status %d, want 200: %s", what, r.status, r.raw)
	}
	jobs, _ := r.body["jobs"].([]any)
	return jobs
}

// TestFairFetchPassesLimitedTenantMidTurn: a tenant with a weight above 1 whose turn is under way
// (the queue's fair cursor is on it, its turn not used up) and that reaches its max_concurrency: the
// next fetch of the queue answers with no job of that tenant, and the store takes writes after it.
// The fair claim's walk used to look at the cursor's tenant again for as long as it had found no
// participant, which a tenant at its limit never is: on SQLite and PostgreSQL the fetch looped
// inside the claim's transaction until the request timeout (504), every other write of a SQLite
// store waiting behind it. The shared store case FairLimitedTenantMidTurn (store/storetest) proves
// the claim itself on every store.
func TestFairFetchPassesLimitedTenantMidTurn(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s, _ := storeServer(t, kind, Config{RequestTimeout: 10 * time.Second})
			if r := fairFetchDo(s, "PUT", "/ojs/v1/admin/tenants/acme",
				`{"fairness_weight":3,"limits":{"max_concurrency":1}}`); r.status != 200 {
				t.Fatalf("tenant config: %d %s", r.status, r.raw)
			}
			enqueue := func(what string) {
				t.Helper()
				r := fairFetchDo(s, "POST", "/ojs/v1/jobs",
					`{"type":"a.b","args":[],"meta":{"tenant_id":"acme"},"options":{"queue":"fairspin"}}`)
				if r.status != 201 {
					t.Fatalf("%s: status %d, want 201: %s", what, r.status, r.raw)
				}
			}
			for range 3 {
				enqueue("enqueue")
			}
			fetch := `{"queues":["fairspin"],"worker_id":"w1","count":1}`
			if jobs := fairFetchJobs(t, "first fetch", fairFetchDo(s, "POST", "/ojs/v1/workers/fetch", fetch)); len(jobs) != 1 {
				t.Fatalf("first fetch: %d jobs, want 1", len(jobs))
			}
			// acme is at its limit of 1, two jobs of its turn of 3 to go.
			if jobs := fairFetchJobs(t, "fetch while the cursor's tenant is at its limit",
				fairFetchDo(s, "POST", "/ojs/v1/workers/fetch", fetch)); len(jobs) != 0 {
				t.Fatalf("fetch past acme's max_concurrency 1: %v", jobs)
			}
			enqueue("enqueue after the fetch")
		})
	}
}
