package pronto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/store"
)

// Remote workers are workers that do not run inside a Client: an OJS worker in another language
// speaking the HTTP API, or any program that fetches jobs, works them and reports back. The Remote*
// methods give them the same lifecycle a Client gives its own Go workers: a fetched job is active and
// holds a lease under the worker's id; the worker extends the lease with RemoteHeartbeat and ends the
// attempt with RemoteAck or RemoteNack, which apply the job's retry policy exactly as a Go worker's
// returned error would. If the worker dies, the lease runs out and the leader's rescuer returns the job
// to available. Outcomes are reported to this client's subscribers (Subscribe) as the events a Go
// worker's outcome would produce.

// DefaultRemoteLease is the lease of a remotely fetched job when the fetch names none: the default
// visibility timeout of the OJS worker protocol (section 5.2), 30 minutes. Workers that want their
// jobs back sooner after a crash ask for less, or set a visibility timeout per job.
const DefaultRemoteLease = 30 * time.Minute

// RemoteFetchParams asks for jobs on behalf of a remote worker.
type RemoteFetchParams struct {
	// Queues are tried in order: the first queue's claimable jobs are taken before the second's.
	Queues []string
	// Limit is the most jobs to return (default 1, at most 1000).
	Limit int
	// WorkerID names the worker; it is recorded on each job and RemoteHeartbeat must give it.
	WorkerID string
	// Lease is how long each job is held without a heartbeat (default DefaultRemoteLease).
	Lease time.Duration
}

// RemoteFetch claims up to p.Limit claimable jobs of any kind from p.Queues, in queue order, and
// returns them active with their attempt counted. Paused queues yield nothing. No job is returned to
// two callers. Concurrent fetches of a queue share store claims (Config.FetchBatchSize).
//
// When the claim of a later queue fails, the jobs already claimed from the earlier ones are returned
// with the error: they are the caller's, held for their lease like any fetched job, so hand them to
// the worker (as the OJS server does) rather than drop them on the error. When ctx ends during the
// fetch, no caller is left to hand them to: they are released to available at once, their attempts
// refunded (store.ReleaseClaimed), and RemoteFetch returns no jobs and the error.
//
// Once the client halted because migrations not marked compatible with older binaries were applied
// to the schema (see SchemaIncompatible), RemoteFetch claims nothing and returns an error matching
// store.ErrSchemaTooNew that names them.
func (c *Client) RemoteFetch(ctx context.Context, p RemoteFetchParams) ([]*JobRow, error) {
	if len(p.Queues) == 0 {
		return nil, invalidf("fetch: no queues named")
	}
	for _, q := range p.Queues {
		if !ValidQueueName(q) {
			return nil, invalidf("queue name %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", q)
		}
	}
	limit := p.Limit
	if limit == 0 {
		limit = 1
	}
	if limit < 0 || limit > 1000 {
		return nil, invalidf("fetch limit %d: must be between 1 and 1000", p.Limit)
	}
	lease := p.Lease
	if lease == 0 {
		lease = DefaultRemoteLease
	}
	if lease < 0 {
		return nil, invalidf("fetch lease %s is negative", lease)
	}
	if h := c.schemaWatch.halt.Load(); h != nil {
		return nil, h.refused("fetch")
	}
	var out []*JobRow
	for _, q := range p.Queues {
		var jobs []*store.Job
		var err error
		if c.fetches != nil {
			jobs, err = c.fetches.Claim(ctx, q, p.WorkerID, limit-len(out), lease)
		} else {
			jobs, err = c.remoteClaim(ctx, store.ClaimParams{
				Queue: q, Limit: limit - len(out), WorkerID: p.WorkerID, LeaseDuration: lease,
			})
		}
		if ctx.Err() != nil {
			// The caller is gone: what this fetch holds would otherwise wait out its lease.
			store.ReleaseClaimed(ctx, c.store, append(out, jobs...))
			if err == nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("pronto: fetch from queue %q: %w", q, err)
		}
		if err != nil {
			return out, fmt.Errorf("pronto: fetch from queue %q: %w", q, err)
		}
		out = append(out, jobs...)
		if len(out) >= limit {
			break
		}
	}
	c.emitStarted(out)
	return out, nil
}

