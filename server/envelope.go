package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/internal/jsoncheck"
	"github.com/pronto-jobs/pronto/internal/jsonscan"
)

// Decoding and validation of request bodies. Every function here is total: any input gives either a
// value or an *apiError naming what is wrong, never a panic (FuzzDecode proves it).

// extKey is the meta key under which pronto keeps the parts of an OJS job its store has no column
// for: the job's visibility timeout, its retry policy's on_exhaustion, and envelope attributes OJS
// does not define (preserved, as OJS requires). The HTTP API strips it from
// the meta it returns and refuses it in meta it receives; Go workers see it in JobRow.Meta.
const extKey = "_pronto"

// ojsExt is the value stored under extKey.
type ojsExt struct {
	// VisibilityMS is options.visibility_timeout_ms.
	VisibilityMS int64 `json:"vt,omitempty"`
	// OnExhaustion is retry.on_exhaustion ("discard" or "dead_letter").
	OnExhaustion string `json:"oe,omitempty"`
	// Unknown holds the envelope's attributes OJS does not define, returned as they came.
	Unknown map[string]json.RawMessage `json:"x,omitempty"`
	// Step is the id of the workflow step the job runs (the binding's steps[].id), when it has one.
	Step string `json:"st,omitempty"`
}

func (e *ojsExt) empty() bool {
	return e.VisibilityMS == 0 && e.OnExhaustion == "" && len(e.Unknown) == 0 && e.Step == ""
}

// systemKeys are system-managed job attributes: a client cannot set them, and OJS says to ignore them.
var systemKeys = map[string]bool{
	"state": true, "attempt": true, "created_at": true, "enqueued_at": true, "started_at": true,
	"completed_at": true, "cancelled_at": true, "discarded_at": true, "error": true, "errors": true,
	"result": true, "max_attempts": true, "retry_delay_ms": true,
}

// jsonKind names the JSON type of a raw value, for error messages.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func isNull(raw json.RawMessage) bool { return jsonKind(raw) == "null" }

// decodeObject reads a JSON object's members, keeping their values raw, in one pass. A body that is
// not JSON is invalid_payload; JSON that is not an object is invalid_request.
func decodeObject(body []byte, what string) (object, *apiError) {
	if o, ok := scanObject(nil, body); ok {
		return o, nil
	}
	return decodeObjectSlow(body, what)
}

// notJSON is the invalid_payload error for a body that is not JSON at all, nil for one that is.
func notJSON(body []byte, what string) *apiError {
	if json.Valid(body) {
		return nil
	}
	return errorf(400, CodeInvalidPayload, "the %s is not valid JSON", what)
}

// decodeObjectSlow is decodeObject without scanObject's fast path: it tells what is wrong.
func decodeObjectSlow(body []byte, what string) (object, *apiError) {
	if e := notJSON(body, what); e != nil {
		return nil, e
	}
	if k := jsonKind(body); k != "object" {
		return nil, invalid("", "the %s must be a JSON object, not %s", what, k)
	}
	o, ok := splitObject(body)
	if !ok {
		return nil, errorf(400, CodeInvalidPayload, "the %s is not valid JSON", what)
	}
	return o, nil
}

// decodeBody is decodeObject for a whole request body, which must moreover hold nothing a store
// cannot (jsoncheck): such input is refused here, identically whatever the store, naming the field.
func decodeBody(body []byte, what string) (object, *apiError) {
	return decodeBodyInto(nil, body, what)
}

// decodeBodyInto is decodeBody appending the members to dst, which may have room for them.
func decodeBodyInto(dst object, body []byte, what string) (object, *apiError) {
	if o, ok := scanObject(dst, body); ok {
		return o, nil // valid, and storable
	}
	o, e := decodeObjectSlow(body, what)
	if e != nil {
		return nil, e
	}
	if e := storable(body, ""); e != nil {
		return nil, e
	}
	return o, nil
}

// storable refuses a JSON value (named name) that holds something no store can hold: a NUL
// character, bytes that are not UTF-8, a lone surrogate, a number out of range.
func storable(raw json.RawMessage, name string) *apiError {
	err := jsoncheck.Check(raw, name)
	if err == nil {
		return nil
	}
	field := name
	var ce *jsoncheck.Error
	if errors.As(err, &ce) {
		field = ce.Path
	}
	return invalid(field, "%s", err.Error())
}

