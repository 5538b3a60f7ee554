package pronto

import (
	"bytes"
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

// updateSetting changes the setting under key by fn, which gets the stored value (nil when absent)
// and returns the value to store (nil removes it). On a store that implements store.SettingSwapper
// (all of pronto's do) the write applies only while the setting still holds what fn was given, and
// fn runs again on the newer value otherwise, so no writer overwrites another's change; fn may
// therefore run more than once. Losing the swap every time (store.ErrSettingContended, naming the
// key: dozens of changes landing while one runs) fails the update rather than dropping it; an error
// from fn is returned as is.
func updateSetting(ctx context.Context, ss store.SettingStore, key string, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	return store.UpdateSetting(ctx, ss, key, fn)
}

// updateSettingMap changes the JSON object stored under key (see readSettingMap) by fn, as
// updateSetting does: fn edits the map in place, and an empty map removes the key. A change that
// leaves the map as it was writes nothing (PostgreSQL answers a setting in its own spelling, so the
// bytes are compared as this map encodes them, not as stored); a stored JSON null reads as empty.
func updateSettingMap[V any](ctx context.Context, ss store.SettingStore, key string, fn func(m map[string]V) error) error {
	return updateSetting(ctx, ss, key, func(old json.RawMessage) (json.RawMessage, error) {
		var m map[string]V
		if len(old) > 0 {
			if err := json.Unmarshal(old, &m); err != nil {
				return nil, fmt.Errorf("setting %s: %w", key, err)
			}
		}
		if m == nil {
			m = map[string]V{}
		}
		before, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		if err := fn(m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, nil
		}
		after, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		if old != nil && bytes.Equal(before, after) {
			return old, nil // unchanged: UpdateSetting writes nothing
		}
		return after, nil
	})
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
