package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/deadletter"
	"github.com/pronto-jobs/pronto/internal/metatenant"
	"github.com/pronto-jobs/pronto/store"
)

// System, queue, dead-letter, cron and event endpoints.

func typeName(v any) string { return fmt.Sprintf("%T", v) }

// healthProbeID is a job id no job has: reading it is a cheap round trip to the store.
const healthProbeID = "00000000-0000-7000-8000-000000000000"

// GET /ojs/v1/health
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.store.GetJob(ctx, healthProbeID)
	latency := time.Since(start)
	if err == nil || errors.Is(err, pronto.ErrNotFound) {
		// The read passes on a backend that takes no writes (a standby, a fenced primary, a
		// replica), where every insert, fetch and ack fails.
		err = store.ProbeWritable(ctx, s.store)
	}
	status, backendStatus, code := "ok", "connected", http.StatusOK
	var problem, detail string
	if err != nil && !errors.Is(err, pronto.ErrNotFound) {
		status, backendStatus, code = "degraded", "disconnected", http.StatusServiceUnavailable
		problem, detail = s.backendProblem(r, err)
		if c := store.Condition(problem); c == store.ConditionReadOnly {
			// Up and answering, but not a backend to send work to: neither connected nor not.
			backendStatus = "read_only"
		} else if c != store.ConditionError && c.Reachable() {
			// The database answered (busy past a timeout, ...): it is not disconnected, and an
			// operator looking for a network problem would look in the wrong place.
			backendStatus = "connected"
		}
		// As every 503 of the API (ojs-errors.md ERR-006): when a probe is worth repeating.
		w.Header().Set("Retry-After", unavailableRetryAfter)
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "status", status)
	*b = appendStringField(*b, "version", "1.0")
	*b = appendIntField(*b, "uptime_seconds", int64(time.Since(s.started).Seconds()))
	*b = append(appendKey(*b, "backend"), '{')
	*b = appendStringField(*b, "type", s.backend)
	*b = appendStringField(*b, "status", backendStatus)
	*b = appendIntField(*b, "latency_ms", latency.Milliseconds())
	if problem != "" {
		*b = appendStringField(*b, "error", problem)
	}
	if detail != "" {
		*b = appendStringField(*b, "error_detail", detail)
	}
	*b = append(*b, '}', '}')
	writeBuf(w, code, b)
}

// backendProblem classifies a failed probe of the store for the health and readiness answers, which
// need no API key: "unreachable" or "timeout" when the store could not be reached or did not answer,
// the condition of a store that answered but cannot serve ("lock_timeout", "statement_timeout",
// "read_only", "insufficient_resources", ...; store.ConditionOf), else "error". The store's own error
// text names hosts, users and databases (ojs-security.md 9.4), so it is logged, and answered as
// detail only to a request bearing the API key.
func (s *Server) backendProblem(r *http.Request, err error) (problem, detail string) {
	problem = string(store.ConditionOf(s.store, err))
	if problem == "" {
		problem = string(store.ConditionError)
	}
	s.log.Warn("pronto serve: the store failed a health probe", "path", r.URL.Path, "problem", problem, "err", err)
	if s.apiKey != nil && s.authorized(r) {
		detail = err.Error()
	}
	return problem, detail
}

