package server

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Tenant administration (ojs-multi-tenancy.md §8 to §10) under /ojs/v1/admin/tenants:
//
//	GET    /ojs/v1/admin/tenants               every tenant with a weight, a limit or jobs, with its stats
//	GET    /ojs/v1/admin/tenants/{id}          one tenant (also /{id}/stats)
//	GET    /ojs/v1/admin/tenants/{id}/jobs     its jobs: ?state=&queue=&type=&since=&until=&order=&page=&per_page=&cursor=
//	PUT    /ojs/v1/admin/tenants/{id}          its config: {"fairness_weight", "priority_boost", "limits"}
//	PUT    /ojs/v1/admin/tenants/{id}/limits   its limits alone: {"max_concurrency", "max_start_rate",
//	                                           "max_queue_depth", "max_scheduled", "max_enqueue_rate", "reason"}
//	DELETE /ojs/v1/admin/tenants/{id}          forgets its weight, priority boost and limits (its jobs stay)
//	GET    /ojs/v1/admin/tenants/{id}/throttle its automatic throttle in force (404 when none)
//	DELETE /ojs/v1/admin/tenants/{id}/throttle ends it now, restoring its weight (pronto.TenantThrottleReset)
//
// max_concurrency and max_start_rate hold when jobs are fetched (the tenant's jobs wait while it is at
// one); max_queue_depth, max_scheduled and max_enqueue_rate hold at enqueue: an enqueue beyond one
// answers 429 tenant_limit_exceeded with Retry-After (§8.2, MT-004). priority_boost (-200 to 200) is
// added to the priority of the tenant's jobs as they are enqueued, clamped to -100..100 (see
// pronto.TenantSetPriorityBoost): jobs already waiting keep theirs.

// CodeTenantLimitExceeded answers an enqueue refused by a tenant's enqueue limit (429).
const CodeTenantLimitExceeded = "tenant_limit_exceeded"

// tenantLimitExceeded maps a *pronto.TenantLimitError.
func tenantLimitExceeded(err error) *apiError {
	var tl *pronto.TenantLimitError
	if !errors.As(err, &tl) {
		e := errorf(http.StatusTooManyRequests, CodeTenantLimitExceeded, "%v", err)
		e.retryable = true
		e.headers = map[string]string{"Retry-After": "1"}
		return e
	}
	e := errorf(http.StatusTooManyRequests, CodeTenantLimitExceeded, "tenant %q has exceeded %s (%d): %d counted, adding %d",
		tl.Tenant, tl.Limit, tl.Maximum, tl.Current, tl.Adding)
	e.retryable = true
	e.details = map[string]any{"tenant_id": tl.Tenant, "limit": tl.Limit, "current": tl.Current, "maximum": tl.Maximum}
	e.headers = map[string]string{"Retry-After": strconv.FormatInt(max(1, int64(math.Ceil(tl.RetryAfter.Seconds()))), 10)}
	return e
}

// routeTenants dispatches a path below /ojs/v1/admin/tenants (seg[1] == "tenants"); false when no
// route matches.
func (s *Server) routeTenants(w http.ResponseWriter, r *http.Request, seg []string) bool {
	m := r.Method
	switch {
	case len(seg) == 2:
		if m != http.MethodGet {
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet))
			return true
		}
		s.listTenants(w, r)
		return true
	case len(seg) == 3:
		switch m {
		case http.MethodGet:
			s.getTenant(w, r, seg[2])
		case http.MethodPut:
			s.putTenant(w, r, seg[2], false)
		case http.MethodDelete:
			s.deleteTenant(w, r, seg[2])
		default:
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet, http.MethodPut, http.MethodDelete))
		}
		return true
	case len(seg) == 4 && seg[3] == "stats":
		if m != http.MethodGet {
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet))
			return true
		}
		s.getTenant(w, r, seg[2])
		return true
	case len(seg) == 4 && seg[3] == "jobs":
		if m != http.MethodGet {
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet))
			return true
		}
		s.tenantJobs(w, r, seg[2])
		return true
	case len(seg) == 4 && seg[3] == "throttle":
		switch m {
		case http.MethodGet:
			s.getTenantThrottle(w, r, seg[2])
		case http.MethodDelete:
			s.resetTenantThrottle(w, r, seg[2])
		default:
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet, http.MethodDelete))
		}
		return true
	case len(seg) == 4 && seg[3] == "limits":
		if m != http.MethodPut {
			s.writeError(w, r, methodNotAllowed(r, http.MethodPut))
			return true
		}
		s.putTenant(w, r, seg[2], true)
		return true
	}
	return false
}

