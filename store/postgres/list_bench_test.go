package postgres

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
// on a table of PRONTO_BENCH_LIST_ROWS jobs (default 1,000,000) created over the last 7 days, 90 %
// of them completed at their creation plus a minute: without a filter, by state and queue, and with
// each time window. It reports the median and the slowest of PRONTO_BENCH_LIST_RUNS pages per case
// (default 21). Run it alone: go test ./store/postgres/ -run '^$' -bench ListJobsLarge -benchtime 1x
func BenchmarkListJobsLarge(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("PRONTO_BENCH_LIST_ROWS"); v != "" {
		rows, _ = strconv.Atoi(v)
	}
	runs := 21
	if v := os.Getenv("PRONTO_BENCH_LIST_RUNS"); v != "" {
		runs, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	s := setup(b)
	now := time.Now().Truncate(time.Millisecond)
	span := 7 * 24 * time.Hour
	// Ids carry their creation time, spread evenly over the span; every tenth job is still available.
	fill := s.expand.Replace(`INSERT INTO {schema}.jobs (id, kind, queue, args, state, created_at, scheduled_at, completed_at)
SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8' || substr(r, 4, 3) || '-' || substr(r, 7, 12))::uuid,
	'bench.kind', 'q' || (i % 4), '[]',
	CASE WHEN i % 10 = 0 THEN 'available' ELSE 'completed' END,
	t, t, CASE WHEN i % 10 = 0 THEN NULL ELSE t + interval '1 minute' END
FROM (
	SELECT i, to_timestamp(ms / 1000.0) AS t, lpad(to_hex(ms), 12, '0') AS h, md5(i::text) AS r
	FROM (SELECT i, ($1::bigint + (i * $2::bigint) / $3::bigint) AS ms FROM generate_series(0, $3::bigint - 1) AS i) x
) y`)
	start := time.Now()
	if _, err := s.pool.Exec(ctx, fill, now.Add(-span).UnixMilli(), span.Milliseconds(), rows); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, s.expand.Replace(`ANALYZE {schema}.jobs`)); err != nil {
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