// GET /ojs/manifest
func (s *Server) manifest(w http.ResponseWriter, r *http.Request) {
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "specversion", "1.0")
	*b = appendStringField(*b, "ojs_version", "1.0")
	*b = append(appendKey(*b, "implementation"), '{')
	*b = appendStringField(*b, "name", "pronto")
	*b = appendStringField(*b, "version", Version)
	*b = appendStringField(*b, "language", "go")
	*b = appendStringField(*b, "homepage", "https://github.com/pronto-jobs/pronto")
	*b = append(*b, '}')
	*b = appendIntField(*b, "conformance_level", 4)
	// ojs-conformance.md 3: runtime, not full, which asks for the gRPC binding too.
	*b = appendStringField(*b, "conformance_tier", "runtime")
	strength, mechanism := s.uniqueStrength()
	*b = appendStringField(*b, "unique_job_strength", strength)
	*b = appendStrings(appendKey(*b, "protocols"), []string{"http"})
	*b = appendStringField(*b, "backend", s.backend)
	*b = append(appendKey(*b, "capabilities"), '{')
	for _, c := range []struct {
		name string
		on   bool
	}{
		{"batch_enqueue", true}, {"cron_jobs", true}, {"dead_letter", true}, {"delayed_jobs", true},
		{"job_ttl", true}, {"priority_queues", true}, {"rate_limiting", true}, {"schema_validation", s.schemas.st != nil},
		{"unique_jobs", true}, {"workflows", true}, {"pause_resume", true}, {"events", true},
	} {
		*b = appendBoolField(*b, c.name, c.on)
	}
	*b = append(*b, '}')
	// ojs-unique-jobs.md §8.3: the strength of the uniqueness guarantee. Outside capabilities, which
	// clients decode as booleans only.
	*b = append(appendKey(*b, "x-pronto-unique-jobs"), '{')
	// Spelled as ojs-unique-jobs.md 8.3 spells it ("best-effort"; the manifest field is ojs-conformance's).
	*b = appendStringField(*b, "strength", strings.ReplaceAll(strength, "_", "-"))
	*b = appendStringField(*b, "mechanism", mechanism)
	*b = append(*b, '}')
	*b = appendStrings(appendKey(*b, "extensions"), s.extensionNames())
	*b = append(appendKey(*b, "limits"), '{')
	*b = appendIntField(*b, "max_body_bytes", s.maxBody)
	*b = appendIntField(*b, "max_meta_bytes", pronto.DefaultMaxMetaBytes)
	*b = appendIntField(*b, "max_batch_jobs", int64(s.maxBatch))
	*b = appendIntField(*b, "max_fetch_count", 1000)
	*b = appendIntField(*b, "max_workflow_jobs", int64(s.maxBatch))
	*b = append(*b, '}')
	*b = append(appendKey(*b, "endpoints"), '{')
	*b = appendStringField(*b, "base_url", "/ojs/v1")
	*b = appendStringField(*b, "manifest", "/ojs/manifest")
	*b = appendStringField(*b, "health", "/ojs/v1/health")
	*b = appendStringField(*b, "ready", "/ojs/v1/ready")
	*b = appendStringField(*b, "admin", "/ojs/v1/admin")
	*b = append(*b, '}')
	*b = appendBoolField(*b, "auth_required", s.apiKey != nil)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// uniqueStrength says how strong this server's store keeps a unique key (ojs-unique-jobs.md 8), as
// the manifest's unique_job_strength ("strong" or "best_effort") and in words. It goes by the
// store's package, not Config.Backend, which only names it.
func (s *Server) uniqueStrength() (strength, mechanism string) {
	switch backendName(s.store) {
	case "postgres", "sqlite":
		return "strong", "a unique index over the key, partial on the states that hold it, checked in the insert's transaction"
	case "memory":
		return "strong", "the key checked and taken under the store's lock, in this process"
	case "redis":
		// Atomic, but per queue: jobs of two queues with one key do not conflict (docs/redis.md).
		return "best_effort", "the key checked and taken in the insert's Redis function, atomically, but per queue: jobs of two queues with the same key do not conflict unless the key includes the queue (keys with \"queue\")"
	}
	return "best_effort", "the store's own: this server does not know how strictly it keeps a key"
}

// appendQueue appends a queue object: its name, pause flag and counts per state.
func appendQueue(b []byte, q *pronto.QueueInfo) []byte {
	b = append(b, '{')
	b = appendStringField(b, "name", q.Name)
	status := "active"
	if q.Paused {
		status = "paused"
	}
	b = appendStringField(b, "status", status)
	b = appendBoolField(b, "paused", q.Paused)
	var total int64
	for _, st := range []pronto.State{
		pronto.StateAvailable, pronto.StateActive, pronto.StateScheduled, pronto.StateRetryable,
		pronto.StatePending, pronto.StateCompleted, pronto.StateCancelled, pronto.StateDiscarded,
	} {
		n := q.Counts[st]
		total += n
		b = appendIntField(b, string(st), n)
	}
	b = appendIntField(b, "total", total)
	return append(b, '}')
}

// queueInfo returns one queue's counts; a queue with no jobs and no pause flag has zero counts.
func (s *Server) queueInfo(ctx context.Context, name string) (*pronto.QueueInfo, error) {
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	for i := range qs {
		if qs[i].Name == name {
			return &qs[i], nil
		}
	}
	return &pronto.QueueInfo{Name: name, Counts: map[pronto.State]int64{}}, nil
}

func checkQueueName(name string) *apiError {
	if !pronto.ValidQueueName(name) {
		return invalid("queue", "queue %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", name)
	}
	return nil
}

