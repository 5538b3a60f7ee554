package pronto

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pronto-jobs/pronto/store"
)

// readSettingMap reads the JSON object stored under key in the store's settings, keyed by tenant
// (or any name); a setting never written reads as an empty map.
func readSettingMap[V any](ctx context.Context, ss store.SettingStore, key string) (map[string]V, error) {
	raw, err := ss.GetSetting(ctx, key)
	if err != nil {
		return nil, err
	}
	m := map[string]V{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("setting %s: %w", key, err)
		}
	}
	return m, nil
}
