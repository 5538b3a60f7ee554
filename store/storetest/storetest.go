// Package storetest is the behavioural test suite every store.Store backend runs: PostgreSQL, SQLite
// and memory alike. A backend's test file calls Run with a Harness that makes fresh stores, and
// RunBenchmarks with a BenchHarness:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t *testing.T) store.Store { return memory.New() },
//		})
//	}
//
// The suite asserts only what the store.Store contract states, in terms a user would notice: states,
// counts, orderings, errors and notifications. Time comparisons tolerate the database's clock and its
// microsecond (PostgreSQL) or millisecond precision; waits poll with a deadline instead of sleeping
// and hoping.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// Harness makes the stores the suite runs against.
type Harness struct {
	// New returns a fresh, migrated, empty store for one test: its own schema, file or instance, so
	// tests may run in parallel. The harness closes it (t.Cleanup); the suite never calls Close.
	New func(t *testing.T) store.Store
	// Reopen returns a second store over the same data as s, as another client or process would see
	// it, closed by the harness too. It may return s itself when the backend has no second view (the
	// memory store). Nil means the same as returning s.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// testCase is one behaviour of the suite.
type testCase struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// single adapts a test that needs one fresh store.
func single(fn func(t *testing.T, s store.Store)) func(t *testing.T, h Harness) {
	return func(t *testing.T, h Harness) { fn(t, h.New(t)) }
}

// tests lists every behaviour; each test owns its store and runs in parallel with the others.
var tests = []testCase{
	{"Clients", single(testClients)},
	{"ListJobsTimeWindows", single(testListJobsTimeWindows)},
	{"WorkflowList", single(testWorkflowList)},
	{"RunJobNow", single(testRunJobNow)},
	{"SetJobPriorityOrder", single(testSetJobPriorityOrder)},
	{"CountAvailableByPriority", single(testCountAvailableByPriority)},
	{"SetJobPriorityWaiting", single(testSetJobPriorityWaiting)},
	{"SetJobPriorityRefused", single(testSetJobPriorityRefused)},
	{"InsertRoundTrip", single(testInsertRoundTrip)},
	{"InsertDefaults", single(testInsertDefaults)},
	{"InsertBatch", single(testInsertBatch)},
	{"InsertDuplicateRefusesBatch", single(testInsertDuplicate)},
	{"JobsAreCopies", single(testJobsAreCopies)},

	{"ClaimOrder", single(testClaimOrder)},
	{"ClaimLimit", single(testClaimLimit)},
	{"ClaimOnlyItsQueue", single(testClaimOnlyItsQueue)},
	{"ClaimKinds", single(testClaimKinds)},
	{"ClaimSetsActive", single(testClaimSetsActive)},
	{"ClaimScheduledWhenDue", single(testClaimScheduledWhenDue)},
	{"ClaimPendingAfterActivate", single(testClaimPendingAfterActivate)},
	{"ClaimSkipsExpiredAndDiscardExpired", single(testClaimExpired)},
	{"ClaimPausedQueue", single(testClaimPaused)},
	{"ClaimedJobIsStoredJob", single(testClaimedJobIsStoredJob)},
	{"WorkflowClaimedChild", single(testWorkflowClaimedChild)},
	{"FairTenants", single(testFairTenants)},
	{"FairPriorityWithinTenant", single(testFairPriorityWithinTenant)},
	{"FairTenantless", single(testFairTenantless)},
	{"FairTenantAlone", single(testFairTenantAlone)},
	{"FairBesideLaterJobs", single(testFairBesideLaterJobs)},
	{"TenantWeights", single(testTenantWeights)},
	{"TenantWeightsAlone", single(testTenantWeightsAlone)},
	{"FairLimitedTenantMidTurn", single(testFairLimitedTenantMidTurn)},
	{"TenantStats", single(testTenantStats)},
	{"TenantJobs", single(testTenantJobs)},

	{"FinishCompleted", single(testFinishCompleted)},
	{"FinishRetryable", single(testFinishRetryable)},
	{"FinishSnoozeRefundsAttempt", single(testFinishSnooze)},
	{"FinishDiscarded", single(testFinishDiscarded)},
	{"FinishCancelled", single(testFinishCancelled)},
	{"FinishAvailable", single(testFinishAvailable)},
	{"FinishStaleAttemptNotApplied", single(testFinishStale)},
	{"FinishStaleBesideCurrent", single(testFinishStaleBesideCurrent)},
	{"ClaimTokenFencesRuns", single(testClaimTokenFencesRuns)},
	{"ClaimTokensDistinctInBatch", single(testClaimTokensDistinctInBatch)},
	{"ClaimForWorkers", single(testClaimForWorkers)},
	{"RateLimitClaimForWorkers", single(testRateLimitClaimForWorkers)},
	{"FinishAfterCancelNotApplied", single(testFinishAfterCancel)},
	{"FinishUnknownNotApplied", single(testFinishUnknown)},
	{"FinishBatchInOrder", single(testFinishBatch)},
	{"FinishRemoveCompleted", single(testFinishRemoveCompleted)},
	{"FinishRemoveKeepsWorkflowAndUniqueHolders", single(testFinishRemoveKeeps)},
	{"FinishBatchColumns", single(testFinishBatchColumns)},

	{"Progress", single(testProgress)},
	{"ProgressBatch", single(testProgressBatch)},
	{"ProgressCheckpoint", single(testProgressCheckpoint)},
	{"Workers", single(testWorkers)},
	{"Settings", single(testSettings)},
	{"SettingSwap", testSettingSwap},

	{"NotFound", single(testNotFound)},
	{"CancelTerminalRefused", single(testCancelTerminalRefused)},
	{"RetryRefused", single(testRetryRefused)},
	{"ActivateRefused", single(testActivateRefused)},
	{"DeleteActiveRefused", single(testDeleteActiveRefused)},
	{"CancelQueued", single(testCancelQueued)},
	{"CancelActive", single(testCancelActive)},
	{"RetryJob", single(testRetryJob)},
	{"DeleteJob", single(testDeleteJob)},

	{"Heartbeat", single(testHeartbeat)},
	{"RescueRequeues", single(testRescueRequeues)},
	{"RescueDiscardsSpent", single(testRescueDiscards)},
	{"RescueSparesHeartbeated", single(testRescueSparesHeartbeated)},
	{"Promote", single(testPromote)},
	{"NextDue", single(testNextDue)},
	{"Cleanup", single(testCleanup)},
	{"CleanupLimit", single(testCleanupLimit)},
	{"CleanupQueues", single(testCleanupQueues)},
	{"PruneDiscarded", single(testPruneDiscarded)},
	{"PruneDiscardedQueues", single(testPruneDiscardedQueues)},
	{"PruneArchiveSteps", single(testPruneArchiveSteps)},
	{"PruneDiscardedTies", single(testPruneDiscardedTies)},

	{"ListJobsFilters", single(testListJobsFilters)},
	{"ListJobsPagination", single(testListJobsPagination)},
	{"ListJobsByTags", single(testListJobsByTags)},
	{"ListQueues", single(testListQueues)},

	{"NotifyInsertOncePerQueue", single(testNotifyInsertPerQueue)},
	{"NotifyInsertDueAt", single(testNotifyDueAt)},
	{"NotifyPendingSilent", single(testNotifyPendingSilent)},
	{"NotifyFinish", single(testNotifyFinish)},
	{"NotifyPauseResume", single(testNotifyPauseResume)},
	{"NotifyUnsubscribe", single(testNotifyUnsubscribe)},
	{"NotifySignals", single(testNotifySignals)},

	{"Elect", single(testElect)},
	{"ElectAfterTTL", single(testElectAfterTTL)},

	{"ReopenSharesData", testReopenSharesData},
	{"ProducersRunEachJobOnce", testProducersRunEachJobOnce},
	{"ConcurrentClaimsExclusive", testConcurrentClaims},
	{"FairConcurrentClaimsExclusive", testFairConcurrentClaims},

	{"UniqueRejectAtomic", single(testUniqueRejectAtomic)},
	{"UniqueIgnore", single(testUniqueIgnore)},
	{"UniqueReplace", single(testUniqueReplace)},
	{"UniqueReplaceExceptSchedule", single(testUniqueReplaceExceptSchedule)},
	{"UniqueStates", single(testUniqueStates)},
	{"UniqueDefaultStates", single(testUniqueDefaultStates)},
	{"UniqueUntil", single(testUniqueUntil)},
	{"UniqueWithinBatch", single(testUniqueWithinBatch)},
	{"UniqueRoundTrip", single(testUniqueRoundTrip)},
	{"UniqueConcurrentInserts", testUniqueConcurrent},
	{"UniqueManualReentry", single(testUniqueManualReentry)},
	{"UniqueHeldAfterClaim", single(testUniqueHeldAfterClaim)},
	{"UniqueReplaceTerminalHolder", single(testUniqueReplaceTerminalHolder)},
	{"UniqueInsertOutsideOwnStates", single(testUniqueInsertOutsideOwnStates)},
	{"UniqueLapsedHolderReentry", single(testUniqueLapsedHolderReentry)},
	{"UniqueHeldKeys", single(testUniqueHeldKeys)},
	{"InsertRefusesWorkflowFields", single(testInsertRefusesWorkflowFields)},

	{"RateLimitCRUD", single(testRateLimitCRUD)},
	{"RateLimitMaxActive", single(testRateLimitMaxActive)},
	{"RateLimitWindow", single(testRateLimitWindow)},
	{"RateLimitSkipKeepsOrder", single(testRateLimitSkipKeepsOrder)},
	{"RateLimitDrop", single(testRateLimitDrop)},
	{"RateLimitBesideLaterJobs", single(testRateLimitBesideLaterJobs)},
	{"RateLimitReschedule", single(testRateLimitReschedule)},
	{"RateLimitHeldBackReported", single(testRateLimitHeldBackReported)},
	{"RateLimitLimitedReported", single(testRateLimitLimitedReported)},
	{"RateLimitOnInsert", single(testRateLimitOnInsert)},
	{"RateLimitUnlimited", single(testRateLimitUnlimited)},
	{"RateLimitInfo", single(testRateLimitInfo)},
	{"RateLimitConcurrentClaims", testRateLimitConcurrent},
	{"RateLimitDeletedUnderConcurrentClaims", testRateLimitDeletedUnderConcurrentClaims},
	{"RateLimitTenant", single(testRateLimitTenant)},
	{"RateLimitTenantWindowDue", single(testRateLimitTenantWindowDue)},
	{"RateLimitTenantWithRateKey", single(testRateLimitTenantWithRateKey)},
	{"RateLimitTenantInfo", single(testRateLimitTenantInfo)},
	{"RateLimitTenantPassedNotDropped", single(testRateLimitTenantPassedNotDropped)},
	{"RateLimitTenantKeyAsRateKey", single(testRateLimitTenantKeyAsRateKey)},

	{"WorkflowRoundTrip", single(testWorkflowRoundTrip)},
	{"WorkflowChain", single(testWorkflowChain)},
	{"WorkflowFailureCascade", single(testWorkflowFailureCascade)},
	{"WorkflowAcrossQueues", single(testWorkflowAcrossQueues)},
	{"WorkflowCancelJobCascades", single(testWorkflowCancelJobCascades)},
	{"WorkflowRescueAndExpiryCascade", single(testWorkflowRescueCascades)},
	{"WorkflowGroup", single(testWorkflowGroup)},
	{"WorkflowCallbacksSuccess", single(testWorkflowCallbacksSuccess)},
	{"WorkflowCallbacksFailure", single(testWorkflowCallbacksFailure)},
	{"WorkflowDiamond", single(testWorkflowDiamond)},
	{"WorkflowCancel", single(testWorkflowCancel)},
	{"WorkflowNotFound", single(testWorkflowNotFound)},
	{"WorkflowListJobs", single(testWorkflowListJobs)},
	{"WorkflowInvalid", single(testWorkflowInvalid)},
	{"WorkflowNotify", testWorkflowNotify},
	{"WorkflowManualOps", single(testWorkflowManualOps)},
	{"WorkflowRetryWaits", single(testWorkflowRetryWaits)},
	{"WorkflowLongChain", single(testWorkflowLongChain)},
	{"WorkflowCleanup", single(testWorkflowCleanup)},
	{"WorkflowCleanupKeepsWaitedParents", single(testWorkflowCleanupKeepsWaitedParents)},
	{"WorkflowDeleteWaitedParentRefused", single(testWorkflowDeleteWaitedParentRefused)},
	{"PruneSkipsWaitedParents", single(testPruneSkipsWaitedParents)},
	{"WorkflowReopen", testWorkflowReopen},
	{"WorkflowConcurrentParents", testWorkflowConcurrentParents},
	{"SchemaRegistry", single(testSchemaRegistry)},
	{"QueueBounds", single(testQueueBounds)},
	{"Cron", single(testCron)},
}

// Run runs every behaviour test against stores made by h, each as a parallel subtest with a store of
// its own.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started.Store(t.Name(), time.Now())
			tc.fn(t, h)
		})
	}
}

