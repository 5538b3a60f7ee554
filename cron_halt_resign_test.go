package pronto_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// cronAnswerLost wins every cron election in the database, then loses the answer on its way back
// (a connection that fails after the commit), so that RunCron does not know it leads.
type cronAnswerLost struct {
	*postgres.Store
}

func (s cronAnswerLost) Elect(ctx context.Context, name, id string, ttl time.Duration) (bool, error) {
	if name != "cron" {
		return s.Store.Elect(ctx, name, id, ttl)
	}
	if _, err := s.Store.Elect(ctx, name, id, ttl); err != nil {
		return false, err
	}
	return false, errors.New("the answer was lost")
}

// A halted client's cron scheduler gives the leadership up even when it does not know it holds it
// (the last election's answer lost), as it does at stop: the row may be its own, and a client of
// the newer release would wait out the TTL. Before, it resigned on the halt only when it knew it
// led.
func TestHaltedCronResignsWithoutKnowingItLeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := newTestStore(t, kindPostgres)
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(context.Context, *pronto.Job[schemaWatchArgs]) error { return nil }))
	cfg := fastConfig(workers, defaultQueue(1))
	cfg.DisableMaintenance = true
	cfg.LeaderTTL = time.Hour // the office is not freed by its expiry during the test
	c, err := pronto.NewClient(cronAnswerLost{ts.Store.(*postgres.Store)}, cfg)
	require.NoError(t, err)
	pronto.SetSchemaWatchEvery(c, 20*time.Millisecond)
	startBuilt(t, c)

	cronCtx, stopCron := context.WithCancel(ctx)
	defer stopCron()
	cronDone := make(chan error, 1)
	go func() { cronDone <- c.RunCron(cronCtx, nil) }()
	// The first election has run once the row names the client.
	holder := func() string {
		var id string
		err := ts.Store.(*postgres.Store).Pool().QueryRow(ctx,
			"SELECT leader_id FROM "+ts.schema+".leader WHERE name = 'cron' AND expires_at > now()").Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ""
		}
		require.NoError(t, err)
		return id
	}
	require.Eventually(t, func() bool { return holder() == c.ID() }, 15*time.Second, 10*time.Millisecond,
		"the client never took the cron office")

	haltBySchema(t, ts, c)
	select {
	case err := <-cronDone:
		requireSchemaRefusal(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("RunCron went on after the halt")
	}
	ok, err := ts.Store.Elect(ctx, "cron", "newer-client", time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "the halted client still holds the cron leadership")
}
