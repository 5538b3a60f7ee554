package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// requireAdminWritesRefused checks that every admin write of c is refused with the halt's error,
// and that none of them wrote: job id is still available, its queue not paused.
func requireAdminWritesRefused(t *testing.T, c *pronto.Client, id, queue string) {
	t.Helper()
	ctx := context.Background()
	for name, write := range map[string]func() error{
		"cancel":   func() error { _, err := c.JobCancel(ctx, id); return err },
		"retry":    func() error { _, err := c.JobRetry(ctx, id); return err },
		"activate": func() error { _, err := c.JobActivate(ctx, id); return err },
		"run now":  func() error { _, err := c.JobRunNow(ctx, id); return err },
		"priority": func() error { _, _, err := c.JobSetPriority(ctx, id, 1); return err },
		"delete":   func() error { _, err := c.JobDelete(ctx, id); return err },
		"retry with changes": func() error {
			_, err := c.JobRetryWith(ctx, id, pronto.RetryOverride{Queue: "elsewhere"})
			return err
		},
		"workflow cancel": func() error { _, err := c.WorkflowCancel(ctx, uuidv7.New()); return err },
		"pause":           func() error { return c.QueuePause(ctx, queue) },
		"resume":          func() error { return c.QueueResume(ctx, queue) },
	} {
		err := write()
		require.Error(t, err, name)
		requireSchemaRefusal(t, err)
	}
	got, err := c.JobGet(ctx, id)
	require.NoError(t, err, "the job was deleted after the halt")
	require.Equal(t, pronto.StateAvailable, got.State, "the job was written after the halt")
	qs, err := c.QueueList(ctx)
	require.NoError(t, err)
	for _, q := range qs {
		require.False(t, q.Name == queue && q.Paused, "the queue was paused after the halt")
	}
}

// A halted client refuses admin writes (cancel, retry, activate, run now, delete, pause, resume)
// with the error it gives inserts and fetches, writing nothing: an older binary must not write in
// the newer schema's rows. Before, they were written.
func TestHaltedClientRefusesAdminWrites(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c := startHaltClient(t, ts, nil)
		// A queue this client does not work: the job stays available.
		j, err := c.Insert(ctx, schemaWatchArgs{N: 1}, &pronto.InsertOpts{Queue: "admin-halt"})
		require.NoError(t, err)
		haltBySchema(t, ts, c)
		requireAdminWritesRefused(t, c, j.ID, "admin-halt")
	})
}

// A client never started (insert-only: its watch never runs) halts at a write once incompatible
// migrations were applied: it reads them itself, at most once per watch interval, at the write that
// comes due, and from then on refuses admin writes as a started client does. Before, it was never
// halted and wrote on.
func TestUnstartedClientHaltsAtAdminWrite(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		pronto.SetSchemaWatchEvery(c, 20*time.Millisecond)
		j, err := c.Insert(ctx, schemaWatchArgs{N: 1}, &pronto.InsertOpts{Queue: "admin-unstarted"})
		require.NoError(t, err)
		require.NoError(t, c.QueuePause(ctx, "admin-unstarted-other"), "a compatible schema refuses nothing")

		recordNewerMigration(t, ts, "future_incompatible", false)
		require.Eventually(t, func() bool {
			return errors.Is(c.QueueResume(ctx, "admin-unstarted-other"), store.ErrSchemaTooNew)
		}, 15*time.Second, 5*time.Millisecond, "the unstarted client never halted")
		requireSchemaRefusal(t, c.SchemaIncompatible())
		requireAdminWritesRefused(t, c, j.ID, "admin-unstarted")
	})
}

// An insert-only client (never started, so no watch) halts at an insert once incompatible
// migrations were applied, as at an admin write: it reads them itself at most once per watch
// interval, then refuses the insert, storing nothing. Before, it kept inserting rows in its own
// shape into the newer schema until an admin write happened to halt it.
func TestInsertOnlyClientHaltsAtInsert(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindSQLite, kindPostgres}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		pronto.SetSchemaWatchEvery(c, 20*time.Millisecond)
		const queue = "insert-only-halt"
		_, err = c.Insert(ctx, schemaWatchArgs{N: 1}, &pronto.InsertOpts{Queue: queue})
		require.NoError(t, err, "a compatible schema refuses nothing")

		recordNewerMigration(t, ts, "future_incompatible", false)
		var refused error
		require.Eventually(t, func() bool {
			_, refused = c.Insert(ctx, schemaWatchArgs{N: 2}, &pronto.InsertOpts{Queue: queue})
			return refused != nil
		}, 15*time.Second, 5*time.Millisecond, "the insert-only client never halted")
		requireSchemaRefusal(t, refused)
		requireSchemaRefusal(t, c.SchemaIncompatible())

		// Inserted are the first job and those before the check came due, never the refused one.
		jobs, err := c.JobList(ctx, &pronto.JobListParams{Queues: []string{queue}, Limit: 1000})
		require.NoError(t, err)
		inserted := len(jobs.Jobs)
		_, err = c.Insert(ctx, schemaWatchArgs{N: 3}, &pronto.InsertOpts{Queue: queue})
		requireSchemaRefusal(t, err)
		jobs, err = c.JobList(ctx, &pronto.JobListParams{Queues: []string{queue}, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, jobs.Jobs, inserted, "a refused insert stored a job")
	})
}
