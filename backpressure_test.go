package pronto_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

type bpArgs struct {
	N int `json:"n"`
}

func (bpArgs) Kind() string { return "bp.job" }

// TestQueueMaxDepth: a bounded queue refuses the insert that would take it beyond its bound, with a
// typed error, refuses a batch whole, leaves other queues alone, and takes jobs again once jobs
// finished or the bound is lifted; on every store.
func TestQueueMaxDepth(t *testing.T) {
	forEachStore(t, func(t *testing.T, ts *testStore) {
		ctx := context.Background()
		c, err := pronto.NewClient(ts.Store, nil)
		require.NoError(t, err)
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bounded", 3))
		got, err := c.QueueMaxDepths(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), got["bounded"])

		in := func(int) *pronto.InsertOpts { return &pronto.InsertOpts{Queue: "bounded"} }
		var ids []string
		for i := range 3 {
			j, err := c.Insert(ctx, bpArgs{N: i}, in(i))
			require.NoError(t, err)
			ids = append(ids, j.ID)
		}
		_, err = c.Insert(ctx, bpArgs{N: 4}, in(4))
		require.ErrorIs(t, err, pronto.ErrQueueFull)
		var qf *pronto.QueueFullError
		require.ErrorAs(t, err, &qf)
		require.Equal(t, pronto.QueueFullError{Queue: "bounded", Depth: 3, MaxDepth: 3, Adding: 1}, *qf)

		// Other queues are not bounded; a batch touching the full queue is refused whole.
		_, err = c.Insert(ctx, bpArgs{N: 5}, &pronto.InsertOpts{Queue: "free"})
		require.NoError(t, err)
		_, err = c.InsertMany(ctx, []pronto.InsertManyParams{
			{Args: bpArgs{N: 6}, Opts: &pronto.InsertOpts{Queue: "free"}},
			{Args: bpArgs{N: 7}, Opts: in(7)},
		})
		require.ErrorIs(t, err, pronto.ErrQueueFull)
		infos, err := c.QueueList(ctx)
		require.NoError(t, err)
		for _, q := range infos {
			if q.Name == "free" {
				require.Equal(t, int64(1), q.Counts[pronto.StateAvailable], "nothing of a refused batch is stored")
			}
		}

		// Finished jobs make room once the client recounts (within a second).
		_, err = c.JobCancel(ctx, ids[0])
		require.NoError(t, err)
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err = c.Insert(ctx, bpArgs{N: 8}, in(8))
			if err == nil {
				break
			}
			require.ErrorIs(t, err, pronto.ErrQueueFull)
			require.True(t, time.Now().Before(deadline), "a cancelled job never made room")
			time.Sleep(50 * time.Millisecond)
		}

		// Lifting the bound lets everything in at once.
		require.NoError(t, c.QueueSetMaxDepth(ctx, "bounded", 0))
		for i := range 5 {
			_, err := c.Insert(ctx, bpArgs{N: 10 + i}, in(i))
			require.NoError(t, err)
		}

		require.Error(t, c.QueueSetMaxDepth(ctx, "bounded", -1))
		require.Error(t, c.QueueSetMaxDepth(ctx, "Bad Queue!", 1))
	})
}

// countingBounder counts the reads of bounds and depths an insert-only client makes.
type countingBounder struct {
	store.Store
	qb                  store.QueueBounder
	boundReads, depthRd atomic.Int64
}

func (s *countingBounder) SetQueueMaxDepth(ctx context.Context, q string, n int64) error {
	return s.qb.SetQueueMaxDepth(ctx, q, n)
}

func (s *countingBounder) QueueMaxDepths(ctx context.Context) (map[string]int64, error) {
	s.boundReads.Add(1)
	return s.qb.QueueMaxDepths(ctx)
}

func (s *countingBounder) QueueDepths(ctx context.Context, qs []string) (map[string]int64, error) {
	s.depthRd.Add(1)
	return s.qb.QueueDepths(ctx, qs)
}

// BenchmarkInsertBackpressure measures single inserts into an unbounded and a bounded queue per store,
// and reports the store reads the bound costs per insert (bound-reads/op, depth-reads/op): counting
// depth must add no round trip per insert, only about one per depthEvery (0.5 s) per bounded queue.
func BenchmarkInsertBackpressure(b *testing.B) {
	for _, kind := range allStores {
		for _, bounded := range []bool{false, true} {
			name := string(kind) + "/unbounded"
			if bounded {
				name = string(kind) + "/bounded"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				ts := newTestStore(b, kind)
				cs := &countingBounder{Store: ts.Store, qb: ts.Store.(store.QueueBounder)}
				c, err := pronto.NewClient(cs, nil)
				if err != nil {
					b.Fatal(err)
				}
				if bounded {
					if err := c.QueueSetMaxDepth(ctx, "default", 1<<40); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := c.Insert(ctx, noopArgs{N: i}, nil); err != nil {
						if errors.Is(err, pronto.ErrQueueFull) {
							b.Fatal("a bound of 2^40 was reached")
						}
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(cs.boundReads.Load())/float64(b.N), "bound-reads/op")
				b.ReportMetric(float64(cs.depthRd.Load())/float64(b.N), "depth-reads/op")
			})
		}
	}
}
