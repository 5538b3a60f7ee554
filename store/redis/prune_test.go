package redis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/storetest"
)

// TestPruneKeepsWaitedParents: a discarded workflow job that a pending callback still waits for is
// neither a prune candidate nor deleted, by PruneDiscarded or DeleteDiscarded, until the callback
// is released; in both workflow layouts (tagged by its queue, and spanning queues on a single node,
// where the callback is found through the id index).
func TestPruneKeepsWaitedParents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	for name, kidQueue := range map[string]string{"queue": "wp", "span": "wp-kids"} {
		t.Run(name, func(t *testing.T) {
			wf := uuidv7.New()
			g1, g2 := storetest.WorkflowJob(wf, "wp"), storetest.WorkflowJob(wf, "wp")
			g1.Kind, g2.Kind = "g1-"+name, "g2-"+name
			done := storetest.WorkflowCallback(wf, kidQueue, store.RunOnComplete, g1, g2)
			wfInsert(t, s, wf, g1, g2, done)
			wfFinish(t, s, g1, store.StateDiscarded, "")
			wfState(t, s, store.StatePending, done)
			all := store.PruneParams{Queues: []string{"wp"}, Before: time.Now().Add(time.Minute), Limit: 100}

			cands, err := s.PruneCandidates(ctx, all)
			require.NoError(t, err)
			require.Empty(t, cands, "the parent the callback waits for is no candidate")
			got, err := s.PruneDiscarded(ctx, all)
			require.NoError(t, err)
			require.Empty(t, got)
			j, err := s.GetJob(ctx, g1.ID)
			require.NoError(t, err)
			got, err = s.DeleteDiscarded(ctx, []*store.Job{j})
			require.NoError(t, err)
			require.Empty(t, got)
			wfState(t, s, store.StateDiscarded, g1)

			wfFinish(t, s, g2, store.StateCompleted, `2`)
			wfReleased(t, s, done, `[null, 2]`)
			cands, err = s.PruneCandidates(ctx, all)
			require.NoError(t, err)
			require.Equal(t, []string{g1.ID}, jobIDs(cands), "once released, its parents may go")
			got, err = s.DeleteDiscarded(ctx, cands)
			require.NoError(t, err)
			require.Equal(t, map[string]int{"wp": 1}, got)
			_, err = s.GetJob(ctx, g1.ID)
			require.ErrorIs(t, err, store.ErrNotFound)
		})
	}
}
