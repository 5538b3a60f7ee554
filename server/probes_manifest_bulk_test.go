package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// The health and readiness probes' Retry-After, the manifest's required conformance fields, and
// the bulk 413's X-OJS-Max-Batch-Size header.

// TestUnavailableProbesSendRetryAfter: GET /ojs/v1/health and /ojs/v1/ready answer 503 with
// Retry-After (ojs-errors.md ERR-006), as the API's own 503s do, while the store is down (a SQLite
// store closed under the server), and /ready while the server drains.
func TestUnavailableProbesSendRetryAfter(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	client, err := pronto.NewClient(st, &pronto.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client})
	for _, path := range []string{"/ojs/v1/health", "/ojs/v1/ready"} {
		if r := call(t, s, "GET", path, nil); r.status != 200 || r.header.Get("Retry-After") != "" {
			t.Fatalf("GET %s with the store up: %d, Retry-After %q: %s", path, r.status, r.header.Get("Retry-After"), r.raw)
		}
	}
	_ = st.Close() // the backend goes away

	r := call(t, s, "GET", "/ojs/v1/queues", nil)
	if r.status != 503 || r.header.Get("Retry-After") != unavailableRetryAfter {
		t.Fatalf("GET /ojs/v1/queues with the store closed: %d Retry-After %q: %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	for _, path := range []string{"/ojs/v1/health", "/ojs/v1/ready"} {
		r := call(t, s, "GET", path, nil)
		if r.status != 503 {
			t.Fatalf("GET %s with the store closed: %d, want 503: %s", path, r.status, r.raw)
		}
		if got := r.header.Get("Retry-After"); got != unavailableRetryAfter {
			t.Errorf("GET %s answered 503 with Retry-After %q, want %q: %s", path, got, unavailableRetryAfter, r.raw)
		}
	}

	d, _ := newTestServer(t, Config{})
	d.Drain()
	if r := call(t, d, "GET", "/ojs/v1/ready", nil); r.status != 503 || r.header.Get("Retry-After") != unavailableRetryAfter {
		t.Errorf("GET /ojs/v1/ready while draining: %d, Retry-After %q: %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
}

// TestManifestConformanceFields: the manifest has ojs-conformance.md 4.2's conformance_tier
// (runtime: pronto speaks HTTP only, and full asks for gRPC too) and, at conformance_level 4,
// unique_job_strength, at the top level (capabilities stay booleans). It is what each store keeps:
// strong on PostgreSQL, SQLite and memory; best_effort on Redis, whose keys are per queue; the
// x-pronto-unique-jobs object says the same, in ojs-unique-jobs.md 8.3's spelling, with the mechanism.
func TestManifestConformanceFields(t *testing.T) {
	for _, c := range []struct{ kind, strength, x, mechanism string }{
		{"memory", "strong", "strong", "lock"},
		{"sqlite", "strong", "strong", "unique index"},
		{"postgres", "strong", "strong", "unique index"},
		{"redis", "best_effort", "best-effort", "per queue"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			s := serverOn(t, c.kind)
			r := call(t, s, "GET", "/ojs/manifest", nil)
			if r.status != 200 {
				t.Fatalf("manifest: %d %s", r.status, r.raw)
			}
			if r.body["conformance_level"] != 4.0 || r.body["conformance_tier"] != "runtime" {
				t.Errorf("conformance_level %v, conformance_tier %v: want 4, runtime", r.body["conformance_level"], r.body["conformance_tier"])
			}
			if r.body["unique_job_strength"] != c.strength {
				t.Errorf("unique_job_strength %v, want %s", r.body["unique_job_strength"], c.strength)
			}
			x, _ := r.body["x-pronto-unique-jobs"].(map[string]any)
			if mech, _ := x["mechanism"].(string); x["strength"] != c.x || !strings.Contains(mech, c.mechanism) {
				t.Errorf("x-pronto-unique-jobs %v: want strength %s and a mechanism naming %q", x, c.x, c.mechanism)
			}
			caps, _ := r.body["capabilities"].(map[string]any)
			for k, v := range caps {
				if _, ok := v.(bool); !ok {
					t.Errorf("capabilities.%s is %v, not a boolean", k, v)
				}
			}
		})
	}
}

// TestBulkTooLargeSendsMaxBatchHeader: a bulk request over the limit is 413 batch_size_exceeded with
// the limit in X-OJS-Max-Batch-Size (ojs-bulk-operations.md 11.3), which clients split by (9.2),
// as well as in details.max_batch_size; for a bulk enqueue and a bulk by ids alike.
func TestBulkTooLargeSendsMaxBatchHeader(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	jobs := `{"jobs":[` + strings.Repeat(`{"type":"a.b","args":[]},`, maxBulkItems) + `{"type":"a.b","args":[]}]}`
	ids := `{"job_ids":[` + strings.Repeat(`"019a0000-0000-7000-8000-000000000000",`, maxBulkItems) + `"019a0000-0000-7000-8000-000000000000"]}`
	for _, c := range []struct{ path, body string }{
		{"/ojs/v1/jobs/bulk", jobs},
		{"/ojs/v1/jobs/bulk/cancel", ids},
	} {
		r := call(t, s, "POST", c.path, c.body)
		checkErrorBody(t, r, 413, "")
		if got := r.header.Get("X-OJS-Max-Batch-Size"); got != "1000" {
			t.Errorf("POST %s of %d items: X-OJS-Max-Batch-Size %q, want 1000: %s", c.path, maxBulkItems+1, got, r.raw)
		}
	}
}
