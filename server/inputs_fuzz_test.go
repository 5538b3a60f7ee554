package server

import (
	"context"
	"encoding/json"
	"net/url"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// mustEnqueue posts a job that must be accepted.
func mustEnqueue(tb testing.TB, s *Server, body string) {
	tb.Helper()
	if r := call(tb, s, "POST", "/ojs/v1/jobs", body); r.status != 201 {
		tb.Fatalf("enqueue %s: %d %s", body, r.status, r.raw)
	}
}

// fuzzEventIDs returns the event ids s has issued so far, oldest first.
func fuzzEventIDs(t testing.TB, s *Server) []string {
	t.Helper()
	r := call(t, s, "GET", "/ojs/v1/events?limit=1000", nil)
	var ids []string
	evs, _ := r.body["events"].([]any)
	for _, e := range evs {
		id, _ := e.(map[string]any)["id"].(string)
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		t.Fatalf("no events: %s", r.raw)
	}
	return ids
}

// FuzzEventCursor sends arbitrary after= cursors to GET /ojs/v1/events. Each answer is a 200 or a
// 400 naming after (or limit); a cursor taken is an event id as the server writes them (evt_ and a
// canonical UUIDv7), and the page it answers holds only events after the cursor's position.
func FuzzEventCursor(f *testing.F) {
	s, _ := newTestServer(f, Config{})
	for range 5 {
		mustEnqueue(f, s, `{"type":"cursor.fuzz","args":[]}`)
	}
	ids := fuzzEventIDs(f, s)
	for _, id := range ids {
		f.Add(id, "")
		f.Add(strings.ToUpper(id), "")
		f.Add(id[:4]+"zzzzzzzz"+id[12:], "1")
		f.Add(id[:4]+strings.ToUpper(id[4:]), "1")
	}
	f.Add("evt_", "0")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, after, limit string) {
		q := url.Values{"after": {after}}
		if limit != "" {
			q.Set("limit", limit)
		}
		r := call(t, s, "GET", "/ojs/v1/events?"+q.Encode(), nil)
		switch r.status {
		case 200:
		case 400:
			e, _ := r.body["error"].(map[string]any)
			if msg, _ := e["message"].(string); !strings.Contains(msg, "after") && !strings.Contains(msg, "limit") {
				t.Fatalf("after=%q limit=%q: 400 naming neither: %s", after, limit, r.raw)
			}
			return
		default:
			t.Fatalf("after=%q limit=%q: status %d: %s", after, limit, r.status, r.raw)
		}
		if after == "" {
			return
		}
		if !strings.HasPrefix(after, "evt_") || len(after) != 40 ||
			!uuidv7.Valid(after[4:]) || !isHex(after[18:22]+after[23:27]+after[28:]) {
			t.Fatalf("after=%q taken as a cursor: it is not an event id as this server writes them", after)
		}
		evs, _ := r.body["events"].([]any)
		for _, e := range evs {
			id, _ := e.(map[string]any)["id"].(string)
			if id[28:] <= after[28:] { // the sequence number, fixed-width hex
				t.Fatalf("after=%q answered event %s, at or before it", after, id)
			}
		}
	})
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// FuzzSchemaPattern: compileBoundedRegexp never panics, refuses no pattern whose program is within
// the limit (its size estimate only counts high), and what it accepts is Go's regexp with at most
// that many instructions.
func FuzzSchemaPattern(f *testing.F) {
	for _, p := range []string{`^[a-z]+$`, `(a{1000}){1000}`, `(a|b){500}`, `x{2}{3}{4}`, `[`, `\p{Greek}+`, `(?i)ab{0,1000}`,
		`((a{10}){10}){10}`, `a{1001}`, `(?:)`, `\b\B^$`, `(x+x+)+y`} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		re, err := compileBoundedRegexp(pattern)
		std, stdErr := regexp.Compile(pattern)
		if err == nil {
			if stdErr != nil {
				t.Fatalf("%q accepted; Go's regexp refuses it: %v", pattern, stdErr)
			}
			if n := patternInsts(re); n < 1 || n > schemaMaxPatternInsts {
				t.Fatalf("%q accepted with %d instructions", pattern, n)
			}
			if re.String() != std.String() {
				t.Fatalf("%q compiled as %q", pattern, re.String())
			}
			return
		}
		if err.Error() == "" {
			t.Fatalf("%q refused without a message", pattern)
		}
		if stdErr != nil || len(pattern) > schemaMaxPatternBytes {
			return
		}
		parsed, perr := syntax.Parse(pattern, syntax.Perl)
		if perr != nil {
			t.Fatalf("%q: regexp compiles it, syntax.Parse refuses it: %v", pattern, perr)
		}
		prog, perr := syntax.Compile(parsed.Simplify())
		if perr == nil && len(prog.Inst) <= schemaMaxPatternInsts {
			t.Fatalf("%q refused (%v), but its program has only %d instructions", pattern, err, len(prog.Inst))
		}
	})
}

