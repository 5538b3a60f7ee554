package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

// Worker pools (ojs-fair-scheduling.md §6, §10.1, FS-004) under /ojs/v1/admin/pools:
//
//	GET    /ojs/v1/admin/pools          every pool with its active_workers and active_jobs
//	GET    /ojs/v1/admin/pools/{name}   one pool
//	PUT    /ojs/v1/admin/pools/{name}   creates or replaces it: {"queues", "concurrency", "strategy"}
//	DELETE /ojs/v1/admin/pools/{name}   removes it
//
// A fetch naming a pool ({"pool": "name"}) takes jobs from the pool's queues only (all of them, in
// order, when it names no queues) and at most the pool's free capacity (concurrency minus the jobs
// active in its queues, counted per fetch). The round-robin strategy (the default) starts each fetch
// at the next of the pool's queues (pronto.PoolStrategyRoundRobin), the strict one takes them in
// order; weighted and least-loaded are refused with 422 unsupported.

// routePools dispatches a path below /ojs/v1/admin/pools (seg[1] == "pools"); false when no route
// matches.
func (s *Server) routePools(w http.ResponseWriter, r *http.Request, seg []string) bool {
	switch {
	case len(seg) == 2:
		if r.Method != http.MethodGet {
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet))
			return true
		}
		s.listPools(w, r)
		return true
	case len(seg) == 3:
		switch r.Method {
		case http.MethodGet:
			s.getPool(w, r, seg[2])
		case http.MethodPut:
			s.putPool(w, r, seg[2])
		case http.MethodDelete:
			s.deletePool(w, r, seg[2])
		default:
			s.writeError(w, r, methodNotAllowed(r, http.MethodGet, http.MethodPut, http.MethodDelete))
		}
		return true
	}
	return false
}

func checkPool(name string) *apiError {
	if !pronto.ValidPoolName(name) {
		return invalid("pool", "pool name %q: must be 1 to 128 characters of [a-z0-9._-], starting with a letter or digit", name)
	}
	return nil
}

// poolUse is what a pool's view counts: active jobs per queue and the live workers' queues.
type poolUse struct {
	active  map[string]int64
	workers []store.Worker
}

// readPoolUse counts active jobs per queue and reads the live OJS workers (none when the store keeps
// no worker records).
func (s *Server) readPoolUse(ctx context.Context) (*poolUse, error) {
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	u := &poolUse{active: make(map[string]int64, len(qs))}
	for _, q := range qs {
		u.active[q.Name] = q.Counts[pronto.StateActive]
	}
	if ws, ok := s.store.(store.WorkerStore); ok {
		all, err := ws.ListWorkers(ctx)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for _, w := range all {
			if workerState(&w, now, s.workers.stale()) == "running" {
				u.workers = append(u.workers, w)
			}
		}
	}
	return u, nil
}

// poolView is the OJS view of a pool: its config, the live workers whose latest fetch named only its
// queues, and the jobs active in its queues.
func poolView(p *pronto.WorkerPool, u *poolUse) map[string]any {
	var jobs int64
	for _, q := range p.Queues {
		jobs += u.active[q]
	}
	workers := 0
	for _, w := range u.workers {
		if len(w.Queues) > 0 && !slices.ContainsFunc(w.Queues, func(q string) bool { return !slices.Contains(p.Queues, q) }) {
			workers++
		}
	}
	return map[string]any{
		"name": p.Name, "queues": p.Queues, "concurrency": p.Concurrency, "strategy": p.Strategy,
		"active_workers": workers, "active_jobs": jobs,
	}
}

func poolError(err error, name string) *apiError {
	e := fromClientError(err, "pool", name)
	if errors.Is(err, pronto.ErrUnsupported) {
		e = errorf(http.StatusUnprocessableEntity, CodeUnsupported, "%v", err)
	}
	return e
}

// GET /ojs/v1/admin/pools
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	pools, err := s.client.PoolList(ctx)
	if err != nil {
		s.writeError(w, r, poolError(err, ""))
		return
	}
	u, err := s.readPoolUse(ctx)
	if err != nil {
		s.writeError(w, r, poolError(err, ""))
		return
	}
	items := make([]map[string]any, len(pools))
	for i, p := range pools {
		items[i] = poolView(p, u)
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"items": items})
}

