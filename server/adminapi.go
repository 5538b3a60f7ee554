package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
)

func isNotFound(err error) bool { return errors.Is(err, pronto.ErrNotFound) }

// The OJS admin API (ojs-admin-api.md) under /ojs/v1/admin/, dead-letter statistics
// (ojs-dead-letter.md 10.1) and readiness. Answers are built with encoding/json: these endpoints are
// for operators and dashboards, not the hot path.

// adminScanLimit bounds the jobs one admin request reads (deep pages, bulk actions by filter, purges,
// dead-letter statistics by error type); the answer says when it stopped there.
const adminScanLimit = 10000

// adminStates orders the states in counts objects.
var adminStates = []pronto.State{pronto.StateAvailable, pronto.StateActive, pronto.StateScheduled, pronto.StateRetryable,
	pronto.StatePending, pronto.StateCompleted, pronto.StateCancelled, pronto.StateDiscarded}

func writeJSONValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only values built here are written: a failure is a bug, answered as such
		b = []byte(`{"error":{"code":"internal_error","message":"encoding the answer failed","retryable":false}}`)
		status = http.StatusInternalServerError
	}
	writeRaw(w, status, b)
}

func countsOf(q *pronto.QueueInfo) map[string]int64 {
	m := make(map[string]int64, len(adminStates))
	for _, st := range adminStates {
		m[string(st)] = q.Counts[st]
	}
	return m
}

func adminQueue(q *pronto.QueueInfo) map[string]any {
	state := "active"
	if q.Paused {
		state = "paused"
	}
	return map[string]any{"name": q.Name, "state": state, "paused": q.Paused, "counts": countsOf(q)}
}

// routeAdmin dispatches a path below /ojs/v1/admin/ (seg[0] == "admin").
func (s *Server) routeAdmin(w http.ResponseWriter, r *http.Request, seg []string) bool {
	m := r.Method
	is := func(method string) bool {
		if m != method {
			s.writeError(w, r, methodNotAllowed(r, method))
			return false
		}
		return true
	}
	if len(seg) < 2 {
		return false
	}
	switch seg[1] {
	case "queues":
		switch {
		case len(seg) == 2:
			if is(http.MethodGet) {
				s.adminListQueues(w, r)
			}
			return true
		case len(seg) == 3:
			if is(http.MethodGet) {
				s.adminGetQueue(w, r, seg[2])
			}
			return true
		case len(seg) == 4 && (seg[3] == "pause" || seg[3] == "resume"):
			if is(http.MethodPost) {
				s.adminPauseQueue(w, r, seg[2], seg[3] == "pause")
			}
			return true
		case len(seg) == 4 && seg[3] == "jobs":
			if is(http.MethodDelete) {
				s.adminPurgeQueue(w, r, seg[2])
			}
			return true
		}
	case "jobs":
		switch {
		case len(seg) == 2:
			if is(http.MethodGet) {
				s.adminListJobs(w, r, nil)
			}
			return true
		case len(seg) == 4 && seg[2] == "bulk":
			if is(http.MethodPost) {
				s.adminBulk(w, r, seg[3])
			}
			return true
		case len(seg) == 3:
			if is(http.MethodGet) {
				s.adminGetJob(w, r, seg[2])
			}
			return true
		case len(seg) == 4 && seg[3] == "cancel":
			if is(http.MethodPost) {
				s.cancelJob(w, r, seg[2])
			}
			return true
		case len(seg) == 4 && seg[3] == "retry":
			if is(http.MethodPost) {
				s.adminRetryJob(w, r, seg[2])
			}
			return true
		}
	case "workers":
		switch {
		case len(seg) == 2:
			if is(http.MethodGet) {
				s.adminWorkers(w, r)
			}
			return true
		case len(seg) == 3:
			switch m {
			case http.MethodGet:
				s.adminGetWorker(w, r, seg[2])
			case http.MethodDelete:
				s.adminDeregisterWorker(w, r, seg[2])
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
			}
			return true
		case len(seg) == 4 && (seg[3] == "quiet" || seg[3] == "terminate"):
			if is(http.MethodPost) {
				s.adminWorkerDirective(w, r, seg[2], seg[3])
			}
			return true
		}
	case "stats":
		switch {
		case len(seg) == 2:
			if is(http.MethodGet) {
				s.adminStats(w, r)
			}
			return true
		case len(seg) == 3 && seg[2] == "history":
			if is(http.MethodGet) {
				s.adminStatsHistory(w, r)
			}
			return true
		}
	case "system":
		switch {
		case len(seg) == 3 && seg[2] == "config":
			if is(http.MethodGet) {
				s.adminSystemConfig(w, r)
			}
			return true
		case len(seg) == 3 && seg[2] == "maintenance":
			switch m {
			case http.MethodGet:
				s.adminGetMaintenance(w, r)
			case http.MethodPost:
				s.adminSetMaintenance(w, r)
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "POST"))
			}
			return true
		}
	case "dead-letter":
		switch {
		case len(seg) == 2:
			switch m {
			case http.MethodGet:
				s.adminListJobs(w, r, []pronto.State{pronto.StateDiscarded})
			case http.MethodDelete:
				s.adminPurgeDeadLetter(w, r)
			default:
				s.writeError(w, r, methodNotAllowed(r, "GET", "DELETE"))
			}
			return true
		case len(seg) == 3 && seg[2] == "stats":
			if is(http.MethodGet) {
				s.deadLetterStats(w, r)
			}
			return true
		case len(seg) == 3 && seg[2] == "retention": // replay.go
			s.deadLetterRetentionRoute(w, r)
			return true
		case len(seg) == 3 && seg[2] == "replay-rules": // replay.go
			s.replayRules(w, r)
			return true
		case len(seg) == 4 && seg[3] == "retry":
			if is(http.MethodPost) {
				s.retryDeadLetter(w, r, seg[2])
			}
			return true
		}
	}
	return false
}

