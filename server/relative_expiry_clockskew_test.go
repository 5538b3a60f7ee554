package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
)

// TestRelativeExpiryClockSkew: an OJS relative expires_at ("+PT30M") expires that long after the
// store's now, whatever the clock of the server that decoded it says, through every endpoint that
// enqueues (single, batch, bulk, workflow). Before, it counted from the server's clock: a server an
// hour fast had the job expire an hour late, one an hour slow refused it as already past.
func TestRelativeExpiryClockSkew(t *testing.T) {
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client, Backend: kind})
			const ttl = 30 * time.Minute
			for _, skew := range []time.Duration{time.Hour, -time.Hour} {
				setProcessSkew(t, s, skew)
				var ids []string
				job := func() string {
					id := uuidv7.New()
					ids = append(ids, id)
					return fmt.Sprintf(`{"id":%q,"type":"a.b","args":[],"options":{"expires_at":"+PT30M"}}`, id)
				}
				before := storeNow(t, s)
				for path, body := range map[string]string{
					"/ojs/v1/jobs":       job(),
					"/ojs/v1/jobs/batch": `{"jobs":[` + job() + `,` + job() + `]}`,
					"/ojs/v1/jobs/bulk":  `{"jobs":[` + job() + `]}`,
					"/ojs/v1/workflows":  `{"type":"chain","name":"w","steps":[` + job() + `]}`,
				} {
					if r := call(t, s, "POST", path, body); r.status >= 300 {
						t.Fatalf("server clock %s off: POST %s: status %d: %s", skew, path, r.status, r.raw)
					}
				}
				after := storeNow(t, s)
				for _, id := range ids {
					j, err := s.store.GetJob(context.Background(), id)
					if err != nil {
						t.Fatalf("job %s: %v", id, err)
					}
					// Within the 1 s tolerance of the store's clock, plus the requests' own time.
					if j.ExpiresAt.Before(before.Add(ttl-time.Second)) || j.ExpiresAt.After(after.Add(ttl+time.Second)) {
						t.Errorf("server clock %s off: job %s expires %s, want the store's now (%s to %s) + 30 min",
							skew, id, j.ExpiresAt, before, after)
					}
				}
			}
		})
	}
}
