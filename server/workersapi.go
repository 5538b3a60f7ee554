package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// Worker management (ojs-admin-api.md 9). OJS workers are known by their fetches and heartbeats:
// each server records the workers it hears from in the store (store.WorkerStore), so that every
// server lists the same workers and delivers the same directives.
const (
	// WorkerTouchInterval is the least time between two writes of one worker's record by one
	// server (a quarter of the stale time when that is shorter): fetches and heartbeats in between
	// are answered from what the last write returned, so a directive given through another server
	// takes effect within this interval.
	WorkerTouchInterval = 2 * time.Second
	// DefaultWorkerStaleAfter is how long a worker may go unheard before it is stale: listed as
	// "stale", and deregistrable (Config.WorkerStaleAfter changes it).
	DefaultWorkerStaleAfter = 2 * time.Minute
	// WorkerRetention is how long the record of a worker no longer heard from is kept.
	WorkerRetention = 7 * 24 * time.Hour
)

// workerTracker throttles the worker record writes of this server. The zero value is ready.
type workerTracker struct {
	staleAfter time.Duration // 0: DefaultWorkerStaleAfter

	mu        sync.Mutex
	seen      map[string]workerSeen
	lastPrune time.Time
	// given counts the directives given through this server (setDirective): a record write that began
	// before one must not put back the directive it read (see remember).
	given uint64
}

type workerSeen struct {
	at        time.Time
	queues    []string
	directive string
}

// stale returns the time after which an unheard worker is stale.
func (t *workerTracker) stale() time.Duration {
	if t.staleAfter > 0 {
		return t.staleAfter
	}
	return DefaultWorkerStaleAfter
}

// touchInterval returns the least time between two writes of one worker's record.
func (t *workerTracker) touchInterval() time.Duration {
	return min(WorkerTouchInterval, t.stale()/4)
}

// workerStore returns the server's store as a store.WorkerStore, if it is one.
func (s *Server) workerStore() (store.WorkerStore, bool) {
	ws, ok := s.store.(store.WorkerStore)
	return ws, ok
}

// touchWorker records that worker id was heard from (at most every WorkerTouchInterval per worker,
// or at once when its queues change) and returns its directive: "", "quiet" or "terminate". A store
// error is logged and answered "" (the worker goes on as before).
func (s *Server) touchWorker(ctx context.Context, id string, queues []string) string {
	ws, ok := s.workerStore()
	if !ok || id == "" {
		return ""
	}
	now := time.Now()
	t := &s.workers
	t.mu.Lock()
	if last, ok := t.seen[id]; ok && now.Sub(last.at) < t.touchInterval() && (len(queues) == 0 || slices.Equal(queues, last.queues)) {
		t.mu.Unlock()
		return last.directive
	}
	given := t.given
	t.mu.Unlock()
	d, err := ws.TouchWorker(ctx, id, queues)
	if err != nil {
		s.log.Warn("pronto serve: recording a worker failed", "worker_id", id, "err", err)
		return ""
	}
	return t.remember(id, now, queues, d, given)
}

// remember caches what the store answered for worker id, a write begun when t.given was given, and
// returns the directive to answer. A directive given through this server since that write began
// (setDirective) wins over the one it read: the write may have read the record before it was given.
func (t *workerTracker) remember(id string, at time.Time, queues []string, directive string, given uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil || len(t.seen) > 100000 {
		t.seen = map[string]workerSeen{} // forget all: each worker's next contact writes again
	}
	prev, known := t.seen[id]
	if len(queues) == 0 {
		queues = prev.queues
	}
	if known && t.given != given && prev.directive != "" {
		directive = prev.directive
	}
	t.seen[id] = workerSeen{at: at, queues: slices.Clone(queues), directive: directive}
	return directive
}

// setDirective records a directive in this server's cache, so that it answers it at once (a worker
// not in the cache gets an entry that its next contact writes through).
func (t *workerTracker) setDirective(id, directive string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.given++
	if t.seen == nil {
		t.seen = map[string]workerSeen{}
	}
	prev := t.seen[id]
	prev.directive = directive
	t.seen[id] = prev
}