// GET /ojs/v1/admin/queues?page=&per_page=: the queues in name order.
func (s *Server) adminListQueues(w http.ResponseWriter, r *http.Request) {
	page, perPage, e := listPage(r.URL.Query())
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	qs, err := s.client.QueueList(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", ""))
		return
	}
	slices.SortFunc(qs, func(a, b pronto.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	qs, pagination := pageOf(qs, page, perPage)
	items := make([]map[string]any, len(qs))
	now := time.Now()
	for i := range qs {
		items[i] = adminQueue(&qs[i])
		items[i]["throughput"], items[i]["latency_ms"] = s.history.queueActivity(qs[i].Name, now)
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"items": items, "pagination": pagination})
}

// pageOf returns the items of page (from 1) of a listing held whole, and its pagination object: the
// total listed, the page, per_page and whether a later page has more.
func pageOf[T any](all []T, page, perPage int) ([]T, map[string]any) {
	start := min(len(all), (page-1)*perPage)
	end := min(len(all), start+perPage)
	return all[start:end], map[string]any{"total": len(all), "page": page, "per_page": perPage, "has_more": end < len(all)}
}

// GET /ojs/v1/admin/queues/{name}
func (s *Server) adminGetQueue(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	q, err := s.queueInfo(r.Context(), name)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	out := adminQueue(q)
	out["throughput"], out["latency_ms"] = s.history.queueActivity(name, time.Now())
	if st, ok := s.client.Stats().Queues[name]; ok {
		out["workers"] = map[string]any{"busy": st.Running, "free": st.Free}
	}
	writeJSONValue(w, http.StatusOK, out)
}

// POST /ojs/v1/admin/queues/{name}/pause and /resume
func (s *Server) adminPauseQueue(w http.ResponseWriter, r *http.Request, name string, pause bool) {
	discardBody(r)
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	op, key := s.client.QueueResume, "resumed_at"
	if pause {
		op, key = s.client.QueuePause, "paused_at"
	}
	if err := op(r.Context(), name); err != nil {
		s.writeError(w, r, fromClientError(err, "queue", name))
		return
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"name": name, "paused": pause, key: time.Now().UTC()})
}

