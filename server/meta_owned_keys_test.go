package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestUnknownAttributesDoNotCountAsMeta: an envelope attribute OJS does not define is kept and
// returned as it came (stored under meta._pronto): the meta limit is the caller's meta's, and
// pronto's own members do not count against it (the body limit bounds extension attributes).
func TestUnknownAttributesDoNotCountAsMeta(t *testing.T) {
	s := newStoreServer(t, "memory")
	big := strings.Repeat("x", 70<<10)
	body := `{"type":"a.b","args":[],"x_custom":"` + big + `"}`
	r := call(t, s, "POST", "/ojs/v1/jobs", body)
	if r.status != 201 {
		t.Fatalf("job without meta but with a 70 KiB extension attribute: status %d, want 201 (the meta is empty): %.300s", r.status, r.raw)
	}
}

// TestCronTemplateMetaNearLimitFires: a cron registration whose job_template.meta is just under the
// 64 KiB meta limit fires: the cron_name and cron_triggered_at every occurrence adds are pronto's, not
// the caller's, and do not count against the limit (counted, every occurrence was refused and the
// schedule parked for an hour, though the registration was 201).
func TestCronTemplateMetaNearLimitFires(t *testing.T) {
	for _, c := range []struct {
		name string
		pad  int
	}{
		{"small meta (control)", 10},
		{"meta 20 bytes under the limit", pronto.DefaultMaxMetaBytes - 30}, // {"pad":"..."}
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStoreServer(t, "memory")
			pad := strings.Repeat("x", c.pad)
			mustCall(t, s, 201, "POST", "/ojs/v1/cron",
				`{"name":"bigmeta","expression":"@every 1s","job_template":{"type":"c.t","args":[],"meta":{"pad":"`+pad+`"},"options":{"queue":"cron-bigmeta"}}}`)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = s.RunCron(ctx) }()
			defer func() { cancel(); <-done }()
			for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				r := mustCall(t, s, 200, "POST", "/ojs/v1/workers/fetch", map[string]any{"queues": []string{"cron-bigmeta"}, "worker_id": "w1"})
				if jobs, _ := r.body["jobs"].([]any); len(jobs) > 0 {
					return
				}
			}
			t.Fatalf("no occurrence of a registered (201) \"@every 1s\" cron inserted its job in 8 s: its template meta is under the limit, cron_name and cron_triggered_at put it over, and fireCron parks the schedule for an hour")
		})
	}
}
