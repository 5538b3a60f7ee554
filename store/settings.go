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
