package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/store"
)

// Worker pools (ojs-fair-scheduling.md §6, §10.1, FS-004) under /ojs/v1/admin/pools:
//
//	GET    /ojs/v1/admin/pools          every pool with its active_workers and active_jobs
//	GET    /ojs/v1/admin/pools/{name}   one pool
//	PUT    /ojs/v1/admin/pools/{name}   creates or replaces it: {"queues", "concurrency", "strategy",
//	                                    "weights", "starvation_prevention", "isolated"}
//	DELETE /ojs/v1/admin/pools/{name}   removes it
//
// A fetch naming a pool ({"pool": "name"}) takes jobs from the pool's queues only (all of them, in
// order, when it names no queues) and at most the pool's free capacity (concurrency minus the jobs
// active in its queues, counted per fetch). The pool's strategy orders the fetch's queues
// (poolsched.go): round-robin (the default) starts at the next of the pool's queues, strict takes
// them in order, weighted by a smooth weighted round-robin, least-loaded the deepest backlog first;
// starvation prevention puts a queue short of its share first. An isolated pool's queues are served
// only to fetches through it (§6.3): a fetch naming no pool or another pool gets nothing from them
// (poolwatch.go).

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
	active    map[string]int64
	available map[string]int64
	workers   []store.Worker
}

// readPoolUse counts active and available jobs per queue and, with workers, reads the live OJS
// workers (none when the store keeps no worker records).
func (s *Server) readPoolUse(ctx context.Context, workers bool) (*poolUse, error) {
	qs, err := s.client.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	u := &poolUse{active: make(map[string]int64, len(qs)), available: make(map[string]int64, len(qs))}
	for _, q := range qs {
		u.active[q.Name] = q.Counts[pronto.StateActive]
		u.available[q.Name] = q.Counts[pronto.StateAvailable]
	}
	if ws, ok := s.store.(store.WorkerStore); ok && workers {
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
	v := map[string]any{
		"name": p.Name, "queues": p.Queues, "concurrency": p.Concurrency, "strategy": p.Strategy,
		"isolated": p.Isolated, "active_workers": workers, "active_jobs": jobs,
	}
	if p.Strategy == pronto.PoolStrategyWeighted {
		// Every queue's weight, those left at 1 included.
		weights := make(map[string]int, len(p.Queues))
		for _, q := range p.Queues {
			weights[q] = p.Weight(q)
		}
		v["weights"] = weights
	}
	if sp := p.StarvationPrevention; sp != nil {
		v["starvation_prevention"] = map[string]any{
			"enabled": sp.Enabled, "rotation_interval": isodur.Format(sp.RotationInterval), "min_dispatch_ratio": sp.MinDispatchRatio,
		}
	}
	return v
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
	u, err := s.readPoolUse(ctx, true)
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
	u, err := s.readPoolUse(ctx, true)
	if err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	writeJSONValue(w, http.StatusOK, poolView(p, u))
}

// decodePool reads {"name", "queues", "concurrency", "strategy", "weights", "starvation_prevention",
// "isolated"} for pool name.
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
			if isNull(v) {
				continue
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(v, &raw); err != nil || raw == nil {
				return nil, invalid(k, "weights must be an object of queue names to positive integers")
			}
			p.Weights = make(map[string]int, len(raw))
			for q, wv := range raw {
				n, e := wantInt(wv, "weights."+q, 1, pronto.MaxPoolWeight)
				if e != nil {
					return nil, e
				}
				p.Weights[q] = int(n)
			}
		case "starvation_prevention":
			if isNull(v) {
				continue
			}
			sp, e := decodeStarvation(v)
			if e != nil {
				return nil, e
			}
			p.StarvationPrevention = sp
		case "isolated":
			if isNull(v) {
				continue
			}
			if err := json.Unmarshal(v, &p.Isolated); err != nil {
				return nil, invalid(k, "isolated must be a boolean")
			}
		default:
			return nil, invalid(k, "unknown field %s (a pool takes name, queues, concurrency, strategy, weights, starvation_prevention and isolated)", k)
		}
	}
	if p.Queues == nil {
		return nil, invalid("queues", "queues is required: the queues the pool's workers fetch from, in order")
	}
	return p, nil
}

