package lostclaim

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestRecoverySettlesUntilDone: each claim is looked at again until its settle says done, and
// Close makes one last pass over those still pending, then looks at nothing more.
func TestRecoverySettlesUntilDone(t *testing.T) {
	var mu sync.Mutex
	looks := map[string]int{}
	need := map[string]int{"a": 3, "b": 1, "forever": 1 << 30}
	r := New(func(_ context.Context, c string) bool {
		mu.Lock()
		defer mu.Unlock()
		looks[c]++
		return looks[c] >= need[c]
	})
	if !r.Idle() {
		t.Fatal("a new recovery is not idle")
	}
	r.Add("a")
	r.Add("b")
	r.Add("forever")
	seen := func(c string, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return looks[c] >= n
	}
	deadline := time.Now().Add(time.Minute)
	for !seen("a", 3) || !seen("forever", 4) {
		if time.Now().After(deadline) {
			t.Fatalf("looks %v: the loop stopped before a was done", looks)
		}
		time.Sleep(time.Millisecond)
	}
	if r.Idle() {
		t.Fatal("Idle with a claim pending")
	}
	mu.Lock()
	before := looks["forever"]
	mu.Unlock()
	r.Close()
	mu.Lock()
	defer mu.Unlock()
	if looks["forever"] != before+1 {
		t.Fatalf("Close looked at the pending claim %d times, want once", looks["forever"]-before)
	}
	if looks["a"] != 3 || looks["b"] != 1 {
		t.Fatalf("looks %v: a settled at its third look, b at its first, and neither looked at again", looks)
	}
	r.Add("late")
	if looks["late"] != 0 {
		t.Fatal("a claim added after Close was looked at")
	}
	mu.Unlock()
	r.Close() // a second Close looks at nothing
	mu.Lock()
	if looks["late"] != 0 || looks["forever"] != before+1 {
		t.Fatalf("looks %v after a second Close", looks)
	}
}
