package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Retry behaviour the OJS specifications require of the HTTP API (ojs-retry.md, and the envelope and
// worker members that decide when a job is retried), checked on every store.

// retrySpecStores are the stores every behaviour is checked on.
var retrySpecStores = storeKinds

// retrySpecServer is a server over a fresh store of the given kind, with a started client.
func retrySpecServer(t *testing.T, kind string) http.Handler { return startedServer(t, kind) }

// retrySpecEnqueue enqueues body and returns the job id.
func retrySpecEnqueue(t *testing.T, h http.Handler, body string) string {
	t.Helper()
	r := call(t, h, "POST", "/ojs/v1/jobs", body)
	if r.status != 201 {
		t.Fatalf("enqueue %s: %d %s", body, r.status, r.raw)
	}
	return r.body["job"].(map[string]any)["id"].(string)
}

// retrySpecFetch fetches one job of queue for worker w, waiting for one with a generous deadline.
func retrySpecFetch(t *testing.T, h http.Handler, queue, w string, extra string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := call(t, h, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+queue+`"],"worker_id":"`+w+`"`+extra+`}`)
		if r.status != 200 {
			t.Fatalf("fetch: %d %s", r.status, r.raw)
		}
		if jobs, _ := r.body["jobs"].([]any); len(jobs) > 0 {
			return jobs[0].(map[string]any)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job in queue %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func retrySpecNack(t *testing.T, h http.Handler, job map[string]any, w, errBody string) *response {
	t.Helper()
	return call(t, h, "POST", "/ojs/v1/workers/nack", fmt.Sprintf(`{"job_id":%q,"worker_id":%q,"claim_token":%q,"error":%s}`,
		job["id"], w, job["claim_token"], errBody))
}

// retrySpecEach runs f on a fresh server over every store.
func retrySpecEach(t *testing.T, f func(t *testing.T, h http.Handler)) {
	for _, kind := range retrySpecStores {
		t.Run(kind, func(t *testing.T) { f(t, retrySpecServer(t, kind)) })
	}
}

// TestRetryJitterStaysWithinMaxInterval: ojs-retry.md 5.3 and RET-06 say the max_interval cap MUST be
// applied again after jitter (final_delay = min(jittered_delay, max_interval)). With
// initial_interval = max_interval = PT10S and jitter on, no retry may be scheduled more than 10 s
// after the failure (jitter multiplies by [0.5, 1.5), so half the draws would exceed it uncapped).
func TestRetryJitterStaysWithinMaxInterval(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		for i := 0; i < 20; i++ {
			retrySpecEnqueue(t, h, `{"type":"a.b","args":[],"options":{"queue":"cap","retry":{"max_attempts":3,"initial_interval":"PT10S","max_interval":"PT10S","jitter":true}}}`)
			j := retrySpecFetch(t, h, "cap", "w", "")
			r := retrySpecNack(t, h, j, "w", `{"code":"handler_error","message":"boom"}`)
			if r.status != 200 || r.body["state"] != "retryable" {
				t.Fatalf("nack: %d %s", r.status, r.raw)
			}
			if d := r.body["retry_delay_ms"].(float64); d > 10000 {
				t.Fatalf("retry scheduled %v ms after the failure, beyond max_interval PT10S (jitter must not push a delay past max_interval): %s", d, r.raw)
			}
		}
	})
}

// TestRetryHugeIntervalStillWaits: a long max_interval (P106000D, so that no backoff is capped
// early) with jitter on is near the largest time.Duration; a jitter factor above ~1.007 must not
// overflow it into a negative delay that makes the job due at once: RET-11 says a retrying job MUST
// NOT be available before its backoff elapses.
func TestRetryHugeIntervalStillWaits(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		for i := 0; i < 30; i++ {
			q := fmt.Sprintf("huge%d", i)
			retrySpecEnqueue(t, h, `{"type":"a.b","args":[],"options":{"queue":"`+q+`","retry":{"max_attempts":3,"initial_interval":"P106000D","max_interval":"P106000D","jitter":true}}}`)
			j := retrySpecFetch(t, h, q, "w", "")
			before := time.Now()
			r := retrySpecNack(t, h, j, "w", `{"code":"handler_error","message":"boom"}`)
			if r.status != 200 || r.body["state"] != "retryable" {
				t.Fatalf("nack: %d %s", r.status, r.raw)
			}
			next, err := time.Parse(time.RFC3339Nano, r.body["next_attempt_at"].(string))
			if d := r.body["retry_delay_ms"].(float64); d <= 0 || err != nil || !next.After(before) {
				t.Fatalf("a backoff of ~P106000D was scheduled in the past (retry_delay_ms %v): %s", d, r.raw)
			}
			if r := call(t, h, "POST", "/ojs/v1/workers/fetch", `{"queues":["`+q+`"],"worker_id":"w"}`); len(r.body["jobs"].([]any)) != 0 {
				t.Fatalf("the job was handed out again before its backoff: %s", r.raw)
			}
		}
	})
}

