package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
)

// TestClaimTokens: on each claim path (plain, fair across tenants, rate-limited), the tokens one
// claim writes share its tag (their first 16 hex digits) and differ in the rest, and two claims'
// tags differ, so that a token names one run of one job.
func TestClaimTokens(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		job  func(p *store.InsertParams)
	}{
		{"plain", func(*store.InsertParams) {}},
		{"fair", func(p *store.InsertParams) { p.Tenant = "t1" }},
		{"rate limited", func(p *store.InsertParams) { p.RateKey, p.RateLimit = "k", &store.RateLimit{MaxActive: 1000} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := New(testdb.NewPool(t, 2), Config{Schema: testdb.Schema(t)})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			require.NoError(t, s.Migrate(ctx))
			ps := make([]*store.InsertParams, 400)
			for i := range ps {
				ps[i] = params("q")
				c.job(ps[i])
			}
			_, err = s.Insert(ctx, ps)
			require.NoError(t, err)

			seen := map[string]bool{}
			var tags []string
			for range 2 {
				jobs, err := s.Claim(ctx, claimParams("q", 200))
				require.NoError(t, err)
				require.Len(t, jobs, 200)
				hex := func(j *store.Job) string { return strings.ReplaceAll(j.ClaimToken, "-", "") }
				tag := hex(jobs[0])[:16]
				rests := map[string]bool{}
				for _, j := range jobs {
					h := hex(j)
					require.Len(t, h, 32, "token %q", j.ClaimToken)
					require.Equal(t, tag, h[:16], "one claim, one tag")
					require.False(t, seen[h], "token %s written twice", j.ClaimToken)
					seen[h] = true
					rests[h[16:]] = true
				}
				require.Len(t, rests, 200, "the random halves of one claim's tokens differ")
				tags = append(tags, tag)
			}
			require.NotEqual(t, tags[0], tags[1], "two claims, two tags")
		})
	}
}
