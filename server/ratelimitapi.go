package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Rate-limit endpoints (ojs-rate-limiting.md §10): list, inspect, override and delete the limits
// stored under rate keys.

// checkRateKey validates a rate key taken from a path: a rate key, or a tenant's limit key (tenant
// ids allow more characters).
func checkRateKey(key string) *apiError {
	tenant, isTenant := strings.CutPrefix(key, pronto.TenantLimitKey(""))
	if !pronto.ValidRateKey(key) && !(isTenant && pronto.ValidTenant(tenant)) {
		return invalid("key", "rate limit key %q: must match [a-zA-Z0-9][a-zA-Z0-9._:-]* (at most 255 characters)", key)
	}
	return nil
}

// rateLimitNotFound is the 404 of a key with no stored limit.
func rateLimitNotFound(key string) *apiError {
	e := notFound("rate limit", key)
	e.hint = "no limit is stored under this key: PUT one, or enqueue a job whose rate_limit has bounds"
	return e
}

// appendRateLimit appends the OJS view of a stored limit and its use.
func appendRateLimit(b []byte, info *pronto.RateLimitInfo, now time.Time) []byte {
	l := &info.Limit
	b = append(b, '{')
	b = appendStringField(b, "key", info.Key)
	if l.MaxActive > 0 {
		b = append(appendKey(b, "concurrency"), '{')
		b = appendIntField(b, "limit", int64(l.MaxActive))
		b = appendIntField(b, "active", info.Active)
		b = appendIntField(b, "available", max(int64(l.MaxActive)-info.Active, 0))
		b = append(b, '}')
	}
	if l.Rate > 0 && l.Period > 0 {
		b = append(appendKey(b, "rate"), '{')
		b = appendIntField(b, "limit", int64(l.Rate))
		b = appendStringField(b, "period", isodur.Format(l.Period))
		var count int64
		if !info.WindowStart.IsZero() && info.WindowStart.Add(l.Period).After(now) {
			count = info.WindowCount
			b = appendIntField(b, "current_count", count)
			b = appendTimeField(b, "window_resets_at", info.WindowStart.Add(l.Period))
		} else {
			b = appendIntField(b, "current_count", 0)
		}
		b = appendIntField(b, "available", max(int64(l.Rate)-count, 0))
		b = append(b, '}')
	}
	onLimit := l.OnLimit
	if onLimit == "" {
		onLimit = pronto.LimitWait
	}
	b = appendStringField(b, "on_limit", string(onLimit))
	b = appendIntField(b, "active_count", info.Active)
	b = appendIntField(b, "waiting_count", info.Waiting)
	return append(b, '}')
}

// GET /ojs/v1/rate-limits
func (s *Server) listRateLimits(w http.ResponseWriter, r *http.Request) {
	infos, err := s.client.RateLimitList(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "rate limit", ""))
		return
	}
	now := time.Now()
	b := getBuf()
	*b = append(*b, `{"items":[`...)
	for i, info := range infos {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendRateLimit(*b, info, now)
	}
	*b = append(*b, ']')
	*b = append(appendKey(*b, "pagination"), '{')
	*b = appendIntField(*b, "total", int64(len(infos)))
	*b = appendIntField(*b, "page", 1)
	*b = appendIntField(*b, "per_page", int64(len(infos)))
	*b = append(*b, '}', '}')
	writeBuf(w, http.StatusOK, b)
}

// GET /ojs/v1/rate-limits/{key}
func (s *Server) getRateLimit(w http.ResponseWriter, r *http.Request, key string) {
	if e := checkRateKey(key); e != nil {
		s.writeError(w, r, e)
		return
	}
	s.writeRateLimit(w, r, key)
}

// writeRateLimit answers the stored limit of key with its use.
func (s *Server) writeRateLimit(w http.ResponseWriter, r *http.Request, key string) {
	info, err := s.client.RateLimitGet(r.Context(), key)
	if err != nil {
		if e := fromClientError(err, "rate limit", key); e.status == http.StatusNotFound {
			s.writeError(w, r, rateLimitNotFound(key))
		} else {
			s.writeError(w, r, e)
		}
		return
	}
	b := getBuf()
	*b = appendRateLimit(*b, info, time.Now())
	writeBuf(w, http.StatusOK, b)
}

// PUT /ojs/v1/rate-limits/{key}: stores (creates or replaces) the limit of key. The body is a
// RateLimitPolicy without throttle; a key in it must be the path's.
func (s *Server) putRateLimit(w http.ResponseWriter, r *http.Request, key string) {
	if e := checkRateKey(key); e != nil {
		s.writeError(w, r, e)
		return
	}
	spec, ok := readRequest(s, w, r, "rate limit", func(body []byte) (*rateLimitSpec, *apiError) {
		if e := storable(body, ""); e != nil {
			return nil, e
		}
		return decodeRateLimit(body, "", true)
	})
	if !ok {
		return
	}
	if spec.key != "" && spec.key != key {
		s.writeError(w, r, invalid("key", "the body's key %q is not the path's %q", spec.key, key))
		return
	}
	if !spec.bounds {
		s.writeError(w, r, invalid("", "the limit sets no bound: give concurrency, rate {limit, period} or max_per_second (DELETE removes a limit)"))
		return
	}
	if err := s.client.RateLimitSet(r.Context(), key, spec.limit); err != nil {
		s.writeError(w, r, fromClientError(err, "rate limit", key))
		return
	}
	s.writeRateLimit(w, r, key)
}

// DELETE /ojs/v1/rate-limits/{key}
func (s *Server) deleteRateLimit(w http.ResponseWriter, r *http.Request, key string) {
	if e := checkRateKey(key); e != nil {
		s.writeError(w, r, e)
		return
	}
	if err := s.client.RateLimitDelete(r.Context(), key); err != nil {
		if e := fromClientError(err, "rate limit", key); e.status == http.StatusNotFound {
			s.writeError(w, r, rateLimitNotFound(key))
		} else {
			s.writeError(w, r, e)
		}
		return
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendBoolField(*b, "deleted", true)
	*b = appendStringField(*b, "key", key)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}
