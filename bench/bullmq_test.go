package main

import (
	"context"
	"strings"
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

// TestPerJobStats: the per-job command line divides the calls and times between two readings by
// the jobs, busiest first, leaves INFO out, and adds no total of the times (a script call's time
// already holds its script's commands, which the server also counts under their own names).
func TestPerJobStats(t *testing.T) {
	before := map[string][2]float64{"fcall": {10, 1000}, "hset": {20, 100}, "info": {1, 50}}
	after := map[string][2]float64{"fcall": {110, 41000}, "hset": {220, 10100}, "zadd": {100, 2000}, "info": {3, 150}}
	got := perJobStats(before, after, 100)
	want := "4.00 commands per job (a script call's time includes its script's commands): " +
		"fcall 1.000 (400.0 µs) hset 2.000 (100.0 µs) zadd 1.000 (20.0 µs)"
	if got != want {
		t.Fatalf("perJobStats:\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "info") {
		t.Fatal("INFO, the reading itself, counted as a job's command")
	}
}