// started holds when each test of Run began (by test name), the lower bound of "now" for requireNow:
// a time a test's store calls set cannot be earlier than the test's start.
var started sync.Map

const (
	// near bounds the difference between the database's clock and the test's for "happened now".
	near = 5 * time.Second
	// precision is the finest time resolution the suite expects a backend to keep.
	precision = time.Millisecond
	// waitTimeout bounds every wait for something asynchronous (a due time, a lease, a notification).
	waitTimeout = 10 * time.Second
	// lease is the lease of claims that are not about leases: long enough never to run out in a test.
	lease = time.Minute
	// worker is the worker id of claims that are not about workers.
	worker = "storetest-worker"
)

// ctx returns a context for store calls, cancelled when the test ends.
func ctx(t testing.TB) context.Context { return t.Context() }

// uniq returns a name with the given prefix that no other test uses.
func uniq(prefix string) string { return prefix + "-" + uuidv7.New()[24:] }

// job returns the parameters of an available job in queue with a fresh id, kind "storetest.kind",
// args [{"n":1}] and three attempts.
func job(queue string) *store.InsertParams {
	return &store.InsertParams{
		ID:          uuidv7.New(),
		Kind:        "storetest.kind",
		Queue:       queue,
		Args:        json.RawMessage(`[{"n":1}]`),
		State:       store.StateAvailable,
		MaxAttempts: 3,
	}
}

