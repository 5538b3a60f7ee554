package server

import (
	"fmt"
	"net/http"
	"testing"
)

// TestLimitChangeCountsEarlierJobs: a queue bounded, unbounded, then bounded again through the admin
// API (and a tenant's max_queue_depth likewise) refuses the insert beyond the new bound at once, on
// every store: the jobs inserted while it was unbounded count, not the depth the server counted under
// the first bound. The root package's TestQueueBoundChangeRecountsDepth and
// TestTenantLimitChangeRecountsJobs prove the same without depending on the server's speed.
func TestLimitChangeCountsEarlierJobs(t *testing.T) {
	cases := []struct {
		name, path, job, code string
		limit                 func(n int) string
	}{
		{
			name: "queue max_depth",
			path: "/ojs/v1/admin/queues/rebound/config",
			job:  `{"type":"a.b","args":[],"options":{"queue":"rebound"}}`,
			code: CodeQueueFull,
			limit: func(n int) string {
				return fmt.Sprintf(`{"backpressure":{"max_depth":%d}}`, n)
			},
		},
		{
			name: "tenant max_queue_depth",
			path: "/ojs/v1/admin/tenants/acme/limits",
			job:  `{"type":"a.b","args":[],"meta":{"tenant_id":"acme"},"options":{"queue":"tq"}}`,
			code: CodeTenantLimitExceeded,
			limit: func(n int) string {
				if n == 0 {
					return `{}`
				}
				return fmt.Sprintf(`{"max_queue_depth":%d}`, n)
			},
		},
	}
	for _, kind := range storeKinds {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s, _ := storeServer(t, kind, Config{})
				mustCall(t, s, http.StatusOK, "PUT", tc.path, tc.limit(1000))
				mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs", tc.job)
				mustCall(t, s, http.StatusOK, "PUT", tc.path, tc.limit(0))
				for range 20 {
					mustCall(t, s, http.StatusCreated, "POST", "/ojs/v1/jobs", tc.job)
				}
				mustCall(t, s, http.StatusOK, "PUT", tc.path, tc.limit(5))
				checkErrorBody(t, call(t, s, "POST", "/ojs/v1/jobs", tc.job), http.StatusTooManyRequests, tc.code)
			})
		}
	}
}