// checkTenant validates a tenant id taken from a path.
func checkTenant(id string) *apiError {
	if !pronto.ValidTenant(id) {
		return invalid("tenant_id", "tenant %q: must be 1 to 255 printable ASCII characters without spaces", id)
	}
	return nil
}

// tenantView is the OJS view of a tenant: its config, its jobs per state across queues, and its
// limits with their current use.
func tenantView(t *pronto.TenantInfo, now time.Time) map[string]any {
	jobs := make(map[string]int64, len(adminStates))
	var total int64
	for _, st := range adminStates {
		jobs[string(st)] = t.Counts[st]
		total += t.Counts[st]
	}
	jobs["total"] = total
	limits := map[string]any{}
	if t.Limit != nil {
		l := t.Limit.Limit
		if l.MaxActive > 0 {
			limits["max_concurrency"] = map[string]any{"limit": l.MaxActive, "current": t.Counts[pronto.StateActive]}
		}
		if l.Rate > 0 && l.Period > 0 {
			var count int64
			rate := map[string]any{"limit": l.Rate, "period": isodur.Format(l.Period)}
			if ws := t.Limit.WindowStart; !ws.IsZero() && ws.Add(l.Period).After(now) {
				count = t.Limit.WindowCount
				rate["window_resets_at"] = ws.Add(l.Period).UTC().Format(time.RFC3339Nano)
			}
			rate["current"] = count
			limits["max_start_rate"] = rate
		}
	}
	if el := t.EnqueueLimits; el != nil {
		var waiting int64
		for _, st := range []pronto.State{pronto.StateAvailable, pronto.StateScheduled, pronto.StateRetryable, pronto.StatePending} {
			waiting += t.Counts[st]
		}
		if el.MaxQueueDepth > 0 {
			limits["max_queue_depth"] = map[string]any{"limit": el.MaxQueueDepth, "current": waiting}
		}
		if el.MaxScheduled > 0 {
			limits["max_scheduled"] = map[string]any{"limit": el.MaxScheduled, "current": t.Counts[pronto.StateScheduled]}
		}
		if el.EnqueueRate > 0 {
			limits["max_enqueue_rate"] = map[string]any{"limit": el.EnqueueRate, "period": isodur.Format(el.EnqueuePeriod)}
		}
	}
	var throttle any // null when none holds
	if t.Throttle != nil {
		throttle = throttleView(t.Throttle)
	}
	return map[string]any{
		"tenant_id":       t.Tenant,
		"fairness_weight": t.Weight,
		"priority_boost":  t.PriorityBoost,
		"configured":      t.WeightSet || t.Limit != nil || t.EnqueueLimits != nil || t.PriorityBoost != 0,
		"limits":          limits,
		"jobs":            jobs,
		"fairness":        map[string]any{"weight": t.Weight, "weight_configured": t.WeightSet},
		"throttle":        throttle,
	}
}

// tenantError maps a client error about tenant id.
func tenantError(err error, id string) *apiError {
	e := fromClientError(err, "tenant", id)
	if e.status == http.StatusNotFound {
		e.hint = "a tenant is known once it has jobs, a fairness_weight or limits: PUT its config to register it"
	}
	return e
}

// GET /ojs/v1/admin/tenants?page=&per_page=: the tenants in id order (pronto.TenantList's).
func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	page, perPage, e := listPage(r.URL.Query())
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	infos, err := s.client.TenantList(r.Context())
	if err != nil {
		s.writeError(w, r, tenantError(err, ""))
		return
	}
	infos, pagination := pageOf(infos, page, perPage)
	now := time.Now()
	items := make([]map[string]any, len(infos))
	for i, t := range infos {
		items[i] = tenantView(t, now)
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"items": items, "pagination": pagination})
}

// GET /ojs/v1/admin/tenants/{id} and /ojs/v1/admin/tenants/{id}/stats
func (s *Server) getTenant(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkTenant(id); e != nil {
		s.writeError(w, r, e)
		return
	}
	t, err := s.client.TenantGet(r.Context(), id)
	if err != nil {
		s.writeError(w, r, tenantError(err, id))
		return
	}
	writeJSONValue(w, http.StatusOK, tenantView(t, time.Now()))
}

// tenantLimits is a decoded limits object: the fetch-time limit to store and whether it sets any
// bound, and the enqueue-time limits (zero: none).
type tenantLimits struct {
	limit   pronto.RateLimit
	bounds  bool
	enqueue pronto.TenantEnqueueLimits
}

