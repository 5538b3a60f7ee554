package server

import (
	"context"
	"testing"
	"time"
)

const replayRulesPath = "/ojs/v1/dead-letter/replay-rules"

// deadLetter enqueues a job of queue with one attempt, fetches it and nacks it with an error of type
// errType, so that it enters the dead letter queue; it returns the job's id.
func deadLetter(t *testing.T, s *Server, queue, errType string) string {
	t.Helper()
	id := enqueueJob(t, s, `{"type":"mail.send","args":[1],"options":{"queue":"`+queue+`","retry":{"max_attempts":1}}}`)
	if got := fetchOneID(t, s, queue); got != id {
		t.Fatalf("fetched %s, want %s", got, id)
	}
	mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+id+`","worker_id":"w1","error":{"type":"`+errType+`","message":"refused"}}`)
	return id
}

// jobMeta returns the meta of job id as the API shows it.
func jobMeta(t *testing.T, s *Server, id string) map[string]any {
	t.Helper()
	j := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+id, nil).body["job"].(map[string]any)
	m, _ := j["meta"].(map[string]any)
	return m
}

// TestReplayRulesAPI, on every store: the rules are stored whole, read back with their defaults,
// refused with a 400 naming the field when malformed, and removed by an empty list.
func TestReplayRulesAPI(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			if r := mustCall(t, s, 200, "GET", replayRulesPath, nil); len(r.body["replay_rules"].([]any)) != 0 {
				t.Fatalf("no rules yet: %s", r.raw)
			}
			bad := map[string]string{
				`{}`:           "replay_rules",
				`{"rules":[]}`: "",
				`{"replay_rules":[{"filter":{},"delay":"PT0S","max_replays":1}]}`:                                            "replay_rules[0].name",
				`{"replay_rules":[{"name":"a","delay":"PT0S","max_replays":1},{"name":"a","delay":"PT0S","max_replays":1}]}`: "replay_rules[1].name",
				`{"replay_rules":[{"name":"a","delay":"soon","max_replays":1}]}`:                                             "replay_rules[0].delay",
				`{"replay_rules":[{"name":"a","max_replays":1}]}`:                                                            "replay_rules[0].delay",
				`{"replay_rules":[{"name":"a","delay":"PT0S","max_replays":0}]}`:                                             "replay_rules[0].max_replays",
				`{"replay_rules":[{"name":"a","delay":"PT0S","max_replays":1,"filter":{"since":"2026-01-01T00:00:00Z"}}]}`:   "replay_rules[0].filter.since",
				`{"replay_rules":[{"name":"a","delay":"PT0S","max_replays":1,"filter":{"type":"a,b"}}]}`:                     "replay_rules[0].filter.type",
				`{"replay_rules":[{"name":"a","delay":"PT0S","max_replays":1,"filter":{"queue":"bad queue!"}}]}`:             "replay_rules[0].filter.queue",
				`{"replay_rules":[{"name":"a\u0001","delay":"PT0S","max_replays":1}]}`:                                       "replay_rules[0].name",
			}
			for body, field := range bad {
				r := call(t, s, "PUT", replayRulesPath, body)
				checkErrorBody(t, r, 400, CodeInvalidRequest)
				e := r.body["error"].(map[string]any)
				if field != "" {
					if details, _ := e["details"].(map[string]any); details == nil || details["field"] != field {
						t.Errorf("PUT %s: error %v, want it to name %s", body, e, field)
					}
				}
			}
			checkErrorBody(t, call(t, s, "POST", replayRulesPath, `{}`), 405, CodeMethodNotAllowed)

			put := mustCall(t, s, 200, "PUT", replayRulesPath, `{"replay_rules":[
				{"name":"retry-connection-errors","filter":{"queue":"billing","type":"invoice.*","error_type":"Conn*"},"delay":"PT1H","max_replays":3},
				{"name":"off","delay":"P1D","max_replays":1,"enabled":false}]}`)
			for _, r := range []*response{put, mustCall(t, s, 200, "GET", replayRulesPath, nil), mustCall(t, s, 200, "GET", "/ojs/v1/admin/dead-letter/replay-rules", nil)} {
				rules := r.body["replay_rules"].([]any)
				if len(rules) != 2 {
					t.Fatalf("rules: %s", r.raw)
				}
				first, second := rules[0].(map[string]any), rules[1].(map[string]any)
				f := first["filter"].(map[string]any)
				if first["name"] != "retry-connection-errors" || first["delay"] != "PT1H" || first["max_replays"] != 3.0 || first["enabled"] != true ||
					f["queue"] != "billing" || f["type"] != "invoice.*" || f["error_type"] != "Conn*" || second["enabled"] != false {
					t.Fatalf("rules as stored: %s", r.raw)
				}
			}
			mustCall(t, s, 200, "PUT", "/ojs/v1/admin/dead-letter/replay-rules", `{"replay_rules":[]}`)
			if r := mustCall(t, s, 200, "GET", replayRulesPath, nil); len(r.body["replay_rules"].([]any)) != 0 {
				t.Fatalf("after removing every rule: %s", r.raw)
			}
		})
	}
}