// checkPathText refuses a name taken from the URL path that no store can hold (a NUL character, bytes
// that are not UTF-8), before it reaches a store's query.
func checkPathText(s, field string) *apiError {
	if err := jsoncheck.CheckString(s, field); err != nil {
		return invalid(field, "%s", err.Error())
	}
	return nil
}

// rawString returns the text of a JSON string without decoding it when it has no escapes (the
// common case), and decodes it otherwise. raw must be a valid JSON value.
func rawString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	return jsonscan.Text(raw)
}

func wantString(raw json.RawMessage, field string) (string, *apiError) {
	s, ok := rawString(raw)
	if !ok {
		return "", invalid(field, "%s must be a string, not %s", field, jsonKind(raw))
	}
	return s, nil
}

// wantInt reads an integral JSON number within [lo, hi].
func wantInt(raw json.RawMessage, field string, lo, hi int64) (int64, *apiError) {
	raw = bytes.TrimSpace(raw)
	if jsonKind(raw) != "number" {
		return 0, invalid(field, "%s must be an integer, not %s", field, jsonKind(raw))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(raw), 64)
		if ferr != nil || math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) || f < math.MinInt64 || f > math.MaxInt64 {
			return 0, invalid(field, "%s must be an integer, got %s", field, raw)
		}
		n = int64(f)
	}
	if n < lo || n > hi {
		return 0, invalid(field, "%s must be between %d and %d, got %s", field, lo, hi, raw)
	}
	return n, nil
}

// wantPriority reads a priority: an integer from PriorityMin to PriorityMax, or one of the named
// levels OJS recommends ("high", "normal", "low", any case) as its alias (ojs-core.md, priority).
func wantPriority(raw json.RawMessage, field string) (int, *apiError) {
	if jsonKind(bytes.TrimSpace(raw)) == "string" {
		var name string
		if json.Unmarshal(raw, &name) != nil {
			return 0, invalid(field, "%s must be an integer or one of \"high\", \"normal\", \"low\"", field)
		}
		if p, ok := pronto.PriorityByName(name); ok {
			return p, nil
		}
		return 0, invalid(field, "%s %q: a named priority is \"high\" (10), \"normal\" (0) or \"low\" (-10)", field, name)
	}
	n, e := wantInt(raw, field, pronto.PriorityMin, pronto.PriorityMax)
	return int(n), e
}

func wantBool(raw json.RawMessage, field string) (bool, *apiError) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalid(field, "%s must be true or false, not %s", field, jsonKind(raw))
}

func wantStrings(raw json.RawMessage, field string) ([]string, *apiError) {
	if jsonKind(raw) != "array" {
		return nil, invalid(field, "%s must be an array of strings, not %s", field, jsonKind(raw))
	}
	if v, ok := simpleStrings(raw); ok {
		return v, nil
	}
	var v []string
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, invalid(field, "%s must be an array of strings", field)
	}
	return v, nil
}

