package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestStoreTimeClockSkew: Client.StoreTime is the store's now whatever the process's clock says,
// also when that clock jumps while the client runs (an NTP step): the cached offset is read again
// at once, not used for the rest of its minute.
func TestStoreTimeClockSkew(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindRedis}, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.reopen(t), &pronto.Config{})
		require.NoError(t, err)
		for _, skew := range []time.Duration{time.Hour, -time.Hour, 5 * time.Second} {
			pronto.SetProcessSkew(t, c, skew)
			before, err := ts.Store.(storeNower).StoreNow(ctx)
			require.NoError(t, err)
			got := c.StoreTime(ctx)
			after, err := ts.Store.(storeNower).StoreNow(ctx)
			require.NoError(t, err)
			// Right to within the 1 s tolerance, plus the test's own latency between the readings.
			require.False(t, got.Before(before.Add(-time.Second)) || got.After(after.Add(time.Second)),
				"process clock %s off: StoreTime %s, the store's clock between %s and %s", skew, got, before, after)
		}
	})
}
