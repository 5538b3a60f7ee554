package server

import "testing"

// TestBatchUniqueConflictNamesRefusedJobByArgsKeys: two jobs of a batch share a unique key built from args_keys;
// a job in between has the same type and policy but another key. The 409 names the job that really
// conflicts (jobs[2]), by its fingerprint.
func TestBatchUniqueConflictNamesRefusedJobByArgsKeys(t *testing.T) {
	s := serverOn(t, "memory")
	u := `"options":{"queue":"rin","unique":{"keys":["type","args"],"args_keys":["user"],"on_conflict":"reject"}}`
	body := `{"jobs":[` +
		`{"type":"a.b","args":[{"user":1,"n":1}],` + u + `},` +
		`{"type":"a.b","args":[{"user":2,"n":1}],` + u + `},` +
		`{"type":"a.b","args":[{"user":1,"n":2}],` + u + `}]}`
	r := call(t, s, "POST", "/ojs/v1/jobs/batch", body)
	checkErrorBody(t, r, 409, CodeDuplicate)
	d, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
	if d["field"] != "jobs[2]" || d["index"] != 2.0 || d["existing_job_index"] != 0.0 {
		t.Fatalf("want field jobs[2], index 2, existing_job_index 0 (jobs[1] has another key): %s", r.raw)
	}
}

// TestBatchUniqueConflictNamesRefusedJobKeyOrder: whole-args uniqueness where the duplicate spells its args object
// with another key order (one fingerprint): the 409 names it, not jobs[1] of another key.
func TestBatchUniqueConflictNamesRefusedJobKeyOrder(t *testing.T) {
	s := serverOn(t, "memory")
	u := `"options":{"queue":"rin","unique":{"keys":["type","args"],"on_conflict":"reject"}}`
	body := `{"jobs":[` +
		`{"type":"a.b","args":[{"x":1,"y":2}],` + u + `},` +
		`{"type":"a.b","args":[{"x":9}],` + u + `},` +
		`{"type":"a.b","args":[{"y":2,"x":1}],` + u + `}]}`
	r := call(t, s, "POST", "/ojs/v1/jobs/batch", body)
	checkErrorBody(t, r, 409, CodeDuplicate)
	d, _ := r.body["error"].(map[string]any)["details"].(map[string]any)
	if d["field"] != "jobs[2]" || d["index"] != 2.0 || d["existing_job_index"] != 0.0 {
		t.Fatalf("want field jobs[2], index 2, existing_job_index 0: %s", r.raw)
	}
}

// TestBulkUniqueConflictNamesRefusedJobByArgsKeys: the atomic bulk endpoint puts the duplicate error
// on the item that really conflicts.
func TestBulkUniqueConflictNamesRefusedJobByArgsKeys(t *testing.T) {
	s := serverOn(t, "memory")
	u := `"options":{"queue":"rin","unique":{"keys":["type","args"],"args_keys":["user"],"on_conflict":"reject"}}`
	body := `{"atomicity":"atomic","jobs":[` +
		`{"type":"a.b","args":[{"user":1,"n":1}],` + u + `},` +
		`{"type":"a.b","args":[{"user":2,"n":1}],` + u + `},` +
		`{"type":"a.b","args":[{"user":1,"n":2}],` + u + `}]}`
	r := call(t, s, "POST", "/ojs/v1/jobs/bulk", body)
	items, _ := r.body["items"].([]any)
	if len(items) != 3 {
		t.Fatalf("items: %s", r.raw)
	}
	e, _ := items[2].(map[string]any)["error"].(map[string]any)
	if e["code"] != CodeDuplicate {
		t.Fatalf("item 2 (the duplicate of item 0) has %v, want duplicate: %s", e["code"], r.raw)
	}
}
