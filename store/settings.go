package store

import (
	"context"
	"encoding/json"
)

// SettingStore keeps small cluster-wide settings as JSON values under string keys (maintenance
// mode, ojs-admin-api.md 12.1). It is optional, as WorkerStore is.
type SettingStore interface {
	// GetSetting returns the value under key, or nil when none is set.
	GetSetting(ctx context.Context, key string) (json.RawMessage, error)
	// SetSetting stores value under key; a nil value removes the key.
	SetSetting(ctx context.Context, key string, value json.RawMessage) error
}

// MaintenanceSetting is the SettingStore key that holds maintenance mode's state while the mode is
// on (ojs-admin-api.md 12.1; absent when off). Besides the fetches the server refuses, every
// client's leader reads it to hold the promotion of due jobs and the cron triggers.
const MaintenanceSetting = "maintenance"
