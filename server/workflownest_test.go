package server

import (
	"strings"
	"testing"
)

// TestNestedWorkflow: chain(a, group(b, chain(c, d)), e), as the JavaScript SDK sends it, runs as
// the dag it stands for: a; then b and c; d after c; e after b and d, with their results.
func TestNestedWorkflow(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	job := func(kind string) string { return `{"type":"` + kind + `","args":[],"options":{"queue":"nest"}}` }
	body := `{"type":"chain","name":"nested","steps":[` + job("n.a") + `,{"type":"group","jobs":[` + job("n.b") +
		`,{"type":"chain","steps":[` + job("n.c") + `,` + job("n.d") + `]}]},` + job("n.e") + `]}`
	r := call(t, s, "POST", "/ojs/v1/workflows", body)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	wf := obj(t, r, "workflow")
	var ids []string
	for _, st := range wf["steps"].([]any) {
		ids = append(ids, st.(map[string]any)["id"].(string))
	}
	if got := strings.Join(ids, " "); got != "0 1.0 1.1.0 1.1.1 2" {
		t.Fatalf("steps %s, want them named by position", got)
	}

	kinds := func(want ...string) map[string]map[string]any {
		t.Helper()
		got := map[string]map[string]any{}
		for {
			j := fetchOne(t, s, "nest")
			if j == nil {
				break
			}
			got[j["type"].(string)] = j
		}
		if len(got) != len(want) {
			t.Fatalf("fetched %v, want %v", keys(got), want)
		}
		for _, k := range want {
			if got[k] == nil {
				t.Fatalf("fetched %v, want %v", keys(got), want)
			}
		}
		return got
	}
	a := kinds("n.a")
	ack(t, s, a["n.a"]["id"].(string), `"A"`)
	bc := kinds("n.b", "n.c")
	ack(t, s, bc["n.c"]["id"].(string), `"C"`)
	d := kinds("n.d")
	ack(t, s, d["n.d"]["id"].(string), `"D"`)
	if j := fetchOne(t, s, "nest"); j != nil {
		t.Fatalf("%v runs before b finished", j["type"])
	}
	ack(t, s, bc["n.b"]["id"].(string), `"B"`)
	e := kinds("n.e")["n.e"]
	got := call(t, s, "GET", "/ojs/v1/jobs/"+e["id"].(string), nil)
	if pr, _ := obj(t, got, "job")["parent_results"].([]any); len(pr) != 2 || pr[0] != "B" || pr[1] != "D" {
		t.Fatalf("e's parent results %v, want [B D]: %s", obj(t, got, "job")["parent_results"], got.raw)
	}
}

// TestNestedWorkflowRefused: nesting deeper than nestedMaxDepth, callbacks or options on a nested
// workflow, and an empty nested workflow are 400s naming the place.
func TestNestedWorkflowRefused(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	job := `{"type":"n.a","args":[]}`
	deep := job
	for range nestedMaxDepth {
		deep = `{"type":"group","jobs":[` + deep + `]}`
	}
	for body, field := range map[string]string{
		`{"type":"chain","steps":[` + deep + `]}`:                                                  "steps[0].jobs[0].jobs[0].jobs[0]",
		`{"type":"chain","steps":[{"type":"group","jobs":[` + job + `],"callbacks":{}}]}`:          "steps[0].callbacks",
		`{"type":"group","jobs":[{"type":"chain","steps":[` + job + `],"options":{"queue":"x"}}]}`: "jobs[0].options",
		`{"type":"chain","steps":[{"type":"group","jobs":[]}]}`:                                    "steps[0].jobs",
		`{"type":"chain","steps":[{"type":"group","jobs":[` + job + `],"extra":1}]}`:               "steps[0].extra",
	} {
		r := call(t, s, "POST", "/ojs/v1/workflows", body)
		checkErrorBody(t, r, 400, CodeInvalidRequest)
		if f := errField(r); f != field {
			t.Fatalf("%s: field %q, want %q: %s", body, f, field, r.raw)
		}
	}
	// nestedMaxDepth levels are accepted.
	within := job
	for range nestedMaxDepth - 1 {
		within = `{"type":"group","jobs":[` + within + `]}`
	}
	if r := call(t, s, "POST", "/ojs/v1/workflows", `{"type":"chain","steps":[`+within+`]}`); r.status != 201 {
		t.Fatalf("%d levels: %d %s", nestedMaxDepth, r.status, r.raw)
	}
}

// keys lists m's keys, for messages.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
