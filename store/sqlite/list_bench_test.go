package sqlite

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// BenchmarkListJobsLarge measures one page (50 jobs, newest first) of the dashboard's job listings
// on a file of PRONTO_BENCH_LIST_ROWS jobs (default 1,000,000) created over the last 7 days, 90 %
// of them completed at their creation plus a minute, like the PostgreSQL benchmark of that name.
// Run it alone: go test ./store/sqlite/ -run '^$' -bench ListJobsLarge -benchtime 1x
func BenchmarkListJobsLarge(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("PRONTO_BENCH_LIST_ROWS"); v != "" {
		rows, _ = strconv.Atoi(v)
	}
	runs := 21
	ctx := context.Background()
	s := openTest(b)
	now := time.Now().Truncate(time.Millisecond)
	span := 7 * 24 * time.Hour
	start := time.Now()
	// Ids carry their creation time (UUIDv7 layout, random tail from the row number).
	const fill = `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?3),
t(i, ms) AS (SELECT i, ?1 + (i * ?2) / ?3 FROM n)
INSERT INTO pronto_jobs (id, kind, queue, state, created_at, scheduled_at, completed_at)
SELECT printf('%08x-%04x-7%03x-8%03x-%012x', ms >> 16, ms & 65535, i & 4095, (i >> 12) & 4095, i),
	'bench.kind', 'q' || (i % 4), CASE WHEN i % 10 = 0 THEN 'available' ELSE 'completed' END,
	ms * 1000, ms * 1000, CASE WHEN i % 10 = 0 THEN NULL ELSE (ms + 60000) * 1000 END
FROM t`
	if _, err := s.w.ExecContext(ctx, fill, now.Add(-span).UnixMilli(), span.Milliseconds(), rows); err != nil {
		b.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d jobs in %v", rows, time.Since(start).Round(time.Millisecond))
	cases := []struct {
		name string
		p    store.ListParams
	}{
		{"newest", store.ListParams{}},
		{"state+queue", store.ListParams{States: []store.State{store.StateAvailable}, Queues: []string{"q0"}}},
		{"created-last-hour", store.ListParams{CreatedAfter: now.Add(-time.Hour)}},
		{"created-day-3", store.ListParams{CreatedAfter: now.Add(-3 * 24 * time.Hour), CreatedBefore: now.Add(-2 * 24 * time.Hour)}},
		{"created-before-6-days", store.ListParams{CreatedBefore: now.Add(-6 * 24 * time.Hour)}},
		{"finished-last-hour", store.ListParams{FinishedAfter: now.Add(-time.Hour)}},
		{"finished-day-3", store.ListParams{FinishedAfter: now.Add(-3 * 24 * time.Hour), FinishedBefore: now.Add(-2 * 24 * time.Hour)}},
		{"finished-before-6-days", store.ListParams{FinishedBefore: now.Add(-6 * 24 * time.Hour)}},
		{"created-day-3+finished-last-hour", store.ListParams{CreatedAfter: now.Add(-3 * 24 * time.Hour),
			CreatedBefore: now.Add(-2 * 24 * time.Hour), FinishedAfter: now.Add(-time.Hour)}},
	}
	b.ResetTimer()
	for range b.N {
		for _, c := range cases {
			p := c.p
			p.Descending, p.Limit = true, 50
			times := make([]time.Duration, runs)
			n := 0
			for i := range runs {
				t0 := time.Now()
				jobs, _, err := s.ListJobs(ctx, p)
				times[i] = time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				n = len(jobs)
			}
			slices.Sort(times)
			fmt.Printf("%-34s %2d jobs  median %8.2f ms  max %8.2f ms\n", c.name, n,
				float64(times[runs/2].Microseconds())/1000, float64(times[runs-1].Microseconds())/1000)
		}
	}
}
