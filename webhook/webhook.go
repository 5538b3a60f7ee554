// Package webhook delivers OJS events to HTTP endpoints (ojs-events.md §6.5): each registered
// webhook receives, by POST, the envelope of every event that matches its filters, signed with its
// secret, and deliveries are pronto jobs of their own, so they survive restarts and are retried with
// backoff until the endpoint answers 2xx.
//
// Registrations live in the store's settings (store.SettingStore: every pronto store), so every
// process sharing the store sees the same webhooks. A Dispatcher turns events into delivery jobs in
// Queue; AddWorker registers the worker that sends them, which any client working Queue runs.
// `pronto serve` does both: it records the OJS events it sees, dispatches them, and works Queue
// (`--webhook-workers`); its admin API manages the registrations (/ojs/v1/admin/webhooks).
//
// A delivery is at least once from the moment its job is stored: a receiver may get an event twice
// (a worker that lost its lease while the POST was in flight) and should deduplicate by the event
// id (the X-OJS-Event-ID header, the envelope's id). Deliveries of one webhook are not ordered: each
// event's job is retried on its own.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/eventfilter"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Queue is the queue of delivery jobs. Its own jobs' events are never delivered (a webhook of
// "job.*" would otherwise feed itself).
const Queue = "pronto.webhooks"

// Kind is the kind of delivery jobs.
const Kind = "pronto.webhook.deliver"

// Defaults and bounds of a registration.
const (
	// DefaultTimeout bounds one POST when a webhook sets none (ojs-events.md §6.5's default).
	DefaultTimeout = 30 * time.Second
	// MaxTimeout is the longest timeout a webhook may set.
	MaxTimeout = 5 * time.Minute
	// DefaultMaxAttempts is how many times a delivery is tried when a webhook sets none (see
	// DefaultRetryInterval for when).
	DefaultMaxAttempts = 12
	// MaxAttemptsLimit is the most attempts a webhook may set.
	MaxAttemptsLimit = 25
)

// settingKey is the setting holding every registration, a JSON object keyed by id.
const settingKey = "webhooks"

// Webhook is one registered endpoint.
type Webhook struct {
	// ID names the webhook: a UUIDv7 given at creation.
	ID string `json:"id"`
	// URL receives the events: an absolute http or https URL.
	URL string `json:"url"`
	// Secret, when set, signs each delivery: X-OJS-Signature is "sha256=" and the hex HMAC-SHA256 of
	// the body under it. It is stored with the registration and never listed back (HasSecret says
	// whether there is one).
	Secret string `json:"secret,omitempty"`
	// Types, Queues and JobTypes select the events, as GET /ojs/v1/events filters them: a type may
	// end in "*" to match a prefix ("job.*"); an empty list matches everything.
	Types    []string `json:"types,omitempty"`
	Queues   []string `json:"queues,omitempty"`
	JobTypes []string `json:"job_types,omitempty"`
	// Timeout bounds one POST (0: DefaultTimeout); a POST that takes longer is a failed attempt.
	Timeout time.Duration `json:"timeout,omitempty"`
	// MaxAttempts bounds the tries of one delivery (0: DefaultMaxAttempts); the last failed one
	// leaves the delivery job discarded, in the dead letter queue, where it can be retried.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Disabled stops new deliveries; those already queued are cancelled when their turn comes.
	Disabled bool `json:"disabled,omitempty"`
	// CreatedAt and UpdatedAt are when the registration was made and last changed.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// HasSecret reports whether deliveries are signed.
func (w *Webhook) HasSecret() bool { return w.Secret != "" }

// Redacted returns w without its secret, for listing.
func (w Webhook) Redacted() Webhook {
	w.Secret = ""
	return w
}

// timeout is the POST's bound.
func (w *Webhook) timeout() time.Duration {
	if w.Timeout > 0 {
		return w.Timeout
	}
	return DefaultTimeout
}

// maxAttempts is the delivery's bound on tries.
func (w *Webhook) maxAttempts() int {
	if w.MaxAttempts > 0 {
		return w.MaxAttempts
	}
	return DefaultMaxAttempts
}

// ErrInvalid is matched by the errors of a registration that cannot be stored.
var ErrInvalid = errors.New("invalid webhook")

// FieldError is a registration a field of which is invalid: Field names it ("url", "types[1]").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap makes the error match ErrInvalid.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)}
}

