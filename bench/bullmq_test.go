package main

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestRedisRoundTrip: the BullMQ comparison's round-trip probe times real PINGs, and names the two
// scenarios that wait one round trip per job.
func TestRedisRoundTrip(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
	defer rdb.Close()
	rtt, err := redisRoundTrip(context.Background(), rdb)
	if err != nil {
		t.Fatalf("no Redis at %s (start one: redis-server --daemonize yes --save \"\" --appendonly no): %v", redisAddr(), err)
	}
	if rtt <= 0 || rtt > time.Second {
		t.Fatalf("round trip %v: not a measured PING", rtt)
	}
	want := map[string]bool{"queue-add": true, "queue-add-bulk": false, "worker-generic": true, "worker-concurrent": false}
	for _, sc := range bullmqScenarios {
		if got := roundTripBound(sc); got != want[sc] {
			t.Errorf("roundTripBound(%q) = %v, want %v", sc, got, want[sc])
		}
	}
}
