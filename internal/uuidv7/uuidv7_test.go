package uuidv7

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewIsCanonicalAndIncreasing(t *testing.T) {
	prev := ""
	for i := 0; i < 20000; i++ {
		id := New()
		require.True(t, Valid(id), "not a canonical UUIDv7: %s", id)
		require.Greater(t, id, prev, "ids must increase within a process")
		prev = id
	}
}

func TestNewConcurrentUnique(t *testing.T) {
	var mu sync.Mutex
	seen := make(map[string]bool)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				id := New()
				mu.Lock()
				require.False(t, seen[id], "duplicate id %s", id)
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, 40000)
}

func TestTimeRoundTrip(t *testing.T) {
	before := time.Now().Add(-time.Millisecond)
	id := New()
	got := Time(id)
	require.False(t, got.Before(before.Truncate(time.Millisecond)))
	require.True(t, got.Before(time.Now().Add(2*time.Second)))
	require.True(t, Time("not-a-uuid").IsZero())
}

func TestValidRejects(t *testing.T) {
	for _, s := range []string{
		"", "019461a8-1a2b-4c3d-8e4f-5a6b7c8d9e0f", // v4
		"019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F", // uppercase
		"019461a81a2b7c3d8e4f5a6b7c8d9e0f",     // no hyphens
	} {
		require.False(t, Valid(s), s)
	}
	require.True(t, Valid("019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f"))
}
