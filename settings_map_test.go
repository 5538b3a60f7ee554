package pronto_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// respelledSettings is a memory store that answers settings in another spelling than it was given
// (as PostgreSQL's jsonb does: its own spacing and key order) and counts the writes.
type respelledSettings struct {
	*memory.Store
	writes atomic.Int64
}

func (s *respelledSettings) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	v, err := s.Store.GetSetting(ctx, key)
	if err != nil || v == nil {
		return v, err
	}
	return json.RawMessage(strings.ReplaceAll(string(v), ":", ": ")), nil
}

func (s *respelledSettings) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	s.writes.Add(1)
	cur, err := s.Store.GetSetting(ctx, key)
	if err != nil {
		return false, err
	}
	if old != nil && cur != nil {
		old = cur // the stored value, as the store's own comparison (jsonb) would match it
	}
	return s.Store.SwapSetting(ctx, key, old, new)
}

// TestSettingMapChangeThatChangesNothingWritesNothing: removing the enqueue limits of a tenant that
// has none, while another tenant has some, writes nothing, on a store that answers the setting in
// its own spelling (the bytes read never equal the bytes the client would write).
func TestSettingMapChangeThatChangesNothingWritesNothing(t *testing.T) {
	ctx := context.Background()
	st := &respelledSettings{Store: memory.New()}
	c, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	require.NoError(t, c.TenantSetEnqueueLimits(ctx, "acme", pronto.TenantEnqueueLimits{MaxQueueDepth: 5}))
	before := st.writes.Load()
	require.NoError(t, c.TenantSetEnqueueLimits(ctx, "other", pronto.TenantEnqueueLimits{}))
	require.Equal(t, before, st.writes.Load(), "a change that changes nothing wrote the setting")
	limits, err := c.TenantEnqueueLimits(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]pronto.TenantEnqueueLimits{"acme": {MaxQueueDepth: 5}}, limits)
}

// TestSettingMapStoredNullReadsEmpty: a map setting holding JSON null (written by hand) is changed
// as an empty one, not a panic.
func TestSettingMapStoredNullReadsEmpty(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	require.NoError(t, st.SetSetting(ctx, "tenant_priority_boosts", json.RawMessage("null")))
	c, err := pronto.NewClient(st, nil)
	require.NoError(t, err)
	require.NoError(t, c.TenantSetPriorityBoost(ctx, "gold", 3))
	boosts, err := c.TenantPriorityBoosts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"gold": 3}, boosts)
}
