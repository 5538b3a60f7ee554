package server

import (
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Decoding of the two job policies of OJS level 4: options.unique (ojs-unique-jobs.md) and
// options.rate_limit (ojs-rate-limiting.md), and of the body of PUT /ojs/v1/rate-limits/{key}.
// Policies are strict: an unknown member is refused rather than ignored, so a typo ("argz", "perod")
// is a 400 naming the field instead of a policy that silently does something else.

// uniqueDimensions are the values of unique.keys.
var uniqueDimensions = map[string]bool{"type": true, "queue": true, "args": true, "meta": true}

// conflictPolicies maps unique.on_conflict to pronto's policy. "use_existing" is the OpenAPI
// document's name for "ignore".
var conflictPolicies = map[string]pronto.UniqueConflict{
	"reject":                  pronto.UniqueReject,
	"ignore":                  pronto.UniqueIgnore,
	"use_existing":            pronto.UniqueIgnore,
	"replace":                 pronto.UniqueReplace,
	"replace_except_schedule": pronto.UniqueReplaceExceptSchedule,
}

// wantKeyList reads an array of distinct, non-empty strings.
func wantKeyList(raw json.RawMessage, field string) ([]string, *apiError) {
	list, e := wantStrings(raw, field)
	if e != nil {
		return nil, e
	}
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if s == "" {
			return nil, invalid(field, "%s must not contain an empty string", field)
		}
		if seen[s] {
			return nil, invalid(field, "%s names %q twice", field, s)
		}
		seen[s] = true
	}
	return list, nil
}

// wantDuration reads a positive ISO 8601 duration ("PT1S", "P1D"; years, months and weeks have no
// fixed length and are refused).
func wantDuration(raw json.RawMessage, field string) (time.Duration, *apiError) {
	s, e := wantString(raw, field)
	if e != nil {
		return 0, e
	}
	d, err := isodur.Parse(s)
	if err != nil || d <= 0 {
		return 0, invalid(field, "%s %q must be a positive ISO 8601 duration of days, hours, minutes and seconds, such as \"PT1S\" or \"P7D\"", field, s)
	}
	return d, nil
}

// decodePolicyObject splits a policy that must be a JSON object, naming field in the error.
func decodePolicyObject(raw json.RawMessage, what, field string) (object, *apiError) {
	m, e := decodeObject(raw, what)
	if e != nil && field != "" {
		e.details = map[string]any{"field": field}
	}
	return m, e
}

// decodeUnique reads an OJS UniquePolicy. What depends on the job's args and meta (that each of
// args_keys and meta_keys occurs) is checked by checkUniqueKeys once the envelope is read.
//
// The SDKs' key is read as the Go SDK's args fields; when it names only uniqueness dimensions (as the
// Python SDK sends "key": ["type", "queue", "args"]), dims returns them, for the caller to read the
// key as the Python SDK's dimensions instead if the job's args have not all those fields
// (uniqueKeyAsDimensions).
func decodeUnique(raw json.RawMessage, field string) (u *pronto.UniqueOpts, dims []string, e *apiError) {
	u, sdkKey, e := decodeUniqueForms(raw, field)
	if e != nil || len(sdkKey) == 0 {
		return u, nil, e
	}
	for _, d := range sdkKey {
		if !uniqueDimensions[d] {
			return u, nil, nil
		}
	}
	return u, sdkKey, nil
}

// uniqueKeyAsDimensions is u, decoded with the SDK's key read as args fields, with the key read as
// uniqueness dimensions dims instead (the Python SDK's form).
func uniqueKeyAsDimensions(u *pronto.UniqueOpts, dims []string, field string) (*pronto.UniqueOpts, *apiError) {
	if slices.Contains(dims, "meta") {
		return nil, invalid(field+".key", "%s.key includes \"meta\", which needs %s.meta_keys: send keys and meta_keys instead", field, field)
	}
	out := *u
	out.ArgsKeys = nil
	out.ByQueue = slices.Contains(dims, "queue")
	out.ByArgs = slices.Contains(dims, "args")
	return &out, nil
}

