package sqlite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestWALBoundedUnderConstantReaders: during a long drain with constant readers (the dashboard, HTTP
// GETs, other clients' reads), the -wal file stays bounded: SQLite's automatic checkpoint cannot
// restart the log while readers keep starting on it, so the store forces a checkpoint that does.
func TestWALBoundedUnderConstantReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "drain.db")
	s := openAt(t, path)

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				_, _ = s.ListQueues(ctx)
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()

	// Twice the size at which the store checkpoints: without the checkpoint this drain (2,400 jobs
	// of 2 KB) leaves a log of about 30 MB.
	const bound = 2 * walCheckpointBytes
	var maxWAL int64
	pad := json.RawMessage(`[{"blob":"` + strings.Repeat("x", 2000) + `"}]`) // larger rows: fewer rounds
	for range 12 {
		ps := params("q", 200)
		for _, p := range ps {
			p.Args = pad
		}
		_, err := s.Insert(ctx, ps)
		require.NoError(t, err)
		for {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "q", Limit: 100, WorkerID: "w", LeaseDuration: time.Minute})
			require.NoError(t, err)
			if len(jobs) == 0 {
				break
			}
			cs := make([]store.Completion, len(jobs))
			for i, j := range jobs {
				cs[i] = store.Completion{ID: j.ID, Attempt: j.Attempt, Token: j.ClaimToken, State: store.StateCompleted}
			}
			_, err = s.Finish(ctx, cs)
			require.NoError(t, err)
		}
		if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > maxWAL {
			maxWAL = fi.Size()
		}
	}
	db, err := os.Stat(path)
	require.NoError(t, err)
	t.Logf("largest WAL %d bytes, database %d bytes", maxWAL, db.Size())
	require.LessOrEqual(t, maxWAL, int64(bound),
		"the WAL grew to %d bytes (database %d bytes) during the drain: it is never checkpointed back", maxWAL, db.Size())
}
