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
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/version"
	"github.com/pronto-jobs/pronto/store"
)

// deliverArgs are a delivery job's args: the webhook and the event, whose envelope is the body
// posted, and the delivery job that must be over before this one posts (the previous event of the
// same subject to the same webhook; see Event.Subject). The secret is not in them (job args are
// listed by the admin API and the dashboard); the worker reads it from the registration.
type deliverArgs struct {
	WebhookID string          `json:"webhook_id"`
	EventID   string          `json:"event_id"`
	EventType string          `json:"event_type"`
	Event     json.RawMessage `json:"event"`
	After     string          `json:"after,omitempty"`
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
// deleted or disabled since is cancelled. A delivery whose subject's previous delivery to the same
// webhook is not over (completed, discarded or cancelled) waits for it: while that one runs, the
// worker waits up to a second; else the job is snoozed (pronto.Snooze), which spends none of its
// attempts, until about when that one is due, or, while that one waits for a worker or runs on, for
// as long as it has waited or run so far (250 ms to 5 s). ss must be the client's store, which also
// holds the jobs. Work Queue with a client whose Workers hold it.
func AddWorker(workers *pronto.Workers, ss store.SettingStore, opts *WorkerOptions) error {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if opts != nil && opts.HTTPClient != nil {
		hc = opts.HTTPClient
	}
	jobs, ok := ss.(store.Store)
	if !ok {
		return fmt.Errorf("webhook worker: %T keeps settings but not jobs: pass the client's store", ss)
	}
	return pronto.AddWorkerSafely(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[deliverArgs]) error {
		return deliver(ctx, hc, ss, jobs, j)
	}))
}

// The waits of a delivery whose predecessor is not over (see AddWorker).
const (
	// turnHold is how long a worker waits, polling, for a predecessor that is running.
	turnHold = time.Second
	// turnSnooze is the shortest a delivery is snoozed for when its predecessor waits for a worker
	// or has run past turnHold, and how long after its predecessor's due time it comes back.
	turnSnooze = 250 * time.Millisecond
	// turnSnoozeMax is the longest: a predecessor that has waited or run for a while is snoozed
	// for as long as it has (so a long wait costs a few snoozes, not one every turnSnooze), up to it.
	turnSnoozeMax = 5 * time.Second
)

// turn returns how long a delivery must wait for the one before it (job after), 0 once that one is over:
// delivered, given up or gone (pruned, or never stored).
func turn(ctx context.Context, jobs store.Store, after string) (time.Duration, error) {
	deadline := time.Now().Add(turnHold)
	pause := 5 * time.Millisecond
	for {
		prev, err := jobs.GetJob(ctx, after)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("webhook delivery: read the delivery before it (%s): %w", after, err)
		}
		switch prev.State {
		case pronto.StateCompleted, pronto.StateDiscarded, pronto.StateCancelled:
			return 0, nil
		case pronto.StateScheduled, pronto.StateRetryable:
			return max(time.Until(prev.ScheduledAt), 0) + turnSnooze, nil
		case pronto.StateAvailable:
			return min(max(time.Since(prev.ScheduledAt), turnSnooze), turnSnoozeMax), nil
		case pronto.StateActive:
			if time.Now().Add(pause).Before(deadline) {
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					return 0, ctx.Err()
				case <-t.C:
				}
				pause = min(2*pause, 100*time.Millisecond)
				continue
			}
			return min(max(time.Since(prev.StartedAt), turnSnooze), turnSnoozeMax), nil
		}
		return turnSnooze, nil // pending: not one of ours, but it may yet run
	}
}

func deliver(ctx context.Context, hc *http.Client, ss store.SettingStore, jobs store.Store, j *pronto.Job[deliverArgs]) error {
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
	if a.After != "" {
		wait, err := turn(ctx, jobs, a.After)
		if err != nil {
			return err
		}
		if wait > 0 {
			return pronto.Snooze(wait)
		}
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
	h.Set("X-OJS-Delivery-Attempt", strconv.Itoa(deliveryAttempt(j.JobRow)))
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

// deliveryAttempt is which try at posting j this is: one more than its failed attempts, each of which
// left an entry in its errors (Attempt also counts the runs that snoozed, waiting for their turn).
func deliveryAttempt(j *pronto.JobRow) int {
	return len(j.Errors) + 1
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
