package pronto_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

// recoveryPromise is the crash-recovery bound README.md, docs/architecture.md and config.go state: a
// SIGKILLed process's jobs are available again within it, even when the leader dies with it.
const recoveryPromise = 5 * time.Second

// TestRecoveryBound checks the arithmetic of the defaults, as the real client applies them, against
// the stated bound (no wall-clock timing: TestTakeOfficeRescuesAtOnce in internal/maintenance checks
// that a new leader rescues when it takes office, which the formula relies on).
func TestRecoveryBound(t *testing.T) {
	c, err := pronto.NewClient(memory.New(), &pronto.Config{})
	require.NoError(t, err)
	cfg := pronto.EffectiveConfig(c)
	require.Equal(t, pronto.DefaultLeaseDuration, cfg.LeaseDuration)
	require.Equal(t, pronto.DefaultRescueInterval, cfg.RescueInterval)
	require.Equal(t, pronto.DefaultLeaderTTL, cfg.LeaderTTL)
	require.Equal(t, 3500*time.Millisecond, cfg.RecoveryBound(), "the bound the docs state")
	require.Equal(t, cfg.RecoveryBound(), pronto.Config{}.RecoveryBound(), "zero fields read as the defaults")
	require.LessOrEqual(t, cfg.RecoveryBound(), recoveryPromise)
	// With a process picking the jobs up by poll (SQLite shared by processes), still within the promise.
	require.LessOrEqual(t, cfg.RecoveryBound()+cfg.PollInterval, recoveryPromise)

	for _, tc := range []struct {
		cfg  pronto.Config
		want time.Duration
	}{
		// The leader's office lapses later than the lease: the takeover decides.
		{pronto.Config{LeaseDuration: 3 * time.Second, RescueInterval: 500 * time.Millisecond, LeaderTTL: 3 * time.Second}, 4 * time.Second},
		// The lease decides.
		{pronto.Config{LeaseDuration: 10 * time.Second, RescueInterval: time.Second, LeaderTTL: 3 * time.Second}, 11 * time.Second},
		{pronto.Config{LeaseDuration: time.Second, RescueInterval: 100 * time.Millisecond, LeaderTTL: 1200 * time.Millisecond}, 1600 * time.Millisecond},
	} {
		require.Equal(t, tc.want, tc.cfg.RecoveryBound(), "%+v", tc.cfg)
	}
}