// decodeUniqueForms is decodeUnique, returning the SDK's key as it came (nil when not given).
func decodeUniqueForms(raw json.RawMessage, field string) (*pronto.UniqueOpts, []string, *apiError) {
	m, e := decodePolicyObject(raw, field, field)
	if e != nil {
		return nil, nil, e
	}
	u := &pronto.UniqueOpts{}
	var keys, sdkKey []string
	keysGiven, sdkKeyGiven := false, false
	var sdkPeriod time.Duration
	for _, mb := range m {
		k, v := mb.key, mb.val
		f := field + "." + k
		if isNull(v) {
			continue
		}
		switch k {
		case "keys":
			if keys, e = wantKeyList(v, f); e != nil {
				return nil, nil, e
			}
			keysGiven = true
			for _, d := range keys {
				if !uniqueDimensions[d] {
					return nil, nil, invalid(f, "%s: %q is not a uniqueness dimension (type, queue, args or meta; case-sensitive)", f, d)
				}
			}
		case "args_keys":
			if u.ArgsKeys, e = wantKeyList(v, f); e != nil {
				return nil, nil, e
			}
		case "meta_keys":
			if u.MetaKeys, e = wantKeyList(v, f); e != nil {
				return nil, nil, e
			}
			for _, mk := range u.MetaKeys {
				if mk == extKey {
					return nil, nil, invalid(f, "%s: meta key %q is reserved by pronto", f, extKey)
				}
			}
		case "period":
			if u.Period, e = wantDuration(v, f); e != nil {
				return nil, nil, e
			}
		case "key":
			// The OJS Go SDK's form: the args fields the key is made of (keys then defaults to type
			// and args). Unambiguous unless args_keys or keys say otherwise too.
			if sdkKey, e = wantKeyList(v, f); e != nil {
				return nil, nil, e
			}
			sdkKeyGiven = true
		case "period_ms":
			// The SDK's form of period, in milliseconds.
			ms, e := wantInt(v, f, 1, int64(100*365*24*time.Hour/time.Millisecond))
			if e != nil {
				return nil, nil, e
			}
			sdkPeriod = time.Duration(ms) * time.Millisecond
		case "states":
			list, e := wantKeyList(v, f)
			if e != nil {
				return nil, nil, e
			}
			if len(list) == 0 {
				return nil, nil, invalid(f, "%s is empty: name the states in which a job holds its key, or omit it for every state that is not terminal", f)
			}
			for _, s := range list {
				st := pronto.State(s)
				if !st.Valid() {
					return nil, nil, invalid(f, "%s: %q is not an OJS job state", f, s)
				}
				u.States = append(u.States, st)
			}
		case "on_conflict":
			s, e := wantString(v, f)
			if e != nil {
				return nil, nil, e
			}
			policy, ok := conflictPolicies[s]
			if !ok {
				return nil, nil, invalid(f, "%s %q must be reject, ignore, replace or replace_except_schedule", f, s)
			}
			u.OnConflict = policy
		default:
			return nil, nil, invalid(f, "%s is not a field of a unique policy (keys, args_keys, meta_keys, period, states, on_conflict; or the SDK's key and period_ms)", f)
		}
	}
	if sdkKeyGiven {
		if keysGiven || len(u.ArgsKeys) > 0 {
			return nil, nil, invalid(field+".key", "%s.key (the SDK's form: args fields) cannot be combined with %s.keys or %s.args_keys: send one form", field, field, field)
		}
		keys, keysGiven, u.ArgsKeys = []string{"type", "args"}, true, sdkKey
	}
	if sdkPeriod > 0 {
		if u.Period > 0 {
			return nil, nil, invalid(field+".period_ms", "%s.period_ms and %s.period are both given: send one", field, field)
		}
		u.Period = sdkPeriod
	}
	if !keysGiven {
		keys = []string{"type"}
	}
	for _, d := range keys {
		switch d {
		case "queue":
			u.ByQueue = true
		case "args":
			u.ByArgs = true
		}
	}
	hasMeta := slices.Contains(keys, "meta")
	switch {
	case hasMeta && len(u.MetaKeys) == 0:
		return nil, nil, invalid(field+".meta_keys", "%s.keys includes \"meta\", so %s.meta_keys must name the meta keys to include", field, field)
	case !hasMeta && len(u.MetaKeys) > 0:
		return nil, nil, invalid(field+".meta_keys", "%s.meta_keys is given but %s.keys does not include \"meta\"", field, field)
	case !u.ByArgs && len(u.ArgsKeys) > 0:
		return nil, nil, invalid(field+".args_keys", "%s.args_keys is given but %s.keys does not include \"args\"", field, field)
	}
	return u, sdkKey, nil
}

// checkUniqueKeys refuses a policy whose args_keys or meta_keys name keys the job does not have (a
// fingerprint over absent values would make unrelated jobs collide).
func checkUniqueKeys(u *pronto.UniqueOpts, args, meta json.RawMessage, field string) *apiError {
	if len(u.ArgsKeys) > 0 {
		var elems []json.RawMessage
		if err := json.Unmarshal(args, &elems); err != nil {
			return invalid("args", "args must be a JSON array")
		}
		found := map[string]bool{}
		for _, el := range elems {
			if jsonKind(el) != "object" {
				continue
			}
			obj, ok := splitObject(el)
			if !ok {
				continue
			}
			for _, mb := range obj {
				found[mb.key] = true
			}
		}
		for _, k := range u.ArgsKeys {
			if !found[k] {
				return invalid(field+".args_keys", "%s.args_keys: %q is not a key of any object in the job's args", field, k)
			}
		}
	}
	if len(u.MetaKeys) > 0 {
		var obj object
		if len(meta) > 0 {
			obj, _ = splitObject(meta)
		}
		for _, k := range u.MetaKeys {
			if _, ok := obj.get(k); !ok {
				return invalid(field+".meta_keys", "%s.meta_keys: %q is not a key of the job's meta", field, k)
			}
		}
	}
	return nil
}

