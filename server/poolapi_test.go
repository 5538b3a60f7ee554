package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestWorkerPoolsHTTP: pools are created, listed with their active workers and jobs, and removed under
// /ojs/v1/admin/pools (ojs-fair-scheduling.md §10.1, FS-004); a fetch naming a pool takes only the
// pool's queues and at most its free capacity; bad configs are named. On every store.
func TestWorkerPoolsHTTP(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})

			r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/pools", nil)
			if items := r.body["items"].([]any); len(items) != 0 {
				t.Fatalf("pools before any: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/pools/critical", nil), 404, CodeNotFound)
			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/critical", `{"queues":["critical","payments"],"concurrency":2}`)
			if r.body["strategy"] != "round-robin" || r.body["concurrency"] != 2.0 || r.body["active_jobs"] != 0.0 {
				t.Fatalf("put: %s", r.raw)
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/general", `{"name":"general","queues":["default"],"strategy":"strict"}`)
			for body, status := range map[string]int{
				`{"queues":[]}`:                                                          400,
				`{"queues":["Bad!"]}`:                                                    400,
				`{"queues":["a","a"]}`:                                                   400,
				`{"queues":["a"],"concurrency":-1}`:                                      400,
				`{"queues":["a"],"strategy":"fastest"}`:                                  400,
				`{"queues":["a"],"weights":{"a":1}}`:                                     400,
				`{"queues":["a"],"strategy":"weighted","weights":{"b":1}}`:               400,
				`{"queues":["a"],"strategy":"weighted","weights":{"a":0}}`:               400,
				`{"queues":["a"],"strategy":"weighted","weights":{"a":1001}}`:            400,
				`{"queues":["a"],"strategy":"weighted","weights":{"a":"3"}}`:             400,
				`{"queues":["a"],"strategy":"weighted","weights":[3]}`:                   400,
				`{"queues":["a"],"starvation_prevention":{"min_dispatch_ratio":0}}`:      400,
				`{"queues":["a"],"starvation_prevention":{"min_dispatch_ratio":1.5}}`:    400,
				`{"queues":["a"],"starvation_prevention":{"rotation_interval":"30s"}}`:   400,
				`{"queues":["a"],"starvation_prevention":{"rotation_interval":"PT0S"}}`:  400,
				`{"queues":["a"],"starvation_prevention":{"enabled":"yes"}}`:             400,
				`{"queues":["a"],"starvation_prevention":{"enabled":true,"surprise":1}}`: 400,
				`{"queues":["a"],"starvation_prevention":true}`:                          400,
				`{"concurrency":3}`:                                                      400,
				`{"queues":["a"],"name":"other"}`:                                        400,
				`{"queues":["a"],"surprise":true}`:                                       400,
			} {
				checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/pools/critical", body), status, "")
			}
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/pools/Bad!", `{"queues":["a"]}`), 400, CodeInvalidRequest)

			for range 3 {
				mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"pay","args":[],"options":{"queue":"payments"}}`)
			}
			mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"other","args":[],"options":{"queue":"default"}}`)

			// A fetch through the pool names no queues, takes the pool's, and stops at its concurrency.
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 2 {
				t.Fatalf("fetched %d through a pool of concurrency 2: %s", n, r.raw)
			}
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 0 {
				t.Fatalf("fetched %d through a full pool: %s", n, r.raw)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "queues": []string{"default"}}), 400, CodeInvalidRequest)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "nope"}), 400, CodeInvalidRequest)

			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/pools", nil)
			items := r.body["items"].([]any)
			if len(items) != 2 {
				t.Fatalf("list: %s", r.raw)
			}
			crit := items[0].(map[string]any)
			if crit["name"] != "critical" || crit["active_jobs"] != 2.0 || crit["active_workers"] != 1.0 || items[1].(map[string]any)["active_workers"] != 0.0 {
				t.Fatalf("list: %s", r.raw)
			}

			// Raising the concurrency lets the third job out.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/critical", `{"queues":["critical","payments"],"concurrency":5}`)
			r = mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "critical", "queues": []string{"payments"}, "worker_id": "w1", "count": 10})
			if n := len(r.body["jobs"].([]any)); n != 1 {
				t.Fatalf("fetched %d after raising the concurrency: %s", n, r.raw)
			}

			// Round-robin: fetches of one job take the pool's queues in turns, skipping an empty one.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/rr", `{"queues":["qa","qb","qc"],"strategy":"round-robin"}`)
			for _, q := range []string{"qa", "qa", "qa", "qb", "qb"} {
				mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"rr","args":[],"options":{"queue":"`+q+`"}}`)
			}
			var order []string
			for range 5 {
				r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": "rr", "worker_id": "w2"})
				order = append(order, r.body["jobs"].([]any)[0].(map[string]any)["queue"].(string))
			}
			if got := strings.Join(order, ","); got != "qa,qb,qa,qb,qa" {
				t.Fatalf("round-robin order %s", got)
			}

			mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/pools/critical", nil)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/pools/critical", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/pools", nil), 405, CodeMethodNotAllowed)
		})
	}
}

// TestPoolStrategiesHTTP: the weighted (§7.3, FS-R002) and least-loaded (§7.2) strategies order a
// pool's fetches, starvation prevention (§8, FS-R003) serves a queue short of its share first, and
// GET /ojs/v1/admin/scheduling/stats (§10.2, FS-R004) counts the dispatches. On every store.
func TestPoolStrategiesHTTP(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, _ := storeServer(t, kind, Config{})
			enqueue := func(queue string, n int) {
				t.Helper()
				for range n {
					mustCall(t, s, 201, "POST", "/ojs/v1/jobs", `{"type":"s","args":[],"options":{"queue":"`+queue+`"}}`)
				}
			}
			// fetch takes n jobs one fetch at a time through pool and returns their queues; served
			// counts them per queue.
			served := map[string]float64{}
			fetch := func(pool string, n int) []string {
				t.Helper()
				var got []string
				for range n {
					r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"pool": pool, "worker_id": "w-" + pool})
					jobs := r.body["jobs"].([]any)
					if len(jobs) != 1 {
						t.Fatalf("pool %s: fetched %d jobs, want 1: %s (so far %v)", pool, len(jobs), r.raw, got)
					}
					q := jobs[0].(map[string]any)["queue"].(string)
					got = append(got, q)
					served[q]++
				}
				return got
			}
			count := func(qs []string, q string) int {
				n := 0
				for _, x := range qs {
					if x == q {
						n++
					}
				}
				return n
			}

			// Weighted {wa: 3, wb: 1}: in 8 one-job fetches, 6 from wa and 2 from wb, wb once in
			// each cycle of 4.
			r := mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/w", `{"queues":["wa","wb"],"strategy":"weighted","weights":{"wa":3,"wb":1}}`)
			if w, _ := r.body["weights"].(map[string]any); w["wa"] != 3.0 || w["wb"] != 1.0 {
				t.Fatalf("weighted pool: %s", r.raw)
			}
			enqueue("wa", 20)
			enqueue("wb", 10)
			got := fetch("w", 8)
			if count(got, "wa") != 6 || count(got, "wb") != 2 || count(got[:4], "wb") != 1 {
				t.Fatalf("weighted {wa:3, wb:1}: %v", got)
			}
			// An empty queue (wc, weight 1 by default) is skipped: every fetch gets a job, in the
			// same proportion.
			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/w3", `{"queues":["wa","wb","wc"],"strategy":"weighted","weights":{"wa":3,"wb":1}}`)
			if w, _ := r.body["weights"].(map[string]any); w["wc"] != 1.0 {
				t.Fatalf("weighted pool, a queue without a weight: %s", r.raw)
			}
			got = fetch("w3", 8)
			if count(got, "wa") != 6 || count(got, "wb") != 2 {
				t.Fatalf("weighted {wa:3, wb:1, wc:1 (empty)}: %v", got)
			}
			// Once wc has jobs, it gets its turn within a cycle (5 fetches).
			enqueue("wc", 3)
			if got = fetch("w3", 5); count(got, "wc") == 0 {
				t.Fatalf("weighted: wc, no longer empty, not served in a cycle: %v", got)
			}

			// Least-loaded: the deepest backlog first, ties in the pool's order.
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/ll", `{"queues":["la","lb","lc"],"strategy":"least-loaded"}`)
			enqueue("la", 1)
			enqueue("lb", 3)
			enqueue("lc", 2)
			if got := strings.Join(fetch("ll", 6), ","); got != "lb,lb,lc,la,lb,lc" {
				t.Fatalf("least-loaded order %s", got)
			}

			// Strict without starvation prevention: sa first while it has jobs.
			enqueue("sa", 10)
			enqueue("sb", 10)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/st", `{"queues":["sa","sb"],"strategy":"strict"}`)
			if got := strings.Join(fetch("st", 2), ","); got != "sa,sa" {
				t.Fatalf("strict order %s", got)
			}
			// With it (a share of 0.3 over an hour, so no clock matters here): sb, below 30% of the
			// pool's dispatches, goes first whenever it falls short.
			r = mustCall(t, s, 200, "PUT", "/ojs/v1/admin/pools/st", `{"queues":["sa","sb"],"strategy":"strict","starvation_prevention":{"enabled":true,"rotation_interval":"PT1H","min_dispatch_ratio":0.3}}`)
			if sp, _ := r.body["starvation_prevention"].(map[string]any); sp["enabled"] != true || sp["rotation_interval"] != "PT1H" || sp["min_dispatch_ratio"] != 0.3 {
				t.Fatalf("starvation prevention: %s", r.raw)
			}
			if got := strings.Join(fetch("st", 6), ","); got != "sa,sb,sa,sa,sb,sa" {
				t.Fatalf("strict with starvation prevention: %s", got)
			}

			// Scheduling statistics: the dispatches through this server, per pool and per queue.
			r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/scheduling/stats", nil)
			if r.body["window"] != "PT1M" {
				t.Fatalf("stats: %s", r.raw)
			}
			queues := map[string]map[string]any{}
			var ratios, recent float64
			for _, q := range r.body["queues"].([]any) {
				q := q.(map[string]any)
				queues[q["name"].(string)] = q
				ratios += q["dispatch_ratio_1m"].(float64)
				recent += q["dispatch_count_1m"].(float64)
				if q["dispatch_count_1m"].(float64) > q["dispatch_count"].(float64) {
					t.Fatalf("stats: a minute's count above the total: %v", q)
				}
			}
			// The shares of the minute add up to 1 (or to 0, had the minute held no dispatch).
			if recent > 0 && (ratios < 0.99 || ratios > 1.01) || recent == 0 && ratios != 0 {
				t.Fatalf("stats: the queues' ratios add up to %v: %s", ratios, r.raw)
			}
			if served["wc"] == 0 || served["sa"] != 6 || served["sb"] != 2 {
				t.Fatalf("served %v", served)
			}
			for q, want := range served {
				if got := queues[q]; got == nil || got["dispatch_count"] != want || got["active_jobs"] != want {
					t.Fatalf("stats of queue %s (want %v dispatched and active): %v", q, want, got)
				}
			}
			if got := queues["sa"]["available_jobs"]; got != 4.0 {
				t.Fatalf("stats: sa available %v", got)
			}
			pools := map[string]map[string]any{}
			for _, p := range r.body["pools"].([]any) {
				p := p.(map[string]any)
				pools[p["name"].(string)] = p
			}
			if p := pools["st"]; p == nil || p["dispatch_count"] != 8.0 || p["strategy"] != "strict" || p["active_jobs"] != 8.0 ||
				fmt.Sprint(p["dispatch_counts"]) != "map[sa:6 sb:2]" {
				t.Fatalf("stats of pool st: %v", p)
			}
			if p := pools["w3"]; p == nil || p["dispatch_count"] != 13.0 || p["dispatch_counts"].(map[string]any)["wc"] == 0.0 {
				t.Fatalf("stats of pool w3: %v", p)
			}
			checkErrorBody(t, call(t, s, "POST", "/ojs/v1/admin/scheduling/stats", nil), 405, CodeMethodNotAllowed)
		})
	}
}
