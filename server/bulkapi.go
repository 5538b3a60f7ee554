package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/pronto-jobs/pronto"
)

// Bulk operations (OJS bulk operations, sections 5 to 8 and 11): enqueue, cancel, retry and delete
// many jobs in one request, each item's outcome reported at its index.

// maxBulkItems bounds the jobs, ids or filter matches of one bulk request (OJS asks for at least 1000).
const maxBulkItems = pronto.MaxBulkIDs

// bulkOp is one of the id-based bulk operations.
type bulkOp struct {
	name  string // in messages: "cancel"
	done  string // the item status and the response's counter: "cancelled"
	run   func(*pronto.Client, context.Context, []string) ([]pronto.BulkResult, error)
	match []pronto.State // the states a filter matches by default
}

var (
	bulkCancel = &bulkOp{name: "cancel", done: "cancelled", run: (*pronto.Client).JobCancelMany,
		match: []pronto.State{pronto.StateAvailable, pronto.StateScheduled, pronto.StateRetryable}}
	bulkRetry = &bulkOp{name: "retry", done: "retried", run: retryOrRunNow,
		match: []pronto.State{pronto.StateDiscarded, pronto.StateRetryable}}
	bulkDelete = &bulkOp{name: "delete", done: "deleted", run: (*pronto.Client).JobDeleteMany,
		match: []pronto.State{pronto.StateCompleted, pronto.StateCancelled, pronto.StateDiscarded}}

	// bulkOps are the operations by the last segment of their path.
	bulkOps = map[string]*bulkOp{"cancel": bulkCancel, "retry": bulkRetry, "delete": bulkDelete}
)

// retryOrRunNow is bulk retry (ojs-bulk-operations.md 7: discarded or retryable jobs back to
// available): a discarded or cancelled job is retried as JobRetryMany does (attempts reset, as the
// single-job retries do); a retryable one, waiting out its backoff, is made available now with
// JobRunNow, keeping the attempts it used (its retry policy still bounds it). Other states stay
// per-item errors.
func retryOrRunNow(c *pronto.Client, ctx context.Context, ids []string) ([]pronto.BulkResult, error) {
	res, err := c.JobRetryMany(ctx, ids)
	for i := range res {
		var te *pronto.TransitionError
		if !errors.As(res[i].Err, &te) || te.From != pronto.StateRetryable {
			continue
		}
		if ctx.Err() != nil {
			break // the outcome so far stands: the job stays retryable, reported as skipped
		}
		j, rerr := c.JobRunNow(ctx, res[i].ID)
		res[i].Job, res[i].Err = j, rerr
	}
	return res, err
}