// TestRetryInitialIntervalBeyondDefaultMaxInterval: ojs-retry.md 8.1 merges a partial policy with
// the defaults (max_interval PT5M) and 11.1 requires max_interval >= initial_interval. pronto
// honours {"initial_interval": "PT10M"} given alone (the cap becomes the initial interval, not a
// default that would shorten it to 5 minutes), and refuses a max_interval given shorter than it.
func TestRetryInitialIntervalBeyondDefaultMaxInterval(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		r := call(t, h, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"queue":"iv","retry":{"initial_interval":"PT10M","max_interval":"PT5M"}}}`)
		if r.status != 422 || !strings.Contains(string(r.raw), "retry.max_interval") {
			t.Fatalf("max_interval PT5M below initial_interval PT10M: %d %s, want 422 naming retry.max_interval", r.status, r.raw)
		}
		retrySpecEnqueue(t, h, `{"type":"a.b","args":[],"options":{"queue":"iv","retry":{"initial_interval":"PT10M","jitter":false}}}`)
		j := retrySpecFetch(t, h, "iv", "w", "")
		r = retrySpecNack(t, h, j, "w", `{"code":"handler_error","message":"boom"}`)
		if r.status != 200 || r.body["state"] != "retryable" {
			t.Fatalf("nack: %d %s", r.status, r.raw)
		}
		if d := r.body["retry_delay_ms"].(float64); d != 600000 {
			t.Fatalf("initial_interval PT10M without jitter: the first retry waits %v ms, not 600000: %s", d, r.raw)
		}
	})
}

// TestRetryUnknownPolicyMemberRefused: the RetryPolicy schema (ojs-retry.md 14) has
// "additionalProperties": false and RET-20 says policies MUST be validated against it: a typo such
// as "max_retries": 10 (Celery's name) is refused, naming it, not dropped to run the default policy.
func TestRetryUnknownPolicyMemberRefused(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		for _, pol := range []string{`{"max_retries":10}`, `{"max_attempt":10}`, `{"backoff":"exponential"}`} {
			r := call(t, h, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"options":{"retry":`+pol+`}}`)
			name := strings.SplitN(pol[2:], `"`, 2)[0]
			if r.status != 422 || !strings.Contains(string(r.raw), `"retry.`+name+`"`) {
				t.Fatalf("retry policy %s with an unknown member: %d, want a 422 naming it: %s", pol, r.status, r.raw)
			}
		}
	})
}

