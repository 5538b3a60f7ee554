package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/webhook"
)

// Webhooks (ojs-events.md §6.5): registrations under /ojs/v1/admin/webhooks, stored in the store's
// settings (package webhook), and the events this server records delivered to them as jobs of
// webhook.Queue, which a client with webhook.AddWorker works (pronto serve: --webhook-workers).

// startWebhooks makes the dispatcher of the server's events to the registered webhooks, when the
// store keeps settings, and hooks it to the event log.
func (s *Server) startWebhooks(cfg *Config) {
	ss, ok := s.client.Store().(store.SettingStore)
	if !ok {
		return
	}
	s.webhookStore = ss
	s.webhooks = webhook.NewDispatcher(s.client, ss, &webhook.DispatcherOptions{Logger: s.log,
		RetryInterval: cfg.WebhookRetryInterval, MaxRetryInterval: cfg.WebhookMaxRetryInterval})
	d := s.webhooks
	s.events.onAdd = func(e *event) {
		if d.Wants(e.typ, e.queue, e.jobType) {
			d.Publish(webhook.Event{ID: s.events.eventID(e), Type: e.typ, Queue: e.queue, JobType: e.jobType,
				Body: s.events.appendEvent(nil, e), Subject: orderedSubject(e)})
		}
	}
}

// orderedSubject is what e's webhook deliveries are ordered by (webhook.Event.Subject): its job for
// a job event, its workflow for a workflow event (ojs-events.md §9.2); other events go unordered,
// so that a busy rate key, tenant or cron does not make its events' deliveries wait in line.
func orderedSubject(e *event) string {
	if strings.HasPrefix(e.typ, "job.") || strings.HasPrefix(e.typ, "workflow.") {
		return e.subject
	}
	return ""
}

// WebhookEventsDropped returns how many events this server recorded for a webhook and did not
// deliver (webhook.Dispatcher.Dropped): a full buffer, a delivery job the store refused, or a
// shutdown before the store took them. It is 0 on a store without settings (no webhooks).
func (s *Server) WebhookEventsDropped() int64 {
	if s.webhooks == nil {
		return 0
	}
	return s.webhooks.Dropped()
}

// routeWebhooks serves /ojs/v1/admin/webhooks: GET lists, POST registers; /{id}: GET, PUT (create
// or replace), DELETE; /{id}/test: POST sends a webhook.test event.
func (s *Server) routeWebhooks(w http.ResponseWriter, r *http.Request, seg []string) bool {
	if s.webhooks == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotImplemented, code: "unsupported",
			message: "webhooks need a store that keeps settings"})
		return true
	}
	m := r.Method
	switch {
	case len(seg) == 2:
		switch m {
		case http.MethodGet:
			s.listWebhooks(w, r)
		case http.MethodPost:
			s.putWebhook(w, r, "")
		default:
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet, http.MethodPost))
		}
		return true
	case len(seg) == 3:
		if !uuidv7.Valid(seg[2]) {
			s.writeError(w, r, invalid("id", "%q is not a webhook id (a lowercase UUIDv7)", seg[2]))
			return true
		}
		switch m {
		case http.MethodGet:
			s.getWebhook(w, r, seg[2])
		case http.MethodPut:
			s.putWebhook(w, r, seg[2])
		case http.MethodDelete:
			s.deleteWebhook(w, r, seg[2])
		default:
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet, http.MethodPut, http.MethodDelete))
		}
		return true
	case len(seg) == 4 && seg[3] == "test":
		if m != http.MethodPost {
			s.writeError(w, r, methodNotAllowed(r, http.MethodPost))
			return true
		}
		s.testWebhook(w, r, seg[2])
		return true
	}
	return false
}

// webhookView is a registration as the API shows it: its secret never, has_secret instead.
func webhookView(h *webhook.Webhook) map[string]any {
	v := map[string]any{
		"id": h.ID, "url": h.URL, "types": nonNil(h.Types), "queues": nonNil(h.Queues), "job_types": nonNil(h.JobTypes),
		"timeout_ms": h.Timeout.Milliseconds(), "max_attempts": h.MaxAttempts, "enabled": !h.Disabled,
		"has_secret": h.HasSecret(), "created_at": formatTime(h.CreatedAt), "updated_at": formatTime(h.UpdatedAt),
	}
	if h.Timeout == 0 {
		v["timeout_ms"] = webhook.DefaultTimeout.Milliseconds()
	}
	if h.MaxAttempts == 0 {
		v["max_attempts"] = webhook.DefaultMaxAttempts
	}
	return v
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	hooks, err := webhook.List(r.Context(), s.webhookStore)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "webhooks", ""))
		return
	}
	views := make([]map[string]any, len(hooks))
	for i := range hooks {
		views[i] = webhookView(&hooks[i])
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"webhooks": views})
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request, id string) {
	h, err := webhook.Get(r.Context(), s.webhookStore, id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "webhook", id))
		return
	}
	writeJSONValue(w, http.StatusOK, webhookView(&h))
}

