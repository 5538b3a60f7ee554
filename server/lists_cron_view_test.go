package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Pagination of the queue and cron lists (ojs-http-binding.md 17.1, 17.2), a cron registration's
// overlap_policy, and a registration's view showing every option its jobs are inserted with.

// TestQueueAndCronListsPageByName: GET /ojs/v1/queues and GET /ojs/v1/cron answer at most limit
// items in name order, with has_more and next_cursor (the last name returned) while more follow;
// walking the cursors gives every item once; offset skips items after the cursor.
func TestQueueAndCronListsPageByName(t *testing.T) {
	s := serverOn(t, "memory")
	// Created out of order: the lists are in name order whatever the store's.
	for _, q := range []string{"qc", "qa", "qb"} {
		if r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"`+q+`"}}`); r.status != 201 {
			t.Fatalf("enqueue: %d %s", r.status, r.raw)
		}
	}
	for _, n := range []string{"c3", "c1", "c2"} {
		if r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"`+n+`","expression":"0 0 * * *","job_template":{"type":"a.b","args":[]}}`); r.status != 201 {
			t.Fatalf("cron: %d %s", r.status, r.raw)
		}
	}
	for _, c := range []struct {
		path, key string
		want      []string
	}{
		{"/ojs/v1/queues", "queues", []string{"qa", "qb", "qc"}},
		{"/ojs/v1/cron", "cron_jobs", []string{"c1", "c2", "c3"}},
	} {
		t.Run(c.key, func(t *testing.T) {
			var got []string
			cursor := ""
			for range len(c.want) + 1 {
				path := c.path + "?limit=1"
				if cursor != "" {
					path += "&cursor=" + cursor
				}
				names, p := listNames(t, s, path, c.key)
				if len(names) > 1 {
					t.Fatalf("GET %s answered %d items for limit=1: %v", path, len(names), names)
				}
				got = append(got, names...)
				if p["total"] != float64(len(c.want)) || p["limit"] != float64(1) {
					t.Errorf("GET %s: pagination %v, want total %d and limit 1", path, p, len(c.want))
				}
				if p["has_more"] != true {
					if _, ok := p["next_cursor"]; ok {
						t.Errorf("GET %s: next_cursor without has_more: %v", path, p)
					}
					break
				}
				if cursor, _ = p["next_cursor"].(string); cursor == "" || cursor != names[len(names)-1] {
					t.Fatalf("GET %s: has_more with next_cursor %v, want the last name returned (%v)", path, p["next_cursor"], names)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("walking %s by cursor gave %v, want %v", c.path, got, c.want)
			}
			if names, p := listNames(t, s, c.path+"?limit=1&offset=1&cursor="+c.want[0], c.key); !reflect.DeepEqual(names, c.want[2:]) || p["has_more"] != false {
				t.Errorf("offset 1 after cursor %s: %v, pagination %v; want %v and no more", c.want[0], names, p, c.want[2:])
			}
			if names, p := listNames(t, s, c.path, c.key); !reflect.DeepEqual(names, c.want) || p["limit"] != float64(50) || p["has_more"] != false {
				t.Errorf("GET %s with no parameters: %v, pagination %v; want every item, limit 50", c.path, names, p)
			}
			for _, bad := range []struct{ query, field string }{
				{"limit=abc", "limit"}, {"limit=0", "limit"}, {"limit=201", "limit"},
				{"offset=-1", "offset"}, {"offset=x", "offset"}, {"cursor=Not%20a%20name", "cursor"},
			} {
				r := call(t, s, "GET", c.path+"?"+bad.query, nil)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if f := errField(r); f != bad.field {
					t.Errorf("GET %s?%s: details.field %q, want %q: %s", c.path, bad.query, f, bad.field, r.raw)
				}
			}
		})
	}
}

// listNames reads one page of a list: its items' names and its pagination object.
func listNames(t *testing.T, s *Server, path, key string) ([]string, map[string]any) {
	t.Helper()
	r := call(t, s, "GET", path, nil)
	if r.status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.status, r.raw)
	}
	items, _ := r.body[key].([]any)
	names := []string{}
	for _, it := range items {
		names = append(names, it.(map[string]any)["name"].(string))
	}
	p, _ := r.body["pagination"].(map[string]any)
	if p == nil {
		t.Fatalf("GET %s: no pagination: %s", path, r.raw)
	}
	return names, p
}