// TestRetryEnvelopeVisibilityTimeout: ojs-json-format.md 3 and ojs-worker-protocol.md 5.3 define
// the envelope's "visibility_timeout" (integer seconds) as the job's own reservation period: a job
// that asks for 2 s is leased for 2 s, not the default 30 minutes (which would hold it that long
// after its worker dies). A value that is not a positive integer of at most 7 days is refused.
func TestRetryEnvelopeVisibilityTimeout(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		retrySpecEnqueue(t, h, `{"type":"a.b","args":[],"queue":"vt","visibility_timeout":2}`)
		j := retrySpecFetch(t, h, "vt", "w", "")
		started, err1 := time.Parse(time.RFC3339Nano, j["started_at"].(string))
		until, err2 := time.Parse(time.RFC3339Nano, j["visible_until"].(string))
		if err1 != nil || err2 != nil {
			t.Fatalf("fetched job: %v", j)
		}
		if lease := until.Sub(started); lease > time.Minute {
			t.Fatalf("a job enqueued with visibility_timeout 2 (seconds) is leased for %s: %v", lease, j)
		}
		for _, bad := range []string{`0`, `-1`, `1.5`, `"2"`, `"PT2S"`, `604801`} {
			r := call(t, h, "POST", "/ojs/v1/jobs", `{"type":"a.b","args":[],"queue":"vt","visibility_timeout":`+bad+`}`)
			if r.status != 400 || !strings.Contains(string(r.raw), `"visibility_timeout"`) {
				t.Fatalf("visibility_timeout %s: %d %s, want 400 naming the field", bad, r.status, r.raw)
			}
		}
	})
}

// retrySpecInDeadLetter reports whether job id is listed by GET /ojs/v1/dead-letter?queue=q.
func retrySpecInDeadLetter(t *testing.T, h http.Handler, q, id string) bool {
	t.Helper()
	r := call(t, h, "GET", "/ojs/v1/dead-letter?queue="+q, nil)
	if r.status != 200 {
		t.Fatalf("dead-letter list: %d %s", r.status, r.raw)
	}
	for _, j := range r.body["jobs"].([]any) {
		if j.(map[string]any)["id"] == id {
			return true
		}
	}
	return false
}

// TestRetryHandlerResponseCodes: ojs-retry.md 7.2 (RET-08): a handler error with code DISCARD is
// discarded at once and not dead-lettered whatever on_exhaustion says; DEAD_LETTER goes to the dead
// letter queue at once whatever on_exhaustion says; FAIL is discarded at once; RETRY follows the
// policy. The error is stored as sent, and dead_letter.added agrees with the dead-letter listing.
func TestRetryHandlerResponseCodes(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		for _, c := range []struct {
			code, onExhaustion string
			deadLetter         bool
		}{
			{"DISCARD", "dead_letter", false},
			{"DEAD_LETTER", "discard", true},
			{"FAIL", "dead_letter", false},
			{"RETRY", "dead_letter", false},
		} {
			q := "code-" + strings.ToLower(strings.ReplaceAll(c.code, "_", "-"))
			id := retrySpecEnqueue(t, h, `{"type":"a.b","args":[],"options":{"queue":"`+q+`","retry":{"max_attempts":5,"on_exhaustion":"`+c.onExhaustion+`"}}}`)
			j := retrySpecFetch(t, h, q, "w", "")
			r := retrySpecNack(t, h, j, "w", `{"code":"`+c.code+`","type":"payment.card_stolen","message":"no"}`)
			if c.code == "RETRY" {
				if r.status != 200 || r.body["state"] != "retryable" {
					t.Fatalf("nack with handler code RETRY on attempt 1 of 5: %d %s, want retryable", r.status, r.raw)
				}
				continue
			}
			if r.status != 200 || r.body["state"] != "discarded" {
				t.Fatalf("nack with handler code %s on attempt 1 of 5: %d %s, want discarded at once", c.code, r.status, r.raw)
			}
			if got := retrySpecInDeadLetter(t, h, q, id); got != c.deadLetter {
				t.Fatalf("handler code %s (on_exhaustion %s): in dead letter %v, want %v", c.code, c.onExhaustion, got, c.deadLetter)
			}
			job := call(t, h, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
			errs, _ := job["errors"].([]any)
			if len(errs) != 1 {
				t.Fatalf("handler code %s: errors %v", c.code, job["errors"])
			}
			if e := errs[0].(map[string]any); e["code"] != c.code || e["type"] != "payment.card_stolen" || e["retryable"] != false {
				t.Fatalf("handler code %s: stored error %v, want code %s, type payment.card_stolen, not retryable", c.code, e, c.code)
			}
			// dead_letter.added follows job.discarded, from the same outcome, when the job is listed.
			if c.deadLetter {
				waitLogged(t, h.(*Server), id, "dead_letter.added")
			} else if evs := loggedTypes(waitLogged(t, h.(*Server), id, "job.discarded")); slices.Contains(evs, "dead_letter.added") {
				t.Fatalf("handler code %s: events %v: dead_letter.added for a job not in the dead letter queue", c.code, evs)
			}
		}
	})
}