// insert inserts params and requires success.
func insert(t testing.TB, s store.Store, params ...*store.InsertParams) []*store.Job {
	t.Helper()
	jobs, err := s.Insert(ctx(t), params)
	require.NoError(t, err)
	require.Len(t, jobs, len(params))
	for i, j := range jobs {
		require.Equal(t, params[i].ID, j.ID, "Insert returns jobs in the order given")
	}
	return jobs
}

// get reads one job and requires it to exist.
func get(t testing.TB, s store.Store, id string) *store.Job {
	t.Helper()
	j, err := s.GetJob(ctx(t), id)
	require.NoError(t, err)
	require.Equal(t, id, j.ID)
	return j
}

// claim claims from queue with the given limit for worker, with a long lease.
func claim(t testing.TB, s store.Store, queue string, limit int) []*store.Job {
	t.Helper()
	jobs, err := s.Claim(ctx(t), store.ClaimParams{Queue: queue, Limit: limit, WorkerID: worker, LeaseDuration: lease})
	require.NoError(t, err)
	require.LessOrEqual(t, len(jobs), limit, "Claim returns at most Limit jobs")
	return jobs
}

// ids returns the ids of jobs, in order.
func ids(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// active inserts p with a kind of its own and claims exactly it, returning the claimed job (attempt 1).
func active(t testing.TB, s store.Store, p *store.InsertParams) *store.Job {
	t.Helper()
	return activeFor(t, s, p, worker, lease)
}

// activeFor is active with the given worker id and lease.
func activeFor(t testing.TB, s store.Store, p *store.InsertParams, workerID string, leaseFor time.Duration) *store.Job {
	t.Helper()
	p.Kind = uniq("kind")
	insert(t, s, p)
	return reclaim(t, s, p.Queue, p.Kind, p.ID, workerID, leaseFor)
}

// reclaim claims the one claimable job of kind in queue, which must be id.
func reclaim(t testing.TB, s store.Store, queue, kind, id, workerID string, leaseFor time.Duration) *store.Job {
	t.Helper()
	jobs, err := s.Claim(ctx(t), store.ClaimParams{
		Queue: queue, Kinds: []string{kind}, Limit: 10, WorkerID: workerID, LeaseDuration: leaseFor,
	})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "exactly job %s is claimable", id)
	require.Equal(t, id, jobs[0].ID)
	require.Equal(t, store.StateActive, jobs[0].State)
	return jobs[0]
}

