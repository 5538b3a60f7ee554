package pronto

import (
	"context"
	"time"
)

// PresencePeers returns how many other live clients c counts among those working queue (tests only).
func PresencePeers(c *Client, queue string) int { return c.presence.Peers(queue, time.Now()) }

// SetPresenceInterval sets how often c announces its queues; call it before Start (tests only).
func SetPresenceInterval(c *Client, every time.Duration) { c.presenceEvery = every }

// EffectiveConfig returns c's configuration with its defaults applied (tests only).
func EffectiveConfig(c *Client) Config { return c.cfg }

// SetCleanupInterval sets how often c, as leader, runs the retention cleanup; call it before Start
// (tests only).
func SetCleanupInterval(c *Client, every time.Duration) { c.cleanupEvery = every }

// SetThrottleExpiryInterval sets how often c, as leader without noisy-neighbour checks, releases
// expired tenant throttles; call it before Start (tests only).
func SetThrottleExpiryInterval(c *Client, every time.Duration) { c.throttleExpiryEvery = every }

// CheckNoisyNeighbors runs one noisy-neighbour check of c now, as its leader's task would (tests
// only): the noisy tenants with their reason, and the tenants throttled and released.
func CheckNoisyNeighbors(ctx context.Context, c *Client) (noisy map[string]string, throttled, released []string, err error) {
	out, err := c.checkNoisyNeighbors(ctx)
	if out == nil {
		return nil, nil, nil, err
	}
	return out.noisy, out.throttled, out.released, err
}

// SetNoisyClock replaces the clock of c's noisy-neighbour checks and throttles (tests only).
func SetNoisyClock(c *Client, now func() time.Time) {
	c.noisy.mu.Lock()
	c.noisy.now = now
	c.noisy.mu.Unlock()
}

// HeardCancel reports whether c remembers the cancellation of job id's run under token, heard
// before c registered that run.
func HeardCancel(c *Client, id, token string) bool { return c.cancels.Has(id, token, time.Now()) }

// CronHeldPasses returns how many of c's cron leader passes maintenance mode held (tests only).
func CronHeldPasses(c *Client) int64 { return c.cronHeld.Load() }

// RefusedOutcome reports whether c keeps job id's run under token as one whose outcome the store
// refused before c heard of a cancel (tests only).
func RefusedOutcome(c *Client, id, token string) bool {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	r, ok := c.refused[token]
	return ok && r.row.ID == id
}

// SetTenantCountRecount sets how often c rereads a limited tenant's job counts (tests only): a long
// interval makes the client's own counting of its inserts all a test sees.
func SetTenantCountRecount(c *Client, every time.Duration) {
	c.tg.mu.Lock()
	c.tg.countEvery = every
	c.tg.mu.Unlock()
}

// RereadLimits makes c read the queue bounds and the tenants' enqueue limits at its next insert, as
// it does about every second (tests only): another client's change is then seen at once.
func RereadLimits(c *Client) {
	c.bp.mu.Lock()
	c.bp.boundsAt = time.Time{}
	c.bp.mu.Unlock()
	c.tg.mu.Lock()
	c.tg.limitsAt = time.Time{}
	c.tg.mu.Unlock()
}
