package sqlite

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx))
	var ps []*store.InsertParams
	for range 120 {
		ps = append(ps, &store.InsertParams{ID: uuidv7.New(), Kind: "k", Queue: "q", Args: json.RawMessage(`[{"a":1}]`), MaxAttempts: 3, Tags: []string{"x"}})
	}
	jobs, err := s.Insert(ctx, ps)
	require.NoError(t, err)
	require.Len(t, jobs, 120)
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 100, WorkerID: "w", LeaseDuration: time.Minute, Kinds: []string{"k"}})
	require.NoError(t, err)
	require.Len(t, got, 100)
	require.Equal(t, ps[0].ID, got[0].ID)
	var cs []store.Completion
	for _, j := range got {
		cs = append(cs, store.Completion{ID: j.ID, Attempt: j.Attempt, State: store.StateRetryable, Error: &store.AttemptError{Attempt: 1, Message: "boom"}})
	}
	res, err := s.Finish(ctx, cs)
	require.NoError(t, err)
	require.True(t, res[0].Applied)
	j, err := s.GetJob(ctx, got[0].ID)
	require.NoError(t, err)
	t.Logf("%+v", j)
	qs, err := s.ListQueues(ctx)
	require.NoError(t, err)
	t.Logf("%+v", qs)
}