// TestCronOverlapPolicyValues: an unknown overlap_policy is 400 invalid_request naming the field, as
// every other field of a registration is; openapi.yaml's "cancel" is taken as ojs-cron.md's
// cancel_previous, and shown as such.
func TestCronOverlapPolicyValues(t *testing.T) {
	s := serverOn(t, "memory")
	r := call(t, s, "POST", "/ojs/v1/cron", `{"name":"overlap-bogus","expression":"* * * * *","overlap_policy":"bogus","job_template":{"type":"a.b","args":[]}}`)
	checkErrorBody(t, r, 400, CodeInvalidRequest)
	if f := errField(r); f != "overlap_policy" {
		t.Fatalf("details.field %q, want overlap_policy: %s", f, r.raw)
	}
	for policy, want := range map[string]string{"cancel": "cancel_previous", "cancel_previous": "cancel_previous", "allow": "allow", "enqueue": "enqueue", "": "skip"} {
		name := "overlap-" + strings.ReplaceAll(want, "_", "-") + "-" + map[bool]string{true: "alias", false: "own"}[policy != want]
		body := `{"name":"` + name + `","expression":"* * * * *","job_template":{"type":"a.b","args":[]}`
		if policy != "" {
			body += `,"overlap_policy":"` + policy + `"`
		}
		r := call(t, s, "POST", "/ojs/v1/cron", body+`}`)
		if r.status != 201 {
			t.Fatalf("overlap_policy %q: %d %s", policy, r.status, r.raw)
		}
		if got := r.body["cron"].(map[string]any)["overlap_policy"]; got != want {
			t.Errorf("overlap_policy %q is shown as %v, want %s", policy, got, want)
		}
	}
}

// TestCronTemplateShowsItsOptions: a registration's view (register, GET, list, delete) shows every
// option its jobs are inserted with (unique, rate_limit, visibility_timeout_ms, retry with
// on_exhaustion, ...) in the form an enqueue takes, so that what a GET shows, deleted and sent back
// (ojs-http-binding.md 13.2's update), registers the same job template again; on every store.
func TestCronTemplateShowsItsOptions(t *testing.T) {
	const reg = `{"name":"opts","expression":"0 0 * * *","job_template":{"type":"a.b","args":[{"id":1}],"meta":{"m":"v"},"options":{
		"queue":"cq","priority":3,"timeout_ms":2000,"visibility_timeout_ms":5000,"tags":["t"],
		"unique":{"keys":["type","args","meta"],"args_keys":["id"],"meta_keys":["m"],"period":"PT1H","states":["available","active"],"on_conflict":"ignore"},
		"rate_limit":{"key":"k","concurrency":2,"rate":{"limit":10,"period":"PT1M"},"on_limit":"reschedule"},
		"retry":{"max_attempts":4,"on_exhaustion":"discard"}}}}`
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			s := serverOn(t, kind)
			if r := call(t, s, "POST", "/ojs/v1/cron", reg); r.status != 201 {
				t.Fatalf("register: %d %s", r.status, r.raw)
			}
			g := call(t, s, "GET", "/ojs/v1/cron/opts", nil)
			c, _ := g.body["cron"].(map[string]any)
			tmpl, _ := c["job_template"].(map[string]any)
			opts, _ := tmpl["options"].(map[string]any)
			want := map[string]any{
				"queue": "cq", "priority": 3.0, "timeout_ms": 2000.0, "visibility_timeout_ms": 5000.0, "tags": []any{"t"},
				"unique": map[string]any{
					"keys": []any{"type", "args", "meta"}, "args_keys": []any{"id"}, "meta_keys": []any{"m"},
					"period": "PT1H", "states": []any{"available", "active"}, "on_conflict": "ignore",
				},
				"rate_limit": map[string]any{"key": "k", "concurrency": 2.0, "rate": map[string]any{"limit": 10.0, "period": "PT1M"}, "on_limit": "reschedule"},
			}
			for k, v := range want {
				if !reflect.DeepEqual(opts[k], v) {
					t.Errorf("job_template.options.%s = %v, want %v", k, opts[k], v)
				}
			}
			if rp, _ := opts["retry"].(map[string]any); rp["on_exhaustion"] != "discard" || rp["max_attempts"] != 4.0 {
				t.Errorf("job_template.options.retry = %v, want max_attempts 4 and on_exhaustion discard", opts["retry"])
			}
			// Delete, then send back what GET showed: the same template.
			d := call(t, s, "DELETE", "/ojs/v1/cron/opts", nil)
			if d.status != 200 || !reflect.DeepEqual(d.body["cron"].(map[string]any)["job_template"], tmpl) {
				t.Fatalf("delete: %d, its view differs from GET's: %s", d.status, d.raw)
			}
			again, _ := json.Marshal(c)
			if r := call(t, s, "POST", "/ojs/v1/cron", string(again)); r.status != 201 {
				t.Fatalf("registering what GET showed: %d %s", r.status, r.raw)
			}
			g2 := call(t, s, "GET", "/ojs/v1/cron/opts", nil)
			if got := g2.body["cron"].(map[string]any)["job_template"]; !reflect.DeepEqual(got, tmpl) {
				t.Errorf("re-registered from its GET, the template is\n%v\nwas\n%v", got, tmpl)
			}
		})
	}
}