// simpleStrings reads an array of strings without escapes (the common case) without reflection.
func simpleStrings(raw json.RawMessage) ([]string, bool) {
	i := jsonscan.Space(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	out := make([]string, 0, 4)
	i = jsonscan.Space(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return out, true
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return nil, false
		}
		end := jsonscan.String(raw, i)
		if end < 0 {
			return nil, false
		}
		inner := raw[i+1 : end-1]
		if bytes.IndexByte(inner, '\\') >= 0 || !utf8.Valid(inner) {
			return nil, false
		}
		out = append(out, string(inner))
		i = jsonscan.Space(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = jsonscan.Space(raw, i+1)
		case ']':
			return out, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// wantTime reads an RFC 3339 timestamp with a zone, or a duration from now written "+PT5S".
func wantTime(raw json.RawMessage, field string, now time.Time) (time.Time, *apiError) {
	t, d, rel, e := wantDue(raw, field)
	if e != nil || !rel {
		return t, e
	}
	return now.Add(d), nil
}

// wantDue reads a due time: an RFC 3339 timestamp with a zone, or a relative time written "+PT5S",
// returned as a delay (rel) for the client to count from the store's clock (InsertOpts.Delay),
// which judges when the job is due, rather than from this server's, which may be off.
func wantDue(raw json.RawMessage, field string) (at time.Time, delay time.Duration, rel bool, e *apiError) {
	s, e := wantString(raw, field)
	if e != nil {
		return time.Time{}, 0, false, e
	}
	if r, ok := strings.CutPrefix(s, "+"); ok {
		d, err := isodur.Parse(r)
		if err != nil || d < 0 {
			return time.Time{}, 0, false, invalid(field, "%s %q: a relative time must be \"+\" and an ISO 8601 duration, such as \"+PT5S\"", field, s)
		}
		return time.Time{}, d, true, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, 0, false, invalid(field, "%s %q: must be an RFC 3339 timestamp with a zone (\"2026-01-02T15:04:05Z\") or a relative time (\"+PT5S\")", field, s)
	}
	return t, 0, false, nil
}

// validQueue is pronto.ValidQueueName: one rule for queue names in Go, the CLI and HTTP.
func validQueue(q string) bool { return pronto.ValidQueueName(q) }

// specVersion10 reports whether a job envelope's specversion names OJS 1.0: "1.0", as ojs-core §5.1
// spells it, or any SemVer 2.0.0 version 1.0.x (with a pre-release or build suffix), as SDKs send
// the version of the spec they were written against ("1.0.0-rc.1").
func specVersion10(s string) bool {
	if s == "1.0" {
		return true
	}
	rest, ok := strings.CutPrefix(s, "1.0.")
	if !ok {
		return false
	}
	rest, build, hasBuild := strings.Cut(rest, "+")
	patch, pre, hasPre := strings.Cut(rest, "-")
	if patch == "" || strings.Trim(patch, "0123456789") != "" || (len(patch) > 1 && patch[0] == '0') {
		return false
	}
	return (!hasPre || semverIdents(pre, true)) && (!hasBuild || semverIdents(build, false))
}

// semverIdents reports whether s is dot-separated SemVer identifiers: non-empty runs of
// [0-9A-Za-z-], where numeric ones have no leading zero when noLeadingZero (pre-release and core
// versions; build metadata allows them).
func semverIdents(s string, noLeadingZero bool) bool {
	for id := range strings.SplitSeq(s, ".") {
		if id == "" {
			return false
		}
		numeric := true
		for i := 0; i < len(id); i++ {
			c := id[i]
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
				numeric = false
			default:
				return false
			}
		}
		if numeric && noLeadingZero && len(id) > 1 && id[0] == '0' {
			return false
		}
	}
	return true
}

// validID is uuidv7.Valid without a regular expression: a lowercase canonical UUIDv7.
func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		case 14:
			if c != '7' {
				return false
			}
		case 19:
			if c != '8' && c != '9' && c != 'a' && c != 'b' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// enqueueRequest is one decoded job to enqueue.
type enqueueRequest struct {
	job pronto.OJSJob
	ext ojsExt
	// metadata is options.meta and options.metadata, merged into meta (meta's own keys win, then
	// options.meta's).
	metadata map[string]json.RawMessage
	// rateKeyFromQueue: options.rate_limit named no key, so the key is "queue:" and the job's queue.
	rateKeyFromQueue bool
	// uniqueKeyDims: options.unique.key named dimensions only (see uniqueKeyAsDimensions).
	uniqueKeyDims []string
	// path is where a workflow's job sits in its request ("steps[2]", "callbacks.on_success").
	path string
	// dueSet: scheduled_at (or delay_until) set the job's due time, as Opts.ScheduledAt or, for
	// a relative time, Opts.Delay ("+PT0S" leaves both zero).
	dueSet bool
}

// decodeJob reads and validates one OJS job envelope.
func decodeJob(body []byte, now time.Time) (*enqueueRequest, *apiError) {
	req := &enqueueRequest{}
	if e := decodeJobInto(req, body, now); e != nil {
		return nil, e
	}
	return req, nil
}

// decodeJobInto is decodeJob into a zero *req (which a single enqueue keeps on its stack).
func decodeJobInto(req *enqueueRequest, body []byte, now time.Time) *apiError {
	var buf [16]member
	top, e := decodeBodyInto(buf[:0], body, "job")
	if e != nil {
		return e
	}
	return decodeJobMembersInto(req, top, now)
}

func decodeJobMembers(top object, now time.Time) (*enqueueRequest, *apiError) {
	req := &enqueueRequest{}
	if e := decodeJobMembersInto(req, top, now); e != nil {
		return nil, e
	}
	return req, nil
}

func decodeJobMembersInto(req *enqueueRequest, top object, now time.Time) *apiError {
	o := &req.job.Opts
	var e *apiError

	rawType, ok := top.get("type")
	if !ok {
		return invalid("type", "type is required (a dot-separated job type such as \"email.send\")")
	}
	if req.job.Kind, e = wantString(rawType, "type"); e != nil {
		return e
	}
	if !pronto.ValidOJSType(req.job.Kind) {
		return invalid("type", "type %q: must be dot-separated segments of [a-z][a-z0-9_-]* (for example \"email.send\")", req.job.Kind)
	}
	rawArgs, ok := top.get("args")
	if !ok {
		return invalid("args", "args is required (a JSON array, possibly empty)")
	}
	if k := jsonKind(rawArgs); k != "array" {
		e := invalid("args", "args must be a JSON array, not %s", k)
		e.details["expected"], e.details["received"] = "array", k
		return e
	}
	req.job.Args = rawArgs

	var meta json.RawMessage
	var topOpts object // envelope-level options (OJS core places them at the top)
	var opts object    // the options object's members
	for _, mb := range top {
		k, v := mb.key, mb.val
		switch k {
		case "type", "args":
		case "id":
			if o.ID, e = wantString(v, "id"); e != nil {
				return e
			}
			// A new job's id must be lowercase, as the conformance case L0-ENV-011 checks (the cases
			// are the contract where they and ojs-json-format.md 6.2, which would accept uppercase,
			// disagree); lookups take an existing id in either case (checkJobID).
			if !validID(o.ID) {
				return invalid("id", "id %q: must be a UUIDv7 in lowercase 8-4-4-4-12 form, or absent", o.ID)
			}
		case "specversion":
			s, e := wantString(v, "specversion")
			if e != nil {
				return e
			}
			if !specVersion10(s) {
				return invalid("specversion", "specversion %q: this server speaks OJS 1.0 (send \"1.0\", or a 1.0.x version such as \"1.0.0\" or \"1.0.0-rc.1\")", s)
			}
		case "meta":
			if isNull(v) {
				continue
			}
			if e := checkMeta(v, "meta"); e != nil {
				return e
			}
			meta = v
		case "options":
			if isNull(v) {
				continue
			}
			opts, e = decodeObject(v, "options")
			if e != nil {
				e.details = map[string]any{"field": "options"}
				return e
			}
			if e := applyOptions(req, opts, now); e != nil {
				return e
			}
		case "queue", "priority", "scheduled_at", "expires_at", "retry", "tags", "unique":
			topOpts = append(topOpts, mb)
		case "timeout":
			secs, e := wantInt(v, "timeout", 0, math.MaxInt32)
			if e != nil {
				return e
			}
			if o.Timeout == 0 {
				o.Timeout = time.Duration(secs) * time.Second
			}
		case "visibility_timeout":
			// The OJS envelope's reservation period, in whole seconds (ojs-json-format.md 3), bounded
			// as options' forms are; options.visibility_timeout_ms and options.visibility_timeout win.
			secs, e := wantInt(v, "visibility_timeout", 1, int64(MaxVisibilityTimeout/time.Second))
			if e != nil {
				return e
			}
			if req.ext.VisibilityMS == 0 {
				req.ext.VisibilityMS = secs * 1000
			}
		default:
			if systemKeys[k] {
				continue
			}
			if req.ext.Unknown == nil {
				req.ext.Unknown = map[string]json.RawMessage{}
			}
			req.ext.Unknown[k] = v
		}
	}
	// Envelope-level options apply where options did not say otherwise.
	if topOpts != nil {
		var apply object
		for _, mb := range topOpts {
			if !optionSet(req, opts, mb.key) {
				apply = append(apply, mb)
			}
		}
		if e := applyOptions(req, apply, now); e != nil {
			return e
		}
	}
	if !validQueue(queueOr(o.Queue)) {
		return invalid("queue", "queue %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", o.Queue)
	}
	if len(req.metadata) > 0 || !req.ext.empty() {
		merged, e := mergeMeta(meta, req.metadata, req.ext)
		if e != nil {
			return e
		}
		meta = merged
	}
	req.job.Meta = meta
	if req.rateKeyFromQueue {
		o.RateKey = "queue:" + queueOr(o.Queue)
	}
	if o.Unique != nil {
		e := checkUniqueKeys(o.Unique, req.job.Args, meta, "options.unique")
		if e != nil && req.uniqueKeyDims != nil {
			o.Unique, e = uniqueKeyAsDimensions(o.Unique, req.uniqueKeyDims, "options.unique")
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// codeMetadataTooLarge is the code of a meta over the size limit (the error catalog's
// METADATA_TOO_LARGE, spelled as this API spells payload_too_large).
const codeMetadataTooLarge = "metadata_too_large"

// checkMeta refuses a meta that is not an object, that is over pronto.DefaultMaxMetaBytes
// serialized (413, ojs-payload-limits.md §4.3), that uses the reserved key, or whose top-level keys
// or string values could inject a header downstream (ojs-security.md §8.3): a key outside
// pronto.MetaKeyRule, a value holding CR or LF. Nested members are data, not header material.
func checkMeta(raw json.RawMessage, field string) *apiError {
	if k := jsonKind(raw); k != "object" {
		return invalid(field, "%s must be a JSON object, not %s", field, k)
	}
	if e := checkMetaSize(raw, field); e != nil {
		return e
	}
	m, ok := splitObject(raw)
	if !ok {
		return invalid(field, "%s must be a JSON object", field)
	}
	for _, mb := range m {
		if e := checkMetaMember(mb, field); e != nil {
			return e
		}
	}
	return nil
}

// checkMetaMember checks one top-level member of a meta object. The key is compared decoded, so an
// escape ("\u005fpronto") does not hide the reserved key.
func checkMetaMember(mb member, field string) *apiError {
	name := field + "." + mb.key
	if mb.key == extKey {
		return invalid(name, "meta key %q is reserved by pronto", extKey)
	}
	if !pronto.ValidMetaKey(mb.key) {
		return invalid(name, "meta key %q: must be %s", mb.key, pronto.MetaKeyRule)
	}
	// A raw JSON string cannot hold a line break unescaped: only one with an escape can decode to one.
	if jsonKind(mb.val) == "string" && bytes.IndexByte(mb.val, '\\') >= 0 {
		if v, _ := rawString(mb.val); strings.ContainsAny(v, "\r\n") {
			return invalid(name, "%s must not contain a carriage return or line feed", name)
		}
	}
	return nil
}

// checkMetaSize answers a meta over the limit with metaTooLarge's 413.
func checkMetaSize(raw json.RawMessage, field string) *apiError {
	var tl *pronto.MetaTooLargeError
	if !errors.As(pronto.CheckMetaSize(raw, pronto.DefaultMaxMetaBytes), &tl) {
		return nil
	}
	return metaTooLarge(field, tl)
}

// mergeMeta adds options.meta and options.metadata (under meta's own keys) and pronto's ext to a
// meta object.
func mergeMeta(meta json.RawMessage, metadata map[string]json.RawMessage, ext ojsExt) (json.RawMessage, *apiError) {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, invalid("meta", "meta must be a JSON object")
		}
	}
	for k, v := range metadata {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	if len(meta) > 0 && len(metadata) > 0 {
		// Each was checked alone; the stored meta is both, so the limit applies to the sum too.
		if b, err := json.Marshal(m); err == nil {
			if e := checkMetaSize(b, "meta"); e != nil {
				return nil, e
			}
		}
	}
	if !ext.empty() {
		b, err := json.Marshal(&ext)
		if err != nil {
			return nil, invalid("", "the job's options do not encode: %v", err)
		}
		m[extKey] = b
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, invalid("meta", "meta does not encode: %v", err)
	}
	return out, nil
}

// optionSet reports whether options already set the option named k.
func optionSet(req *enqueueRequest, opts object, k string) bool {
	o := &req.job.Opts
	switch k {
	case "queue":
		return o.Queue != ""
	case "priority":
		// 0 is a priority like any other: whether options gave one is in the request.
		v, ok := opts.get("priority")
		return ok && !isNull(v)
	case "scheduled_at":
		return req.dueSet
	case "expires_at":
		return !o.ExpiresAt.IsZero()
	case "retry":
		return o.RetryPolicy != nil
	case "tags":
		return o.Tags != nil
	case "unique":
		return o.Unique != nil
	}
	return false
}

func queueOr(q string) string {
	if q == "" {
		return pronto.DefaultQueue
	}
	return q
}

// decodeMetaMap reads a meta object into a map, keeping numbers exact (for cron templates, whose
// options carry meta as a map).
func decodeMetaMap(raw json.RawMessage) (map[string]any, *apiError) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, invalid("meta", "meta must be a JSON object")
	}
	return m, nil
}

// applyOptions reads the members of an options object into req.
func applyOptions(req *enqueueRequest, opts object, now time.Time) *apiError {
	o := &req.job.Opts
	var e *apiError
	var (
		delayUntil time.Time
		delayFor   time.Duration
		delayGiven bool
	)
	var optMeta, optMetadata map[string]json.RawMessage
	for _, mb := range opts {
		k, v := mb.key, mb.val
		if isNull(v) {
			continue
		}
		field := "options." + k
		switch k {
		case "queue":
			if o.Queue, e = wantString(v, field); e != nil {
				return e
			}
			if !validQueue(o.Queue) {
				return invalid(field, "queue %q: must match [a-z0-9][a-z0-9.-]* (at most 128 characters)", o.Queue)
			}
		case "priority":
			p, e := wantPriority(v, field)
			if e != nil {
				return e
			}
			o.Priority = p
		case "timeout_ms":
			ms, e := wantInt(v, field, 0, math.MaxInt64/int64(time.Millisecond))
			if e != nil {
				return e
			}
			o.Timeout = time.Duration(ms) * time.Millisecond
		case "timeout":
			// Whole seconds, as ojs-cron.md 2.1 and 8.1 give a cron job's options (the same options as
			// an enqueue's); options.timeout_ms, finer, wins. It was dropped without a word.
			secs, e := wantInt(v, field, 0, math.MaxInt32)
			if e != nil {
				return e
			}
			if ms, ok := opts.get("timeout_ms"); !ok || isNull(ms) { // a null timeout_ms is absent
				o.Timeout = time.Duration(secs) * time.Second
			}
		case "visibility_timeout_ms":
			ms, e := wantInt(v, field, 1, MaxVisibilityTimeout.Milliseconds())
			if e != nil {
				return e
			}
			req.ext.VisibilityMS = ms
		case "visibility_timeout":
			// An ISO 8601 duration, as the OpenAPI document allows; visibility_timeout_ms wins.
			str, e := wantString(v, field)
			if e != nil {
				return e
			}
			d, err := isodur.Parse(str)
			if err != nil || d < time.Millisecond || d > MaxVisibilityTimeout {
				return invalid(field, "%s %q must be an ISO 8601 duration from 1 ms to 7 days, such as \"PT30S\"", field, str)
			}
			if _, ok := opts.get("visibility_timeout_ms"); !ok {
				req.ext.VisibilityMS = d.Milliseconds()
			}
		case "scheduled_at":
			if o.ScheduledAt, o.Delay, _, e = wantDue(v, field); e != nil {
				return e
			}
			req.dueSet = true
		case "delay_until":
			if delayUntil, delayFor, _, e = wantDue(v, field); e != nil {
				return e
			}
			delayGiven = true
		case "expires_at":
			if o.ExpiresAt, e = wantTime(v, field, now); e != nil {
				return e
			}
			if !o.ExpiresAt.After(now) {
				return invalid(field, "expires_at %s is already past", formatTime(o.ExpiresAt))
			}
		case "retry", "retry_policy":
			if _, ok := opts.get("retry"); ok && k == "retry_policy" {
				continue // retry wins over its alias
			}
			p, onExhaustion, e := decodeRetry(v)
			if e != nil {
				return e
			}
			o.RetryPolicy = p
			o.MaxAttempts = p.MaxAttempts
			req.ext.OnExhaustion = onExhaustion
		case "tags":
			if o.Tags, e = wantStrings(v, field); e != nil {
				return e
			}
		case "pending":
			if o.Pending, e = wantBool(v, field); e != nil {
				return e
			}
		case "meta", "metadata":
			// options.meta (ojs-cron.md 2.2 lists it among a cron job's options, which are an
			// enqueue's) and the OpenAPI document's options.metadata: merged into meta.
			if e := checkMeta(v, field); e != nil {
				return e
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(v, &m); err != nil {
				return invalid(field, "%s must be a JSON object", field)
			}
			if k == "meta" {
				optMeta = m
			} else {
				optMetadata = m
			}
		case "unique":
			if o.Unique, req.uniqueKeyDims, e = decodeUnique(v, field); e != nil {
				return e
			}
		case "rate_limit":
			spec, e := decodeRateLimit(v, field, false)
			if e != nil {
				return e
			}
			if spec.key == "" && !spec.bounds {
				return invalid(field, "%s sets nothing: give a key (to follow the limit stored under it), bounds (concurrency, rate, max_per_second), or both", field)
			}
			o.RateKey, o.RateLimit = spec.key, nil
			if spec.bounds {
				l := spec.limit
				o.RateLimit = &l
			}
			req.rateKeyFromQueue = spec.key == ""
		}
	}
	if !req.dueSet && delayGiven {
		o.ScheduledAt, o.Delay, req.dueSet = delayUntil, delayFor, true
	}
	switch {
	case optMeta != nil && optMetadata != nil:
		for k, v := range optMeta {
			optMetadata[k] = v
		}
		// Each was checked alone; the job's meta holds both.
		if b, err := json.Marshal(optMetadata); err == nil {
			if e := checkMetaSize(b, "options.meta"); e != nil {
				return e
			}
		}
		req.metadata = optMetadata
	case optMeta != nil:
		req.metadata = optMeta
	case optMetadata != nil:
		req.metadata = optMetadata
	}
	return nil
}

// retryMembers are the members a retry policy may have: OJS's (ojs-retry.md 14), the OpenAPI
// RetryPolicy's backoff_type and its alias backoff_strategy, and the millisecond forms of the
// intervals.
var retryMembers = map[string]bool{
	"max_attempts": true, "initial_interval": true, "backoff_coefficient": true, "max_interval": true,
	"jitter": true, "non_retryable_errors": true, "on_exhaustion": true, "backoff_type": true,
	"backoff_strategy": true, "initial_interval_ms": true, "max_interval_ms": true,
}

// decodeRetry reads an OJS retry policy. Every problem with it is a 422 naming the field.
func decodeRetry(raw json.RawMessage) (*pronto.RetryPolicy, string, *apiError) {
	m, e := decodeObject(raw, "retry policy")
	if e != nil {
		e.status = 422
		e.details = map[string]any{"field": "options.retry"}
		return nil, "", e
	}
	p := &pronto.RetryPolicy{}
	onExhaustion := ""
	strategyFrom := "" // the member that set p.Strategy, to catch its alias disagreeing
	fail := func(e *apiError) (*pronto.RetryPolicy, string, *apiError) {
		e.status = 422
		return nil, "", e
	}
	maxDur := int64(math.MaxInt64 / int64(time.Millisecond))
	for _, mb := range m {
		k, v := mb.key, mb.val
		field := "retry." + k
		if !retryMembers[k] {
			// OJS 14 allows no other member, null or not: a typo ("max_retries") silently dropped
			// would run the job under a policy nobody asked for.
			return fail(unprocessable(field, "%s is not a field of a retry policy (max_attempts, initial_interval, backoff_coefficient, max_interval, jitter, non_retryable_errors, on_exhaustion, backoff_type or its alias backoff_strategy; or initial_interval_ms and max_interval_ms)", field))
		}
		if isNull(v) {
			continue
		}
		switch k {
		case "max_attempts":
			n, e := wantInt(v, field, 0, math.MaxInt32)
			if e != nil {
				e.message = "retry.max_attempts must be a non-negative integer, got " + strings.TrimSpace(string(v))
				return fail(e)
			}
			if n == 0 {
				n = 1 // OJS: 0 means no retry at all, which is one attempt
			}
			p.MaxAttempts = int(n)
		case "initial_interval", "max_interval":
			s, e := wantString(v, field)
			if e != nil {
				return fail(e)
			}
			d, err := isodur.Parse(s)
			if err != nil || d <= 0 {
				return fail(unprocessable(field, "%s %q must be a positive ISO 8601 duration such as \"PT1S\"", field, s))
			}
			if k == "initial_interval" {
				p.InitialInterval = d
			} else {
				p.MaxInterval = d
			}
		case "initial_interval_ms", "max_interval_ms":
			ms, e := wantInt(v, field, 1, maxDur)
			if e != nil {
				return fail(e)
			}
			if k == "initial_interval_ms" {
				p.InitialInterval = time.Duration(ms) * time.Millisecond
			} else {
				p.MaxInterval = time.Duration(ms) * time.Millisecond
			}
		case "backoff_coefficient":
			var f float64
			if jsonKind(v) != "number" || json.Unmarshal(v, &f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fail(unprocessable(field, "retry.backoff_coefficient must be a number of at least 1"))
			}
			if f < 1 {
				return fail(unprocessable(field, "retry.backoff_coefficient must be at least 1, got %g", f))
			}
			p.BackoffCoefficient = f
		case "jitter":
			j, e := wantBool(v, field)
			if e != nil {
				return fail(e)
			}
			p.NoJitter = !j
		case "non_retryable_errors":
			s, e := wantStrings(v, field)
			if e != nil {
				return fail(e)
			}
			p.NonRetryableErrors = s
		case "on_exhaustion":
			s, e := wantString(v, field)
			if e != nil {
				return fail(e)
			}
			if s != "discard" && s != "dead_letter" {
				return fail(unprocessable(field, "retry.on_exhaustion %q must be \"discard\" or \"dead_letter\"", s))
			}
			onExhaustion = s
		case "backoff_type", "backoff_strategy":
			st, e := decodeBackoff(v, field)
			if e != nil {
				return fail(e)
			}
			if strategyFrom != "" && st != p.Strategy {
				return fail(unprocessable(field, "%s %s disagrees with retry.%s %s: they are aliases, send one", field, st, strategyFrom, p.Strategy))
			}
			p.Strategy, strategyFrom = st, k
		}
	}
	if p.InitialInterval > 0 && p.MaxInterval > 0 && p.MaxInterval < p.InitialInterval {
		return fail(unprocessable("retry.max_interval", "retry.max_interval must not be shorter than retry.initial_interval"))
	}
	if err := p.Validate(); err != nil {
		return fail(unprocessable("options.retry", "%s", trimPrefix(err.Error())))
	}
	return p, onExhaustion, nil
}

// decodeBackoff reads a retry policy's backoff_type or backoff_strategy; "none" is constant.
func decodeBackoff(v json.RawMessage, field string) (pronto.BackoffStrategy, *apiError) {
	s, e := wantString(v, field)
	if e != nil {
		return "", e
	}
	switch s {
	case "exponential", "linear", "polynomial", "constant":
		return pronto.BackoffStrategy(s), nil
	case "none":
		return pronto.BackoffConstant, nil
	}
	return "", unprocessable(field, "%s %q must be exponential, linear, polynomial, constant or none", field, s)
}

// jobEnvelopes reads the jobs member of a batch or bulk request: a non-empty array of job
// envelopes, returned undecoded. The caller bounds its length.
func jobEnvelopes(m object) ([]json.RawMessage, *apiError) {
	raw, ok := m.get("jobs")
	if !ok || jsonKind(raw) != "array" {
		return nil, invalid("jobs", "jobs is required: an array of job envelopes")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, invalid("jobs", "jobs must be an array of job envelopes")
	}
	if len(elems) == 0 {
		return nil, invalid("jobs", "jobs is empty")
	}
	return elems, nil
}

// decodeBatch reads {"jobs": [envelope, ...]}.
func decodeBatch(body []byte, now time.Time, maxJobs int) ([]*enqueueRequest, *apiError) {
	top, e := decodeObject(body, "batch")
	if e != nil {
		return nil, e
	}
	elems, e := jobEnvelopes(top)
	if e != nil {
		return nil, e
	}
	if len(elems) > maxJobs {
		return nil, invalid("jobs", "a batch holds at most %d jobs, got %d", maxJobs, len(elems))
	}
	out := make([]*enqueueRequest, len(elems))
	for i, el := range elems {
		req, e := decodeJob(el, now)
		if e != nil {
			e.message = "job " + strconv.Itoa(i) + ": " + e.message
			if e.details == nil {
				e.details = map[string]any{}
			}
			e.details["index"] = i
			return nil, e
		}
		out[i] = req
	}
	return out, nil
}
