package store

import (
	"encoding/json"
	"testing"
	"time"
)

// TestAttemptErrorStartedAtJSON: an entry stored before started_at existed reads with a zero
// StartedAt, and a zero StartedAt is left out of the JSON a store appends to the history.
func TestAttemptErrorStartedAtJSON(t *testing.T) {
	var old AttemptError
	if err := json.Unmarshal([]byte(`{"attempt":1,"at":"2026-01-02T03:04:05.000123Z","message":"refused"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Attempt != 1 || old.Message != "refused" || !old.StartedAt.IsZero() {
		t.Fatalf("old entry read as %+v", old)
	}
	b, err := json.Marshal(AttemptError{Attempt: 1, At: time.Now(), Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["started_at"]; ok {
		t.Fatalf("a zero started_at is written: %s", b)
	}
	var back AttemptError
	start := time.Date(2026, 1, 2, 3, 4, 5, 123000, time.UTC)
	b, _ = json.Marshal(AttemptError{Attempt: 2, StartedAt: start, At: start.Add(time.Second)})
	if err := json.Unmarshal(b, &back); err != nil || !back.StartedAt.Equal(start) {
		t.Fatalf("round trip of %s: %+v, %v", b, back, err)
	}
}
