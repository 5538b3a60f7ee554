package conformance

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The runner's own tests: every matcher and operator of test-case-reference.md accepts what it
// should and refuses what it should, so a passing conformance case means what it says.

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func TestMatchers(t *testing.T) {
	body := decode(t, `{
		"id": "019539a4-b68c-7def-8000-1a2b3c4d5e6f",
		"uuid4": "550e8400-e29b-41d4-a716-446655440000",
		"at": "2026-02-12T10:30:00.123Z",
		"name": "email.send", "empty": "", "n": 42, "f": 3.5, "neg": -1, "zero": 0,
		"yes": true, "no": false, "nul": null,
		"list": ["a", "b", 3], "none": [], "obj": {"k": "v"}, "eobj": {},
		"jobs": [{"id": "x", "state": "active", "n": 1}, {"id": "y", "state": "done", "n": 2}]
	}`)
	for _, tc := range []struct {
		path, matcher string
		ok            bool
	}{
		{"$.name", `"any"`, true}, {"$.nul", `"any"`, false}, {"$.missing", `"any"`, false},
		{"$.missing", `"absent"`, true}, {"$.nul", `"absent"`, true}, {"$.name", `"absent"`, false},
		{"$.nul", `"exists"`, true}, {"$.missing", `"exists"`, false},
		{"$.name", `"string:nonempty"`, true}, {"$.empty", `"string:non_empty"`, false}, {"$.n", `"string:nonempty"`, false},
		{"$.id", `"string:uuid"`, true}, {"$.uuid4", `"string:uuid"`, true}, {"$.name", `"string:uuid"`, false},
		{"$.id", `"string:uuidv7"`, true}, {"$.uuid4", `"string:uuidv7"`, false},
		{"$.at", `"string:datetime"`, true}, {"$.name", `"string:datetime"`, false},
		{"$.name", `"string:contains:mail"`, true}, {"$.name", `"string:contains:sms"`, false},
		{"$.name", `"string:pattern(^email\\..*)"`, true}, {"$.name", `"string:pattern(^sms)"`, false},
		{"$.name", `"email.send"`, true}, {"$.name", `"email"`, false}, {"$.n", `"42"`, false},
		{"$.n", `"number:positive"`, true}, {"$.zero", `"number:positive"`, false},
		{"$.zero", `"number:non_negative"`, true}, {"$.neg", `"number:non_negative"`, false},
		{"$.n", `"number:range(40,42)"`, true}, {"$.n", `"number:range(0, 41)"`, false}, {"$.f", `"number:range(3.4,3.6)"`, true},
		{"$.n", `"~40"`, true}, {"$.n", `"~1000"`, false}, {"$.n", `"~130"`, true /* 100 minimum tolerance */},
		{"$.n", `42`, true}, {"$.n", `43`, false}, {"$.f", `3.5`, true}, {"$.name", `42`, false},
		{"$.list", `"array:nonempty"`, true}, {"$.none", `"array:nonempty"`, false},
		{"$.none", `"array:empty"`, true}, {"$.list", `"array:empty"`, false},
		{"$.list", `"array:length:3"`, true}, {"$.list", `"array:length(3)"`, true}, {"$.list", `"array:length:2"`, false},
		{"$.list", `"array:min_length:2"`, true}, {"$.list", `"array:min:4"`, false},
		{"$.list", `"contains:b"`, true}, {"$.list", `"contains:3"`, true}, {"$.list", `"contains:z"`, false},
		{"$.list", `"not_contains:z"`, true}, {"$.list", `"not_contains:a"`, false},
		{"$.list", `["a", "string:nonempty", 3]`, true}, {"$.list", `["a", "b"]`, false}, {"$.none", `[]`, true},
		{"$.yes", `true`, true}, {"$.no", `true`, false}, {"$.nul", `null`, true}, {"$.missing", `null`, false},
		{"$.n", `"one_of:41,42"`, true}, {"$.n", `"one_of:1,2"`, false},
		{"$.name", `{"$exists": true}`, true}, {"$.missing", `{"$exists": false}`, true}, {"$.name", `{"$exists": false}`, false},
		{"$.name", `{"$exists": true, "$type": "string"}`, true}, {"$.n", `{"$exists": true, "$type": "string"}`, false},
		{"$.obj", `{"$type": "object"}`, true}, {"$.list", `{"$type": "array"}`, true}, {"$.nul", `{"$type": "null"}`, true},
		{"$.yes", `{"$type": "boolean"}`, true}, {"$.n", `{"$type": "number"}`, true},
		{"$.name", `{"$match": "^email"}`, true}, {"$.name", `{"$match": "^sms"}`, false},
		{"$.name", `{"$in": ["x", "email.send"]}`, true}, {"$.name", `{"$in": ["x"]}`, false},
		{"$.n", `{"$in": ["string:nonempty", "number:positive"]}`, true},
		{"$.list", `{"$size": 3}`, true}, {"$.list", `{"$size": {"$gte": 4}}`, false}, {"$.list", `{"$size": {"$gte": 1}}`, true},
		{"$.name", `{"$or": ["x", "string:contains:send"]}`, true}, {"$.name", `{"$or": ["x", {"$exists": false}]}`, false},
		{"$.missing", `{"$or": ["string:nonempty", {"$exists": false}]}`, true},
		{"$.eobj", `{"$empty": true}`, true}, {"$.obj", `{"$empty": true}`, false}, {"$.missing", `{"$empty": true}`, true},
		{"$.n", `{"range": {"min": 0, "max": 100}}`, true}, {"$.n", `{"range": {"min": 50}}`, false}, {"$.n", `{"range": {"max": 5}}`, false},
		{"$.obj", `{"k": "v"}`, true}, {"$.obj", `{"k": "w"}`, false},
		{"$.jobs[0].id", `"x"`, true}, {"$.jobs[-1].id", `"y"`, true}, {"$.jobs[5].id", `"absent"`, true},
		{"$.jobs[*].id", `["x", "y"]`, true}, {"$.jobs[*].state", `"contains:done"`, true},
		{"$.jobs[?(@.state=='done')].id", `"y"`, true}, {"$.jobs[?(@.n==2)].id", `"y"`, true},
		{"$.jobs[?(@.id=='z')]", `"absent"`, true}, {"$.jobs[?(@.id=='x')]", `"exists"`, true},
		{"$.obj['k']", `"v"`, true}, {"$", `{"$type": "object"}`, true},
		{"$.name", `{"$bogus": 1}`, false}, {"$.name", `"string:nonempty"`, true},
	} {
		got, found, err := resolvePath(body, true, tc.path)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		err = match(decode(t, tc.matcher), got, found, 50)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: got %v, want ok=%v", tc.path, tc.matcher, err, tc.ok)
		}
	}
	for _, bad := range []string{"name", "$.", "$[", "$.a[?(x)]", "$.a[x]"} {
		if _, _, err := resolvePath(body, true, bad); err == nil {
			t.Errorf("path %q: no error", bad)
		}
	}
}

