package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestInsertUniquePeriodAndExpiryClockSkew: a client whose process clock is an hour fast or slow
// counts a unique hold's Period, and judges whether an ExpiresAt is already past, by the store's
// clock, as the store judges both. Before, both used the process's clock: an hour slow, a 10 min
// hold had ended 50 min before it was stored (the same job inserted again was not held back) and
// an expiry 30 min before the store's now was taken; an hour fast, the hold lasted 70 min and an
// expiry 30 min ahead was refused as past.
func TestInsertUniquePeriodAndExpiryClockSkew(t *testing.T) {
	forEachStoreOf(t, []storeKind{kindPostgres, kindRedis}, func(t *testing.T, ts *testStore) {
		for _, skew := range []time.Duration{time.Hour, -time.Hour} {
			t.Run(skew.String(), func(t *testing.T) {
				ctx := context.Background()
				c, err := pronto.NewClient(ts.reopen(t), &pronto.Config{})
				require.NoError(t, err)
				pronto.SetProcessSkew(t, c, skew)
				storeNow := func() time.Time {
					t.Helper()
					now, err := ts.Store.(interface {
						StoreNow(context.Context) (time.Time, error)
					}).StoreNow(ctx)
					require.NoError(t, err)
					return now
				}

				const period = 10 * time.Minute
				queue := "skew-unique-" + map[bool]string{true: "fast", false: "slow"}[skew > 0]
				opts := &pronto.InsertOpts{Queue: queue, Unique: &pronto.UniqueOpts{ByQueue: true, ByArgs: true, Period: period,
					OnConflict: pronto.UniqueIgnore}}
				before := storeNow()
				first, err := c.Insert(ctx, echoArgs{Message: "held"}, opts)
				require.NoError(t, err)
				after := storeNow()
				// Within the 1 s the client's clock offset may be off, and the insert's own time.
				require.False(t, first.UniqueUntil.Before(before.Add(period-2*time.Second)) ||
					first.UniqueUntil.After(after.Add(period+2*time.Second)),
					"unique hold ends %s, want %s after the store's now (%s..%s)", first.UniqueUntil, period, before, after)
				again, err := c.Insert(ctx, echoArgs{Message: "held"}, opts)
				require.NoError(t, err)
				require.Equal(t, first.ID, again.ID, "the same job inserted again within the hold was stored anew")
				require.True(t, again.Duplicate, "the second insert is not reported a duplicate")

				// An expiry 30 min after the store's now is taken; one 30 min before it is refused.
				ahead := storeNow().Add(30 * time.Minute)
				row, err := c.Insert(ctx, echoArgs{Message: "expires"}, &pronto.InsertOpts{Queue: queue, ExpiresAt: ahead})
				require.NoError(t, err, "an expiry 30 min ahead of the store's clock refused")
				require.True(t, row.ExpiresAt.Equal(ahead.Truncate(time.Microsecond)) || row.ExpiresAt.Sub(ahead).Abs() < time.Millisecond,
					"expires_at %s, want %s", row.ExpiresAt, ahead)
				_, err = c.Insert(ctx, echoArgs{Message: "expired"}, &pronto.InsertOpts{Queue: queue, ExpiresAt: storeNow().Add(-30 * time.Minute)})
				require.ErrorIs(t, err, pronto.ErrInvalidArgs, "an expiry 30 min behind the store's clock taken")
				require.ErrorContains(t, err, "already past")
			})
		}
	})
}
