package server

import (
	"context"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// storeNow reads the store's clock (PostgreSQL now(), Redis TIME).
func storeNow(t *testing.T, s *Server) time.Time {
	t.Helper()
	sc, ok := s.store.(interface {
		StoreNow(context.Context) (time.Time, error)
	})
	if !ok {
		t.Fatalf("store %T has no clock of its own", s.store)
	}
	now, err := sc.StoreNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// relativeBodies are enqueues due 10 minutes from now, by each member that takes a relative time.
var relativeBodies = map[string]string{
	"options.scheduled_at": `{"type":"a.b","args":[],"options":{"scheduled_at":"+PT10M"}}`,
	"options.delay_until":  `{"type":"a.b","args":[],"options":{"delay_until":"+PT10M"}}`,
	"scheduled_at":         `{"type":"a.b","args":[],"scheduled_at":"+PT10M"}`,
	// options' schedule wins over the envelope's, as an absolute one does.
	"options over envelope": `{"type":"a.b","args":[],"scheduled_at":"+PT5H","options":{"delay_until":"+PT10M"}}`,
}

// TestRelativeTimeClockSkew: an OJS relative time ("+PT10M") is due that long after the store's
// now, whatever the clock of the server that decoded it says. The envelope is decoded at a time an
// hour off, as a server whose clock is an hour fast or slow decodes it (handlers pass their
// time.Now); before, the relative time was made absolute from that time: the job was due an hour
// late, or at once.
func TestRelativeTimeClockSkew(t *testing.T) {
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), &pronto.Config{})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newTestServer(t, Config{Client: client, Backend: kind})
			for _, skew := range []time.Duration{time.Hour, -time.Hour} {
				for name, body := range relativeBodies {
					req, e := decodeJob([]byte(body), time.Now().Add(skew))
					if e != nil {
						t.Fatalf("%s: %s", name, e.message)
					}
					rows, err := s.client.InsertOJS(context.Background(), []pronto.OJSJob{req.job})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					want := storeNow(t, s).Add(10 * time.Minute)
					if d := rows[0].ScheduledAt.Sub(want); d < -time.Minute || d > time.Minute {
						t.Errorf("server clock %s off, %s: due %s, the store's now + 10 min is %s", skew, name, rows[0].ScheduledAt, want)
					}
				}
			}
		})
	}
}

// TestRelativeTimeOverHTTP: a relative time sent to the enqueue and batch endpoints schedules the
// job that long after the store's now.
func TestRelativeTimeOverHTTP(t *testing.T) {
	s := newStoreServer(t, "postgres")
	check := func(name string, job map[string]any) {
		t.Helper()
		if job["state"] != "scheduled" {
			t.Errorf("%s: state %v, want scheduled", name, job["state"])
		}
		at, err := time.Parse(time.RFC3339Nano, job["scheduled_at"].(string))
		if err != nil {
			t.Fatalf("%s: scheduled_at %v: %v", name, job["scheduled_at"], err)
		}
		want := storeNow(t, s).Add(10 * time.Minute)
		if d := at.Sub(want); d < -time.Minute || d > time.Minute {
			t.Errorf("%s: due %s, the store's now + 10 min is %s", name, at, want)
		}
	}
	for name, body := range relativeBodies {
		r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs", body)
		check(name, r.body["job"].(map[string]any))
	}
	r := mustCall(t, s, 201, "POST", "/ojs/v1/jobs/batch", `{"jobs":[`+relativeBodies["options.scheduled_at"]+`,`+relativeBodies["scheduled_at"]+`]}`)
	for _, j := range r.body["jobs"].([]any) {
		check("batch", j.(map[string]any))
	}
}
