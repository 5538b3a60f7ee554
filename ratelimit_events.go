package pronto

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// LimitHit is a rate key whose limit had no room for a job of it: the bound that stops it
// (LimitConcurrency or LimitRate), that bound's value (Limit) and the key's use of it (Current), as
// the claim that found it saw them. It is the payload of EventRateLimitExceeded and
// EventRateLimitReleased.
type LimitHit = store.LimitHit

// The bounds a LimitHit names (the OJS rate-limit strategies).
const (
	// LimitConcurrency: the key's active jobs reached RateLimit.MaxActive.
	LimitConcurrency = store.LimitConcurrency
	// LimitRate: the key's starts in the current window reached RateLimit.Rate.
	LimitRate = store.LimitRate
)

const (
	// EventRateLimitExceeded: a claim of this client (its workers', or RemoteFetch's) found a rate
	// key's limit without room while a job of the key waited, and the key was not limited as this
	// client saw it: Limit says which key and bound, Job is nil. It opens an episode, which lasts,
	// whatever the claims that find the key still limited, until EventRateLimitReleased: one event
	// per episode, however long the backlog behind the key. Only subscriptions that name it receive
	// it. A key whose backlog starts elsewhere (other processes' claims) stays in its episode here
	// until a job of it starts through this client.
	EventRateLimitExceeded EventKind = "rate_limit.exceeded"
	// EventRateLimitReleased: a job of a key this client saw limited (EventRateLimitExceeded) started
	// through a claim of this client that left no other job of the key waiting: Job is that job, Limit
	// the exceeded event's. It ends the episode, which therefore spans the key's backlog: a key with
	// room for a moment while its backlog waits (a claim took fewer of its jobs than it could) does
	// not end it. Only subscriptions that name it receive it.
	EventRateLimitReleased EventKind = "rate_limit.released"
)

// maxLimitEpisodes bounds the keys a client follows as limited at once: a key found limited while
// that many are yields no event until one of them is released.
const maxLimitEpisodes = 10_000

// limitEpisodes is the client's view of the rate keys its claims found limited.
type limitEpisodes struct {
	open atomic.Int32 // len(keys), read without the lock by every claim
	mu   sync.Mutex
	keys map[string]*LimitHit
}

// claim is store.Claim with the client's reports: the jobs the claim held back for their rate limit
// (onHeldBack) and, when anyone listens, the rate keys it found limited (observeLimits). Every claim
// of the client for its workers and for RemoteFetch goes through it.
func (c *Client) claim(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	p.OnHeldBack = c.onHeldBack
	if !c.events.wants(EventRateLimitExceeded) && !c.events.wants(EventRateLimitReleased) {
		return c.store.Claim(ctx, p)
	}
	var hits []store.LimitHit
	p.OnLimited = func(h []store.LimitHit) { hits = append(hits, h...) }
	jobs, err := c.store.Claim(ctx, p)
	if len(hits) > 0 || (len(jobs) > 0 && c.limits.open.Load() > 0) {
		c.observeLimits(hits, jobs)
	}
	return jobs, err
}

// observeLimits turns what one claim found into the episodes' events: EventRateLimitReleased for
// the first job it started of each key this client saw limited that the claim did not name again
// (neither without room nor with more jobs waiting: its backlog is gone), then
// EventRateLimitExceeded for each key it found without room that was not.
func (c *Client) observeLimits(hits []store.LimitHit, jobs []*store.Job) {
	limited := func(key string) bool {
		for i := range hits {
			if hits[i].Key == key {
				return true
			}
		}
		return false
	}
	now := time.Now()
	var out []*Event
	e := &c.limits
	e.mu.Lock()
	for _, j := range jobs {
		if j.RateKey == "" {
			continue
		}
		if h := e.keys[j.RateKey]; h != nil && !limited(j.RateKey) {
			delete(e.keys, j.RateKey)
			out = append(out, &Event{Kind: EventRateLimitReleased, Job: j, Limit: h, At: now})
		}
	}
	for i := range hits {
		if hits[i].HasRoom || e.keys[hits[i].Key] != nil || len(e.keys) >= maxLimitEpisodes {
			continue
		}
		if e.keys == nil {
			e.keys = make(map[string]*LimitHit)
		}
		h := hits[i]
		e.keys[h.Key] = &h
		out = append(out, &Event{Kind: EventRateLimitExceeded, Limit: &h, At: now})
	}
	e.open.Store(int32(len(e.keys)))
	// Emitted under e.mu (emit never blocks): two claims that change the same key's episode at
	// once deliver its events in the order they changed it, never released before exceeded.
	for _, ev := range out {
		c.events.emit(ev)
	}
	e.mu.Unlock()
}