func TestBodyStatusHeaderTiming(t *testing.T) {
	body := decode(t, `{"jobs": []}`)
	if f := matchBody(decode(t, `{"$or": [{"$.jobs": {"$size": 0}}, {"$empty": true}]}`), body, true, 50); len(f) > 0 {
		t.Fatal(f)
	}
	if f := matchBody(decode(t, `{"$or": [{"$.jobs": "array:nonempty"}, {"$empty": true}]}`), body, true, 50); len(f) == 0 {
		t.Fatal("$or passed with no matching alternative")
	}
	if f := matchBody(decode(t, `{"$empty": true}`), nil, false, 50); len(f) > 0 {
		t.Fatal(f)
	}
	for m, ok := range map[string]bool{`201`: true, `200`: false, `"number:range(200,299)"`: true, `"one_of:200,201"`: true, `{"$in": [200, 409]}`: false} {
		if err := match(decode(t, m), float64(201), true, 50); (err == nil) != ok {
			t.Errorf("status matcher %s: %v", m, err)
		}
	}
	if f := matchTiming(decode(t, `{"less_than": 500, "greater_than": 100, "approximate": 300}`), 300*time.Millisecond, 50); len(f) > 0 {
		t.Fatal(f)
	}
	if f := matchTiming(decode(t, `{"less_than": 100}`), 300*time.Millisecond, 50); len(f) == 0 {
		t.Fatal("less_than passed")
	}
	if f := matchTiming(decode(t, `{"greater_than": 300}`), 300*time.Millisecond, 50); len(f) == 0 {
		t.Fatal("greater_than passed on equality")
	}
	if f := matchTiming(decode(t, `{"approximate": 3000}`), 1400*time.Millisecond, 50); len(f) == 0 {
		t.Fatal("approximate passed outside the tolerance")
	}
	if err := exclusiveClaim(decode(t, `{"job_id": "x", "fetches": ["[{\"id\":\"x\"}]", "[]"], "exactly_one_has_job": true, "exactly_one_empty": true}`)); err != nil {
		t.Fatal(err)
	}
	if err := exclusiveClaim(decode(t, `{"job_id": "x", "fetches": ["[{\"id\":\"x\"}]", "[{\"id\":\"x\"}]"], "exactly_one_has_job": true}`)); err == nil {
		t.Fatal("a double claim passed")
	}
}

