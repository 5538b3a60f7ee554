package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/webhook"
)

// delivery is one POST a webhook endpoint received.
type delivery struct {
	header http.Header
	body   []byte
}

// webhookServer is a server whose client works webhook.Queue with the delivery worker (fast
// retries), over a fresh store of kind, and an endpoint that records what it is sent.
func webhookServer(t *testing.T, kind string) (*Server, <-chan delivery, string) {
	t.Helper()
	st := openStore(t, kind)
	workers := pronto.NewWorkers()
	if err := webhook.AddWorker(workers, st.(store.SettingStore), nil); err != nil {
		t.Fatal(err)
	}
	client, err := pronto.NewClient(st, &pronto.Config{Workers: workers,
		Queues: map[string]pronto.QueueConfig{webhook.Queue: {MaxWorkers: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestServer(t, Config{Client: client, WebhookRetryInterval: 10 * time.Millisecond, WebhookMaxRetryInterval: 20 * time.Millisecond})
	got := make(chan delivery, 100)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{header: r.Header.Clone(), body: b}
	}))
	t.Cleanup(endpoint.Close)
	return s, got, endpoint.URL
}

func nextDelivery(t *testing.T, got <-chan delivery) delivery {
	t.Helper()
	return receive(t, got, "delivery")
}

// TestWebhookAPI: on every store, /ojs/v1/admin/webhooks registers, shows (never the secret),
// replaces, tests and deletes webhooks, refusing bad ones naming the field; the events the server
// records reach a webhook whose filters take them, signed, and the deliveries' own events do not.
func TestWebhookAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, got, url := webhookServer(t, kind)
			r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/webhooks", nil)
			if len(r.body["webhooks"].([]any)) != 0 {
				t.Fatalf("webhooks before any: %s", r.raw)
			}
			r = mustCall(t, s, 201, "POST", "/ojs/v1/admin/webhooks",
				`{"url":"`+url+`/hook","secret":"s3cret","types":["job.completed"],"queues":["wq"],"timeout_ms":5000}`)
			id := r.body["id"].(string)
			if r.body["has_secret"] != true || r.body["secret"] != nil || r.body["enabled"] != true || r.body["timeout_ms"] != 5000.0 ||
				r.body["max_attempts"] != float64(webhook.DefaultMaxAttempts) {
				t.Fatalf("created: %s", r.raw)
			}
			for body, field := range map[string]string{
				`{"url":"mailto:a@b.c"}`: "url",
				`{}`:                     "url",
				`{"url":"https://x.example","types":[1]}`:       "types",
				`{"url":"https://x.example","max_attempts":26}`: "max_attempts",
				`{"url":"https://x.example","surprise":1}`:      "surprise",
			} {
				r := call(t, s, "POST", "/ojs/v1/admin/webhooks", body)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != field {
					t.Fatalf("%s: field %v, want %s", body, f, field)
				}
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/webhooks/019539a4-0000-7000-8000-000000000000", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/webhooks/nope", nil), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "PATCH", "/ojs/v1/admin/webhooks/"+id, nil), 405, "")

			// A job of queue wq completes: its job.completed reaches the webhook; its job.enqueued
			// and job.started, and another queue's, do not.
			job := enqueueJob(t, s, `{"type":"w.job","args":[1],"options":{"queue":"wq"}}`)
			enqueueJob(t, s, `{"type":"w.job","args":[2],"options":{"queue":"other"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["wq"],"worker_id":"w1"}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+job+`","worker_id":"w1"}`)
			d := nextDelivery(t, got)
			var env map[string]any
			if err := json.Unmarshal(d.body, &env); err != nil {
				t.Fatal(err)
			}
			if env["type"] != "job.completed" || env["subject"] != job || env["specversion"] != "1.0" ||
				d.header.Get("X-OJS-Event-ID") != env["id"] || d.header.Get("X-OJS-Signature") != webhook.Signature("s3cret", d.body) {
				t.Fatalf("delivery: %v %s", d.header, d.body)
			}

			// PUT replaces (keeping the secret), and the test endpoint sends a webhook.test.
			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/webhooks/"+id, `{"url":"`+url+`/v2","types":["job.*"],"enabled":true}`)
			if r.body["has_secret"] != true || r.body["url"] != url+"/v2" {
				t.Fatalf("replaced: %s", r.raw)
			}
			r = mustCall(t, s, 202, "POST", "/ojs/v1/admin/webhooks/"+id+"/test", nil)
			d = nextDelivery(t, got)
			if d.header.Get("X-OJS-Event-Type") != "webhook.test" || d.header.Get("X-OJS-Event-ID") != r.body["event_id"] ||
				d.header.Get("X-OJS-Signature") != webhook.Signature("s3cret", d.body) {
				t.Fatalf("test delivery: %v %s", d.header, d.body)
			}
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/webhooks", nil)
			if hooks := r.body["webhooks"].([]any); len(hooks) != 1 || hooks[0].(map[string]any)["secret"] != nil {
				t.Fatalf("list: %s", r.raw)
			}

			// PUT of an unknown id creates it; DELETE removes it, then 404.
			other := "019539a4-0000-7000-8000-00000000000a"
			mustCall(t, s, 201, "PUT", "/ojs/v1/admin/webhooks/"+other, `{"url":"`+url+`/other","enabled":false}`)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/webhooks/"+other+"/test", nil), 409, "")
			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/webhooks/"+other, nil)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/webhooks/"+other, nil), 404, CodeNotFound)
			select {
			case d := <-got:
				t.Fatalf("an unexpected delivery: %v %s", d.header, d.body)
			default:
			}
		})
	}
}

// TestWebhookJobEventsInLifecycleOrder: on every store, a webhook receives one job's events in
// lifecycle order (ojs-events.md §9.2) although the first one's delivery fails at first: the
// job.started and job.completed deliveries wait for the job.enqueued one to succeed.
func TestWebhookJobEventsInLifecycleOrder(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _, _ := webhookServer(t, kind)
			type post struct{ typ, status string }
			got := make(chan post, 100)
			var failed atomic.Bool
			endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				typ := r.Header.Get("X-OJS-Event-Type")
				status := http.StatusOK
				if typ == "job.enqueued" && failed.CompareAndSwap(false, true) {
					status = http.StatusServiceUnavailable
				}
				w.WriteHeader(status)
				got <- post{typ, http.StatusText(status)}
			}))
			t.Cleanup(endpoint.Close)
			mustCall(t, s, 201, "POST", "/ojs/v1/admin/webhooks", `{"url":"`+endpoint.URL+`","types":["job.*"],"queues":["oq"]}`)
			job := enqueueJob(t, s, `{"type":"o.job","args":[1],"options":{"queue":"oq"}}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", `{"queues":["oq"],"worker_id":"w1"}`)
			mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", `{"job_id":"`+job+`","worker_id":"w1"}`)
			var posts []post
			for len(posts) == 0 || posts[len(posts)-1].typ != "job.completed" {
				posts = append(posts, receive(t, got, "delivery"))
			}
			want := []post{{"job.enqueued", "Service Unavailable"}, {"job.enqueued", "OK"}, {"job.started", "OK"}, {"job.completed", "OK"}}
			if len(posts) != len(want) {
				t.Fatalf("deliveries %v, want %v", posts, want)
			}
			for i := range want {
				if posts[i] != want[i] {
					t.Fatalf("deliveries %v, want %v", posts, want)
				}
			}
		})
	}
}