// bulkChunked runs op (a Client bulk method) on ids in chunks of pronto.MaxBulkIDs, the most one
// call takes, and returns every outcome in order. It stops at the first call that fails as a whole
// (the request's context ended midway): the outcomes so far come with the error, and the ids after
// them were not attempted.
func bulkChunked(ctx context.Context, ids []string, op func(context.Context, []string) ([]pronto.BulkResult, error)) ([]pronto.BulkResult, error) {
	out := make([]pronto.BulkResult, 0, len(ids))
	for chunk := range slices.Chunk(ids, pronto.MaxBulkIDs) {
		res, err := op(ctx, chunk)
		out = append(out, res...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// bulkStopped adds to a by-filter bulk answer what a bulkChunked that stopped midway left undone:
// stopped (why) and not_attempted (how many of the matched jobs were not touched).
func bulkStopped(resp map[string]any, err error, matched, done int) {
	if err != nil {
		resp["stopped"] = err.Error()
		resp["not_attempted"] = matched - done
	}
}

// tooManyItems is the 413 of a bulk request over the batch size limit.
func tooManyItems(field string, n int) *apiError {
	e := errorf(http.StatusRequestEntityTooLarge, "batch_size_exceeded",
		"%s holds %d items, over the maximum of %d per bulk request", field, n, maxBulkItems)
	e.typ = "validation_error"
	e.details = map[string]any{"field": field, "max_batch_size": maxBulkItems}
	// The header clients split a refused request by (ojs-bulk-operations.md 9.2, 11.3).
	e.headers = map[string]string{"X-OJS-Max-Batch-Size": strconv.Itoa(maxBulkItems)}
	return e
}

// decodeAtomicity reads the atomicity member: "partial" (the default) or "atomic".
func decodeAtomicity(m object) (atomic bool, e *apiError) {
	v, ok := m.get("atomicity")
	if !ok || isNull(v) {
		return false, nil
	}
	mode, e := wantString(v, "atomicity")
	if e != nil {
		return false, e
	}
	switch mode {
	case "partial":
		return false, nil
	case "atomic":
		return true, nil
	}
	return false, invalid("atomicity", "atomicity %q: must be \"partial\" or \"atomic\"", mode)
}

// refuseIdempotencyKey refuses idempotency keys, which pronto does not keep: accepting one without
// honouring it would make a retried request enqueue its jobs twice.
func refuseIdempotencyKey(r *http.Request, m object) *apiError {
	v, ok := m.get("idempotency_key")
	if (ok && !isNull(v)) || r.Header.Get("Idempotency-Key") != "" {
		return invalid("idempotency_key", "idempotency keys are not supported by this server; retry a failed "+
			"bulk request with unique jobs (\"unique\") to avoid duplicates")
	}
	return nil
}

// appendItemError appends an item's error object, in the format of OJS error bodies.
func appendItemError(b []byte, e *apiError) []byte {
	raw, err := json.Marshal(errorBody{Code: e.code, Message: e.message, Retryable: e.retryable, Type: e.typ, Details: e.details})
	if err != nil {
		raw = []byte(`{"code":"backend_error","message":"error could not be encoded","retryable":false}`)
	}
	return appendRawField(b, "error", raw)
}

// bulkEnqueueItem is the outcome of one job of a bulk enqueue.
type bulkEnqueueItem struct {
	job *pronto.JobRow
	err *apiError
}

// POST /ojs/v1/jobs/bulk
func (s *Server) bulkEnqueue(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readObject(w, r, "bulk request")
	if !ok {
		return
	}
	m, e := decodeObject(body, "bulk request")
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	atomic, e := decodeAtomicity(m)
	if e == nil {
		e = refuseIdempotencyKey(r, m)
	}
	var elems []json.RawMessage
	if e == nil {
		elems, e = bulkJobs(m)
	}
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	now := s.decodeNow(r.Context())
	reqs := make([]*enqueueRequest, len(elems))
	items := make([]bulkEnqueueItem, len(elems))
	for i, el := range elems {
		reqs[i], items[i].err = decodeJob(el, now)
		if items[i].err == nil {
			items[i].err = s.applyTenant(r, reqs[i], "")
		}
		if items[i].err == nil {
			items[i].err = s.checkArgs(r.Context(), reqs[i], "")
		}
	}
	// The ids being inserted (enqueueOrder) until writeBulkEnqueue recorded their events. The inserts
	// add them as they mark them, so a panic in an insert (recovered as a 500) still forgets them.
	var ids []string
	defer func() { s.order.end(ids) }()
	if atomic {
		s.insertAtomic(r.Context(), reqs, items, &ids)
	} else {
		s.insertEach(r.Context(), reqs, items, &ids)
	}
	s.writeBulkEnqueue(w, items, atomic)
}

// bulkJobs reads the jobs member: a non-empty array of at most maxBulkItems elements.
func bulkJobs(m object) ([]json.RawMessage, *apiError) {
	elems, e := jobEnvelopes(m)
	if e != nil {
		return nil, e
	}
	if len(elems) > maxBulkItems {
		return nil, tooManyItems("jobs", len(elems))
	}
	return elems, nil
}

// insertEach inserts every valid job on its own (partial mode). It adds the ids it marks as being
// inserted (Server.beginInsert) to *ids before each insert.
func (s *Server) insertEach(ctx context.Context, reqs []*enqueueRequest, items []bulkEnqueueItem, ids *[]string) {
	for i, req := range reqs {
		if items[i].err != nil {
			continue
		}
		ins := []pronto.OJSJob{req.job}
		*ids = append(*ids, s.beginInsert(ins)...)
		rows, err := s.client.InsertOJS(ctx, ins)
		if err != nil {
			items[i].err = fromClientError(err, "job", req.job.Opts.ID)
			continue
		}
		items[i].job = rows[0]
	}
}

// insertAtomic inserts every job in one batch, or none: when a job is refused, every item fails, the
// culprit with its error and the others as rolled back. It sets *ids to the ids it marks as being
// inserted (Server.beginInsert) before the insert.
func (s *Server) insertAtomic(ctx context.Context, reqs []*enqueueRequest, items []bulkEnqueueItem, ids *[]string) {
	failed := false
	for _, it := range items {
		failed = failed || it.err != nil
	}
	if !failed {
		jobs := make([]pronto.OJSJob, len(reqs))
		for i, req := range reqs {
			jobs[i] = req.job
		}
		*ids = s.beginInsert(jobs)
		rows, err := s.client.InsertOJS(ctx, jobs)
		if err == nil {
			for i, j := range rows {
				items[i].job = j
			}
			return
		}
		// The client names the refused job of a batch ("job 3 of 10: ...") when it is one job's
		// options; a store refusal (a unique conflict) does not say which job it was.
		culprit := culpritIndex(err, len(reqs))
		if e := ownUniqueConflict(err); e != nil {
			// Two of the batch's own jobs share a unique key: the holder the store names was rolled
			// back with the rest, so the refusal names the two jobs by index, not a job id.
			items[e.details["index"].(int)].err = e
		} else if culprit >= 0 {
			// fromClientError keeps what follows "invalid job: ", dropping the "job 3 of 10" prefix.
			items[culprit].err = fromClientError(err, "job", reqs[culprit].job.Opts.ID)
		} else {
			cause := fromClientError(err, "job", "")
			for i := range items {
				e := *cause
				e.message = "the atomic batch was rolled back: " + cause.message
				items[i].err = &e
			}
			return
		}
	}
	for i := range items {
		if items[i].err == nil {
			items[i].err = errorf(http.StatusUnprocessableEntity, "rolled_back",
				"not enqueued: another job of the atomic batch was refused")
		}
	}
}

// culpritIndex reads the index of the refused job from a batch insert error ("job 3 of 10: ..."), or
// -1. A batch of one job is not numbered: its job is the culprit of a refused argument.
func culpritIndex(err error, n int) int {
	if !errors.Is(err, pronto.ErrInvalidArgs) {
		return -1
	}
	if n == 1 {
		return 0
	}
	var i, total int
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, serr := fmt.Sscanf(e.Error(), "job %d of %d:", &i, &total); serr == nil && total == n && i >= 0 && i < n {
			return i
		}
	}
	return -1
}

// writeBulkEnqueue answers a bulk enqueue: 200 when every job was enqueued, 207 when some were, 422
// when none was (or an atomic batch was refused).
func (s *Server) writeBulkEnqueue(w http.ResponseWriter, items []bulkEnqueueItem, atomic bool) {
	succeeded := 0
	for _, it := range items {
		if it.err == nil {
			succeeded++
		}
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendIntField(*b, "total", int64(len(items)))
	*b = appendIntField(*b, "succeeded", int64(succeeded))
	*b = appendIntField(*b, "failed", int64(len(items)-succeeded))
	*b = appendStringField(*b, "atomicity", map[bool]string{true: "atomic", false: "partial"}[atomic])
	*b = append(appendKey(*b, "items"), '[')
	for i, it := range items {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = append(*b, '{')
		*b = appendIntField(*b, "index", int64(i))
		switch {
		case it.err != nil:
			*b = appendStringField(*b, "status", "failed")
			*b = appendItemError(*b, it.err)
		case it.job.Duplicate:
			// on_conflict "ignore": nothing was inserted; this is the job holding the unique key.
			*b = appendStringField(*b, "status", "duplicate")
			*b = appendJob(appendKey(*b, "job"), it.job)
		default:
			*b = appendStringField(*b, "status", "created")
			*b = appendJob(appendKey(*b, "job"), it.job)
			s.enqueuedEvent(it.job)
		}
		*b = append(*b, '}')
	}
	*b = append(*b, ']', '}')
	w.Header().Set("X-OJS-Batch-Size", strconv.Itoa(len(items)))
	writeBuf(w, bulkStatus(len(items), succeeded), b)
}

// bulkStatus is 200 when every item succeeded (or there were none), 422 when none did, 207 otherwise.
func bulkStatus(total, succeeded int) int {
	switch {
	case succeeded == total:
		return http.StatusOK
	case succeeded == 0:
		return http.StatusUnprocessableEntity
	}
	return http.StatusMultiStatus
}

// bulkFilter selects jobs for a bulk cancel, retry or delete.
type bulkFilter struct {
	params   pronto.JobListParams
	priority *int
}

// decodeBulkFilter reads the filter member: type, queue, state (an array, or one state) and priority.
// The other OJS filter members (enqueued_before, enqueued_after, meta) are refused rather than
// ignored, so a filter never matches more jobs than its sender meant. For the same reason a filter
// that sets none of them ({} or all members null), which would match every job of every queue, is
// refused unless it says so with "all": true.
func decodeBulkFilter(raw json.RawMessage, op *bulkOp) (*bulkFilter, *apiError) {
	m, e := decodeObject(raw, "filter")
	if e != nil {
		e.details = map[string]any{"field": "filter"}
		return nil, e
	}
	f := &bulkFilter{params: pronto.JobListParams{States: op.match}}
	criteria, all := 0, false
	for _, kv := range m {
		k, v := kv.key, kv.val
		if isNull(v) {
			continue
		}
		if k != "all" {
			criteria++
		}
		switch k {
		case "all":
			if all, e = wantBool(v, "filter.all"); e != nil {
				return nil, e
			}
		case "type":
			typ, e := wantString(v, "filter.type")
			if e != nil {
				return nil, e
			}
			if !pronto.ValidOJSType(typ) {
				return nil, invalid("filter.type", "filter.type %q is not a valid job type", typ)
			}
			f.params.Kinds = []string{typ}
		case "queue":
			q, e := wantString(v, "filter.queue")
			if e != nil {
				return nil, e
			}
			if !validQueue(q) {
				return nil, invalid("filter.queue", "filter.queue %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", q)
			}
			f.params.Queues = []string{q}
		case "state":
			states, e := decodeStates(v)
			if e != nil {
				return nil, e
			}
			f.params.States = states
		case "priority":
			p, e := wantPriority(v, "filter.priority")
			if e != nil {
				return nil, e
			}
			f.priority = &p
		case "tags":
			// pronto's extension: jobs that have every one of these tags.
			tags, e := wantStrings(v, "filter.tags")
			if e != nil {
				return nil, e
			}
			if len(tags) == 0 || slices.Contains(tags, "") {
				return nil, invalid("filter.tags", "filter.tags must list one or more non-empty tags")
			}
			f.params.Tags = tags
		case "enqueued_before", "enqueued_after", "meta":
			return nil, invalid("filter."+k, "filter.%s is not supported: filter by type, queue, state, priority and tags", k)
		default:
			return nil, invalid("filter."+k, "unknown filter member %q: filter by type, queue, state, priority and tags", k)
		}
	}
	if criteria == 0 && !all {
		return nil, invalid("filter", "the filter sets no type, queue, state or priority, so it would match every job of "+
			"every queue: narrow it, or send \"all\": true in the filter to mean every job")
	}
	return f, nil
}

// decodeStates reads filter.state: job states, as an array or a single string.
func decodeStates(v json.RawMessage) ([]pronto.State, *apiError) {
	var names []string
	if jsonKind(v) == "string" {
		name, e := wantString(v, "filter.state")
		if e != nil {
			return nil, e
		}
		names = []string{name}
	} else {
		var e *apiError
		if names, e = wantStrings(v, "filter.state"); e != nil {
			return nil, e
		}
	}
	if len(names) == 0 {
		return nil, invalid("filter.state", "filter.state is empty")
	}
	states := make([]pronto.State, len(names))
	for i, n := range names {
		states[i] = pronto.State(n)
		if !states[i].Valid() {
			return nil, invalid("filter.state", "filter.state %q is not a job state", n)
		}
	}
	return states, nil
}

// matchIDs lists the ids of the jobs f matches, oldest first, at most maxBulkItems of them; more
// reports that further jobs match (the caller repeats the request for them).
func (s *Server) matchIDs(ctx context.Context, f *bulkFilter) (ids []string, more bool, err error) {
	p := f.params
	p.Limit = maxBulkItems + 1
	for {
		page, err := s.client.JobList(ctx, &p)
		if err != nil {
			return nil, false, err
		}
		for _, j := range page.Jobs {
			if f.priority != nil && j.Priority != *f.priority {
				continue
			}
			if len(ids) == maxBulkItems {
				return ids, true, nil
			}
			ids = append(ids, j.ID)
		}
		if page.Next == "" {
			return ids, false, nil
		}
		p.Cursor = page.Next
	}
}

// decodeBulkIDs reads job_ids: a non-empty array of at most maxBulkItems job ids.
func decodeBulkIDs(raw json.RawMessage) ([]string, *apiError) {
	ids, e := wantStrings(raw, "job_ids")
	if e != nil {
		return nil, e
	}
	if len(ids) == 0 {
		return nil, invalid("job_ids", "job_ids is empty")
	}
	if len(ids) > maxBulkItems {
		return nil, tooManyItems("job_ids", len(ids))
	}
	for i := range ids {
		if e := checkJobID(&ids[i], "job_ids["+strconv.Itoa(i)+"]"); e != nil {
			return nil, e
		}
	}
	return ids, nil
}

// POST /ojs/v1/jobs/bulk/{cancel,retry,delete}
func (s *Server) bulkJobOp(w http.ResponseWriter, r *http.Request, op *bulkOp) {
	body, ok := s.readObject(w, r, "bulk request")
	if !ok {
		return
	}
	ids, more, e := s.bulkTargets(r, body, op)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	var res []pronto.BulkResult
	if len(ids) > 0 {
		var err error
		if res, err = op.run(s.client, r.Context(), ids); err != nil {
			s.writeError(w, r, fromClientError(err, "job", ""))
			return
		}
	}
	done := 0
	b := getBuf()
	*b = append(*b, `{"items":[`...)
	for i, it := range res {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = append(*b, '{')
		*b = appendIntField(*b, "index", int64(i))
		*b = appendStringField(*b, "job_id", it.ID)
		if it.Err == nil {
			done++
			*b = appendStringField(*b, "status", op.done)
			*b = appendStringField(*b, "state", string(it.Job.State))
		} else {
			*b = appendStringField(*b, "status", "skipped")
			*b = appendSkipReason(*b, it.Err)
		}
		*b = append(*b, '}')
	}
	*b = append(*b, ']')
	*b = appendIntField(*b, "total_matched", int64(len(res)))
	*b = appendIntField(*b, op.done, int64(done))
	*b = appendIntField(*b, "skipped", int64(len(res)-done))
	if more {
		*b = appendBoolField(*b, "has_more", true)
	}
	*b = append(*b, '}')
	w.Header().Set("X-OJS-Batch-Size", strconv.Itoa(len(res)))
	writeBuf(w, bulkStatus(len(res), done), b)
}

// bulkTargets reads a bulk cancel, retry or delete request and returns the job ids it names, or those
// its filter matches.
func (s *Server) bulkTargets(r *http.Request, body []byte, op *bulkOp) (ids []string, more bool, e *apiError) {
	m, e := decodeBody(body, "bulk request")
	if e != nil {
		return nil, false, e
	}
	atomic, e := decodeAtomicity(m)
	if e != nil {
		return nil, false, e
	}
	if atomic {
		return nil, false, invalid("atomicity", "atomicity \"atomic\" is not supported for bulk %s: each job is "+
			"handled on its own (\"partial\") and its outcome reported", op.name)
	}
	if e := refuseIdempotencyKey(r, m); e != nil {
		return nil, false, e
	}
	rawIDs, hasIDs := m.get("job_ids")
	hasIDs = hasIDs && !isNull(rawIDs)
	rawFilter, hasFilter := m.get("filter")
	hasFilter = hasFilter && !isNull(rawFilter)
	switch {
	case hasIDs && hasFilter:
		return nil, false, invalid("filter", "give job_ids or filter, not both")
	case hasIDs:
		ids, e = decodeBulkIDs(rawIDs)
		return ids, false, e
	case hasFilter:
		f, e := decodeBulkFilter(rawFilter, op)
		if e != nil {
			return nil, false, e
		}
		ids, more, err := s.matchIDs(r.Context(), f)
		if err != nil {
			return nil, false, fromClientError(err, "job", "")
		}
		return ids, more, nil
	}
	return nil, false, invalid("job_ids", "job_ids or filter is required: the jobs to %s", op.name)
}

// appendSkipReason explains why an item was skipped: its reason, and the job's state when that was it.
func appendSkipReason(b []byte, err error) []byte {
	var te *pronto.TransitionError
	switch {
	case errors.As(err, &te):
		reason := "job is in state " + string(te.From)
		if te.Reason != "" {
			reason += ": " + te.Reason // a state that allows it, refused here (a waited-for workflow step)
		}
		b = appendStringField(b, "reason", reason)
		return appendStringField(b, "current_state", string(te.From))
	case errors.Is(err, pronto.ErrNotFound):
		return appendStringField(b, "reason", "job not found")
	}
	return appendStringField(b, "reason", trimPrefix(err.Error()))
}
