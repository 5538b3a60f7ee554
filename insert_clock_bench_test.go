package pronto_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// storeNower is the stores' StoreNow, read by the tests to know the store's clock.
type storeNower interface {
	StoreNow(ctx context.Context) (time.Time, error)
}

// clockStore is a shared store whose clock reads off the true time, counting its readings: the
// memory store with StoreNow and without the in-process marker, as a PostgreSQL or Redis would be.
type clockStore struct {
	store.Store
	off   time.Duration
	reads atomic.Int64
}

func (s *clockStore) StoreNow(context.Context) (time.Time, error) {
	s.reads.Add(1)
	return time.Now().Add(s.off), nil
}

// BenchmarkInsertDelay measures one Insert at a time with and without a Delay, per shared store,
// and one reading of the store's clock (StoreNow): a delayed insert counts its Delay from the
// store's clock by an offset read at most once a minute, so the two inserts should cost the same
// and the reading is paid by one delayed insert a minute.
func BenchmarkInsertDelay(b *testing.B) {
	b.Run("shared-memory", func(b *testing.B) {
		// The memory store playing a shared one (clockStore): the client's own cost, without the
		// noise of a server's round trip.
		s := &clockStore{Store: memory.New()}
		b.Cleanup(func() { _ = s.Close() })
		benchInsertDelay(b, s, s)
	})
	for _, kind := range []storeKind{kindPostgres, kindRedis} {
		b.Run(string(kind), func(b *testing.B) {
			ts := newTestStore(b, kind)
			benchInsertDelay(b, ts.Store, ts.Store.(storeNower))
		})
	}
}

// benchInsertDelay runs BenchmarkInsertDelay's cases on s, whose clock sc reads.
func benchInsertDelay(b *testing.B, s store.Store, sc storeNower) {
	ctx := context.Background()
	c, err := pronto.NewClient(s, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		opts *pronto.InsertOpts
	}{{"no-delay", nil}, {"delay", &pronto.InsertOpts{Delay: time.Hour}}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Insert(ctx, noopArgs{N: 1}, bc.opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("store-clock-read", func(b *testing.B) {
		for b.Loop() {
			if _, err := sc.StoreNow(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
