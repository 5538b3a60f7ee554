package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// Settings changed through several replicas at once: each change applies to the setting as stored
// when it is written (store.SettingSwapper), so none overwrites another. The gated tests hold one
// replica between its read of a setting and its write while the other changes it, which lost the
// other's change when the write replaced the whole setting.

// TestReplicasMaintenanceEnabledTogether: maintenance enabled through two replicas at once, the
// second having read the mode off before the first paused every queue, then disabled: the state
// records the queues the first paused, and disabling resumes them.
func TestReplicasMaintenanceEnabledTogether(t *testing.T) {
	a, b, g := replicaGatedPair(t)
	for i := range 3 {
		enqueueJob(t, a, fmt.Sprintf(`{"type":"m.mr","args":[],"options":{"queue":"mmr%d"}}`, i))
	}
	g.arm(store.MaintenanceSetting, 0)
	done := make(chan string, 1)
	go func() {
		code, body := replicaCall(t, b, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"b"}`)
		done <- fmt.Sprint(code, " ", body)
	}()
	<-g.reached // b has read the mode off
	mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"a"}`)
	close(g.release)
	if got := <-done; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("enable through b: %s", got)
	}
	on := mustCall(t, b, 200, "GET", "/ojs/v1/admin/system/maintenance", nil)
	for i := range 3 {
		if !slices.Contains(on.body["paused_queues"].([]any), any(fmt.Sprintf("mmr%d", i))) {
			t.Fatalf("the state forgot queue mmr%d, which enabling through a paused: %s", i, on.raw)
		}
	}
	off := mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)
	if got := off.body["resumed_queues"].([]any); len(got) != 3 {
		t.Fatalf("disable resumed %v, want the 3 queues: %s", got, off.raw)
	}
	for i := range 3 {
		q := mustCall(t, a, 200, "GET", fmt.Sprintf("/ojs/v1/admin/queues/mmr%d", i), nil)
		if q.body["paused"] == true {
			t.Fatalf("maintenance is off, yet queue mmr%d stays paused: %s", i, q.raw)
		}
	}
}

// TestReplicasPoolsCreatedTogether: two pools created through two replicas at once, the second
// having read the pools before the first stored its own: both stay.
func TestReplicasPoolsCreatedTogether(t *testing.T) {
	a, b, g := replicaGatedPair(t)
	g.arm("worker_pools", 1) // putPool reads the pool first (PoolGet), then PoolSet reads to write
	done := make(chan string, 1)
	go func() {
		code, body := replicaCall(t, b, "PUT", "/ojs/v1/admin/pools/pb", `{"queues":["qb"]}`)
		done <- fmt.Sprint(code, " ", body)
	}()
	<-g.reached
	mustCall(t, a, 200, "PUT", "/ojs/v1/admin/pools/pa", `{"queues":["qa"]}`)
	close(g.release)
	if got := <-done; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("put pb through b: %s", got)
	}
	for _, p := range []string{"pa", "pb"} {
		mustCall(t, a, 200, "GET", "/ojs/v1/admin/pools/"+p, nil)
		mustCall(t, b, 200, "GET", "/ojs/v1/admin/pools/"+p, nil)
	}
}

// TestReplicasPoolIsolationCheckedAgainstStored: a pool that would share a queue with an isolated
// pool created meanwhile through another replica is refused, as it is when created after it.
func TestReplicasPoolIsolationCheckedAgainstStored(t *testing.T) {
	a, b, g := replicaGatedPair(t)
	g.arm("worker_pools", 1)
	done := make(chan *response, 1)
	go func() {
		code, body := replicaCall(t, b, "PUT", "/ojs/v1/admin/pools/shared", `{"queues":["qi"]}`)
		done <- &response{status: code, raw: []byte(body)}
	}()
	<-g.reached
	mustCall(t, a, 200, "PUT", "/ojs/v1/admin/pools/iso", `{"queues":["qi"],"isolated":true}`)
	close(g.release)
	if r := <-done; r.status != 400 {
		t.Fatalf("put shared through b, sharing the isolated pool's queue: %d %s, want 400", r.status, r.raw)
	}
	mustCall(t, a, 404, "GET", "/ojs/v1/admin/pools/shared", nil)
}

