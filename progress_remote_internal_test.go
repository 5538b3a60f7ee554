package pronto

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// A remote worker's progress reports held back by the per-job throttle. The throttle's interval is
// raised to an hour here, so a report held back stays held back until something writes it: the
// tests do not depend on how fast the machine runs.

type remoteProgressArgs struct{}

func (remoteProgressArgs) Kind() string { return "test.remote_progress" }

// remoteProgressJob inserts a job on a fresh memory store and returns a client over that store with
// the job fetched by worker "w".
func remoteProgressJob(t *testing.T) (*Client, *JobRow) {
	t.Helper()
	c, err := NewClient(memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Insert(ctx, remoteProgressArgs{}, &InsertOpts{Queue: "rp", MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	return c, remoteFetchOne(t, c)
}

// remoteFetchOne fetches the one job of queue "rp" for worker "w".
func remoteFetchOne(t *testing.T, c *Client) *JobRow {
	t.Helper()
	jobs, err := c.RemoteFetch(context.Background(), RemoteFetchParams{Queues: []string{"rp"}, WorkerID: "w"})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %v %v", jobs, err)
	}
	return jobs[0]
}

// remoteReport reports progress value (and data, when not "") on j under j's claim.
func remoteReport(t *testing.T, c *Client, j *JobRow, value float64, data, checkpoint string) {
	t.Helper()
	p := RemoteProgressParams{ID: j.ID, WorkerID: "w", ClaimToken: j.ClaimToken, Value: &value}
	if data != "" {
		p.Data = json.RawMessage(data)
	}
	if checkpoint != "" {
		p.Checkpoint = json.RawMessage(checkpoint)
	}
	if _, err := c.RemoteProgress(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// holdBackReports makes the throttle of job id (made by a first report) hold every later report
// back for an hour.
func holdBackReports(t *testing.T, c *Client, id string) *progressThrottle {
	t.Helper()
	c.remoteProgressMu.Lock()
	th := c.remoteProgress[id]
	c.remoteProgressMu.Unlock()
	if th == nil {
		t.Fatal("no progress throttle for the job")
	}
	th.mu.Lock()
	th.interval = time.Hour
	th.mu.Unlock()
	return th
}

// storedProgress returns the progress the store keeps for job id.
func storedProgress(t *testing.T, c *Client, id string) *store.Progress {
	t.Helper()
	p, err := c.store.GetProgress(context.Background(), id)
	if err != nil || p == nil {
		t.Fatalf("progress of %s: %+v %v", id, p, err)
	}
	return p
}

// TestRemoteProgressOutcomeWritesHeldBack: a report held back by the throttle is written before the
// outcome, under the claim it belongs to: a nack keeps the last progress and checkpoint
// (ojs-progress.md 6.2, 8.2, 6.4), and an ack the last data.
func TestRemoteProgressOutcomeWritesHeldBack(t *testing.T) {
	ctx := context.Background()
	c, j := remoteProgressJob(t)
	remoteReport(t, c, j, 0.2, `{"step":2}`, `{"offset":2}`)
	holdBackReports(t, c, j.ID)
	remoteReport(t, c, j, 0.9, `{"step":9}`, `{"offset":9}`)
	if _, err := c.RemoteNack(ctx, RemoteNackParams{ID: j.ID, WorkerID: "w", ClaimToken: j.ClaimToken,
		Error: AttemptError{Message: "boom"}}); err != nil {
		t.Fatal(err)
	}
	p := storedProgress(t, c, j.ID)
	if p.Value == nil || *p.Value != 0.9 || string(p.Data) != `{"step":9}` || string(p.Checkpoint) != `{"offset":9}` {
		t.Fatalf("after the nack the job keeps %v %s %s, want the last report: 0.9 {\"step\":9} {\"offset\":9}",
			p.Value, p.Data, p.Checkpoint)
	}

	c, j = remoteProgressJob(t)
	remoteReport(t, c, j, 0.3, `{"phase":"a"}`, "")
	holdBackReports(t, c, j.ID)
	remoteReport(t, c, j, 0.95, `{"phase":"done"}`, "")
	if _, err := c.RemoteAck(ctx, RemoteAckParams{ID: j.ID, WorkerID: "w", ClaimToken: j.ClaimToken}); err != nil {
		t.Fatal(err)
	}
	if p := storedProgress(t, c, j.ID); string(p.Data) != `{"phase":"done"}` {
		t.Fatalf("after the ack the job keeps data %s, want the last report's {\"phase\":\"done\"}", p.Data)
	}
}

// TestRemoteProgressNewClaimDropsHeldBack: attempt 1's report is held back when its claim ends
// through another server (which this client's throttle cannot know), and attempt 2, fetched here,
// reports a lower value: attempt 2's progress is its own report, not attempt 1's merged into it
// (ojs-progress.md 5.3).
func TestRemoteProgressNewClaimDropsHeldBack(t *testing.T) {
	ctx := context.Background()
	c, j := remoteProgressJob(t)
	remoteReport(t, c, j, 0.2, "", "")
	th := holdBackReports(t, c, j.ID)
	remoteReport(t, c, j, 0.9, `{"run":1}`, "")
	other, err := NewClient(c.store, nil) // another server over the same store
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.RemoteNack(ctx, RemoteNackParams{ID: j.ID, WorkerID: "w", ClaimToken: j.ClaimToken, Requeue: true}); err != nil {
		t.Fatal(err)
	}
	j2 := remoteFetchOne(t, c)
	if j2.ClaimToken == j.ClaimToken {
		t.Fatal("the refetch kept the claim token")
	}
	remoteReport(t, c, j2, 0.1, `{"run":2}`, "")
	th.flush()
	p := storedProgress(t, c, j.ID)
	if p.Value == nil || *p.Value != 0.1 || string(p.Data) != `{"run":2}` {
		t.Fatalf("attempt 2 reported 0.1 {\"run\":2} but keeps %v %s", p.Value, p.Data)
	}
}

// TestRemoteProgressEventAnnouncesKeptValue: a report lower than one written before in the same
// attempt is kept as the higher value (ojs-progress.md 5.1), and EventProgress announces that value
// with the report's data; a report of data alone announces it too.
func TestRemoteProgressEventAnnouncesKeptValue(t *testing.T) {
	c, j := remoteProgressJob(t)
	events, stop := c.Subscribe(EventProgress)
	defer stop()
	remoteReport(t, c, j, 0.5, `{"n":1}`, "")
	th := holdBackReports(t, c, j.ID)
	remoteReport(t, c, j, 0.3, `{"n":2}`, "")
	th.flush()
	if _, err := c.RemoteProgress(context.Background(), RemoteProgressParams{ID: j.ID, ClaimToken: j.ClaimToken,
		Data: json.RawMessage(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	th.flush()
	for _, want := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		select {
		case ev := <-events:
			p := ev.Job.Progress
			if p == nil || p.Value == nil || *p.Value != 0.5 || string(p.Data) != want {
				t.Fatalf("EventProgress announced %+v, want 0.5 with %s", p, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no EventProgress for %s", want)
		}
	}
	if p := storedProgress(t, c, j.ID); p.Value == nil || *p.Value != 0.5 || string(p.Data) != `{"n":3}` {
		t.Fatalf("the job keeps %v %s, want 0.5 {\"n\":3}", p.Value, p.Data)
	}
}

// TestProgressThrottleEndClaim: ending a claim writes its held-back report, drops an earlier
// claim's, and refuses later reports.
func TestProgressThrottleEndClaim(t *testing.T) {
	// Every write here is synchronous: an hour's interval never lets the timer write.
	var written []store.ProgressParams
	th := newProgressThrottle(func(p store.ProgressParams) { written = append(written, p) }, time.Hour)
	v := 0.4
	th.report(store.ProgressParams{ID: "j", Token: "a", Value: &v}) // written: the first report
	th.report(store.ProgressParams{ID: "j", Token: "a", Checkpoint: json.RawMessage(`{"o":1}`)})
	th.endClaim("b") // a's report is not b's
	if th.report(store.ProgressParams{ID: "j", Token: "b", Value: &v}) {
		t.Fatal("a report after the claim ended was taken")
	}
	if len(written) != 1 || written[0].Token != "a" || written[0].Checkpoint != nil {
		t.Fatalf("written %+v, want only claim a's first report", written)
	}

	written = nil
	th = newProgressThrottle(func(p store.ProgressParams) { written = append(written, p) }, time.Hour)
	th.report(store.ProgressParams{ID: "j", Token: "a", Value: &v})
	th.report(store.ProgressParams{ID: "j", Token: "a", Checkpoint: json.RawMessage(`{"o":1}`)})
	th.endClaim("a")
	if len(written) != 2 || string(written[1].Checkpoint) != `{"o":1}` {
		t.Fatalf("written %+v, want the held-back checkpoint written as the claim ended", written)
	}
}

// TestRemoteProgressCancelWritesHeldBack: a report held back when the job is cancelled is written
// before the cancel, so the cancelled attempt keeps its last report (ojs-progress.md 8.2), as after
// an ack or a nack.
func TestRemoteProgressCancelWritesHeldBack(t *testing.T) {
	c, j := remoteProgressJob(t)
	remoteReport(t, c, j, 0.2, `{"step":2}`, "")
	holdBackReports(t, c, j.ID)
	remoteReport(t, c, j, 0.7, `{"step":7}`, "")
	if _, err := c.JobCancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	if p := storedProgress(t, c, j.ID); p.Value == nil || *p.Value != 0.7 || string(p.Data) != `{"step":7}` {
		t.Fatalf("after the cancel the job keeps %v %s, want the last report: 0.7 {\"step\":7}", p.Value, p.Data)
	}
}
