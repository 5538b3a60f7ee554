package webhook

import "testing"

// TestChainsLinkAndForget: link returns a key's previous delivery, and beyond its bound the key
// linked least recently is forgotten (a key linked again is recent, whenever it was first linked).
func TestChainsLinkAndForget(t *testing.T) {
	c := newChains(2)
	for _, step := range []struct{ key, id, prev string }{
		{"a", "a1", ""},
		{"a", "a2", "a1"},
		{"b", "b1", ""},
		{"a", "a3", "a2"}, // a is now the most recent
		{"c", "c1", ""},   // forgets b, the least recent
		{"a", "a4", "a3"},
		{"b", "b2", ""}, // b was forgotten; this forgets c
		{"c", "c2", ""},
	} {
		if got := c.link(step.key, step.id); got != step.prev {
			t.Fatalf("link(%s, %s) = %q, want %q", step.key, step.id, got, step.prev)
		}
		if len(c.links) > 2 || c.lru.Len() != len(c.links) {
			t.Fatalf("after link(%s): %d links, %d in the list; the bound is 2", step.key, len(c.links), c.lru.Len())
		}
	}
}
