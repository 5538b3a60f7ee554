package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestUniqueReplacedHolderGivesKeyUp: a job replaced under a unique key (replace and
// replace_except_schedule) whose unique states include cancelled gives the key up as it is
// cancelled, as on PostgreSQL (sqlUniqueReplace): the replacement holds the key, so the next insert
// under it meets the replacement, and the cancelled job can be retried without a conflict. Redis
// kept the key with the cancelled job, and the replacement, inserted without it, held nothing: a
// reject insert was refused naming the cancelled job, an ignore insert returned it.
func TestUniqueReplacedHolderGivesKeyUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestStore(t)
	for _, policy := range []store.OnConflict{store.ConflictReplace, store.ConflictReplaceExceptSchedule} {
		for _, claimed := range []bool{false, true} {
			q := "urep-" + string(policy)
			key := "k-" + string(policy)
			if claimed {
				key += "-active"
			}
			old := testJob(q)
			old.Kind = key
			old.UniqueKey, old.OnConflict = key, store.ConflictReject
			old.UniqueStates = []store.State{store.StateAvailable, store.StateActive, store.StateCancelled}
			_, err := s.Insert(ctx, []*store.InsertParams{old})
			require.NoError(t, err)
			if claimed {
				jobs, err := s.Claim(ctx, store.ClaimParams{Queue: q, Kinds: []string{key}, Limit: 1, WorkerID: "w", LeaseDuration: time.Hour})
				require.NoError(t, err)
				require.Len(t, jobs, 1)
			}
			repl := testJob(q)
			repl.UniqueKey, repl.OnConflict = key, policy
			_, err = s.Insert(ctx, []*store.InsertParams{repl})
			require.NoError(t, err)
			o, err := s.GetJob(ctx, old.ID)
			require.NoError(t, err)
			require.Equal(t, store.StateCancelled, o.State, "%s, claimed %v: the old job is replaced", policy, claimed)

			held, err := s.HeldUniqueKeys(ctx, []store.UniqueKeyRef{{Queue: q, Key: key}})
			require.NoError(t, err)
			require.Equal(t, repl.ID, held[store.UniqueKeyRef{Queue: q, Key: key}],
				"%s, claimed %v: the replacement holds the key, not the cancelled job it replaced", policy, claimed)
			next := testJob(q)
			next.UniqueKey, next.OnConflict = key, store.ConflictReject
			_, err = s.Insert(ctx, []*store.InsertParams{next})
			var ue *store.UniqueConflictError
			require.True(t, errors.As(err, &ue), "%s, claimed %v: a reject insert under the key is refused: %v", policy, claimed, err)
			require.Equal(t, repl.ID, ue.ExistingID, "%s, claimed %v: by the replacement", policy, claimed)
			r, err := s.RetryJob(ctx, old.ID)
			require.NoError(t, err, "%s, claimed %v: the replaced job gave its key up: it is retried without it", policy, claimed)
			require.Empty(t, r.UniqueKey)
		}
	}
}
