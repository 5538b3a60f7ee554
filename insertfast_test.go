package pronto_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestInsertManyFast: InsertManyFast stores a batch as InsertMany does, atomically and with the
// same checks, and counts the jobs it stored: a unique job that met its key's holder under ignore is
// not counted, a batch with a bad job or a duplicate id stores nothing, the stored jobs are worked,
// and with insert middleware configured the middleware still sees every row.
func TestInsertManyFast(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		var seen atomic.Int64
		c, err := pronto.NewClient(ts.Store, &pronto.Config{})
		require.NoError(t, err)
		observed, err := pronto.NewClient(ts.Store, &pronto.Config{InsertMiddleware: []pronto.InsertMiddleware{
			func(ctx context.Context, ps []*pronto.JobInsertParams, next pronto.InsertFunc) ([]*pronto.JobRow, error) {
				rows, err := next(ctx, ps)
				seen.Add(int64(len(rows)))
				return rows, err
			}}})
		require.NoError(t, err)

		for _, size := range []int{1, 5, 50, 600} { // the stores' ways of writing a batch
			batch := make([]pronto.InsertManyParams, size)
			for i := range batch {
				batch[i] = pronto.InsertManyParams{Args: echoArgs{N: i}}
			}
			n, err := c.InsertManyFast(ctx, batch)
			require.NoError(t, err)
			require.Equal(t, size, n)
		}
		n, err := observed.InsertManyFast(ctx, []pronto.InsertManyParams{{Args: echoArgs{N: 1}}, {Args: echoArgs{N: 2}}})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.EqualValues(t, 2, seen.Load(), "the middleware saw the rows")
		const stored = 1 + 5 + 50 + 600 + 2

		// A unique job whose key is held is not counted under ignore; the batch's others are.
		once := &pronto.InsertOpts{Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueIgnore}}
		_, err = c.Insert(ctx, echoArgs{Message: "once"}, once)
		require.NoError(t, err)
		n, err = c.InsertManyFast(ctx, []pronto.InsertManyParams{{Args: echoArgs{Message: "once"}, Opts: once},
			{Args: echoArgs{Message: "new"}}, {Args: echoArgs{Message: "new too"}}})
		require.NoError(t, err)
		require.Equal(t, 2, n, "the held key's job is not counted")

		// A bad job, or an id already taken, fails the whole batch and stores nothing.
		n, err = c.InsertManyFast(ctx, []pronto.InsertManyParams{{Args: echoArgs{N: 1}}, {Args: echoArgs{}, Opts: &pronto.InsertOpts{Queue: "BAD"}}})
		require.ErrorIs(t, err, pronto.ErrInvalidArgs)
		require.Zero(t, n)
		taken, err := c.Insert(ctx, echoArgs{N: 7}, nil)
		require.NoError(t, err)
		dup := make([]pronto.InsertManyParams, 20)
		for i := range dup {
			dup[i] = pronto.InsertManyParams{Args: echoArgs{N: 100 + i}}
		}
		dup[10].Opts = &pronto.InsertOpts{ID: taken.ID}
		n, err = c.InsertManyFast(ctx, dup)
		require.ErrorIs(t, err, pronto.ErrDuplicate)
		require.Zero(t, n)

		// A queue's bound holds for it as for InsertMany: a batch past it stores nothing.
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bounded", 15))
		bounded := make([]pronto.InsertManyParams, 20)
		for i := range bounded {
			bounded[i] = pronto.InsertManyParams{Args: echoArgs{N: i}, Opts: &pronto.InsertOpts{Queue: "bounded"}}
		}
		n, err = c.InsertManyFast(ctx, bounded)
		require.ErrorIs(t, err, pronto.ErrQueueFull)
		require.Zero(t, n)
		n, err = c.InsertManyFast(ctx, bounded[:15])
		require.NoError(t, err)
		require.Equal(t, 15, n)

		// What it stored is there, and is worked.
		want := stored + 1 + 2 + 1 // the batches, the unique holder, the two new jobs, the taken id
		// Distinct jobs are counted: fastConfig's short lease may have a job rescued and run again on a
		// loaded machine, which is no defect of InsertManyFast's.
		var worked sync.Map
		var done atomic.Int64
		workers := pronto.NewWorkers()
		pronto.AddWorker(workers, pronto.WorkFunc(func(_ context.Context, j *pronto.Job[echoArgs]) error {
			if _, again := worked.LoadOrStore(j.ID, true); !again {
				done.Add(1)
			}
			return nil
		}))
		w := startClient(t, ts.Store, fastConfig(workers, defaultQueue(20)))
		if !assert.Eventually(t, func() bool { return done.Load() == int64(want) }, 30*time.Second, 10*time.Millisecond) {
			// Seen once in CI (SQLite, none worked in 30 s) and never reproduced: say where the jobs were.
			qs, err := w.QueueList(ctx)
			t.Fatalf("worked %d of %d; queues %+v (%v)", done.Load(), want, qs, err)
		}
	})
}
