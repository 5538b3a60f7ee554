package server

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pronto-jobs/pronto"
)

// The OJS representation of a stored job, written without reflection.

var extKeyBytes = []byte(`"` + extKey + `"`)

// splitMeta separates pronto's ext from a stored meta object. The returned meta is nil when nothing
// remains; ext is nil when there was none.
func splitMeta(meta json.RawMessage) (json.RawMessage, *ojsExt) {
	if len(meta) == 0 || string(meta) == "null" {
		return nil, nil
	}
	if !bytes.Contains(meta, extKeyBytes) {
		return meta, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(meta, &m); err != nil {
		return meta, nil
	}
	raw, ok := m[extKey]
	if !ok {
		return meta, nil
	}
	ext := &ojsExt{}
	if err := json.Unmarshal(raw, ext); err != nil {
		ext = nil
	}
	delete(m, extKey)
	if len(m) == 0 {
		return nil, ext
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, ext
	}
	return out, ext
}

// metaWithTenant returns meta carrying the job's tenant as meta.tenant_id, where OJS multi-tenancy
// (§3) puts it: a job inserted through Go names its tenant in JobRow.Tenant only. A meta with its own
// tenant_id is returned as it is, as is one that is not an object.
func metaWithTenant(meta json.RawMessage, tenant string) json.RawMessage {
	if tenant == "" {
		return meta
	}
	body := bytes.TrimSpace(meta)
	if len(body) > 0 && body[0] != '{' {
		return meta
	}
	if bytes.Contains(meta, tenantIDKey) {
		o, ok := splitObject(meta)
		if !ok {
			return meta
		}
		if _, has := o.get("tenant_id"); has {
			return meta
		}
	}
	out := appendString([]byte(`{"tenant_id":`), tenant)
	if len(body) == 0 {
		return append(out, '}')
	}
	if rest := bytes.TrimSpace(body[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// jobExt returns a job's ext, or nil.
func jobExt(j *pronto.JobRow) *ojsExt {
	_, ext := splitMeta(j.Meta)
	return ext
}

// errorView is one entry of a job's error history as OJS shows it.
func appendAttemptError(b []byte, ae *pronto.AttemptError) []byte {
	b = append(b, '{')
	code, details, backtrace := errorCode(ae)
	b = appendStringField(b, "code", code)
	typ := ae.Type
	if typ == "" {
		typ = code
	}
	b = appendStringField(b, "type", typ)
	b = appendStringField(b, "message", ae.Message)
	retryable := ae.Retryable == nil || *ae.Retryable
	b = appendBoolField(b, "retryable", retryable)
	if jsonKind(details) == "object" { // rows from before nacks were refused other details
		b = appendRawField(b, "details", details)
	}
	switch { // a sent backtrace that is neither an array nor a text is no backtrace: left out
	case jsonKind(backtrace) == "array":
		b = appendRawField(b, "backtrace", backtrace)
	case jsonKind(backtrace) == "string":
		// A worker that sent its trace as one text: shown as frames like a Go trace.
		var text string
		if json.Unmarshal(backtrace, &text) == nil {
			b = appendStrings(appendKey(b, "backtrace"), backtraceFrames(text))
		}
	case ae.Trace != "":
		b = appendStrings(appendKey(b, "backtrace"), backtraceFrames(ae.Trace))
	}
	b = appendIntField(b, "attempt", int64(ae.Attempt))
	if !ae.StartedAt.IsZero() {
		b = appendTimeField(b, "started_at", ae.StartedAt)
	}
	if !ae.At.IsZero() {
		b = appendTimeField(b, "occurred_at", ae.At)
		b = appendTimeField(b, "timestamp", ae.At)
	}
	return append(b, '}')
}

// Bounds of a backtrace made from a trace text: ojs-core §8.1 recommends at most 50 frames and at
// most 10,000 characters in all.
const (
	maxBacktraceFrames = 50
	maxBacktraceChars  = 10000
)

// backtraceFrames splits a trace text into the array of frame strings OJS defines an error's
// backtrace as (ojs-core §8.1): one frame per non-blank line, within the recommended bounds.
func backtraceFrames(trace string) []string {
	frames := []string{}
	budget := maxBacktraceChars
	for line := range strings.Lines(trace) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if len(frames) == maxBacktraceFrames || budget == 0 {
			break
		}
		if n := utf8.RuneCountInString(line); n > budget {
			line = truncateRunes(line, budget)
			budget = 0
		} else {
			budget -= n
		}
		frames = append(frames, line)
	}
	return frames
}

// truncateRunes returns the first n runes of s.
func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// errorCode finds an error entry's OJS code, details and backtrace: from the error object an OJS
// worker sent (kept in Details), else from pronto's own error types.
func errorCode(ae *pronto.AttemptError) (code string, details, backtrace json.RawMessage) {
	if len(ae.Details) > 0 && ae.Details[0] == '{' {
		var sent struct {
			Code      string          `json:"code"`
			Details   json.RawMessage `json:"details"`
			Backtrace json.RawMessage `json:"backtrace"`
		}
		if json.Unmarshal(ae.Details, &sent) == nil {
			code, details, backtrace = sent.Code, sent.Details, sent.Backtrace
			if isNull(details) {
				details = nil
			}
			if isNull(backtrace) {
				backtrace = nil
			}
		}
	}
	if code == "" {
		switch ae.Type {
		case "timeout", "lease_expired":
			code = "timeout"
		case "expired":
			code = "expired"
		case "cancelled":
			code = "cancelled"
		default:
			code = "handler_error"
		}
	}
	return code, details, backtrace
}

// appendJob appends the OJS job object of j.
func appendJob(b []byte, j *pronto.JobRow) []byte {
	meta, ext := splitMeta(j.Meta)
	b = append(b, '{')
	b = appendStringField(b, "specversion", "1.0")
	b = appendStringField(b, "id", j.ID)
	b = appendStringField(b, "type", j.Kind)
	b = appendStringField(b, "queue", j.Queue)
	if len(j.Args) > 0 {
		b = appendRawField(b, "args", j.Args)
	} else {
		b = appendRawField(b, "args", []byte("[]"))
	}
	if meta = metaWithTenant(meta, j.Tenant); meta != nil {
		b = appendRawField(b, "meta", meta)
	}
	b = appendIntField(b, "priority", int64(j.Priority))
	b = appendStringField(b, "state", string(j.State))
	b = appendIntField(b, "attempt", int64(j.Attempt))
	b = appendIntField(b, "max_attempts", int64(j.MaxAttempts))
	if j.Timeout > 0 {
		b = appendIntField(b, "timeout_ms", j.Timeout.Milliseconds())
	}
	if ext != nil && ext.VisibilityMS > 0 {
		b = appendIntField(b, "visibility_timeout_ms", ext.VisibilityMS)
	}
	if len(j.Tags) > 0 {
		b = appendStrings(appendKey(b, "tags"), j.Tags)
	}
	if rp := bytes.TrimSpace(j.RetryPolicy); len(rp) > 0 && string(rp) != "null" {
		b = appendKey(b, "retry")
		if ext != nil && ext.OnExhaustion != "" && len(rp) >= 2 && rp[0] == '{' && rp[len(rp)-1] == '}' {
			b = append(b, rp[:len(rp)-1]...)
			if len(bytes.TrimSpace(rp[1:len(rp)-1])) > 0 {
				b = append(b, ',')
			}
			b = append(b, `"on_exhaustion":`...)
			b = appendString(b, ext.OnExhaustion)
			b = append(b, '}')
		} else {
			b = append(b, rp...)
		}
	}
	b = appendTimeField(b, "created_at", j.CreatedAt)
	// enqueued_at is when the job last entered the available state (ojs-core.md §5.3): its due time
	// (a scheduled job's, a retry's, a snooze's), which a claim leaves as it is, or its creation.
	// Queue wait is then started_at less enqueued_at, for every attempt. A job waiting to enter it
	// (scheduled, retryable, pending) has none.
	switch {
	case j.State == pronto.StateScheduled || j.State == pronto.StatePending || j.State == pronto.StateRetryable:
	case j.ScheduledAt.After(j.CreatedAt):
		b = appendTimeField(b, "enqueued_at", j.ScheduledAt)
	default:
		b = appendTimeField(b, "enqueued_at", j.CreatedAt)
	}
	if (j.State == pronto.StateScheduled || j.State == pronto.StateRetryable) ||
		(j.Attempt == 0 && j.ScheduledAt.After(j.CreatedAt.Add(time.Millisecond))) {
		b = appendTimeField(b, "scheduled_at", j.ScheduledAt)
	}
	if j.State == pronto.StateRetryable {
		b = appendTimeField(b, "next_attempt_at", j.ScheduledAt)
	}
	if !j.ExpiresAt.IsZero() {
		b = appendTimeField(b, "expires_at", j.ExpiresAt)
	}
	if !j.StartedAt.IsZero() {
		b = appendTimeField(b, "started_at", j.StartedAt)
	}
	if !j.CompletedAt.IsZero() {
		switch j.State {
		case pronto.StateCompleted:
			b = appendTimeField(b, "completed_at", j.CompletedAt)
		case pronto.StateDiscarded:
			// A job discarded without ever running (it expired) did not complete anything.
			if j.Attempt > 0 {
				b = appendTimeField(b, "completed_at", j.CompletedAt)
			} else {
				b = appendTimeField(b, "expired_at", j.CompletedAt)
			}
			b = appendTimeField(b, "discarded_at", j.CompletedAt)
		case pronto.StateCancelled:
			b = appendTimeField(b, "cancelled_at", j.CompletedAt)
		}
	}
	if j.State == pronto.StateActive && !j.LeaseExpiresAt.IsZero() {
		b = appendTimeField(b, "visible_until", j.LeaseExpiresAt)
	}
	if d, ok := retryDelay(j); ok {
		b = appendIntField(b, "retry_delay_ms", d.Milliseconds())
	}
	if n := len(j.Errors); n > 0 {
		if j.State != pronto.StateCompleted {
			b = appendAttemptError(appendKey(b, "error"), &j.Errors[n-1])
		}
		b = appendKey(b, "errors")
		b = append(b, '[')
		for i := range j.Errors {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAttemptError(b, &j.Errors[i])
		}
		b = append(b, ']')
	}
	if len(j.Result) > 0 {
		b = appendRawField(b, "result", j.Result)
	}
	if j.Progress != nil {
		b = appendProgress(b, j.Progress, "progress_data")
	}
	if len(j.LastCheckpoint) > 0 {
		b = appendRawField(b, "last_checkpoint", j.LastCheckpoint)
	}
	b = appendJobLinks(b, j)
	if ext != nil && len(ext.Unknown) > 0 {
		keys := make([]string, 0, len(ext.Unknown))
		for k := range ext.Unknown {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if reservedViewKey(k) {
				continue
			}
			b = appendString(append(b, ','), k)
			b = append(b, ':')
			b = append(b, ext.Unknown[k]...)
		}
	}
	return append(b, '}')
}

// reservedViewKey reports keys appendJob writes itself, which a preserved unknown attribute must not
// repeat.
func reservedViewKey(k string) bool {
	switch k {
	case "specversion", "id", "type", "queue", "args", "meta", "priority", "state", "attempt",
		"max_attempts", "timeout_ms", "visibility_timeout_ms", "tags", "retry", "created_at",
		"enqueued_at", "scheduled_at", "next_attempt_at", "expires_at", "expired_at", "started_at",
		"completed_at", "discarded_at", "cancelled_at", "visible_until", "retry_delay_ms", "error",
		"errors", "result", "options", "timeout", "workflow_id", "depends_on", "workflow_callback",
		"parent_results", "unique_key", "rate_limit_key", "deduplicated", "progress", "progress_data",
		"progress_updated_at", "last_checkpoint", "claim_token", "previous_state", "activated_at":
		return true
	}
	return false
}

// retryDelay is the backoff that preceded the job's current attempt (active) or will precede its next
// one (retryable), when the job is in a retry.
func retryDelay(j *pronto.JobRow) (time.Duration, bool) {
	n := len(j.Errors)
	if n == 0 {
		return 0, false
	}
	last := &j.Errors[n-1]
	switch {
	case j.State == pronto.StateRetryable && last.Attempt == j.Attempt:
	case j.State == pronto.StateActive && last.Attempt == j.Attempt-1:
	default:
		return 0, false
	}
	if last.Type == "lease_expired" || last.At.IsZero() || j.ScheduledAt.Before(last.At) {
		return 0, false
	}
	return j.ScheduledAt.Sub(last.At), true
}

// appendJobLinks appends what ties a job to others: its workflow, the workflow jobs it waits for
// (depends_on), the outcome a callback runs on, its parents' results once released, its unique key
// and its rate-limit key.
func appendJobLinks(b []byte, j *pronto.JobRow) []byte {
	if j.WorkflowID != "" {
		b = appendStringField(b, "workflow_id", j.WorkflowID)
	}
	if len(j.ParentIDs) > 0 {
		b = appendStrings(appendKey(b, "depends_on"), j.ParentIDs)
	}
	if j.RunOn != "" {
		b = appendStringField(b, "workflow_callback", "on_"+string(j.RunOn))
	}
	if pr := bytes.TrimSpace(j.ParentResults); len(pr) > 0 && string(pr) != "null" {
		b = appendRawField(b, "parent_results", pr)
	}
	if j.UniqueKey != "" {
		b = appendStringField(b, "unique_key", j.UniqueKey)
	}
	if j.RateKey != "" {
		b = appendStringField(b, "rate_limit_key", j.RateKey)
	}
	return b
}