// TestReplayPass, on every store: a rule replays the dead-letter jobs it matches (queue and error
// type) once their delay has passed, as new available jobs recording the replay in their meta, with a
// dead_letter.replayed event; a job that fails again is replayed again until max_replays; disabled
// rules, jobs not matched, and maintenance mode replay nothing.
func TestReplayPass(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, kind)
			ctx := context.Background()
			conn := deadLetter(t, s, "billing", "ConnectionError")
			other := deadLetter(t, s, "billing", "ValidationError")
			elsewhere := deadLetter(t, s, "mail", "ConnectionError")
			mustCall(t, s, 200, "PUT", replayRulesPath, `{"replay_rules":[
				{"name":"conn","filter":{"queue":"billing","error_type":"Conn*"},"delay":"PT1H","max_replays":2},
				{"name":"everything","delay":"PT0S","max_replays":5,"enabled":false}]}`)

			now := time.Now()
			if n, err := s.replayPass(ctx, now); err != nil || n != 0 {
				t.Fatalf("before the delay: replayed %d, %v", n, err)
			}
			later := now.Add(2 * time.Hour)
			mustCall(t, s, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":true}`)
			if n, err := s.replayPass(ctx, later); err != nil || n != 0 {
				t.Fatalf("in maintenance mode: replayed %d, %v", n, err)
			}
			mustCall(t, s, 200, "POST", "/ojs/v1/admin/system/maintenance", `{"enabled":false}`)

			id := conn
			for round := 1; round <= 2; round++ {
				if n, err := s.replayPass(ctx, later); err != nil || n != 1 {
					t.Fatalf("round %d: replayed %d, %v; want 1", round, n, err)
				}
				checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/"+id, nil), 404, CodeNotFound)
				events := mustCall(t, s, 200, "GET", "/ojs/v1/events?types=dead_letter.replayed", nil).body["events"].([]any)
				if len(events) != round {
					t.Fatalf("round %d: %d dead_letter.replayed events", round, len(events))
				}
				data := events[round-1].(map[string]any)["data"].(map[string]any)
				if data["replayed_from"] != id || data["replay_rule"] != "conn" || data["replay_count"] != float64(round) {
					t.Fatalf("round %d: event data %v", round, data)
				}
				next := data["job_id"].(string)
				j := mustCall(t, s, 200, "GET", "/ojs/v1/jobs/"+next, nil).body["job"].(map[string]any)
				meta := jobMeta(t, s, next)
				if j["state"] != "available" || j["queue"] != "billing" || j["attempt"] != 0.0 ||
					meta["ojs.replay_count"] != float64(round) || meta["ojs.replay_rule"] != "conn" || meta["retried_from"] != id ||
					meta["ojs.last_replayed_at"] == nil {
					t.Fatalf("round %d: replayed job %v, meta %v", round, j, meta)
				}
				// It fails again and returns to the dead letter queue, its replay count with it.
				if got := fetchOneID(t, s, "billing"); got != next {
					t.Fatalf("round %d: fetched %s, want %s", round, got, next)
				}
				mustCall(t, s, 200, "POST", "/ojs/v1/workers/nack", `{"job_id":"`+next+`","worker_id":"w1","error":{"type":"ConnectionError","message":"refused"}}`)
				id = next
			}
			if n, err := s.replayPass(ctx, later); err != nil || n != 0 {
				t.Fatalf("after max_replays: replayed %d, %v", n, err)
			}
			for _, left := range []string{id, other, elsewhere} {
				if st := mustCall(t, s, 200, "GET", "/ojs/v1/dead-letter/"+left, nil).body["job"].(map[string]any)["state"]; st != "discarded" {
					t.Fatalf("job %s is %v, want it left in the dead letter queue", left, st)
				}
			}
		})
	}
}

// TestRunReplay: RunReplay applies the rules on the server whose client leads maintenance.
func TestRunReplay(t *testing.T) {
	s := newStoreServer(t, "memory")
	id := deadLetter(t, s, "q", "Boom")
	mustCall(t, s, 200, "PUT", replayRulesPath, `{"replay_rules":[{"name":"all","delay":"PT0S","max_replays":1}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunReplay(ctx, 10*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if countEvents(t, s, "dead_letter.replayed") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader did not replay the dead-letter job")
		}
	}
	checkErrorBody(t, call(t, s, "GET", "/ojs/v1/jobs/"+id, nil), 404, CodeNotFound)
	events := mustCall(t, s, 200, "GET", "/ojs/v1/events?types=dead_letter.replayed", nil).body["events"].([]any)
	next := events[0].(map[string]any)["data"].(map[string]any)["job_id"].(string)
	if meta := jobMeta(t, s, next); meta["retried_from"] != id || meta["ojs.replay_count"] != 1.0 {
		t.Fatalf("the replayed job's meta: %v", meta)
	}
}