// jobFilter selects jobs for listings, bulk actions and purges.
type jobFilter struct {
	states []pronto.State
	queues []string
	kinds  []string
	prefix string // a type filter ending in "*": kinds starting with it
	before time.Time
	// since and until bound created_at, in whole milliseconds (zero: unbounded); see setRange.
	since, until time.Time
}

// createdSlack is how long before its created_at a job's id may have been made. The store selects
// by the time in the id (JobListParams.CreatedAfter/CreatedBefore), which is taken before the store
// stamps created_at, by the insert's latency: scan asks for ids from since minus this, and match
// then compares created_at itself.
const createdSlack = time.Second

// match applies what the store cannot: the type prefix, the creation range on created_at itself,
// and the before bound.
func (f *jobFilter) match(j *pronto.JobRow) bool {
	if f.prefix != "" && !strings.HasPrefix(j.Kind, f.prefix) {
		return false
	}
	created := j.CreatedAt.Truncate(time.Millisecond) // as answers show it
	if (!f.since.IsZero() && created.Before(f.since)) || (!f.until.IsZero() && !created.Before(f.until)) {
		return false
	}
	if !f.before.IsZero() {
		at := j.CompletedAt
		if at.IsZero() {
			at = j.CreatedAt
		}
		if !at.Before(f.before) {
			return false
		}
	}
	return true
}

// parseFilter reads queue, state and type (each one value, or comma-separated values).
func parseFilter(queue, state, kind string) (*jobFilter, *apiError) {
	f := &jobFilter{}
	for _, q := range splitList(queue) {
		if e := checkQueueName(q); e != nil {
			return nil, e
		}
		f.queues = append(f.queues, q)
	}
	for _, st := range splitList(state) {
		if !pronto.State(st).Valid() {
			return nil, invalid("state", "state %q: must be one of available, active, scheduled, retryable, pending, completed, cancelled, discarded", st)
		}
		f.states = append(f.states, pronto.State(st))
	}
	for _, k := range splitList(kind) {
		if p, ok := strings.CutSuffix(k, "*"); ok {
			if f.prefix != "" || len(splitList(kind)) > 1 {
				return nil, invalid("type", "a type prefix (ending in *) must be the only type filter")
			}
			f.prefix = p
			continue
		}
		if !pronto.ValidKind(k) {
			return nil, invalid("type", "type %q: not a valid OJS job type", k)
		}
		f.kinds = append(f.kinds, k)
	}
	return f, nil
}

// setRange reads since and until, RFC 3339 times or "" for no bound, into f; field prefixes the
// parameter names in errors ("filter." in a bulk filter).
//
// The bounds are rounded up to a whole millisecond, the precision answers show created_at in: a job
// shown created at T is selected when since <= T < until, whatever the sub-millisecond part of the
// bounds or of the job's creation.
func (f *jobFilter) setRange(since, until, field string) *apiError {
	for _, p := range []struct {
		name, v string
		to      *time.Time
	}{{"since", since, &f.since}, {"until", until, &f.until}} {
		if p.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, p.v)
		if err != nil {
			return invalid(field+p.name, "%s%s %q: not an RFC 3339 time", field, p.name, p.v)
		}
		// ids record no time before the epoch; the zero time would read as no bound.
		if t.Before(time.UnixMilli(0)) {
			t = time.UnixMilli(0)
		}
		if c := t.Truncate(time.Millisecond); c.Before(t) {
			t = c.Add(time.Millisecond)
		}
		*p.to = t
	}
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// scan calls fn with each job f selects, in id order (newest first when desc), reading at most
// adminScanLimit jobs of f's queues, states, kinds and creation range; fn returns false to stop. It
// reports whether it stopped at the limit.
//
// The store reads the ids of the creation range, widened by createdSlack below since. A job's id
// is made before its created_at, so one created before until has an id from before it; a job whose
// id's time is off its created_at otherwise (one enqueued with its own id, or stamped by a store
// whose clock runs behind) is selected only when its id's time lies in that range too.
func (s *Server) scan(ctx context.Context, f *jobFilter, desc bool, fn func(*pronto.JobRow) bool) (truncated bool, err error) {
	read, cursor := 0, ""
	after := f.since
	if !after.IsZero() {
		after = after.Add(-createdSlack)
	}
	for {
		page, err := s.client.JobList(ctx, &pronto.JobListParams{States: f.states, Queues: f.queues, Kinds: f.kinds,
			CreatedAfter: after, CreatedBefore: f.until, Cursor: cursor, Descending: desc, Limit: min(1000, adminScanLimit-read)})
		if err != nil {
			return false, err
		}
		for _, j := range page.Jobs {
			if f.match(j) && !fn(j) {
				return false, nil
			}
		}
		read += len(page.Jobs)
		if page.Next == "" {
			return false, nil
		}
		if read >= adminScanLimit {
			return true, nil
		}
		cursor = page.Next
	}
}

