package clockoffset

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeStore is a store whose clock is off the process's by off; each reading answers after the
// next of delays (the last one repeating), the latency falling wholly before or after the
// store's reading as lateFirst says.
type fakeStore struct {
	off       time.Duration
	delays    []time.Duration
	lateFirst bool
	reads     atomic.Int64
	fail      error
}

func (f *fakeStore) read(ctx context.Context) (time.Time, error) {
	n := int(f.reads.Add(1)) - 1
	if f.fail != nil {
		return time.Time{}, f.fail
	}
	d := time.Duration(0)
	if len(f.delays) > 0 {
		d = f.delays[min(n, len(f.delays)-1)]
	}
	if f.lateFirst {
		time.Sleep(d)
		return time.Now().Add(f.off), nil
	}
	at := time.Now().Add(f.off)
	time.Sleep(d)
	return at, nil
}

// TestMeasureKeepsShortestRoundTrip: of several readings, the one with the shortest round trip
// decides, so one slow reading (latency all on one side of the store's reading) does not shift the
// offset by half its latency.
func TestMeasureKeepsShortestRoundTrip(t *testing.T) {
	f := &fakeStore{off: time.Hour, delays: []time.Duration{3 * time.Second, 0, 0}}
	off, _, err := Measure(context.Background(), time.Now, f.read, 3)
	if err != nil {
		t.Fatal(err)
	}
	// The slow first reading alone would be 1.5 s off; the fast ones are within their own
	// (short, here well under half a second even on a loaded machine) round trips.
	if d := off - time.Hour; d < -time.Second || d > time.Second {
		t.Fatalf("offset %s, want an hour: the slow reading decided", off)
	}
	if got := f.reads.Load(); got != 3 {
		t.Fatalf("%d readings, want 3", got)
	}
}

// TestCacheReadsOncePerTTL: concurrent callers share one reading, later ones use it, and an offset
// within Tolerance is reported as zero.
func TestCacheReadsOncePerTTL(t *testing.T) {
	ctx := context.Background()
	f := &fakeStore{off: -2 * time.Hour}
	var c Cache
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off, err := c.Offset(ctx, time.Now, f.read)
			if err != nil {
				t.Error(err)
			}
			if d := off + 2*time.Hour; d < -time.Second || d > time.Second {
				t.Errorf("offset %s, want -2h", off)
			}
		}()
	}
	wg.Wait()
	if got := f.reads.Load(); got != 1 {
		t.Fatalf("%d readings by concurrent callers, want 1", got)
	}

	near := &fakeStore{off: 500 * time.Millisecond}
	var c2 Cache
	if off, err := c2.Offset(ctx, time.Now, near.read); err != nil || off != 0 {
		t.Fatalf("offset %s (%v) within the tolerance, want 0", off, err)
	}
}

// TestCacheRereadsAfterClockJump: when the process's clock jumps (an NTP step; here a skew the
// test sets), the cached offset is read again at once rather than used for the rest of its TTL.
func TestCacheRereadsAfterClockJump(t *testing.T) {
	ctx := context.Background()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	read := func(context.Context) (time.Time, error) { return time.Now(), nil } // the true time
	var c Cache
	if off, _ := c.Offset(ctx, now, read); off != 0 {
		t.Fatalf("offset %s, want 0", off)
	}
	skew.Store(int64(time.Hour))
	off, err := c.Offset(ctx, now, read)
	if err != nil {
		t.Fatal(err)
	}
	if d := off + time.Hour; d < -time.Second || d > time.Second {
		t.Fatalf("offset %s after the process's clock jumped an hour ahead, want -1h", off)
	}
}

// TestCacheKeepsLastOffsetOnError: a failed reading reports its error and the last offset known.
func TestCacheKeepsLastOffsetOnError(t *testing.T) {
	ctx := context.Background()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	f := &fakeStore{off: time.Hour}
	var c Cache
	if _, err := c.Offset(ctx, now, f.read); err != nil {
		t.Fatal(err)
	}
	f.fail = errors.New("down")
	skew.Store(int64(10 * time.Second)) // a jump: the next call reads again, and fails
	off, err := c.Offset(ctx, now, f.read)
	if err == nil {
		t.Fatal("a failed reading reported no error")
	}
	if d := off - time.Hour; d < -time.Second || d > time.Second {
		t.Fatalf("offset %s after a failed reading, want the last known (1h)", off)
	}
	var empty Cache
	if off, err := empty.Offset(ctx, now, f.read); err == nil || off != 0 {
		t.Fatalf("first reading failed: offset %s, error %v; want 0 and the error", off, err)
	}
}

// TestCacheIgnoresOffsetWithinItsError: when every round trip is slow (here 2.4 s, its latency
// all before the store's reading, as a pool's wait puts it) the reading of two clocks that agree
// is 1.2 s off, past Tolerance but within its own error (half the round trip): the offset is zero,
// not 1.2 s for the next minute of due times (a retry due in 1 s came 2.2 s late). A real skew,
// an hour, is still found through the same slow round trips.
func TestCacheIgnoresOffsetWithinItsError(t *testing.T) {
	slow := []time.Duration{2400 * time.Millisecond}
	var agree Cache
	off, err := agree.Offset(context.Background(), time.Now, (&fakeStore{delays: slow, lateFirst: true}).read)
	if err != nil {
		t.Fatal(err)
	}
	if off != 0 {
		t.Fatalf("offset %s for clocks that agree, read through a 2.4 s round trip: want 0", off)
	}
	var skewed Cache
	off, err = skewed.Offset(context.Background(), time.Now, (&fakeStore{off: time.Hour, delays: slow, lateFirst: true}).read)
	if err != nil {
		t.Fatal(err)
	}
	if d := off - time.Hour; d < -2*time.Second || d > 2*time.Second {
		t.Fatalf("offset %s for a store an hour ahead, read through a 2.4 s round trip: want about an hour", off)
	}
}
