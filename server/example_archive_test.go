package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/server"
	"github.com/pronto-jobs/pronto/store/memory"
)

// A billing queue's dead letter jobs are archived before retention prunes them (ojs-dead-letter.md
// 8.2): the client's archive is a folder of JSON Lines files, and the queue's retention says
// pruning_policy archive. Here the archive is called directly to show what it writes.
func ExampleNewFileArchive() {
	dir, err := os.MkdirTemp("", "dead-letter")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	archive, err := server.NewFileArchive(dir)
	if err != nil {
		panic(err)
	}
	client, err := pronto.NewClient(memory.New(), &pronto.Config{DeadLetterArchive: archive})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	err = client.DeadLetterRetentionsSet(ctx, map[string]pronto.DeadLetterRetention{
		"billing": {MaxAge: 365 * 24 * time.Hour, PruningPolicy: pronto.PruneArchive},
	})
	if err != nil {
		panic(err)
	}

	failed := &pronto.JobRow{ID: "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e01", Kind: "invoice.charge", Queue: "billing",
		Args: json.RawMessage(`[{"invoice":42}]`), State: pronto.StateDiscarded, Attempt: 3, MaxAttempts: 3,
		CompletedAt: time.Now()}
	if err := archive.ArchiveDeadLetter(ctx, []*pronto.JobRow{failed}); err != nil {
		panic(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "dead-letter-*.jsonl"))
	f, err := os.Open(files[0])
	if err != nil {
		panic(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		var rec struct {
			Job struct {
				ID, Type, Queue, State string
			} `json:"job"`
		}
		if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
			panic(err)
		}
		fmt.Println(rec.Job.Type, rec.Job.Queue, rec.Job.State)
	}
	// Output:
	// invoice.charge billing discarded
}
