package pronto_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// partnerLimitedArgs is a kind whose default insert options put it under the limit of
// "partner-api", stored with the insert.
type partnerLimitedArgs struct{}

func (partnerLimitedArgs) Kind() string { return "ratelimit.partner" }
func (partnerLimitedArgs) InsertOpts() pronto.InsertOpts {
	return pronto.InsertOpts{RateKey: "partner-api", RateLimit: &pronto.RateLimit{MaxActive: 50}}
}

// TestKindDefaultLimitKeepsOtherKeysLimit: a job of a kind whose defaults give RateKey
// "partner-api" with its limit, inserted with another RateKey (to follow the limit stored there),
// follows that key's limit and leaves it as it was; inserted with no key (or the default key), it
// stores the default limit under the default key. The kind's limit used to overwrite the other key's.
func TestKindDefaultLimitKeepsOtherKeysLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.RateLimitSet(ctx, "sandbox-api", pronto.RateLimit{MaxActive: 1}))
		row, err := c.Insert(ctx, partnerLimitedArgs{}, &pronto.InsertOpts{RateKey: "sandbox-api"})
		require.NoError(t, err)
		require.Equal(t, "sandbox-api", row.RateKey)
		info, err := c.RateLimitGet(ctx, "sandbox-api")
		require.NoError(t, err)
		require.Equal(t, 1, info.Limit.MaxActive, "sandbox-api's limit was replaced by the kind's default limit, meant for partner-api")

		row, err = c.Insert(ctx, partnerLimitedArgs{}, nil)
		require.NoError(t, err)
		require.Equal(t, "partner-api", row.RateKey)
		info, err = c.RateLimitGet(ctx, "partner-api")
		require.NoError(t, err)
		require.Equal(t, 50, info.Limit.MaxActive, "the kind's default limit is stored under its default key")
	})
}
