package pronto

import (
	"context"

	"github.com/pronto-jobs/pronto/store"
)

// maintenanceHeld reports whether maintenance mode (ojs-admin-api.md 12.1, switched through pronto
// serve's admin API and kept in the store's settings) is on. While it is, this client's leader
// promotes no due jobs and fires no cron occurrences; the queues it paused claim nothing anyway. A
// store that keeps no settings has no maintenance mode, and a failed read holds nothing: the pass
// it guards meets the same store and reports the error itself.
func (c *Client) maintenanceHeld(ctx context.Context) bool {
	ss, ok := c.store.(store.SettingStore)
	if !ok {
		return false
	}
	v, err := ss.GetSetting(ctx, store.MaintenanceSetting)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("pronto: reading the maintenance mode failed", "err", err)
		}
		return false
	}
	return v != nil
}