// finish applies one completion and returns whether it was applied.
func finish(t testing.TB, s store.Store, c store.Completion) bool {
	t.Helper()
	res, err := s.Finish(ctx(t), []store.Completion{c})
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, c.ID, res[0].ID)
	return res[0].Applied
}

// inState makes a job of queue in state st (any of the eight) and returns it as stored.
func inState(t testing.TB, s store.Store, queue string, st store.State) *store.Job {
	t.Helper()
	p := job(queue)
	switch st {
	case store.StateAvailable:
		insert(t, s, p)
	case store.StateScheduled:
		p.State = store.StateScheduled
		p.ScheduledAt = time.Now().Add(time.Hour)
		insert(t, s, p)
	case store.StatePending:
		p.State = store.StatePending
		insert(t, s, p)
	case store.StateActive:
		active(t, s, p)
	case store.StateRetryable:
		j := active(t, s, p)
		require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateRetryable,
			ScheduledAt: time.Now().Add(time.Hour), Error: &store.AttemptError{Attempt: 1, At: time.Now(), Message: "failed"}}))
	case store.StateCompleted, store.StateCancelled, store.StateDiscarded:
		j := active(t, s, p)
		require.True(t, finish(t, s, store.Completion{ID: j.ID, Attempt: j.Attempt, State: st}))
	default:
		t.Fatalf("storetest: no such state %q", st)
	}
	j := get(t, s, p.ID)
	require.Equal(t, st, j.State)
	return j
}