// TestReplicasQueueRetentionSetTogether: a queue's completed retention set through one replica
// while its cancelled retention is set through another: both stay.
func TestReplicasQueueRetentionSetTogether(t *testing.T) {
	a, b, g := replicaGatedPair(t)
	g.arm("queue.retention", 0)
	done := make(chan string, 1)
	go func() {
		code, body := replicaCall(t, b, "PUT", "/ojs/v1/admin/queues/rq/config", `{"retention":{"completed":"PT1H"}}`)
		done <- fmt.Sprint(code, " ", body)
	}()
	<-g.reached
	mustCall(t, a, 200, "PUT", "/ojs/v1/admin/queues/rq/config", `{"retention":{"cancelled":"PT2H"}}`)
	close(g.release)
	if got := <-done; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("put completed through b: %s", got)
	}
	r := mustCall(t, a, 200, "GET", "/ojs/v1/admin/queues/rq/config", nil)
	ret, _ := r.body["retention"].(map[string]any)
	if ret["completed"] != "PT1H" || ret["cancelled"] != "PT2H" {
		t.Fatalf("retention: %s, want completed PT1H and cancelled PT2H", r.raw)
	}
}

// TestReplicasPoolsCreatedConcurrently: pools created by concurrent PUTs spread over two replicas
// of each shared store all stay, and each PUT answers its pool.
func TestReplicasPoolsCreatedConcurrently(t *testing.T) {
	for _, kind := range replicaKinds {
		t.Run(kind, func(t *testing.T) {
			ss := replicaServers(t, kind, 2, Config{})
			const pools = 20
			var wg sync.WaitGroup
			errs := make(chan string, pools)
			for i := range pools {
				wg.Go(func() {
					s := ss[i%2]
					r := call(t, s, "PUT", fmt.Sprintf("/ojs/v1/admin/pools/p%d", i), fmt.Sprintf(`{"queues":["q%d"]}`, i))
					if r.status != 200 {
						errs <- fmt.Sprintf("put p%d: %d %s", i, r.status, r.raw)
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Fatal(e)
			}
			r := mustCall(t, ss[1], 200, "GET", "/ojs/v1/admin/pools", nil)
			if got := len(r.body["items"].([]any)); got != pools {
				t.Fatalf("%d pools listed after %d answered PUTs: %s", got, pools, r.raw)
			}
		})
	}
}

// replicaGated is a PostgreSQL store whose GetSetting of one key, in a request marked by
// replicaCall, stops after its read until released: it holds one replica between the read and the
// write of a read-modify-write, deterministically.
type replicaGated struct {
	*postgres.Store
	mu      sync.Mutex
	key     string
	skip    int // marked reads of key to let through first
	armed   bool
	reached chan struct{}
	release chan struct{}
}

type replicaMark struct{}

func (g *replicaGated) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	v, err := g.Store.GetSetting(ctx, key)
	if ctx.Value(replicaMark{}) != nil {
		g.mu.Lock()
		hold := g.armed && key == g.key
		if hold && g.skip > 0 {
			g.skip--
			hold = false
		}
		if hold {
			g.armed = false
		}
		g.mu.Unlock()
		if hold {
			close(g.reached)
			<-g.release
		}
	}
	return v, err
}

// arm makes the (skip+1)th marked read of key wait for release.
func (g *replicaGated) arm(key string, skip int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.key, g.skip, g.armed = key, skip, true
	g.reached, g.release = make(chan struct{}), make(chan struct{})
}

// replicaGatedPair returns two servers on one PostgreSQL schema, the second over a gated store.
func replicaGatedPair(t *testing.T) (*Server, *Server, *replicaGated) {
	t.Helper()
	sts := replicaStores(t, "postgres", 2)
	g := &replicaGated{Store: sts[1].(*postgres.Store)}
	var out []*Server
	for _, st := range []store.Store{sts[0], g} {
		c, err := pronto.NewClient(st, &pronto.Config{})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := newTestServer(t, Config{Client: c, Backend: "postgres"})
		out = append(out, s)
	}
	return out[0], out[1], g
}
