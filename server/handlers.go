package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/store"
)

// Job and worker endpoints.

// checkJobID validates a job id taken from a path or body, and writes it in lowercase in place:
// ids are accepted with uppercase hex digits and kept, and answered, in lowercase (ojs-json-format.md
// 6.2). The error shows the id as it was sent.
func checkJobID(id *string, field string) *apiError {
	l, ok := normID(*id)
	if !ok {
		return invalid(field, "%s %q: must be a UUIDv7 in 8-4-4-4-12 form", field, *id)
	}
	*id = l
	return nil
}

// normID returns id in lowercase and whether that is a valid UUIDv7 (validID); an invalid id is
// returned as given.
func normID(id string) (string, bool) {
	if validID(id) {
		return id, true
	}
	if l := strings.ToLower(id); validID(l) {
		return l, true
	}
	return id, false
}

// decodeNow is the time an enqueue's relative times count from (a relative expires_at) and against
// which an expiry is judged past: the store's clock, which discards expired jobs, as the client
// knows it (pronto.Client.StoreTime: a cached offset, read at most once a minute), not this
// server's, which may be off. A relative scheduled_at needs none: it is passed on as a Delay.
func (s *Server) decodeNow(ctx context.Context) time.Time { return s.client.StoreTime(ctx) }

// POST /ojs/v1/jobs
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if len(body) == 0 {
		s.writeError(w, r, invalid("", "the request body is empty: send a job envelope {\"type\": ..., \"args\": [...]}"))
		return
	}
	var req enqueueRequest
	e := decodeJobInto(&req, body, s.decodeNow(r.Context()))
	if e == nil {
		e = s.applyTenant(r, &req, "")
	}
	if e == nil {
		e = s.checkArgs(r.Context(), &req, "")
	}
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	ins := []pronto.OJSJob{req.job}
	defer s.order.end(s.beginInsert(ins))
	rows, err := s.client.InsertOJS(r.Context(), ins)
	if err != nil {
		s.writeInsertError(w, r, err, "job", req.job.Opts.ID, req.job.Kind)
		return
	}
	j := rows[0]
	w.Header()["Location"] = []string{"/ojs/v1/jobs/" + j.ID}
	b := getBuf()
	*b = append(*b, `{"job":`...)
	*b = appendJob(*b, j)
	status := http.StatusCreated
	if j.Duplicate {
		// on_conflict "ignore": nothing was inserted; this is the job holding the unique key.
		status = http.StatusOK
		*b = appendBoolField(*b, "deduplicated", true)
	} else {
		s.enqueuedEvent(j)
	}
	*b = append(*b, '}')
	writeBuf(w, status, b)
}

// existingID returns the first id given in jobs that a stored job has, for the error of a batch the
// store refused as a duplicate (its error does not say which id): only on that error path.
func (s *Server) existingID(ctx context.Context, jobs []pronto.OJSJob) string {
	for _, j := range jobs {
		if j.Opts.ID == "" {
			continue
		}
		if _, err := s.store.GetJob(ctx, j.Opts.ID); err == nil {
			return j.Opts.ID
		}
	}
	return ""
}

// POST /ojs/v1/jobs/batch
func (s *Server) enqueueBatch(w http.ResponseWriter, r *http.Request) {
	reqs, ok := readScanned(s, w, r, "batch", func(body []byte) ([]*enqueueRequest, *apiError) {
		return decodeBatch(body, s.decodeNow(r.Context()), s.maxBatch)
	})
	if !ok {
		return
	}
	jobs := make([]pronto.OJSJob, len(reqs))
	var ids map[string]bool
	for i, req := range reqs {
		if id := req.job.Opts.ID; id != "" {
			// Refused here rather than as a duplicate the store cannot name.
			if ids[id] {
				s.writeError(w, r, invalid("jobs["+strconv.Itoa(i)+"].id", "id %q is given to more than one job of the batch", id))
				return
			}
			if ids == nil {
				ids = map[string]bool{}
			}
			ids[id] = true
		}
		if e := s.applyTenant(r, req, "jobs["+strconv.Itoa(i)+"]"); e != nil {
			s.writeError(w, r, e)
			return
		}
		if e := s.checkArgs(r.Context(), req, "jobs["+strconv.Itoa(i)+"]"); e != nil {
			s.writeError(w, r, e)
			return
		}
		jobs[i] = req.job
	}
	// The ids beginInsert gives are left out of jobs: existingID looks for the ids given.
	ins := slices.Clone(jobs)
	defer s.order.end(s.beginInsert(ins))
	rows, err := s.client.InsertOJS(r.Context(), ins)
	if err != nil {
		if e := ownUniqueConflict(err); e != nil {
			s.writeError(w, r, e)
			return
		}
		id := ""
		if errors.Is(err, pronto.ErrDuplicate) {
			id = s.existingID(r.Context(), jobs)
		}
		s.writeInsertError(w, r, err, "job", id, jobs[0].Kind)
		return
	}
	b := getBuf()
	*b = append(*b, `{"jobs":[`...)
	for i, j := range rows {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendJob(*b, j)
		if j.Duplicate {
			// on_conflict "ignore": the job holding the key stands in for this one.
			*b = (*b)[:len(*b)-1]
			*b = appendBoolField(*b, "deduplicated", true)
			*b = append(*b, '}')
			continue
		}
		s.enqueuedEvent(j)
	}
	*b = append(*b, ']')
	*b = appendIntField(*b, "count", int64(len(rows)))
	*b = append(*b, '}')
	writeBuf(w, http.StatusCreated, b)
}

