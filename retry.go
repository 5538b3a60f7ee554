package pronto

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/pronto-jobs/pronto/internal/isodur"
)

// BackoffStrategy names how retry delays grow (OJS retry specification, section 3).
type BackoffStrategy string

// Backoff strategies.
const (
	BackoffExponential BackoffStrategy = "exponential" // initial * coefficient^(n-1), the default
	BackoffPolynomial  BackoffStrategy = "polynomial"  // initial * n^coefficient
	BackoffLinear      BackoffStrategy = "linear"      // initial * n
	BackoffConstant    BackoffStrategy = "constant"    // initial
)

// RetryPolicy says how often and how soon a failed job is tried again. It is the OJS retry policy
// and marshals to its JSON form (durations as ISO 8601 strings such as "PT1S").
//
// The zero value of a field means "the default": 3 attempts, 1 s initial interval, coefficient 2,
// exponential, 5 min cap (or the initial interval when that is longer), jitter on.
type RetryPolicy struct {
	// MaxAttempts counts every attempt including the first. 1 means no retry.
	MaxAttempts int
	// InitialInterval is the delay before the first retry.
	InitialInterval time.Duration
	// BackoffCoefficient is the growth factor (exponential) or exponent (polynomial); at least 1.
	BackoffCoefficient float64
	// MaxInterval caps every delay, before and after jitter (OJS RET-06). When it is zero and
	// InitialInterval is longer than the default cap, the cap is InitialInterval.
	MaxInterval time.Duration
	// NoJitter turns off the OJS jitter (delay × uniform[0.5, 1.5), then capped by MaxInterval).
	NoJitter bool
	// Strategy picks the growth formula.
	Strategy BackoffStrategy
	// NonRetryableErrors lists error types that discard the job at once: Go error types named as the
	// error history names them ("package.Type" without the pointer star, such as "net.OpError", or
	// "error" for errors.New and fmt.Errorf), or what an OJS worker reports. An entry ending in ".*"
	// or "*" matches by prefix ("net.*"), for Go and OJS workers alike (see MatchesErrorType).
	NonRetryableErrors []string
}

// DefaultRetryPolicy is OJS's default policy: 3 attempts, 1 s, ×2, capped at 5 min, with jitter.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:        3,
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaxInterval:        5 * time.Minute,
	Strategy:           BackoffExponential,
}

// withDefaults fills zero fields from def.
func (p RetryPolicy) withDefaults(def RetryPolicy) RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = def.InitialInterval
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = def.BackoffCoefficient
	}
	if p.MaxInterval == 0 {
		// A policy that asks for a first delay longer than the default cap means it: the cap would
		// otherwise shorten every delay, initial_interval included, without a word.
		p.MaxInterval = max(def.MaxInterval, p.InitialInterval)
	}
	if p.Strategy == "" {
		p.Strategy = def.Strategy
	}
	if p.NonRetryableErrors == nil {
		p.NonRetryableErrors = def.NonRetryableErrors
	}
	return p
}

// Validate reports a policy OJS forbids.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 0:
		return invalidf("retry policy: max attempts %d is negative", p.MaxAttempts)
	case p.InitialInterval < 0 || p.MaxInterval < 0:
		return invalidf("retry policy: intervals must not be negative")
	case p.BackoffCoefficient != 0 && p.BackoffCoefficient < 1:
		return invalidf("retry policy: backoff coefficient %g is below 1", p.BackoffCoefficient)
	}
	switch p.Strategy {
	case "", BackoffExponential, BackoffPolynomial, BackoffLinear, BackoffConstant:
	default:
		return invalidf("retry policy: unknown backoff strategy %q", p.Strategy)
	}
	return nil
}

// Delay returns the wait before the attempt after attempt number attempt (1-based) failed.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.withDefaults(DefaultRetryPolicy)
	n := float64(max(attempt, 1))
	base := float64(p.InitialInterval)
	var d float64
	switch p.Strategy {
	case BackoffConstant:
		d = base
	case BackoffLinear:
		d = base * n
	case BackoffPolynomial:
		d = base * math.Pow(n, p.BackoffCoefficient)
	default:
		d = base * math.Pow(p.BackoffCoefficient, n-1)
	}
	limit := float64(p.MaxInterval)
	if d > limit || math.IsInf(d, 0) || math.IsNaN(d) {
		d = limit
	}
	if !p.NoJitter {
		// Capped again after jitter (OJS 5.3, RET-06), and in float64: a jittered delay near the
		// largest Duration would overflow the conversion into a negative one, due at once.
		d = min(d*(0.5+rand.Float64()), limit)
	}
	if d >= math.MaxInt64 {
		return math.MaxInt64 // float64(MaxInt64) is 2^63, one past what a Duration holds
	}
	return time.Duration(d)
}

type retryPolicyJSON struct {
	MaxAttempts        *int     `json:"max_attempts,omitempty"`
	InitialInterval    string   `json:"initial_interval,omitempty"`
	BackoffCoefficient float64  `json:"backoff_coefficient,omitempty"`
	MaxInterval        string   `json:"max_interval,omitempty"`
	Jitter             *bool    `json:"jitter,omitempty"`
	NonRetryableErrors []string `json:"non_retryable_errors,omitempty"`
	Strategy           string   `json:"backoff_strategy,omitempty"`
}

// MarshalJSON writes the OJS form.
func (p RetryPolicy) MarshalJSON() ([]byte, error) {
	j := retryPolicyJSON{
		BackoffCoefficient: p.BackoffCoefficient,
		NonRetryableErrors: p.NonRetryableErrors,
		Strategy:           string(p.Strategy),
	}
	if p.MaxAttempts != 0 {
		j.MaxAttempts = &p.MaxAttempts
	}
	if p.InitialInterval != 0 {
		j.InitialInterval = isodur.Format(p.InitialInterval)
	}
	if p.MaxInterval != 0 {
		j.MaxInterval = isodur.Format(p.MaxInterval)
	}
	if p.NoJitter {
		f := false
		j.Jitter = &f
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the OJS form.
func (p *RetryPolicy) UnmarshalJSON(b []byte) error {
	var j retryPolicyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("retry policy: %w", err)
	}
	var out RetryPolicy
	if j.MaxAttempts != nil {
		out.MaxAttempts = *j.MaxAttempts
	}
	var err error
	if j.InitialInterval != "" {
		if out.InitialInterval, err = isodur.Parse(j.InitialInterval); err != nil {
			return fmt.Errorf("retry policy initial_interval: %w", err)
		}
	}
	if j.MaxInterval != "" {
		if out.MaxInterval, err = isodur.Parse(j.MaxInterval); err != nil {
			return fmt.Errorf("retry policy max_interval: %w", err)
		}
	}
	out.BackoffCoefficient = j.BackoffCoefficient
	out.NoJitter = j.Jitter != nil && !*j.Jitter
	out.NonRetryableErrors = j.NonRetryableErrors
	out.Strategy = BackoffStrategy(j.Strategy)
	*p = out
	return nil
}
