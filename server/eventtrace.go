package server

import (
	"bytes"
	"encoding/json"
	"strings"
)

// traceKeyPrefix starts both meta keys traceID reads; a meta without it is skipped unparsed.
var traceKeyPrefix = []byte(`"trace`)

// traceID returns the trace id that every event of a job carries as trace_id (ojs-events.md 8.1,
// 8.3): meta.trace_id when it is a non-empty string, else the trace id of a valid W3C
// meta.traceparent (8.2: either alone is honoured), else "". A job without either costs no
// allocation.
func traceID(meta json.RawMessage) string {
	if !bytes.Contains(meta, traceKeyPrefix) {
		return ""
	}
	var m struct {
		TraceID     json.RawMessage `json:"trace_id"`
		Traceparent json.RawMessage `json:"traceparent"`
	}
	if json.Unmarshal(meta, &m) != nil {
		return ""
	}
	var id string
	if json.Unmarshal(m.TraceID, &id) == nil && id != "" {
		return id
	}
	var tp string
	if json.Unmarshal(m.Traceparent, &tp) != nil {
		return ""
	}
	return traceparentID(tp)
}

// traceparentID returns the trace id of a W3C traceparent ("00-<trace id>-<span id>-<flags>"), or ""
// when it is malformed: as the W3C propagator reads it, version 00 has exactly four fields, a later
// version at least four, and an all-zero trace or span id is invalid.
func traceparentID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) < 4 || !lowerHex(parts[0], 2) || parts[0] == "ff" || (parts[0] == "00" && len(parts) != 4) ||
		!lowerHex(parts[1], 32) || !lowerHex(parts[2], 16) || !lowerHex(parts[3], 2) ||
		strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return ""
	}
	return parts[1]
}

// lowerHex reports whether s is n lowercase hex digits.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
