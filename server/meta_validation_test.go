package server

import (
	"context"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// errDetails returns an error answer's code and details.
func errDetails(t *testing.T, r *response) (string, map[string]any) {
	t.Helper()
	eb, ok := r.body["error"].(map[string]any)
	if !ok {
		t.Fatalf("status %d without an error body: %s", r.status, r.raw)
	}
	d, _ := eb["details"].(map[string]any)
	code, _ := eb["code"].(string)
	return code, d
}

// metaOfSize is a meta object of exactly n bytes as compact JSON: {"blob":"xx..."}.
func metaOfSize(n int) string {
	const frame = len(`{"blob":""}`)
	return `{"blob":"` + strings.Repeat("x", n-frame) + `"}`
}

// TestMetaOverSizeLimitRefused: a meta over pronto.DefaultMaxMetaBytes serialized is refused with
// 413 metadata_too_large naming meta and both sizes (ojs-payload-limits.md §4.3, §9.2; PL-002), and
// nothing is stored. A meta of exactly the limit is accepted, and white space a sender adds around
// the members does not count against it.
func TestMetaOverSizeLimitRefused(t *testing.T) {
	s, client := newTestServer(t, Config{})
	enqueue := func(queue, meta string) *response {
		return call(t, s, "POST", "/ojs/v1/jobs",
			`{"type":"meta.size","args":[1],"options":{"queue":"`+queue+`"},"meta":`+meta+`}`)
	}
	stored := func(queue string) int {
		jobs, err := client.JobList(context.Background(), &pronto.JobListParams{Queues: []string{queue}})
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs.Jobs)
	}

	r := enqueue("metabig", metaOfSize(512<<10))
	if r.status != 413 {
		t.Fatalf("a 512 KiB meta: status %d, want 413: %s", r.status, r.raw)
	}
	code, d := errDetails(t, r)
	if code != "metadata_too_large" || d["field"] != "meta" || d["max_bytes"] != float64(pronto.DefaultMaxMetaBytes) ||
		d["actual_bytes"] != float64(512<<10) {
		t.Errorf("a 512 KiB meta: code %q, details %v; want metadata_too_large, field meta, max_bytes %d, actual_bytes %d",
			code, d, pronto.DefaultMaxMetaBytes, 512<<10)
	}
	if n := stored("metabig"); n != 0 {
		t.Errorf("the job with a 512 KiB meta was stored (%d job(s))", n)
	}

	if r := enqueue("metaover", metaOfSize(pronto.DefaultMaxMetaBytes+1)); r.status != 413 {
		t.Errorf("a meta one byte over the limit: status %d, want 413: %s", r.status, r.raw)
	}
	if r := enqueue("metaat", metaOfSize(pronto.DefaultMaxMetaBytes)); r.status != 201 {
		t.Errorf("a meta of exactly the limit: status %d, want 201: %s", r.status, r.raw)
	}
	padded := "{ " + strings.Repeat(" ", 8<<10) + metaOfSize(pronto.DefaultMaxMetaBytes)[1:]
	if r := enqueue("metapadded", padded); r.status != 201 {
		t.Errorf("a meta at the limit with 8 KiB of white space around its member: status %d, want 201: %s", r.status, r.raw)
	}
}

// TestMetaWithMetadataOverSizeLimitRefused: options.metadata is merged into meta, so the limit holds
// for the two together, not only for each alone.
func TestMetaWithMetadataOverSizeLimitRefused(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	half := `"` + strings.Repeat("y", pronto.DefaultMaxMetaBytes/2) + `"`
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"meta.size","args":[1],"meta":{"a":`+half+`},`+
		`"options":{"metadata":{"b":`+half+`}}}`)
	if r.status != 413 {
		t.Fatalf("meta and options.metadata of half the limit each: status %d, want 413: %s", r.status, r.raw)
	}
	if code, d := errDetails(t, r); code != "metadata_too_large" || d["field"] != "meta" {
		t.Errorf("code %q, details %v; want metadata_too_large naming meta", code, d)
	}
	if r := call(t, s, "POST", "/ojs/v1/jobs", map[string]any{"type": "meta.size", "args": []any{1},
		"options": map[string]any{"metadata": map[string]any{"blob": strings.Repeat("z", 512<<10)}}}); r.status != 413 {
		t.Errorf("options.metadata of 512 KiB: status %d, want 413: %s", r.status, r.raw)
	}
}

// TestMetaKeysAndLineBreaksRefused: ojs-security.md §8.3 (SEC-011): a top-level meta key outside
// ^[a-zA-Z0-9_.-]{1,128}$, or a top-level string value holding CR or LF (however escaped), could
// inject a header downstream: 400 naming meta.<key>. Keys within the rule, nested members and
// non-string values are accepted as they are.
func TestMetaKeysAndLineBreaksRefused(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	long := strings.Repeat("k", 129)
	for _, c := range []struct {
		name, meta, field string
	}{
		{"key with CRLF", `{"X-Evil\r\nSet-Cookie: a":"b"}`, "meta.X-Evil\r\nSet-Cookie: a"},
		{"empty key", `{"":"v"}`, "meta."},
		{"key of 129 bytes", `{"` + long + `":"v"}`, "meta." + long},
		{"key with a colon", `{"a:b":"v"}`, "meta.a:b"},
		{"key with a slash", `{"a/b":"v"}`, "meta.a/b"},
		{"value with CRLF", `{"note":"a\r\nSet-Cookie: session=attacker"}`, "meta.note"},
		{"value with an escaped LF", `{"note":"a\u000ab"}`, "meta.note"},
		{"value with CR alone", `{"note":"a\rb"}`, "meta.note"},
	} {
		r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"meta.keys","args":[1],"meta":`+c.meta+`}`)
		if r.status != 400 {
			t.Errorf("%s: status %d, want 400: %s", c.name, r.status, r.raw)
			continue
		}
		if _, d := errDetails(t, r); d["field"] != c.field {
			t.Errorf("%s: error field %q, want %q", c.name, d["field"], c.field)
		}
	}
	r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"meta.keys","args":[1],"options":{"metadata":{"bad key":"v"}}}`)
	if _, d := errDetails(t, r); r.status != 400 || d["field"] != "options.metadata.bad key" {
		t.Errorf("options.metadata with a bad key: status %d, want 400 naming options.metadata.bad key: %s", r.status, r.raw)
	}

	ok := `{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","X-Request.id_2":"a\tb","` + strings.Repeat("k", 128) +
		`":1,"tags":["line\none"],"nested":{"any key: here":"x\ny"},"quoted":"say \"hi\""}`
	if r := call(t, s, "POST", "/ojs/v1/jobs", `{"type":"meta.keys","args":[1],"meta":`+ok+`}`); r.status != 201 {
		t.Errorf("a meta within the rules: status %d, want 201: %s", r.status, r.raw)
	}
}

// TestManifestListsMetaLimit: the manifest's limits say how large a meta may be, as
// ojs-payload-limits.md §8.1 asks, so an SDK can check before sending.
func TestManifestListsMetaLimit(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	r := call(t, s, "GET", "/ojs/manifest", nil)
	limits, _ := r.body["limits"].(map[string]any)
	if limits["max_meta_bytes"] != float64(pronto.DefaultMaxMetaBytes) {
		t.Errorf("manifest limits %v: want max_meta_bytes %d", limits, pronto.DefaultMaxMetaBytes)
	}
}