// TestRetryQuietWorkerFetchesNothing: ojs-graceful-shutdown.md 5.1: a worker entering the quiet phase
// "MUST send a heartbeat with state: quiet to inform the backend", and "the backend MUST NOT assign
// new jobs to a quiet worker": the quiet worker's next fetch is handed nothing, and the admin API
// shows the state as the directive an operator's quiet would set. A reported terminate replaces it,
// and neither steps back (ojs-worker-protocol.md 2.3) when a later heartbeat says otherwise.
func TestRetryQuietWorkerFetchesNothing(t *testing.T) {
	retrySpecEach(t, func(t *testing.T, h http.Handler) {
		r := call(t, h, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wq","state":"quiet","active_jobs":0,"active_job_ids":[]}`)
		if r.status != 200 || r.body["state"] != "quiet" {
			t.Fatalf("heartbeat: %d %s, want the state quiet answered", r.status, r.raw)
		}
		retrySpecEnqueue(t, h, `{"type":"a.b","args":[],"options":{"queue":"quiet"}}`)
		r = call(t, h, "POST", "/ojs/v1/workers/fetch", `{"queues":["quiet"],"worker_id":"wq"}`)
		if r.status != 200 {
			t.Fatalf("fetch: %d %s", r.status, r.raw)
		}
		if jobs := r.body["jobs"].([]any); len(jobs) != 0 {
			w := call(t, h, "GET", "/ojs/v1/admin/workers", nil)
			t.Fatalf("a worker that reported state quiet was assigned a job: %s (admin workers: %s)", r.raw, w.raw)
		}
		if w := call(t, h, "GET", "/ojs/v1/admin/workers/wq", nil); w.body["state"] != "quiet" || w.body["directive"] != "quiet" {
			t.Fatalf("admin worker after a quiet heartbeat: %s", w.raw)
		}
		for _, c := range []struct{ reported, want string }{{"running", "quiet"}, {"terminate", "terminate"}, {"quiet", "terminate"}, {"running", "terminate"}} {
			r := call(t, h, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wq","state":"`+c.reported+`","active_jobs":0,"active_job_ids":[]}`)
			if r.status != 200 || r.body["state"] != c.want {
				t.Fatalf("heartbeat reporting %s: %d %s, want %s", c.reported, r.status, r.raw, c.want)
			}
		}
		if w := call(t, h, "GET", "/ojs/v1/admin/workers/wq", nil); w.body["state"] != "terminating" || w.body["directive"] != "terminate" {
			t.Fatalf("admin worker after a terminate heartbeat: %s", w.raw)
		}
		if r := call(t, h, "POST", "/ojs/v1/workers/heartbeat", `{"worker_id":"wq","state":7,"active_jobs":0}`); r.status != 400 || !strings.Contains(string(r.raw), `"state"`) {
			t.Fatalf("heartbeat with state 7: %d %s, want 400 naming state", r.status, r.raw)
		}
	})
}
