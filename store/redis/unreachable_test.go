package redis

import (
	"runtime"
	"testing"
	"time"
	"weak"

	goredis "github.com/redis/go-redis/v9"
)

// hooked reports whether hookedClients remembers the client behind key.
func hooked(key any) bool {
	_, ok := hookedClients.Load(key)
	return ok
}

// TestUnreachableHookOncePerClient: stores and notifiers made on one client hook it once, however
// many are made; the client is remembered only while it lives, so that remembering it neither
// keeps it alive nor grows without end.
func TestUnreachableHookOncePerClient(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled here
	key := weak.Make(c)
	added := 0
	for range 3 {
		before := hooked(key)
		addUnreachableHook(c)
		if !before && hooked(key) {
			added++
		}
	}
	if added != 1 || !hooked(key) {
		t.Fatalf("the client was hooked %d times, want once", added)
	}
	_ = c.Close()
	c = nil // the last reference: the client can be collected
	deadline := time.Now().Add(time.Minute)
	for hooked(key) {
		if time.Now().After(deadline) {
			t.Fatal("a collected client is still remembered")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}