// requireTransitionError requires err to be a refused transition of job id from state from.
func requireTransitionError(t testing.TB, err error, id string, from store.State) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, store.ErrInvalidTransition)
	var te *store.TransitionError
	require.True(t, errors.As(err, &te), "error %v is a *store.TransitionError", err)
	require.Equal(t, id, te.JobID)
	require.Equal(t, from, te.From)
}

// requireUnchanged requires a job to be as it was before a refused operation.
func requireUnchanged(t testing.TB, before, after *store.Job) {
	t.Helper()
	require.Equal(t, before.State, after.State)
	require.Equal(t, before.Attempt, after.Attempt)
	require.Equal(t, before.MaxAttempts, after.MaxAttempts)
	require.Equal(t, before.WorkerID, after.WorkerID)
	require.Len(t, after.Errors, len(before.Errors))
	requireTimeEqual(t, before.ScheduledAt, after.ScheduledAt)
	requireTimeEqual(t, before.CompletedAt, after.CompletedAt)
	requireTimeEqual(t, before.LeaseExpiresAt, after.LeaseExpiresAt)
}

// requireTimeEqual requires two times to be both zero or equal to the backend's precision.
func requireTimeEqual(t testing.TB, want, got time.Time, msg ...any) {
	t.Helper()
	if want.IsZero() {
		require.True(t, got.IsZero(), append([]any{"want a zero time, got %v", got}, msg...)...)
		return
	}
	require.False(t, got.IsZero(), append([]any{"want %v, got a zero time", want}, msg...)...)
	require.WithinDuration(t, want, got, precision, msg...)
}