// decodeStarvation reads {"enabled", "rotation_interval", "min_dispatch_ratio"} (§8.1).
func decodeStarvation(body []byte) (*pronto.StarvationPrevention, *apiError) {
	const f = "starvation_prevention"
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, invalid(f, "starvation_prevention must be an object: {\"enabled\", \"rotation_interval\", \"min_dispatch_ratio\"}")
	}
	sp := &pronto.StarvationPrevention{}
	for k, v := range m {
		if isNull(v) {
			continue
		}
		switch k {
		case "enabled":
			if err := json.Unmarshal(v, &sp.Enabled); err != nil {
				return nil, invalid(f+"."+k, "%s.%s must be a boolean", f, k)
			}
		case "rotation_interval":
			str, e := wantString(v, f+"."+k)
			if e != nil {
				return nil, e
			}
			d, err := isodur.Parse(str)
			if err != nil {
				return nil, invalid(f+"."+k, "%s.%s: %v", f, k, err)
			}
			if d <= 0 {
				return nil, invalid(f+"."+k, "%s.%s %q: must be positive", f, k, str)
			}
			sp.RotationInterval = d
		case "min_dispatch_ratio":
			var r float64
			if err := json.Unmarshal(v, &r); err != nil || !(r > 0 && r <= 1) {
				return nil, invalid(f+"."+k, "%s.%s must be a number above 0 and at most 1", f, k)
			}
			sp.MinDispatchRatio = r
		default:
			return nil, invalid(f+"."+k, "unknown field %s.%s (it takes enabled, rotation_interval and min_dispatch_ratio)", f, k)
		}
	}
	return sp, nil
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
	prev, err := s.client.PoolGet(ctx, name)
	if err != nil && !errors.Is(err, pronto.ErrNotFound) {
		s.writeError(w, r, poolError(err, name))
		return
	}
	if err := s.client.PoolSet(ctx, *p); err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	s.sched.cache.invalidate()
	cur, err := s.client.PoolGet(ctx, name)
	if err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	s.rebalancedEvent(prev, cur)
	u, err := s.readPoolUse(ctx, true)
	if err != nil {
		s.writeError(w, r, poolError(err, name))
		return
	}
	writeJSONValue(w, http.StatusOK, poolView(cur, u))
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
	s.sched.cache.invalidate()
	s.sched.forget(name)
	writeJSONValue(w, http.StatusOK, map[string]any{"deleted": true, "name": name})
}

