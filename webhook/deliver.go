package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/version"
	"github.com/pronto-jobs/pronto/store"
)

// deliverArgs are a delivery job's args: the webhook and the event, whose envelope is the body
// posted. The secret is not in them (job args are listed by the admin API and the dashboard); the
// worker reads it from the registration.
type deliverArgs struct {
	WebhookID string          `json:"webhook_id"`
	EventID   string          `json:"event_id"`
	EventType string          `json:"event_type"`
	Event     json.RawMessage `json:"event"`
}

func (deliverArgs) Kind() string { return Kind }

// Signature returns the X-OJS-Signature of body under secret: "sha256=" and the hex HMAC-SHA256.
// A receiver computes the same over the raw body it read and compares with hmac.Equal.
func Signature(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// WorkerOptions tunes AddWorker.
type WorkerOptions struct {
	// HTTPClient sends the POSTs (default: a client of its own, which follows no redirect: a
	// webhook's URL is where its events go, and a redirect is answered as the failure it is).
	HTTPClient *http.Client
}

// AddWorker registers the delivery worker on workers: it posts each delivery job's event to its
// webhook, reading the registration from ss at each try (so a changed URL or secret applies to the
// queued deliveries). A 2xx answer completes the job; a network error, a timeout, 408, 425, 429 or a
// 5xx fails the attempt, retried with the client's backoff up to the webhook's MaxAttempts; any other
// answer (a 4xx: the endpoint refuses the event) discards the job at once. A delivery of a webhook
// deleted or disabled since is cancelled. Work Queue with a client whose Workers hold it.
func AddWorker(workers *pronto.Workers, ss store.SettingStore, opts *WorkerOptions) error {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if opts != nil && opts.HTTPClient != nil {
		hc = opts.HTTPClient
	}
	return pronto.AddWorkerSafely(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[deliverArgs]) error {
		return deliver(ctx, hc, ss, j)
	}))
}

func deliver(ctx context.Context, hc *http.Client, ss store.SettingStore, j *pronto.Job[deliverArgs]) error {
	a := j.Args
	w, err := Get(ctx, ss, a.WebhookID)
	if errors.Is(err, pronto.ErrNotFound) {
		return pronto.Cancel(fmt.Errorf("webhook %s was deleted", a.WebhookID))
	}
	if err != nil {
		return err
	}
	if w.Disabled {
		return pronto.Cancel(fmt.Errorf("webhook %s is disabled", a.WebhookID))
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(a.Event))
	if err != nil {
		return pronto.Discard(fmt.Errorf("webhook %s: %w", w.ID, err))
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "pronto-webhook/"+version.String())
	h.Set("X-OJS-Webhook-ID", w.ID)
	h.Set("X-OJS-Event-ID", a.EventID)
	h.Set("X-OJS-Event-Type", a.EventType)
	h.Set("X-OJS-Delivery-Attempt", strconv.Itoa(j.Attempt))
	if w.Secret != "" {
		h.Set("X-OJS-Signature", Signature(w.Secret, a.Event))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %s: POST %s: %w", w.ID, redactURL(w.URL), err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	failure := fmt.Errorf("webhook %s: POST %s answered %s%s", w.ID, redactURL(w.URL), resp.Status, quoteBody(snippet))
	switch {
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout,
		resp.StatusCode == http.StatusTooEarly, resp.StatusCode == http.StatusTooManyRequests:
		return failure // retried
	default:
		return pronto.Discard(failure)
	}
}

// redactURL drops a URL's user information and query, which may carry credentials, from errors
// (they are kept in the job's error history).
func redactURL(raw string) string {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i] + "?…"
	}
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, _, _ := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		return raw[:len(raw)-len(rest)] + "…@" + rest[at+1:]
	}
	return raw
}

// quoteBody is the start of a failed answer's body, for the error.
func quoteBody(b []byte) string {
	s := strings.TrimSpace(string(bytes.ToValidUTF8(b, []byte("?"))))
	if s == "" {
		return ""
	}
	return ": " + strconv.Quote(s)
}