// A whole case through a fake server: templates, captures, parallel steps, WAIT, ASSERT, headers,
// body_absent, body_contains, body_raw, status_in; and a wrong expectation is reported.
func TestRunnerEndToEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/openjobspec+json")
		w.Header().Set("OJS-Version", "1.0")
		switch {
		case r.Method == "POST" && r.URL.Path == "/jobs":
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"job":{"id":"j1","n":7}}`))
		case r.URL.Path == "/jobs/j1":
			_, _ = w.Write([]byte(`{"job":{"id":"j1","state":"active"}}`))
		case r.URL.Path == "/echo":
			var v any
			_ = json.NewDecoder(r.Body).Decode(&v)
			b, _ := json.Marshal(v)
			_, _ = w.Write(b)
		default:
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found"}}`))
		}
	}))
	defer srv.Close()
	r := &runner{baseURL: srv.URL, client: srv.Client(), tolerancePct: 50}
	tc := &testCase{TestID: "SELF-1"}
	if err := json.Unmarshal([]byte(`{"test_id":"SELF-1","steps":[
		{"id":"s1","action":"POST","path":"/jobs","body":{"a":1},"captures":{"jid":"$.job.id"},
		 "assertions":{"status":201,"headers":{"OJS-Version":"1.0","Content-Type":{"$match":"openjobspec"}},"body":{"$.job.id":"j1"}}},
		{"id":"s2","action":"GET","path":"/jobs/{{steps.s1.response.body.job.id}}","parallel_with":"s3",
		 "assertions":{"status_in":[200,204],"body_absent":["$.job.error"],"body_contains":["\"state\":\"active\""]}},
		{"id":"s3","action":"POST","path":"/echo","body":{"id":"{{captures.jid}}","n":"{{steps.s1.response.body.job.n}}"},
		 "assertions":{"body_raw":{"id":"j1","n":"7"}}},
		{"id":"w","action":"WAIT","duration_ms":10},
		{"id":"s4","action":"ASSERT","assertions":{"equality":{"$.steps.s2.response.body.job.id":"{{steps.s1.response.body.job.id}}"}}}
	]}`), tc); err != nil {
		t.Fatal(err)
	}
	if f := r.run(tc); len(f) > 0 {
		t.Fatalf("failures: %s", strings.Join(f, "\n"))
	}
	tc.Steps[0].Assertions = json.RawMessage(`{"status":200,"body":{"$.job.id":"nope"},"bogus":1}`)
	f := r.run(tc)
	if len(f) != 3 {
		t.Fatalf("want 3 failures (status, body, unknown assertion), got %q", f)
	}
}
