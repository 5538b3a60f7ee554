package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Backpressure (ojs-backpressure.md): an enqueue into a queue at its maximum depth answers 429
// queue_full with Retry-After and the X-OJS-Queue-Depth/-Bound headers (§7), a batch whole (§9.3);
// the bound is read and set through GET and PUT /ojs/v1/admin/queues/{name}/config (§6.2). Only the
// reject strategy and depth bounds are implemented.

// CodeQueueFull answers an enqueue refused by a queue's maximum depth (429).
const CodeQueueFull = "queue_full"

// queueFull maps a *pronto.QueueFullError.
func queueFull(err error) *apiError {
	var qf *pronto.QueueFullError
	if !errors.As(err, &qf) {
		e := errorf(http.StatusTooManyRequests, CodeQueueFull, "%v", err)
		e.retryable = true
		e.headers = map[string]string{"Retry-After": "1"}
		return e
	}
	e := errorf(http.StatusTooManyRequests, CodeQueueFull, "queue %q has reached its depth bound (%d): %d jobs have not finished, adding %d",
		qf.Queue, qf.MaxDepth, qf.Depth, qf.Adding)
	e.retryable = true
	e.details = map[string]any{"queue": qf.Queue, "depth": qf.Depth, "bound": qf.MaxDepth, "strategy": "reject"}
	// Depths are recounted every half second: a second is a fair first wait.
	e.headers = map[string]string{
		"Retry-After":       "1",
		"X-OJS-Queue-Depth": strconv.FormatInt(qf.Depth, 10),
		"X-OJS-Queue-Bound": strconv.FormatInt(qf.MaxDepth, 10),
	}
	return e
}

// writeInsertError answers a failed enqueue; a refusal by a queue bound is also recorded as a
// backpressure.rejected event (§10.1), one by a tenant's enqueue limit as tenant.limit_exceeded
// (ojs-multi-tenancy.md §11.1).
func (s *Server) writeInsertError(w http.ResponseWriter, r *http.Request, err error, kind, id, jobType string) {
	var qf *pronto.QueueFullError
	if errors.As(err, &qf) {
		b := make([]byte, 0, 128)
		b = append(b, '{')
		b = appendStringField(b, "queue", qf.Queue)
		b = appendIntField(b, "depth", qf.Depth)
		b = appendIntField(b, "bound", qf.MaxDepth)
		b = appendStringField(b, "job_type", jobType)
		b = append(b, '}')
		s.events.add(event{typ: "backpressure.rejected", source: s.source, subject: qf.Queue, at: time.Now(),
			queue: qf.Queue, jobType: jobType, data: b})
	}
	var tl *pronto.TenantLimitError
	if errors.As(err, &tl) {
		b := make([]byte, 0, 128)
		b = append(b, '{')
		b = appendStringField(b, "tenant_id", tl.Tenant)
		b = appendStringField(b, "limit", tl.Limit)
		b = appendIntField(b, "current", tl.Current)
		b = appendIntField(b, "maximum", tl.Maximum)
		b = appendStringField(b, "job_type", jobType)
		b = append(b, '}')
		s.events.add(event{typ: "tenant.limit_exceeded", source: s.source, subject: tl.Tenant, at: time.Now(),
			jobType: jobType, data: b})
	}
	s.writeError(w, r, fromClientError(err, kind, id))
}

