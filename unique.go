package pronto

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// UniqueConflict is what an insert does when an existing job already holds its unique key.
type UniqueConflict = store.OnConflict

// The conflict policies of the OJS unique-jobs specification.
const (
	// UniqueReject fails the insert with a *UniqueConflictError (errors.Is ErrUniqueConflict). The
	// default. A batch with one rejected job inserts nothing.
	UniqueReject = store.ConflictReject
	// UniqueIgnore inserts nothing and returns the existing job, with Duplicate set.
	UniqueIgnore = store.ConflictIgnore
	// UniqueReplace cancels the existing job (even a running one) and inserts the new one.
	UniqueReplace = store.ConflictReplace
	// UniqueReplaceExceptSchedule replaces like UniqueReplace, but a new job replacing a scheduled or
	// retryable one keeps that job's due time.
	UniqueReplaceExceptSchedule = store.ConflictReplaceExceptSchedule
)

// ErrUniqueConflict matches (errors.Is) the error of an insert refused because another job holds its
// unique key.
var ErrUniqueConflict = store.ErrUniqueConflict

// UniqueConflictError is the error of an insert refused by UniqueReject: the existing job's id and
// state, and the key.
type UniqueConflictError = store.UniqueConflictError

// BatchUniqueConflictError is the error of a batch insert (InsertMany, InsertOJS) refused because two
// of its own jobs have one unique key and the later one's policy is UniqueReject: nothing of the
// batch is stored, so no stored job holds the key. Index is the refused job's position in the batch,
// HolderIndex the earlier job's. errors.Is(err, ErrUniqueConflict) holds for it.
type BatchUniqueConflictError struct {
	Index, HolderIndex int
	Key                string
}

// Error names both jobs by position.
func (e *BatchUniqueConflictError) Error() string {
	return fmt.Sprintf("unique job conflict: job %d of the batch has the unique key %s of job %d of the same batch, and its policy is reject",
		e.Index, e.Key, e.HolderIndex)
}

// Is makes errors.Is(err, ErrUniqueConflict) true.
func (e *BatchUniqueConflictError) Is(target error) bool { return target == ErrUniqueConflict }

// batchUniqueCause turns a store's unique conflict whose holder is a job of ps itself (rolled back
// with the batch) into a *BatchUniqueConflictError naming the later job of ps with that key; other
// errors are returned as they are. The store names the holder but not the refused job; the
// fingerprints of ps tell it exactly.
func batchUniqueCause(ps []*store.InsertParams, err error) error {
	var uce *store.UniqueConflictError
	if len(ps) < 2 || !errors.As(err, &uce) || uce.ExistingID == "" {
		return err
	}
	i := slices.IndexFunc(ps, func(p *store.InsertParams) bool { return p.ID == uce.ExistingID })
	if i < 0 {
		return err
	}
	for j := i + 1; j < len(ps); j++ {
		if ps[j].UniqueKey == uce.Key {
			return &BatchUniqueConflictError{Index: j, HolderIndex: i, Key: uce.Key}
		}
	}
	return err
}

// UniqueOpts makes a job unique: while a job with the same fingerprint is in one of States (and, with
// a Period, until Period after that job was inserted), another one is not inserted; OnConflict says
// what happens instead. The database enforces it, across every client and process.
//
// The fingerprint always includes the job's kind; ByQueue adds its queue, ByArgs its args (all of
// them, or only the top-level ArgsKeys of each object in the args array), MetaKeys the named keys of
// its meta. It is the SHA-256 of the canonical JSON of those values (object keys sorted, no spaces,
// each number by its exact decimal value, written as RFC 8785 writes numbers, so 1 and 1.0 are one
// value while the int64s 9007199254740993 and 9007199254740992 stay two), as the OJS unique-jobs
// specification describes, so a job inserted over HTTP and one inserted from Go with the same policy
// share a fingerprint. Strings are not Unicode-normalised: send them in one normal form (NFC).
type UniqueOpts struct {
	ByQueue bool
	ByArgs  bool
	// ArgsKeys narrows ByArgs to these keys (setting it implies ByArgs). Each must occur in the args.
	ArgsKeys []string
	// MetaKeys adds these keys of the job's meta to the fingerprint.
	MetaKeys []string
	// Period bounds the hold: after it has passed since the holder was inserted, a new job may take the
	// key whatever the holder's state. Zero: the hold lasts as long as the holder is in States.
	Period time.Duration
	// States in which a job holds its key; empty means every state that is not terminal (available,
	// active, scheduled, retryable, pending).
	States []State
	// OnConflict is what happens when another job holds the key (default UniqueReject).
	OnConflict UniqueConflict
}

// validate checks the options themselves.
func (u *UniqueOpts) validate() error {
	if !u.OnConflict.Valid() {
		return invalidf("unique on_conflict %q: must be reject, ignore, replace or replace_except_schedule", u.OnConflict)
	}
	if u.Period < 0 {
		return invalidf("unique period %s: must not be negative", u.Period)
	}
	for _, s := range u.States {
		if !s.Valid() {
			return invalidf("unique state %q: not an OJS job state", s)
		}
	}
	return nil
}

// apply validates u and writes the fingerprint, states, period and policy onto p (whose Kind, Queue,
// Args and Meta are final).
func (u *UniqueOpts) apply(p *store.InsertParams, now time.Time) error {
	if err := u.validate(); err != nil {
		return err
	}
	key, err := uniqueKey(u, p)
	if err != nil {
		return err
	}
	p.UniqueKey = key
	p.UniqueStates = u.States
	if u.Period > 0 {
		p.UniqueUntil = now.Add(u.Period)
	}
	p.OnConflict = u.OnConflict
	return nil
}

