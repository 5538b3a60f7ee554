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

// writeSettingMap stores m as the JSON object under key, or removes the key when m is empty.
func writeSettingMap[V any](ctx context.Context, ss store.SettingStore, key string, m map[string]V) error {
	var raw json.RawMessage
	if len(m) > 0 {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		raw = b
	}
	return ss.SetSetting(ctx, key, raw)
}

// settingStore returns the client's store as a SettingStore, or an error matching ErrUnsupported
// naming what needs it.
func (c *Client) settingStore(what string) (store.SettingStore, error) {
	ss, ok := c.store.(store.SettingStore)
	if !ok {
		return nil, fmt.Errorf("pronto: %s: the store keeps no settings: %w", what, ErrUnsupported)
	}
	return ss, nil
}