// GET /ojs/v1/queues: the queues in name order, paged by limit, offset and cursor (the last name
// of the previous page), as every data-plane list is (ojs-http-binding.md 17).
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) {
	p, e := readNamePage(r.URL.Query(), pronto.ValidQueueName)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	qs, err := s.client.QueueList(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", ""))
		return
	}
	page, hasMore, next := pageByName(qs, func(q pronto.QueueInfo) string { return q.Name }, p)
	b := getBuf()
	*b = append(*b, `{"queues":[`...)
	for i := range page {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendQueue(*b, &page[i])
	}
	*b = append(*b, ']')
	*b = appendNamePagination(*b, len(qs), p, hasMore, next)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// GET /ojs/v1/queues/{name}/stats
func (s *Server) queueStats(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	q, err := s.queueInfo(r.Context(), name)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	if r.Header.Get("Ojs-Version") != "" || r.URL.Query().Get("format") == "binding" {
		s.writeQueueStats(w, q)
		return
	}
	s.writeQueue(w, q, nil)
}

func (s *Server) writeQueue(w http.ResponseWriter, q *pronto.QueueInfo, more func([]byte) []byte) {
	b := getBuf()
	*b = append(*b, `{"queue":`...)
	*b = appendQueue(*b, q)
	if more != nil {
		*b = (*b)[:len(*b)-1]
		*b = more(*b)
		*b = append(*b, '}')
	}
	*b = appendTimeField(*b, "computed_at", time.Now())
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// POST /ojs/v1/queues/{name}/pause and /resume
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request, name string, pause bool) {
	discardBody(r)
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	ctx := r.Context()
	var err error
	if pause {
		err = s.client.QueuePause(ctx, name)
	} else {
		err = s.client.QueueResume(ctx, name)
	}
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	q, err := s.queueInfo(ctx, name)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	q.Paused = pause
	now := time.Now()
	typ := "queue.resumed"
	if pause {
		typ = "queue.paused"
	}
	s.events.add(event{typ: typ, source: s.source, subject: name, queue: name, data: []byte(`{"queue":` + string(appendString(nil, name)) + `}`)})
	s.writeQueue(w, q, func(b []byte) []byte {
		if pause {
			return appendTimeField(b, "paused_at", now)
		}
		return appendTimeField(b, "resumed_at", now)
	})
}

// listPaging reads a job listing's order (asc, desc or none), page and per_page (20 by default, at
// most 100); deep says what to do instead of asking for a page beyond the first adminScanLimit jobs.
func listPaging(q url.Values, deep string) (order string, page, perPage int, e *apiError) {
	order = q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		return "", 0, 0, invalid("order", "order %q: must be asc or desc", order)
	}
	if page, perPage, e = listPage(q); e != nil {
		return "", 0, 0, e
	}
	if (page-1)*perPage >= adminScanLimit {
		return "", 0, 0, invalid("page", "page %d is too deep: pages reach the first %d jobs; %s", page, adminScanLimit, deep)
	}
	return order, page, perPage, nil
}

// listPage reads an admin listing's page (from 1) and per_page (20 by default, at most 100), as
// ojs-admin-api.md 4.3 asks of every list; a value out of range is refused, naming the parameter.
func listPage(q url.Values) (page, perPage int, e *apiError) {
	if page, e = queryInt(q, "page", 1, 1, adminScanLimit); e != nil {
		return 0, 0, e
	}
	if perPage, e = queryInt(q, "per_page", 20, 1, 100); e != nil {
		return 0, 0, e
	}
	return page, perPage, nil
}

