package fairq

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func popN(t *testing.T, q *Queue[string], n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	for range n {
		v, ok := q.Pop()
		require.True(t, ok)
		out = append(out, v)
	}
	return out
}

func TestOneKeyIsFirstInFirstOut(t *testing.T) {
	q := New[string]()
	for _, v := range []string{"a", "b", "c"} {
		q.Push("", v)
	}
	require.Equal(t, 3, q.Len())
	require.Equal(t, []string{"a", "b", "c"}, popN(t, q, 3))
	require.Zero(t, q.Len())
}

// TestTurnsAcrossKeys: a key whose items come after many of another's is served in the next turn,
// not after them; each key keeps its own order.
func TestTurnsAcrossKeys(t *testing.T) {
	q := New[string]()
	for _, v := range []string{"a1", "a2", "a3", "a4"} {
		q.Push("A", v)
	}
	q.Push("B", "b1")
	q.Push("B", "b2")
	q.Push("", "n1")
	require.Equal(t, []string{"a1", "b1", "n1", "a2", "b2", "a3", "a4"}, popN(t, q, 7))
}

// TestNewKeyJoinsBeforeTheKeyJustServed: a key that comes (or comes back) while others wait is
// served after the keys waiting since the latest turn, and before the key that had it.
func TestNewKeyJoinsBeforeTheKeyJustServed(t *testing.T) {
	q := New[string]()
	q.Push("A", "a1")
	q.Push("A", "a2")
	q.Push("B", "b1")
	require.Equal(t, []string{"a1"}, popN(t, q, 1)) // next: B, then A
	q.Push("C", "c1")                               // after B, before A's second turn
	require.Equal(t, []string{"b1", "c1", "a2"}, popN(t, q, 3))
	q.Push("B", "b2") // B came back to an empty queue
	require.Equal(t, []string{"b2"}, popN(t, q, 1))

	// One key served while others come: each newcomer goes before that key's next turn.
	for _, v := range []string{"a1", "a2", "a3"} {
		q.Push("A", v)
	}
	require.Equal(t, []string{"a1"}, popN(t, q, 1))
	q.Push("B", "b1")
	require.Equal(t, []string{"b1", "a2"}, popN(t, q, 2))
	q.Push("C", "c1")
	require.Equal(t, []string{"c1", "a3"}, popN(t, q, 2))

	// So too when the key just served had emptied its line and come back since.
	q.Push("A", "a4")
	require.Equal(t, []string{"a4"}, popN(t, q, 1))
	q.Push("A", "a5")
	q.Push("A", "a6")
	q.Push("B", "b2")
	require.Equal(t, []string{"b2", "a5", "a6"}, popN(t, q, 3))
}

func TestPopWaitsAndCloseDrains(t *testing.T) {
	q := New[string]()
	got := make(chan string)
	go func() {
		v, ok := q.Pop()
		if ok {
			got <- v
		}
		close(got)
	}()
	select {
	case v := <-got:
		t.Fatalf("Pop returned %q from an empty queue", v)
	case <-time.After(20 * time.Millisecond):
	}
	q.Push("k", "x")
	require.Equal(t, "x", <-got)

	q.Push("k", "left")
	q.Close()
	v, ok := q.Pop()
	require.True(t, ok, "items pushed before Close are still served")
	require.Equal(t, "left", v)
	_, ok = q.Pop()
	require.False(t, ok)
	require.Panics(t, func() { q.Push("k", "late") })
}

func TestCloseWakesEveryWaiter(t *testing.T) {
	q := New[int]()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok := q.Pop()
			require.False(t, ok)
		}()
	}
	q.Close()
	wg.Wait()
}

// TestLongLineStaysCompact: a line that never empties does not keep what it served.
func TestLongLineStaysCompact(t *testing.T) {
	q := New[int]()
	for i := range 100 {
		q.Push("", i)
	}
	for i := range 100_000 {
		v, ok := q.Pop()
		require.True(t, ok)
		require.Equal(t, i, v)
		q.Push("", i+100)
	}
	l := q.lines[""]
	require.LessOrEqual(t, cap(l.items), 1024, "the served items were let go")
}

// TestConcurrentProducersAndConsumers: every item pushed by several goroutines is popped exactly
// once by several others (run with -race).
func TestConcurrentProducersAndConsumers(t *testing.T) {
	q := New[int]()
	const producers, each = 4, 5000
	seen := make([]int, producers*each)
	var mu sync.Mutex
	var consumers sync.WaitGroup
	for range 6 {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for {
				v, ok := q.Pop()
				if !ok {
					return
				}
				mu.Lock()
				seen[v]++
				mu.Unlock()
			}
		}()
	}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				q.Push(string(rune('a'+p%2)), p*each+i)
			}
		}()
	}
	wg.Wait()
	q.Close()
	consumers.Wait()
	for v, n := range seen {
		require.Equal(t, 1, n, "item %d", v)
	}
	require.Zero(t, q.Len())
}