// decodeRate reads {"limit": n, "period": "PT1M"} at field f.
func decodeRate(v json.RawMessage, f, what string) (int64, time.Duration, *apiError) {
	var rm map[string]json.RawMessage
	if err := json.Unmarshal(v, &rm); err != nil || rm == nil {
		return 0, 0, invalid(f, "%s must be an object {\"limit\", \"period\"}", f)
	}
	lim, ok1 := rm["limit"]
	per, ok2 := rm["period"]
	if !ok1 || !ok2 || len(rm) != 2 {
		return 0, 0, invalid(f, "%s must have exactly limit (%s per period) and period (an ISO 8601 duration)", f, what)
	}
	n, e := wantInt(lim, f+".limit", 1, math.MaxInt32)
	if e != nil {
		return 0, 0, e
	}
	d, e := wantDuration(per, f+".period")
	if e != nil {
		return 0, 0, e
	}
	if d < time.Millisecond {
		// The stores keep no finer period (pronto.RateLimit.Period); refused here, before anything
		// of the request is stored, rather than by the store half way through.
		return 0, 0, invalid(f+".period", "%s.period %s: must be at least 1 ms (PT0.001S)", f, per)
	}
	return n, d, nil
}

// decodeTenantLimits reads {"max_concurrency": n, "max_start_rate": {"limit", "period"},
// "max_queue_depth": n, "max_scheduled": n, "max_enqueue_rate": {"limit", "period"}, "reason"}
// (field prefixes error fields).
func decodeTenantLimits(raw json.RawMessage, field string) (*tenantLimits, *apiError) {
	join := func(k string) string {
		if field == "" {
			return k
		}
		return field + "." + k
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, invalid(field, "%s must be a JSON object", nonEmpty(field, "the body"))
	}
	out := &tenantLimits{}
	for k, v := range m {
		f := join(k)
		switch {
		case k == "reason":
			if _, e := wantString(v, f); e != nil && !isNull(v) {
				return nil, e
			}
		case k == "max_concurrency":
			if isNull(v) {
				continue
			}
			n, e := wantInt(v, f, 0, math.MaxInt32)
			if e != nil {
				return nil, e
			}
			if n > 0 {
				out.limit.MaxActive, out.bounds = int(n), true
			}
		case k == "max_start_rate":
			if isNull(v) {
				continue
			}
			n, d, e := decodeRate(v, f, "starts")
			if e != nil {
				return nil, e
			}
			out.limit.Rate, out.limit.Period, out.bounds = int(n), d, true
		case k == "max_enqueue_rate":
			if isNull(v) {
				continue
			}
			n, d, e := decodeRate(v, f, "enqueues")
			if e != nil {
				return nil, e
			}
			out.enqueue.EnqueueRate, out.enqueue.EnqueuePeriod = n, d
		case k == "max_queue_depth", k == "max_scheduled":
			if isNull(v) {
				continue
			}
			n, e := wantInt(v, f, 0, math.MaxInt64)
			if e != nil {
				return nil, e
			}
			if k == "max_queue_depth" {
				out.enqueue.MaxQueueDepth = n
			} else {
				out.enqueue.MaxScheduled = n
			}
		default:
			return nil, invalid(f, "unknown field %s (limits take max_concurrency, max_start_rate, max_queue_depth, max_scheduled, max_enqueue_rate and reason)", f)
		}
	}
	return out, nil
}

func nonEmpty(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// tenantConfig is a decoded PUT /ojs/v1/admin/tenants/{id} body.
type tenantConfig struct {
	weight int // 0: not given
	limits *tenantLimits
	boost  *int // nil: not given; 0 removes the boost
}

// decodeTenantConfig reads {"tenant_id", "fairness_weight", "priority_boost", "limits"} for tenant id.
func decodeTenantConfig(body []byte, id string) (*tenantConfig, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, invalid("", "the body must be a JSON object")
	}
	out := &tenantConfig{}
	for k, v := range m {
		switch {
		case k == "tenant_id":
			got, e := wantString(v, k)
			if e != nil {
				return nil, e
			}
			if got != id {
				return nil, invalid(k, "the body's tenant_id %q is not the path's %q", got, id)
			}
		case k == "fairness_weight":
			if isNull(v) {
				continue
			}
			n, e := wantInt(v, k, 1, pronto.MaxTenantWeight)
			if e != nil {
				return nil, e
			}
			out.weight = int(n)
		case k == "limits":
			if isNull(v) {
				continue
			}
			l, e := decodeTenantLimits(v, "limits")
			if e != nil {
				return nil, e
			}
			out.limits = l
		case k == "priority_boost":
			if isNull(v) {
				continue
			}
			n, e := wantInt(v, k, -pronto.MaxTenantPriorityBoost, pronto.MaxTenantPriorityBoost)
			if e != nil {
				return nil, e
			}
			b := int(n)
			out.boost = &b
		default:
			return nil, invalid(k, "unknown field %s (a tenant's config takes tenant_id, fairness_weight, priority_boost and limits)", k)
		}
	}
	return out, nil
}

