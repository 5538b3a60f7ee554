package pronto

import "time"

// PresencePeers returns how many other live clients c counts among those working queue (tests only).
func PresencePeers(c *Client, queue string) int { return c.presence.Peers(queue, time.Now()) }

// SetPresenceInterval sets how often c announces its queues; call it before Start (tests only).
func SetPresenceInterval(c *Client, every time.Duration) { c.presenceEvery = every }

// EffectiveConfig returns c's configuration with its defaults applied (tests only).
func EffectiveConfig(c *Client) Config { return c.cfg }

// SetCleanupInterval sets how often c, as leader, runs the retention cleanup; call it before Start
// (tests only).
func SetCleanupInterval(c *Client, every time.Duration) { c.cleanupEvery = every }
