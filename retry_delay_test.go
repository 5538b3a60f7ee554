package pronto_test

import (
	"math"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// TestRetryDelayBounds: RetryPolicy.Delay keeps every delay, jittered or not, within the policy's
// cap (OJS RET-06), never negative, and a policy giving only an initial interval longer than the
// default cap is capped at that interval rather than at the default.
func TestRetryDelayBounds(t *testing.T) {
	for i := 0; i < 1000; i++ {
		p := pronto.RetryPolicy{InitialInterval: 10 * time.Second, MaxInterval: 10 * time.Second}
		if d := p.Delay(1); d > 10*time.Second || d < 5*time.Second {
			t.Fatalf("jittered delay %s outside [5s, 10s] for a PT10S cap", d)
		}
		huge := time.Duration(math.MaxInt64)
		for _, maxI := range []time.Duration{106000 * 24 * time.Hour, huge} {
			p = pronto.RetryPolicy{InitialInterval: maxI, MaxInterval: maxI, BackoffCoefficient: 3}
			for attempt := 1; attempt <= 3; attempt++ {
				if d := p.Delay(attempt); d <= 0 || d > maxI {
					t.Fatalf("delay %d with cap %d: %d", attempt, maxI, d)
				}
			}
		}
	}
	p := pronto.RetryPolicy{InitialInterval: 10 * time.Minute, Strategy: pronto.BackoffLinear, NoJitter: true}
	for attempt, want := range map[int]time.Duration{1: 10 * time.Minute, 2: 10 * time.Minute} {
		if d := p.Delay(attempt); d != want {
			t.Errorf("initial interval 10m alone, attempt %d: delay %s, want %s", attempt, d, want)
		}
	}
	p = pronto.RetryPolicy{InitialInterval: 10 * time.Second, NoJitter: true}
	if d := p.Delay(10); d != pronto.DefaultRetryPolicy.MaxInterval {
		t.Errorf("initial interval 10s alone, attempt 10: delay %s, want the default cap %s", d, pronto.DefaultRetryPolicy.MaxInterval)
	}
}
