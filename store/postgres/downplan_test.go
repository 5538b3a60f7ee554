package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/internal/sqldrops"
	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
)

// TestDownDropsAreRead compares, for every migration, what sqldrops reads in its down file with
// what reverting it removes from the catalog: a down migration written in a form the reader misses
// would delete data that migrate down never announced.
func TestDownDropsAreRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := New(testdb.NewPool(t, 2), Config{Schema: testdb.Schema(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Migrate(ctx))
	for i := len(migrations) - 1; i >= 0; i-- {
		m := migrations[i]
		before, err := s.columns(ctx)
		require.NoError(t, err)
		require.NoError(t, s.MigrateDown(ctx, 1))
		after, err := s.columns(ctx)
		require.NoError(t, err)
		removed := sqldrops.Removed(before, after)
		require.ElementsMatch(t, removed, sqldrops.Parse(m.down), "migration %03d_%s", m.version, m.name)
	}
}

// TestDownDataLossAndLiveLeases: the preview counts the rows a rollback deletes and changes nothing;
// live leases are listed until they expire.
func TestDownDataLossAndLiveLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)

	loss, err := s.DownDataLoss(ctx, len(migrations))
	require.NoError(t, err)
	require.Empty(t, loss, "an empty schema loses nothing")

	require.NoError(t, s.SetRateLimit(ctx, "k", store.RateLimit{MaxActive: 1}))
	plain, unique := params("q"), params("q")
	unique.UniqueKey = "u"
	_, err = s.Insert(ctx, []*store.InsertParams{plain, unique})
	require.NoError(t, err)
	ok, err := s.Elect(ctx, "maintenance", "client-a", time.Hour)
	require.NoError(t, err)
	require.True(t, ok)

	// A held job (migration 034) is a hint the claims rebuild: reverting 034 returns it to the
	// claim index and deletes nothing.
	_, err = s.pool.Exec(ctx, `UPDATE `+s.schema+`.jobs SET held = true WHERE id = $1`, plain.ID)
	require.NoError(t, err)
	held := slices.IndexFunc(migrations, func(m migration) bool { return m.name == "held_jobs" })
	require.GreaterOrEqual(t, held, 0)
	loss, err = s.DownDataLoss(ctx, len(migrations)-held)
	require.NoError(t, err)
	require.Empty(t, loss, "held jobs are not data a rollback deletes")

	// Back to before the features migration: the later ones drop nothing these jobs hold.
	features := slices.IndexFunc(migrations, func(m migration) bool { return m.name == "features" })
	require.GreaterOrEqual(t, features, 0)
	loss, err = s.DownDataLoss(ctx, len(migrations)-features)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, l := range loss {
		require.Equal(t, migrations[features].version, l.Migration.Version, "%+v", l)
		got[l.Table+"."+l.Column] = l.Rows
	}
	require.Equal(t, int64(1), got["rate_limits."], "the rate limit: %v", loss)
	require.Equal(t, int64(1), got["jobs.unique_states"], "the unique job's states: %v", loss)
	require.NotContains(t, got, "workflows.", "an empty table is not listed")

	loss, err = s.DownDataLoss(ctx, len(migrations))
	require.NoError(t, err)
	got = map[string]int64{}
	for _, l := range loss {
		got[l.Table+"."+l.Column] = l.Rows
	}
	require.Equal(t, map[string]int64{"jobs.": 2, "rate_limits.": 1}, got,
		"every job; jobs' columns are counted with the table; leader leases are not data")

	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range status {
		require.True(t, m.Applied, "the preview changed nothing")
	}

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
