package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/sqlite"
)

// TestJobsGetShowsProgress: `pronto jobs get` shows what the job's worker reported.
func TestJobsGetShowsProgress(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "pronto.db")
	db := []string{"--database-url", "sqlite:" + path}
	run(t, append([]string{"migrate", "up"}, db...)...).ok(t)
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := pronto.NewClient(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := c.InsertRaw(ctx, []pronto.RawJob{{Kind: "report.build", Args: json.RawMessage(`[]`)}})
	if err != nil {
		t.Fatal(err)
	}
	id := rows[0].ID
	if _, err := st.Claim(ctx, store.ClaimParams{Queue: "default", Limit: 1, WorkerID: "w", LeaseDuration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	v := 0.47
	if ok, err := st.SetProgress(ctx, store.ProgressParams{ID: id, Value: &v, Data: json.RawMessage(`{"rows":47}`)}); err != nil || !ok {
		t.Fatalf("set progress: %v %v", ok, err)
	}
	text := run(t, with(db, "jobs", "get", id)...).ok(t).stdout
	if !strings.Contains(text, "Progress:") || !strings.Contains(text, `47% {"rows":47}`) {
		t.Fatalf("jobs get lacks the progress:\n%s", text)
	}
	j := getJob(t, db, id)
	if j.Progress == nil || j.Progress.Value == nil || *j.Progress.Value != 0.47 {
		t.Fatalf("jobs get --json progress: %+v", j.Progress)
	}
}
