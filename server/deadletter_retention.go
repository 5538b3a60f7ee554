package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
)

// Dead-letter retention per queue (ojs-dead-letter.md 5.3): the queues whose discarded jobs have
// bounds of their own, kept in the store's settings (pronto.Client.DeadLetterRetentionsSet) and
// applied by the maintenance leader's cleanup; the other queues share the client's bounds.
// deadLetterRetention is the body of GET and PUT /ojs/v1/dead-letter/retention: the queues whose
// dead-letter jobs have bounds of their own (ojs-dead-letter.md 5.3), with the spec's field names.
type deadLetterRetention struct {
	Queues map[string]retentionBounds `json:"queues"`
}

type retentionBounds struct {
	MaxAge        string `json:"max_age,omitempty"`
	MaxCount      int    `json:"max_count,omitempty"`
	PruningPolicy string `json:"pruning_policy,omitempty"` // ojs-dead-letter.md 8.2
}

// deadLetterRetentionRoute serves /ojs/v1/dead-letter/retention (and its admin twin).
func (s *Server) deadLetterRetentionRoute(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.writeDeadLetterRetention(w, r)
	case http.MethodPut:
		rs, ok := readRequest(s, w, r, "dead-letter retention", decodeDeadLetterRetention)
		if !ok {
			return
		}
		if err := s.client.DeadLetterRetentionsSet(r.Context(), rs); err != nil {
			s.writeError(w, r, fromClientError(err, "dead-letter retention", ""))
			return
		}
		s.writeDeadLetterRetention(w, r) // what is stored now
	default:
		s.writeError(w, r, methodNotAllowed(r, "GET", "PUT"))
	}
}

// writeDeadLetterRetention answers the stored retentions.
func (s *Server) writeDeadLetterRetention(w http.ResponseWriter, r *http.Request) {
	rs, err := s.client.DeadLetterRetentions(r.Context())
	if err != nil {
		s.writeError(w, r, fromClientError(err, "dead-letter retention", ""))
		return
	}
	out := deadLetterRetention{Queues: make(map[string]retentionBounds, len(rs))}
	for q, b := range rs {
		rb := retentionBounds{MaxCount: b.MaxCount, PruningPolicy: string(b.PruningPolicy)}
		if b.MaxAge > 0 {
			rb.MaxAge = isodur.Format(b.MaxAge)
		}
		out.Queues[q] = rb
	}
	writeJSONValue(w, http.StatusOK, out)
}

// decodeDeadLetterRetention reads a PUT body: {"queues": {"name": {"max_age", "max_count",
// "pruning_policy"}}}, every field known, each queue with at least one bound. Whether this server
// can apply an archive policy is the client's check (DeadLetterRetentionsSet).
func decodeDeadLetterRetention(body []byte) (map[string]pronto.DeadLetterRetention, *apiError) {
	var in struct {
		Queues *map[string]json.RawMessage `json:"queues"`
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return nil, invalid("", "dead-letter retention: %v (send {\"queues\": {\"billing\": {\"max_age\": \"P365D\", \"max_count\": 50000}}})", err)
	}
	if in.Queues == nil {
		return nil, invalid("queues", "queues is required (an empty object returns every queue to the server's bounds)")
	}
	out := make(map[string]pronto.DeadLetterRetention, len(*in.Queues))
	for q, raw := range *in.Queues {
		field := "queues." + q
		if e := checkQueueName(q); e != nil {
			return nil, invalid(field, "%s: %s", field, e.message)
		}
		var b retentionBounds
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&b); err != nil {
			return nil, invalid(field, "%s: %v", field, err)
		}
		var r pronto.DeadLetterRetention
		if b.MaxAge != "" {
			age, err := isodur.Parse(b.MaxAge)
			if err != nil || age <= 0 {
				return nil, invalid(field+".max_age", "%s.max_age %q: not a positive ISO 8601 duration (such as P365D)", field, b.MaxAge)
			}
			r.MaxAge = age
		}
		if b.MaxCount < 0 {
			return nil, invalid(field+".max_count", "%s.max_count: cannot be negative", field)
		}
		r.MaxCount = b.MaxCount
		switch p := pronto.PruningPolicy(b.PruningPolicy); p {
		case "", pronto.PruneDelete, pronto.PruneArchive:
			r.PruningPolicy = p
		default:
			return nil, invalid(field+".pruning_policy", "%s.pruning_policy %q: must be \"delete\" or \"archive\"", field, b.PruningPolicy)
		}
		if r.MaxAge == 0 && r.MaxCount == 0 {
			return nil, invalid(field, "%s: max_age or max_count is required (a dead letter queue stays bounded)", field)
		}
		out[q] = r
	}
	return out, nil
}