// Validate checks a registration: an absolute http(s) URL without a fragment, filters without empty
// entries, a timeout up to MaxTimeout and attempts up to MaxAttemptsLimit. The error is a
// *FieldError naming the field and matches ErrInvalid.
func (w *Webhook) Validate() error {
	u, err := url.Parse(w.URL)
	switch {
	case w.URL == "":
		return fieldErr("url", "a webhook needs a url")
	case err != nil:
		return fieldErr("url", "%q is not a URL: %v", w.URL, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fieldErr("url", "%q: must be an absolute http or https URL", w.URL)
	case u.Fragment != "":
		return fieldErr("url", "%q: a fragment is never sent; drop it", w.URL)
	}
	for _, l := range []struct {
		name string
		vals []string
	}{{"types", w.Types}, {"queues", w.Queues}, {"job_types", w.JobTypes}} {
		for i, v := range l.vals {
			if strings.TrimSpace(v) == "" {
				return fieldErr(fmt.Sprintf("%s[%d]", l.name, i), "an empty entry matches nothing")
			}
		}
	}
	if w.Timeout < 0 || w.Timeout > MaxTimeout {
		return fieldErr("timeout", "%s: must be between 0 (the default, %s) and %s", w.Timeout, DefaultTimeout, MaxTimeout)
	}
	if w.MaxAttempts < 0 || w.MaxAttempts > MaxAttemptsLimit {
		return fieldErr("max_attempts", "%d: must be between 0 (the default, %d) and %d", w.MaxAttempts, DefaultMaxAttempts, MaxAttemptsLimit)
	}
	return nil
}

// Matches reports whether the webhook takes an event of type typ about a job of jobType in queue
// (both "" for events about no job): it is enabled and each of its filters matches.
func (w *Webhook) Matches(typ, queue, jobType string) bool {
	return !w.Disabled && eventfilter.Match(w.Types, typ, true) && eventfilter.Match(w.Queues, queue, false) &&
		eventfilter.Match(w.JobTypes, jobType, false)
}

// List returns every registration, oldest first, secrets included.
func List(ctx context.Context, ss store.SettingStore) ([]Webhook, error) {
	m, err := read(ctx, ss)
	if err != nil {
		return nil, err
	}
	out := make([]Webhook, 0, len(m))
	for _, w := range m {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b Webhook) int { return strings.Compare(a.ID, b.ID) }) // UUIDv7: by creation
	return out, nil
}

// Get returns the registration id, or an error matching pronto.ErrNotFound.
func Get(ctx context.Context, ss store.SettingStore, id string) (Webhook, error) {
	m, err := read(ctx, ss)
	if err != nil {
		return Webhook{}, err
	}
	w, ok := m[id]
	if !ok {
		return Webhook{}, fmt.Errorf("webhook %s: %w", id, pronto.ErrNotFound)
	}
	return w, nil
}

// Put stores w: a new registration when w.ID is "" (its id is made then) or names none, else a
// replacement of that one, which keeps its creation time and, when w.Secret is "", its secret
// (set Secret to a new value to change it; delete and register again to drop it). It returns the
// registration as stored.
func Put(ctx context.Context, ss store.SettingStore, w Webhook) (Webhook, error) {
	if err := w.Validate(); err != nil {
		return Webhook{}, err
	}
	if w.ID == "" {
		w.ID = uuidv7.New()
	} else if !uuidv7.Valid(w.ID) {
		return Webhook{}, fieldErr("id", "%q: a webhook id is a lowercase UUIDv7", w.ID)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	var stored Webhook
	err := update(ctx, ss, func(m map[string]Webhook) error {
		nw := w
		nw.CreatedAt, nw.UpdatedAt = now, now
		if old, ok := m[w.ID]; ok {
			nw.CreatedAt = old.CreatedAt
			if nw.Secret == "" {
				nw.Secret = old.Secret
			}
		}
		m[w.ID] = nw
		stored = nw
		return nil
	})
	if err != nil {
		return Webhook{}, err
	}
	return stored, nil
}

// Delete removes the registration id; deliveries of it still queued are cancelled when their turn
// comes. A missing one is an error matching pronto.ErrNotFound.
func Delete(ctx context.Context, ss store.SettingStore, id string) error {
	return update(ctx, ss, func(m map[string]Webhook) error {
		if _, ok := m[id]; !ok {
			return fmt.Errorf("webhook %s: %w", id, pronto.ErrNotFound)
		}
		delete(m, id)
		return nil
	})
}

func read(ctx context.Context, ss store.SettingStore) (map[string]Webhook, error) {
	raw, err := ss.GetSetting(ctx, settingKey)
	if err != nil {
		return nil, fmt.Errorf("read the webhooks: %w", err)
	}
	m := map[string]Webhook{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("read the webhooks: setting %s: %w", settingKey, err)
		}
	}
	return m, nil
}

// update changes the registrations by fn, without losing a concurrent change (store.UpdateSetting).
func update(ctx context.Context, ss store.SettingStore, fn func(m map[string]Webhook) error) error {
	err := store.UpdateSetting(ctx, ss, settingKey, func(old json.RawMessage) (json.RawMessage, error) {
		m := map[string]Webhook{}
		if len(old) > 0 {
			if err := json.Unmarshal(old, &m); err != nil {
				return nil, fmt.Errorf("setting %s: %w", settingKey, err)
			}
		}
		if err := fn(m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, nil
		}
		return json.Marshal(m)
	})
	if err != nil && !errors.Is(err, pronto.ErrNotFound) && !errors.Is(err, ErrInvalid) {
		return fmt.Errorf("update the webhooks: %w", err)
	}
	return err
}
