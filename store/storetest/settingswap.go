package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// testSettingSwap: SwapSetting changes a setting only while it still holds the value read (absent
// included), whatever spelling the store gives back; and writers updating one setting together
// through UpdateSetting, from this store and from another view of it, lose none of their changes.
func testSettingSwap(t *testing.T, h Harness) {
	s := h.New(t)
	sw, ok := s.(store.SettingSwapper)
	require.True(t, ok, "%T does not implement store.SettingSwapper", s)
	c := ctx(t)
	get := func() json.RawMessage {
		t.Helper()
		v, err := sw.GetSetting(c, "pools")
		require.NoError(t, err)
		return v
	}
	swap := func(old, new json.RawMessage) bool {
		t.Helper()
		ok, err := sw.SwapSetting(c, "pools", old, new)
		require.NoError(t, err)
		return ok
	}

	require.True(t, swap(nil, nil), "absent, as expected: nothing to change")
	require.True(t, swap(nil, json.RawMessage(`{"a": 1}`)), "absent: added")
	require.False(t, swap(nil, json.RawMessage(`{"b": 2}`)), "present now: not added again")
	require.False(t, swap(nil, nil), "present: not absent")
	require.False(t, swap(json.RawMessage(`{"a": 2}`), json.RawMessage(`{"c": 3}`)), "another value: not replaced")
	require.JSONEq(t, `{"a": 1}`, string(get()))

	// Written in one spelling, read back in the store's (PostgreSQL normalizes jsonb): what
	// GetSetting returned is what the swap matches.
	require.NoError(t, sw.SetSetting(c, "pools", json.RawMessage(`{ "z" : [1, 2],"a":{"x" :true} }`)))
	read := get()
	require.True(t, swap(read, json.RawMessage(`{"a": 2}`)))
	require.False(t, swap(read, json.RawMessage(`{"a": 3}`)), "the value read was replaced: a stale swap loses")
	require.JSONEq(t, `{"a": 2}`, string(get()))
	require.False(t, swap(json.RawMessage(`{"a": 1}`), nil), "another value: not removed")
	require.True(t, swap(get(), nil), "removed")
	require.Nil(t, get())
	v, err := sw.GetSetting(c, "other")
	require.NoError(t, err)
	require.Nil(t, v, "a swap touches its own key only")

	// Concurrent writers, half of them through a second view of the store (another process), each
	// adding its own entries to one JSON object: every entry stays.
	other := s
	if h.Reopen != nil {
		other = h.Reopen(t, s)
	}
	const writers, each = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		ss := store.SettingStore(sw)
		if w%2 == 1 {
			ss = other.(store.SettingStore)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- store.UpdateSetting(c, ss, "pools", func(old json.RawMessage) (json.RawMessage, error) {
					m := map[string]bool{}
					if old != nil {
						if err := json.Unmarshal(old, &m); err != nil {
							return nil, err
						}
					}
					m[fmt.Sprintf("w%d-%d", w, i)] = true
					return json.Marshal(m)
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	m := map[string]bool{}
	require.NoError(t, json.Unmarshal(get(), &m))
	require.Len(t, m, writers*each, "every writer's entries, none lost: %v", m)
}
