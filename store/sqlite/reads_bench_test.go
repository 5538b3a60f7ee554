package sqlite

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkHotReads measures the reads made often on the readers' connections: a job by id (the
// HTTP API's GET), the progress of a batch of 50 acked jobs (checked after every batch of HTTP acks)
// and a claim of an empty queue (which reads whether the queue has rate-limited or tenant jobs).
// Each goes through a prepared statement of the readers (readStmt).
func BenchmarkHotReads(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	ps := make([]*store.InsertParams, 50)
	ids := make([]string, len(ps))
	for i := range ps {
		ids[i] = uuidv7.New()
		ps[i] = &store.InsertParams{ID: ids[i], Kind: "k", Queue: "q", Args: json.RawMessage(`{}`),
			State: store.StateAvailable, MaxAttempts: 1}
	}
	if _, err := s.Insert(ctx, ps); err != nil {
		b.Fatal(err)
	}
	b.Run("GetJob", func(b *testing.B) {
		for i := range b.N {
			if _, err := s.GetJob(ctx, ids[i%len(ids)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetProgressBatch", func(b *testing.B) {
		for range b.N {
			if _, err := s.GetProgressBatch(ctx, ids); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ClaimEmpty", func(b *testing.B) {
		for range b.N {
			jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "empty", Limit: 10, WorkerID: "w", LeaseDuration: 30e9})
			if err != nil || len(jobs) != 0 {
				b.Fatal(jobs, err)
			}
		}
	})
}
