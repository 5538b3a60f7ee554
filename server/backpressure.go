package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
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

// GET and PUT /ojs/v1/admin/queues/{name}/config: {"queue", "backpressure": {"max_depth", "strategy"}}.
func (s *Server) queueConfig(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		maxDepth, ok := readRequest(s, w, r, "queue config", decodeQueueConfig)
		if !ok {
			return
		}
		if maxDepth >= 0 {
			if err := s.client.QueueSetMaxDepth(ctx, name, maxDepth); err != nil {
				s.writeError(w, r, fromClientError(err, "queue", name))
				return
			}
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
	*b = append(*b, '}', '}')
	writeBuf(w, http.StatusOK, b)
}

// decodeQueueConfig reads {"backpressure": {"max_depth", "strategy"?}} and returns max_depth (0:
// unbounded), or -1 when the body does not set it.
func decodeQueueConfig(body []byte) (int64, *apiError) {
	m, e := decodeBody(body, "queue config")
	if e != nil {
		return 0, e
	}
	maxDepth := int64(-1)
	for _, mb := range m {
		if mb.key != "backpressure" {
			return 0, invalid(mb.key, "%s is not a queue setting pronto serves (backpressure)", mb.key)
		}
		if isNull(mb.val) {
			continue
		}
		bp, e := decodePolicyObject(mb.val, "backpressure", "backpressure")
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
	}
	return maxDepth, nil
}