// RemoteHeartbeat extends, to lease from now, the leases of the listed jobs that are still active and
// held by workerID. It returns the ids it could not extend (finished, cancelled, rescued or held by
// another worker): their work should stop, since its outcome will be refused.
func (c *Client) RemoteHeartbeat(ctx context.Context, workerID string, ids []string, lease time.Duration) (lost []string, err error) {
	if lease <= 0 {
		lease = DefaultRemoteLease
	}
	for _, id := range ids {
		if err := checkID(id); err != nil {
			return nil, err
		}
	}
	lost, err = c.store.Heartbeat(ctx, store.HeartbeatParams{WorkerID: workerID, IDs: ids, LeaseDuration: lease})
	if err != nil {
		return nil, fmt.Errorf("pronto: heartbeat: %w", err)
	}
	return lost, nil
}

// RemoteAckParams reports a successful attempt.
type RemoteAckParams struct {
	ID string
	// WorkerID, when set, must be the worker holding the job.
	WorkerID string
	// ClaimToken, when set, is the ClaimToken of the job as RemoteFetch returned it: the outcome then
	// decides only that claim, and is refused (a *StaleClaimError) once the job was fetched again,
	// even by a worker with the same id. See RemoteAck for what fences an outcome without it.
	ClaimToken string
	// Attempt, when non-zero, must be the job's current attempt.
	Attempt int
	// Result is stored as the job's result (any JSON value), or nothing when nil.
	Result json.RawMessage
	// Job, when set, is the job as RemoteFetch returned it to this worker: the ack then does not read
	// the job first. A job that moved on since (finished, cancelled, taken back, fetched again) is
	// still refused, as its attempt no longer matches.
	Job *JobRow
}

// RemoteAck completes an active job and returns it as it now is. A job that is not active gives a
// *TransitionError matching ErrInvalidTransition, and is left unchanged.
//
// An outcome decides only the claim its sender fetched (a *StaleClaimError otherwise, which also
// matches ErrInvalidTransition): the one named by ClaimToken; without a token, the current claim if
// it is held by WorkerID (and is attempt Attempt, when given); with neither, the current claim only if
// it was fetched without a worker id or no earlier claim of the job ended under its run (its lease ran
// out, or the job was cancelled while it ran, and then retried): a late outcome of that claim's run
// would be indistinguishable. Workers that share an id (a restarted worker) are
// told apart by the token alone.
func (c *Client) RemoteAck(ctx context.Context, p RemoteAckParams) (*JobRow, error) {
	j, err := c.activeJob(ctx, claimRef{p.ID, p.WorkerID, p.ClaimToken, p.Attempt}, "ack", p.Job)
	if err != nil {
		return nil, err
	}
	if len(p.Result) > 0 && !json.Valid(p.Result) {
		return nil, invalidf("ack job %s: result is not valid JSON", p.ID)
	}
	if len(p.Result) > 0 {
		if err := jsoncheck.Check(p.Result, "result"); err != nil {
			return nil, invalidf("ack job %s: %v", p.ID, err)
		}
	}
	c.endRemoteProgress(j.ID, j.ClaimToken) // the claim's last report first, while it holds the job
	now := time.Now()
	comp := store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted,
		Result: p.Result, Remove: c.removesCompleted(j.Queue)}
	if err := c.finishOne(ctx, j, comp, "ack"); err != nil {
		return nil, err
	}
	out := *j
	out.State, out.Result, out.CompletedAt = store.StateCompleted, p.Result, now
	out.LeaseExpiresAt, out.WorkerID = time.Time{}, ""
	c.events.emit(&Event{Kind: EventCompleted, Job: &out, Duration: attemptDuration(j, now), At: now})
	if c.events.wants(EventProgressCompleted) {
		// The worker may have reported through another server: the store knows whether this run did,
		// and is asked after the ack has answered (progresscheck.go).
		c.checkProgressCompleted(&out, attemptDuration(j, now), now)
	}
	return &out, nil
}

// RemoteNackParams reports a failed attempt.
type RemoteNackParams struct {
	ID string
	// WorkerID, when set, must be the worker holding the job.
	WorkerID string
	// ClaimToken and Attempt fence the outcome as in RemoteAckParams.
	ClaimToken string
	Attempt    int
	// Error describes the failure; it is appended to the job's error history (its Attempt and At are
	// filled in). Error.Type is matched against the retry policy's NonRetryableErrors, exactly or, for
	// an entry ending in ".*" or "*", by prefix.
	Error AttemptError
	// NonRetryable fails the job for good whatever attempts remain.
	NonRetryable bool
	// Requeue returns the job to available at once without spending the attempt and without an error
	// entry (a worker shutting down hands its job back); Error and NonRetryable are then ignored.
	Requeue bool
	// Job, when set, is the job as RemoteFetch returned it to this worker (see RemoteAckParams.Job).
	Job *JobRow
}

