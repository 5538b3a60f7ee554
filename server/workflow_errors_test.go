package server

import (
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestWorkflowStepErrorKeepsDetails: an error about one job of a workflow names the step's field and
// keeps the error's other details: a step's meta over the limit is the same 413 metadata_too_large,
// max_bytes and actual_bytes included, as a job's.
func TestWorkflowStepErrorKeepsDetails(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	big := `{"k":"` + strings.Repeat("x", 70000) + `"}`
	for _, c := range []struct{ path, body string }{
		{"/ojs/v1/jobs", `{"type":"a.b","args":[],"meta":` + big + `}`}, // reference
		{"/ojs/v1/workflows", `{"type":"chain","steps":[{"type":"a.b","args":[],"meta":` + big + `}]}`},
		{"/ojs/v1/workflows", `{"type":"group","jobs":[{"type":"a.b","args":[],"options":{"metadata":` + big + `}}]}`},
	} {
		r := call(t, s, "POST", c.path, c.body)
		checkErrorBody(t, r, 413, "metadata_too_large")
		d, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
		if d["max_bytes"] != float64(pronto.DefaultMaxMetaBytes) || d["actual_bytes"] == nil || d["field"] == nil {
			t.Errorf("POST %s: metadata_too_large details %v, want field, max_bytes %d and actual_bytes",
				c.path, d, pronto.DefaultMaxMetaBytes)
		}
	}
}