// GET and PUT /ojs/v1/admin/queues/{name}/config (ojs-admin-api.md 6.6): {"queue", "backpressure":
// {"max_depth", "strategy"}, "retention": {"completed", "cancelled", "discarded"}}.
func (s *Server) queueConfig(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		u, ok := readRequest(s, w, r, "queue config", decodeQueueConfig)
		if !ok {
			return
		}
		if u.maxDepth >= 0 {
			if err := s.client.QueueSetMaxDepth(ctx, name, u.maxDepth); err != nil {
				s.writeError(w, r, fromClientError(err, "queue", name))
				return
			}
		}
		if err := s.setQueueRetention(ctx, name, u.retention); err != nil {
			s.writeError(w, r, fromClientError(err, "queue", name))
			return
		}
	default:
		s.writeError(w, r, methodNotAllowed(r, "GET", "PUT"))
		return
	}
	bounds, err := s.client.QueueMaxDepths(ctx)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "queue", name)
	*b = append(appendKey(*b, "backpressure"), '{')
	*b = appendIntField(*b, "max_depth", bounds[name])
	*b = appendStringField(*b, "strategy", "reject")
	*b = append(*b, '}')
	if ret, err := s.queueRetention(ctx, name); err == nil {
		*b = append(appendKey(*b, "retention"), '{')
		for _, f := range retentionFields {
			if d := ret[f]; d > 0 {
				*b = appendStringField(*b, f, isodur.Format(d))
			}
		}
		*b = append(*b, '}')
	} else if !errors.Is(err, pronto.ErrUnsupported) {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// retentionFields are the members of a queue's retention, each a terminal state.
var retentionFields = []string{"completed", "cancelled", "discarded"}

// queueConfigUpdate is a PUT's changes: maxDepth -1 leaves the bound; retention holds the members
// given, each a duration or nil for null (back to the server's).
type queueConfigUpdate struct {
	maxDepth  int64
	retention map[string]*time.Duration
}

// queueRetention returns the queue's own retention times by state (absent: the server's).
func (s *Server) queueRetention(ctx context.Context, queue string) (map[string]time.Duration, error) {
	own, err := s.client.QueueRetentions(ctx)
	if err != nil {
		return nil, err
	}
	dead, err := s.client.DeadLetterRetentions(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]time.Duration{"completed": own[queue].Completed, "cancelled": own[queue].Cancelled,
		"discarded": dead[queue].MaxAge}, nil
}

// setQueueRetention applies a PUT's retention members: completed and cancelled to the queue's
// retention (Client.QueueRetentionUpdate), discarded to its dead-letter retention's max_age, whose
// max_count and pruning policy stay. Each member changes the retention as stored when it is written,
// so concurrent PUTs of different members, through this server or another, all apply.
func (s *Server) setQueueRetention(ctx context.Context, queue string, set map[string]*time.Duration) error {
	if len(set) == 0 {
		return nil
	}
	value := func(f string) time.Duration {
		if d := set[f]; d != nil {
			return *d
		}
		return 0
	}
	_, c := set["completed"]
	_, x := set["cancelled"]
	if c || x {
		err := s.client.QueueRetentionUpdate(ctx, queue, func(r pronto.QueueRetention) pronto.QueueRetention {
			if c {
				r.Completed = value("completed")
			}
			if x {
				r.Cancelled = value("cancelled")
			}
			return r
		})
		if err != nil {
			return err
		}
	}
	if _, ok := set["discarded"]; ok {
		return s.client.DeadLetterRetentionUpdate(ctx, queue, func(r pronto.DeadLetterRetention) pronto.DeadLetterRetention {
			r.MaxAge = value("discarded")
			if r.MaxAge == 0 && r.MaxCount == 0 {
				r = pronto.DeadLetterRetention{} // no bound left: the queue follows the server's
			}
			return r
		})
	}
	return nil
}

// decodeQueueConfig reads {"backpressure": {"max_depth", "strategy"?}, "retention": {"completed"?,
// "cancelled"?, "discarded"?}}: a member left out is unchanged, a null one cleared.
func decodeQueueConfig(body []byte) (queueConfigUpdate, *apiError) {
	u := queueConfigUpdate{maxDepth: -1}
	m, e := decodeBody(body, "queue config")
	if e != nil {
		return u, e
	}
	for _, mb := range m {
		if isNull(mb.val) {
			continue
		}
		switch mb.key {
		case "backpressure":
			if u.maxDepth, e = decodeBackpressure(mb.val); e != nil {
				return u, e
			}
		case "retention":
			if u.retention, e = decodeRetention(mb.val); e != nil {
				return u, e
			}
		default:
			return u, invalid(mb.key, "%s is not a queue setting pronto serves (backpressure, retention; concurrency is each worker's and rate limits are per rate key)", mb.key)
		}
	}
	return u, nil
}

// decodeRetention reads a queue's retention: each member a positive ISO 8601 duration, or null.
func decodeRetention(raw json.RawMessage) (map[string]*time.Duration, *apiError) {
	members, e := decodePolicyObject(raw, "retention", "retention")
	if e != nil {
		return nil, e
	}
	out := map[string]*time.Duration{}
	for _, f := range members {
		field := "retention." + f.key
		if !slices.Contains(retentionFields, f.key) {
			return nil, invalid(field, "%s is not a retention pronto keeps (completed, cancelled, discarded)", field)
		}
		if isNull(f.val) {
			out[f.key] = nil
			continue
		}
		text, e := wantString(f.val, field)
		if e != nil {
			return nil, e
		}
		d, err := isodur.Parse(text)
		if err != nil || d <= 0 {
			return nil, invalid(field, "%s %q: not a positive ISO 8601 duration (such as P14D)", field, text)
		}
		out[f.key] = &d
	}
	return out, nil
}

// decodeBackpressure reads {"max_depth", "strategy"?} and returns max_depth (0: unbounded), or -1
// when it does not set it.
func decodeBackpressure(raw json.RawMessage) (int64, *apiError) {
	maxDepth := int64(-1)
	bp, e := decodePolicyObject(raw, "backpressure", "backpressure")
	if e != nil {
		return 0, e
	}
	for _, f := range bp {
		field := "backpressure." + f.key
		if isNull(f.val) {
			continue
		}
		switch f.key {
		case "max_depth":
			if maxDepth, e = wantInt(f.val, field, 0, 1<<53); e != nil {
				return 0, e
			}
		case "strategy":
			st, e := wantString(f.val, field)
			if e != nil {
				return 0, e
			}
			if st != "reject" {
				return 0, unprocessable(field, "%s %q: pronto implements the reject strategy only", field, st)
			}
		case "max_size_bytes":
			n, e := wantInt(f.val, field, 0, 1<<53)
			if e != nil {
				return 0, e
			}
			if n != 0 {
				return 0, unprocessable(field, "%s: pronto bounds queues by depth only (max_depth)", field)
			}
		default:
			return 0, invalid(field, "%s is not a backpressure setting pronto serves (max_depth, strategy)", field)
		}
	}
	return maxDepth, nil
}