// RemoteNackResult is the outcome of RemoteNack.
type RemoteNackResult struct {
	// Job is the job as it now is: retryable (due at ScheduledAt), discarded, or available (requeued).
	Job *JobRow
	// RetryDelay is the backoff applied when the job is retryable.
	RetryDelay time.Duration
}

// RemoteNack fails an active job's attempt: the job becomes retryable after its policy's backoff, or
// discarded when its attempts are spent, the error is declared non-retryable, or its type is listed
// in the policy's NonRetryableErrors. A job that is not active gives a *TransitionError matching
// ErrInvalidTransition, and is left unchanged. The outcome is fenced as RemoteAck's is.
func (c *Client) RemoteNack(ctx context.Context, p RemoteNackParams) (*RemoteNackResult, error) {
	j, err := c.activeJob(ctx, claimRef{p.ID, p.WorkerID, p.ClaimToken, p.Attempt}, "nack", p.Job)
	if err != nil {
		return nil, err
	}
	c.endRemoteProgress(j.ID, j.ClaimToken) // the claim's last report first, while it holds the job
	now := time.Now()
	out := *j
	out.LeaseExpiresAt, out.WorkerID = time.Time{}, ""
	res := &RemoteNackResult{Job: &out}
	comp := store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken}
	if p.Requeue {
		comp.State, comp.RefundAttempt = store.StateAvailable, true
		if err := c.finishOne(ctx, j, comp, "nack"); err != nil {
			return nil, err
		}
		out.State, out.ScheduledAt = store.StateAvailable, now
		out.MaxAttempts = min(out.MaxAttempts+1, store.MaxAttemptsLimit)
		return res, nil
	}
	ae := p.Error
	ae.Attempt, ae.At = j.Attempt, now
	// The worker's report is stored as faithfully as any store can hold it: a failure is never lost
	// to the text describing it.
	ae.Message, ae.Type, ae.Trace = jsoncheck.Sanitize(ae.Message), jsoncheck.Sanitize(ae.Type), jsoncheck.Sanitize(ae.Trace)
	if len(ae.Details) > 0 {
		ae.Details = jsoncheck.SanitizeJSON(ae.Details)
	}
	if ae.Message == "" {
		ae.Message = "failed (no message given)"
	}
	if len(ae.Details) > 0 && !json.Valid(ae.Details) {
		return nil, invalidf("nack job %s: error details are not valid JSON", p.ID)
	}
	policy := c.policyOf(j)
	retryable := !p.NonRetryable && j.Attempt < j.MaxAttempts && !MatchesErrorType(policy.NonRetryableErrors, ae.Type)
	kind := EventDiscarded
	if retryable {
		res.RetryDelay = policy.Delay(backoffAttempt(j))
		comp.State, comp.ScheduledAt = store.StateRetryable, now.Add(res.RetryDelay)
		kind = EventFailed
	} else {
		comp.State = store.StateDiscarded
		f := false
		ae.Retryable = &f
	}
	comp.Error = &ae
	if err := c.finishOne(ctx, j, comp, "nack"); err != nil {
		return nil, err
	}
	out.State = comp.State
	recorded := ae
	recorded.StartedAt = j.StartedAt // as the store records it
	out.Errors = append(append([]AttemptError(nil), j.Errors...), recorded)
	if retryable {
		out.ScheduledAt = comp.ScheduledAt
	} else {
		out.CompletedAt = now
	}
	c.events.emit(&Event{Kind: kind, Job: &out, Err: remoteError{ae}, Duration: attemptDuration(j, now), At: now})
	return res, nil
}

