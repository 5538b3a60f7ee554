package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// maintHooked is a memory store whose SwapSetting of the maintenance setting runs a hook once,
// before (or after) the swap: it puts another replica's request exactly between one replica's read of
// the state and its write (or between its write and what it does next), deterministically.
type maintHooked struct {
	*memory.Store
	mu     sync.Mutex
	before func(old, new json.RawMessage) // run once before the matching swap
	after  func(old, new json.RawMessage) // run once after the matching successful swap
}

func (h *maintHooked) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	var before, after func(old, new json.RawMessage)
	if key == store.MaintenanceSetting {
		h.mu.Lock()
		before, h.before = h.before, nil
		h.mu.Unlock()
	}
	if before != nil {
		before(old, new)
	}
	ok, err := h.Store.SwapSetting(ctx, key, old, new)
	if ok && key == store.MaintenanceSetting {
		h.mu.Lock()
		after, h.after = h.after, nil
		h.mu.Unlock()
	}
	if after != nil {
		after(old, new)
	}
	return ok, err
}

// maintPair returns two servers on one memory store (two replicas), the first over the hooked
// view of it.
func maintPair(t *testing.T) (*Server, *Server, *maintHooked) {
	t.Helper()
	mem := memory.New()
	h := &maintHooked{Store: mem}
	var out []*Server
	for _, st := range []store.Store{h, mem} {
		c, err := pronto.NewClient(st, &pronto.Config{})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := newTestServer(t, Config{Client: c})
		out = append(out, s)
	}
	return out[0], out[1], h
}

// maintNoneStuck fails when maintenance is off yet one of queues stays paused.
func maintNoneStuck(t *testing.T, s *Server, queues ...string) {
	t.Helper()
	m := mustCall(t, s, 200, "GET", "/ojs/v1/admin/system/maintenance", nil)
	if m.body["enabled"] == true || m.body["maintenance"] == true {
		return // still on: nothing to check
	}
	var stuck []string
	for _, q := range queues {
		r := mustCall(t, s, 200, "GET", "/ojs/v1/admin/queues/"+q, nil)
		if r.body["paused"] == true {
			stuck = append(stuck, q)
		}
	}
	if len(stuck) > 0 {
		t.Fatalf("maintenance is off (%s), yet queues %v stay paused for good: no state records them, so no disabling resumes them", m.raw, stuck)
	}
}

// TestMaintenanceEnabledAgainDuringDisable: maintenance is disabled through replica a; after a
// has resumed the recorded queue and before it removes the state, maintenance is enabled again
// through replica b with another reason (b finds the queue running, records it, pauses it). a's
// removal loses its swap and its update runs again on b's state, and resumes every queue b's state
// records (the queue it resumed on its first try was paused again since) before removing it: no
// queue stays paused with maintenance off.
func TestMaintenanceEnabledAgainDuringDisable(t *testing.T) {
	a, b, h := maintPair(t)
	enqueueJob(t, a, `{"type":"m.r","args":[],"options":{"queue":"r32b"}}`)
	mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"first"}`)
	h.mu.Lock()
	h.before = func(old, new json.RawMessage) {
		if new != nil {
			panic(fmt.Sprintf("expected the disabling's removal, got a swap to %s", new))
		}
		mustCall(t, b, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"second"}`)
	}
	h.mu.Unlock()
	off := mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)
	t.Logf("disable: %s", off.raw)
	maintNoneStuck(t, a, "r32b")
}

// TestMaintenanceEnabledAgainSameReasonDuringDisable: as above, but b enables with the same reason as the
// stored state: its update must still change the stored state (it counts the enablings), or a's
// removal of the state it read would succeed while b then pauses the queue it found running.
func TestMaintenanceEnabledAgainSameReasonDuringDisable(t *testing.T) {
	a, b, h := maintPair(t)
	enqueueJob(t, a, `{"type":"m.r","args":[],"options":{"queue":"r32s"}}`)
	mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"same"}`)
	h.mu.Lock()
	h.before = func(old, new json.RawMessage) {
		mustCall(t, b, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"same"}`)
	}
	h.mu.Unlock()
	off := mustCall(t, a, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)
	t.Logf("disable: %s", off.raw)
	maintNoneStuck(t, a, "r32s")
}

// TestMaintenanceDisabledBetweenEnableRecordAndPauses: enabling through a records the queue, then
// pauses it; a disabling through b that runs between the two reads the state, resumes the queue
// (still running), removes the state and answers resumed_queues with it; a then pauses the queue,
// reads the state again, finds it gone, resumes the queue and answers 409: nothing stays paused.
func TestMaintenanceDisabledBetweenEnableRecordAndPauses(t *testing.T) {
	a, b, h := maintPair(t)
	enqueueJob(t, a, `{"type":"m.r","args":[],"options":{"queue":"r32p"}}`)
	h.mu.Lock()
	h.after = func(old, new json.RawMessage) {
		off := mustCall(t, b, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)
		if !slices.Contains(off.body["resumed_queues"].([]any), any("r32p")) {
			panic(fmt.Sprintf("b did not see the recorded queue: %s", off.raw))
		}
	}
	h.mu.Unlock()
	// The enabling finds the state gone after its pauses: it resumes them and answers 409.
	mustCall(t, a, 409, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true,"reason":"x"}`)
	maintNoneStuck(t, a, "r32p")
}
