package server

import (
	"net/http"
	"strconv"
)

// decodeJobPatch reads the body of PATCH /ojs/v1/jobs/{id}: {"priority": N or "high"/"normal"/"low"}.
// Priority is the one member a job can change after enqueue; any other is refused by name, not
// ignored, so a client that meant to change something else learns that it did not.
func decodeJobPatch(body []byte) (int, *apiError) {
	var buf [4]member
	o, e := decodeBodyInto(buf[:0], body, "job update")
	if e != nil {
		return 0, e
	}
	for _, m := range o {
		if m.key != "priority" {
			return 0, invalid(m.key, "job update: unknown member %q: only \"priority\" can be changed after enqueue", m.key)
		}
	}
	v, ok := o.get("priority")
	if !ok || isNull(v) {
		return 0, invalid("priority", "a job update needs \"priority\": an integer from -100 to 100 or \"high\", \"normal\", \"low\"")
	}
	return wantPriority(v, "priority")
}

// PATCH /ojs/v1/jobs/{id} (ojs-priority.md 10.2): changes the priority of a job waiting to run
// (available, scheduled or pending), in pronto's convention (-100..100, higher runs first). It
// answers {"id", "priority", "previous_priority", "job"}; 409 for a job in another state (running,
// retryable or finished), 404 for an unknown one.
func (s *Server) patchJob(w http.ResponseWriter, r *http.Request, id string) {
	if e := checkJobID(&id, "job id"); e != nil {
		discardBody(r)
		s.writeError(w, r, e)
		return
	}
	priority, ok := readRequest(s, w, r, "job update", decodeJobPatch)
	if !ok {
		return
	}
	j, prev, err := s.client.JobSetPriority(r.Context(), id, priority)
	if err != nil {
		s.writeError(w, r, fromClientError(err, "job", id))
		return
	}
	b := getBuf()
	*b = append(*b, '{')
	*b = appendStringField(*b, "id", j.ID)
	*b = appendIntField(*b, "priority", int64(j.Priority))
	*b = appendIntField(*b, "previous_priority", int64(prev))
	*b = appendKey(*b, "job")
	*b = appendJob(*b, j)
	*b = append(*b, '}')
	writeBuf(w, http.StatusOK, b)
}

// priorityChangedData appends the data of priority.changed (ojs-priority.md 11.1).
func priorityChangedData(prev, now int) func(b []byte) []byte {
	return func(b []byte) []byte {
		b = strconv.AppendInt(appendKey(b, "previous_priority"), int64(prev), 10)
		return strconv.AppendInt(appendKey(b, "new_priority"), int64(now), 10)
	}
}