// MatchesErrorType reports whether an error of type typ is listed in patterns: an exact match, or a
// prefix match for a pattern ending in "*" (the OJS ".*" wildcard: "auth.*" matches "auth.expired").
// An empty type matches nothing.
func MatchesErrorType(patterns []string, typ string) bool {
	if typ == "" {
		return false
	}
	for _, p := range patterns {
		if p == typ {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(typ, prefix) {
			return true
		}
	}
	return false
}

// remoteError is the error of a failed remote attempt, as reported in events.
type remoteError struct{ ae AttemptError }

func (e remoteError) Error() string {
	if e.ae.Type != "" {
		return e.ae.Type + ": " + e.ae.Message
	}
	return e.ae.Message
}

// claimRef is what an outcome says of the claim it decides.
type claimRef struct {
	id, workerID, token string
	attempt             int
}

// StaleClaimError refuses an outcome for a claim that is no longer the job's current one: the job
// was fetched again (by another worker, or under the same worker id) since the sender fetched it, or
// the sender did not say which claim it decides. It matches ErrInvalidTransition with errors.Is.
type StaleClaimError struct {
	JobID     string
	Operation string
	// Reason says why, in the user's terms.
	Reason string
}

func (e *StaleClaimError) Error() string {
	return fmt.Sprintf("cannot %s job %s: %s", e.Operation, e.JobID, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *StaleClaimError) Is(target error) bool { return target == ErrInvalidTransition }

// activeJob reads the job an outcome (op) decides, and checks that it is active under the claim ref
// names (see RemoteAck). known, when it is that job as fetched, is used instead of reading it if it
// is that claim; the store's claim-token guard refuses the outcome if the job moved on since.
func (c *Client) activeJob(ctx context.Context, ref claimRef, op string, known *JobRow) (*JobRow, error) {
	if err := checkID(ref.id); err != nil {
		return nil, err
	}
	j := known
	if j == nil || j.ID != ref.id || j.State != store.StateActive || (ref.token != "" && j.ClaimToken != ref.token) {
		var err error
		if j, err = c.store.GetJob(ctx, ref.id); err != nil {
			return nil, fmt.Errorf("pronto: %s job %s: %w", op, ref.id, err)
		}
	}
	if j.State != store.StateActive {
		return nil, &TransitionError{JobID: ref.id, Operation: op, From: j.State}
	}
	stale := func(format string, args ...any) error {
		return &StaleClaimError{JobID: ref.id, Operation: op, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case ref.token != "" && j.ClaimToken != ref.token:
		return nil, stale("claim_token %q is not the job's current claim: the job was fetched again since (it is on attempt %d)", ref.token, j.Attempt)
	case ref.attempt != 0 && j.Attempt != ref.attempt:
		return nil, stale("attempt %d is not the job's current attempt (%d): the job was fetched again since", ref.attempt, j.Attempt)
	case ref.workerID != "" && j.WorkerID != ref.workerID:
		return nil, stale("it is held by worker %q, not %q: its lease ran out and it was fetched again", j.WorkerID, ref.workerID)
	case ref.token == "" && ref.workerID == "" && j.WorkerID != "" && lostAClaim(j):
		// An outcome that names no claim cannot be told from a late one of the run whose claim
		// was taken from it: it may decide only a job none of whose claims were lost.
		return nil, stale("an earlier claim of it ended while its run went on (lease expired or cancelled), so an outcome that names no claim may be that run's; "+
			"send worker_id and the claim_token the fetch returned (it is held by worker %q)", j.WorkerID)
	}
	return j, nil
}

// lostAClaim reports whether a claim of j ended under its run, its lease running out or the job
// cancelled while it ran: the run it belonged to may still be at work and report.
func lostAClaim(j *JobRow) bool {
	for _, e := range j.Errors {
		if e.Type == store.ErrorTypeLeaseExpired || e.Type == store.ErrorTypeCancelled {
			return true
		}
	}
	return false
}

// finishOne writes one completion of a job read by activeJob, refusing it when the job moved on
// meanwhile (finished, rescued or cancelled by someone else).
func (c *Client) finishOne(ctx context.Context, j *JobRow, comp store.Completion, op string) error {
	var applied bool
	var err error
	if c.finishes != nil {
		applied, err = c.finishes.Finish(ctx, comp)
	} else {
		var res []store.FinishResult
		res, err = c.store.Finish(ctx, []store.Completion{comp})
		applied = err == nil && len(res) == 1 && res[0].Applied
	}
	if err != nil {
		return fmt.Errorf("pronto: %s job %s: %w", op, j.ID, err)
	}
	if applied {
		return nil
	}
	from := store.StateActive
	if now, err := c.store.GetJob(ctx, j.ID); err == nil {
		from = now.State
	} else if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("pronto: %s job %s: %w", op, j.ID, err)
	}
	return &TransitionError{JobID: j.ID, Operation: op, From: from}
}

func attemptDuration(j *JobRow, now time.Time) time.Duration {
	if j.StartedAt.IsZero() || now.Before(j.StartedAt) {
		return 0
	}
	return now.Sub(j.StartedAt)
}