// repair brings a job's visible state up to date when the maintenance that would change it is due
// but has not run yet (it runs on the leader about every second), through the client, so that what
// it does is reported as the leader's pass would report it (pronto.Client.JobCatchUp). A failure
// leaves the job as it was read: the leader's pass comes soon.
func (s *Server) repair(ctx context.Context, j *pronto.JobRow) *pronto.JobRow {
	fresh, err := s.client.JobCatchUp(ctx, j)
	if err != nil {
		return j
	}
	return fresh
}

// lookupJob reads job id for a handler. When the id is malformed or the read fails it answers the
// error itself and returns nil.
func (s *Server) lookupJob(w http.ResponseWriter, r *http.Request, id *string) *pronto.JobRow {
	if e := checkJobID(id, "job id"); e != nil {
		s.writeError(w, r, e)
		return nil
	}
	j, err := s.client.JobGet(r.Context(), *id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", *id))
		return nil
	}
	return j
}

// GET /ojs/v1/jobs/{id}
func (s *Server) getJob(w http.ResponseWriter, r *http.Request, id string) {
	j := s.lookupJob(w, r, &id)
	if j == nil {
		return
	}
	j = s.repair(r.Context(), j)
	s.writeJob(w, http.StatusOK, j, nil)
}

// writeJob answers {"job": ...}, with extra fields in the job object when more is set.
func (s *Server) writeJob(w http.ResponseWriter, status int, j *pronto.JobRow, more func([]byte) []byte) {
	b := getBuf()
	*b = append(*b, `{"job":`...)
	*b = appendJob(*b, j)
	if more != nil {
		*b = (*b)[:len(*b)-1]
		*b = more(*b)
		*b = append(*b, '}')
	}
	*b = append(*b, '}')
	writeBuf(w, status, b)
}

// DELETE /ojs/v1/jobs/{id}
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request, id string) {
	prev := s.lookupJob(w, r, &id)
	if prev == nil {
		return
	}
	j, err := s.client.JobCancel(r.Context(), id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", id))
		return
	}
	s.writeJob(w, http.StatusOK, j, func(b []byte) []byte {
		return appendStringField(b, "previous_state", string(prev.State))
	})
}

// POST /ojs/v1/jobs/{id}/activate
func (s *Server) activateJob(w http.ResponseWriter, r *http.Request, id string) {
	discardBody(r)
	if e := checkJobID(&id, "job id"); e != nil {
		s.writeError(w, r, e)
		return
	}
	j, err := s.client.JobActivate(r.Context(), id)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", id))
		return
	}
	now := time.Now()
	s.reenqueuedEvent(j, now)
	s.writeJob(w, http.StatusOK, j, func(b []byte) []byte {
		b = appendStringField(b, "previous_state", "pending")
		return appendTimeField(b, "activated_at", now)
	})
}

// fetchRequest is the body of POST /ojs/v1/workers/fetch.
type fetchRequest struct {
	queues   []string
	count    int
	workerID string
	lease    time.Duration // 0: per job
	pool     string        // "": none (poolapi.go)
	// poolCfg is the pool the fetch named (nil: none), set by applyPool for sched.served.
	poolCfg *pronto.WorkerPool
	// room and reserved are what applyPool reserved of a pool's concurrency, given back when the
	// fetch's claims returned (releasePool).
	room     *poolRoom
	reserved int64
}

