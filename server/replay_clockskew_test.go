package server

import (
	"context"
	"testing"
	"time"
)

// TestReplayClockSkew: a rule's delay counts from the store's clock, which stamped the job's
// discard, not from the clock of the server that leads: one an hour fast replayed, under a 30
// minute delay, a job discarded a moment ago (and one an hour slow would wait an hour longer). A
// job under a rule without delay, replayed in the same pass, tells when the pass has run (a server
// an hour slow replayed it only an hour later).
func TestReplayClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			s := newStoreServer(t, "postgres")
			setProcessSkew(t, s, skew)
			waiting := deadLetter(t, s, "later", "Boom")
			now := deadLetter(t, s, "now", "Boom")
			mustCall(t, s, 200, "PUT", replayRulesPath, `{"replay_rules":[
				{"name":"later","filter":{"queue":"later"},"delay":"PT30M","max_replays":1},
				{"name":"now","filter":{"queue":"now"},"delay":"PT0S","max_replays":1}]}`)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.RunReplay(ctx, 10*time.Millisecond)
			}()
			defer func() { cancel(); <-done }()
			// The rules run in order in each pass: once the job under the rule without delay is
			// replayed (its dead-letter entry deleted), the other was judged by the same pass.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if call(t, s, "GET", "/ojs/v1/jobs/"+now, nil).status == 404 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the leader did not replay the job under the rule without delay")
				}
			}
			cancel()
			<-done
			if st := mustCall(t, s, 200, "GET", "/ojs/v1/dead-letter/"+waiting, nil).body["job"].(map[string]any)["state"]; st != "discarded" {
				t.Fatalf("the job discarded a moment ago is %v: replayed before its rule's 30 minutes", st)
			}
		})
	}
}
