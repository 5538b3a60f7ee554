package handoffbuf

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto/store"
)

func ids(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestTakeStaleDrain: Take returns fresh jobs oldest first up to its limit and calls then under the
// lock with their number; jobs too old stay for Stale, which removes exactly those; Drain empties.
func TestTakeStaleDrain(t *testing.T) {
	var b Buffer
	t0 := time.Now()
	b.Add(&store.Job{ID: "old"}, t0)
	b.Add(&store.Job{ID: "a"}, t0.Add(time.Second))
	b.Add(&store.Job{ID: "b"}, t0.Add(time.Second))
	b.Add(&store.Job{ID: "c"}, t0.Add(time.Second))
	now := t0.Add(1050 * time.Millisecond)

	var taken int
	got := b.Take(2, 100*time.Millisecond, now, func(n int) {
		taken = n
		require.Equal(t, 2, len(b.jobs), "called under the lock, after the take")
	})
	require.Equal(t, []string{"a", "b"}, ids(got))
	require.Equal(t, 2, taken)
	require.Equal(t, 2, b.Len(nil))

	require.Equal(t, []string{"old"}, ids(b.Stale(100*time.Millisecond, now)))
	require.Empty(t, b.Stale(100*time.Millisecond, now))
	require.Nil(t, b.Take(5, 100*time.Millisecond, now.Add(time.Second), func(int) { t.Fatal("nothing taken") }),
		"a job kept too long is not served")
	require.Equal(t, []string{"c"}, ids(b.Drain()))
	require.Zero(t, b.Len(nil))
	require.Empty(t, b.Drain())
}

// TestConcurrent: adds and takes from several goroutines hand every job out once. Run with -race.
func TestConcurrent(t *testing.T) {
	var b Buffer
	const n = 2000
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 4 {
				b.Add(&store.Job{ID: string(rune('a'+g)) + string(rune(i))}, time.Now())
			}
		}()
	}
	seen := map[string]int{}
	var mu sync.Mutex
	done := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				jobs := b.Take(7, time.Hour, time.Now(), nil)
				mu.Lock()
				for _, j := range jobs {
					seen[j.ID]++
				}
				total := len(seen)
				mu.Unlock()
				if total == n {
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, id)
	}
}

// TestExpireArming: Add asks for a timer only when none is due; Expire returns the stale jobs and,
// while jobs remain, when the oldest goes stale; once empty, the next Add asks again.
func TestExpireArming(t *testing.T) {
	var b Buffer
	t0 := time.Now()
	const within = 100 * time.Millisecond
	require.True(t, b.Add(&store.Job{ID: "a"}, t0), "the first Add arms")
	require.False(t, b.Add(&store.Job{ID: "b"}, t0.Add(30*time.Millisecond)), "an expiry is due already")
	require.False(t, b.Add(&store.Job{ID: "c"}, t0.Add(60*time.Millisecond)))

	stale, next := b.Expire(within, t0.Add(within))
	require.Equal(t, []string{"a"}, ids(stale))
	require.Equal(t, t0.Add(30*time.Millisecond+within), next, "next: when b goes stale")
	require.False(t, b.Add(&store.Job{ID: "d"}, t0.Add(110*time.Millisecond)), "still watched: the next Expire is due")

	// The producer takes b, c and d before they go stale: the due Expire finds nothing and disarms.
	require.Equal(t, []string{"b", "c", "d"}, ids(b.Take(10, within, t0.Add(120*time.Millisecond), nil)))
	stale, next = b.Expire(within, next)
	require.Empty(t, stale)
	require.True(t, next.IsZero())
	require.True(t, b.Add(&store.Job{ID: "e"}, t0.Add(time.Second)), "an empty buffer arms again")
}

// TestRemove: Remove takes out only the job named (with a token, only that run of it), once, and
// the others keep their order.
func TestRemove(t *testing.T) {
	var b Buffer
	now := time.Now()
	for _, id := range []string{"a", "b", "c"} {
		b.Add(&store.Job{ID: id, ClaimToken: "t"}, now)
	}
	require.False(t, b.Remove("b", "other"), "another run")
	require.True(t, b.Remove("b", "t"))
	require.False(t, b.Remove("b", "t"), "removed once")
	require.False(t, b.Remove("x", ""))
	require.True(t, b.Remove("c", ""), "any run")
	require.Equal(t, []string{"a"}, ids(b.Take(5, time.Second, now, nil)))
}
