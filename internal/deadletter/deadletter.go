// Package deadletter holds the rule that decides which discarded jobs are in the dead letter queue,
// shared by the OJS HTTP server (its dead-letter list, retry, replay, purge and statistics) and the
// dashboard's dead-letter view, so that both show the same jobs.
package deadletter

import (
	"bytes"
	"encoding/json"

	"github.com/pronto-jobs/pronto"
)

// OJS handler response codes that end a job whatever its retry policy says (ojs-retry.md 7.2):
// DISCARD and FAIL discard it, DEAD_LETTER moves it to the dead letter queue. RETRY, like no code,
// leaves the policy to decide.
const (
	CodeDiscard    = "DISCARD"
	CodeFail       = "FAIL"
	CodeDeadLetter = "DEAD_LETTER"
)

// EndsJob reports whether a nack's error code ends the job at once.
func EndsJob(code string) bool {
	return code == CodeDiscard || code == CodeFail || code == CodeDeadLetter
}

// extKey is the meta key under which the OJS server keeps what a store has no column for; its
// member "oe" is the retry policy's on_exhaustion (server/envelope.go, ojsExt).
const extKey = "_pronto"

var extKeyBytes = []byte(`"` + extKey + `"`)

// Is reports whether a discarded job belongs in the dead letter queue: every discarded job does,
// except those whose OJS retry policy asked on_exhaustion "discard", unless the handler's response
// code decided otherwise (Verdict).
func Is(j *pronto.JobRow) bool {
	if j.State != pronto.StateDiscarded {
		return false
	}
	switch Verdict(j) {
	case CodeDeadLetter:
		return true
	case CodeDiscard, CodeFail:
		return false
	}
	return onExhaustion(j.Meta) != "discard"
}

// onExhaustion reads the retry policy's on_exhaustion the server kept in meta ("" when none).
func onExhaustion(meta json.RawMessage) string {
	if len(meta) == 0 || !bytes.Contains(meta, extKeyBytes) {
		return ""
	}
	var m struct {
		Ext *struct {
			OnExhaustion string `json:"oe"`
		} `json:"_pronto"`
	}
	if json.Unmarshal(meta, &m) != nil || m.Ext == nil {
		return ""
	}
	return m.Ext.OnExhaustion
}

// Verdict returns the response code (DISCARD, FAIL or DEAD_LETTER) of the failure that discarded j,
// or "". It is read from the error entry the nack stored, the error object the worker sent, so that
// every store decides alike without a column of its own: only the last entry counts, and only when
// it is of the job's current attempt and was not retryable, so that a job retried by an operator
// since (its attempts reset) and discarded again otherwise is not judged by it.
func Verdict(j *pronto.JobRow) string {
	n := len(j.Errors)
	if n == 0 {
		return ""
	}
	ae := &j.Errors[n-1]
	if ae.Attempt != j.Attempt || ae.Retryable == nil || *ae.Retryable || len(ae.Details) == 0 || ae.Details[0] != '{' {
		return ""
	}
	var sent struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(ae.Details, &sent) != nil || !EndsJob(sent.Code) {
		return ""
	}
	return sent.Code
}
