package server

import (
	"testing"
)

// TestBulkAtomicUniqueConflictWithinBatch, on every store: an atomic bulk enqueue whose own jobs
// share a unique key (on_conflict reject) refuses the later job naming both by index, and no item
// names the earlier job's id, which was rolled back with the batch.
func TestBulkAtomicUniqueConflictWithinBatch(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			u := `"options":{"queue":"bulk-unique","unique":{"keys":["type"],"on_conflict":"reject"}}`
			other := `{"type":"c.d","args":[],"options":{"queue":"bulk-unique"}}`
			r := call(t, s, "POST", "/ojs/v1/jobs/bulk",
				`{"atomicity":"atomic","jobs":[{"type":"a.b","args":[],`+u+`},`+other+`,{"type":"a.b","args":[],`+u+`}]}`)
			if r.status != 422 {
				t.Fatalf("status %d, want 422 (every item failed): %s", r.status, r.raw)
			}
			items, _ := r.body["items"].([]any)
			if len(items) != 3 {
				t.Fatalf("items %v, want 3", r.raw)
			}
			codes := make([]string, 3)
			for i, it := range items {
				e, _ := it.(map[string]any)["error"].(map[string]any)
				codes[i], _ = e["code"].(string)
				if d, _ := e["details"].(map[string]any); d["existing_job_id"] != nil {
					t.Fatalf("item %d names existing_job_id %v, a job of the rolled back batch: %s", i, d["existing_job_id"], r.raw)
				}
			}
			if codes[0] != "rolled_back" || codes[1] != "rolled_back" || codes[2] != CodeDuplicate {
				t.Fatalf("item codes %v, want rolled_back, rolled_back, duplicate: %s", codes, r.raw)
			}
			d := items[2].(map[string]any)["error"].(map[string]any)["details"].(map[string]any)
			if d["index"] != 2.0 || d["existing_job_index"] != 0.0 {
				t.Fatalf("details %v, want index 2 and existing_job_index 0", d)
			}
		})
	}
}