// queryInt reads an integer query parameter within [lo, hi], or def when absent.
func queryInt(q url.Values, name string, def, lo, hi int) (int, *apiError) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, invalid(name, "query parameter %s=%q: must be an integer from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// queryList reads a comma-separated (or repeated) query parameter.
func queryList(q url.Values, name string) []string {
	var out []string
	for _, v := range q[name] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// endsJob reports whether a nack's error code ends the job at once: DISCARD, FAIL or DEAD_LETTER
// (ojs-retry.md 7.2; RETRY, like no code, leaves the retry policy to decide).
func endsJob(code string) bool { return deadletter.EndsJob(code) }

// isDeadLetter reports whether a discarded job belongs in the dead-letter list: every discarded job
// does, except those whose OJS retry policy asked on_exhaustion "discard", unless the handler's
// response code decided otherwise (deadletter.Verdict). The dashboard's dead-letter view applies
// the same rule (internal/deadletter).
func isDeadLetter(j *pronto.JobRow) bool { return deadletter.Is(j) }

// GET /ojs/v1/dead-letter
func (s *Server) listDeadLetter(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, e := queryInt(q, "limit", 50, 1, 200)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	// A page reads at most adminScanLimit discarded jobs, as the other lists filtered here do: an
	// offset it cannot reach would read the whole table for nothing.
	offset, e := queryInt(q, "offset", 0, 0, adminScanLimit-1)
	if e != nil {
		e.message += "; pages past it follow next_cursor"
		s.writeError(w, r, e)
		return
	}
	queue := q.Get("queue")
	var queues []string
	if queue != "" {
		if e := checkQueueName(queue); e != nil {
			s.writeError(w, r, e)
			return
		}
		queues = []string{queue}
	}
	cursor := q.Get("cursor")
	if cursor != "" {
		if e := checkJobID(&cursor, "cursor"); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	tags := queryList(q, "tags") // pronto's extension: jobs having every one of these tags
	ctx := r.Context()
	var out []*pronto.JobRow
	skipped, hasMore, next, read := 0, false, "", 0
	for {
		page, err := s.client.JobList(ctx, &pronto.JobListParams{
			States: []pronto.State{pronto.StateDiscarded}, Queues: queues, Tags: tags, Cursor: cursor,
			Limit: min(500, adminScanLimit-read),
		})
		if err != nil {
			s.writeError(w, r, fromClientError(err, "job", ""))
			return
		}
		read += len(page.Jobs)
		for _, j := range page.Jobs {
			if !isDeadLetter(j) {
				continue
			}
			if skipped < offset {
				skipped++
				continue
			}
			if len(out) == limit {
				hasMore = true
				break
			}
			out = append(out, j)
			next = j.ID
		}
		if hasMore || page.Next == "" {
			break
		}
		if read >= adminScanLimit {
			// The bound cut the page short (discarded jobs that are not dead letter, or a deep
			// offset): the cursor goes on after the last job read, listed or not.
			hasMore, next = true, page.Jobs[len(page.Jobs)-1].ID
			break
		}
		cursor = page.Next
	}
	var total int64
	if qs, err := s.client.QueueList(ctx); err == nil {
		for _, qi := range qs {
			if queue == "" || qi.Name == queue {
				total += qi.Counts[pronto.StateDiscarded]
			}
		}
	}
	b := getBuf()
	*b = append(*b, `{"jobs":[`...)
	for i, j := range out {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendJob(*b, j)
	}
	*b = append(*b, ']')
	*b = append(appendKey(*b, "pagination"), '{')
	*b = appendIntField(*b, "total", total)
	*b = appendIntField(*b, "limit", int64(limit))
	*b = appendIntField(*b, "offset", int64(offset))
	*b = appendBoolField(*b, "has_more", hasMore)
	if hasMore {
		*b = appendStringField(*b, "next_cursor", next)
	}
	*b = append(*b, '}', '}')
	writeBuf(w, http.StatusOK, b)
}

// deadLetterJob reads a job that must be in the dead-letter list.
func (s *Server) deadLetterJob(ctx context.Context, idp *string) (*pronto.JobRow, *apiError) {
	if e := checkJobID(idp, "job id"); e != nil {
		return nil, e
	}
	id := *idp
	j, err := s.client.JobGet(ctx, id)
	if err != nil {
		return nil, fromClientError(err, "dead-letter job", id)
	}
	if !isDeadLetter(j) {
		e := conflict("job %s is %s, not in the dead-letter list", id, j.State)
		e.details = map[string]any{"job_id": id, "current_state": string(j.State)}
		return nil, e
	}
	return j, nil
}

// POST /ojs/v1/dead-letter/{id}/retry, with an optional body {"override": {"args", "queue", "meta",
// "priority", "retry": {"max_attempts"}}} (ojs-dead-letter.md 6.3).
func (s *Server) retryDeadLetter(w http.ResponseWriter, r *http.Request, id string) {
	o, ok := readRequest(s, w, r, "dead-letter retry", decodeRetryOverride)
	if !ok {
		return
	}
	old, e := s.deadLetterJob(r.Context(), &id)
	if e == nil && o != nil {
		e = keepsTenant(o.Meta, old.Tenant)
	}
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	if o != nil && o.Args != nil {
		// New args meet the job's schema (the one it names, else its type's latest) as at enqueue.
		req := &enqueueRequest{job: pronto.OJSJob{Kind: old.Kind, Args: o.Args}}
		if _, ext := splitMeta(old.Meta); ext != nil {
			req.ext = *ext
		}
		if e := s.checkArgs(r.Context(), req, "override"); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	var j *pronto.JobRow
	var err error
	if o == nil {
		j, err = s.client.JobRetry(r.Context(), id)
	} else {
		j, err = s.client.JobRetryWith(r.Context(), id, *o)
		if err != nil && j != nil {
			s.log.Warn("pronto: dead-letter retry with changes left the old job", "job_id", id, "new_job_id", j.ID, "err", err)
			err = nil // the retry happened; the old job is left behind, as logged
		}
	}
	if err != nil {
		s.writeError(w, r, fromClientError(err, "dead-letter job", id))
		return
	}
	s.deadLetterEvent("dead_letter.retried", j)
	s.writeJob(w, http.StatusOK, j, func(b []byte) []byte {
		if j.ID != id {
			b = appendStringField(b, "retried_from", id)
		}
		return appendTimeField(b, "re_enqueued_at", time.Now())
	})
}

// keepsTenant refuses an override meta whose tenant_id is not the job's tenant: meta.tenant_id
// names the tenant the job is stored, listed, limited and scheduled under, and a retry does not
// move a job to another tenant (enqueue a new job for that). Repeating the job's own tenant is fine.
func keepsTenant(meta json.RawMessage, tenant string) *apiError {
	raw, bad := metatenant.Mismatch(meta, tenant)
	if !bad {
		return nil
	}
	const field = "override.meta.tenant_id"
	e := invalid(field, "%s %s: a retry keeps the job's tenant (%q); enqueue a new job to run it for another tenant", field, raw, tenant)
	e.details["tenant_id"] = tenant
	return e
}

// decodeRetryOverride reads the body of a dead-letter retry: nil when it has no "override".
func decodeRetryOverride(body []byte) (*pronto.RetryOverride, *apiError) {
	m, e := decodeBody(body, "dead-letter retry")
	if e != nil {
		return nil, e
	}
	var o *pronto.RetryOverride
	for _, mb := range m {
		if mb.key != "override" {
			return nil, invalid(mb.key, "%s: a dead-letter retry takes only \"override\"", mb.key)
		}
		if isNull(mb.val) {
			continue
		}
		fields, e := decodePolicyObject(mb.val, "override", "override")
		if e != nil {
			return nil, e
		}
		o = &pronto.RetryOverride{}
		for _, f := range fields {
			field := "override." + f.key
			if isNull(f.val) {
				continue
			}
			switch f.key {
			case "args":
				if jsonKind(f.val) != "array" {
					return nil, invalid(field, "%s must be a JSON array", field)
				}
				o.Args = f.val
			case "meta":
				if e := checkMeta(f.val, field); e != nil { // as at enqueue: pronto's own key is refused
					return nil, e
				}
				o.Meta = f.val
			case "queue":
				q, e := wantString(f.val, field)
				if e != nil {
					return nil, e
				}
				if !validQueue(q) {
					return nil, invalid(field, "queue %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", q)
				}
				o.Queue = q
			case "priority":
				p, e := wantPriority(f.val, field)
				if e != nil {
					return nil, e
				}
				o.Priority = &p
			case "retry":
				rp, e := decodePolicyObject(f.val, "override.retry", field)
				if e != nil {
					return nil, e
				}
				for _, rf := range rp {
					rfield := field + "." + rf.key
					if rf.key != "max_attempts" {
						return nil, invalid(rfield, "%s: a retry override sets only max_attempts", rfield)
					}
					if isNull(rf.val) {
						continue
					}
					n, e := wantInt(rf.val, rfield, 1, 1<<31-1)
					if e != nil {
						return nil, e
					}
					o.MaxAttempts = int(n)
				}
			default:
				return nil, invalid(field, "%s: an override sets args, queue, meta, priority or retry.max_attempts", field)
			}
		}
	}
	return o, nil
}

// DELETE /ojs/v1/dead-letter/{id}
func (s *Server) deleteDeadLetter(w http.ResponseWriter, r *http.Request, id string) {
	dl, e := s.deadLetterJob(r.Context(), &id)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	if _, err := s.client.JobDelete(r.Context(), id); err != nil {
		s.writeError(w, r, fromClientError(err, "dead-letter job", id))
		return
	}
	s.deadLetterEvent("dead_letter.deleted", dl)
	b := getBuf()
	*b = append(*b, '{')
	*b = appendBoolField(*b, "deleted", true)
	*b = appendStringField(*b, "job_id", id)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// eventQuery reads the filters of GET /ojs/v1/events and its stream (ojs-events.md 6.4): types
// (or type; a prefix ending in "*" matches), queues (or queue), job_types, and the cursor after, an
// event id of this server; cursor is the after given, "" for none.
func (s *Server) eventQuery(r *http.Request) (f eventFilter, cursor string, e *apiError) {
	q := r.URL.Query()
	f = eventFilter{types: queryList(q, "types"), queues: queryList(q, "queues"), jobTypes: queryList(q, "job_types")}
	if len(f.types) == 0 {
		f.types = queryList(q, "type")
	}
	if len(f.queues) == 0 {
		f.queues = queryList(q, "queue")
	}
	if cursor = q.Get("after"); cursor != "" {
		seq, ok := s.events.cursorSeq(cursor)
		if !ok {
			// Another replica's, or this server's before a restart: start again without after.
			return f, "", invalid("after", "after=%q is not an event id of this server "+
				"(events are kept per process: an id of another server, or of this one before a restart, names no position here)", cursor)
		}
		f.after = seq
	}
	return f, cursor, nil
}

// GET /ojs/v1/events
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	limit, e := queryInt(r.URL.Query(), "limit", 100, 1, 1000)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	f, cursor, e := s.eventQuery(r)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	f.limit = limit
	evs, more := s.events.query(f)
	b := getBuf()
	*b = append(*b, `{"events":[`...)
	for i := range evs {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = s.events.appendEvent(*b, &evs[i])
	}
	*b = append(*b, ']')
	if len(evs) > 0 {
		cursor = s.events.eventID(&evs[len(evs)-1])
	}
	if cursor != "" {
		*b = appendStringField(*b, "cursor", cursor)
	}
	*b = appendBoolField(*b, "has_more", more)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// POST /ojs/v1/_test/reset (TestMode only): empties the store of jobs, pause flags, cron schedules and
// rate limits, and the event log. (Workflows have no delete: their jobs go, their rows stay, unreachable
// by the next case, which makes workflows of its own.)
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	discardBody(r)
	ctx := r.Context()
	if err := s.resetAll(ctx); err != nil {
		s.writeError(w, r, fromClientError(err, "job", ""))
		return
	}
	writeRaw(w, http.StatusOK, []byte(`{"reset":true}`))
}

func (s *Server) resetAll(ctx context.Context) error {
	if crons, err := s.client.CronList(ctx); err == nil {
		for _, c := range crons {
			if _, err := s.client.CronDelete(ctx, c.Name); err != nil && !errors.Is(err, pronto.ErrNotFound) {
				return err
			}
		}
	} else if !errors.Is(err, pronto.ErrUnsupported) {
		return err
	}
	for round := 0; ; round++ {
		page, err := s.client.JobList(ctx, &pronto.JobListParams{Limit: 1000})
		if err != nil {
			return err
		}
		if len(page.Jobs) == 0 {
			break
		}
		if round > 1000 {
			return errors.New("reset: jobs keep appearing")
		}
		for _, j := range page.Jobs {
			if j.State == pronto.StateActive {
				if _, err := s.client.JobCancel(ctx, j.ID); err != nil && !errors.Is(err, pronto.ErrInvalidTransition) && !errors.Is(err, pronto.ErrNotFound) {
					return err
				}
			}
			if _, err := s.client.JobDelete(ctx, j.ID); err != nil && !errors.Is(err, pronto.ErrNotFound) && !errors.Is(err, pronto.ErrInvalidTransition) {
				return err
			}
		}
	}
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		return err
	}
	for _, q := range qs {
		if q.Paused {
			if err := s.client.QueueResume(ctx, q.Name); err != nil {
				return err
			}
		}
	}
	if limits, err := s.client.RateLimitList(ctx); err == nil {
		for _, l := range limits {
			if err := s.client.RateLimitDelete(ctx, l.Key); err != nil && !errors.Is(err, pronto.ErrNotFound) {
				return err
			}
		}
	} else if !errors.Is(err, pronto.ErrUnsupported) {
		return err
	}
	s.events.reset()
	s.fetched.reset()
	return nil
}
