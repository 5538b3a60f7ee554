package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/deadletter"
	"github.com/pronto-jobs/pronto/store"
)

// jobView is a job as the browser sees it: snake_case, times as RFC 3339 (omitted when zero).
type jobView struct {
	ID            string                `json:"id"`
	Kind          string                `json:"kind"`
	Queue         string                `json:"queue"`
	State         pronto.State          `json:"state"`
	Priority      int                   `json:"priority"`
	Attempt       int                   `json:"attempt"`
	MaxAttempts   int                   `json:"max_attempts"`
	Args          json.RawMessage       `json:"args,omitempty"`
	Meta          json.RawMessage       `json:"meta,omitempty"`
	Result        json.RawMessage       `json:"result,omitempty"`
	Tags          []string              `json:"tags"`
	Errors        []pronto.AttemptError `json:"errors"`
	CreatedAt     *time.Time            `json:"created_at,omitempty"`
	ScheduledAt   *time.Time            `json:"scheduled_at,omitempty"`
	StartedAt     *time.Time            `json:"started_at,omitempty"`
	CompletedAt   *time.Time            `json:"completed_at,omitempty"`
	ExpiresAt     *time.Time            `json:"expires_at,omitempty"`
	WorkerID      string                `json:"worker_id,omitempty"`
	UniqueKey     string                `json:"unique_key,omitempty"`
	WorkflowID    string                `json:"workflow_id,omitempty"`
	ParentIDs     []string              `json:"parent_ids,omitempty"`
	RunOn         string                `json:"run_on,omitempty"`
	RateKey       string                `json:"rate_key,omitempty"`
	Tenant        string                `json:"tenant,omitempty"`
	ParentResults json.RawMessage       `json:"parent_results,omitempty"`
	Progress      *progressView         `json:"progress,omitempty"`
}

