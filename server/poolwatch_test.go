package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/promexport"
)

// fetchQueues fetches through s with body and returns the fetched jobs' queues and ids.
func fetchQueues(t *testing.T, s *Server, body map[string]any) (queues, ids []string) {
	t.Helper()
	r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", body)
	for _, j := range r.body["jobs"].([]any) {
		j := j.(map[string]any)
		queues = append(queues, j["queue"].(string))
		ids = append(ids, j["id"].(string))
	}
	return queues, ids
}

// schedEvents returns the data of the events of type typ in s's log.
func schedEvents(t *testing.T, s *Server, typ string) []map[string]any {
	t.Helper()
	r := mustCall(t, s, 200, "GET", "/ojs/v1/events?types="+typ, nil)
	var out []map[string]any
	for _, e := range r.body["events"].([]any) {
		e := e.(map[string]any)
		if e["type"] != typ {
			t.Fatalf("events?types=%s returned %v", typ, e)
		}
		out = append(out, e["data"].(map[string]any))
	}
	return out
}

// TestPoolIsolationHTTP: an isolated pool's queues are served only to fetches through it (§6.3,
// FS-R006): a fetch naming no pool, or another pool, gets nothing from them (and no error); a pool
// that is not isolated cannot share an isolated pool's queue; lifting the isolation opens the queue
// again; another server applies the isolation from its first fetch. On every store.
func TestPoolIsolationHTTP(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := openStore(t, kind)
			client, err := pronto.NewClient(st, &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})
			enqueue := func(queue string, n int) {
				t.Helper()
				for range n {
					mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"iso","args":[],"options":{"queue":"`+queue+`"}}`)
				}
			}
			enqueue("payments", 3)
			enqueue("default", 3)
			enqueue("images", 2)

			// Before any isolation a fetch naming no pool drains payments first.
			r := mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/pay", `{"queues":["payments"],"isolated":true}`)
			if r.body["isolated"] != true {
				t.Fatalf("put isolated: %s", r.raw)
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/gen", `{"queues":["default","images"]}`)
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/pools/gen", nil); r.body["isolated"] != false {
				t.Fatalf("a pool not isolated: %s", r.raw)
			}

			// No pool named: payments is skipped, the other queues serve.
			got, _ := fetchQueues(t, s, map[string]any{"queues": []string{"payments", "default"}, "worker_id": "w1", "count": 10})
			if strings.Join(got, ",") != "default,default,default" {
				t.Fatalf("fetch naming no pool took %v", got)
			}
			if got, _ := fetchQueues(t, s, map[string]any{"queues": []string{"payments"}, "worker_id": "w1"}); len(got) != 0 {
				t.Fatalf("fetch naming no pool, only the isolated queue, took %v", got)
			}
			// Another pool cannot name the queue (it is not among its queues), nor take it in.
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "gen", "queues": []string{"payments"}}), 400, CodeInvalidRequest)
			r = call(t, s, "PUT", "/ojs/v1/admin/pools/gen", `{"queues":["default","images","payments"]}`)
			checkErrorBody(t, r, 400, CodeInvalidRequest)
			if !strings.Contains(string(r.raw), "isolated pool") {
				t.Fatalf("conflict not named: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/pools/gen", `{"queues":["default"],"isolated":"yes"}`), 400, CodeInvalidRequest)
			// Through the pool: its jobs.
			if got, _ := fetchQueues(t, s, map[string]any{"pool": "pay", "worker_id": "w2"}); strings.Join(got, ",") != "payments" {
				t.Fatalf("fetch through the isolated pool took %v", got)
			}

			// Two isolated pools sharing images: each serves it, the pool that is not isolated (gen)
			// cannot list it any more, and a fetch naming no pool gets nothing from it.
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/pools/gpu", `{"queues":["images"],"isolated":true}`), 400, CodeInvalidRequest)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/gen", `{"queues":["default"]}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/gpu", `{"queues":["images"],"isolated":true}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/gpu2", `{"queues":["images","payments"],"isolated":true}`)
			if got, _ := fetchQueues(t, s, map[string]any{"queues": []string{"images"}, "worker_id": "w1"}); len(got) != 0 {
				t.Fatalf("fetch naming no pool took %v from a queue two isolated pools share", got)
			}
			if got, _ := fetchQueues(t, s, map[string]any{"pool": "gpu", "worker_id": "w3"}); strings.Join(got, ",") != "images" {
				t.Fatalf("fetch through gpu took %v", got)
			}
			if got, _ := fetchQueues(t, s, map[string]any{"pool": "gpu2", "worker_id": "w3"}); strings.Join(got, ",") != "images" {
				t.Fatalf("fetch through gpu2 took %v", got)
			}

			// A second server on the same store applies the isolation from its first fetch.
			client2, err := pronto.NewClient(st, &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s2, _ := newTestServer(t, Config{Client: client2})
			if got, _ := fetchQueues(t, s2, map[string]any{"queues": []string{"payments"}, "worker_id": "w4"}); len(got) != 0 {
				t.Fatalf("second server: fetch naming no pool took %v", got)
			}

			// Lifting the isolation (gpu2 no longer lists payments, pay not isolated): payments is
			// open to every fetch again, through this server at once.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/gpu2", `{"queues":["images"],"isolated":true}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/pay", `{"queues":["payments"],"isolated":false}`)
			if got, _ := fetchQueues(t, s, map[string]any{"queues": []string{"payments"}, "worker_id": "w1"}); strings.Join(got, ",") != "payments" {
				t.Fatalf("after lifting the isolation the fetch took %v", got)
			}
			// Deleting the isolated pools opens images.
			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/pools/gpu", nil)
			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/pools/gpu2", nil)
			enqueue("images", 1)
			if got, _ := fetchQueues(t, s, map[string]any{"queues": []string{"images"}, "worker_id": "w1"}); strings.Join(got, ",") != "images" {
				t.Fatalf("after deleting the isolated pools the fetch took %v", got)
			}
		})
	}
}

