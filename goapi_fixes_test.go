package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// goFixArgs is a job whose worker is decided per test.
type goFixArgs struct {
	N int `json:"n"`
}

func (goFixArgs) Kind() string { return "gofix.plain" }

// goFixTenantArgs carries a default tenant for its kind.
type goFixTenantArgs struct{}

func (goFixTenantArgs) Kind() string { return "gofix.tenant" }
func (goFixTenantArgs) InsertOpts() pronto.InsertOpts {
	return pronto.InsertOpts{Tenant: "acme", Priority: 7}
}

// goFixPermError is an application error type a retry policy can list as non-retryable.
type goFixPermError struct{}

func (*goFixPermError) Error() string { return "permanent" }

// TestGoKindDefaultTenant: a kind's default InsertOpts (JobArgsWithInsertOpts) apply field by field
// when the caller gives none, its Tenant too (it was dropped).
func TestGoKindDefaultTenant(t *testing.T) {
	ts := newTestStore(t, kindMemory)
	c, err := pronto.NewClient(ts.Store, &pronto.Config{})
	require.NoError(t, err)
	j, err := c.Insert(context.Background(), goFixTenantArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, 7, j.Priority, "the kind's default priority applies")
	require.Equal(t, "acme", j.Tenant, "the kind's default tenant must apply too (InsertOpts: zero fields take the kind's defaults)")
}

// TestGoCompleteTxRemoveCompletedEvent: CompleteTx on a RemoveCompleted queue removes the job and
// reports its completion (Config.RemoveCompleted: events see every completion, CompleteTx included).
// PostgreSQL removed it and reported nothing; SQLite reported it and kept it.
func TestGoCompleteTxRemoveCompletedEvent(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindSQLite}, func(t *testing.T, ts *testStore) {
		createEffects(t, ts)
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, effectWorker(ts))
		cfg := fastConfig(workers, map[string]pronto.QueueConfig{pronto.DefaultQueue: {MaxWorkers: 2, RemoveCompleted: true}})
		c := startClient(t, ts.Store, cfg)
		events, unsub := c.Subscribe(pronto.EventCompleted, pronto.EventCancelled, pronto.EventFailed, pronto.EventDiscarded)
		defer unsub()
		j, err := c.Insert(context.Background(), effectArgs{}, nil)
		require.NoError(t, err)
		select {
		case ev := <-events:
			require.Equal(t, pronto.EventCompleted, ev.Kind, "event %s for job %s", ev.Kind, ev.Job.ID)
			require.Equal(t, j.ID, ev.Job.ID)
			_, gerr := c.JobGet(context.Background(), j.ID)
			require.ErrorIs(t, gerr, pronto.ErrNotFound, "RemoveCompleted applies to CompleteTx completions (Config.RemoveCompleted doc)")
		case <-time.After(15 * time.Second):
			require.Equal(t, 1, countEffects(t, ts, j.ID), "the work committed")
			_, gerr := c.JobGet(context.Background(), j.ID)
			t.Fatalf("no completed event for a job completed with CompleteTx on a RemoveCompleted queue (JobGet: %v)", gerr)
		}
	})
}

// TestGoNonRetryablePrefix: a retry policy's non_retryable_errors entry ending in ".*" matches by
// prefix for Go workers as it does for OJS workers (RemoteNack); Go workers matched only exactly.
func TestGoNonRetryablePrefix(t *testing.T) {
	ts := newTestStore(t, kindMemory)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[goFixArgs]) error {
		return &goFixPermError{}
	}))
	c := startClient(t, ts.Store, fastConfig(workers, defaultQueue(2)))
	j, err := c.Insert(context.Background(), goFixArgs{}, &pronto.InsertOpts{
		RetryPolicy: &pronto.RetryPolicy{MaxAttempts: 5, NonRetryableErrors: []string{"pronto_test.*"}}})
	require.NoError(t, err)
	var last *pronto.JobRow
	require.Eventually(t, func() bool {
		last, err = c.JobGet(context.Background(), j.ID)
		require.NoError(t, err)
		return len(last.Errors) > 0 && last.State != pronto.StateActive
	}, 15*time.Second, 10*time.Millisecond)
	require.Equal(t, "pronto_test.goFixPermError", last.Errors[0].Type)
	require.True(t, pronto.MatchesErrorType([]string{"pronto_test.*"}, last.Errors[0].Type), "the matcher OJS workers get says it matches")
	require.Equal(t, pronto.StateDiscarded, last.State, "an error whose type matches a non_retryable_errors prefix entry must not be retried (ojs-retry.md 6.2)")
}

// TestGoRetryWithKeepsPriority: JobRetryWith inserts "the old one" with its priority, which already
// holds its tenant's boost: the boost is not added again (it was, on every retry). A priority given
// in the override is a base priority, boosted once.
func TestGoRetryWithKeepsPriority(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, kindMemory)
	c, err := pronto.NewClient(ts.Store, &pronto.Config{})
	require.NoError(t, err)
	require.NoError(t, c.TenantSetPriorityBoost(ctx, "acme", 10))
	j, err := c.Insert(ctx, goFixArgs{}, &pronto.InsertOpts{Tenant: "acme", Priority: 5})
	require.NoError(t, err)
	require.Equal(t, 15, j.Priority)
	_, err = c.JobCancel(ctx, j.ID)
	require.NoError(t, err)
	n, err := c.JobRetryWith(ctx, j.ID, pronto.RetryOverride{})
	require.NoError(t, err)
	require.Equal(t, 15, n.Priority, "a retry is not a new submission: the job keeps its priority")
	got, err := c.JobGet(ctx, n.ID)
	require.NoError(t, err)
	require.Equal(t, 15, got.Priority)

	_, err = c.JobCancel(ctx, n.ID)
	require.NoError(t, err)
	n, err = c.JobRetryWith(ctx, n.ID, pronto.RetryOverride{})
	require.NoError(t, err)
	require.Equal(t, 15, n.Priority, "a second retry keeps it too")

	_, err = c.JobCancel(ctx, n.ID)
	require.NoError(t, err)
	base := 2
	n, err = c.JobRetryWith(ctx, n.ID, pronto.RetryOverride{Priority: &base})
	require.NoError(t, err)
	require.Equal(t, 12, n.Priority, "an override's priority is boosted once, as an insert's")
}

// TestGoInsertTxRefusedKeepsTxUsable: an InsertTx refused inside the application's transaction (a
// duplicate id) leaves that transaction usable on PostgreSQL, as InsertSQLTx does on SQLite: the
// application's own writes before and after it commit. A failed statement aborted all of it (25P02).
func TestGoInsertTxRefusedKeepsTxUsable(t *testing.T) {
	ctx := context.Background()
	ts := newTestStore(t, kindPostgres)
	c, err := pronto.NewClient(ts.Store, &pronto.Config{})
	require.NoError(t, err)
	existing, err := c.Insert(ctx, goFixArgs{N: 1}, nil)
	require.NoError(t, err)

	tx, err := ts.Store.(*postgres.Store).Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // no-op once committed
	before, err := c.InsertTx(ctx, tx, goFixArgs{N: 2}, nil)
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, goFixArgs{N: 3}, &pronto.InsertOpts{ID: existing.ID})
	require.ErrorIs(t, err, pronto.ErrDuplicate)
	after, err := c.InsertTx(ctx, tx, goFixArgs{N: 4}, nil)
	require.NoError(t, err, "the application's transaction is still usable")
	require.NoError(t, tx.Commit(ctx))
	for _, id := range []string{before.ID, after.ID} {
		_, err := c.JobGet(ctx, id)
		require.NoError(t, err)
	}
}
