package pronto_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestClientsSetTenantEnqueueLimitsTogether: enqueue limits of two tenants set through two clients
// at once, and one tenant's removed while another's is set, all stay as set: the limits are one
// setting, and neither change may write back a copy read before the other.
func TestClientsSetTenantEnqueueLimitsTogether(t *testing.T) {
	a, b, g := gatedClients(t)
	ctx := context.Background()
	gold := pronto.TenantEnqueueLimits{MaxQueueDepth: 10}
	lead := pronto.TenantEnqueueLimits{EnqueueRate: 5, EnqueuePeriod: time.Minute}
	g.hold(t, "tenant_enqueue_limits", func(ctx context.Context) error { return b.TenantSetEnqueueLimits(ctx, "gold", gold) },
		func() { require.NoError(t, a.TenantSetEnqueueLimits(ctx, "lead", lead)) })
	limits, err := a.TenantEnqueueLimits(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]pronto.TenantEnqueueLimits{"gold": gold, "lead": lead}, limits)

	g.hold(t, "tenant_enqueue_limits", func(ctx context.Context) error {
		return b.TenantSetEnqueueLimits(ctx, "gold", pronto.TenantEnqueueLimits{})
	}, func() { require.NoError(t, a.TenantSetEnqueueLimits(ctx, "iron", gold)) })
	limits, err = a.TenantEnqueueLimits(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]pronto.TenantEnqueueLimits{"lead": lead, "iron": gold}, limits)
}