// TestSchedulingEventsHTTP: scheduling.rebalanced on a change of strategy or weights,
// scheduling.pool_overloaded once when a pool reaches its concurrency (again only after a fetch left
// it room, not while each freed slot is taken at once), and
// scheduling.queue_starved once while a queue with jobs goes unreached (§11.1). On every store.
func TestSchedulingEventsHTTP(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			enqueue := func(queue string, n int) {
				t.Helper()
				for range n {
					mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"ev","args":[],"options":{"queue":"`+queue+`"}}`)
				}
			}

			// Rebalanced: a new pool is no change; the same config again is none either.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/p", `{"queues":["a","b"]}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/p", `{"queues":["a","b"],"strategy":"round-robin","concurrency":3}`)
			if evs := schedEvents(t, s, "scheduling.rebalanced"); len(evs) != 0 {
				t.Fatalf("rebalanced without a change: %v", evs)
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/p", `{"queues":["a","b"],"strategy":"weighted","weights":{"a":2}}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/p", `{"queues":["a","b"],"strategy":"weighted","weights":{"a":2}}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/p", `{"queues":["a","b"],"strategy":"weighted","weights":{"a":5}}`)
			evs := schedEvents(t, s, "scheduling.rebalanced")
			if len(evs) != 2 || evs[0]["pool"] != "p" || evs[0]["previous_strategy"] != "round-robin" || evs[0]["new_strategy"] != "weighted" ||
				fmt.Sprint(evs[1]["previous_weights"], evs[1]["new_weights"]) != "map[a:2 b:1] map[a:5 b:1]" {
				t.Fatalf("rebalanced events: %v", evs)
			}

			// Overloaded: concurrency 2, three jobs.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/small", `{"queues":["oa"],"concurrency":2,"strategy":"strict"}`)
			enqueue("oa", 4)
			_, ids := fetchQueues(t, s, map[string]any{"pool": "small", "worker_id": "w", "count": 5})
			if len(ids) != 2 {
				t.Fatalf("fetched %d, want 2", len(ids))
			}
			for range 3 {
				if got, _ := fetchQueues(t, s, map[string]any{"pool": "small", "worker_id": "w"}); len(got) != 0 {
					t.Fatalf("a full pool served %v", got)
				}
			}
			evs = schedEvents(t, s, "scheduling.pool_overloaded")
			if len(evs) != 1 || evs[0]["pool"] != "small" || evs[0]["active_jobs"] != 2.0 || evs[0]["waiting_jobs"] != 2.0 || evs[0]["concurrency"] != 2.0 {
				t.Fatalf("overloaded events after 3 fetches of a full pool: %v", evs)
			}
			ack := func(id string) {
				t.Helper()
				mustCall(t, s, 200, "POST", "/ojs/v1/workers/ack", map[string]any{"job_id": id, "worker_id": "w"})
			}
			fetchOne := func(want int) []string {
				t.Helper()
				_, got := fetchQueues(t, s, map[string]any{"pool": "small", "worker_id": "w"})
				if len(got) != want {
					t.Fatalf("fetched %d, want %d", len(got), want)
				}
				return got
			}
			// Kept full (a freed slot taken at once): the same occurrence, no new event.
			ack(ids[0])
			third := fetchOne(1)
			fetchOne(0)
			if evs := schedEvents(t, s, "scheduling.pool_overloaded"); len(evs) != 1 {
				t.Fatalf("overloaded events while the pool was kept full: %v", evs)
			}
			// Room left (two free, one asked for): the occurrence is over; filled again, a new one.
			ack(ids[1])
			ack(third[0])
			fetchOne(1) // the last job of oa; one slot stays free
			enqueue("oa", 2)
			fetchOne(1)
			fetchOne(0)
			fetchOne(0)
			if evs := schedEvents(t, s, "scheduling.pool_overloaded"); len(evs) != 2 || evs[1]["waiting_jobs"] != 1.0 {
				t.Fatalf("overloaded events after the pool filled again: %v", evs)
			}

			// Starved: strict [sa, sb] with a 20 ms rotation interval (starvation prevention off): sb
			// is never reached while sa has jobs; once its interval has passed, one event, however many
			// fetches follow.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/st", `{"queues":["sa","sb"],"strategy":"strict","starvation_prevention":{"enabled":false,"rotation_interval":"PT0.02S"}}`)
			enqueue("sa", 40)
			enqueue("sb", 2)
			deadline := time.Now().Add(10 * time.Second)
			fetches := 0
			for len(schedEvents(t, s, "scheduling.queue_starved")) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("no queue_starved event after %d fetches", fetches)
				}
				if got, _ := fetchQueues(t, s, map[string]any{"pool": "st", "worker_id": "ws"}); strings.Join(got, ",") != "sa" {
					t.Fatalf("strict fetch %d took %v", fetches, got)
				}
				fetches++
				time.Sleep(5 * time.Millisecond)
			}
			for range 3 {
				fetchQueues(t, s, map[string]any{"pool": "st", "worker_id": "ws"})
			}
			evs = schedEvents(t, s, "scheduling.queue_starved")
			if len(evs) != 1 || evs[0]["queue"] != "sb" || evs[0]["pool"] != "st" || evs[0]["available_count"] != 2.0 ||
				evs[0]["duration_ms"].(float64) < 20 || !strings.HasPrefix(evs[0]["duration"].(string), "PT") {
				t.Fatalf("queue_starved events: %v", evs)
			}
		})
	}
}

// TestSchedStarvationWatch: the starvation watch (given times, no clock): a queue left unreached for the
// window is a candidate once (checked again only after max(window, minStarveRecheck)), a fetch that
// reaches it (served or found empty) restarts its clock, a pool idle for its window starts afresh,
// and a full pool starves nobody.
func TestSchedStarvationWatch(t *testing.T) {
	p := &pronto.WorkerPool{Name: "p", Queues: []string{"a", "b"}, Strategy: pronto.PoolStrategyStrict,
		StarvationPrevention: &pronto.StarvationPrevention{RotationInterval: 10 * time.Second}}
	var s sched
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	names := func(cs []starveCandidate) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.queue)
		}
		return strings.Join(out, ",")
	}
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	a := []*pronto.JobRow{{Queue: "a"}}
	for sec := 0; sec <= 12; sec += 2 {
		if got := names(s.starving(p, at(sec))); got != "" && sec <= 10 {
			t.Fatalf("at %ds: candidates %s", sec, got)
		} else if sec == 12 && got != "b" {
			t.Fatalf("at 12s: candidates %q, want b", got)
		}
		s.served(p, []string{"a", "b"}, a, at(sec)) // a served first: b unreached
	}
	// Checked at 12 s: not again before 22 s.
	if got := names(s.starving(p, at(14))); got != "" {
		t.Fatalf("at 14s: %s", got)
	}
	if !s.markStarved(p, "b", at(14)) || s.markStarved(p, "b", at(14)) {
		t.Fatal("markStarved: not once")
	}
	// A fetch that found both empty reaches b: no candidate for the next window.
	s.served(p, []string{"a", "b"}, nil, at(16))
	for sec := 18; sec <= 26; sec += 2 {
		if got := names(s.starving(p, at(sec))); got != "" {
			t.Fatalf("at %ds after b was reached: %s", sec, got)
		}
	}
	// Idle for more than the window: afresh.
	if got := names(s.starving(p, at(60))); got != "" {
		t.Fatalf("after an idle pool: %s", got)
	}
	// Full: every queue counts as reached. (Without setOverloaded, both would be candidates at 75 s.)
	if got := names(s.starving(p, at(66))); got != "" {
		t.Fatalf("at 66s: %s", got)
	}
	if !s.setOverloaded(p, true, at(68)) || s.setOverloaded(p, true, at(68)) {
		t.Fatal("setOverloaded: not an edge")
	}
	if got := names(s.starving(p, at(75))); got != "" {
		t.Fatalf("in a full pool: %s", got)
	}
	// Room that a fetch can fill: still the same overload; a fetch that took fewer than it asked
	// for (the queues ran dry) ends it.
	s.room(p, 1, 1, at(76))
	s.served(p, []string{"a", "b"}, a, at(76))
	if s.setOverloaded(p, true, at(77)) {
		t.Fatal("setOverloaded: a new edge while the pool was kept full")
	}
	s.room(p, 2, 2, at(78))
	s.served(p, []string{"a", "b"}, a, at(78))
	if !s.setOverloaded(p, true, at(79)) {
		t.Fatal("setOverloaded: no edge after the queues ran dry")
	}
	s.room(p, 2, 1, at(80)) // asks for less than is free
	if !s.setOverloaded(p, true, at(81)) {
		t.Fatal("setOverloaded: no edge after a fetch that left room")
	}
}

// TestSchedulingMetrics: the fetches feed ojs_scheduling_dispatch_total by queue and pool,
// ojs_scheduling_queue_wait_duration_seconds, ojs_scheduling_dispatch_ratio and
// ojs_scheduling_starvation_events_total, and ojs_scheduling_pool_utilization is read from the store,
// as a scrape of the registry shows (§11.2).
func TestSchedulingMetrics(t *testing.T) {
	var _ SchedulingMetrics = (*promexport.Metrics)(nil)
	m := promexport.New(&promexport.Options{CacheTTL: time.Nanosecond})
	s, client := newTestServer(t, Config{})
	detach := m.Attach(client)
	defer detach()
	s.SetSchedulingMetrics(m)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for _, q := range []string{"ma", "ma", "ma", "mb"} {
		mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"m","args":[],"options":{"queue":"`+q+`"}}`)
	}
	mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/mp", `{"queues":["ma"],"concurrency":4}`)
	if got, _ := fetchQueues(t, s, map[string]any{"pool": "mp", "worker_id": "w", "count": 2}); len(got) != 2 {
		t.Fatalf("pool fetch took %v", got)
	}
	if got, _ := fetchQueues(t, s, map[string]any{"queues": []string{"ma", "mb"}, "worker_id": "w", "count": 2}); len(got) != 2 {
		t.Fatalf("fetch took %v", got)
	}
	s.sched.metrics.Load().m.ObserveStarvation("mb", "mp")

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "ojs_scheduling_") {
			continue
		}
		for _, mt := range f.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case mt.Counter != nil:
				got[key] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				got[key] = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				got[key] = float64(mt.Histogram.GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"ojs_scheduling_dispatch_total{pool=mp,queue=ma}":      2,
		"ojs_scheduling_dispatch_total{pool=,queue=ma}":        1,
		"ojs_scheduling_dispatch_total{pool=,queue=mb}":        1,
		"ojs_scheduling_queue_wait_duration_seconds{queue=ma}": 3,
		"ojs_scheduling_queue_wait_duration_seconds{queue=mb}": 1,
		"ojs_scheduling_dispatch_ratio{queue=ma}":              0.75,
		"ojs_scheduling_dispatch_ratio{queue=mb}":              0.25,
		"ojs_scheduling_pool_utilization{pool=mp}":             0.75,
		"ojs_scheduling_starvation_events_total{queue=mb}":     1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (scraped %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("scraped %v, want %v", got, want)
	}
}