// GET /ojs/v1/admin/jobs (and /admin/dead-letter, with states fixed to discarded)
func (s *Server) adminListJobs(w http.ResponseWriter, r *http.Request, states []pronto.State) {
	q := r.URL.Query()
	if sortBy := q.Get("sort"); sortBy != "" && sortBy != "created_at" {
		s.writeError(w, r, invalid("sort", "sort %q is not supported: jobs are listed by created_at only", sortBy))
		return
	}
	order, page, perPage, e := listPaging(q, "narrow the filter")
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	state := q.Get("state")
	if states != nil {
		state = string(states[0])
	}
	f, e := parseFilter(q.Get("queue"), state, q.Get("type"))
	if e == nil {
		e = f.setRange(q.Get("since"), q.Get("until"), "")
	}
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	skip := (page - 1) * perPage
	items := make([]json.RawMessage, 0, perPage)
	hasMore := false
	truncated, err := s.scan(r.Context(), f, order != "asc", func(j *pronto.JobRow) bool {
		if states != nil && !isDeadLetter(j) {
			return true
		}
		if skip > 0 {
			skip--
			return true
		}
		if len(items) == perPage {
			hasMore = true
			return false
		}
		items = append(items, appendJob(nil, j))
		return true
	})
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", ""))
		return
	}
	// A read stopped at the limit may have left matches unread (a type prefix or the dead-letter
	// test filter after the read): has_more says so, and truncated why.
	pagination := map[string]any{"page": page, "per_page": perPage, "has_more": hasMore || truncated, "truncated": truncated}
	if f.prefix == "" && len(f.kinds) == 0 && states == nil && f.since.IsZero() && f.until.IsZero() {
		if total, err := s.countJobs(r.Context(), f); err == nil {
			pagination["total"] = total
		}
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"items": items, "pagination": pagination})
}

// countJobs counts the jobs of f's queues and states from the queue counts (one query).
func (s *Server) countJobs(ctx context.Context, f *jobFilter) (int64, error) {
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for i := range qs {
		if len(f.queues) > 0 && !containsString(f.queues, qs[i].Name) {
			continue
		}
		for _, st := range adminStates {
			if len(f.states) == 0 || containsState(f.states, st) {
				total += qs[i].Counts[st]
			}
		}
	}
	return total, nil
}

func containsString(ss []string, v string) bool {
	for _, s := range ss {
		if s == v {
			return true
		}
	}
	return false
}

func containsState(ss []pronto.State, v pronto.State) bool {
	for _, s := range ss {
		if s == v {
			return true
		}
	}
	return false
}

// GET /ojs/v1/admin/jobs/{id}: the job envelope itself, not wrapped in {"job": ...} as the data-plane
// GET /ojs/v1/jobs/{id} answers (ojs-admin-api.md 7.2 shows it bare).
func (s *Server) adminGetJob(w http.ResponseWriter, r *http.Request, id string) {
	j := s.lookupJob(w, r, &id)
	if j == nil {
		return
	}
	j = s.repair(r.Context(), j)
	b := getBuf()
	*b = appendJob(*b, j)
	writeBuf(w, http.StatusOK, b)
}