// workerReported records the state an OJS worker reported in a heartbeat, "quiet" or "terminate",
// as its directive, the one an operator's quiet or terminate sets: its fetches get no new jobs from
// then on (ojs-graceful-shutdown.md 5.1) and the admin API lists it so. current is the directive on
// record; a worker never steps back from terminate (ojs-worker-protocol.md 2.3), so a reported quiet
// leaves a terminate. It returns the directive in force. A store error is logged and the directive
// is still kept in this server's cache, so that at least this server gives the worker no jobs.
func (s *Server) workerReported(ctx context.Context, id, reported, current string) string {
	if id == "" || current == reported || current == store.WorkerTerminate {
		return current
	}
	ws, ok := s.workerStore()
	if !ok {
		return current
	}
	if reported == store.WorkerQuiet {
		// current comes from this server's cache, up to WorkerTouchInterval behind a terminate given
		// through another server: the record is read again rather than overwritten with a quiet.
		if rec, err := ws.GetWorker(ctx, id); err == nil && rec.Directive != "" {
			s.workers.setDirective(id, rec.Directive)
			return rec.Directive
		}
	}
	if err := ws.SetWorkerDirective(ctx, id, reported); err != nil {
		s.log.Warn("pronto serve: recording the state a worker reported failed", "worker_id", id, "state", reported, "err", err)
	}
	s.workers.setDirective(id, reported)
	return reported
}

// workerState is what the admin API calls a worker's state. Staleness comes first: a worker told
// to terminate normally exits, and is then as stale (and deregistrable) as any unheard worker.
func workerState(w *store.Worker, now time.Time, staleAfter time.Duration) string {
	switch {
	case now.Sub(w.LastSeenAt) > staleAfter:
		return "stale"
	case w.Directive == store.WorkerTerminate:
		return "terminating"
	case w.Directive == store.WorkerQuiet:
		return "quiet"
	}
	return "running"
}

func (s *Server) workerItem(w *store.Worker, active int, now time.Time) map[string]any {
	if w.Queues == nil {
		w.Queues = []string{}
	}
	item := map[string]any{"id": w.ID, "kind": "remote", "state": workerState(w, now, s.workers.stale()), "queues": w.Queues,
		"active_jobs": active, "started_at": w.FirstSeenAt.UTC().Format(time.RFC3339Nano),
		"last_heartbeat_at": w.LastSeenAt.UTC().Format(time.RFC3339Nano), "directive": nil}
	if w.Directive != "" {
		item["directive"] = w.Directive
		item["directive_at"] = w.DirectiveAt.UTC().Format(time.RFC3339Nano)
	}
	return item
}

// GET /ojs/v1/admin/workers?page=&per_page=: a page of the workers of listWorkers, with a summary by
// state of them all.
func (s *Server) adminWorkers(w http.ResponseWriter, r *http.Request) {
	page, perPage, e := listPage(r.URL.Query())
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	items, summary, truncated, err := s.listWorkers(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "worker", ""))
		return
	}
	items, pagination := pageOf(items, page, perPage)
	writeJSONValue(w, http.StatusOK, map[string]any{"items": items, "summary": summary,
		"pagination": pagination, "truncated": truncated})
}