// putWebhook registers (POST, id "") or creates or replaces (PUT) a webhook from the body: {"url",
// "secret", "types", "queues", "job_types", "timeout_ms", "max_attempts", "enabled"}.
func (s *Server) putWebhook(w http.ResponseWriter, r *http.Request, id string) {
	h, ok := readRequest(s, w, r, "webhook", decodeWebhook)
	if !ok {
		return
	}
	h.ID = id
	created := id == ""
	if !created {
		_, err := webhook.Get(r.Context(), s.webhookStore, id)
		created = errors.Is(err, pronto.ErrNotFound)
	}
	stored, err := webhook.Put(r.Context(), s.webhookStore, *h)
	if err != nil {
		var fe *webhook.FieldError
		if errors.As(err, &fe) {
			s.writeError(w, r, invalid(fe.Field, "%v", fe))
			return
		}
		s.writeError(w, r, fromClientError(err, "webhook", id))
		return
	}
	s.webhooks.Refresh(r.Context())
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSONValue(w, status, webhookView(&stored))
}

func decodeWebhook(body []byte) (*webhook.Webhook, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, invalid("", "the body must be a JSON object")
	}
	h := &webhook.Webhook{}
	for k, v := range m {
		var e *apiError
		switch k {
		case "url":
			h.URL, e = wantString(v, k)
		case "secret":
			if !isNull(v) {
				h.Secret, e = wantString(v, k)
			}
		case "types":
			h.Types, e = wantStrings(v, k)
		case "queues":
			h.Queues, e = wantStrings(v, k)
		case "job_types":
			h.JobTypes, e = wantStrings(v, k)
		case "timeout_ms":
			var ms int64
			ms, e = wantInt(v, k, 0, webhook.MaxTimeout.Milliseconds())
			h.Timeout = time.Duration(ms) * time.Millisecond
		case "max_attempts":
			var n int64
			n, e = wantInt(v, k, 0, webhook.MaxAttemptsLimit)
			h.MaxAttempts = int(n)
		case "enabled":
			var on bool
			on, e = wantBool(v, k)
			h.Disabled = !on
		case "id", "has_secret", "created_at", "updated_at":
			// What a GET answered, sent back as is: the path names the webhook, the rest is stored.
		default:
			e = invalid(k, "unknown field %s (a webhook takes url, secret, types, queues, job_types, timeout_ms, max_attempts and enabled)", k)
		}
		if e != nil {
			return nil, e
		}
	}
	return h, nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, id string) {
	if err := webhook.Delete(r.Context(), s.webhookStore, id); err != nil {
		s.writeError(w, r, fromClientError(err, "webhook", id))
		return
	}
	s.webhooks.Refresh(r.Context())
	writeJSONValue(w, http.StatusOK, map[string]any{"deleted": true, "id": id})
}

// testWebhook records a webhook.test event that only this webhook takes and delivers it as any
// other: the answer is its delivery job, to follow with GET /ojs/v1/jobs/{id}.
func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request, id string) {
	h, err := webhook.Get(r.Context(), s.webhookStore, id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "webhook", id))
		return
	}
	if h.Disabled {
		s.writeError(w, r, conflict("webhook %s is disabled: enable it to test it", id))
		return
	}
	// Not in the event log (every webhook taking "webhook.*" would get it): an id of its own.
	evID := "evt_" + uuidv7.New()
	b := []byte{'{'}
	b = appendStringField(b, "specversion", "1.0")
	b = appendStringField(b, "id", evID)
	b = appendStringField(b, "type", "webhook.test")
	b = appendStringField(b, "source", s.source)
	b = appendTimeField(b, "time", time.Now())
	b = appendStringField(b, "subject", id)
	b = appendStringField(b, "datacontenttype", "application/json")
	b = append(appendStringField(append(appendKey(b, "data"), '{'), "webhook_id", id), '}', '}')
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	j, err := s.webhooks.Deliver(ctx, &h, webhook.Event{ID: evID, Type: "webhook.test", Body: b})
	if err != nil {
		s.writeError(w, r, fromClientError(err, "webhook", id))
		return
	}
	writeJSONValue(w, http.StatusAccepted, map[string]any{"webhook_id": id, "job_id": j.ID, "event_id": evID, "event_type": "webhook.test"})
}
