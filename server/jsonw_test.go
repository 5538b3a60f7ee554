package server

import (
	"math/rand/v2"
	"testing"
	"time"
)

// appendTime writes what time.Time.AppendFormat writes with timeLayout, in every zone and year.
func TestAppendTimeMatchesFormat(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("x", -7*3600-1800), time.FixedZone("y", 14*3600)}
	times := []time.Time{
		{}, time.Unix(0, 0), time.Now(),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 1e6, time.UTC),
		time.Date(2026, 2, 12, 10, 30, 0, 120e6, time.UTC), time.Date(2026, 2, 12, 10, 30, 0, 100e6+999999, time.UTC),
		time.Date(2026, 2, 12, 10, 30, 0, 999999, time.UTC), time.Date(2026, 2, 12, 10, 30, 0, 7e6, time.UTC),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		times = append(times, time.Unix(r.Int64N(400e9)-62e9, r.Int64N(1e9)))
	}
	for _, tm := range times {
		for _, z := range zones {
			tz := tm.In(z)
			want := `"` + tz.UTC().Format(timeLayout) + `"`
			if got := string(appendTime(nil, tz)); got != want {
				t.Fatalf("appendTime(%v) = %s, want %s", tz, got, want)
			}
		}
	}
}

func BenchmarkAppendTime(b *testing.B) {
	buf := make([]byte, 0, 64)
	tm := time.Date(2026, 2, 12, 10, 30, 0, 120e6, time.UTC)
	for b.Loop() {
		buf = appendTime(buf[:0], tm)
	}
}
