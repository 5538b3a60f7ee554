package server

import (
	"context"
	"testing"
	"time"
)

// TestReplayFullQueueDoesNotBlockOthers: a replay rule matches two dead-letter jobs, one of queue
// "full" (whose backpressure bound is reached) and one of queue "open". The pass gave up the whole
// rule at the first failed replay (queue_full), so the job of "open" was never replayed for as long
// as "full" stayed full. The job that cannot be replayed now is left in the dead letter queue for a
// later pass, the others are replayed, and the pass reports the failure.
func TestReplayFullQueueDoesNotBlockOthers(t *testing.T) {
	onEveryFlowStore(t, func(t *testing.T, s *Server) {
		mustCall(t, s, 200, "PUT", "/ojs/v1/dead-letter/replay-rules", `{"replay_rules":[{"name":"r1","filter":{"error_type":"Boom"},"delay":"PT0S","max_replays":3}]}`)
		full := discardOne(t, s, "rp.a", "full")
		open := discardOne(t, s, "rp.b", "open")
		mustCall(t, s, 200, "PUT", "/ojs/v1/admin/queues/full/config", `{"backpressure":{"max_depth":1}}`)
		if r := enqueueBody(t, s, `{"type":"rp.f","args":[],"options":{"queue":"full"}}`); r.status != 201 {
			t.Fatalf("filler: %d %s", r.status, r.raw)
		}
		n, err := s.replayPass(context.Background(), time.Now().Add(time.Second))
		if n != 1 || err == nil {
			t.Fatalf("replay pass: %d replayed, error %v; want 1 replayed and the full queue's failure reported", n, err)
		}
		if st := jobState(t, s, open); st != "" {
			t.Fatalf("the dead-letter job of queue \"open\" is %q after the pass, want it replayed (deleted, a new job in its place)", st)
		}
		if st := jobState(t, s, full); st != "discarded" {
			t.Fatalf("the dead-letter job of the full queue is %q, want it left in the dead letter queue", st)
		}
	})
}
