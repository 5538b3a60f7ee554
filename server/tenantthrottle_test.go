package server

import (
	"context"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

type throttleArgs struct{}

func (throttleArgs) Kind() string { return "t.job" }

// TestTenantThrottleAPI: a flooding tenant throttled by the leader's noisy-neighbour check shows its
// throttle in GET /ojs/v1/admin/tenants/{id} and /throttle; DELETE .../throttle ends it and restores
// the weight; tenant.created, tenant.throttled and tenant.throttle_released are in the event log once
// each; bad ids are 400 naming tenant_id; on every store.
func TestTenantThrottleAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{
				NoisyNeighbors: &pronto.NoisyNeighborConfig{Interval: 100 * time.Millisecond, Throttle: true, ThrottleFor: time.Hour,
					EnqueueRateRatio: -1, ActiveShare: -1}}) // queue depth alone: the reason is known
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client})

			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/flood", `{"fairness_weight":10}`)
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/tenants/flood", `{"fairness_weight":10}`) // not created again
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/flood", nil); r.body["throttle"] != nil {
				t.Fatalf("a throttle before any: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "GET", "/ojs/v1/admin/tenants/flood/throttle", nil), 404, CodeNotFound)
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/tenants/flood/throttle", nil), 404, CodeNotFound)
			for _, m := range []string{"GET", "DELETE"} {
				r := call(t, s, m, "/ojs/v1/admin/tenants/bad%20id/throttle", nil)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				if f := r.body["error"].(map[string]any)["details"].(map[string]any)["field"]; f != "tenant_id" {
					t.Fatalf("%s: field %v, want tenant_id", m, f)
				}
			}
			checkErrorBody(t, call(t, s, "PUT", "/ojs/v1/admin/tenants/flood/throttle", `{}`), 405, "")

			var ps []pronto.InsertManyParams
			for range 150 {
				ps = append(ps, pronto.InsertManyParams{Args: throttleArgs{}, Opts: &pronto.InsertOpts{Tenant: "flood", Queue: "nq"}})
			}
			var quiet []pronto.InsertManyParams
			for _, q := range []string{"qa", "qb", "qc"} {
				quiet = append(quiet, pronto.InsertManyParams{Args: throttleArgs{}, Opts: &pronto.InsertOpts{Tenant: q, Queue: "nq"}})
			}
			all, err := client.InsertMany(ctx, append(quiet, ps...))
			if err != nil {
				t.Fatal(err)
			}
			quietJobs := all[:len(quiet)]

			deadline := time.Now().Add(20 * time.Second)
			var r *response
			for {
				r = mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/flood", nil)
				// The throttle is recorded just before the weight is lowered: wait for both.
				if r.body["throttle"] != nil && r.body["fairness_weight"] == 2.0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			th, _ := r.body["throttle"].(map[string]any)
			if th == nil || r.body["fairness_weight"] != 2.0 || th["original_weight"] != 10.0 || th["effective_weight"] != 2.0 ||
				th["reason"] != pronto.NoisyQueueDepth || th["action"] != "weight_reduced" || th["until"] == nil {
				t.Fatalf("throttled tenant: %s", r.raw)
			}
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/flood/throttle", nil); r.body["effective_weight"] != 2.0 {
				t.Fatalf("GET throttle: %s", r.raw)
			}

			// Nobody waits behind flood any more: the leader does not throttle it again after the reset.
			for _, j := range quietJobs {
				if _, err := client.JobCancel(ctx, j.ID); err != nil {
					t.Fatal(err)
				}
			}
			r = mustCall(t, s, 200, "DELETE", "/ojs/v1/admin/tenants/flood/throttle", nil)
			if r.body["released"] != true || r.body["weight"] != 10.0 || r.body["kept"] != false || r.body["cause"] != "reset" {
				t.Fatalf("reset: %s", r.raw)
			}
			if r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/tenants/flood", nil); r.body["throttle"] != nil || r.body["fairness_weight"] != 10.0 {
				t.Fatalf("after the reset: %s", r.raw)
			}
			checkErrorBody(t, call(t, s, "DELETE", "/ojs/v1/admin/tenants/flood/throttle", nil), 404, CodeNotFound)

			want := map[string]int{"tenant.created": 1, "tenant.throttled": 1, "tenant.throttle_released": 1}
			var evs []any
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				evs = mustCall(t, s, 200, "GET", "/ojs/v1/events?types=tenant.*", nil).body["events"].([]any)
				if len(evs) >= 3 || time.Now().After(deadline) {
					break
				}
			}
			got := map[string]int{}
			for _, e := range evs {
				ev := e.(map[string]any)
				got[ev["type"].(string)]++
				data := ev["data"].(map[string]any)
				if data["tenant_id"] != "flood" || ev["subject"] != "flood" {
					t.Fatalf("event %v", ev)
				}
				switch ev["type"] {
				case "tenant.throttled":
					for _, k := range []string{"reason", "action", "original_weight", "effective_weight", "until"} {
						if data[k] == nil {
							t.Fatalf("tenant.throttled without %s: %v", k, data)
						}
					}
				case "tenant.created":
					if data["setting"] != "fairness_weight" {
						t.Fatalf("tenant.created: %v", data)
					}
				}
			}
			if len(got) != len(want) || got["tenant.created"] != 1 || got["tenant.throttled"] != 1 || got["tenant.throttle_released"] != 1 {
				t.Fatalf("tenant events %v, want %v", got, want)
			}
		})
	}
}