// listWorkers returns the workers the admin API knows, sorted by id, and their count by state
// ("total" for all): the OJS workers on record, the clients holding active jobs without a record
// (Go workers), and this server's own client. GET /admin/stats counts the same set. truncated says
// the active jobs were read only up to adminScanLimit.
func (s *Server) listWorkers(ctx context.Context) (items []map[string]any, summary map[string]int, truncated bool, err error) {
	held, truncated, err := s.workersHolding(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	now := time.Now()
	var records []store.Worker
	if ws, ok := s.workerStore(); ok {
		s.workers.mu.Lock()
		prune := now.Sub(s.workers.lastPrune) > time.Hour
		if prune {
			s.workers.lastPrune = now
		}
		s.workers.mu.Unlock()
		if prune {
			if _, err := ws.PruneWorkers(ctx, now.Add(-WorkerRetention)); err != nil {
				s.log.Warn("pronto serve: pruning worker records failed", "err", err)
			}
		}
		if records, err = ws.ListWorkers(ctx); err != nil {
			return nil, nil, false, err
		}
	}
	summary = map[string]int{"total": 0, "running": 0, "quiet": 0, "stale": 0, "terminating": 0}
	items = make([]map[string]any, 0, len(records)+len(held)+1)
	listed := map[string]bool{}
	for i := range records {
		item := s.workerItem(&records[i], held[records[i].ID], now)
		items = append(items, item)
		listed[records[i].ID] = true
		summary[item["state"].(string)]++
	}
	self := s.client.ID()
	if _, ok := held[self]; !ok {
		held[self] = 0
	}
	for id, n := range held {
		if listed[id] {
			continue
		}
		kind := "client" // a pronto client's Go workers
		if id == self {
			kind = "server"
		}
		items = append(items, map[string]any{"id": id, "kind": kind, "state": "running", "active_jobs": n})
		summary["running"]++
	}
	sort.Slice(items, func(i, j int) bool { return items[i]["id"].(string) < items[j]["id"].(string) })
	summary["total"] = len(items)
	return items, summary, truncated, nil
}

// heldJobs lists the ids of the active jobs worker id holds (at most adminScanLimit jobs read).
func (s *Server) heldJobs(ctx context.Context, id string) ([]string, bool, error) {
	var ids []string
	truncated, err := s.scan(ctx, &jobFilter{states: []pronto.State{pronto.StateActive}}, false, func(j *pronto.JobRow) bool {
		if j.WorkerID == id {
			ids = append(ids, j.ID)
		}
		return true
	})
	return ids, truncated, err
}

// loadWorker reads worker id's record, or writes the error.
func (s *Server) loadWorker(w http.ResponseWriter, r *http.Request, id string) (*store.Worker, bool) {
	e := checkPathText(id, "worker_id")
	if e == nil && len(id) > maxWorkerIDLen {
		e = invalid("worker_id", "worker_id is longer than %d bytes", maxWorkerIDLen)
	}
	if e != nil {
		s.writeError(w, r, e)
		return nil, false
	}
	ws, ok := s.workerStore()
	if !ok {
		s.writeError(w, r, errorf(http.StatusNotImplemented, CodeUnsupported, "this server's store (%s) keeps no worker records", s.backend))
		return nil, false
	}
	rec, err := ws.GetWorker(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		e := errorf(http.StatusNotFound, CodeNotFound, "no OJS worker %q on record", id)
		if id == s.client.ID() {
			e.hint = "this is the server's own client: drain it by stopping the server (SIGTERM)"
		} else {
			e.hint = "workers are recorded by their fetches and heartbeats; pronto clients' Go workers have no record"
		}
		s.writeError(w, r, e)
		return nil, false
	}
	if err != nil {
		s.writeError(w, r, fromClientError(err, "worker", id))
		return nil, false
	}
	return rec, true
}

// GET /ojs/v1/admin/workers/{id}: one worker's record with the ids of the jobs it holds.
func (s *Server) adminGetWorker(w http.ResponseWriter, r *http.Request, id string) {
	rec, ok := s.loadWorker(w, r, id)
	if !ok {
		return
	}
	jobs, truncated, err := s.heldJobs(r.Context(), id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "worker", id))
		return
	}
	item := s.workerItem(rec, len(jobs), time.Now())
	item["active_job_ids"] = append([]string{}, jobs...)
	item["truncated"] = truncated
	writeJSONValue(w, http.StatusOK, item)
}