// POST /ojs/v1/admin/jobs/{id}/retry
func (s *Server) adminRetryJob(w http.ResponseWriter, r *http.Request, id string) {
	discardBody(r)
	if e := checkJobID(&id, "job id"); e != nil {
		s.writeError(w, r, e)
		return
	}
	j, err := s.client.JobRetry(r.Context(), id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", id))
		return
	}
	s.writeJob(w, http.StatusOK, j, nil)
}

// adminBulkRequest selects jobs by ids or by filter (decodeAdminFilter); a filter needs confirm.
type adminBulkRequest struct {
	IDs     []string         `json:"ids"`
	Filter  *json.RawMessage `json:"filter"`
	Confirm bool             `json:"confirm"`
}

// adminFilterMembers are the members of a bulk action's filter: GET /admin/jobs's query parameters
// of the same names.
var adminFilterMembers = []string{"queue", "state", "type", "since", "until"}

// decodeAdminFilter reads a bulk action's filter into the jobFilter GET /admin/jobs builds from its
// query, so that a filter acts on exactly the jobs the listing shows. A member it does not know is
// refused (400 naming it), not ignored: ignoring it would act on more jobs than the sender meant.
func decodeAdminFilter(raw json.RawMessage) (*jobFilter, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, invalid("filter", "filter: an object with %s", strings.Join(adminFilterMembers, ", "))
	}
	v := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(adminFilterMembers, k) {
			return nil, invalid("filter."+k, "unknown filter member %q: filter by %s", k, strings.Join(adminFilterMembers, ", "))
		}
		if string(m[k]) == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal(m[k], &s); err != nil {
			return nil, invalid("filter."+k, "filter.%s must be a string", k)
		}
		v[k] = s
	}
	f, e := parseFilter(v["queue"], v["state"], v["type"])
	if e != nil {
		return nil, e
	}
	if e := f.setRange(v["since"], v["until"], "filter."); e != nil {
		return nil, e
	}
	return f, nil
}

// POST /ojs/v1/admin/jobs/bulk/{retry,cancel,delete}
func (s *Server) adminBulk(w http.ResponseWriter, r *http.Request, action string) {
	var op func(context.Context, []string) ([]pronto.BulkResult, error)
	switch action {
	case "retry":
		op = s.client.JobRetryMany
	case "cancel":
		op = s.client.JobCancelMany
	case "delete":
		op = s.client.JobDeleteMany
	default:
		s.writeError(w, r, routeNotFound(r))
		return
	}
	req, ok := readRequest(s, w, r, "bulk request", func(body []byte) (adminBulkRequest, *apiError) {
		var q adminBulkRequest
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&q); err != nil {
			return q, invalid("", "bulk request: %v (send {\"filter\": {\"queue\": ..., \"state\": ..., \"type\": ..., \"since\": ..., \"until\": ...}, \"confirm\": true} or {\"ids\": [...]})", err)
		}
		if (q.Filter == nil) == (len(q.IDs) == 0) {
			return q, invalid("filter", "send either \"ids\" or \"filter\"")
		}
		if q.Filter != nil && !q.Confirm {
			return q, invalid("confirm", "a bulk %s by filter needs \"confirm\": true", action)
		}
		if len(q.IDs) > adminScanLimit {
			return q, invalid("ids", "at most %d ids per request", adminScanLimit)
		}
		return q, nil
	})
	if !ok {
		return
	}
	ids, truncated := req.IDs, false
	for i, id := range ids {
		ids[i], _ = normID(id) // a malformed id is the client's per-item error
	}
	if req.Filter != nil {
		f, e := decodeAdminFilter(*req.Filter)
		if e != nil {
			s.writeError(w, r, e)
			return
		}
		var err error
		truncated, err = s.scan(r.Context(), f, false, func(j *pronto.JobRow) bool {
			ids = append(ids, j.ID)
			return true
		})
		if err != nil {
			s.writeError(w, r, fromClientError(err, "job", ""))
			return
		}
	}
	succeeded, failed := 0, 0
	var res []pronto.BulkResult
	var err error
	if len(ids) > 0 {
		res, err = bulkChunked(r.Context(), ids, op)
		if err != nil && len(res) == 0 {
			s.writeError(w, r, fromClientError(err, "job", ""))
			return
		}
		for _, br := range res {
			if br.Err == nil {
				succeeded++
			} else {
				failed++
			}
		}
	}
	resp := map[string]any{"action": action, "matched": len(ids), "succeeded": succeeded,
		"failed": failed, "truncated": truncated}
	bulkStopped(resp, err, len(ids), len(res))
	writeJSONValue(w, http.StatusOK, resp)
}