// PUT /ojs/v1/admin/tenants/{id} (limitsOnly false) and /ojs/v1/admin/tenants/{id}/limits. A limits
// object without a bound removes the tenant's limits.
func (s *Server) putTenant(w http.ResponseWriter, r *http.Request, id string, limitsOnly bool) {
	if e := checkTenant(id); e != nil {
		s.writeError(w, r, e)
		return
	}
	cfg, ok := readRequest(s, w, r, "tenant", func(body []byte) (*tenantConfig, *apiError) {
		if limitsOnly {
			l, e := decodeTenantLimits(body, "")
			return &tenantConfig{limits: l}, e
		}
		return decodeTenantConfig(body, id)
	})
	if !ok {
		return
	}
	ctx := r.Context()
	if cfg.weight > 0 {
		if err := s.client.TenantSetWeight(ctx, id, cfg.weight); err != nil {
			s.writeError(w, r, tenantError(err, id))
			return
		}
	}
	if cfg.boost != nil {
		var err error
		if *cfg.boost != 0 {
			err = s.client.TenantSetPriorityBoost(ctx, id, *cfg.boost)
		} else if err = s.client.TenantDeletePriorityBoost(ctx, id); errors.Is(err, pronto.ErrNotFound) {
			err = nil
		}
		if err != nil {
			s.writeError(w, r, tenantError(err, id))
			return
		}
	}
	if cfg.limits != nil {
		var err error
		if cfg.limits.bounds {
			err = s.client.TenantSetLimit(ctx, id, cfg.limits.limit)
		} else if err = s.client.TenantDeleteLimit(ctx, id); errors.Is(err, pronto.ErrNotFound) {
			err = nil
		}
		if err != nil {
			s.writeError(w, r, tenantError(err, id))
			return
		}
		if err := s.client.TenantSetEnqueueLimits(ctx, id, cfg.limits.enqueue); err != nil {
			s.writeError(w, r, tenantError(err, id))
			return
		}
	}
	t, err := s.client.TenantGet(ctx, id)
	if errors.Is(err, pronto.ErrNotFound) {
		// Nothing stored and no jobs (a PUT that only removed limits): an empty tenant.
		t, err = &pronto.TenantInfo{Tenant: id, Weight: pronto.DefaultTenantWeight}, nil
	}
	if err != nil {
		s.writeError(w, r, tenantError(err, id))
		return
	}
	writeJSONValue(w, http.StatusOK, tenantView(t, time.Now()))
}

// DELETE /ojs/v1/admin/tenants/{id}: forgets the tenant's weight, priority boost and limits; 404 when it
// had none.
func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkTenant(id); e != nil {
		s.writeError(w, r, e)
		return
	}
	ctx := r.Context()
	found := false
	for _, del := range []func() error{
		func() error { return s.client.TenantDeleteWeight(ctx, id) },
		func() error { return s.client.TenantDeleteLimit(ctx, id) },
		func() error { return s.client.TenantDeletePriorityBoost(ctx, id) },
		func() error {
			els, err := s.client.TenantEnqueueLimits(ctx)
			if err != nil {
				return err
			}
			if _, ok := els[id]; !ok {
				return pronto.ErrNotFound
			}
			return s.client.TenantSetEnqueueLimits(ctx, id, pronto.TenantEnqueueLimits{})
		},
	} {
		switch err := del(); {
		case err == nil:
			found = true
		case errors.Is(err, pronto.ErrNotFound):
		default:
			s.writeError(w, r, tenantError(err, id))
			return
		}
	}
	if !found {
		e := notFound("tenant", id)
		e.hint = "the tenant has no stored fairness_weight, priority_boost or limits"
		s.writeError(w, r, e)
		return
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"deleted": true, "tenant_id": id})
}