// POST /ojs/v1/admin/workers/{id}/quiet and /terminate: the worker's next heartbeat answers the
// directive (and its fetches get no jobs); ojs-admin-api.md 9.3.
func (s *Server) adminWorkerDirective(w http.ResponseWriter, r *http.Request, id, directive string) {
	if _, ok := s.loadWorker(w, r, id); !ok {
		return
	}
	ws, _ := s.workerStore()
	if err := ws.SetWorkerDirective(r.Context(), id, directive); err != nil {
		s.writeError(w, r, fromClientError(err, "worker", id))
		return
	}
	s.workers.setDirective(id, directive)
	rec, ok := s.loadWorker(w, r, id)
	if !ok {
		return
	}
	writeJSONValue(w, http.StatusOK, s.workerItem(rec, 0, time.Now()))
}

// DELETE /ojs/v1/admin/workers/{id}: deregisters a stale worker (unheard for WorkerStaleAfter; 409
// otherwise): the jobs it still holds fail their attempt (error type "worker_deregistered") and are
// retried by their policy at once instead of waiting for their leases to lapse; then the record
// goes (ojs-admin-api.md 9.4).
func (s *Server) adminDeregisterWorker(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	rec, ok := s.loadWorker(w, r, id)
	if !ok {
		return
	}
	if since := time.Since(rec.LastSeenAt); since <= s.workers.stale() {
		e := conflict("worker %q was heard from %s ago: only a worker unheard for %s can be deregistered",
			id, since.Round(time.Millisecond), s.workers.stale())
		e.hint = "quiet it first (POST /ojs/v1/admin/workers/{id}/quiet) and let it finish"
		s.writeError(w, r, e)
		return
	}
	jobs, truncated, err := s.heldJobs(ctx, id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "worker", id))
		return
	}
	rescheduled, failed := 0, []map[string]any{}
	for _, jid := range jobs {
		_, err := s.client.RemoteNack(ctx, pronto.RemoteNackParams{ID: jid, WorkerID: id, Error: pronto.AttemptError{
			Type: "worker_deregistered", Message: "the worker holding the job was deregistered by an operator"}})
		if err != nil {
			failed = append(failed, map[string]any{"job_id": jid, "error": err.Error()})
			continue
		}
		rescheduled++
	}
	ws, _ := s.workerStore()
	if _, err := ws.DeleteWorker(ctx, id); err != nil {
		s.writeError(w, r, fromClientError(err, "worker", id))
		return
	}
	s.workers.mu.Lock()
	delete(s.workers.seen, id)
	s.workers.mu.Unlock()
	writeJSONValue(w, http.StatusOK, map[string]any{"id": id, "deregistered": true,
		"jobs_rescheduled": rescheduled, "errors": failed, "truncated": truncated})
}

// GET /ojs/v1/admin/system/config: this server's configuration, non-sensitive values only
// (ojs-admin-api.md 12.2): whether an API key is required, never the key.
func (s *Server) adminSystemConfig(w http.ResponseWriter, r *http.Request) {
	st := s.client.Stats()
	queues := make(map[string]any, len(st.Queues))
	for name, q := range st.Queues {
		queues[name] = map[string]any{"max_workers": q.Running + q.Free}
	}
	writeJSONValue(w, http.StatusOK, map[string]any{
		"version":                  Version,
		"backend":                  s.backend,
		"client_id":                s.client.ID(),
		"api_key_required":         len(s.apiKey) > 0,
		"test_mode":                s.testMode,
		"draining":                 s.draining.Load(),
		"extensions":               s.extensionNames(),
		"queues":                   queues,
		"max_body_bytes":           s.maxBody,
		"max_batch":                s.maxBatch,
		"progress_interval_ms":     pronto.ProgressInterval.Milliseconds(),
		"max_progress_streams":     MaxProgressStreams,
		"worker_stale_after_ms":    s.workers.stale().Milliseconds(),
		"worker_touch_interval_ms": s.workers.touchInterval().Milliseconds(),
		"stats_retention":          map[string]any{"minute_ms": StatsMinuteRetention.Milliseconds(), "hour_ms": StatsHourRetention.Milliseconds()},
	})
}