// progressView is what the job's current run reported (see pronto.ReportProgress).
type progressView struct {
	Value     *float64        `json:"value,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	UpdatedAt *time.Time      `json:"updated_at,omitempty"`
}

func tp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func viewJob(j *pronto.JobRow, full bool) *jobView {
	v := &jobView{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: j.State, Priority: j.Priority, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, Tags: j.Tags, CreatedAt: tp(j.CreatedAt), ScheduledAt: tp(j.ScheduledAt),
		StartedAt: tp(j.StartedAt), CompletedAt: tp(j.CompletedAt), WorkflowID: j.WorkflowID,
		ParentIDs: j.ParentIDs, RunOn: string(j.RunOn), Tenant: j.Tenant, // lists link a job's tenant
	}
	if v.Tags == nil {
		v.Tags = []string{}
	}
	if full {
		v.Args, v.Meta, v.Result, v.Errors = j.Args, j.Meta, j.Result, j.Errors
		v.ExpiresAt, v.WorkerID, v.UniqueKey = tp(j.ExpiresAt), j.WorkerID, j.UniqueKey
		v.RateKey, v.ParentResults = j.RateKey, j.ParentResults
		if p := j.Progress; p != nil {
			v.Progress = &progressView{Value: p.Value, Data: p.Data, UpdatedAt: tp(p.UpdatedAt)}
		}
	} else if n := len(j.Errors); n > 0 {
		// The list shows the latest error only; the job page has the whole history.
		v.Errors = j.Errors[n-1:]
	}
	if v.Errors == nil {
		v.Errors = []pronto.AttemptError{}
	}
	return v
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// clientError maps a client error to a status the browser can show: bad input and wrong states are
// the user's to fix, not server failures.
func (h *Handler) clientError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, pronto.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, pronto.ErrInvalidArgs):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, pronto.ErrInvalidTransition):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, pronto.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, err.Error())
	case errors.Is(err, context.Canceled):
		// The browser went away.
	case errors.Is(err, context.DeadlineExceeded) && h.cfg.RequestTimeout > 0:
		// The request's deadline (Config.RequestTimeout): say which, not only that the store was slow.
		h.log.Warn("dashboard: request failed", "err", err)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, h.timeoutText())
	case isStoreDown(h.cfg.Client.Store(), err):
		// The driver's text names hosts and databases: the log has it, the page gets its kind.
		h.log.Warn("dashboard: request failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, storeProblemText(h.cfg.Client.Store(), err))
	default:
		h.log.Warn("dashboard: request failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

type queueView struct {
	Name   string                 `json:"name"`
	Paused bool                   `json:"paused"`
	Counts map[pronto.State]int64 `json:"counts"`
}

func queueViews(qs []pronto.QueueInfo) []queueView {
	out := make([]queueView, 0, len(qs))
	for _, q := range qs {
		c := q.Counts
		if c == nil {
			c = map[pronto.State]int64{}
		}
		out = append(out, queueView{Name: q.Name, Paused: q.Paused, Counts: c})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// clientView is a live client of the store as the overview lists it.
type clientView struct {
	ID        string                   `json:"id"`
	Host      string                   `json:"host,omitempty"`
	PID       int                      `json:"pid,omitempty"`
	Version   string                   `json:"version,omitempty"`
	Leader    bool                     `json:"leader"`
	Queues    []pronto.ClientQueueInfo `json:"queues"`
	Workers   int                      `json:"workers"`
	Running   int                      `json:"running"`
	StartedAt *time.Time               `json:"started_at,omitempty"`
	SeenAt    *time.Time               `json:"seen_at,omitempty"`
}

func clientViews(list []pronto.ClientInfo) []clientView {
	out := make([]clientView, 0, len(list))
	for _, c := range list {
		v := clientView{ID: c.ID, Host: c.Host, PID: c.PID, Version: c.Version, Leader: c.Leader, Queues: c.Queues,
			StartedAt: tp(c.StartedAt), SeenAt: tp(c.SeenAt)}
		if v.Queues == nil {
			v.Queues = []pronto.ClientQueueInfo{}
		}
		for _, q := range c.Queues {
			v.Workers += q.MaxWorkers
			v.Running += q.Running
		}
		out = append(out, v)
	}
	return out
}

// GET /api/overview: the queues now plus the recent history the charts start from.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	qs, err := h.cfg.Client.QueueList(r.Context())
	if err != nil {
		h.clientError(w, err)
		return
	}
	clients, err := h.cfg.Client.ClientList(r.Context())
	if err != nil {
		h.clientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"queues": queueViews(qs), "clients": clientViews(clients), "history": h.hub.history(), "client_id": h.cfg.Client.ID(),
		"leader": h.cfg.Client.IsLeader(), "backend": h.cfg.Backend, "read_only": h.cfg.ReadOnly,
	})
}

// jobParams reads the jobs list filters shared by the list and bulk-by-filter.
func jobParams(q map[string][]string) (*pronto.JobListParams, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	p := &pronto.JobListParams{
		// A tag is free text (commas and spaces included): each tag parameter is one tag, whole.
		Queues: splitList(get("queue")), Kinds: splitList(get("kind")), Tags: nonEmpty(q["tag"]), Tenant: get("tenant"),
		Cursor: get("cursor"), Descending: get("order") != "asc", Limit: 50,
	}
	for _, s := range splitList(get("state")) {
		p.States = append(p.States, pronto.State(s))
	}
	now := time.Now()
	for _, b := range []struct {
		key  string
		dest *time.Time
	}{{"created_after", &p.CreatedAfter}, {"created_before", &p.CreatedBefore},
		{"finished_after", &p.FinishedAfter}, {"finished_before", &p.FinishedBefore}} {
		v := get(b.key)
		if v == "" {
			continue
		}
		t, err := parseWhen(v, now)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %v", b.key, v, err)
		}
		*b.dest = t
	}
	if l := get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("limit %q: must be a number from 1 to 1000", l)
		}
		p.Limit = n
	}
	return p, nil
}

// parseWhen reads a time bound: an RFC 3339 time, or a duration ago ("15m", "2h", "7d" is not Go
// syntax: days are written as hours, "168h").
func parseWhen(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (15m, 2h)")
}

// GET /api/jobs?state=&queue=&kind=&tag=&tenant=&created_after=&created_before=&finished_after=&finished_before=&cursor=&order=&limit=
func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	p, err := jobParams(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := h.cfg.Client.JobList(r.Context(), p)
	if err != nil {
		h.clientError(w, err)
		return
	}
	jobs := make([]*jobView, len(res.Jobs))
	for i, j := range res.Jobs {
		jobs[i] = viewJob(j, false)
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs, "next": res.Next})
}

// GET /api/jobs/{id}
func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := h.cfg.Client.JobGet(r.Context(), r.PathValue("id"))
	if err != nil {
		h.clientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, viewJob(j, true))
}

// POST /api/jobs/{id}/{retry|cancel|delete|activate|run-now}
func (h *Handler) jobAction(w http.ResponseWriter, r *http.Request) {
	c, id := h.cfg.Client, r.PathValue("id")
	var j *pronto.JobRow
	var err error
	switch a := r.PathValue("action"); a {
	case "retry":
		j, err = c.JobRetry(r.Context(), id)
	case "cancel":
		j, err = c.JobCancel(r.Context(), id)
	case "delete":
		j, err = c.JobDelete(r.Context(), id)
	case "activate":
		j, err = c.JobActivate(r.Context(), id)
	case "run-now":
		j, err = c.JobRunNow(r.Context(), id)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown job action %q: use retry, cancel, delete, activate or run-now", a))
		return
	}
	if err != nil {
		h.clientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, viewJob(j, true))
}

// POST /api/jobs/{id}/priority {"priority": N}: changes the priority of a job waiting to run
// (available, scheduled or pending; see pronto.Client.JobSetPriority) and answers {"job",
// "priority", "previous_priority"}. N is an integer from -100 to 100 or one of high, normal, low,
// as the OJS API and the CLI take it. A job in another state is a 409 naming its state.
func (h *Handler) setPriority(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Priority json.RawMessage `json:"priority"`
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields() // priority is all a job can change: anything else was meant elsewhere
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	priority, err := readPriority(req.Priority)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	j, prev, err := h.cfg.Client.JobSetPriority(r.Context(), r.PathValue("id"), priority)
	if err != nil {
		h.clientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job": viewJob(j, true), "priority": j.Priority, "previous_priority": prev})
}

// readPriority reads the priority member of a priority change: a JSON number or name, through
// pronto.ParsePriority so that the page, the OJS API and the CLI take the same values.
func readPriority(raw json.RawMessage) (int, error) {
	var s string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 0, fmt.Errorf("priority is required: an integer from %d to %d or one of high, normal, low", pronto.PriorityMin, pronto.PriorityMax)
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("priority: %v", err)
		}
	default:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, fmt.Errorf("priority %s: must be an integer from %d to %d or one of high, normal, low", raw, pronto.PriorityMin, pronto.PriorityMax)
		}
		s = n.String()
	}
	return pronto.ParsePriority(s)
}

// maxBulk bounds one bulk action, whether by ids or by filter.
const maxBulk = 10000

// maxMatchScan bounds the jobs one count or bulk action by filter reads, as the OJS admin API bounds
// its filtered reads (adminScanLimit). The dead-letter filter (deadletter=1) keeps only some of the
// discarded jobs it reads, so without the bound a store full of other discarded jobs was read whole.
// It leaves a page of room past maxBulk (what a filter every job matches read before), so a few jobs
// outside the dead letter queue do not turn "more than maxBulk" into "at least maxBulk".
const maxMatchScan = maxBulk + 1000

// matched is what a filter matched: at most maxBulk ids; capped when a job past them matched too;
// partial when the read stopped with more to read, at maxMatchScan jobs or to answer before the
// request's deadline, so more may match ("at least" len(ids)); read is how many jobs were read.
// next is where a further read goes on (the filter's cursor parameter), so that a filter matching
// any number of jobs is acted on in parts: no job past it is in ids; "" when no job past ids
// matches. pages are the ends of the pages read, in ids and as cursors: a bulk action acts page by
// page, so that it can stop between two and say where to go on.
type matched struct {
	ids     []string
	capped  bool
	partial bool
	read    int
	next    string
	pages   []pageEnd
}

// pageEnd is where one page of a filtered read ended: after ids[:n], at cursor next.
type pageEnd struct {
	n    int
	next string
}

// matching collects the ids of the jobs the filter matches (a jobs-list query string, read from
// its cursor parameter on when it has one), reading at most maxMatchScan jobs, in pages of at most
// batch, and no page more once b says the request's time is nearly out (see matched).
func (h *Handler) matching(ctx context.Context, filter string, b *stepBudget) (matched, error) {
	var m matched
	q, err := parseQuery(filter)
	if err != nil {
		return m, fmt.Errorf("%w: %v", pronto.ErrInvalidArgs, err)
	}
	p, err := jobParams(q)
	if err != nil {
		return m, fmt.Errorf("%w: %v", pronto.ErrInvalidArgs, err)
	}
	// deadletter=1: of the discarded jobs, those in the dead letter queue (internal/deadletter), as
	// the dead-letter view lists them.
	onlyDead := q.Get("deadletter") == "1"
	if onlyDead {
		p.States = []pronto.State{pronto.StateDiscarded}
	}
	// full: ids holds maxBulk, and the read goes on only to tell whether more match (capped).
	full := false
	for {
		p.Limit = min(h.batch, h.maxScan-m.read)
		if !full {
			// No page holds more jobs than ids has room for, so next can be where a page ends.
			p.Limit = min(p.Limit, h.maxBulk-len(m.ids))
		}
		end := b.begin()
		res, err := h.cfg.Client.JobList(ctx, p)
		if err != nil {
			return matched{}, err
		}
		end()
		m.read += len(res.Jobs)
		for _, j := range res.Jobs {
			if onlyDead && !deadletter.Is(j) {
				continue
			}
			if full {
				m.capped = true
				return m, nil
			}
			m.ids = append(m.ids, j.ID)
		}
		if res.Next == "" {
			m.next = ""
			m.pages = append(m.pages, pageEnd{len(m.ids), ""})
			return m, nil
		}
		if !full {
			m.next = res.Next
			m.pages = append(m.pages, pageEnd{len(m.ids), res.Next})
			full = len(m.ids) == h.maxBulk
		}
		if m.read >= h.maxScan || !b.more() {
			m.partial = true
			return m, nil
		}
		p.Cursor = res.Next
	}
}

// GET /api/count?<jobs filter>[&deadletter=1][&cursor=]: how many jobs a bulk action on the filter
// would act on (at most maxBulk; capped says there are more), for the confirmation; partial says
// the count stopped after reading scan_max jobs, or to answer before the request's deadline, so it
// is "at least" count. next, when not empty, is the cursor to count (and act) on from: "replay
// every dead-letter job" goes on with it until it is empty, so no bound limits what it reaches.
func (h *Handler) countJobs(w http.ResponseWriter, r *http.Request) {
	m, err := h.matching(r.Context(), r.URL.RawQuery, budget(r.Context()))
	if err != nil {
		h.clientError(w, err)
		return
	}
	// The ids too: a bulk action on "everything the filter matches" acts on exactly the jobs the
	// operator confirmed, not on what the filter matches by the time the action arrives.
	ids := m.ids
	if ids == nil {
		ids = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "capped": m.capped, "partial": m.partial,
		"read": m.read, "scan_max": h.maxScan, "max": h.maxBulk, "ids": ids, "next": m.next})
}

// POST /api/bulk {"action": "retry"|"cancel"|"delete", "ids": [...]} or {"action":..., "filter": "state=..&queue=.."}:
// at most maxBulk jobs. A longer list is refused whole rather than cut, so the answer always covers
// every job asked for; a filter matching more acts on the first maxBulk and says "capped", and one
// whose read stopped at maxMatchScan jobs acts on those it found and says "partial"; either gives
// "next", the cursor to send the filter with again to act on the jobs after them.
//
// The action runs in batches (a filter's: a page read, then its jobs acted on) and starts no batch
// that would not end well before the request's deadline (see stepBudget): it then answers what it
// did with "partial" and "not_attempted", the jobs left for a further request. By ids they are the
// last not_attempted of the ids sent, in order; by filter, "next" is where the filter goes on, past
// every job acted on and before every job not attempted, so that going on acts on no job twice.
//
// It stops at the first job the store cannot serve (see runBulk for a lock or statement timeout):
// 503 if nothing was done, else "stopped" and "not_attempted" beside what was.
func (h *Handler) bulk(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Action string   `json:"action"`
		IDs    []string `json:"ids"`
		Filter *string  `json:"filter"`
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	c := h.cfg.Client
	var op func(context.Context, []string) ([]pronto.BulkResult, error)
	switch req.Action {
	case "retry":
		op = c.JobRetryMany
	case "cancel":
		op = c.JobCancelMany
	case "delete":
		op = c.JobDeleteMany
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown bulk action %q: use retry, cancel or delete", req.Action))
		return
	}
	if req.Filter != nil && len(req.IDs) > 0 {
		// A request stopped short of its deadline could not say where such a mix goes on.
		writeError(w, http.StatusBadRequest, "send ids or a filter, not both")
		return
	}
	b := budget(r.Context())
	ids, capped, partial, next := req.IDs, false, false, ""
	var pages []pageEnd
	if req.Filter != nil {
		// The jobs the filter matches, read first so the action does not chase its own changes.
		m, err := h.matching(r.Context(), *req.Filter, b)
		if err != nil {
			h.clientError(w, err)
			return
		}
		ids, capped, partial, next, pages = m.ids, m.capped, m.partial, m.next, m.pages
	}
	if len(ids) == 0 {
		if next != "" {
			// Nothing among the jobs read, more to read: not an error, the caller goes on from next.
			writeJSON(w, http.StatusOK, map[string]any{"done": 0, "failed": []map[string]string{}, "capped": capped, "partial": partial, "next": next})
			return
		}
		writeError(w, http.StatusBadRequest, "no jobs selected")
		return
	}
	if len(ids) > h.maxBulk {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%d jobs selected: a bulk action takes at most %d; act on them in parts", len(ids), h.maxBulk))
		return
	}
	if pages == nil {
		for n := h.batch; ; n += h.batch {
			pages = append(pages, pageEnd{n: min(n, len(ids))})
			if n >= len(ids) {
				break
			}
		}
	}
	res, short, stopped := h.runBulk(r.Context(), op, ids, pages, b)
	ok, failed := 0, []map[string]string{}
	for _, br := range res {
		if br.Err != nil {
			failed = append(failed, map[string]string{"id": br.ID, "error": h.bulkError(br.Err)})
		} else {
			ok++
		}
	}
	if stopped != nil && ok == 0 {
		// Nothing changed: the same answer as a single job's action would get.
		h.clientError(w, stopped)
		return
	}
	h.hub.poke()
	resp := map[string]any{"done": ok, "failed": failed, "capped": capped, "partial": partial, "next": next}
	switch {
	case stopped != nil:
		// Part done: say so, and how many were not attempted, rather than fail the whole request.
		h.log.Warn("dashboard: bulk action stopped midway", "action", req.Action, "err", stopped)
		resp["stopped"], resp["not_attempted"] = h.bulkError(stopped), len(ids)-len(res)
	case short != nil:
		resp["partial"], resp["not_attempted"] = true, len(ids)-len(res)
		if req.Filter != nil {
			resp["next"] = short.next
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// runBulk applies op to ids page by page: pages are the ends of the parts of ids, each at most
// pronto.MaxBulkIDs long, that a bulk action either does whole or leaves for a later request.
// It starts no page after the first once b says the request's time is nearly out: short is then
// the end of the last page done. A client bulk call stops at the first job the store cannot serve
// (or when the request ends) instead of trying each of thousands against a dead store, and so does
// runBulk: stopped is why, nil if every id was tried; res holds the outcome of every id tried
// before it. A job that met a lock or statement timeout is that job's failure, not the store's
// (another session holds its row, as a worker or an operator does), so the others are tried on,
// unless maxBusyInARow jobs in a row meet one: then the lock is likely the table's (a
// migration's), which every job would wait out, and runBulk stops.
func (h *Handler) runBulk(ctx context.Context, op func(context.Context, []string) ([]pronto.BulkResult, error), ids []string, pages []pageEnd, b *stepBudget) (res []pronto.BulkResult, short *pageEnd, stopped error) {
	busy := 0
	for i, page := range pages {
		if len(res) == page.n {
			continue // a page of the filter's read that matched nothing
		}
		if len(res) > 0 && !b.more() {
			return res, &pages[i-1], nil
		}
		end := b.begin()
		for len(res) < page.n {
			chunk := ids[len(res):page.n]
			part, err := op(ctx, chunk)
			res = append(res, part...)
			// The client's bulk call gives a job that met a timeout up in its result and goes on
			// (and stops at its own third in a row), so the run is counted over the results too.
			for _, r := range part {
				if r.Err != nil && store.ConditionOf(h.cfg.Client.Store(), r.Err).PerRequest() {
					busy++
				} else {
					busy = 0
				}
			}
			if err == nil {
				continue
			}
			if len(part) < len(chunk) && ctx.Err() == nil && store.ConditionOf(h.cfg.Client.Store(), err).PerRequest() {
				if busy++; busy < maxBusyInARow {
					res = append(res, pronto.BulkResult{ID: chunk[len(part)], Err: err})
					continue
				}
			}
			return res, nil, err
		}
		end()
	}
	return res, nil, nil
}

// maxBusyInARow is how many jobs in a row may meet a lock or statement timeout before a bulk
// action stops.
const maxBusyInARow = 3

// bulkError is a job's or a bulk action's error as the page shows it: a store that cannot be
// reached by its kind, as clientError answers, since the driver's text names hosts and databases.
func (h *Handler) bulkError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) && h.cfg.RequestTimeout > 0 {
		return h.timeoutText()
	}
	if st := h.cfg.Client.Store(); isStoreDown(st, err) {
		return storeProblemText(st, err)
	}
	return err.Error()
}

// POST /api/queues/{name}/{pause|resume}
func (h *Handler) queueAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var err error
	switch a := r.PathValue("action"); a {
	case "pause":
		err = h.cfg.Client.QueuePause(r.Context(), name)
	case "resume":
		err = h.cfg.Client.QueueResume(r.Context(), name)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown queue action %q: use pause or resume", a))
		return
	}
	if err != nil {
		h.clientError(w, err)
		return
	}
	h.hub.poke()
	writeJSON(w, http.StatusOK, map[string]string{"queue": name})
}

// workflowView is a workflow as the pages show it. Total and Counts are its steps; Callbacks are
// its callbacks, which count in State too: it runs until they end and fails when one is discarded.
type workflowView struct {
	ID          string               `json:"id"`
	Name        string               `json:"name"`
	Type        string               `json:"type"`
	State       pronto.WorkflowState `json:"state"`
	Total       int                  `json:"total"`
	Counts      map[pronto.State]int `json:"counts"`
	Callbacks   callbacksView        `json:"callbacks"`
	CreatedAt   *time.Time           `json:"created_at,omitempty"`
	FinishedAt  *time.Time           `json:"finished_at,omitempty"`
	CancelledAt *time.Time           `json:"cancelled_at,omitempty"`
}

// callbacksView counts a workflow's callbacks: all, those ended each way, and those still open
// (waiting on their parents, or released and not finished).
type callbacksView struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Cancelled int `json:"cancelled"`
	Discarded int `json:"discarded"`
	Open      int `json:"open"`
}

func viewWorkflow(w *pronto.WorkflowInfo) *workflowView {
	cb := w.Callbacks
	return &workflowView{ID: w.ID, Name: w.Name, Type: w.Type, State: w.State, Total: w.Total, Counts: w.Counts,
		Callbacks: callbacksView{Total: cb.Total, Completed: cb.Completed, Cancelled: cb.Cancelled, Discarded: cb.Discarded, Open: cb.Open()},
		CreatedAt: tp(w.CreatedAt), FinishedAt: tp(w.FinishedAt), CancelledAt: tp(w.CancelledAt)}
}

// GET /api/workflows?cursor=&order=: one page of workflows, newest first unless order=asc.
func (h *Handler) listWorkflows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res, err := h.cfg.Client.WorkflowList(r.Context(), &pronto.WorkflowListParams{
		Cursor: q.Get("cursor"), Ascending: q.Get("order") == "asc", Limit: 50,
	})
	if err != nil {
		h.clientError(w, err)
		return
	}
	out := make([]*workflowView, len(res.Workflows))
	for i, wf := range res.Workflows {
		out[i] = viewWorkflow(wf)
	}
	writeJSON(w, http.StatusOK, map[string]any{"workflows": out, "next": res.Next})
}

// GET /api/workflows/{id}: the workflow and its jobs (the graph's nodes; parent_ids are its edges).
func (h *Handler) getWorkflow(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	wf, err := h.cfg.Client.WorkflowGet(r.Context(), id)
	if err != nil {
		h.clientError(w, err)
		return
	}
	jobs, err := h.cfg.Client.WorkflowJobs(r.Context(), id)
	if err != nil {
		h.clientError(w, err)
		return
	}
	views := make([]*jobView, len(jobs))
	for i, j := range jobs {
		views[i] = viewJob(j, false)
		views[i].Meta = j.Meta // carries the step name
	}
	writeJSON(w, http.StatusOK, map[string]any{"workflow": viewWorkflow(wf), "jobs": views})
}

// POST /api/workflows/{id}/cancel
func (h *Handler) cancelWorkflow(w http.ResponseWriter, r *http.Request) {
	wf, err := h.cfg.Client.WorkflowCancel(r.Context(), r.PathValue("id"))
	if err != nil {
		h.clientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, viewWorkflow(wf))
}

// GET /api/cron
func (h *Handler) listCron(w http.ResponseWriter, r *http.Request) {
	list, err := h.cfg.Client.CronList(r.Context())
	if err != nil {
		h.clientError(w, err)
		return
	}
	type cronView struct {
		Name        string     `json:"name"`
		Expression  string     `json:"expression"`
		Timezone    string     `json:"timezone,omitempty"`
		Kind        string     `json:"kind"`
		Queue       string     `json:"queue,omitempty"`
		Description string     `json:"description,omitempty"`
		Paused      bool       `json:"paused"`
		NextRunAt   *time.Time `json:"next_run_at,omitempty"`
		LastRunAt   *time.Time `json:"last_run_at,omitempty"`
		RunCount    int64      `json:"run_count"`
		LastJobID   string     `json:"last_job_id,omitempty"`
	}
	out := make([]cronView, 0, len(list))
	for _, c := range list {
		out = append(out, cronView{Name: c.Name, Expression: c.Expression, Timezone: c.Timezone, Kind: c.Kind,
			Queue: c.Opts.Queue, Description: c.Description, Paused: c.Paused, NextRunAt: tp(c.NextRunAt),
			LastRunAt: tp(c.LastRunAt), RunCount: c.RunCount, LastJobID: c.LastJobID})
	}
	writeJSON(w, http.StatusOK, map[string]any{"cron": out})
}

// POST /api/cron/{name}/{pause|resume}
func (h *Handler) cronAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var err error
	switch a := r.PathValue("action"); a {
	case "pause":
		_, err = h.cfg.Client.CronPause(r.Context(), name)
	case "resume":
		_, err = h.cfg.Client.CronResume(r.Context(), name)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown cron action %q: use pause or resume", a))
		return
	}
	if err != nil {
		h.clientError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": name})
}

// GET /api/ratelimits
func (h *Handler) listRateLimits(w http.ResponseWriter, r *http.Request) {
	list, err := h.cfg.Client.RateLimitList(r.Context())
	if err != nil {
		h.clientError(w, err)
		return
	}
	type rlView struct {
		Key         string     `json:"key"`
		MaxActive   int64      `json:"max_active"`
		Rate        int64      `json:"rate"`
		PeriodMS    int64      `json:"period_ms"`
		Active      int64      `json:"active"`
		WindowCount int64      `json:"window_count"`
		WindowStart *time.Time `json:"window_start,omitempty"`
		Waiting     int64      `json:"waiting"`
	}
	out := make([]rlView, 0, len(list))
	for _, l := range list {
		out = append(out, rlView{Key: l.Key, MaxActive: int64(l.Limit.MaxActive), Rate: int64(l.Limit.Rate),
			PeriodMS: l.Limit.Period.Milliseconds(), Active: l.Active, WindowCount: l.WindowCount,
			WindowStart: tp(l.WindowStart), Waiting: l.Waiting})
	}
	writeJSON(w, http.StatusOK, map[string]any{"rate_limits": out})
}

// deadLetterPage is how many jobs a dead-letter page shows, and deadLetterScan how many discarded
// jobs one request reads at most to fill it.
const (
	deadLetterPage = 100
	deadLetterScan = 1000
)

// GET /api/deadletter?cursor=: the dead letter queue, newest first; replay is a retry (POST
// /api/jobs/{id}/retry). Its jobs are the discarded ones the OJS API's dead-letter list shows
// (internal/deadletter): not those discarded by a DISCARD or FAIL handler code, nor, without a
// DEAD_LETTER code, those whose retry policy said on_exhaustion "discard". A page reads discarded
// jobs until it holds deadLetterPage of them or has read deadLetterScan; "next" continues after the
// last job read, so a page can be short (even empty) while more follow.
func (h *Handler) listDeadLetter(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	jobs := make([]*jobView, 0, deadLetterPage)
	for read := 0; ; {
		res, err := h.cfg.Client.JobList(r.Context(), &pronto.JobListParams{
			States: []pronto.State{pronto.StateDiscarded}, Descending: true, Limit: deadLetterPage - len(jobs), Cursor: cursor,
		})
		if err != nil {
			h.clientError(w, err)
			return
		}
		for _, j := range res.Jobs {
			if deadletter.Is(j) {
				jobs = append(jobs, viewJob(j, false))
			}
		}
		read += len(res.Jobs)
		cursor = res.Next
		if cursor == "" || len(jobs) == deadLetterPage || read >= deadLetterScan {
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs, "next": cursor})
}