// uniqueKey computes the fingerprint of p under u.
func uniqueKey(u *UniqueOpts, p *store.InsertParams) (string, error) {
	dims := map[string]any{"type": p.Kind}
	if u.ByQueue {
		dims["queue"] = p.Queue
	}
	if u.ByArgs || len(u.ArgsKeys) > 0 {
		args, err := decodeNumbers(p.Args)
		if err != nil {
			return "", invalidf("unique: args are not valid JSON: %v", err)
		}
		if len(u.ArgsKeys) > 0 {
			if args, err = pickArgsKeys(args, u.ArgsKeys); err != nil {
				return "", err
			}
		}
		dims["args"] = args
	}
	if len(u.MetaKeys) > 0 {
		var meta map[string]any
		if len(p.Meta) > 0 {
			v, err := decodeNumbers(p.Meta)
			if err != nil {
				return "", invalidf("unique: meta is not valid JSON: %v", err)
			}
			meta, _ = v.(map[string]any)
		}
		picked := make(map[string]any, len(u.MetaKeys))
		for _, k := range u.MetaKeys {
			v, ok := meta[k]
			if !ok {
				return "", invalidf("unique: meta key %q is not in the job's meta", k)
			}
			picked[k] = v
		}
		dims["meta"] = picked
	}
	// encoding/json writes map keys sorted at every level and no spaces; numbers were made canonical
	// by decodeNumbers. (Strings are compared as given, without Unicode normalisation.)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(dims); err != nil {
		return "", invalidf("unique: cannot encode the fingerprint: %v", err)
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return hex.EncodeToString(sum[:]), nil
}

// decodeNumbers decodes JSON with every number in its canonical form (see canonicalNumber).
func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return canonicalNumbers(v), nil
}

// canonicalNumbers rewrites the numbers in v, in place where it can, to canonical json.Numbers.
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return canonicalNumber(x)
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	}
	return v
}

// canonicalNumber writes a number as RFC 8785 (JSON Canonicalization) writes a double, but exactly:
// the digits of its decimal value without leading or trailing zeros, without exponent for magnitudes
// from 1e-6 to 1e21, so 1, 1.0, 10e-1 and 1e0 are one number while 9007199254740993 and
// 9007199254740992 stay two. For every number a double holds exactly (or whose shortest double form is
// its own value, like 0.1) that is what RFC 8785 writes, so fingerprints made when numbers went through
// float64 are unchanged. A number beyond the double range is kept as written, as it always was.
func canonicalNumber(n json.Number) json.Number {
	if f, err := strconv.ParseFloat(string(n), 64); err != nil || math.IsInf(f, 0) {
		return n
	}
	neg, digits, point, ok := decimalOf(string(n))
	if !ok {
		return n
	}
	if digits == "" {
		return "0"
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	k := len(digits)
	switch {
	case k <= point && point <= 21: // an integer
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-k))
	case 0 < point && point <= 21:
		b.WriteString(digits[:point] + "." + digits[point:])
	case -6 < point && point <= 0:
		b.WriteString("0." + strings.Repeat("0", -point) + digits)
	default:
		b.WriteString(digits[:1])
		if k > 1 {
			b.WriteString("." + digits[1:])
		}
		b.WriteString("e")
		if point > 0 {
			b.WriteString("+")
		}
		b.WriteString(strconv.Itoa(point - 1))
	}
	return json.Number(b.String())
}

// decimalOf reads a JSON number as its exact decimal value: the value is 0.digits × 10^point, digits
// having no leading or trailing zeros ("" for zero, whatever its exponent). ok is false when the
// exponent of a number other than zero is out of int32 range.
func decimalOf(s string) (neg bool, digits string, point int, ok bool) {
	neg = strings.HasPrefix(s, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(strings.TrimPrefix(s, "-")), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	all := whole + frac
	trimmed := strings.TrimLeft(all, "0")
	if trimmed == "" {
		return neg, "", 0, true
	}
	e := 0
	if hasExp {
		var err error
		if e, err = strconv.Atoi(exp); err != nil || e > math.MaxInt32 || e < math.MinInt32 {
			return false, "", 0, false
		}
	}
	point = len(whole) - (len(all) - len(trimmed)) + e
	return neg, strings.TrimRight(trimmed, "0"), point, true
}

// pickArgsKeys keeps only keys of the args: of the object itself, or of each object in the array.
// Every key must occur somewhere, or the policy is refused (it would fingerprint absent values).
func pickArgsKeys(args any, keys []string) (any, error) {
	found := make(map[string]bool, len(keys))
	pick := func(obj map[string]any) map[string]any {
		out := make(map[string]any, len(keys))
		for _, k := range keys {
			if v, ok := obj[k]; ok {
				out[k] = v
				found[k] = true
			}
		}
		return out
	}
	var out any
	switch a := args.(type) {
	case map[string]any:
		out = pick(a)
	case []any:
		picked := make([]any, len(a))
		for i, e := range a {
			if obj, ok := e.(map[string]any); ok {
				picked[i] = pick(obj)
			} else {
				picked[i] = e
			}
		}
		out = picked
	default:
		return nil, invalidf("unique: args_keys needs object args")
	}
	var missing []string
	for _, k := range keys {
		if !found[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, invalidf("unique: args_keys %q do not occur in the job's args", missing)
	}
	return out, nil
}
