package maintenance

import (
	"cmp"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
	redisstore "github.com/pronto-jobs/pronto/store/redis"
)

// TestCleanupClockSkew: a leader whose clock runs an hour ahead of the store's keeps a job
// completed a moment ago under a retention of half an hour; one an hour behind deletes a job
// finished (by the store's clock) longer ago than its retention all the same. The cut-off used to
// be the leader's own clock minus the retention.
func TestCleanupClockSkew(t *testing.T) {
	ctx := context.Background()
	stores := map[string]func(t *testing.T) store.Store{
		"postgres": func(t *testing.T) store.Store {
			s, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: testdb.Schema(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			require.NoError(t, s.Migrate(ctx))
			return s
		},
		"redis": func(t *testing.T) store.Store {
			url := "redis://" + cmp.Or(os.Getenv("PRONTO_TEST_REDIS_ADDR"), "127.0.0.1:6379") + "/0?key_prefix=cleanupskew:" + uuidv7.New() + ":"
			s, err := redisstore.Open(ctx, url, redisstore.Options{})
			require.NoError(t, err, "this test needs the machine's Redis")
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			id := uuidv7.New()
			_, err := st.Insert(ctx, []*store.InsertParams{{ID: id, Kind: "a.b", Queue: "default",
				Args: []byte(`[]`), MaxAttempts: 3, State: store.StateAvailable}})
			require.NoError(t, err)
			claimed, err := st.Claim(ctx, store.ClaimParams{Queue: "default", Limit: 1, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			res, err := st.Finish(ctx, []store.Completion{{ID: id, Attempt: 1, Token: claimed[0].ClaimToken, State: store.StateCompleted}})
			require.NoError(t, err)
			require.True(t, res[0].Applied)

			m := New(Config{Store: st, ClientID: "fast", CompletedRetention: 30 * time.Minute})
			setProcessSkew(t, m, time.Hour)
			m.cleanup(ctx)
			_, err = st.GetJob(ctx, id)
			require.NoError(t, err, "a job completed a moment ago was deleted by a leader whose clock is an hour ahead")

			m = New(Config{Store: st, ClientID: "slow", CompletedRetention: time.Nanosecond})
			setProcessSkew(t, m, -time.Hour)
			m.cleanup(ctx)
			_, err = st.GetJob(ctx, id)
			require.ErrorIs(t, err, store.ErrNotFound, "a job past its retention by the store's clock was kept by a leader whose clock is an hour behind")
		})
	}
}
