package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// TestLimitedKeysOneQueryPerClaim: a claim with OnLimited (every claim of a client with a rate-limit
// subscriber; the OJS server always has one) asks which of the full keys it read still have jobs
// waiting in one query, whatever their number, inside its write transaction; a claim without
// OnLimited does not ask at all.
func TestLimitedKeysOneQueryPerClaim(t *testing.T) {
	ctx := context.Background()
	for _, nKeys := range []int{1, 200} {
		t.Run(fmt.Sprintf("%d full keys", nKeys), func(t *testing.T) {
			s := openTest(t)
			var ps []*store.InsertParams
			for i := 0; i < nKeys; i++ {
				key := fmt.Sprintf("k%04d", i)
				require.NoError(t, s.SetRateLimit(ctx, key, store.RateLimit{MaxActive: 1}))
				for j := 0; j < 3; j++ {
					ps = append(ps, &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q",
						Args: json.RawMessage(`{}`), State: store.StateAvailable, MaxAttempts: 3, RateKey: key})
				}
			}
			_, err := s.Insert(ctx, ps)
			require.NoError(t, err)
			p := store.ClaimParams{Queue: "q", Limit: 100, WorkerID: "w", LeaseDuration: time.Minute}
			for { // every key full (one active), its other jobs held
				jobs, err := s.Claim(ctx, p)
				require.NoError(t, err)
				if len(jobs) == 0 {
					break
				}
			}

			before := keysWaitingQueries.Load()
			jobs, err := s.Claim(ctx, p)
			require.NoError(t, err)
			require.Empty(t, jobs)
			require.Equal(t, before, keysWaitingQueries.Load(), "a claim nobody listens to asks nothing")

			var hits []store.LimitHit
			p.OnLimited = func(h []store.LimitHit) { hits = append(hits, h...) }
			before = keysWaitingQueries.Load()
			jobs, err = s.Claim(ctx, p)
			require.NoError(t, err)
			require.Empty(t, jobs)
			require.Equal(t, before+1, keysWaitingQueries.Load(), "one query for all the full keys")
			require.Len(t, hits, nKeys, "every full key with jobs waiting is reported")
			for _, h := range hits {
				require.False(t, h.HasRoom, "%s", h.Key)
				require.Equal(t, store.LimitConcurrency, h.Strategy, "%s", h.Key)
			}
		})
	}
}
