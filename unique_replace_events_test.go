package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestUniqueReplaceReportsCancelOnce: a job a unique replace cancels is reported by exactly one
// EventCancelled: by the inserting client for a waiting job (Insert and InsertMany alike), by the
// run for a job running on this client.
func TestUniqueReplaceReportsCancelOnce(t *testing.T) {
	forEachStoreOf(t, allStores, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		started := make(chan string, 1)
		ws := pronto.NewWorkers()
		pronto.AddWorker(ws, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error {
			started <- j.ID
			<-ctx.Done()
			return ctx.Err()
		}))
		c, err := pronto.NewClient(ts.Store, &pronto.Config{Workers: ws, Queues: defaultQueue(1)})
		require.NoError(t, err)
		events, unsub := c.Subscribe(pronto.EventCancelled)
		defer unsub()
		startBuilt(t, c)

		replace := &pronto.InsertOpts{Unique: &pronto.UniqueOpts{ByArgs: true, OnConflict: pronto.UniqueReplace}}
		running, err := c.Insert(ctx, echoArgs{Message: "running"}, replace)
		require.NoError(t, err)
		select {
		case id := <-started:
			require.Equal(t, running.ID, id)
		case <-time.After(15 * time.Second):
			t.Fatal("the job never started")
		}
		_, err = c.Insert(ctx, echoArgs{Message: "running"}, replace)
		require.NoError(t, err)

		idle := &pronto.InsertOpts{Queue: "replace-idle", Unique: replace.Unique}
		waiting, err := c.Insert(ctx, echoArgs{Message: "waiting"}, idle)
		require.NoError(t, err)
		batch, err := c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: echoArgs{Message: "waiting"}, Opts: idle},
			{Args: echoArgs{Message: "waiting"}, Opts: idle},
		})
		require.NoError(t, err)
		require.Equal(t, pronto.StateCancelled, batch[0].State, "the batch's earlier job is returned cancelled")

		want := map[string]int{running.ID: 1, waiting.ID: 1, batch[0].ID: 1}
		got := map[string]int{}
		// A second report would come at once: wait a little past the last expected one.
		for quiet := time.After(15 * time.Second); ; {
			select {
			case ev := <-events:
				got[ev.Job.ID]++
				require.Equal(t, pronto.StateCancelled, ev.Job.State)
				if len(got) == len(want) {
					quiet = time.After(300 * time.Millisecond)
				}
				continue
			case <-quiet:
			}
			break
		}
		require.Equal(t, want, got)
	})
}
