package pronto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store/memory"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestJobLogAttributes: a log line about a job carries its id, kind, queue and attempt.
func TestJobLogAttributes(t *testing.T) {
	var buf lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	workers := pronto.NewWorkers()
	pronto.AddWorker(workers, pronto.WorkFunc(func(ctx context.Context, j *pronto.Job[echoArgs]) error { return nil }))
	cfg := fastConfig(workers, map[string]pronto.QueueConfig{"logs": {MaxWorkers: 1}})
	cfg.Logger = logger
	c := startClient(t, memory.New(), cfg)
	job, err := c.Insert(context.Background(), echoArgs{}, &pronto.InsertOpts{Queue: "logs"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "attempt ended") }, 15*time.Second, 10*time.Millisecond)
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec["msg"] != "pronto: attempt ended" {
			continue
		}
		require.Equal(t, job.ID, rec["job"])
		require.Equal(t, "test.echo", rec["kind"])
		require.Equal(t, "logs", rec["queue"])
		require.Equal(t, 1.0, rec["attempt"])
		require.Equal(t, "completed", rec["state"])
		return
	}
	t.Fatalf("no attempt line in %s", buf.String())
}