// requireNow requires got to be a moment of this test: after it began and not after the present,
// give or take the clocks' difference. It asserts an order, not a window a slow machine could miss:
// however long the test has run, a time its store calls set lies between its start and now.
func requireNow(t testing.TB, got time.Time, what string) {
	t.Helper()
	requireNowPlus(t, 0, got, what)
}

// requireNowPlus is requireNow for got minus d: a time set d after a moment of this test (a lease
// extended by d, say).
func requireNowPlus(t testing.TB, d time.Duration, got time.Time, what string) {
	t.Helper()
	require.False(t, got.IsZero(), "%s is set", what)
	at := got.Add(-d)
	begin := testStart(t)
	require.False(t, at.Before(begin.Add(-near)), "%s (%v) is before the test began (%v)", what, got, begin)
	now := time.Now()
	require.False(t, at.After(now.Add(near)), "%s (%v) is after the present (%v)", what, got, now.Add(d))
}

// testStart returns when the test of Run that t belongs to (t itself or an ancestor) began.
func testStart(t testing.TB) time.Time {
	for name := t.Name(); name != ""; {
		if v, ok := started.Load(name); ok {
			return v.(time.Time)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			break
		}
		name = name[:i]
	}
	t.Fatalf("storetest: %s is not a test of storetest.Run", t.Name())
	return time.Time{}
}

// requireJSON requires a stored JSON value to equal want; a nil want accepts nil or JSON null.
func requireJSON(t testing.TB, want, got json.RawMessage, what string) {
	t.Helper()
	if want == nil {
		if len(got) != 0 {
			require.JSONEq(t, "null", string(got), "%s is empty", what)
		}
		return
	}
	require.JSONEq(t, string(want), string(got), what)
}

// eventually polls cond on the test's own goroutine (so cond may use require and keep results) until
// it holds, failing the test after waitTimeout.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("storetest: gave up after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queueInfo returns the ListQueues entry of queue, and false if it is not listed.
func queueInfo(t testing.TB, s store.Store, queue string) (store.QueueInfo, bool) {
	t.Helper()
	qs, err := s.ListQueues(ctx(t))
	require.NoError(t, err)
	for _, q := range qs {
		if q.Name == queue {
			return q, true
		}
	}
	return store.QueueInfo{}, false
}

// collector records the notifications a store delivers.
type collector struct {
	mu sync.Mutex
	ns []store.Notification
}

// listen subscribes a collector to s's notifier until the test ends.
func listen(t testing.TB, s store.Store) *collector {
	t.Helper()
	c := &collector{}
	unsubscribe := s.Notifier().Subscribe(c.add)
	t.Cleanup(unsubscribe)
	return c
}

func (c *collector) add(n store.Notification) {
	c.mu.Lock()
	c.ns = append(c.ns, n)
	c.mu.Unlock()
}

// matching returns the notifications received so far that satisfy f.
func (c *collector) matching(f func(store.Notification) bool) []store.Notification {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.Notification
	for _, n := range c.ns {
		if f(n) {
			out = append(out, n)
		}
	}
	return out
}

// inserts returns the NotifyInsert notifications received for queue.
func (c *collector) inserts(queue string) []store.Notification {
	return c.matching(func(n store.Notification) bool { return n.Kind == store.NotifyInsert && n.Queue == queue })
}

// settle waits until every notification published before it has been delivered to c: it inserts a
// job into a queue of its own and waits for that queue's notification, which backends deliver after
// everything published earlier.
func settle(t testing.TB, s store.Store, c *collector) {
	t.Helper()
	marker := uniq("marker")
	insert(t, s, job(marker))
	eventually(t, "the marker queue's insert notification", func() bool { return len(c.inserts(marker)) > 0 })
}

// sortedIDs returns ids sorted ascending (UUIDv7 order, the order stores list jobs in).
func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// paramIDs returns the ids of params, in order.
func paramIDs(params []*store.InsertParams) []string {
	out := make([]string, len(params))
	for i, p := range params {
		out[i] = p.ID
	}
	return out
}