// applyPool fits a fetch to the pools. Naming none, it loses the queues isolated pools reserve (from
// the cached pools). Naming one, its queues default to the pool's and must be among them, it loses
// those isolated to other pools, and its count is cut to the pool's free capacity. ok false: nothing
// to fetch (the pool is full, or every queue asked for is isolated elsewhere).
func (s *Server) applyPool(ctx context.Context, req *fetchRequest) (ok bool, _ *apiError) {
	if req.pool == "" {
		req.queues, ok = isolate(s.isolation(ctx), "", req.queues)
		return ok, nil
	}
	// One read of the pools (the setting holds them all) serves the pool and the isolation.
	pools, err := s.client.PoolList(ctx)
	if err != nil {
		return false, poolError(err, req.pool)
	}
	s.sched.cache.set(pools)
	i := slices.IndexFunc(pools, func(p *pronto.WorkerPool) bool { return p.Name == req.pool })
	if i < 0 {
		return false, invalid("pool", "unknown pool %q: create it with PUT /ojs/v1/admin/pools/%s", req.pool, req.pool)
	}
	p := pools[i]
	if len(req.queues) == 0 {
		req.queues = slices.Clone(p.Queues)
	}
	for _, q := range req.queues {
		if !slices.Contains(p.Queues, q) {
			return false, invalid("queues", "queue %q is not one of pool %q's queues %v", q, p.Name, p.Queues)
		}
	}
	if req.queues, ok = isolate(pronto.IsolatedQueues(pools), p.Name, req.queues); !ok {
		return false, nil
	}
	now := time.Now()
	var u *poolUse
	var room *poolRoom
	if p.Concurrency > 0 {
		// The room is read and reserved from by one fetch of the pool at a time (poolRooms).
		room = s.poolRooms.get(p.Name)
		room.read.Lock()
		defer room.read.Unlock()
	}
	if p.Concurrency > 0 || p.Strategy == pronto.PoolStrategyLeastLoaded {
		// One read of the queues' counts serves the capacity, the backlogs and the starvation check.
		if u, err = s.readPoolUse(ctx, false); err != nil {
			return false, poolError(err, req.pool)
		}
	}
	if p.Concurrency > 0 {
		var active int64
		for _, q := range p.Queues {
			active += u.active[q]
		}
		free := int64(p.Concurrency) - active - room.taken()
		if free <= 0 {
			if s.sched.setOverloaded(p, true, now) {
				s.overloadedEvent(p, active, u)
			}
			return false, nil
		}
		req.count = int(min(int64(req.count), free))
		s.sched.room(p, free, req.count, now)
		room.reserve(int64(req.count))
		req.room, req.reserved = room, int64(req.count)
	}
	u = s.checkStarvation(ctx, p, u, now)
	var available map[string]int64
	if u != nil {
		available = u.available
	}
	s.sched.order(p, req.queues, available, now)
	req.poolCfg = p
	return true, nil
}

// GET /ojs/v1/admin/scheduling/stats (§10.2, FS-R004): every queue the store knows or this server
// dispatched from, with its dispatches through this server over the last minute (count, share of
// all, average wait from due to dispatch) and since the server started, and its active jobs (from
// the store); and every pool with its strategy and its dispatches through this server.
func (s *Server) schedulingStats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, err := s.readPoolUse(ctx, false)
	if err != nil {
		s.writeError(w, r, poolError(err, ""))
		return
	}
	pools, err := s.client.PoolList(ctx)
	if err != nil && !errors.Is(err, pronto.ErrUnsupported) { // a store without settings has no pools
		s.writeError(w, r, poolError(err, ""))
		return
	}
	stats := s.sched.queueStats(time.Now())
	names := make([]string, 0, len(u.active)+len(stats))
	for q := range u.active {
		names = append(names, q)
	}
	var recent int64
	for q, st := range stats {
		if _, ok := u.active[q]; !ok {
			names = append(names, q)
		}
		recent += st.recent
	}
	slices.Sort(names)
	queues := make([]map[string]any, len(names))
	for i, q := range names {
		st := stats[q]
		ratio, wait := 0.0, any(nil)
		if recent > 0 {
			ratio = float64(st.recent) / float64(recent)
		}
		if st.recent > 0 {
			wait = st.waitMS / st.recent
		}
		queues[i] = map[string]any{
			"name": q, "dispatch_count_1m": st.recent, "dispatch_ratio_1m": ratio, "avg_wait_ms": wait,
			"active_jobs": u.active[q], "available_jobs": u.available[q], "dispatch_count": st.total,
		}
	}
	items := make([]map[string]any, len(pools))
	for i, p := range pools {
		total, counts := s.sched.poolCounts(p)
		for _, q := range p.Queues {
			if _, ok := counts[q]; !ok {
				counts[q] = 0 // every queue of the pool, those not served yet included
			}
		}
		var active int64
		for _, q := range p.Queues {
			active += u.active[q]
		}
		items[i] = map[string]any{
			"name": p.Name, "strategy": p.Strategy, "queues": p.Queues, "concurrency": p.Concurrency,
			"active_jobs": active, "dispatch_count": total, "dispatch_counts": counts,
		}
	}
	writeJSONValue(w, http.StatusOK, map[string]any{
		"queues": queues, "pools": items, "window": "PT1M",
		"since": s.started.UTC().Format(time.RFC3339Nano),
	})
}