// rateLimitSpec is a decoded RateLimitPolicy: the key (empty when not given) and the bounds.
type rateLimitSpec struct {
	key    string
	limit  pronto.RateLimit
	bounds bool // concurrency, rate or max_per_second was given
}

// decodeRateLimit reads a RateLimitPolicy ({key, concurrency, rate: {limit, period}, on_limit}, or the
// conformance suite's {max_per_second}). forPut adds what PUT /ojs/v1/rate-limits/{key} may carry
// (and refuses): expires_at.
func decodeRateLimit(raw json.RawMessage, field string, forPut bool) (*rateLimitSpec, *apiError) {
	what := field
	if what == "" {
		what = "rate limit"
	}
	m, e := decodePolicyObject(raw, what, field)
	if e != nil {
		return nil, e
	}
	join := func(k string) string {
		if field == "" {
			return k
		}
		return field + "." + k
	}
	spec := &rateLimitSpec{}
	l := &spec.limit
	_, hasRate := m.get("rate")
	for _, mb := range m {
		k, v := mb.key, mb.val
		f := join(k)
		if isNull(v) {
			continue
		}
		switch k {
		case "key":
			if spec.key, e = wantString(v, f); e != nil {
				return nil, e
			}
			if !pronto.ValidRateKey(spec.key) {
				return nil, invalid(f, "%s %q must match [a-zA-Z0-9][a-zA-Z0-9._:-]* (at most 255 characters)", f, spec.key)
			}
		case "concurrency":
			n, e := wantInt(v, f, 0, math.MaxInt32)
			if e != nil {
				return nil, e
			}
			if n == 0 {
				return nil, invalid(f, "%s 0 (no job of the key may run) is not supported: pause the queue instead, or omit concurrency for no bound", f)
			}
			l.MaxActive, spec.bounds = int(n), true
		case "rate":
			rm, e := decodeObject(v, f)
			if e != nil {
				e.details = map[string]any{"field": f}
				return nil, e
			}
			if e := decodeRateWindow(rm, f, l); e != nil {
				return nil, e
			}
			spec.bounds = true
		case "max_per_second":
			if hasRate {
				return nil, invalid(f, "give %s or %s, not both", f, join("rate"))
			}
			n, e := wantInt(v, f, 1, math.MaxInt32)
			if e != nil {
				return nil, e
			}
			l.Rate, l.Period, spec.bounds = int(n), time.Second, true
		case "on_limit":
			s, e := wantString(v, f)
			if e != nil {
				return nil, e
			}
			switch a := pronto.LimitAction(s); a {
			case pronto.LimitWait, pronto.LimitReschedule, pronto.LimitDrop:
				l.OnLimit = a
			default:
				return nil, invalid(f, "%s %q must be wait, reschedule or drop", f, s)
			}
		case "throttle":
			return nil, invalid(f, "%s (evenly spaced starts) is not supported: use rate {limit, period}, whose windows start at most limit jobs per period", f)
		case "expires_at":
			if forPut {
				return nil, invalid(f, "%s is not supported: an override lasts until it is replaced or deleted", f)
			}
			fallthrough
		default:
			return nil, invalid(f, "%s is not a field of a rate limit policy (key, concurrency, rate, max_per_second, on_limit)", f)
		}
	}
	return spec, nil
}

// decodeRateWindow reads rate: {limit, period}.
func decodeRateWindow(m object, field string, l *pronto.RateLimit) *apiError {
	var e *apiError
	for _, mb := range m {
		f := field + "." + mb.key
		switch mb.key {
		case "limit":
			n, e := wantInt(mb.val, f, 1, math.MaxInt32)
			if e != nil {
				return e
			}
			l.Rate = int(n)
		case "period":
			if l.Period, e = wantDuration(mb.val, f); e != nil {
				return e
			}
		default:
			return invalid(f, "%s is not a field of a rate window (limit, period)", f)
		}
	}
	if l.Rate == 0 {
		return invalid(field+".limit", "%s.limit is required: the most jobs started per period", field)
	}
	if l.Period == 0 {
		return invalid(field+".period", "%s.period is required: an ISO 8601 duration such as \"PT1M\"", field)
	}
	return nil
}
