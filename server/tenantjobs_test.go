package server

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestTenantJobsAPI: GET /ojs/v1/admin/tenants/{id}/jobs lists one tenant's jobs across queues, by
// state, page by page and by cursor, without other tenants' jobs; bad ids, states and pages are 400,
// an unknown tenant 404.
func TestTenantJobsAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			enqueue := func(tenant, queue string, extra string) string {
				r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs",
					`{"type":"t.job","args":[],"options":{"queue":"`+queue+`"`+extra+`}}`, "X-OJS-Tenant", tenant)
				return r.body["job"].(map[string]any)["id"].(string)
			}
			for range 30 {
				enqueue("big", "shared", "")
			}
			var small []string // oldest first
			small = append(small, enqueue("small", "shared", ""), enqueue("small", "other", ""))
			small = append(small, enqueue("small", "shared", `,"delay_until":"2099-01-01T00:00:00Z"`))
			for range 5 {
				enqueue("big", "other", "")
			}

			ids := func(r *response) []string {
				var out []string
				for _, it := range r.body["items"].([]any) {
					j := it.(map[string]any)
					if tn := j["meta"].(map[string]any)["tenant_id"]; tn != "small" && tn != "big" {
						t.Fatalf("job of tenant %v listed: %s", tn, r.raw)
					}
					out = append(out, j["id"].(string))
				}
				return out
			}
			newest := slices.Clone(small)
			slices.Reverse(newest)
			r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/small/jobs", nil)
			if got := ids(r); !slices.Equal(got, newest) || r.body["pagination"].(map[string]any)["has_more"] != false {
				t.Fatalf("small's jobs, newest first: %v, want %v: %s", got, newest, r.raw)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/small/jobs?order=asc&state=available", nil)
			if got := ids(r); !slices.Equal(got, small[:2]) {
				t.Fatalf("small's available jobs: %v, want %v", got, small[:2])
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/small/jobs?state=scheduled", nil)
			if got := ids(r); !slices.Equal(got, small[2:]) {
				t.Fatalf("small's scheduled jobs: %v, want %v", got, small[2:])
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/small/jobs?queue=other", nil)
			if got := ids(r); !slices.Equal(got, small[1:2]) {
				t.Fatalf("small's jobs in other: %v, want %v", got, small[1:2])
			}

			// Pages of big's 35 jobs: by page number, and by cursor; together they are all of them.
			var byPage, byCursor []string
			for page := 1; ; page++ {
				r := mustCall(t, s, 200, "GET", fmt.Sprintf("/ojs/v1/admin/tenants/big/jobs?order=asc&per_page=8&page=%d", page), nil)
				byPage = append(byPage, ids(r)...)
				if r.body["pagination"].(map[string]any)["has_more"] == false {
					break
				}
			}
			path := "/ojs/v1/admin/tenants/big/jobs?order=asc&per_page=8"
			for {
				r := mustCall(t, s, 200, "GET", path, nil)
				byCursor = append(byCursor, ids(r)...)
				p := r.body["pagination"].(map[string]any)
				if p["has_more"] == false {
					break
				}
				path = "/ojs/v1/admin/tenants/big/jobs?order=asc&per_page=8&cursor=" + p["next_cursor"].(string)
			}
			if len(byPage) != 35 || !slices.IsSorted(byPage) || !slices.Equal(byPage, byCursor) {
				t.Fatalf("big's jobs by page (%d) and by cursor (%d) differ or are not all of them", len(byPage), len(byCursor))
			}
			for _, id := range small {
				if slices.Contains(byPage, id) {
					t.Fatalf("small's job %s listed as big's", id)
				}
			}

			// A tenant with a weight but no jobs: an empty list; an unknown tenant: 404.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/idle", `{"fairness_weight":2}`)
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/idle/jobs", nil); len(ids(r)) != 0 {
				t.Fatalf("idle's jobs: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/nobody/jobs", nil), 404, CodeNotFound)
			for path, field := range map[string]string{
				"/ojs/v1/admin/tenants/small/jobs?state=running":  "state",
				"/ojs/v1/admin/tenants/small/jobs?order=sideways": "order",
				"/ojs/v1/admin/tenants/small/jobs?per_page=0":     "per_page",
				"/ojs/v1/admin/tenants/small/jobs?page=0":         "page",
				"/ojs/v1/admin/tenants/small/jobs?cursor=nope":    "cursor",
				"/ojs/v1/admin/tenants/small/jobs?queue=bad%20q":  "queue",
				"/ojs/v1/admin/tenants/a%01b/jobs":                "tenant_id",
			} {
				r := call(t, s, "GET", path, nil)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != field {
					t.Fatalf("%s: field %v, want %s", path, f, field)
				}
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/tenants/small/jobs", nil), 405, "")
		})
	}
}

// TestTenantJobsPastScanLimit: a type prefix filters a tenant's jobs after they are read, and a read
// stops at adminScanLimit jobs. A page that found nothing within the read says has_more with the
// cursor to go on from, and following it reaches the older matching job. It used to answer an empty
// page with has_more false, as if no job matched.
func TestTenantJobsPastScanLimit(t *testing.T) {
	s, c := storeServer(t, "memory", Config{})
	ctx := context.Background()
	old, err := c.Insert(ctx, listOldArgs{}, &pronto.InsertOpts{Queue: "scan", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for n := adminScanLimit; n > 0; n -= 1000 {
		ps := make([]pronto.InsertManyParams, min(n, 1000))
		for i := range ps {
			ps[i] = pronto.InsertManyParams{Args: listNewArgs{}, Opts: &pronto.InsertOpts{Queue: "scan", Tenant: "acme"}}
		}
		if _, err := c.InsertMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	path := "/ojs/v1/admin/tenants/acme/jobs?type=" + url.QueryEscape("list.o*")
	var found []string
	for range 10 {
		r := mustCall(t, s, 200, "GET", path, nil)
		for _, it := range r.body["items"].([]any) {
			found = append(found, it.(map[string]any)["id"].(string))
		}
		pg := r.body["pagination"].(map[string]any)
		if pg["has_more"] != true {
			break
		}
		path = "/ojs/v1/admin/tenants/acme/jobs?type=" + url.QueryEscape("list.o*") + "&cursor=" + pg["next_cursor"].(string)
	}
	if !slices.Equal(found, []string{old.ID}) {
		t.Errorf("following next_cursor past the %d-job read: found %v, want the one old job %s", adminScanLimit, found, old.ID)
	}
}
