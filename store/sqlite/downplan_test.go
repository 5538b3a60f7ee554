package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/sqldrops"
	"github.com/pronto-jobs/pronto/store"
)

// TestDownDropsAreRead compares, for every migration, what sqldrops reads in its down file with
// what reverting it removes from the catalog: a down migration written in a form the reader misses
// would delete data that migrate down never announced.
func TestDownDropsAreRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx))
	known, err := loadMigrations()
	require.NoError(t, err)
	for i := len(known) - 1; i >= 0; i-- {
		m := known[i]
		before, err := s.columns(ctx)
		require.NoError(t, err)
		require.NoError(t, s.MigrateDown(ctx, 1))
		after, err := s.columns(ctx)
		require.NoError(t, err)
		// The bookkeeping table goes with the last migration but is not one of its drops.
		removed := slices.DeleteFunc(sqldrops.Removed(before, after), func(d sqldrops.Drop) bool {
			return d.Table == "pronto_migrations"
		})
		require.ElementsMatch(t, removed, sqldrops.Parse(m.down), "migration %03d_%s", m.version, m.name)
	}
}

// TestDownDataLossAndLiveLeases: the preview counts the rows a rollback deletes and changes nothing;
// live leases are listed until they expire.
func TestDownDataLossAndLiveLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t)
	known, err := loadMigrations()
	require.NoError(t, err)

	loss, err := s.DownDataLoss(ctx, len(known))
	require.NoError(t, err)
	require.Empty(t, loss, "an empty database loses nothing")

	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1}))
	ps := params("q", 2)
	ps[1].UniqueKey = "u"
	_, err = s.Insert(ctx, ps)
	require.NoError(t, err)
	ok, err := s.Elect(ctx, "maintenance", "client-a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok)

	// Back to before the features migration: the later ones drop nothing these jobs hold.
	features := slices.IndexFunc(known, func(m migration) bool { return m.name == "features" })
	require.GreaterOrEqual(t, features, 0)
	loss, err = s.DownDataLoss(ctx, len(known)-features)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, l := range loss {
		require.Equal(t, known[features].version, l.Migration.Version, "%+v", l)
		got[l.Table+"."+l.Column] = l.Rows
	}
	require.Equal(t, int64(1), got["pronto_rate_limits."], "the rate limit: %v", loss)
	require.Equal(t, int64(1), got["pronto_jobs.unique_states"], "the unique job's states: %v", loss)

	loss, err = s.DownDataLoss(ctx, len(known))
	require.NoError(t, err)
	got = map[string]int64{}
	for _, l := range loss {
		got[l.Table+"."+l.Column] = l.Rows
	}
	require.Equal(t, int64(2), got["pronto_jobs."])
	require.Equal(t, int64(1), got["pronto_rate_limits."])
	require.NotContains(t, got, "pronto_jobs.unique_states", "columns are counted with their table")
	require.NotContains(t, got, "pronto_leaders.", "leader leases are not data")

	leases, err := s.LiveLeases(ctx)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.Equal(t, "client-a", leases[0].LeaderID)
	require.NoError(t, s.Resign(ctx, "maintenance", "client-a"))
	ok, err = s.Elect(ctx, "cron", "client-b", time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		leases, err := s.LiveLeases(ctx)
		return err == nil && len(leases) == 0
	}, 10*time.Second, 10*time.Millisecond, "an expired lease is not live")
}