// FuzzSchemaRegistry registers arbitrary JSON Schemas for a job type and enqueues arbitrary args of
// that type: registration answers 201 or a 4xx naming the schema, enqueueing 201 or a 4xx, never a
// 5xx nor a panic; a job is stored only when the schema accepts its args.
func FuzzSchemaRegistry(f *testing.F) {
	s, client := newTestServer(f, Config{})
	for _, c := range [][2]string{
		{`{"type":"array","items":[{"type":"string"}]}`, `["a"]`},
		{`{"type":"array","prefixItems":[{"type":"string","pattern":"^[a-z]+$"}],"minItems":1}`, `["abc"]`},
		{`{"type":"array","prefixItems":[{"type":"string","pattern":"^[a-z]+$"}],"minItems":1}`, `["ABC"]`},
		{`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `[]`},
		{`{"$ref":"http://example.com/x"}`, `[]`},
		{`{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer","maximum":1e308}}}}`, `[{"n":1e300}]`},
		{`{"type":"array","items":{"pattern":"(a{1000}){1000}"}}`, `["a"]`},
		{`{"type":"array","items":{"format":"email"}}`, `["x@y"]`},
		{`{"type":"array","contains":{"const":"\u0000"}}`, `["x"]`},
		{`{"allOf":[{"not":{}}]}`, `[]`},
		{`{"type":"array","uniqueItems":true}`, `[1,1.0]`},
		{`{"type":"array","items":{"multipleOf":1e-300}}`, `[1e300]`},
	} {
		f.Add([]byte(c[0]), []byte(c[1]))
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		const uri = "urn:fuzz:schema"
		reg, _ := json.Marshal(map[string]any{"uri": uri, "type": "fuzz.schema", "version": 1, "schema": json.RawMessage(schema)})
		if !json.Valid(schema) {
			reg = []byte(`{"uri":"` + uri + `","type":"fuzz.schema","version":1,"schema":` + string(schema) + `}`)
		}
		r := call(t, s, "POST", "/ojs/v1/schemas", reg)
		if r.status >= 500 || r.status != 201 && r.status/100 != 4 {
			t.Fatalf("register %s: status %d: %s", schema, r.status, r.raw)
		}
		if r.status != 201 {
			e, _ := r.body["error"].(map[string]any)
			if msg, _ := e["message"].(string); msg == "" {
				t.Fatalf("register %s: %d without a message: %s", schema, r.status, r.raw)
			}
			return
		}
		defer call(t, s, "DELETE", "/ojs/v1/schemas/"+url.PathEscape(uri), nil)
		body := []byte(`{"type":"fuzz.schema","args":` + string(args) + `}`)
		r = call(t, s, "POST", "/ojs/v1/jobs", body)
		switch {
		case r.status == 201:
			job, _ := r.body["job"].(map[string]any)
			id, _ := job["id"].(string)
			if _, err := client.JobDelete(ctx, id); err != nil {
				t.Fatalf("enqueue %s under %s: 201, and its job %q: %v", args, schema, id, err)
			}
		case r.status/100 == 4:
			if e, _ := r.body["error"].(map[string]any); e == nil || e["message"] == "" {
				t.Fatalf("enqueue %s under %s: %d without an OJS error: %s", args, schema, r.status, r.raw)
			}
		default:
			t.Fatalf("enqueue %s under %s: status %d: %s", args, schema, r.status, r.raw)
		}
	})
}

// FuzzEnqueueRefusalChangesNothing sends arbitrary bodies to the enqueue routes of a server that
// already holds two jobs (one unique by its args): a refusal is a 4xx whose message is not empty and
// leaves every job as it was and adds none; an accepted job reads back with the args the body gave
// (as encoding/json reads them).
func FuzzEnqueueRefusalChangesNothing(f *testing.F) {
	s, _ := newTestServer(f, Config{MaxBodyBytes: 64 << 10})
	fuzzEnqueueRefusal(f, s)
}

// FuzzEnqueueRefusalChangesNothingPostgres is FuzzEnqueueRefusalChangesNothing over PostgreSQL,
// which refuses more than the memory store would (NUL, lone surrogates): the server must refuse them
// first, with a 4xx.
func FuzzEnqueueRefusalChangesNothingPostgres(f *testing.F) {
	fuzzEnqueueRefusal(f, newStoreServer(f, "postgres"))
}

// hasErrorMessages reports whether an error answer says what is wrong: an OJS error with a message,
// or (the bulk route's 422, documented) an item report whose every item has one.
func hasErrorMessages(body map[string]any) bool {
	if e, ok := body["error"].(map[string]any); ok {
		msg, _ := e["message"].(string)
		return msg != ""
	}
	items, ok := body["items"].([]any)
	if !ok || len(items) == 0 {
		return false
	}
	for _, it := range items {
		m, _ := it.(map[string]any)
		e, _ := m["error"].(map[string]any)
		if msg, _ := e["message"].(string); msg == "" {
			return false
		}
	}
	return true
}

func fuzzEnqueueRefusal(f *testing.F, s *Server) {
	client := s.client
	ctx := context.Background()
	mustEnqueue(f, s, `{"type":"keep.a","args":[1,"x"],"meta":{"m":1},"options":{"queue":"keep","unique":{"keys":["type","args"],"period":"PT1H","on_conflict":"reject"}}}`)
	mustEnqueue(f, s, `{"type":"keep.b","args":[{"k":"v"}],"options":{"priority":5,"tags":["t"]}}`)
	snapshot := func(t testing.TB) (map[string]string, []string) {
		res, err := client.JobList(ctx, &pronto.JobListParams{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		var ids []string
		for _, j := range res.Jobs {
			b, _ := json.Marshal(j)
			m[j.ID] = string(b)
			ids = append(ids, j.ID)
		}
		return m, ids
	}
	initial, _ := snapshot(f)
	for _, s := range fuzzSeeds {
		f.Add(uint8(0), []byte(s))
	}
	f.Add(uint8(0), []byte(`{"type":"keep.a","args":[1,"x"],"options":{"unique":{"keys":["type","args"],"period":"PT1H","on_conflict":"reject"}}}`))
	f.Add(uint8(0), []byte(`{"type":"keep.a","args":[1,"x"],"options":{"unique":{"keys":["type","args"],"period":"PT1H","on_conflict":"replace"},"queue":"q\u0000"}}`))
	f.Add(uint8(1), []byte(`{"jobs":[{"type":"a.b","args":[1e308]},{"type":"a.b","args":[-1e309]}]}`))
	f.Add(uint8(2), []byte(`{"atomic":true,"jobs":[{"type":"a.b","args":[]},{"type":"a.b","args":["\ud800"]}]}`))
	f.Add(uint8(0), []byte("{\"type\":\"a.b\",\"args\":[\"\x00\"]}"))
	f.Add(uint8(0), []byte(`{"type":"a.b","args":[123456789012345678901234567890],"args":[1]}`))
	f.Add(uint8(2), []byte(`{"jobs":[{}]}`)) // bulk: its 422 reports each item's error
	routes := []string{"/ojs/v1/jobs", "/ojs/v1/jobs/batch", "/ojs/v1/jobs/bulk"}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		before, _ := snapshot(t)
		path := routes[int(route)%len(routes)]
		r := call(t, s, "POST", path, body)
		after, ids := snapshot(t)
		defer func() { // keep the store to the two jobs, whatever this body added
			for _, id := range ids {
				if _, keep := initial[id]; !keep {
					_, _ = client.JobDelete(ctx, id)
				}
			}
		}()
		if r.status >= 500 || r.status < 200 {
			t.Fatalf("POST %s %q: status %d: %s", path, body, r.status, r.raw)
		}
		if r.status >= 400 {
			if !hasErrorMessages(r.body) {
				t.Fatalf("POST %s %q: %d without a message: %s", path, body, r.status, r.raw)
			}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("POST %s %q: refused %d (%s), yet the jobs changed:\nbefore %v\nafter  %v", path, body, r.status, r.raw, before, after)
			}
			return
		}
		if path != "/ojs/v1/jobs" || r.status != 201 {
			return
		}
		var sent struct{ Args json.RawMessage }
		if json.Unmarshal(body, &sent) != nil {
			t.Fatalf("POST %s %q accepted: not a JSON object", path, body)
		}
		job, _ := r.body["job"].(map[string]any)
		id, _ := job["id"].(string)
		row, err := client.JobGet(ctx, id)
		if err != nil {
			t.Fatalf("POST %s %q: 201, and job %q: %v", path, body, id, err)
		}
		var want, got any
		_ = json.Unmarshal(sent.Args, &want)
		_ = json.Unmarshal(row.Args, &got)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("POST %s %q: stored args %s", path, body, row.Args)
		}
	})
}
