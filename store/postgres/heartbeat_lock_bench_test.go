package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkHeartbeat measures one heartbeat of 100 running jobs of one worker (the statement
// sqlHeartbeat), to compare its forms.
func BenchmarkHeartbeat(b *testing.B) {
	const size = 100
	ctx := context.Background()
	s := setup(b)
	ps := make([]*store.InsertParams, size)
	for i := range ps {
		ps[i] = params("hb")
	}
	if _, err := s.Insert(ctx, ps); err != nil {
		b.Fatal(err)
	}
	jobs, err := s.Claim(ctx, store.ClaimParams{Queue: "hb", Limit: size, WorkerID: "w", LeaseDuration: time.Minute})
	if err != nil || len(jobs) != size {
		b.Fatalf("claimed %d jobs: %v", len(jobs), err)
	}
	p := store.HeartbeatParams{WorkerID: "w", LeaseDuration: time.Minute}
	for _, j := range jobs {
		p.IDs = append(p.IDs, j.ID)
		p.Tokens = append(p.Tokens, j.ClaimToken)
	}
	b.ResetTimer()
	for range b.N {
		lost, err := s.Heartbeat(ctx, p)
		if err != nil || len(lost) != 0 {
			b.Fatalf("lost %d: %v", len(lost), err)
		}
	}
}