// purgeRequest is the body of the purge endpoints.
type purgeRequest struct {
	States    []string `json:"states"`
	OlderThan string   `json:"older_than"`
	Confirm   bool     `json:"confirm"`
}

func (s *Server) readPurge(w http.ResponseWriter, r *http.Request, needStates bool) (purgeRequest, time.Time, bool) {
	var before time.Time
	req, ok := readRequest(s, w, r, "purge request", func(body []byte) (purgeRequest, *apiError) {
		var p purgeRequest
		// A member dropped unread ("older_then", "state") would purge more than was meant.
		if e := knownMembers(body, "", "purge request", "states", "older_than", "confirm"); e != nil {
			return p, e
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&p); err != nil {
			return p, invalid("", "purge request: %v", err)
		}
		if !p.Confirm {
			return p, invalid("confirm", "a purge needs \"confirm\": true")
		}
		if needStates && len(p.States) == 0 {
			return p, invalid("states", "name the states to purge, e.g. [\"completed\", \"discarded\"]")
		}
		for _, st := range p.States {
			if !pronto.State(st).Valid() {
				return p, invalid("states", "state %q is not a job state", st)
			}
			if st == string(pronto.StateActive) {
				return p, invalid("states", "active jobs cannot be purged; cancel them first")
			}
		}
		if p.OlderThan != "" {
			t, err := time.Parse(time.RFC3339, p.OlderThan)
			if err != nil {
				return p, invalid("older_than", "older_than %q: not an RFC 3339 time", p.OlderThan)
			}
			before = t
		}
		return p, nil
	})
	return req, before, ok
}

// purge deletes the jobs f selects and answers the count.
func (s *Server) purge(w http.ResponseWriter, r *http.Request, f *jobFilter, states []string, keep func(*pronto.JobRow) bool) {
	var ids []string
	truncated, err := s.scan(r.Context(), f, false, func(j *pronto.JobRow) bool {
		if keep == nil || !keep(j) {
			ids = append(ids, j.ID)
		}
		return true
	})
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", ""))
		return
	}
	purged := 0
	for _, id := range ids {
		if _, err := s.client.JobDelete(r.Context(), id); err == nil {
			purged++
		} else if r.Context().Err() != nil {
			break
		}
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"purged_count": purged, "states": states, "has_more": truncated})
}

// DELETE /ojs/v1/admin/queues/{name}/jobs
func (s *Server) adminPurgeQueue(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkQueueName(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	req, before, ok := s.readPurge(w, r, true)
	if !ok {
		return
	}
	f := &jobFilter{queues: []string{name}, before: before}
	for _, st := range req.States {
		f.states = append(f.states, pronto.State(st))
	}
	s.purge(w, r, f, req.States, nil)
}

// DELETE /ojs/v1/admin/dead-letter
func (s *Server) adminPurgeDeadLetter(w http.ResponseWriter, r *http.Request) {
	_, before, ok := s.readPurge(w, r, false)
	if !ok {
		return
	}
	f := &jobFilter{states: []pronto.State{pronto.StateDiscarded}, before: before}
	s.purge(w, r, f, []string{string(pronto.StateDiscarded)}, func(j *pronto.JobRow) bool { return !isDeadLetter(j) })
}

// workersHolding counts the active jobs per worker id.
func (s *Server) workersHolding(ctx context.Context) (map[string]int, bool, error) {
	held := map[string]int{}
	truncated, err := s.scan(ctx, &jobFilter{states: []pronto.State{pronto.StateActive}}, false, func(j *pronto.JobRow) bool {
		if j.WorkerID != "" {
			held[j.WorkerID]++
		}
		return true
	})
	return held, truncated, err
}

// GET /ojs/v1/admin/stats
func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	qs, err := s.client.QueueList(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "queue", ""))
		return
	}
	jobs := make(map[string]int64, len(adminStates))
	paused := 0
	for i := range qs {
		for _, st := range adminStates {
			jobs[string(st)] += qs[i].Counts[st]
		}
		if qs[i].Paused {
			paused++
		}
	}
	// workers counts what GET /admin/workers lists (its summary's total).
	workers, _, _, err := s.listWorkers(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "worker", ""))
		return
	}
	st := s.client.Stats()
	processed, failed := s.history.throughput("", time.Now())
	writeJSONValue(w, http.StatusOK, map[string]any{
		"queues": len(qs), "paused_queues": paused, "workers": len(workers), "jobs": jobs,
		"uptime_seconds": int64(time.Since(s.started).Seconds()), "leader": st.Leader,
		"completer_backlog": st.CompleterBacklog,
		"throughput":        map[string]any{"processed_per_minute": processed, "failed_per_minute": failed},
	})
}

