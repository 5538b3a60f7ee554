package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkClaimBesideAScheduledBacklog measures a claim of a queue whose only jobs are 100,000
// scheduled and retrying an hour or more from now: the claim finds nothing, after passing over the
// whole backlog in pronto_jobs_claim, the worst case of a claim that finds fewer jobs than its limit
// (an idle queue's claim at every insert and poll while retries wait). The file is not analyzed,
// as the store never analyzes its files: with statistics SQLite finds a better plan for the old
// single-scan claim by itself (0.3 ms), without them that claim read every entry of the backlog
// (11-12 ms); the claim that walks the queue's priorities takes 0.3 ms either way.
func BenchmarkClaimBesideAScheduledBacklog(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	later := time.Now().Add(time.Hour).UnixMicro()
	const fill = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
INSERT INTO pronto_jobs (id, kind, queue, state, created_at, scheduled_at)
SELECT printf('%08x-0000-7000-8000-%012x', i, i), 'k', 'q',
	CASE WHEN i % 2 = 0 THEN 'scheduled' ELSE 'retryable' END, ?1, ?1 + i * 1000
FROM n`
	if _, err := s.w.ExecContext(ctx, fill, later, 100_000); err != nil {
		b.Fatal(err)
	}
	p := store.ClaimParams{Queue: "q", Limit: 10, WorkerID: "w", LeaseDuration: time.Minute}
	b.ResetTimer()
	for range b.N {
		jobs, err := s.Claim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) != 0 {
			b.Fatalf("claimed %d jobs of a backlog due in an hour", len(jobs))
		}
	}
}