// releasePool gives back what applyPool reserved of the pool's room: the jobs claimed count as
// active in the store from now on.
func (req *fetchRequest) releasePool() {
	if req.room != nil {
		req.room.release(req.reserved)
		req.room = nil
	}
}

func decodeFetch(body []byte) (*fetchRequest, *apiError) {
	var buf [8]member
	m, e := decodeBodyInto(buf[:0], body, "fetch request")
	if e != nil {
		return nil, e
	}
	req := &fetchRequest{count: 1}
	if v, ok := m.get("pool"); ok && !isNull(v) {
		if req.pool, e = wantString(v, "pool"); e != nil {
			return nil, e
		}
	}
	raw, ok := m.get("queues")
	if !ok || isNull(raw) {
		// A fetch naming a pool and no queues takes the pool's (applyPool).
		if q, ok := m.get("queue"); ok { // a single queue, as some clients send
			name, e := wantString(q, "queue")
			if e != nil {
				return nil, e
			}
			req.queues = []string{name}
		} else if req.pool == "" {
			return nil, invalid("queues", "queues is required: the queues to fetch from, in order")
		}
	} else if req.queues, e = wantStrings(raw, "queues"); e != nil {
		return nil, e
	}
	if len(req.queues) == 0 && req.pool == "" {
		return nil, invalid("queues", "queues is empty")
	}
	if len(req.queues) > 100 {
		return nil, invalid("queues", "at most 100 queues per fetch")
	}
	for _, q := range req.queues {
		if !validQueue(q) {
			return nil, invalid("queues", "queue %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", q)
		}
	}
	// batch_size is the Ruby SDK's name for count; count wins when both are sent.
	for _, key := range [...]string{"count", "batch_size"} {
		if v, ok := m.get(key); ok && !isNull(v) {
			n, e := wantInt(v, key, 1, 1000)
			if e != nil {
				return nil, e
			}
			req.count = int(n)
			break
		}
	}
	if v, ok := m.get("worker_id"); ok && !isNull(v) {
		if req.workerID, e = wantWorkerID(v); e != nil {
			return nil, e
		}
	}
	if req.lease, e = visibilityTimeout(m); e != nil {
		return nil, e
	}
	return req, nil
}

// MaxVisibilityTimeout bounds every visibility timeout a client can ask for (options at enqueue,
// fetch, heartbeat): a lease never runs longer than this without a heartbeat. The minimum is 1 ms.
const MaxVisibilityTimeout = 7 * 24 * time.Hour

