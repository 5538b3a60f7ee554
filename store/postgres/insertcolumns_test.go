package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

// TestInsertBatchColumns: every way of writing a batch (single INSERTs, one INSERT of arrays, COPY for a batch
// above arraysMax, COPY for the plain jobs of a batch with a unique job) stores every column as
// given, whether the jobs all hold a column's default (left out of the COPY), all share one other
// value (sent once with the arrays), or differ. InsertFast stores the same and counts the jobs.
func TestInsertBatchColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	// set gives job i of a batch the non-default value of every column; odd says whether it does so
	// only for every other job (the columns then differ within the batch).
	set := func(p *store.InsertParams, i int, odd bool) {
		if odd && i%2 == 0 {
			return
		}
		p.Kind, p.Queue = "kind-b", "q-b"
		p.Args = json.RawMessage(`[{"n":2}]`)
		p.Meta = json.RawMessage(`{"m":1}`)
		p.Priority, p.MaxAttempts = 3, 7
		p.Tags = []string{"x", "y"}
		p.RetryPolicy = json.RawMessage(`{"max_attempts":7}`)
		p.Timeout = 2500 * time.Millisecond
		p.State, p.ScheduledAt = store.StateScheduled, at.Add(time.Duration(i)*time.Second)
		p.ExpiresAt = at.Add(time.Hour)
		p.Tenant, p.RateKey = "tn", "rk"
	}
	checkJob := func(t *testing.T, s *Store, p *store.InsertParams, got *store.Job) {
		t.Helper()
		read, err := s.GetJob(ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, p.Kind, read.Kind)
		require.Equal(t, p.Queue, read.Queue)
		require.JSONEq(t, string(p.Args), string(read.Args))
		if p.Meta == nil {
			require.Nil(t, read.Meta)
		} else {
			require.JSONEq(t, string(p.Meta), string(read.Meta))
		}
		require.Equal(t, p.Priority, read.Priority)
		require.Equal(t, p.State, read.State)
		require.Equal(t, p.MaxAttempts, read.MaxAttempts)
		require.Equal(t, len(p.Tags), len(read.Tags))
		if len(p.Tags) > 0 {
			require.Equal(t, p.Tags, read.Tags)
		}
		if p.RetryPolicy == nil {
			require.Nil(t, read.RetryPolicy)
		} else {
			require.JSONEq(t, string(p.RetryPolicy), string(read.RetryPolicy))
		}
		require.Equal(t, p.Timeout, read.Timeout)
		if p.ScheduledAt.IsZero() {
			require.True(t, read.ScheduledAt.Equal(read.CreatedAt), "due at its creation")
		} else {
			require.True(t, read.ScheduledAt.Equal(p.ScheduledAt), "%v != %v", read.ScheduledAt, p.ScheduledAt)
		}
		require.True(t, read.ExpiresAt.Equal(p.ExpiresAt))
		require.Equal(t, p.Tenant, read.Tenant)
		require.Equal(t, p.RateKey, read.RateKey)
		require.Empty(t, read.UniqueKey)
		if got != nil { // what Insert returned is the row
			require.True(t, got.CreatedAt.Equal(read.CreatedAt))
			require.True(t, got.ScheduledAt.Equal(read.ScheduledAt))
		}
	}
	// A small batch is written with single INSERTs while one of its jobs may be handed to a waiting
	// producer (the hand-off, on by default), else as arrays from arraysMin jobs on: noHandoff
	// reaches the latter.
	for _, path := range []struct {
		name      string
		n         int
		unique    bool
		noHandoff bool
	}{{"arrays", 20, false, false}, {"arrays-small", arraysMin, false, true},
		{"pipeline", arraysMin - 1, false, true}, {"handoff-small", pipelineMax, false, false},
		{"copy", arraysMax + 1, false, false}, {"copy-beside-unique", 12, true, false}} {
		for _, shape := range []string{"defaults", "shared", "differing"} {
			t.Run(fmt.Sprintf("%s/%s", path.name, shape), func(t *testing.T) {
				t.Parallel()
				s := setupHandoff(t, !path.noHandoff)
				for _, fast := range []bool{false, true} {
					batch := make([]*store.InsertParams, path.n)
					for i := range batch {
						batch[i] = params("q-a")
						batch[i].MaxAttempts = 1 // the column's default
						if shape != "defaults" {
							set(batch[i], i, shape == "differing")
						}
					}
					if path.unique {
						batch[0].UniqueKey = fmt.Sprintf("u-%v", fast)
					}
					var jobs []*store.Job
					if fast {
						n, err := s.InsertFast(ctx, batch)
						require.NoError(t, err)
						require.Equal(t, path.n, n)
					} else {
						var err error
						jobs, err = s.Insert(ctx, batch)
						require.NoError(t, err)
						require.Len(t, jobs, path.n)
					}
					// Every job of a small batch; the first two, the last two and two in the middle of a large one.
					check := []int{0, 1, path.n / 2, path.n/2 + 1, path.n - 2, path.n - 1}
					if path.n <= 20 {
						check = check[:0]
						for i := range path.n {
							check = append(check, i)
						}
					}
					for _, i := range check {
						if path.unique && i == 0 {
							continue // the unique job, written apart
						}
						var got *store.Job
						if jobs != nil {
							got = jobs[i]
						}
						checkJob(t, s, batch[i], got)
					}
				}
			})
		}
	}
}
