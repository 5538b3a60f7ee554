package server

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
)

// Dead-letter additions (ojs-dead-letter.md 6.2, 9, 10, 11.1): one entry's detail, bulk retry by
// filter (error type included), purge on the data plane, and the dead_letter.* events.

// GET /ojs/v1/dead-letter/{id}: a dead-letter job with its full error history; 409 for a job that
// is not in the dead-letter list.
func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request, id string) {
	j, e := s.deadLetterJob(r.Context(), &id)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	s.writeJob(w, http.StatusOK, j, nil)
}

// deadLetterRetryRequest is the body of POST /ojs/v1/dead-letter/retry.
type deadLetterRetryRequest struct {
	Filter *struct {
		Queue     string `json:"queue"`
		Type      string `json:"type"`
		Since     string `json:"since"`
		Until     string `json:"until"`
		ErrorType string `json:"error_type"`
	} `json:"filter"`
	Confirm bool `json:"confirm"`
}

// deadLetterFilterMembers are the members of a dead-letter retry's filter.
var deadLetterFilterMembers = []string{"queue", "type", "since", "until", "error_type"}

// knownMembers refuses (400 naming it, under prefix) a member of the JSON object body that is not
// one of known. A body that is not an object passes: the decoder that follows tells what is wrong.
func knownMembers(body []byte, prefix, what string, known ...string) *apiError {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if slices.Contains(known, k) {
			continue
		}
		field := k
		if prefix != "" {
			field = prefix + "." + k
		}
		return invalid(field, "%s: unknown member %q (known: %s)", what, field, strings.Join(known, ", "))
	}
	return nil
}

// rawMember returns member name of the JSON object body, or nil when absent, null or not an object.
func rawMember(body []byte, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	if v := m[name]; len(v) > 0 && v[0] == '{' {
		return v
	}
	return nil
}

// POST /ojs/v1/dead-letter/retry: retries the dead-letter jobs matching a filter {"queue", "type"
// (exact or a prefix ending in *), "since"/"until" (RFC 3339 bounds on when the job was discarded),
// "error_type" (its last error's type, exact or a prefix ending in *)} with "confirm": true. At most
// adminScanLimit discarded jobs are read ("truncated" says when there were more).
func (s *Server) retryDeadLetterMany(w http.ResponseWriter, r *http.Request) {
	req, ok := readRequest(s, w, r, "dead-letter retry", func(body []byte) (deadLetterRetryRequest, *apiError) {
		var q deadLetterRetryRequest
		// Every member known, in the body and in its filter: a member dropped unread (a typo, or
		// another SDK's name such as "job_type") would leave a filter that matches more dead-letter
		// jobs than the sender meant, up to all of them.
		if e := knownMembers(body, "", "dead-letter retry", "filter", "confirm"); e != nil {
			return q, e
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&q); err != nil {
			return q, invalid("", "dead-letter retry: %v (send {\"filter\": {\"queue\": ..., \"type\": ..., \"error_type\": ...}, \"confirm\": true})", err)
		}
		if raw := rawMember(body, "filter"); raw != nil {
			if e := knownMembers(raw, "filter", "dead-letter retry filter", deadLetterFilterMembers...); e != nil {
				return q, e
			}
		}
		if q.Filter == nil {
			return q, invalid("filter", "a dead-letter retry needs a \"filter\" (an empty one matches every dead-letter job)")
		}
		if !q.Confirm {
			return q, invalid("confirm", "a dead-letter retry by filter needs \"confirm\": true")
		}
		return q, nil
	})
	if !ok {
		return
	}
	f, e := parseFilter(req.Filter.Queue, string(pronto.StateDiscarded), req.Filter.Type)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	var since, until time.Time
	for _, p := range []struct {
		name, v string
		into    *time.Time
	}{{"filter.since", req.Filter.Since, &since}, {"filter.until", req.Filter.Until, &until}} {
		if p.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, p.v)
		if err != nil {
			s.writeError(w, r, invalid(p.name, "%s %q: an RFC 3339 time", p.name, p.v))
			return
		}
		*p.into = t
	}
	errMatch := errorTypeMatcher(req.Filter.ErrorType)
	ctx := r.Context()
	var ids []string
	truncated, err := s.scan(ctx, f, false, func(j *pronto.JobRow) bool {
		if !isDeadLetter(j) {
			return true
		}
		if (!since.IsZero() && j.CompletedAt.Before(since)) || (!until.IsZero() && !j.CompletedAt.Before(until)) {
			return true
		}
		if !errMatch(j) {
			return true
		}
		ids = append(ids, j.ID)
		return true
	})
	if err != nil {
		s.writeError(w, r, fromClientError(err, "dead-letter job", ""))
		return
	}
	succeeded, errs := 0, []map[string]any{}
	var res []pronto.BulkResult
	if len(ids) > 0 {
		res, err = bulkChunked(ctx, ids, s.client.JobRetryMany)
		if err != nil && len(res) == 0 {
			s.writeError(w, r, fromClientError(err, "dead-letter job", ""))
			return
		}
		for _, br := range res {
			if br.Err != nil {
				errs = append(errs, map[string]any{"job_id": br.ID, "error": br.Err.Error()})
				continue
			}
			succeeded++
			if br.Job != nil {
				s.deadLetterEvent("dead_letter.retried", br.Job)
			}
		}
	}
	resp := map[string]any{"action": "retry", "matched": len(ids), "succeeded": succeeded,
		"failed": len(errs), "errors": errs, "truncated": truncated}
	bulkStopped(resp, err, len(ids), len(res))
	writeJSONValue(w, http.StatusOK, resp)
}

// deadLetterEvent records a dead_letter.* event about j (ojs-dead-letter.md 11.1).
func (s *Server) deadLetterEvent(typ string, j *pronto.JobRow) {
	s.jobEvent(typ, j, time.Now(), func(b []byte) []byte {
		if n := len(j.Errors); n > 0 && j.Errors[n-1].Type != "" {
			b = appendStringField(b, "error_type", j.Errors[n-1].Type)
		}
		return appendIntField(b, "attempt", int64(j.Attempt))
	})
}