// visibilityTimeout reads the optional visibility_timeout_ms of a fetch or heartbeat: 0 when absent.
func visibilityTimeout(m object) (time.Duration, *apiError) {
	v, ok := m.get("visibility_timeout_ms")
	if !ok || isNull(v) {
		return 0, nil
	}
	ms, e := wantInt(v, "visibility_timeout_ms", 1, MaxVisibilityTimeout.Milliseconds())
	if e != nil {
		return 0, e
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// jobLease is how long a remote worker may hold j without a heartbeat: the lease asked for (by the
// request, else by the job's visibility_timeout_ms, else pronto.DefaultRemoteLease), never beyond the
// job's execution timeout, which is thus enforced on remote workers: past it the job is taken back
// and their outcome refused.
func jobLease(j *pronto.JobRow, asked time.Duration, now time.Time) time.Duration {
	lease := asked
	if lease <= 0 {
		if ext := jobExt(j); ext != nil && ext.VisibilityMS > 0 {
			lease = time.Duration(ext.VisibilityMS) * time.Millisecond
		} else {
			lease = pronto.DefaultRemoteLease
		}
	}
	lease = min(lease, MaxVisibilityTimeout) // a job stored before the bound was enforced at enqueue
	if j.Timeout > 0 && !j.StartedAt.IsZero() {
		left := j.StartedAt.Add(j.Timeout).Sub(now)
		if left < lease {
			lease = max(left, time.Millisecond)
		}
	}
	return lease
}

// POST /ojs/v1/workers/fetch
func (s *Server) fetch(w http.ResponseWriter, r *http.Request) {
	req, ok := readScanned(s, w, r, "fetch request", decodeFetch)
	if !ok {
		return
	}
	claimLease := req.lease
	if claimLease == 0 {
		claimLease = pronto.DefaultRemoteLease
	}
	ctx := r.Context()
	s.workerContact(req.workerID, req.queues)
	ok, e := s.applyPool(ctx, req)
	defer req.releasePool()
	if e != nil {
		s.writeError(w, r, e)
		return
	} else if !ok {
		// The pool is at its concurrency, or every queue asked for is isolated in pools this fetch is
		// not through: nothing to fetch now.
		s.touchWorker(ctx, req.workerID, req.queues)
		writeRaw(w, http.StatusOK, []byte(`{"jobs":[]}`))
		return
	}
	if d := s.touchWorker(ctx, req.workerID, req.queues); d != "" || s.maintenanceOn(ctx) {
		// An operator quieted (or is terminating) this worker, or maintenance mode is on: no new
		// jobs (ojs-admin-api.md 9.3, 12.1).
		writeRaw(w, http.StatusOK, []byte(`{"jobs":[]}`))
		return
	}
	jobs, err := s.client.RemoteFetch(ctx, pronto.RemoteFetchParams{
		Queues: req.queues, Limit: req.count, WorkerID: req.workerID, Lease: claimLease,
	})
	if err != nil && len(jobs) == 0 {
		s.writeError(w, r, fromClientError(err, "queue", ""))
		return
	}
	if err == nil && len(jobs) < req.count {
		jobs = s.fetchMore(ctx, req, claimLease, jobs)
	}
	if ctx.Err() != nil {
		// The worker is gone and would never see these jobs: give them back now rather than leave
		// them held for their lease.
		store.ReleaseClaimed(ctx, s.store, jobs)
		return
	}
	now := time.Now()
	s.sched.served(req.poolCfg, req.queues, jobs, now)
	// Jobs whose own lease differs from the one claimed with get it now, one statement per lease.
	var groups map[time.Duration][]string
	for _, j := range jobs {
		if l := jobLease(j, req.lease, now); l != claimLease {
			if groups == nil {
				groups = map[time.Duration][]string{}
			}
			groups[l] = append(groups[l], j.ID)
			j.LeaseExpiresAt = now.Add(l)
		}
	}
	for l, ids := range groups {
		if _, err := s.client.RemoteHeartbeat(ctx, req.workerID, ids, l); err != nil {
			s.log.Warn("pronto serve: setting the lease of fetched jobs failed", "err", err)
		}
	}
	s.fetched.add(jobs)
	s.withCheckpoints(ctx, jobs)
	b := getBuf()
	*b = append(*b, `{"jobs":[`...)
	for i, j := range jobs {
		if i > 0 {
			*b = append(*b, ',')
		}
		*b = appendJob(*b, j)
		if j.ClaimToken != "" {
			// The claim this worker holds: ack and nack echo it, so that only this claim's
			// outcome can decide the job (see docs/http-api.md, "Fencing").
			*b = (*b)[:len(*b)-1]
			*b = appendStringField(*b, "claim_token", j.ClaimToken)
			*b = append(*b, '}')
		}
	}
	*b = append(*b, ']', '}')
	writeBuf(w, http.StatusOK, b)
	for _, j := range jobs {
		s.enqueuedFirst(j) // fetched before its insert through this server returned
		s.jobEventForm("job.started", j, j.StartedAt, event{form: formStarted, n1: int64(j.Attempt), worker: req.workerID})
	}
	s.workflowStarts(ctx, jobs)
}

// fetchMoreBudget bounds how long fetchMore keeps trying for due jobs held by another transaction.
// 150 ms was too short on a machine loaded by parallel test runs: a promotion holding a due job
// for longer left a fetch empty (OJS case L1-RTR-013, once in a CI run).
const fetchMoreBudget = 500 * time.Millisecond

// fetchMore covers a race of claims with maintenance: a claim skips rows another transaction holds
// locked (PostgreSQL's SKIP LOCKED), and the leader's promotion of due jobs holds them for a moment,
// longer on a loaded machine. When a fetch comes up short while one of its queues has jobs that are
// due, it claims again, with waits doubling from 5 ms, for at most fetchMoreBudget. (A fetch of a
// paused or rate-limited queue with due jobs comes back empty after that budget, not at once.)
func (s *Server) fetchMore(ctx context.Context, req *fetchRequest, lease time.Duration, jobs []*pronto.JobRow) []*pronto.JobRow {
	if len(req.queues) > 4 {
		return jobs
	}
	deadline := time.Now().Add(fetchMoreBudget)
	for wait := 5 * time.Millisecond; len(jobs) < req.count && time.Now().Before(deadline); wait = min(2*wait, 50*time.Millisecond) {
		due := false
		now := time.Now()
		for _, q := range req.queues {
			if at, ok, err := s.store.NextDue(ctx, q); err == nil && ok && !at.After(now) {
				due = true
				break
			}
		}
		if !due {
			return jobs
		}
		select {
		case <-ctx.Done():
			return jobs
		case <-time.After(wait):
		}
		more, err := s.client.RemoteFetch(ctx, pronto.RemoteFetchParams{
			Queues: req.queues, Limit: req.count - len(jobs), WorkerID: req.workerID, Lease: lease,
		})
		jobs = append(jobs, more...) // held even when a later queue's claim failed
		if err != nil {
			return jobs
		}
	}
	return jobs
}

// ackRequest and nackRequest are the bodies of ack and nack.
type ackRequest struct {
	jobRef
	result json.RawMessage
}

func decodeAck(body []byte) (*ackRequest, *apiError) {
	var buf [8]member
	m, e := decodeBodyInto(buf[:0], body, "ack request")
	if e != nil {
		return nil, e
	}
	req := &ackRequest{}
	if req.jobRef, e = decodeJobRef(m); e != nil {
		return nil, e
	}
	if v, ok := m.get("result"); ok && !isNull(v) {
		req.result = v
	}
	return req, nil
}

// jobRef names the claim an ack or nack decides: the job, and as much of its claim as the worker
// says (see pronto.RemoteAck for how each fences the outcome).
type jobRef struct {
	jobID, workerID string
	claimToken      string // as the fetch answer gave it
	attempt         int    // 0: not given
}

// maxWorkerIDLen bounds a worker_id: the workers registry keys rows by it, and every store must be
// able to hold (and index) what one accepts.
const maxWorkerIDLen = 255

// wantWorkerID reads a worker_id: a string of at most maxWorkerIDLen bytes.
func wantWorkerID(v []byte) (string, *apiError) {
	id, e := wantString(v, "worker_id")
	if e != nil {
		return "", e
	}
	if len(id) > maxWorkerIDLen {
		return "", invalid("worker_id", "worker_id is longer than %d bytes", maxWorkerIDLen)
	}
	return id, nil
}

// decodeJobRef reads job_id (required), and worker_id, claim_token and attempt (optional).
func decodeJobRef(m object) (ref jobRef, e *apiError) {
	raw, ok := m.get("job_id")
	if !ok {
		raw, ok = m.get("id")
	}
	if !ok || isNull(raw) {
		return ref, invalid("job_id", "job_id is required")
	}
	if ref.jobID, e = wantString(raw, "job_id"); e != nil {
		return ref, e
	}
	if e = checkJobID(&ref.jobID, "job_id"); e != nil {
		return ref, e
	}
	if v, ok := m.get("worker_id"); ok && !isNull(v) {
		if ref.workerID, e = wantWorkerID(v); e != nil {
			return ref, e
		}
	}
	if v, ok := m.get("claim_token"); ok && !isNull(v) {
		if ref.claimToken, e = wantString(v, "claim_token"); e != nil {
			return ref, e
		}
		if ref.claimToken == "" || len(ref.claimToken) > 64 {
			return ref, invalid("claim_token", "claim_token must be the claim_token of the fetched job (1 to 64 characters)")
		}
	}
	if v, ok := m.get("attempt"); ok && !isNull(v) {
		n, e := wantInt(v, "attempt", 1, 1<<31-1)
		if e != nil {
			return ref, e
		}
		ref.attempt = int(n)
	}
	return ref, nil
}

// POST /ojs/v1/workers/ack
func (s *Server) ack(w http.ResponseWriter, r *http.Request) {
	req, ok := readScanned(s, w, r, "ack request", decodeAck)
	if !ok {
		return
	}
	known := s.fetched.get(req.jobID)
	j, err := s.client.RemoteAck(r.Context(), pronto.RemoteAckParams{
		ID: req.jobID, WorkerID: req.workerID, ClaimToken: req.claimToken, Attempt: req.attempt,
		Result: req.result, Job: known,
	})
	// Forgotten once decided: a refused outcome (a bad result, a database error) leaves the job held,
	// and count-only heartbeats go on renewing it.
	s.fetched.decided(known, err)
	if err != nil {
		s.writeError(w, r, transitionError(err, "acknowledge", req.jobID))
		return
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendBoolField(*b, "acknowledged", true)
	*b = appendAttemptRef(*b, j)
	*b = appendTimeField(*b, "completed_at", j.CompletedAt)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// appendAttemptRef appends the fields an ack or nack response names the job's attempt with.
func appendAttemptRef(b []byte, j *pronto.JobRow) []byte {
	b = appendStringField(b, "id", j.ID)
	b = appendStringField(b, "job_id", j.ID)
	b = appendStringField(b, "state", string(j.State))
	return appendIntField(b, "attempt", int64(j.Attempt))
}

// transitionError explains a refused ack or nack: 409 with the job's state, 404, or another error.
func transitionError(err error, verb, id string) *apiError {
	var sc *pronto.StaleClaimError
	if errors.As(err, &sc) {
		e := conflict("%s", sc.Error())
		e.details = map[string]any{"job_id": id, "current_state": "active", "reason": "stale_claim"}
		return e
	}
	var te *pronto.TransitionError
	if errors.As(err, &te) {
		msg := "cannot " + verb + " job " + id + ": it is " + string(te.From) + ", not active"
		if te.From == pronto.StateActive {
			msg = "cannot " + verb + " job " + id + ": it is held by another worker or attempt"
		}
		e := conflict("%s", msg)
		e.details = map[string]any{"job_id": id, "current_state": string(te.From), "expected_state": "active"}
		return e
	}
	return fromClientError(err, "job", id)
}

type nackRequest struct {
	jobRef
	errObj        json.RawMessage
	code, message string
	typ           string
	retryable     *bool
	requeue       bool
}

func decodeNack(body []byte) (*nackRequest, *apiError) {
	m, e := decodeObject(body, "nack request")
	if e != nil {
		return nil, e
	}
	// The worker's error is stored whatever it holds (sanitized below); the rest must be storable.
	for _, mb := range m {
		if mb.key != "error" {
			if e := storable(mb.val, mb.key); e != nil {
				return nil, e
			}
		}
	}
	req := &nackRequest{}
	if req.jobRef, e = decodeJobRef(m); e != nil {
		return nil, e
	}
	if v, ok := m.get("requeue"); ok && !isNull(v) {
		if req.requeue, e = wantBool(v, "requeue"); e != nil {
			return nil, e
		}
	}
	raw, ok := m.get("error")
	if !ok || isNull(raw) {
		if req.requeue {
			return req, nil
		}
		return nil, invalid("error", "error is required: {\"code\": ..., \"message\": ...}")
	}
	em, e := decodeObject(raw, "error")
	if e != nil {
		e.details = map[string]any{"field": "error"}
		return nil, e
	}
	req.errObj = jsoncheck.SanitizeJSON(raw)
	str := func(k string) (string, *apiError) {
		v, ok := em.get(k)
		if !ok || isNull(v) {
			return "", nil
		}
		return wantString(v, "error."+k)
	}
	if req.code, e = str("code"); e != nil {
		return nil, e
	}
	if req.message, e = str("message"); e != nil {
		return nil, e
	}
	if req.typ, e = str("type"); e != nil {
		return nil, e
	}
	if v, ok := em.get("retryable"); ok && !isNull(v) {
		b, e := wantBool(v, "error.retryable")
		if e != nil {
			return nil, e
		}
		req.retryable = &b
	}
	// OJS's error.details is an object (binding 10.3): anything else, stored, would be served to
	// every reader of the job's errors, whose clients decode it as one.
	if v, ok := em.get("details"); ok && !isNull(v) && jsonKind(v) != "object" {
		return nil, invalid("error.details", "error.details must be an object, not %s", jsonKind(v))
	}
	if req.typ == "" {
		// An error class given in the details names the error's type.
		if d, ok := em.get("details"); ok && jsonKind(d) == "object" {
			var det struct {
				ErrorClass any `json:"error_class"`
			}
			if json.Unmarshal(d, &det) == nil {
				if s, ok := det.ErrorClass.(string); ok {
					req.typ = s
				}
			}
		}
	}
	if req.typ == "" {
		req.typ = req.code
	}
	req.code, req.message, req.typ = jsoncheck.Sanitize(req.code), jsoncheck.Sanitize(req.message), jsoncheck.Sanitize(req.typ)
	if req.message == "" && !req.requeue {
		return nil, invalid("error.message", "error.message is required")
	}
	return req, nil
}

// POST /ojs/v1/workers/nack
func (s *Server) nack(w http.ResponseWriter, r *http.Request) {
	req, ok := readScanned(s, w, r, "nack request", decodeNack)
	if !ok {
		return
	}
	known := s.fetched.get(req.jobID)
	res, err := s.client.RemoteNack(r.Context(), pronto.RemoteNackParams{
		ID: req.jobID, WorkerID: req.workerID, ClaimToken: req.claimToken, Attempt: req.attempt,
		Requeue:      req.requeue,
		NonRetryable: (req.retryable != nil && !*req.retryable) || endsJob(req.code),
		Error:        pronto.AttemptError{Type: req.typ, Message: req.message, Details: req.errObj},
		Job:          known,
	})
	s.fetched.decided(known, err)
	if err != nil {
		s.writeError(w, r, transitionError(err, "fail", req.jobID))
		return
	}
	j := res.Job
	if j.State == pronto.StateAvailable {
		s.reenqueuedEvent(j, j.ScheduledAt) // requeued: back in its queue, its attempt refunded
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendAttemptRef(*b, j)
	*b = appendIntField(*b, "max_attempts", int64(j.MaxAttempts))
	switch j.State {
	case pronto.StateRetryable:
		*b = appendTimeField(*b, "next_attempt_at", j.ScheduledAt)
		*b = appendIntField(*b, "retry_delay_ms", res.RetryDelay.Milliseconds())
	case pronto.StateDiscarded:
		*b = appendTimeField(*b, "discarded_at", j.CompletedAt)
		*b = appendTimeField(*b, "completed_at", j.CompletedAt)
	}
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// heartbeatRequest is the body of POST /ojs/v1/workers/heartbeat.
type heartbeatRequest struct {
	workerID string
	ids      []string
	lease    time.Duration
	// countOnly: active_jobs was a count and no ids came with it, so the jobs this server handed
	// to the worker stand for the ids.
	countOnly bool
	// active is the active_jobs count the worker sent (-1: none); memoryMB and cpuPercent are the
	// numbers it sent, if any: the data of worker.heartbeat.
	active               int
	memoryMB, cpuPercent json.RawMessage
	// reported is the state the worker says it is in when that is "quiet" or "terminate" (its
	// directive from then on), else "".
	reported string
}

func decodeHeartbeat(body []byte) (*heartbeatRequest, *apiError) {
	var buf [8]member
	m, e := decodeBodyInto(buf[:0], body, "heartbeat")
	if e != nil {
		return nil, e
	}
	req := &heartbeatRequest{active: -1}
	// A missing worker_id is worker "", who holds the jobs fetched without one (the Ruby SDK sends
	// none): such a heartbeat extends only those, as the stores match the worker id exactly.
	if raw, ok := m.get("worker_id"); ok && !isNull(raw) {
		if req.workerID, e = wantWorkerID(raw); e != nil {
			return nil, e
		}
	}
	named := false // the ids were given (even as an empty list)
	if v, ok := m.get("active_jobs"); ok && !isNull(v) {
		// The binding's §10.4 and the SDKs send the count here (the ids, if at all, in
		// active_job_ids); pronto's first form was the ids themselves. Both are accepted.
		if jsonKind(v) == "number" {
			n, e := wantInt(v, "active_jobs", 0, 1<<31)
			if e != nil {
				return nil, e
			}
			req.countOnly, req.active = true, int(n)
		} else if req.ids, e = wantStrings(v, "active_jobs"); e != nil {
			return nil, e
		} else {
			named = true
		}
	}
	// active_job_ids is the binding's name; job_ids the Ruby SDK's.
	for _, key := range [...]string{"active_job_ids", "job_ids"} {
		if v, ok := m.get(key); ok && !isNull(v) {
			ids, e := wantStrings(v, key)
			if e != nil {
				return nil, e
			}
			req.ids = append(req.ids, ids...)
			req.countOnly, named = false, true
		}
	}
	if v, ok := m.get("job_id"); ok && !isNull(v) {
		id, e := wantString(v, "job_id")
		if e != nil {
			return nil, e
		}
		req.ids = append(req.ids, id)
		req.countOnly, named = false, true
	}
	for i, id := range req.ids {
		req.ids[i], _ = normID(id) // an invalid id stays as sent, and is answered lost
	}
	if req.workerID == "" && !named {
		// Every worker without an id is worker "": a count cannot tell its jobs from another's, and
		// renewing them all would keep a crashed worker's jobs held.
		return nil, invalid("worker_id", "worker_id is required, unless the heartbeat lists its jobs (active_job_ids)")
	}
	if len(req.ids) > 10000 {
		return nil, invalid("active_jobs", "at most 10000 jobs per heartbeat")
	}
	if req.lease, e = visibilityTimeout(m); e != nil {
		return nil, e
	}
	if v, ok := m.get("state"); ok && !isNull(v) {
		st, e := wantString(v, "state")
		if e != nil {
			return nil, e
		}
		// "running" (or a state the protocol does not name) changes nothing: it cannot undo a
		// directive the worker has not yet been answered.
		if st == store.WorkerQuiet || st == store.WorkerTerminate {
			req.reported = st
		}
	}
	if v, ok := m.get("memory_mb"); ok && jsonKind(v) == "number" {
		req.memoryMB = v
	}
	if v, ok := m.get("cpu_percent"); ok && jsonKind(v) == "number" {
		req.cpuPercent = v
	}
	return req, nil
}

// POST /ojs/v1/workers/heartbeat
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	req, ok := readScanned(s, w, r, "heartbeat", decodeHeartbeat)
	if !ok {
		return
	}
	ctx := r.Context()
	s.workerContact(req.workerID, nil)
	now := time.Now()
	state := "running"
	if s.draining.Load() {
		state = "quiet"
	}
	if req.countOnly && len(req.ids) == 0 {
		req.ids = s.fetched.heldBy(req.workerID)
	}
	var lost []string
	held := map[string]*pronto.JobRow{}
	groups := map[time.Duration][]string{}
	for _, id := range req.ids {
		if !validID(id) {
			lost = append(lost, id)
			continue
		}
		j, err := s.store.GetJob(ctx, id)
		if err != nil && !errors.Is(err, pronto.ErrNotFound) {
			// The store could not say (a database error): the worker keeps its jobs and heartbeats
			// again, rather than being told it lost them.
			s.writeError(w, r, fromClientError(err, "job", id))
			return
		}
		if err != nil || j.State != pronto.StateActive || j.WorkerID != req.workerID {
			lost = append(lost, id)
			continue
		}
		held[id] = j
		l := jobLease(j, req.lease, now)
		groups[l] = append(groups[l], id)
		if s.testMode {
			switch testDirective(j) {
			case "terminate":
				state = "terminate"
			case "quiet":
				if state == "running" {
					state = "quiet"
				}
			}
		}
	}
	directive := s.touchWorker(ctx, req.workerID, nil)
	if req.reported != "" {
		directive = s.workerReported(ctx, req.workerID, req.reported, directive)
	}
	switch directive {
	case "terminate":
		state = "terminate"
	case "quiet":
		if state == "running" {
			state = "quiet"
		}
	}
	extended := make([]string, 0, len(held))
	for l, ids := range groups {
		gone, err := s.client.RemoteHeartbeat(ctx, req.workerID, ids, l)
		if err != nil {
			s.writeError(w, r, fromClientError(err, "job", ""))
			return
		}
		goneSet := map[string]bool{}
		for _, id := range gone {
			goneSet[id] = true
		}
		lost = append(lost, gone...)
		from := len(extended)
		for _, id := range ids {
			if goneSet[id] {
				continue
			}
			extended = append(extended, id)
			j, until := held[id], now.Add(l)
			s.jobEvent("job.heartbeat", j, now, func(b []byte) []byte {
				b = appendStringField(b, "worker_id", req.workerID)
				b = appendIntField(b, "attempt", int64(j.Attempt))
				return appendTimeField(b, "visible_until", until)
			})
		}
		s.fetched.extended(extended[from:], now.Add(l))
	}
	s.fetched.lost(req.workerID, lost)
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "state", state)
	*b = appendStrings(appendKey(*b, "jobs_extended"), extended)
	if len(lost) > 0 {
		*b = appendStrings(appendKey(*b, "jobs_lost"), lost)
	}
	*b = appendTimeField(*b, "server_time", now)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
	active := req.active
	if active < 0 {
		active = len(extended) // the jobs it named that it still holds
	}
	s.workerHeartbeat(req.workerID, state, active, req.memoryMB, req.cpuPercent)
	if req.reported == store.WorkerTerminate && active == 0 {
		// Terminating with no job left, the worker exits (ojs-worker-protocol.md 2.3): its last
		// heartbeat (ojs-graceful-shutdown.md 5.3).
		s.workerStopped(req.workerID, "shutdown", nil, -1, 0, now)
	}
}

// testDirective reads meta.test_directive, with which the conformance suite asks the heartbeat of
// the worker holding a job to answer "quiet" or "terminate" (TestMode only).
func testDirective(j *pronto.JobRow) string {
	if !bytes.Contains(j.Meta, []byte(`"test_directive"`)) {
		return ""
	}
	var md struct {
		Directive string `json:"test_directive"`
	}
	if json.Unmarshal(j.Meta, &md) != nil {
		return ""
	}
	return md.Directive
}
