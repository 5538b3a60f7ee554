package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/pronto-jobs/pronto/store"
)

// GetJob returns the job with id, or an error wrapping store.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*store.Job, error) {
	j, err := firstJob(s.readQuery(ctx, getJobSQL, id))
	if err != nil {
		return nil, s.rowError("get job "+id, err)
	}
	return j, nil
}

// defaultListLimit is the page size of ListJobs when p.Limit is not positive.
const defaultListLimit = 100

// ListJobs returns up to p.Limit jobs matching the filters, in id order (descending when asked), after
// the cursor p.After, and the cursor of the next page ("" when this page is the last).
func (s *Store) ListJobs(ctx context.Context, p store.ListParams) ([]*store.Job, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	filter := func(v []string) (any, error) {
		if len(v) == 0 {
			return nil, nil
		}
		b, err := json.Marshal(v)
		return string(b), err
	}
	states := make([]string, len(p.States))
	for i, st := range p.States {
		states[i] = string(st)
	}
	fs, err := filter(states)
	if err != nil {
		return nil, "", err
	}
	fq, err := filter(p.Queues)
	if err != nil {
		return nil, "", err
	}
	fk, err := filter(p.Kinds)
	if err != nil {
		return nil, "", err
	}
	// The page starts after (before, when descending) start and stops at end: "" is below every
	// id, "\uffff" above every id made of ASCII characters.
	lower, upper := p.IDWindow()
	start, end := lower, cmp.Or(upper, "\uffff")
	if p.Descending {
		start, end = end, start
	}
	ft, err := filter(p.Tags)
	if err != nil {
		return nil, "", err
	}
	finished := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UnixMicro()
	}
	args := []any{fs, fq, fk, start, int64(limit + 1), ft, end, finished(p.FinishedAfter), finished(p.FinishedBefore)}
	query := listJobsSQL(p.Descending, p.WorkflowID != "")
	if p.Tenant != "" {
		// The tenant's own index, a range per state, rather than every job.
		sts := states
		if len(sts) == 0 {
			for _, st := range store.AllStates {
				sts = append(sts, string(st))
			}
		}
		for _, st := range sts {
			if !store.State(st).Valid() {
				return nil, "", fmt.Errorf("list jobs: state %q: %w", st, store.ErrInvalidParams)
			}
		}
		query = listTenantJobsSQL(p.Descending, p.WorkflowID != "", slices.Compact(slices.Sorted(slices.Values(sts))))
		args = append(args, p.WorkflowID, p.Tenant)
	} else if p.WorkflowID != "" {
		args = append(args, p.WorkflowID)
	}
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", s.schemaHint(err))
	}
	jobs, err := scanJobs(rows, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = jobs[limit-1].ID
	}
	return jobs, next, nil
}

// transition runs query (an UPDATE or DELETE ... RETURNING the job, with ?1 now and ?2 id) in a write
// transaction, then after, if given, in the same transaction. When the query matches nothing, the job
// is missing (store.ErrNotFound) or in a state the operation does not accept
// (*store.TransitionError).
// refused is the error of a single-job operation its statement refused for a job in state from:
// a delete refuses only active jobs and the parents a pending workflow child waits for.
func refused(id, op string, from store.State) error {
	te := &store.TransitionError{JobID: id, Operation: op, From: from}
	if op == "delete" && from != store.StateActive {
		te.Reason = store.ReasonAwaitedParent
	}
	return te
}

