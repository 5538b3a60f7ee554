package redis

import (
	"context"
	"errors"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/internal/lostclaim"
	"github.com/pronto-jobs/pronto/store"
)

// A claim whose reply is lost (a timeout, a broken connection, after the call was sent) may still
// run on the server: Redis may not have read the call yet when the client gives up. Its jobs
// would then stay active, run by no one, until their leases ended, and the rescue would count an
// attempt that never ran, discarding a job that had one attempt left. The claim's tokens come
// from here (tokens), so a claim that fails without knowing whether it ran hands them to the
// store's recovery (internal/lostclaim), which returns the jobs active under them to available
// with the attempt refunded. Redis cannot say when a dropped connection's last call has run, so
// the recovery looks until the claim's lease ends, or for lostWatch at most: a call not run by
// then was never read.
const (
	lostWatch = 10 * time.Second
	// lostLease stands for a claim's lease when it has none.
	lostLease = time.Minute
)

// lostClaim is a claim whose outcome is unknown.
type lostClaim struct {
	queue  string
	tokens []string
	// until is when the recovery stops looking.
	until time.Time
}

// scriptClaimedUnder lists the queue's active jobs whose claim token is one of ARGV: id, attempt
// and token of each, in a flat array.
var scriptClaimedUnder = newReadFunc("ClaimedUnder", `
local want = {}
for i = 1, #ARGV do want[ARGV[i]] = true end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', B .. 'lease', 0, -1)) do
  local v = redis.call('HMGET', jk(id), 'token', 'attempt')
  if v[1] and want[v[1]] then
    out[#out + 1], out[#out + 2], out[#out + 3] = id, v[2] or '0', v[1]
  end
end
return out
`)

// claimOutcomeUnknown reports whether a claim call that failed with err may have run: err is
// neither Redis's answer (the call ran and failed) nor the pool's timeout (nothing was sent).
func claimOutcomeUnknown(err error) bool {
	var re goredis.Error
	return err != nil && !errors.As(err, &re) && !errors.Is(err, goredis.ErrPoolTimeout)
}

// lostClaimOf hands a claim of p with tokens, which failed with err, to the recovery when it may
// have run.
func (s *Store) lostClaimOf(p *store.ClaimParams, tokens []string, err error) {
	if !claimOutcomeUnknown(err) {
		return
	}
	lease := p.LeaseDuration
	if lease <= 0 {
		lease = lostLease
	}
	s.lost.Add(lostClaim{queue: p.Queue, tokens: tokens, until: time.Now().Add(min(lease, lostWatch))})
}

// newClaimRecovery returns the store's recovery of lost claims.
func newClaimRecovery(s *Store) *lostclaim.Recovery[lostClaim] {
	return lostclaim.New(s.settleLostClaim)
}

// settleLostClaim returns the jobs found active under c's tokens to available, refunding their
// attempts, and reports whether c is done with: its watch has ended.
func (s *Store) settleLostClaim(ctx context.Context, c lostClaim) bool {
	if !time.Now().Before(c.until) {
		return true
	}
	args := make([]any, len(c.tokens))
	for i, t := range c.tokens {
		args[i] = t
	}
	res, err := scriptClaimedUnder.Run(ctx, s.rdb, s.keys(c.queue), args...).StringSlice()
	if err != nil {
		return false
	}
	var cs []store.Completion
	for i := 0; i+2 < len(res); i += 3 {
		attempt, err := strconv.Atoi(res[i+1])
		if err != nil {
			continue
		}
		cs = append(cs, store.Completion{ID: res[i], Attempt: attempt, Token: res[i+2],
			State: store.StateAvailable, RefundAttempt: true})
	}
	if len(cs) > 0 {
		if _, err := s.Finish(ctx, cs); err != nil {
			return false
		}
		s.logger.Warn("pronto: a claim's reply was lost after it took jobs: returned them, attempts refunded",
			"queue", c.queue, "jobs", len(cs))
	}
	return false
}