// GET /ojs/v1/admin/tenants/{id}/jobs?state=&queue=&type=&since=&until=&order=asc|desc&page=&per_page=&cursor=
// (ojs-multi-tenancy.md §10.3): the tenant's jobs, newest first unless order=asc, as GET
// /ojs/v1/admin/jobs lists them ({"items", "pagination": {"page", "per_page", "has_more"}}), with
// next_cursor as well: a later page may start at cursor (page then counts from it). The store reads
// the tenant's own jobs (an index by tenant), not the queues'. 404 when the tenant is unknown (no
// jobs, weight, boost or limits), whatever the page or cursor; 400 for a bad id, state, queue, type,
// time or page.
func (s *Server) tenantJobs(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkTenant(id); e != nil {
		s.writeError(w, r, e)
		return
	}
	q := r.URL.Query()
	order, page, perPage, e := listPaging(q, "continue with cursor (next_cursor)")
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	cursor := q.Get("cursor")
	if cursor != "" {
		if e := checkJobID(&cursor, "cursor"); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	f, e := parseFilter(q.Get("queue"), q.Get("state"), q.Get("type"))
	if e == nil {
		e = f.setRange(q.Get("since"), q.Get("until"), "")
	}
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	after := f.since // as scan reads a creation range: match then checks created_at itself
	if !after.IsZero() {
		after = after.Add(-createdSlack)
	}
	ctx := r.Context()
	skip := (page - 1) * perPage
	items := make([]json.RawMessage, 0, perPage)
	hasMore, next, last := false, "", ""
	for read := 0; ; {
		res, err := s.client.JobList(ctx, &pronto.JobListParams{Tenant: id, States: f.states, Queues: f.queues, Kinds: f.kinds,
			CreatedAfter: after, CreatedBefore: f.until, Cursor: cursor, Descending: order != "asc", Limit: min(1000, skip+perPage+1)})
		if err != nil {
			s.writeError(w, r, tenantError(err, id))
			return
		}
		for _, j := range res.Jobs {
			if !f.match(j) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			if len(items) == perPage {
				hasMore, next = true, last
				break
			}
			items = append(items, appendJob(nil, j))
			last = j.ID
		}
		read += len(res.Jobs)
		if hasMore || res.Next == "" {
			break
		}
		if read >= adminScanLimit {
			// A type prefix filters here: the read stops at adminScanLimit, as GET /admin/jobs does,
			// and the page says where to go on from (it used to end with has_more false, as if no
			// job further on matched).
			hasMore, next = true, res.Next
			break
		}
		cursor = res.Next
	}
	if len(items) == 0 {
		// No job listed, on any page or from any cursor: a tenant without jobs is known only by its
		// weight, boost or limits.
		if _, err := s.client.TenantGet(ctx, id); err != nil {
			s.writeError(w, r, tenantError(err, id))
			return
		}
	}
	pagination := map[string]any{"page": page, "per_page": perPage, "has_more": hasMore}
	if hasMore {
		pagination["next_cursor"] = next
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"tenant_id": id, "items": items, "pagination": pagination})
}

// GET /ojs/v1/admin/tenants/{id}/throttle: the tenant's throttle in force; 404 when none.
func (s *Server) getTenantThrottle(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkTenant(id); e != nil {
		s.writeError(w, r, e)
		return
	}
	ths, err := s.client.TenantThrottles(r.Context())
	if err != nil {
		s.writeError(w, r, tenantError(err, id))
		return
	}
	th, ok := ths[id]
	if !ok {
		e := notFound("throttle", id)
		e.hint = "the tenant is not throttled: throttles are applied by noisy-neighbour detection (pronto serve --tenant-throttle)"
		s.writeError(w, r, e)
		return
	}
	writeJSONValue(w, http.StatusOK, throttleView(&th))
}

// DELETE /ojs/v1/admin/tenants/{id}/throttle: ends the tenant's throttle now and restores its weight,
// (or its limit), unless it was changed while the throttle held (then kept: "kept": true); emits
// tenant.throttle_released. 404 when none holds.
func (s *Server) resetTenantThrottle(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkTenant(id); e != nil {
		s.writeError(w, r, e)
		return
	}
	rel, err := s.client.TenantThrottleReset(r.Context(), id)
	if err != nil {
		e := fromClientError(err, "throttle", id)
		if e.status == http.StatusNotFound {
			e.hint = "the tenant is not throttled"
		}
		s.writeError(w, r, e)
		return
	}
	out := releaseView(rel)
	out["released"] = true
	writeJSONValue(w, http.StatusOK, out)
}