// GET /ojs/v1/admin/pools/{name}
func (s *Server) getPool(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkPool(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	ctx := r.Context()
	p, err := s.client.PoolGet(ctx, name)
	if err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	u, err := s.readPoolUse(ctx)
	if err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	writeJSONValue(w, http.StatusOK, poolView(p, u))
}

// decodePool reads {"name", "queues", "concurrency", "strategy"} for pool name.
func decodePool(body []byte, name string) (*pronto.WorkerPool, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, invalid("", "the body must be a JSON object")
	}
	p := &pronto.WorkerPool{Name: name}
	for k, v := range m {
		switch k {
		case "name":
			got, e := wantString(v, k)
			if e != nil {
				return nil, e
			}
			if got != name {
				return nil, invalid(k, "the body's name %q is not the path's %q", got, name)
			}
		case "queues":
			qs, e := wantStrings(v, k)
			if e != nil {
				return nil, e
			}
			p.Queues = qs
		case "concurrency":
			if isNull(v) {
				continue
			}
			n, e := wantInt(v, k, 0, math.MaxInt32)
			if e != nil {
				return nil, e
			}
			p.Concurrency = int(n)
		case "strategy":
			if isNull(v) {
				continue
			}
			st, e := wantString(v, k)
			if e != nil {
				return nil, e
			}
			p.Strategy = st
		case "weights":
			return nil, errorf(http.StatusUnprocessableEntity, CodeUnsupported, "weights are for the weighted strategy, which is not implemented (round-robin and strict are)")
		default:
			return nil, invalid(k, "unknown field %s (a pool takes name, queues, concurrency and strategy)", k)
		}
	}
	if p.Queues == nil {
		return nil, invalid("queues", "queues is required: the queues the pool's workers fetch from, in order")
	}
	return p, nil
}

// PUT /ojs/v1/admin/pools/{name}
func (s *Server) putPool(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkPool(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	p, ok := readRequest(s, w, r, "pool", func(body []byte) (*pronto.WorkerPool, *apiError) { return decodePool(body, name) })
	if !ok {
		return
	}
	ctx := r.Context()
	if err := s.client.PoolSet(ctx, *p); err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	s.getPool(w, r, name)
}

// DELETE /ojs/v1/admin/pools/{name}
func (s *Server) deletePool(w http.ResponseWriter, r *http.Request, name string) {
	if e := checkPool(name); e != nil {
		s.writeError(w, r, e)
		return
	}
	if err := s.client.PoolDelete(r.Context(), name); err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	writeJSONValue(w, http.StatusOK, map[string]any{"deleted": true, "name": name})
}

// applyPool fits a fetch naming a pool to it: its queues default to the pool's and must be among
// them, and its count is cut to the pool's free capacity. ok false: the pool is full (fetch nothing).
func (s *Server) applyPool(ctx context.Context, req *fetchRequest) (ok bool, _ *apiError) {
	if req.pool == "" {
		return true, nil
	}
	p, err := s.client.PoolGet(ctx, req.pool)
	if errors.Is(err, pronto.ErrNotFound) {
		return false, invalid("pool", "unknown pool %q: create it with PUT /ojs/v1/admin/pools/%s", req.pool, req.pool)
	}
	if err != nil {
		return false, poolError(err, req.pool)
	}
	if len(req.queues) == 0 {
		req.queues = slices.Clone(p.Queues)
	}
	for _, q := range req.queues {
		if !slices.Contains(p.Queues, q) {
			return false, invalid("queues", "queue %q is not one of pool %q's queues %v", q, p.Name, p.Queues)
		}
	}
	if p.Strategy == pronto.PoolStrategyRoundRobin {
		// Order the fetch's queues from the pool's next turn on, wrapping around.
		start := s.poolTurns.start(p.Name, len(p.Queues))
		pos := func(q string) int { return (slices.Index(p.Queues, q) - start + len(p.Queues)) % len(p.Queues) }
		slices.SortFunc(req.queues, func(a, b string) int { return pos(a) - pos(b) })
		req.poolQueues = p.Queues
	}
	if p.Concurrency > 0 {
		u, err := s.readPoolUse(ctx)
		if err != nil {
			return false, poolError(err, req.pool)
		}
		var active int64
		for _, q := range p.Queues {
			active += u.active[q]
		}
		free := int64(p.Concurrency) - active
		if free <= 0 {
			return false, nil
		}
		req.count = int(min(int64(req.count), free))
	}
	return true, nil
}

// poolTurns keeps, per round-robin pool, the index of the queue whose turn is next on this server.
// The zero value is ready.
type poolTurns struct {
	mu   sync.Mutex
	next map[string]int
}

// start returns the index of the queue whose turn is next in pool (of n queues).
func (t *poolTurns) start(pool string, n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next[pool] % n
}

// poolServed moves a round-robin pool's turn past the queue of the last job a fetch took: the next
// fetch starts at the queue after it (an empty queue in between was skipped).
func (s *Server) poolServed(req *fetchRequest, jobs []*pronto.JobRow) {
	if req.poolQueues == nil || len(jobs) == 0 {
		return
	}
	i := slices.Index(req.poolQueues, jobs[len(jobs)-1].Queue)
	if i < 0 {
		return
	}
	t := &s.poolTurns
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next == nil {
		t.next = map[string]int{}
	}
	t.next[req.pool] = i + 1
}
