package server

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestFileArchive: batches go to one JSON Lines file per UTC day, each line the archive time and
// the job as the API shows it; a line a crash cut short is ended before the next batch, so every
// later line parses; files are the owner's only; an unwritable folder fails at construction.
func TestFileArchive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "archive")
	a, err := NewFileArchive(dir)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	a.now = func() time.Time { return day }
	done := time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC)
	job := func(id string) *pronto.JobRow {
		return &pronto.JobRow{ID: id, Kind: "bill.charge", Queue: "billing", Args: json.RawMessage(`[{"amount":3}]`),
			State: pronto.StateDiscarded, Attempt: 3, MaxAttempts: 3, CreatedAt: done, CompletedAt: done,
			Errors: []pronto.AttemptError{{Attempt: 3, At: done, Message: "card declined"}}}
	}
	ctx := context.Background()
	if err := a.ArchiveDeadLetter(ctx, []*pronto.JobRow{job("j1"), job("j2")}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dead-letter-2026-11-30.jsonl")
	// A crash in the middle of a write leaves a partial line.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"archived_at":"2026-11-30T23:59:00Z","job":{"id":"j3","ty`); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := a.ArchiveDeadLetter(ctx, []*pronto.JobRow{job("j3")}); err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return day.Add(2 * time.Minute) }
	if err := a.ArchiveDeadLetter(ctx, []*pronto.JobRow{job("j4")}); err != nil {
		t.Fatal(err)
	}

	lines := func(path string) (ids []string, bad int) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var rec struct {
				ArchivedAt time.Time      `json:"archived_at"`
				Job        map[string]any `json:"job"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				bad++
				continue
			}
			if rec.ArchivedAt.IsZero() || rec.Job["type"] != "bill.charge" || rec.Job["queue"] != "billing" ||
				rec.Job["state"] != "discarded" || rec.Job["completed_at"] == nil || rec.Job["errors"] == nil {
				t.Fatalf("record: %s", sc.Bytes())
			}
			ids = append(ids, rec.Job["id"].(string))
		}
		return ids, bad
	}
	ids, bad := lines(path)
	if len(ids) != 3 || ids[0] != "j1" || ids[1] != "j2" || ids[2] != "j3" || bad != 1 {
		t.Fatalf("day one: %v and %d unparsable, want j1 j2 j3 and the torn line", ids, bad)
	}
	if ids, bad := lines(filepath.Join(dir, "dead-letter-2026-12-01.jsonl")); len(ids) != 1 || ids[0] != "j4" || bad != 0 {
		t.Fatalf("day two: %v, %d", ids, bad)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	if err := a.ArchiveDeadLetter(ctx, nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}

	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFileArchive(filepath.Join(file, "sub")); err == nil {
		t.Fatal("a folder under a file: no error")
	}
	if _, err := NewFileArchive(""); err == nil {
		t.Fatal("no folder: no error")
	}
}
