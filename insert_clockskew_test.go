package pronto_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// TestInsertDelayClockSkew: a client whose process clock is an hour fast or slow schedules a job
// inserted with a 10 min Delay 10 min after the store's now, through every insert path that takes
// a Delay. Before, the delay counted from the process's clock: the job was due an hour late (fast)
// or at once (slow).
func TestInsertDelayClockSkew(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindRedis}, func(t *testing.T, ts *testStore) {
		for _, skew := range []time.Duration{time.Hour, -time.Hour} {
			t.Run(skew.String(), func(t *testing.T) {
				ctx := context.Background()
				c, err := pronto.NewClient(ts.reopen(t), &pronto.Config{})
				require.NoError(t, err)
				pronto.SetProcessSkew(t, c, skew)
				const delay = 10 * time.Minute
				opts := &pronto.InsertOpts{Delay: delay}
				ojsOpts := pronto.InsertOpts{Delay: delay}

				type inserted struct {
					path string
					id   string
				}
				var got []inserted
				add := func(path string, rows ...*pronto.JobRow) {
					for _, r := range rows {
						got = append(got, inserted{path, r.ID})
					}
				}
				row, err := c.Insert(ctx, echoArgs{Message: "one"}, opts)
				require.NoError(t, err)
				add("Insert", row)
				rows, err := c.InsertMany(ctx, []pronto.InsertManyParams{{Args: echoArgs{Message: "a"}, Opts: opts}, {Args: echoArgs{Message: "b"}, Opts: opts}})
				require.NoError(t, err)
				add("InsertMany", rows...)
				rows, err = c.InsertRaw(ctx, []pronto.RawJob{{Kind: "test.echo", Args: json.RawMessage(`[{"message":"raw"}]`), Opts: ojsOpts}})
				require.NoError(t, err)
				add("InsertRaw", rows...)
				rows, err = c.InsertOJS(ctx, []pronto.OJSJob{{Kind: "test.echo", Args: json.RawMessage(`[{"message":"ojs"}]`), Opts: ojsOpts}})
				require.NoError(t, err)
				add("InsertOJS", rows...)
				wf, err := c.WorkflowInsert(ctx, pronto.NewWorkflow("skewed").Add("first", echoArgs{Message: "wf"}, opts))
				require.NoError(t, err)
				add("WorkflowInsert", wf.Jobs["first"])
				if pg, ok := ts.Store.(*postgres.Store); ok {
					tx, err := pg.Pool().Begin(ctx)
					require.NoError(t, err)
					row, err := c.InsertTx(ctx, tx, echoArgs{Message: "tx"}, opts)
					require.NoError(t, err)
					require.NoError(t, tx.Commit(ctx))
					add("InsertTx", row)
				}
				// InsertManyFast returns no rows: its jobs are found by their ids.
				fastIDs := make([]pronto.InsertManyParams, 10)
				for i := range fastIDs {
					o := *opts
					o.ID = uuidv7.New()
					fastIDs[i] = pronto.InsertManyParams{Args: echoArgs{Message: "fast"}, Opts: &o}
				}
				n, err := c.InsertManyFast(ctx, fastIDs)
				require.NoError(t, err)
				require.Equal(t, len(fastIDs), n)
				for _, j := range fastIDs {
					got = append(got, inserted{"InsertManyFast", j.Opts.ID})
				}

				storeNow, err := ts.Store.(storeNower).StoreNow(ctx)
				require.NoError(t, err)
				want := storeNow.Add(delay)
				for _, g := range got {
					j, err := c.JobGet(ctx, g.id)
					require.NoError(t, err, g.path)
					assert.Equal(t, pronto.StateScheduled, j.State, g.path)
					assert.WithinDuration(t, want, j.ScheduledAt, time.Minute,
						"%s: due %s, the store's now + 10 min is %s (process clock %s off)", g.path, j.ScheduledAt, want, skew)
				}
			})
		}
	})
}

// TestInsertDelayReadsStoreClockOnlyForDelays: inserts without a Delay never read the store's
// clock; delayed ones read it once and then use the offset (concurrent ones too), and their due
// time counts from the store's clock; an offset within the 1 s tolerance is not applied.
func TestInsertDelayReadsStoreClockOnlyForDelays(t *testing.T) {
	ctx := context.Background()
	s := &clockStore{Store: memory.New(), off: 2 * time.Hour}
	t.Cleanup(func() { _ = s.Close() })
	c, err := pronto.NewClient(s, &pronto.Config{})
	require.NoError(t, err)

	for range 5 {
		_, err := c.Insert(ctx, echoArgs{Message: "now"}, nil)
		require.NoError(t, err)
	}
	_, err = c.InsertMany(ctx, []pronto.InsertManyParams{{Args: echoArgs{Message: "at"}, Opts: &pronto.InsertOpts{ScheduledAt: time.Now().Add(time.Minute)}}})
	require.NoError(t, err)
	require.Zero(t, s.reads.Load(), "an insert without a Delay read the store's clock")

	var wg sync.WaitGroup
	rows := make([]*pronto.JobRow, 8)
	for i := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row, err := c.Insert(ctx, echoArgs{Message: "later"}, &pronto.InsertOpts{Delay: time.Minute})
			assert.NoError(t, err)
			rows[i] = row
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(1), s.reads.Load(), "concurrent delayed inserts read the store's clock more than once")
	for _, r := range rows {
		require.NotNil(t, r)
		assert.WithinDuration(t, time.Now().Add(2*time.Hour+time.Minute), r.ScheduledAt, 10*time.Second)
	}

	// Within the tolerance the process's clock is kept, exactly.
	near := &clockStore{Store: memory.New(), off: 500 * time.Millisecond}
	t.Cleanup(func() { _ = near.Close() })
	c2, err := pronto.NewClient(near, &pronto.Config{})
	require.NoError(t, err)
	before := time.Now()
	row, err := c2.Insert(ctx, echoArgs{Message: "near"}, &pronto.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	assert.False(t, row.ScheduledAt.Before(before.Add(time.Hour)), "due %s", row.ScheduledAt)
	assert.True(t, row.ScheduledAt.Before(time.Now().Add(time.Hour+400*time.Millisecond)), "due %s: a 500 ms offset was applied", row.ScheduledAt)
}