func (s *Store) transition(ctx context.Context, op, query, id string, after func(txRunner, *store.Job, int64) error) (*store.Job, error) {
	r, err := s.begin(ctx, append([]string{query, jobStateSQL, uniqueRivalSQL, releaseUniqueKeySQL}, settleQueries...)...)
	if err != nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	defer r.tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	nowUS, _ := s.nowMicro()
	var j *store.Job
	for attempt := 1; ; attempt++ {
		if query == deleteJobSQL {
			j, err = firstJob(r.QueryContext(ctx, query, id))
		} else {
			j, err = firstJob(r.QueryContext(ctx, query, nowUS, id))
		}
		if sqliteCode(err) != sqlite3.SQLITE_CONSTRAINT_UNIQUE || attempt == 3 {
			break
		}
		// The job would hold its unique key while another job does (RetryJob, ActivateJob).
		if err := yieldLapsedHolder(ctx, r, id, nowUS); err != nil {
			return nil, fmt.Errorf("%s job %s: %w", op, id, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		var state string
		err := r.tx.StmtContext(ctx, r.prepared(jobStateSQL)).QueryRowContext(ctx, id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("%s job %s: %w", op, id, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("%s job %s: %w", op, id, err)
		}
		return nil, refused(id, op, store.State(state))
	}
	if err != nil {
		return nil, fmt.Errorf("%s job %s: %w", op, id, err)
	}
	if after != nil {
		if err := after(r, j, nowUS); err != nil {
			return nil, fmt.Errorf("%s job %s: %w", op, id, err)
		}
	}
	if err := r.tx.Commit(); err != nil {
		return nil, fmt.Errorf("%s job %s: commit: %w", op, id, err)
	}
	return j, nil
}

// yieldLapsedHolder settles a manual transition of job id that ran into the unique index: the job
// holding its key gives the key up if its period ran out (the transition is then tried again);
// otherwise the transition is refused with a *store.UniqueConflictError naming it. A manual
// operation does not take a key from a job that holds it, as an insert under ConflictReject would
// not.
func yieldLapsedHolder(ctx context.Context, r txRunner, id string, nowUS int64) error {
	rows, err := r.QueryContext(ctx, uniqueRivalSQL, id)
	if err != nil {
		return err
	}
	var rival, state, key string
	var until sql.NullInt64
	found := false
	for rows.Next() {
		if err := rows.Scan(&rival, &state, &key, &until); err != nil {
			rows.Close()
			return err
		}
		found = true
	}
	if err := closeRows(rows); err != nil {
		return err
	}
	if !found {
		return nil
	}
	if until.Valid && until.Int64 <= nowUS {
		_, err := r.ExecContext(ctx, releaseUniqueKeySQL, rival)
		return err
	}
	return &store.UniqueConflictError{Key: key, ExistingID: rival, ExistingState: store.State(state)}
}

// CancelJob cancels a job that is not terminal and tells this process's clients (NotifyCancel), so a
// runner of the job here cancels its context; a runner in another process finds out at its next
// heartbeat, which reports the job lost. A terminal job gives a *store.TransitionError. A workflow
// job's pending children are decided in the same transaction (cancelled, or released for callbacks
// that run on failure or completion), and the queue of a limited job is woken, since its slot may
// be free.
func (s *Store) CancelJob(ctx context.Context, id string) (*store.Job, error) {
	var out outbox
	var token string
	j, err := s.transition(ctx, "cancel", cancelJobSQL, id, func(r txRunner, j *store.Job, nowUS int64) error {
		var err error
		if token, err = runToken(ctx, r, j.ID); err != nil {
			return err
		}
		return afterTerminal(ctx, r, []*store.Job{j}, nowUS, &out)
	})
	if err != nil {
		return nil, err
	}
	s.hub.Publish(store.Notification{Kind: store.NotifyCancel, Queue: j.Queue, JobID: j.ID, ClaimToken: token})
	s.publishOutbox(&out)
	return j, nil
}

// RetryJob makes a discarded or cancelled job available now with its attempt count reset to zero,
// keeping its error history, and announces it. Other states give a *store.TransitionError.
//
// A workflow job waits again for its parents (pending) when their states would keep a pending job
// waiting, to be decided by their outcomes as if it had never left pending; otherwise it runs now
// with their results, even after a failed parent (the operator's call).
func (s *Store) RetryJob(ctx context.Context, id string) (*store.Job, error) {
	j, err := s.transition(ctx, "retry", retryJobSQL, id, func(r txRunner, j *store.Job, _ int64) error {
		return retriedMember(ctx, r, j)
	})
	if err != nil {
		return nil, err
	}
	if j.State == store.StateAvailable {
		s.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: j.Queue})
	}
	return j, nil
}

// retriedMember applies RetryJob's rule for workflow jobs to j, just made available in r.
func retriedMember(ctx context.Context, r txRunner, j *store.Job) error {
	if len(j.ParentIDs) == 0 {
		return nil
	}
	c := child{id: j.ID, runOn: j.RunOn, parents: j.ParentIDs}
	parents, err := parentsOf(ctx, r, []child{c})
	if err != nil {
		return err
	}
	if decide(c, parents) == keepWaiting {
		if _, err := r.ExecContext(ctx, rependJobSQL, j.ID); err != nil {
			return err
		}
		j.State = store.StatePending
		return nil
	}
	j.ParentResults = parentResults(c, parents)
	_, err = r.ExecContext(ctx, setParentResultsSQL, j.ID, string(j.ParentResults))
	return err
}

// ActivateJob moves a pending job to available (due now) and announces it. Other states give a
// *store.TransitionError.
func (s *Store) ActivateJob(ctx context.Context, id string) (*store.Job, error) {
	j, err := s.transition(ctx, "activate", activateJobSQL, id, nil)
	if err != nil {
		return nil, err
	}
	s.hub.Publish(store.Notification{Kind: store.NotifyInsert, Queue: j.Queue})
	return j, nil
}

// DeleteJob removes a job that is not active and returns it as it was. An active job gives a
// *store.TransitionError: cancel it first.
func (s *Store) DeleteJob(ctx context.Context, id string) (*store.Job, error) {
	return s.transition(ctx, "delete", deleteJobSQL, id, nil)
}

// ListQueues returns, sorted by name, every queue that has jobs or is paused, with its count of jobs
// in each of the eight states (zero included).
func (s *Store) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	byName := map[string]*store.QueueInfo{}
	get := func(name string) *store.QueueInfo {
		q, ok := byName[name]
		if !ok {
			q = &store.QueueInfo{Name: name, Counts: make(map[store.State]int64, len(store.AllStates))}
			for _, st := range store.AllStates {
				q.Counts[st] = 0
			}
			byName[name] = q
		}
		return q
	}
	// One read transaction, so the counts and the flags are one snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, queueCountsSQL)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", s.schemaHint(err))
	}
	for rows.Next() {
		var name, state string
		var n int64
		if err := rows.Scan(&name, &state, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list queues: %w", err)
		}
		get(name).Counts[store.State(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	rows.Close()
	rows, err = tx.QueryContext(ctx, queueFlagsSQL)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var paused bool
		if err := rows.Scan(&name, &paused); err != nil {
			return nil, fmt.Errorf("list queues: %w", err)
		}
		if paused {
			get(name).Paused = true
		} else if q, ok := byName[name]; ok {
			q.Paused = false
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	out := make([]store.QueueInfo, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b store.QueueInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// PauseQueue stops claims from queue, by every process on the file, until ResumeQueue. The queue need
// not have jobs yet. Clients in this process are told at once (NotifyPause); other processes learn
// it when they next claim, which finds nothing.
func (s *Store) PauseQueue(ctx context.Context, queue string) error {
	st, err := s.stmt(ctx, pauseQueueSQL)
	if err != nil {
		return fmt.Errorf("pause queue %q: %w", queue, err)
	}
	nowUS, _ := s.nowMicro()
	if _, err := st.ExecContext(ctx, queue, nowUS); err != nil {
		return fmt.Errorf("pause queue %q: %w", queue, err)
	}
	s.hub.Publish(store.Notification{Kind: store.NotifyPause, Queue: queue})
	return nil
}

// ResumeQueue lets claims from queue start again and wakes this process's producers of it
// (NotifyResume); other processes resume at their next poll. Resuming a queue that is not paused does
// nothing but the wake-up.
func (s *Store) ResumeQueue(ctx context.Context, queue string) error {
	st, err := s.stmt(ctx, resumeQueueSQL)
	if err != nil {
		return fmt.Errorf("resume queue %q: %w", queue, err)
	}
	nowUS, _ := s.nowMicro()
	if _, err := st.ExecContext(ctx, queue, nowUS); err != nil {
		return fmt.Errorf("resume queue %q: %w", queue, err)
	}
	s.hub.Publish(store.Notification{Kind: store.NotifyResume, Queue: queue})
	return nil
}

// Elect makes leaderID the leader of name for ttl when nobody leads or the leader's term has run
// out, or extends the term when leaderID already leads; it reports whether leaderID leads now. One
// statement, so concurrent electors in any process get one winner.
func (s *Store) Elect(ctx context.Context, name, leaderID string, ttl time.Duration) (bool, error) {
	st, err := s.stmt(ctx, electSQL)
	if err != nil {
		return false, fmt.Errorf("elect leader of %q: %w", name, err)
	}
	nowUS, _ := s.nowMicro()
	var got string
	err = st.QueryRowContext(ctx, name, leaderID, nowUS, nowUS+ttl.Microseconds()).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("elect leader of %q: %w", name, err)
	}
	return got == leaderID, nil
}

// Resign gives up leadership of name if leaderID holds it, so another elector can win at once.
func (s *Store) Resign(ctx context.Context, name, leaderID string) error {
	st, err := s.stmt(ctx, resignSQL)
	if err != nil {
		return fmt.Errorf("resign leadership of %q: %w", name, err)
	}
	if _, err := st.ExecContext(ctx, name, leaderID); err != nil {
		return fmt.Errorf("resign leadership of %q: %w", name, err)
	}
	return nil
}

// runToken returns the claim token job id's latest run had (a transition out of active keeps it),
// which a cancellation names so that a holder not yet running that run can stop it.
func runToken(ctx context.Context, r txRunner, id string) (string, error) {
	var token string
	err := r.QueryRowContext(ctx, runTokenSQL, id).Scan(&token)
	if err != nil {
		return "", fmt.Errorf("job %s: its claim token: %w", id, err)
	}
	return token, nil
}