// GET /ojs/v1/dead-letter/stats (and /ojs/v1/admin/dead-letter/stats): dead-letter totals by queue
// and by error type, and the oldest and newest entry. Counts by queue come from the queue counts; the
// rest from reading the discarded jobs, at most adminScanLimit of them ("sampled" says when more exist).
func (s *Server) deadLetterStats(w http.ResponseWriter, r *http.Request) {
	byQueue := map[string]int{}
	byType := map[string]int{}
	var oldest, newest time.Time
	total := 0
	truncated, err := s.scan(r.Context(), &jobFilter{states: []pronto.State{pronto.StateDiscarded}}, false, func(j *pronto.JobRow) bool {
		if !isDeadLetter(j) {
			return true
		}
		total++
		byQueue[j.Queue]++
		typ := "Unknown"
		if n := len(j.Errors); n > 0 && j.Errors[n-1].Type != "" {
			typ = j.Errors[n-1].Type
		}
		byType[typ]++
		at := j.CompletedAt
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
		if at.After(newest) {
			newest = at
		}
		return true
	})
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", ""))
		return
	}
	out := map[string]any{"total": total, "by_queue": byQueue, "by_error_type": byType, "sampled": truncated,
		"oldest_at": nil, "newest_at": nil}
	if total > 0 {
		out["oldest_at"], out["newest_at"] = oldest.UTC(), newest.UTC()
	}
	writeJSONValue(w, http.StatusOK, out)
}

// GET /ojs/v1/ready: 200 when this server can take work (its store answers and takes writes, its
// client runs and it is not draining), 503 otherwise with the reasons. Like health, it needs no API
// key, for load balancers and probes: a store's failure is named by its class (backendProblem).
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	var reasons []string
	_, err := s.store.GetJob(ctx, healthProbeID)
	if err == nil || isNotFound(err) {
		// A standby, a fenced primary or a replica answers the read but fails every insert, fetch
		// and ack: a server on it cannot take work.
		// (store.WriteProbe; a store without one, as memory, always takes writes.)
		if p, ok := s.store.(interface{ ProbeWritable(context.Context) error }); ok {
			err = p.ProbeWritable(ctx)
		}
	}
	if err != nil && !isNotFound(err) {
		problem, detail := s.backendProblem(r, err)
		reason := "backend " + problem
		if detail != "" {
			reason += ": " + detail
		}
		reasons = append(reasons, reason)
	}
	if !s.client.Stats().Started {
		reasons = append(reasons, "client not running")
	}
	if s.draining.Load() {
		reasons = append(reasons, "draining for shutdown")
	}
	if len(reasons) > 0 {
		w.Header().Set("Retry-After", unavailableRetryAfter) // ojs-errors.md ERR-006, as every 503 here
		writeJSONValue(w, http.StatusServiceUnavailable, map[string]any{"status": "not_ready", "reasons": reasons})
		return
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"status": "ready"})
}