// TestPoolIsolationConcurrent: fetches naming no pool, fetches through pools and pool changes at once
// (run with -race): the isolated queue's jobs go to its pool's fetches only.
func TestPoolIsolationConcurrent(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/pay", `{"queues":["payments"],"isolated":true}`)
	for range 20 {
		mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"c","args":[],"options":{"queue":"payments"}}`)
		mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"c","args":[],"options":{"queue":"default"}}`)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				r := call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"payments", "default"}, "worker_id": fmt.Sprint("w", i)})
				if strings.Contains(string(r.raw), `"queue":"payments"`) || r.status != 200 {
					errs <- string(r.raw)
				}
				s.sched.cache.invalidate()
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 10 {
			if r := call(t, s, "PUT", "/ojs/v1/admin/pools/gen", fmt.Sprintf(`{"queues":["default"],"concurrency":%d}`, 10+i)); r.status != 200 {
				errs <- string(r.raw)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 10 {
			if r := call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "pay", "worker_id": "wp"}); r.status != 200 {
				errs <- string(r.raw)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("fetch naming no pool: %s", e)
	}
}

// BenchmarkFetchIsolation: what isolation adds to a fetch naming no pool, from the cached pools (one
// isolated pool; the fetch's queues are not isolated, the common case).
func BenchmarkFetchIsolation(b *testing.B) {
	s, _ := newTestServer(b, Config{})
	mustCallB := func(method, path, body string) {
		if r := call(b, s, method, path, body); r.status != 200 {
			b.Fatalf("%s %s: %s", method, path, r.raw)
		}
	}
	mustCallB("PUT", "/ojs/v1/admin/pools/pay", `{"queues":["payments"],"isolated":true}`)
	ctx := context.Background()
	queues := []string{"default", "email"}
	for b.Loop() {
		if _, ok := isolate(s.isolation(ctx), "", queues); !ok {
			b.Fatal("isolated")
		}
	}
}
